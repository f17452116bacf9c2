"""LibreChat (issue 53): the README's ``librechat.yaml`` custom endpoint, read from the README itself, its
``headers`` resolved as LibreChat resolves them for a signed-in user (``{{LIBRECHAT_USER_EMAIL}}`` →
the user's e-mail; ``${VAR}`` → the environment), and LibreChat's request shape (the OpenAI SDK under
LangChain: streamed, with ``user``, ``stream_options`` and its sampling fields) sent to
``/v1/chat/completions`` over real HTTP on a real node: the HR user's stream holds the HR marker, the
other user's no chunk of it; a header LibreChat left unresolved (its title requests, LibreChat issue
#14580) is refused, never one pooled user."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import yaml

from hopsearch.service.auth.groups import EsGroups, parse_csv
from hopsearch.service.store import Store
from tests.conftest import EsNode
from tests.openai_fixtures import openai_serving
from tests.permissions_corpus import QUESTION, found_markers, load_corpus
from tests.test_permissions_ask import EchoModel

README = Path(__file__).resolve().parents[1] / "README.md"
HR, EMPLOYEE = "carol@corp.example", "dave@corp.example"


def readme_librechat() -> dict[str, Any]:
    """The ``librechat.yaml`` block of the README's LibreChat section."""
    text = README.read_text(encoding="utf-8")
    found = re.search(r"```yaml\n(# librechat\.yaml\n.*?)```", text, re.S)
    assert found, "the README shows no librechat.yaml block"
    endpoint: dict[str, Any] = yaml.safe_load(found.group(1))["endpoints"]["custom"][0]
    return endpoint


def resolved(headers: dict[str, str], email: str, env: dict[str, str]) -> dict[str, str]:
    """LibreChat's header resolution for a user (``{{LIBRECHAT_USER_EMAIL}}``) and its ``${VAR}``s."""
    out = {}
    for name, value in headers.items():
        value = value.replace("{{LIBRECHAT_USER_EMAIL}}", email)
        out[name] = re.sub(r"\$\{(\w+)\}", lambda m: env[m.group(1)], value)
    return out


def librechat_body(model: str) -> dict[str, Any]:
    """What LibreChat's agents client (LangChain's ChatOpenAI over the OpenAI SDK) posts for a chat turn."""
    return {
        "model": model,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 1,
        "top_p": 1,
        "presence_penalty": 0,
        "frequency_penalty": 0,
        "n": 1,
        "user": "66f1c0ffee0123456789abcd",
        "messages": [{"role": "user", "content": QUESTION}],
    }


async def test_librechat_users_ask_with_their_own_rights(es_node: EsNode, tmp_path: Path) -> None:
    endpoint = readme_librechat()
    assert endpoint["titleConvo"] is False and endpoint["models"]["fetch"] is True, endpoint

    async def load(store: Store) -> None:
        await load_corpus(store, tmp_path)
        await EsGroups(store, cache_s=0).import_groups(parse_csv(f"user,group\n{HR},hr\n{EMPLOYEE},staff\n"))

    async with openai_serving(es_node.url, script=EchoModel(), load=load) as served:
        header = next(iter(endpoint["headers"]))
        secret = await served.new_key(
            name="librechat", principals=["group:hr", "group:staff"], user_header=header, actions=["ask"]
        )
        env = {"HOPSEARCH_KEY": secret, "HOPSEARCH_URL": served.url}
        base = re.sub(r"\$\{(\w+)\}", lambda m: env[m.group(1)], endpoint["baseURL"])
        api_key = re.sub(r"\$\{(\w+)\}", lambda m: env[m.group(1)], endpoint["apiKey"])
        got: dict[str, list[str]] = {}
        async with httpx.AsyncClient(base_url=base, timeout=120) as client:
            for email in (HR, EMPLOYEE):
                heads = {"Authorization": f"Bearer {api_key}", **resolved(endpoint["headers"], email, env)}
                models = await client.get("/models", headers=heads)
                assert endpoint["models"]["default"][0] in {m["id"] for m in models.json()["data"]}, models.text
                async with client.stream(
                    "POST", "/chat/completions", json=librechat_body("hopsearch-single"), headers=heads
                ) as response:
                    assert response.status_code == 200, await response.aread()
                    got[email] = [line async for line in response.aiter_lines() if line.startswith("data:")]
            literal = {"Authorization": f"Bearer {api_key}", header: "{{LIBRECHAT_USER_EMAIL}}"}
            body = librechat_body("hopsearch-single")
            unresolved = await client.post("/chat/completions", json=body, headers=literal)
    assert any("SALARY-MARKER-9" in chunk for chunk in got[HR]), got[HR]
    assert [chunk for chunk in got[EMPLOYEE] if found_markers(chunk) - {"PUBLIC-MARKER-1"}] == []
    assert len(got[EMPLOYEE]) > 3 and got[EMPLOYEE][-1] == "data: [DONE]", got[EMPLOYEE]
    assert unresolved.status_code == 400 and "placeholder" in unresolved.json()["error"]["message"], unresolved.text
