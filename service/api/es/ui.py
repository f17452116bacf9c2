"""The trace viewer: ``GET /_ui/traces`` (recent traces) and ``GET /_ui/traces/{id}`` (one answer's
reasoning), server-rendered HTML from Jinja2 templates with autoescaping on: no JavaScript, no build
step, nothing fetched from elsewhere (the style sheet is inline), every value escaped. A browser, which
cannot send an API key, comes in through a one-time URL (``POST /_traces/{id}/_open``, ``hopsearch traces
show ID --open``), confirmed on the page ``GET /_ui/open/{code}`` shows and exchanged by its form's ``POST`` for a
cookie (:mod:`hopsearch.service.auth.viewer`; why a confirmation: :func:`open_code`).

A trace page shows the steps in order with each decision (retrieve / parametric / final) and what made
it, the sub-queries, the passages with their titles and ids, tokens and latency per step, the answer and
its citations, and for DualRAG the outline per entity: each fact with the passages it came from.
"""

from __future__ import annotations

import hmac
import json
import secrets
from collections.abc import Mapping, Sequence
from typing import Annotated, Any
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Path, Query, Request
from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.responses import HTMLResponse, RedirectResponse, Response

from hopsearch.service.access import Caller, Scope
from hopsearch.service.api.middleware.gate import refused
from hopsearch.service.api.models import ViewerUrl
from hopsearch.service.api.responses import OrjsonResponse
from hopsearch.service.api.state import CREDENTIAL_UNTIL_KEY, caller_of, state_of
from hopsearch.service.attached.fieldmap import field_text
from hopsearch.service.auth.keys import hash_secret
from hopsearch.service.auth.viewer import COOKIE, OPEN_COOKIE
from hopsearch.service.errors import AuthenticationError, AuthorizationError, NotFound
from hopsearch.service.retrieval.readers import passages_by_id
from hopsearch.service.traces import reads as trace_reads

router = APIRouter()
UI_PREFIX = "/_ui"
OPEN_PATH = f"{UI_PREFIX}/open/"
_ENV = Environment(
    loader=PackageLoader("hopsearch.service.api.es", "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    trim_blocks=True,
    lstrip_blocks=True,
)
DECISIONS = {
    "retrieve": "retrieve: look it up",
    "parametric": "parametric: answer from the model",
    "final": "final answer",
    "repeat": "repeat: already asked",
}


def trace_url(trace_id: str) -> str:
    return f"{UI_PREFIX}/traces/{trace_id}"


def passage_ids(doc: Mapping[str, Any]) -> list[str]:
    ids = [pid for step in doc.get("steps", []) for pid in step.get("hit_ids") or []]
    ids += [str(c.get("id")) for c in doc.get("citations") or []]
    return list(dict.fromkeys(ids))


def outline_view(steps: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """DualRAG's outline as the trace recorded it: per entity, its facts (new and reused) with passages."""
    entities: dict[str, dict[str, Any]] = {}

    def entity(name: str) -> dict[str, Any]:
        return entities.setdefault(name, {"entity": name, "keywords": [], "facts": []})

    for step in steps:
        details = step.get("details") or {}
        if step.get("kind") == "identify":
            for item in (details.get("value") or {}).get("entities") or []:
                if isinstance(item, Mapping) and item.get("entity"):
                    entity(str(item["entity"]))["keywords"] = [str(k) for k in item.get("keywords") or []]
        elif step.get("kind") == "summarize" and details.get("entity"):
            if not details.get("dropped") and step.get("output"):
                fact = {"summary": step["output"], "passages": list(step.get("hit_ids") or []), "how": "summarized"}
                entity(str(details["entity"]))["facts"].append(fact)
        elif step.get("kind") == "outline_reuse":
            for item in details.get("facts") or []:
                fact = {
                    "summary": item.get("summary"),
                    "passages": list(item.get("passage_ids") or []),
                    "how": "reused",
                }
                entity(str(item.get("entity")))["facts"].append(fact)
    return list(entities.values())


def step_view(step: Mapping[str, Any]) -> dict[str, Any]:
    decision = step.get("decision")
    details = step.get("details")
    return {
        **step,
        "number": int(step.get("index", 0)) + 1,
        "decision_text": DECISIONS.get(str(decision), str(decision)) if decision else "",
        "details_json": json.dumps(details, indent=1, ensure_ascii=False) if details else "",
    }


def render_trace(doc: Mapping[str, Any], titles: Mapping[str, str], raw_url: str) -> str:
    steps = list(doc.get("steps") or [])
    return _ENV.get_template("trace.html").render(
        doc=doc,
        steps=[step_view(s) for s in steps],
        titles=titles,
        outline=outline_view(steps) if any(s.get("kind") in ("summarize", "outline_reuse") for s in steps) else [],
        totals=doc.get("totals") or {},
        raw_url=raw_url,
        list_url=f"{UI_PREFIX}/traces",
    )


def render_list(rows: Sequence[Mapping[str, Any]], index: str) -> str:
    return _ENV.get_template("traces.html").render(rows=rows, index=index, trace_url=trace_url)


@router.post("/_traces/{trace_id}/_open", response_model=None, responses={201: {"model": ViewerUrl}})
async def open_url(request: Request, trace_id: Annotated[str, Path(min_length=1, max_length=128)]) -> OrjsonResponse:
    """Return a one-time URL of the viewer's page of a trace the caller may read (its own; an admin: any; another's
    is not found). Opened in a browser within ``ui_code_s`` seconds (and before the end-user token it was
    minted with expires), once and confirmed there, it gives that browser the viewer's cookie, reading as the
    caller (and only while its credential is usable), and shows the page."""
    state = state_of(request)
    caller = caller_of(request.scope)
    settings = state.settings
    runtime = await state.runtime()
    if await trace_reads.trace(runtime.store, settings.traces_index, trace_id, caller=caller) is None:
        raise NotFound(f"trace [{trace_id}] not found", details={"index": settings.traces_index})
    sessions = await state.viewer_sessions()
    until = request.scope.get(CREDENTIAL_UNTIL_KEY)
    code = await sessions.mint_code(caller, trace_id, until=until)
    path = f"{UI_PREFIX}/open/{code}"
    expires_in = int(sessions.life_s(settings.ui_code_s, until))
    body = {"url": str(request.base_url).rstrip("/") + path, "path": path, "expires_in": expires_in}
    return OrjsonResponse(body, status_code=201)


def _no_store(response: Response, referrer: str = "no-referrer") -> Response:
    response.headers["Cache-Control"] = "no-store"
    response.headers["Referrer-Policy"] = referrer
    return response


def _who(caller: Caller) -> str:
    if caller.admin and caller.key is None:
        return "an admin"
    who = caller.subject or caller.key or "an unnamed caller"
    return f"{who} (API key {caller.key})" if caller.key and caller.subject and caller.subject != caller.key else who


def _csrf(pre_session: str, code: str) -> str:
    """Return the confirmation form's token: bound to the browser's pre-session cookie and to the code."""
    return hash_secret(f"{pre_session}:{code}")


@router.get("/_ui/open/{code}", include_in_schema=False)
async def open_code(request: Request, code: Annotated[str, Path(min_length=1, max_length=128)]) -> Response:
    """Return a one-time code's confirmation page (no credentials: the code is one). Login CSRF is why it is a page
    and not the exchange itself: were a GET to exchange the code, a link someone else minted (a mail, an
    ``<img>`` on another site) would sign the browser in as *them*, and what the user then reads or
    trusts would be theirs. So the GET uses nothing up: it says whom the link signs in as and sets a
    pre-session cookie (``hopsearch_viewer_open``, HttpOnly, SameSite=Strict, for ``/_ui/open/`` only, as long
    as a code lives); its same-origin form POSTs the code back with a token bound to that cookie, and only
    that POST exchanges it (:func:`exchange_code`). Another site cannot make that POST: the SameSite
    cookie is not sent with it and it cannot read the token (nor a redirect skip the page)."""
    state = state_of(request)
    sessions = await state.viewer_sessions()
    try:
        redeemed = await sessions.peek(code)
    except (AuthenticationError, AuthorizationError) as exc:
        raise refused(state, "viewer_refused", exc) from None
    pre_session = secrets.token_urlsafe(32)
    page = _ENV.get_template("open.html").render(
        who=_who(redeemed.caller),
        trace_id=redeemed.trace_id,
        action=f"{UI_PREFIX}/open/{quote(code, safe='')}",
        csrf=_csrf(pre_session, code),
    )
    response = HTMLResponse(page)
    secure = request.url.scheme == "https"
    max_age = int(state.settings.ui_code_s)
    response.set_cookie(
        OPEN_COOKIE, pre_session, max_age=max_age, path=OPEN_PATH, secure=secure, httponly=True, samesite="strict"
    )
    # same-origin, not no-referrer: under no-referrer a browser sends its form's POST with ``Origin: null``
    return _no_store(response, "same-origin")


@router.post("/_ui/open/{code}", include_in_schema=False)
async def exchange_code(request: Request, code: Annotated[str, Path(min_length=1, max_length=128)]) -> Response:
    """Make the confirmed exchange (see :func:`open_code`): with the pre-session cookie the confirmation page set
    and its token, and no other site's ``Origin``, the code is used up, the browser gets the viewer's cookie
    for the code's caller (HttpOnly, SameSite=Strict, ``ui_session_s`` or until the credential it was minted
    from ends; Secure over HTTPS) and is sent on to the trace's page (303). Anything else: 403, the code
    left unused."""
    state = state_of(request)
    form = parse_qs((await request.body()).decode("latin-1"))
    pre_session = request.cookies.get(OPEN_COOKIE, "")
    token = (form.get("csrf") or [""])[0]
    origin = request.headers.get("origin")
    same_origin = origin is None or origin == str(request.base_url).rstrip("/")
    if not (pre_session and same_origin and hmac.compare_digest(token, _csrf(pre_session, code))):
        why = "open the one-time URL in this browser and confirm it there (the confirmation did not come from its page)"
        raise refused(state, "viewer_refused", AuthorizationError(why)) from None
    sessions = await state.viewer_sessions()
    try:
        redeemed = await sessions.redeem(code)
    except (AuthenticationError, AuthorizationError) as exc:
        raise refused(state, "viewer_refused", exc) from None
    session, life_s = await sessions.open_session(redeemed)
    response = RedirectResponse(trace_url(quote(redeemed.trace_id, safe="")), status_code=303)
    secure = request.url.scheme == "https"
    response.set_cookie(COOKIE, session, max_age=int(life_s), path="/", secure=secure, httponly=True, samesite="strict")
    response.delete_cookie(OPEN_COOKIE, path=OPEN_PATH, secure=secure, httponly=True, samesite="strict")
    return _no_store(response)


@router.get("/_ui/traces", response_class=HTMLResponse, include_in_schema=False)
async def list_page(request: Request, size: Annotated[int, Query(ge=1, le=1000)] = 50) -> HTMLResponse:
    state = state_of(request)
    runtime = await state.runtime()
    index = state.settings.traces_index
    rows = await trace_reads.recent_traces(runtime.store, index, size, caller=caller_of(request.scope))
    return HTMLResponse(render_list(rows, index))


@router.get("/_ui/traces/{trace_id}", response_class=HTMLResponse, include_in_schema=False)
async def trace_page(request: Request, trace_id: Annotated[str, Path(min_length=1, max_length=128)]) -> HTMLResponse:
    state = state_of(request)
    runtime = await state.runtime()
    caller = caller_of(request.scope)
    settings = state.settings
    doc = await trace_reads.trace(runtime.store, settings.traces_index, trace_id, caller=caller)
    if doc is None:
        raise NotFound(
            f"trace [{trace_id}] not found: it is another user's, or it was never written (the service stopped "
            "during its question: the trace was lost)",
            details={"index": settings.traces_index},
        )
    # titles of the passages the viewer may read now (ACLs may have changed since the question)
    index = str((doc.get("scope") or {}).get("index") or settings.passages_alias)
    scope = Scope(index, caller, acl_default=settings.acl_default)
    attachment = await runtime.store.attachment(index)  # an attached index names its own title field
    title = attachment.fields.title if attachment is not None else "title"
    found = await passages_by_id(runtime.store, scope, passage_ids(doc), [title])
    titles = {pid: field_text(source.get(title, "")) for pid, source in found.items()}
    for citation in doc.get("citations") or []:
        titles.setdefault(str(citation.get("id")), str(citation.get("title", "")))
    return HTMLResponse(render_trace(doc, titles, f"/_traces/{trace_id}"))
