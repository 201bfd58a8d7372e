"""What every route of the API shares: the refusal (:class:`ApiError`) and the one error body
every refusal has, how planexec's errors and the framework's become refusals, the checks of the
ids a request names, and what the routes are given as a dependency (:data:`ServedHere`): the store,
the server's workers and agents, and what is known of a run before the store has it."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar

from fastapi import Depends, FastAPI, Request
from fastapi import Path as InPath
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException
from starlette.routing import Match

from planexec.errors import Problem, StoreError, UsageError
from planexec.log import Event, RunState
from planexec.runs import give_back, load_run, read_run, worker_entry
from planexec.server._agents import ServedAgent
from planexec.server._bodies import COUNTED_CAPS, BudgetCaps
from planexec.server._contract import ID, ID_PATTERN, MAX_WHOLE
from planexec.server._views import RunSummary, agent_of, pending_summary, summary
from planexec.server._workers import Workers
from planexec.store import RunStore

__all__ = [
    "ANSWERED_BY",
    "ApiError",
    "Folds",
    "QuestionId",
    "Routes",
    "RunId",
    "Served",
    "ServedHere",
    "add_error_handlers",
    "checked_id",
    "error_body",
    "from_usage",
]

ANSWERED_BY = "api"
"""Who the log says answered or told a run through the API."""
FOLDS_KEPT = 5_000
"""Runs whose folded state a listing keeps between requests."""

Endpoint = TypeVar("Endpoint", bound=Callable[..., Any])

RunId = Annotated[str, InPath(description="The run's id.", json_schema_extra={"pattern": ID_PATTERN})]
QuestionId = Annotated[str, InPath(description="The question's id.", json_schema_extra={"pattern": ID_PATTERN})]


# -- routes ----------------------------------------------------------------------------------------


class Routes:
    """The routes one module declares (``@routes.get(path, ...)``, as on an app), added to an
    app by :meth:`add_to` in the order declared, each a route of the app itself."""

    def __init__(self) -> None:
        self._declared: list[tuple[str, str, dict[str, Any], Callable[..., Any]]] = []

    def get(self, path: str, **options: Any) -> Callable[[Endpoint], Endpoint]:
        return self._declare("GET", path, options)

    def post(self, path: str, **options: Any) -> Callable[[Endpoint], Endpoint]:
        return self._declare("POST", path, options)

    def _declare(self, method: str, path: str, options: dict[str, Any]) -> Callable[[Endpoint], Endpoint]:
        def declare(endpoint: Endpoint) -> Endpoint:
            self._declared.append((method, path, options, endpoint))
            return endpoint

        return declare

    def add_to(self, api: FastAPI) -> None:
        for method, path, options, endpoint in self._declared:
            api.add_api_route(path, endpoint, methods=[method], **options)


# -- refusals --------------------------------------------------------------------------------------


def error_body(code: str, message: str, problems: Sequence[Problem] = ()) -> dict[str, Any]:
    return {
        "error": {
            "code": code,
            "message": message,
            "problems": [{"where": p.where, "message": p.message, "code": p.code} for p in problems],
        }
    }


class ApiError(Exception):
    """A refusal: the HTTP status, a code programs can test, a message, and every problem found."""

    def __init__(self, status: int, code: str, message: str, problems: Sequence[Problem] = ()) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.problems = tuple(problems)


def checked_id(value: str, what: str) -> str:
    """``value``, when it is a run id or question id the API takes; else refused with 400."""
    if not ID.fullmatch(value):
        message = "must be 1 to 128 characters of A-Z a-z 0-9 . _ : - (not . or ..)"
        raise ApiError(400, "bad_id", f"not a {what}", [Problem(code="bad_id", where=what, message=message)])
    return value


STATUS_OF = {
    "unknown_run": 404,
    "not_a_run": 404,
    "finished": 409,
    "elsewhere": 409,
    "decided": 409,
    "conflict": 409,
    "busy": 409,
}
"""The status of a refusal by the first of its problems' codes found here (422 for none)."""


def from_usage(error: UsageError) -> ApiError:
    """The refusal a :class:`~planexec.UsageError` of the durable operations is."""
    problems = list(error.problems)
    codes = [p.code for p in problems]
    message = str(error.args[0]) if error.args else str(error)
    for code in codes:
        if code in STATUS_OF:
            return ApiError(STATUS_OF[code], code, message, problems)
    return ApiError(422, "invalid", message, problems)


# -- the error handlers ----------------------------------------------------------------------------


def add_error_handlers(api: FastAPI) -> None:
    """Make every refusal of ``api`` the one error body, with the status its code has."""
    api.exception_handler(ApiError)(_on_api_error)
    api.exception_handler(UsageError)(_on_usage_error)
    api.exception_handler(StoreError)(_on_store_error)
    api.exception_handler(RequestValidationError)(_on_invalid)
    api.exception_handler(HTTPException)(_on_http)


async def _on_api_error(_request: Request, e: ApiError) -> Response:
    return JSONResponse(error_body(e.code, e.message, e.problems), status_code=e.status)


async def _on_usage_error(request: Request, e: UsageError) -> Response:
    return await _on_api_error(request, from_usage(e))


async def _on_store_error(_request: Request, e: StoreError) -> Response:
    return JSONResponse(error_body("store", str(e)), status_code=503)


async def _on_invalid(_request: Request, e: RequestValidationError) -> Response:
    problems = []
    malformed = False
    for error in e.errors():
        loc = [str(p) for p in error.get("loc", ()) if p != "body"]
        malformed = malformed or error.get("type") == "json_invalid"
        problems.append(_invalid(loc, str(error.get("type", "invalid")), str(error.get("msg", ""))))
    if malformed:
        return JSONResponse(error_body("bad_json", "the request body is not JSON", problems), status_code=400)
    return JSONResponse(error_body("invalid", "the request does not fit", problems), status_code=422)


async def _on_http(request: Request, e: HTTPException) -> Response:
    # A 400 comes from reading the body: JSON the parser gives up on (nested too deep, say).
    codes = {400: "bad_json", 404: "not_found", 405: "method_not_allowed", 413: "too_large"}
    headers = dict(e.headers or {})
    if e.status_code == 405:
        headers["Allow"] = _allowed(request.app, request) or headers.get("Allow", "")
    return JSONResponse(
        error_body(codes.get(e.status_code, "http"), str(e.detail)), status_code=e.status_code, headers=headers
    )


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


# -- what the routes are given -------------------------------------------------------------------


class Folds:
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


@dataclass(eq=False)
class Served:
    """What one app serves: its store, the workers its runs execute in, its agents by name, and
    the folded states its listings keep."""

    store: RunStore
    workers: Workers
    agents: Mapping[str, ServedAgent]
    folds: Folds = field(init=False)

    def __post_init__(self) -> None:
        self.folds = Folds(self.store)

    async def run_log(self, run_id: str) -> list[Event]:
        """The run's log; refused with 404 when the store has no such run."""
        checked_id(run_id, "run_id")
        try:
            return await load_run(self.store, run_id)
        except UsageError as e:
            if any(p.code == "unknown_run" for p in e.problems):
                raise ApiError(
                    404,
                    "unknown_run",
                    f"no run {run_id!r}",
                    [Problem(code="unknown_run", where="run_id", message=f"no run {run_id!r} in the store")],
                ) from None
            raise

    def not_stored(self, run_id: str) -> RunSummary | None:
        """A run accepted here that is not in the store yet (or could not begin)."""
        pending = self.workers.pending.get(run_id)
        if pending is not None:
            return pending_summary(run_id, pending.agent, pending.goal, pending.accepted_at)
        failed = self.workers.failed_starts.get(run_id)
        if failed is not None:
            first, why = failed
            return pending_summary(run_id, first.agent, first.goal, first.accepted_at, failed=why)
        return None

    def not_begun(self, run_id: str, action: str) -> ApiError | None:
        """Why ``action`` cannot be done yet to a run accepted here that is not in the store (None
        when the run is stored): a run waiting for a worker is known from its 201 on."""
        if run_id in self.workers.pending:
            return ApiError(
                409,
                "not_started",
                f"cannot {action} run {run_id!r} yet",
                [Problem(code="not_started", where="run_id", message="it waits for a worker and has not begun")],
            )
        failed = self.workers.failed_starts.get(run_id)
        if failed is not None:
            return ApiError(
                409,
                "finished",
                f"cannot {action} run {run_id!r}",
                [Problem(code="finished", where="run_id", message=f"it could not begin: {failed[1]}")],
            )
        return None

    async def summary_of(self, run_id: str) -> RunSummary:
        early = self.not_stored(run_id)
        if early is not None:
            return early
        log = await self.run_log(run_id)
        return summary(RunState.fold(log), agent_of(log[0]))

    async def back_to_workers(self, run_id: str) -> bool:
        """Whether the run is the workers' (submitted to them and in their hands): it is then
        given back to their queue, never resumed here, even when another answer gave it back
        already."""
        if await worker_entry(self.store, run_id) is None:
            return False
        await give_back(self.store, run_id)
        return True


async def _served(request: Request) -> Served:
    served: Served = request.app.state.served
    return served


ServedHere = Annotated[Served, Depends(_served)]
"""A route's parameter of this type is given the app's :class:`Served` (it is no part of the
request, nor of the OpenAPI document)."""
