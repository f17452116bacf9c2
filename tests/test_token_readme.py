"""The README's end-user token example run as written (issue 42 item 4): its shell blocks (``openssl``,
``hopsearch keys create``, the rotation's ``keys add-public-key``/``remove-public-key``) through bash with
this virtualenv's ``hopsearch``, its Python block through ``exec`` in the folder the keys were made in,
against a real ``uvicorn`` over Elasticsearch 8.19. The one change: the README's service address
(``http://search:9280/hopsearch-passages``) is this test's server and index. Then a rotation: two public
keys valid at once, the removed one refused, and traces owned by the API key, not by the public key."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest

from hopsearch.loaders.api import load_jsonl
from hopsearch.loaders.model import LoadOptions
from hopsearch.service.api import create_app
from hopsearch.service.app.runtime import Runtime
from tests.api_fixtures import API_KEY, any_strategy_model, api_settings, uvicorn_serving_async
from tests.conftest import EsNode
from tests.llm_fixtures import server_for
from tests.permissions_corpus import write_corpus

README = Path(__file__).resolve().parents[1] / "README.md"
SECTION = "## End-user tokens and groups"
#: The README's service address and index, replaced by this test's.
README_BASE = "http://search:9280/hopsearch-passages"
ROWS = [
    {"_id": "leave-hr", "title": "Leave policy", "text": "The leave policy: 25 days a year.", "acl": "group:hr"},
    {"_id": "leave-board", "title": "Board leave policy", "text": "The board's leave policy.", "acl": "group:board"},
]


def readme_blocks(language: str) -> list[str]:
    """The ``language`` code blocks of the README's end-user token section, in order."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index(SECTION) + len(SECTION) :]
    section = section[: section.index("\n## ")]
    blocks, fence = [], f"```{language}\n"
    while fence in section:
        start = section.index(fence) + len(fence)
        end = section.index("```", start)
        blocks.append(section[start:end])
        section = section[end + 3 :]
    return blocks


def bash(script: str, cwd: Path, env: dict[str, str]) -> str:
    """``script`` run by bash (stopping at the first failing command); its output."""
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, f"{script}\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def cli_env(es_url: str, prefix: str, state: Path) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if not name.startswith("HOPSEARCH_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env | {"HOPSEARCH_ES_URL": es_url, "HOPSEARCH_INDEX_PREFIX": prefix, "HOPSEARCH_STATE_DIR": str(state)}


def run_python_block(code: str, base: str, folder: Path) -> dict[str, Any]:
    """The README's Python block run in ``folder`` (where ``backend.pem`` is), its names afterwards."""
    assert code.count(README_BASE) == 1
    defined: dict[str, Any] = {}
    here = Path.cwd()
    os.chdir(folder)
    try:
        exec(compile(code.replace(README_BASE, base), "README.md", "exec"), defined)
    finally:
        os.chdir(here)
    return defined


def signed(folder: Path, private_file: str, kid: str, sub: str = "alice") -> dict[str, str]:
    """A token as the README's ``token_for`` makes it, with another private key file and ``kid``."""
    now = int(time.time())
    claims = {"sub": sub, "principals": ["group:staff", "group:hr"], "iat": now, "exp": now + 300}
    token = jwt.encode(claims, (folder / private_file).read_text(), algorithm="EdDSA", headers={"kid": kid})
    return {"Authorization": f"Bearer {token}"}


async def test_the_readme_token_example_and_rotation_run_as_written(es8_node: EsNode, tmp_path: Path) -> None:
    create, rotate = readme_blocks("bash")[:2]
    [python] = readme_blocks("python")
    prefix = f"tr{uuid.uuid4().hex[:10]}"
    env = cli_env(es8_node.url, prefix, tmp_path)
    with server_for("vllm", any_strategy_model) as llm:
        settings = api_settings(es8_node.url, llm, index_prefix=prefix, api_key_cache_s=0)
        async with await Runtime.open(settings) as runtime:
            try:
                loaded = await load_jsonl(runtime.store, write_corpus(tmp_path, ROWS), LoadOptions(batch_size=10))
                assert loaded.reconciled and loaded.rejected == 0, loaded
                created = await asyncio.to_thread(bash, create, tmp_path, env)
                async with uvicorn_serving_async(create_app(settings)) as url:
                    base = f"{url}/{settings.passages_alias}"
                    defined = await asyncio.to_thread(run_python_block, python, base, tmp_path)
                    await check_rotation(rotate, env, base, url, tmp_path)
                table = await asyncio.to_thread(bash, "hopsearch keys list", tmp_path, env)
                as_json = await asyncio.to_thread(bash, "hopsearch keys list --json", tmp_path, env)
            finally:
                await runtime.store.client.indices.delete(
                    index=f"{prefix}-*", allow_no_indices=True, ignore_unavailable=True
                )
    assert "end-user tokens of key intranet name kid `intranet/ed1` (EdDSA)" in created
    response = defined["response"]
    assert response.status_code == 200
    assert [hit["_id"] for hit in response.json()["hits"]["hits"]] == ["leave-hr"]  # group:hr's, not the board's
    assert "public keys" in table and "ed2 (EdDSA)" in table and "ed1" not in table
    assert json.loads(as_json)[0]["token_keys"] == [{"kid": "ed2", "algorithm": "EdDSA"}]


async def check_rotation(block: str, env: dict[str, str], base: str, url: str, folder: Path) -> None:
    """The README's rotation block, line by line: both public keys valid once the second is added, the
    first refused once removed; one owner for the traces asked under either."""
    commands = [line for line in block.splitlines() if line.strip() and not line.startswith("#")]
    assert [c.split()[:3] for c in commands[1:]] == [
        ["hopsearch", "keys", "add-public-key"],
        ["hopsearch", "keys", "remove-public-key"],
    ]
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        for command in commands[:2]:
            await asyncio.to_thread(bash, command, folder, env)
        old, new = signed(folder, "backend.pem", "intranet/ed1"), signed(folder, "backend2.pem", "intranet/ed2")
        traces = []
        for headers in (old, new):
            retrieved = await http.post(f"{base}/_retrieve", json={"query": "leave policy"}, headers=headers)
            assert retrieved.status_code == 200, retrieved.text
            asked = await http.post(f"{base}/_ask", json={"question": "What is the leave policy?"}, headers=headers)
            assert asked.status_code == 200, asked.text
            traces.append(asked.json()["trace_id"])
        await asyncio.to_thread(bash, commands[2], folder, env)
        refused = await http.post(f"{base}/_retrieve", json={"query": "leave policy"}, headers=old)
        still = await http.post(f"{base}/_retrieve", json={"query": "leave policy"}, headers=new)
        admin = {"Authorization": f"ApiKey {API_KEY}"}
        owners = [(await http.get(f"/_traces/{t}", headers=admin)).json()["_source"]["user"]["owner"] for t in traces]
        # the trace asked with the old public key is the same end user's under the new one
        mine = await http.get(f"/_traces/{traces[0]}", headers=new)
    assert refused.status_code == 401 and "has no public key [ed1]" in refused.json()["error"]["reason"]
    assert still.status_code == 200
    assert owners == ["key:intranet/sub:alice"] * 2
    assert mine.status_code == 200


@pytest.mark.parametrize("kid", ["a/b", "", "-x", "x" * 129])
async def test_a_public_key_id_is_a_name(kid: str) -> None:
    from cryptography.hazmat.primitives.asymmetric import ed25519

    from hopsearch.service.auth.keys import token_key
    from hopsearch.service.errors import InputError
    from tests.token_fixtures import pem

    with pytest.raises(InputError, match="bad public key id"):
        token_key(kid, "EdDSA", pem(ed25519.Ed25519PrivateKey.generate().public_key()))
