"""Open WebUI for real (issue 53): the PyPI ``open-webui`` (0.12.4, its own virtual environment:
``scripts/openwebui.sh``, named by ``HOPSEARCH_TEST_OPENWEBUI``) started offline beside the service, its
OpenAI connection configured as the README says (``ENABLE_FORWARD_USER_INFO_HEADERS=true``, a hopsearch key
with ``--user-header X-OpenWebUI-User-Email``). Its admin adds two users (an HR employee and another one);
each asks a hopsearch model through Open WebUI's chat API (``/api/chat/completions``), one body and
streamed, and then signs in on Open WebUI's own page in headless Chromium (Debian's, driven over the
DevTools protocol: :mod:`tests.cdp`), picks the model, types the question and reads the streamed answer.
Open WebUI forwards each user's e-mail to hopsearch: the HR marker is in the HR user's answers and page,
nowhere in the other's; each user's trace is theirs; the title and tag requests Open WebUI sends (the
API's ``/api/v1/tasks/{title,tags}/completions`` and those its page sends after each answer) run no
strategy and write no trace."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

from hopsearch.service.auth.groups import EsGroups, parse_csv
from hopsearch.service.store import Store
from tests.cdp import Page, browser_page
from tests.conftest import EsNode, unavailable
from tests.openai_fixtures import openai_serving
from tests.permissions_corpus import QUESTION, found_markers, load_corpus
from tests.test_permissions_ask import EchoModel

HR, EMPLOYEE = "alice@corp.example", "bob@corp.example"
SALARY = "SALARY-MARKER-9"
#: README, "Open WebUI": the key hopsearch's operator makes for the connection.
OWUI_KEY = {
    "name": "owui",
    "principals": ["group:hr", "group:staff"],
    "user_header": "X-OpenWebUI-User-Email",
    "actions": ["ask", "search"],
}


def open_webui_bin() -> str:
    found = os.environ.get("HOPSEARCH_TEST_OPENWEBUI", "")
    if not found or not os.access(found, os.X_OK):
        unavailable("Open WebUI is not installed: bash scripts/openwebui.sh, then export HOPSEARCH_TEST_OPENWEBUI")
    return found


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def owui_environment(hopsearch_url: str, secret: str, data: Path) -> dict[str, str]:
    """README, "Open WebUI": the connection to hopsearch, offline, forwarding each user."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(data),
        "DATA_DIR": str(data / "data"),
        "OPENAI_API_BASE_URL": f"{hopsearch_url}/v1",
        "OPENAI_API_KEY": secret,
        "ENABLE_FORWARD_USER_INFO_HEADERS": "true",
        "ENABLE_OLLAMA_API": "false",
        "HF_HUB_OFFLINE": "1",
        "OFFLINE_MODE": "true",
        "WEBUI_SECRET_KEY": "test-only-secret",
        "DEFAULT_USER_ROLE": "user",
        "BYPASS_MODEL_ACCESS_CONTROL": "true",  # every user may pick the hopsearch models
        "ANONYMIZED_TELEMETRY": "false",
        "DO_NOT_TRACK": "true",
        "SCARF_NO_ANALYTICS": "true",
    }


def _launch(binary: str, port: int, env: dict[str, str], data: Path) -> subprocess.Popen[bytes]:
    data.mkdir(parents=True, exist_ok=True)
    with (data / "open-webui.log").open("wb") as out:
        return subprocess.Popen(
            [binary, "serve", "--host", "127.0.0.1", "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


def _stop(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def _log(data: Path) -> str:
    return (data / "open-webui.log").read_text(errors="replace")[-4000:]


@contextlib.asynccontextmanager
async def open_webui(hopsearch_url: str, secret: str, data: Path) -> AsyncIterator[str]:
    """Open WebUI serving on a free port until it answers ``/health`` (at most 300 s); its log on failure."""
    port = _free_port()
    process = _launch(open_webui_bin(), port, owui_environment(hopsearch_url, secret, data), data)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        async with httpx.AsyncClient(timeout=5) as probe:
            while True:
                assert process.poll() is None, _log(data)
                with contextlib.suppress(httpx.HTTPError):
                    if (await probe.get(f"{url}/health")).status_code == 200:
                        break
                assert time.monotonic() < deadline, "Open WebUI did not start:\n" + _log(data)
                await asyncio.sleep(1)
        yield url
    finally:
        _stop(process)


async def signup(web: httpx.AsyncClient, name: str, email: str) -> dict[str, str]:
    """Open WebUI's first user, its admin, signs up."""
    made = await web.post("/api/v1/auths/signup", json={"name": name, "email": email, "password": "pw-" + name})
    assert made.status_code == 200, made.text
    return {"Authorization": f"Bearer {made.json()['token']}"}


async def employee(web: httpx.AsyncClient, admin: dict[str, str], name: str, email: str) -> dict[str, str]:
    """An employee the admin adds (Admin Panel, Users, Add User), signed in with its password."""
    form = {"name": name, "email": email, "password": "pw-" + name, "role": "user"}
    made = await web.post("/api/v1/auths/add", json=form, headers=admin)
    assert made.status_code == 200, made.text
    signed = await web.post("/api/v1/auths/signin", json={"email": email, "password": "pw-" + name})
    assert signed.status_code == 200, signed.text
    return {"Authorization": f"Bearer {signed.json()['token']}"}


async def chat(web: httpx.AsyncClient, user: dict[str, str], stream: bool) -> str:
    """What Open WebUI answers its user for the marked question: the body, or every line of the stream."""
    body = {"model": "hopsearch-single", "messages": [{"role": "user", "content": QUESTION}], "stream": stream}
    if not stream:
        answered = await web.post("/api/chat/completions", json=body, headers=user)
        assert answered.status_code == 200, answered.text
        return answered.text
    lines = []
    async with web.stream("POST", "/api/chat/completions", json=body, headers=user) as response:
        assert response.status_code == 200, await response.aread()
        async for line in response.aiter_lines():
            lines.append(line)
    assert len([line for line in lines if line.startswith("data:")]) > 2, lines
    return "\n".join(lines)


async def tasks(web: httpx.AsyncClient, user: dict[str, str]) -> list[dict[str, Any]]:
    messages = [{"role": "user", "content": QUESTION}, {"role": "assistant", "content": "See the handbook."}]
    out = []
    for task in ("title", "tags"):
        sent = await web.post(
            f"/api/v1/tasks/{task}/completions", json={"model": "hopsearch-single", "messages": messages}, headers=user
        )
        assert sent.status_code == 200, sent.text
        out.append(sent.json())
    return out


SIGN_IN = """(() => {
  const set = (el, value) => {
    Object.getOwnPropertyDescriptor(HTMLInputElement.prototype, 'value').set.call(el, value);
    el.dispatchEvent(new Event('input', {bubbles: true}));
  };
  set(document.getElementById('email'), EMAIL);
  set(document.getElementById('password'), PASSWORD);
  document.querySelector('form').requestSubmit();
  return true;
})()"""


#: The "What's New" dialog a user sees on first sign-in: closed as a user closes it.
CLOSE_WHATS_NEW = """[...document.querySelectorAll('button')].filter(b => b.innerText.includes("Okay, Let's Go"))
  .forEach(b => b.click())"""


async def browser_chat(page: Page, url: str, name: str, email: str) -> str:
    """A user signs in on Open WebUI's page, picks the hopsearch model, asks, and reads the answer: the
    page's whole text once the answer's references show."""
    await page.goto(f"{url}/auth")
    await page.wait_for("!!document.getElementById('password')")
    script = SIGN_IN.replace("EMAIL", json.dumps(email)).replace("PASSWORD", json.dumps("pw-" + name))
    await page.evaluate(script)
    await page.wait_for("!!localStorage.token")
    await page.goto(f"{url}/?models=hopsearch-single")
    await page.wait_for("!!document.getElementById('chat-input')")
    await asyncio.sleep(1)
    await page.evaluate(CLOSE_WHATS_NEW)
    await page.evaluate("document.getElementById('chat-input').focus()")
    await page.type(QUESTION)
    await page.press_enter()
    await page.wait_for("document.body.innerText.includes('References')", timeout_s=120)
    await asyncio.sleep(2)  # the title and tag requests that follow an answer
    return await page.text()


async def test_open_webui_users_each_read_with_their_own_rights(es8_node: EsNode, tmp_path: Path) -> None:
    open_webui_bin()

    async def load(store: Store) -> None:
        await load_corpus(store, tmp_path)
        await EsGroups(store, cache_s=0).import_groups(parse_csv(f"user,group\n{HR},hr\n{EMPLOYEE},staff\n"))

    async with openai_serving(es8_node.url, script=EchoModel(), load=load) as served:
        secret = await served.new_key(**OWUI_KEY)
        async with (
            open_webui(served.url, secret, tmp_path / "owui") as url,
            httpx.AsyncClient(base_url=url, timeout=180) as web,
        ):
            admin = await signup(web, "Admin", "admin@corp.example")
            users = {HR: await employee(web, admin, "Alice", HR), EMPLOYEE: await employee(web, admin, "Bob", EMPLOYEE)}
            models = (await web.get("/api/models", headers=users[EMPLOYEE])).json()
            got = {(who, stream): await chat(web, head, stream) for who, head in users.items() for stream in (0, 1)}
            written = await served.traces_written()
            titles = await tasks(web, users[EMPLOYEE])
            after_tasks = await served.traces_written()
            pages = {}
            for name, email in (("Alice", HR), ("Bob", EMPLOYEE)):
                async with browser_page(tmp_path / f"chromium-{name}") as page:
                    pages[email] = await browser_chat(page, url, name, email)
            after_pages = await served.traces_written()
            owners = {
                who: (await served.trace(json.loads(got[(who, 0)])["hopsearch"]["trace_id"]))["user"]["owner"]
                for who in users
            }
    assert "hopsearch-single" in {m["id"] for m in models["data"]}, models
    assert SALARY in got[(HR, 0)] and SALARY in got[(HR, 1)], got[(HR, 0)]
    assert SALARY not in got[(EMPLOYEE, 0)] and SALARY not in got[(EMPLOYEE, 1)]
    assert found_markers(got[(EMPLOYEE, 0)]) == {"PUBLIC-MARKER-1"}, got[(EMPLOYEE, 0)]
    assert written == 4 and after_tasks == written, (written, after_tasks)  # titles and tags: no strategy, no trace
    assert titles[0] and titles[1], titles
    assert owners == {who: f"key:owui/sub:{who}" for who in users}, owners  # each user's trace is theirs
    assert SALARY in pages[HR] and SALARY not in pages[EMPLOYEE], pages  # in a real browser, as users see it
    assert "PUBLIC-MARKER-1" in pages[EMPLOYEE], pages[EMPLOYEE]
    assert after_pages == after_tasks + 2, (after_tasks, after_pages)  # one question each, no title or tag trace
