"""The JDK a local node runs on follows the Elasticsearch major: 9.x needs Java 21+, 7.17 and 8.x take
the oldest fitting one (real JDK folder layouts in a temporary /usr/lib/jvm)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hopsearch.cli.local.esnode import find_java, java_major
from hopsearch.service.errors import NodeError


def jdk(jvm: Path, name: str, version: str | None) -> Path:
    home = jvm / name
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "java").write_text("#!/bin/sh\n")
    if version is not None:
        (home / "release").write_text(f'IMPLEMENTOR="X"\nJAVA_VERSION="{version}"\n')
    return home


def test_the_es_major_picks_the_oldest_fitting_jdk(tmp_path: Path) -> None:
    jvm = tmp_path / "jvm"
    j17 = jdk(jvm, "java-17-openjdk-amd64", "17.0.15")
    j25 = jdk(jvm, "temurin-25-jdk-amd64", "25.0.3")
    jdk(jvm, "java-11-openjdk-amd64", "11.0.2")
    (jvm / "java-1.17.0-openjdk-amd64").symlink_to(j17)
    assert find_java(None, "7.17.29", jvm) == jvm / "java-11-openjdk-amd64"
    assert find_java(None, "8.19.21", jvm) == j17
    assert find_java(None, "9.2.4", jvm) == j25
    assert find_java(tmp_path / "mine", "9.2.4", jvm) == tmp_path / "mine"  # HOPSEARCH_JAVA_HOME wins


def test_a_missing_new_enough_jdk_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jvm = tmp_path / "jvm"
    old = jdk(jvm, "java-17-openjdk-amd64", "17.0.15")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "java").symlink_to(old / "bin" / "java")
    (old / "bin" / "java").chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path / "bin") + os.pathsep + "/usr/bin")  # java on PATH is 17 too
    with pytest.raises(NodeError, match=r"no Java 21\+ found for Elasticsearch 9\.2\.4"):
        find_java(None, "9.2.4", jvm)


def test_java_major_reads_the_release_file_or_the_name(tmp_path: Path) -> None:
    assert java_major(jdk(tmp_path, "a", "1.8.0_402")) == 8
    assert java_major(jdk(tmp_path, "b", "21.0.4")) == 21
    assert java_major(jdk(tmp_path, "java-21-openjdk-amd64", None)) == 21
    assert java_major(jdk(tmp_path, "somejdk", None)) is None
