"""The HTTP API as a FastAPI app: routes under ``/v1`` over one store and the server's workers,
behind the bearer token and the body-size limit; ``/healthz`` and the static page need no token."""

from __future__ import annotations

import base64
import binascii
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import pydantic
from fastapi import FastAPI, Header, Query, Request
from fastapi import Path as InPath
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from starlette.exceptions import HTTPException
from starlette.routing import Match
from starlette.staticfiles import StaticFiles

from planexec import __version__
from planexec.errors import Problem, StoreError, UsageError
from planexec.hosting import App, BearerGuard
from planexec.log import ChecklistResult, Event, RunStarted, RunState, dump_event
from planexec.plan import Plan
from planexec.runs import (
    answer,
    give_back,
    load_run,
    open_questions,
    pick_question,
    read_run,
    still_waiting,
    take_from_workers,
    tell,
    worker_entry,
)
from planexec.runtime import ApprovalDecision, caps_from_json
from planexec.server._agents import ServedAgent
from planexec.server._bodies import (
    COUNTED_CAPS,
    MAX_KEY_CHARS,
    AgentList,
    AgentView,
    Answer,
    AnswerResult,
    BudgetCaps,
    EventItem,
    EventPage,
    Fork,
    Health,
    Inbox,
    RunList,
    StartRun,
    Tell,
)
from planexec.server._contract import (
    CURSOR,
    CURSOR_PATTERN,
    EVENT_ID,
    EVENT_ID_PATTERN,
    ID,
    ID_PATTERN,
    INBOX_LINKS,
    LISTED_LINKS,
    MAX_WHOLE,
    QUESTION_LINKS,
    RUN_LINKS,
    completed,
    refusals,
)
from planexec.server._guards import MAX_BODY_BYTES, BodyLimit, HostAllowList, SafeHeaders, _ApiError, error_body
from planexec.server._stream import EventStream, event_frames
from planexec.server._views import (
    RunDetail,
    RunSummary,
    agent_of,
    detail,
    detail_of_summary,
    pending_summary,
    summary,
)
from planexec.server._workers import Workers, request_digest, served_by
from planexec.store import RunStore

__all__ = ["STATIC", "AppSettings", "build_app", "openapi_document"]

STATIC = Path(__file__).with_name("static")
"""The web page's files, shipped in the package."""
LIST_SCAN = 100_000
"""At most this many runs are looked at for one listing."""
FOLDS_KEPT = 5_000
"""Runs whose folded state a listing keeps between requests."""
ANSWERED_BY = "api"
MAX_SEQ = MAX_WHOLE
"""The largest event position a request may name."""


RunId = Annotated[str, InPath(description="The run's id.", json_schema_extra={"pattern": ID_PATTERN})]
QuestionId = Annotated[str, InPath(description="The question's id.", json_schema_extra={"pattern": ID_PATTERN})]


@dataclass(frozen=True, kw_only=True)
class AppSettings:
    """How the API is served: its token, the agents it runs goals with, the browser origins it
    answers (none: no CORS), the largest body it reads and how many runs it executes at once."""

    token: str = field(repr=False)
    agents: Sequence[ServedAgent]
    instance: str
    cors_origins: Sequence[str] = ()
    max_body: int = MAX_BODY_BYTES
    workers: int = 4
    accepted: Path | None = None
    """Where accepted runs are written down before they are acknowledged (beside ``serve-id``)."""
    allowed_hosts: Sequence[str] | None = None
    """The host names a request's ``Host`` header may give (any port; others get 421); None: any.
    :func:`~planexec.server.serve` on a loopback address makes it ``127.0.0.1``, ``localhost`` and
    ``[::1]`` when it is None."""


# -- helpers ----------------------------------------------------------------------------------


def _checked_id(value: str, what: str) -> str:
    if not ID.fullmatch(value):
        message = "must be 1 to 128 characters of A-Z a-z 0-9 . _ : - (not . or ..)"
        raise _ApiError(400, "bad_id", f"not a {what}", [Problem(code="bad_id", where=what, message=message)])
    return value


_STATUS_OF = {
    "unknown_run": 404,
    "not_a_run": 404,
    "finished": 409,
    "elsewhere": 409,
    "decided": 409,
    "conflict": 409,
    "busy": 409,
}


def _from_usage(error: UsageError) -> _ApiError:
    problems = list(error.problems)
    codes = [p.code for p in problems]
    for code in codes:
        if code in _STATUS_OF:
            return _ApiError(_STATUS_OF[code], code, str(error.args[0]) if error.args else str(error), problems)
    return _ApiError(422, "invalid", str(error.args[0]) if error.args else str(error), problems)


class _Folds:
    """The folded state of the runs a listing showed, brought up to date from where it was."""

    def __init__(self, store: RunStore) -> None:
        self._store = store
        self._kept: OrderedDict[str, tuple[int, RunState, str | None]] = OrderedDict()

    async def state(self, run_id: str, last: int) -> tuple[RunState, str | None]:
        seq, state, agent = self._kept.pop(run_id, (0, RunState(), None))
        if last > seq:
            stored = await read_run(self._store, run_id) if seq == 0 else None
            if stored is not None:
                state = RunState.fold(stored.events)
                agent = agent_of(stored.events[0] if stored.events else None)
                seq = len(stored.events) + len(stored.unreadable)
            else:
                for item in await self._store.read(run_id, after=seq):
                    state.apply(item.event)
                    seq = item.seq
        self._kept[run_id] = (seq, state, agent)
        while len(self._kept) > FOLDS_KEPT:
            self._kept.popitem(last=False)
        return state, agent


def _cursor(item: RunSummary) -> str:
    """Where a page ends: the last run's start (as ``repr`` writes it, exact) and its id."""
    encoded = base64.urlsafe_b64encode(item.run_id.encode("utf-8", "surrogatepass")).decode().rstrip("=")
    return f"{item.started_at!r}~{encoded}"


def _read_cursor(text: str) -> tuple[float, str]:
    """The position a cursor names; any text of its format is one (a run there or not)."""
    if CURSOR.fullmatch(text):
        at, _, encoded = text.partition("~")
        try:
            raw = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
            return float(at), raw.decode("utf-8", "surrogateescape")
        except (ValueError, binascii.Error):  # the pattern leaves no such text; refused all the same
            pass
    raise _ApiError(
        400,
        "bad_cursor",
        "not a cursor",
        [Problem(code="bad_cursor", where="cursor", message="give a listing's next_cursor back as it came")],
    )


# -- the app ----------------------------------------------------------------------------------


def openapi_document() -> dict[str, Any]:
    """The API's OpenAPI document, as ``GET /v1/openapi.json`` serves it."""
    from planexec.store import MemoryStore

    settings = AppSettings(token="-" * 16, agents=(), instance="-")
    document: dict[str, Any] = _api(MemoryStore(), settings).openapi()
    return document


def build_app(store: RunStore, settings: AppSettings, *, workers: Workers | None = None) -> App:
    """The API over ``store`` as an ASGI app, guarded as ``settings`` say; its runs execute in
    ``workers`` (made here when None).

    From the outside in: the Host allow-list, CORS (a preflight carries no token), the token
    (checked before any of the body is read, whatever its size), the body-size limit."""
    app: App = BodyLimit(_api(store, settings, workers), settings.max_body)
    app = BearerGuard(
        app,
        settings.token,
        unauthorized=error_body("unauthorized", "send the server's token as Authorization: Bearer TOKEN"),
        is_open=_is_open,
    )
    if settings.cors_origins:
        from starlette.middleware.cors import CORSMiddleware

        app = CORSMiddleware(
            app,
            allow_origins=list(settings.cors_origins),
            allow_methods=["GET", "POST"],
            allow_headers=["authorization", "content-type", "idempotency-key", "last-event-id"],
        )
    if settings.allowed_hosts is not None:
        app = HostAllowList(app, settings.allowed_hosts)
    return SafeHeaders(app)


def _api(store: RunStore, settings: AppSettings, workers: Workers | None = None) -> FastAPI:
    agents = {a.name: a for a in settings.agents}
    if workers is None:
        workers = Workers(
            store, agents, instance=settings.instance, workers=settings.workers, accepted=settings.accepted
        )
    folds = _Folds(store)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        await workers.recover()
        try:
            yield
        finally:
            await workers.close()

    api = FastAPI(
        title="planexec",
        version=__version__,
        summary="Planner–executor agents: start runs, follow their events, answer their questions.",
        openapi_url="/v1/openapi.json",
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
        generate_unique_id_function=lambda route: route.name,
    )
    api.openapi = completed(api.openapi, is_open=_is_open)  # type: ignore[method-assign]
    api.state.workers = workers

    # -- errors -----------------------------------------------------------------------------

    @api.exception_handler(_ApiError)
    async def on_api_error(_request: Request, e: _ApiError) -> Response:
        return JSONResponse(error_body(e.code, e.message, e.problems), status_code=e.status)

    @api.exception_handler(UsageError)
    async def on_usage_error(request: Request, e: UsageError) -> Response:
        return await on_api_error(request, _from_usage(e))

    @api.exception_handler(StoreError)
    async def on_store_error(_request: Request, e: StoreError) -> Response:
        return JSONResponse(error_body("store", str(e)), status_code=503)

    @api.exception_handler(RequestValidationError)
    async def on_invalid(_request: Request, e: RequestValidationError) -> Response:
        problems = []
        malformed = False
        for error in e.errors():
            loc = [str(p) for p in error.get("loc", ()) if p != "body"]
            malformed = malformed or error.get("type") == "json_invalid"
            problems.append(_invalid(loc, str(error.get("type", "invalid")), str(error.get("msg", ""))))
        if malformed:
            return JSONResponse(error_body("bad_json", "the request body is not JSON", problems), status_code=400)
        return JSONResponse(error_body("invalid", "the request does not fit", problems), status_code=422)

    @api.exception_handler(HTTPException)
    async def on_http(request: Request, e: HTTPException) -> Response:
        # A 400 comes from reading the body: JSON the parser gives up on (nested too deep, say).
        codes = {400: "bad_json", 404: "not_found", 405: "method_not_allowed", 413: "too_large"}
        headers = dict(e.headers or {})
        if e.status_code == 405:
            headers["Allow"] = _allowed(api, request) or headers.get("Allow", "")
        return JSONResponse(
            error_body(codes.get(e.status_code, "http"), str(e.detail)), status_code=e.status_code, headers=headers
        )

    # -- reading -----------------------------------------------------------------------------

    async def run_log(run_id: str) -> list[Event]:
        _checked_id(run_id, "run_id")
        try:
            return await load_run(store, run_id)
        except UsageError as e:
            if any(p.code == "unknown_run" for p in e.problems):
                raise _ApiError(
                    404,
                    "unknown_run",
                    f"no run {run_id!r}",
                    [Problem(code="unknown_run", where="run_id", message=f"no run {run_id!r} in the store")],
                ) from None
            raise

    def not_stored(run_id: str) -> RunSummary | None:
        """A run accepted here that is not in the store yet (or could not begin)."""
        pending = workers.pending.get(run_id)
        if pending is not None:
            return pending_summary(run_id, pending.agent, pending.goal, pending.accepted_at)
        failed = workers.failed_starts.get(run_id)
        if failed is not None:
            first, why = failed
            return pending_summary(run_id, first.agent, first.goal, first.accepted_at, failed=why)
        return None

    def not_begun(run_id: str, action: str) -> _ApiError | None:
        """Why ``action`` cannot be done yet to a run accepted here that is not in the store (None
        when the run is stored): a run waiting for a worker is known from its 201 on."""
        if run_id in workers.pending:
            return _ApiError(
                409,
                "not_started",
                f"cannot {action} run {run_id!r} yet",
                [Problem(code="not_started", where="run_id", message="it waits for a worker and has not begun")],
            )
        failed = workers.failed_starts.get(run_id)
        if failed is not None:
            return _ApiError(
                409,
                "finished",
                f"cannot {action} run {run_id!r}",
                [Problem(code="finished", where="run_id", message=f"it could not begin: {failed[1]}")],
            )
        return None

    async def summary_of(run_id: str) -> RunSummary:
        early = not_stored(run_id)
        if early is not None:
            return early
        log = await run_log(run_id)
        return summary(RunState.fold(log), agent_of(log[0]))

    @api.get("/healthz", tags=["server"], responses=refusals(token=False))
    async def healthz() -> Health:
        """Whether the server is up (no token needed)."""
        return Health(ok=True, version=__version__)

    @api.get("/v1/agents", tags=["agents"], responses=refusals())
    async def list_agents() -> AgentList:
        """The agents goals can be started with."""
        return AgentList(agents=[AgentView(**a.describe(store)) for a in agents.values()])

    @api.get(
        "/v1/runs",
        tags=["runs"],
        responses={200: {"links": LISTED_LINKS}, **refusals("bad_cursor", "invalid")},
    )
    async def list_runs(
        status: Literal["running", "waiting", "finished"] | None = None,
        agent: str | None = Query(default=None, max_length=64),
        since: float | None = Query(
            default=None, allow_inf_nan=False, description="Only runs started at or after (epoch seconds)."
        ),
        until: float | None = Query(
            default=None, allow_inf_nan=False, description="Only runs started at or before (epoch seconds)."
        ),
        limit: int = Query(default=50, ge=1, le=200),
        cursor: str | None = Query(
            default=None,
            description="Where the page before ended: its `next_cursor`, as it came.",
            json_schema_extra={"pattern": CURSOR_PATTERN},
        ),
    ) -> RunList:
        """The runs, newest first, a page at a time."""
        found: list[RunSummary] = []
        for pending in list(workers.pending.values()):
            if status in (None, "running"):
                found.append(pending_summary(pending.run_id, pending.agent, pending.goal, pending.accepted_at))
        seen = {s.run_id for s in found}
        for row in await store.list_runs(status=status, started_after=since, limit=LIST_SCAN):
            if row.run_id in seen:
                continue
            state, name = await folds.state(row.run_id, row.events)
            found.append(summary(state, name))
        found = [
            s
            for s in found
            if (agent is None or s.agent == agent)
            and (since is None or s.started_at >= since)
            and (until is None or s.started_at <= until)
        ]
        found.sort(key=lambda s: (s.started_at, s.run_id), reverse=True)
        if cursor is not None:
            at, after_id = _read_cursor(cursor)
            found = [s for s in found if (s.started_at, s.run_id) < (at, after_id)]
        page = found[:limit]
        more = len(found) > limit
        return RunList(runs=page, next_cursor=_cursor(page[-1]) if more and page else None)

    @api.get(
        "/v1/runs/{run_id}",
        tags=["runs"],
        responses={200: {"links": QUESTION_LINKS}, **refusals("bad_id", "unknown_run", "invalid")},
    )
    async def get_run(run_id: RunId) -> RunDetail:
        """A run: its state, plan versions, steps, usage, cost and open questions."""
        _checked_id(run_id, "run_id")
        early = not_stored(run_id)
        if early is not None:
            return detail_of_summary(early)
        log = await run_log(run_id)
        return detail(RunState.fold(log), log)

    @api.get("/v1/runs/{run_id}/events", tags=["events"], responses=refusals("bad_id", "unknown_run", "invalid"))
    async def get_events(
        run_id: RunId,
        after: int = Query(default=0, ge=0, le=MAX_SEQ),
        limit: int = Query(default=500, ge=1, le=5_000),
    ) -> EventPage:
        """The run's events after event ``after`` (seq: the 1-based position in its log)."""
        _checked_id(run_id, "run_id")
        if not_stored(run_id) is None:
            await run_log(run_id)
        stored = (await store.read(run_id, after=after))[:limit]
        items = [EventItem(seq=s.seq, event=dump_event(s.event)["event"]) for s in stored]
        return EventPage(events=items, next=items[-1].seq if items else after)

    @api.get(
        "/v1/runs/{run_id}/events/stream",
        tags=["events"],
        response_class=Response,
        responses={
            200: {"content": {"text/event-stream": {}}, "description": "The run's events as they happen"},
            **refusals("bad_id", "bad_event_id", "unknown_run", "invalid"),
        },
    )
    async def stream_events(
        run_id: RunId,
        after: int | None = Query(default=None, ge=0, le=MAX_SEQ),
        last_event_id: str | None = Header(
            default=None,
            description="Go on after this event (what a reconnecting `EventSource` sends).",
            json_schema_extra={"pattern": EVENT_ID_PATTERN},
        ),
    ) -> Any:
        """The run's events as Server-Sent Events, from ``Last-Event-ID`` (or ``after``) on, live
        until the run finishes."""
        _checked_id(run_id, "run_id")
        start = after or 0
        if last_event_id is not None:
            if not EVENT_ID.fullmatch(last_event_id.strip()):
                raise _ApiError(
                    400,
                    "bad_event_id",
                    "Last-Event-ID is not an event's sequence number",
                    [Problem(code="bad_event_id", where="Last-Event-ID", message="must be a whole number")],
                )
            start = int(last_event_id)
        if not_stored(run_id) is None:
            await run_log(run_id)
        return EventStream(event_frames(store, run_id, start))

    @api.get("/v1/inbox", tags=["questions"], responses={200: {"links": INBOX_LINKS}, **refusals()})
    async def inbox() -> Inbox:
        """Every question unfinished runs wait for, oldest first."""
        return Inbox(questions=await open_questions(store))

    # -- acting ------------------------------------------------------------------------------

    @api.post(
        "/v1/runs",
        tags=["runs"],
        status_code=201,
        responses={
            201: {"description": "The run started", "links": RUN_LINKS},
            200: {"model": RunSummary, "description": "The run this idempotency key started", "links": RUN_LINKS},
            **refusals("bad_json", "unknown_agent", "idempotency_conflict", "invalid"),
        },
    )
    async def start_run(
        body: StartRun,
        response: Response,
        idempotency_key: str | None = Header(default=None, min_length=1, max_length=MAX_KEY_CHARS),
    ) -> RunSummary:
        """Start a goal with a registered agent. With an idempotency key (in the body or the
        ``Idempotency-Key`` header), a retried request gets the run the first one started."""
        key = body.idempotency_key or idempotency_key
        agent = agents.get(body.agent)
        if agent is None:
            raise _ApiError(
                404,
                "unknown_agent",
                f"no agent {body.agent!r}",
                [Problem(code="unknown_agent", where="agent", message=f"registered: {', '.join(sorted(agents))}")],
            )
        caps = body.budget.given()
        asked = {"agent": body.agent, "goal": body.goal, "constraints": body.constraints, "budget": caps}
        digest = request_digest(asked)
        if key is None:
            pending = workers.start(
                agent, body.goal, constraints=body.constraints, budget=caps, key=None, digest=digest
            )
            return pending_summary(pending.run_id, agent.name, body.goal, pending.accepted_at)
        async with workers.key_lock(key):
            run_id = workers.run_id_for(key)
            earlier = workers.pending.get(run_id)
            before = earlier.digest if earlier is not None else None
            if earlier is None:
                stored = await read_run(store, run_id)
                if stored.found:
                    first = stored.events[0] if stored.events else None
                    before = served_by(first).get("digest") if isinstance(first, RunStarted) else ""
            if before is not None:
                if before != digest:
                    raise _ApiError(
                        409,
                        "idempotency_conflict",
                        "this idempotency key started a run with another request",
                        [Problem(code="idempotency_conflict", where="idempotency_key", message=f"run {run_id}")],
                    )
                response.status_code = 200
                return await summary_of(run_id)
            pending = workers.start(agent, body.goal, constraints=body.constraints, budget=caps, key=key, digest=digest)
            return pending_summary(pending.run_id, agent.name, body.goal, pending.accepted_at)

    @api.post(
        "/v1/runs/{run_id}/cancel",
        tags=["runs"],
        status_code=202,
        responses=refusals("bad_id", "unknown_run", "finished", "elsewhere", "busy", "invalid"),
    )
    async def cancel_run(run_id: RunId) -> RunSummary:
        """Cancel a run: one this server executes stops; a waiting one is finished as cancelled."""
        _checked_id(run_id, "run_id")
        if not workers.busy(run_id):
            await run_log(run_id)
        await workers.cancel(run_id)
        return await summary_of(run_id)

    @api.post(
        "/v1/runs/{run_id}/resume",
        tags=["runs"],
        status_code=202,
        responses=refusals("bad_id", "unknown_run", "finished", "waiting", "running", "invalid"),
    )
    async def resume_run(run_id: RunId) -> RunSummary:
        """Go on with a run here: after a crash, or once its questions are answered."""
        # Whether this server runs it is asked before the log is read (a run that ends here while
        # the log is read would otherwise be resumed from a log that no longer says the whole
        # story) and again after (another request may have resumed it meanwhile).
        busy = workers.busy(run_id)
        _checked_id(run_id, "run_id")
        if busy and run_id in workers.pending:
            raise _ApiError(
                409,
                "running",
                f"cannot resume run {run_id!r}",
                [Problem(code="running", where="run_id", message="this server runs it: it waits for a worker")],
            )
        early = not_begun(run_id, "resume")
        if early is not None:
            raise early
        log = await run_log(run_id)
        state = RunState.fold(log)
        if (busy or workers.busy(run_id)) and state.status == "waiting":
            await workers.settle(run_id)  # suspended: its part here is ending (the log says so first)
            busy = workers.busy(run_id)
            log = await run_log(run_id)
            state = RunState.fold(log)
        why = None
        if busy or workers.busy(run_id):
            why = ("running", "this server runs it now")
        elif state.finished:
            why = ("finished", f"it has finished ({state.stop})")
        elif still_waiting(state) or state.pending_approvals:
            why = ("waiting", "it waits for an answer: answer its questions first")
        else:
            theirs = await take_from_workers(workers.store, run_id)  # last: it takes a waiting run over
            if theirs is not None:
                why = ("running", theirs)
        if why is not None:
            raise _ApiError(
                409, why[0], f"cannot resume run {run_id!r}", [Problem(code=why[0], where="run_id", message=why[1])]
            )
        workers.resume(run_id, log)
        return summary(state, agent_of(log[0]))

    @api.post(
        "/v1/runs/{run_id}/tell",
        tags=["runs"],
        status_code=202,
        responses=refusals("bad_json", "bad_id", "unknown_run", "finished", "conflict", "busy", "invalid"),
    )
    async def tell_run(run_id: RunId, body: Tell) -> RunSummary:
        """Tell a run something new, or a new constraint: its planner replans with it at the next
        safe point, keeping the work done. A run waiting for a worker hears it when it begins,
        before it plans."""
        _checked_id(run_id, "run_id")
        live = workers.live.get(run_id)
        if live is None and run_id in workers.pending:
            workers.tell_pending(run_id, body.text, constraint=body.constraint, by=ANSWERED_BY)
            pending = workers.pending[run_id]
            return pending_summary(run_id, pending.agent, pending.goal, pending.accepted_at)
        if live is not None and not live.done:  # before its first event too: it is logged right after it
            live.tell(body.text, constraint=body.constraint, by=ANSWERED_BY)
            return await summary_of(run_id)
        early = not_begun(run_id, "tell")
        if early is not None:
            raise early
        log = await run_log(run_id)
        state = await tell(store, run_id, body.text, constraint=body.constraint, by=ANSWERED_BY, log=log)
        idle = state.status == "waiting" and not state.pending_approvals and not workers.busy(run_id)
        if idle and not await _back_to_workers(store, run_id):
            workers.resume(run_id, log)
        return summary(state, agent_of(log[0]))

    @api.post(
        "/v1/runs/{run_id}/fork",
        tags=["runs"],
        status_code=201,
        responses={
            201: {"description": "The new run", "links": RUN_LINKS},
            **refusals("bad_json", "bad_id", "unknown_run", "unknown_agent", "finished", "not_started", "invalid"),
        },
    )
    async def fork_run(run_id: RunId, body: Fork) -> RunSummary:
        """A new run: this one's log replayed up to event ``at`` (no model or tool called), then
        live with the agent (the run's own, or the one named). A run that waits for a worker
        has no event to fork from yet: the request waits a moment for its first ones."""
        _checked_id(run_id, "run_id")
        if run_id in workers.pending:
            await workers.until_stored(run_id)
        early = not_begun(run_id, "fork")
        if early is not None:
            raise early
        log = await run_log(run_id)
        if body.at > len(log):
            raise _ApiError(
                422,
                "invalid",
                "cannot fork the run",
                [
                    Problem(
                        code="at", where="at", message=f"{body.at} must be from 1 to {len(log)} (the events to keep)"
                    )
                ],
            )
        agent = None
        if body.agent is not None:
            agent = agents.get(body.agent)
            if agent is None:
                raise _ApiError(404, "unknown_agent", f"no agent {body.agent!r}")
        new_id = workers.fork(run_id, log, body.at, agent)
        await workers.until_stored(new_id)  # once answered, the new run reads as any stored run
        first = log[0]
        assert isinstance(first, RunStarted)
        name = agent.name if agent is not None else agent_of(first)
        return pending_summary(new_id, name or "", first.goal, time.time())

    @api.post(
        "/v1/runs/{run_id}/questions/{question_id}/answer",
        tags=["questions"],
        responses=refusals(
            *("bad_json", "bad_id", "unknown_run", "unknown_question"),
            *("finished", "no_question", "decided", "conflict", "busy", "invalid"),
        ),
    )
    async def answer_question(run_id: RunId, question_id: QuestionId, body: Answer) -> AnswerResult:
        """Answer a question the run waits for: approve, reject, approve an edited plan (checked
        like any plan), or answer the planner's question. The run then goes on here once it waits
        for nothing else."""
        _checked_id(question_id, "question_id")
        _checked_id(run_id, "run_id")
        if not_stored(run_id) is not None:  # accepted here, not begun: it waits for no answer
            raise _ApiError(
                409,
                "no_question",
                f"cannot answer run {run_id!r}",
                [
                    Problem(
                        code="no_question", where="question_id", message="the run has not begun: it asks nothing yet"
                    )
                ],
            )
        log = await run_log(run_id)
        try:
            rec = pick_question(RunState.fold(log), question_id)
        except UsageError as e:
            if any(p.code == "unknown" for p in e.problems):
                raise _ApiError(
                    404,
                    "unknown_question",
                    f"run {run_id!r} has no question {question_id!r}",
                    [Problem(code="unknown_question", where="question_id", message=p.message) for p in e.problems],
                ) from None
            raise
        decision = _decision(body, rec)
        state = await answer(store, run_id, decision, approval_id=rec.approval_id, log=log)
        resumed = False
        idle = state.status == "waiting" and not state.pending_approvals and not workers.busy(run_id)
        if idle and not await _back_to_workers(store, run_id):
            workers.resume(run_id, log)
            resumed = True
        return AnswerResult(run=summary(state, agent_of(log[0])), resumed=resumed)

    # -- the page ----------------------------------------------------------------------------

    @api.get("/", include_in_schema=False)
    async def page() -> Response:
        index = STATIC / "index.html"
        if not index.is_file():
            raise _ApiError(404, "no_page", "the web page is not installed with this planexec")
        return FileResponse(index, headers={"cache-control": "no-cache"})

    api.mount("/assets", StaticFiles(directory=STATIC / "assets", check_dir=False), name="assets")
    return api


async def _back_to_workers(store: RunStore, run_id: str) -> bool:
    """Whether the run is the workers' (submitted to them and in their hands): it is then given
    back to their queue, never resumed here, even when another answer gave it back already."""
    if await worker_entry(store, run_id) is None:
        return False
    await give_back(store, run_id)
    return True


def _invalid(loc: list[str], kind: str, message: str) -> Problem:
    """A problem validation found, said as the command line says it for budget caps."""
    where = ".".join(loc) or "body"
    if len(loc) >= 2 and loc[-2] == "budget":
        name = loc[-1]
        if name not in BudgetCaps.model_fields:
            message = f"{name!r} is not a budget cap: {', '.join(BudgetCaps.model_fields)}"
        elif name in COUNTED_CAPS:
            message = f"must be a whole number from 0 to {MAX_WHOLE:,}, or null for no cap"
        else:
            message = "must be a finite number, 0 or more, or null for no cap"
    return Problem(code=kind, where=where, message=message)


def _allowed(api: FastAPI, request: Request) -> str:
    """The methods served at the request's path, for the ``Allow`` of a 405: those of every route
    there (a path may have one route for each method); empty for the page's files, whose own
    ``Allow`` stands."""
    methods: set[str] = set()
    for route in api.router.routes:
        route_methods = getattr(route, "methods", None)
        if route_methods and route.matches(request.scope)[0] is not Match.NONE:
            methods.update(route_methods)
    return ", ".join(sorted(methods))


def _is_open(path: str) -> bool:
    """The paths served without the token: the health check and the static page (no data)."""
    return path in ("/", "/healthz") or path.startswith("/assets/")


def _decision(body: Answer, rec: Any) -> ApprovalDecision:
    """The answer the request gives, before it is checked against the run (as the CLI's are)."""
    problems: list[Problem] = []
    subject = rec.subject
    text = body.text
    edited = None
    if body.plan is not None:
        if subject != "plan" or body.decision != "approve":
            problems.append(Problem(code="plan", where="plan", message="only an approved plan can be edited"))
        else:
            try:
                edited = Plan.model_validate(body.plan)
            except pydantic.ValidationError as e:
                for error in e.errors():
                    where = ".".join(str(p) for p in ("plan", *error["loc"]))
                    problems.append(Problem(code="plan", where=where, message=error["msg"]))
    if body.output is not None and body.choice != "done":
        problems.append(
            Problem(code="output", where="output", message="gives a step's output: use it with choice done")
        )
    if body.decision == "answer":
        if subject not in ("question", "escalation"):
            problems.append(
                Problem(
                    code="decision",
                    where="decision",
                    message=f"{rec.approval_id} is about {subject}: approve or reject it",
                )
            )
        if not (text or "").strip():
            problems.append(Problem(code="text", where="text", message="the answer is empty"))
    if body.decision == "reject" and not (text or "").strip():
        problems.append(Problem(code="text", where="text", message="say why the answer is no"))
    if body.budget is not None and (subject != "budget" or body.decision != "approve"):
        problems.append(
            Problem(code="budget", where="budget", message="raises caps only when approving a budget question")
        )
    if subject == "budget" and body.decision == "approve" and (body.budget is None or not body.budget.given()):
        problems.append(Problem(code="budget", where="budget", message='give the caps to raise, e.g. {"cost": 2.5}'))
    checklist: tuple[ChecklistResult, ...] = ()
    if body.checklist is not None:
        if len(body.checklist) != len(rec.checklist):
            problems.append(
                Problem(
                    code="checklist",
                    where="checklist",
                    message=f"give one result for each of the {len(rec.checklist)} items",
                )
            )
        else:
            checklist = tuple(
                ChecklistResult(item=item, passed=given.passed, note=given.note)
                for item, given in zip(rec.checklist, body.checklist, strict=True)
            )
    elif rec.checklist and body.decision == "approve":
        checklist = tuple(ChecklistResult(item=item, passed=True) for item in rec.checklist)
    if problems:
        raise _ApiError(422, "invalid", f"cannot answer {rec.approval_id}", problems)
    if body.decision == "reject":
        return ApprovalDecision(approved=False, reason=text or "", by=ANSWERED_BY, checklist=checklist)
    if body.decision == "answer":
        return ApprovalDecision(
            approved=True, text=text, choice="guidance" if subject == "escalation" else None, by=ANSWERED_BY
        )
    guided = subject == "escalation" and body.choice == "guidance"
    return ApprovalDecision(
        approved=True,
        by=ANSWERED_BY,
        choice=body.choice,
        output=body.output,
        edited_plan=edited,
        text=text if guided or subject == "question" else None,
        reason="" if guided else text or "",
        checklist=checklist,
        budget=caps_from_json(body.budget.given()) if body.budget is not None else None,
    )
