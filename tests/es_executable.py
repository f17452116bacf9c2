"""Run an Elasticsearch integ-test-zip the way pytest-elasticsearch runs ``bin/elasticsearch``.

``python tests/es_executable.py VERSION [ARGS...]`` is what the small script ``tests/conftest.py`` hands
the plugin as its ``executable`` calls (one per version). The plugin asks it for ``-Vv`` and then starts
it with ``-p PIDFILE -E http.port=… -E path.data=…``; this replaces itself (``exec``: the plugin's executor
signals the node's own process group) with the project's launcher command (:func:`esnode.command`: the
cached zip unpacked, a JDK that version runs on, an unprivileged uid, the config copied into the node's
folder — the folder of the pid file), adding the launcher's settings the plugin does not pass (single
node, no disk watermarks, wildcard deletes). The node's console goes to ``console.log`` beside the pid
file: the plugin's executor pipes its stdout and never reads it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from hopsearch.cli.local import esnode

#: Where the zips are cached (as ``hopsearch es up`` and the tests' own nodes use it).
CACHE = Path(os.environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache"))) / "hopsearch"


def given_settings(args: list[str]) -> set[str]:
    """Return the keys of the ``-E key=value`` / ``-Ekey=value`` settings among ``args``."""
    keys = set()
    for i, arg in enumerate(args):
        if arg == "-E" and i + 1 < len(args):
            keys.add(args[i + 1].split("=", 1)[0])
        elif arg.startswith("-E") and "=" in arg:
            keys.add(arg[2:].split("=", 1)[0])
    return keys


def main(argv: list[str]) -> int:
    """Exec the node of version ``argv[0]`` with the plugin's arguments ``argv[1:]``."""
    version, args = argv[0], argv[1:]
    if "-p" not in args:  # a question such as -Vv: answered by the distribution itself, then gone
        with tempfile.TemporaryDirectory(prefix="es-version-") as folder:
            spec = esnode.NodeSpec(version=version, port=0, node_dir=Path(folder), cache_dir=CACHE)
            cmd, env = esnode.command(spec, args)
            return subprocess.run(cmd, env=env, check=False).returncode
    pidfile = Path(args[args.index("-p") + 1])
    spec = esnode.NodeSpec(version=version, port=0, node_dir=pidfile.parent, cache_dir=CACHE)
    given = given_settings(args)
    extra = [a for a in esnode._settings_args(spec, 0) if a[2:].split("=", 1)[0] not in given]
    cmd, env = esnode.command(spec, [*args, *extra])
    console = os.open(spec.log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(console, 1)
    os.dup2(console, 2)
    os.execvpe(cmd[0], cmd, env)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
