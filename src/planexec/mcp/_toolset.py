"""An MCP server's tools as planexec tools: listed once, called over one held connection.

The connection lives in a task of its own (the SDK's client must be entered and left in one
task), started by ``open`` (or ``async with``) and ended by ``close``. A call waits for the
connection, sends the validated arguments, and maps the result: structured content when the tool
gives it, else its text (one text block as it is, several joined), else the content blocks as
JSON; ``is_error`` is a :class:`~planexec.errors.ToolError` (the step fails and the planner sees
the server's words). A connection that dies fails the calls under way with a
:class:`~planexec.errors.TransientToolError` (retried by the tool's retry policy) and is opened
again by the next call. A hung call ends at the tool's timeout, and the MCP request is cancelled.

Annotations map onto planexec's safety model (MCP's defaults when a hint is absent: not read
only, destructive, not idempotent):

* ``readOnlyHint`` → a read step (no side effect: re-runnable, parallel-safe);
* otherwise a write step; ``destructiveHint`` → ``sensitive`` (the approval gates for sensitive
  tools apply);
* ``idempotentHint`` → ``idempotent`` (safe to send again with the same key after a crash).

:class:`MCPTool` overrides any of them per tool. Write tools are sent the step's idempotency key
in the request's ``_meta`` (``dev.planexec/idempotency-key``).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from planexec._util.clip import clip
from planexec.errors import Problem, ToolDefinitionError, ToolError, TransientToolError, UsageError
from planexec.mcp._servers import MCPHttp, MCPStdio
from planexec.tools import RetryPolicy, Tool, ToolContext

__all__ = ["IDEMPOTENCY_META_KEY", "MCPTool", "MCPToolset"]

IDEMPOTENCY_META_KEY = "dev.planexec/idempotency-key"
"""Where a write tool's request carries the step's idempotency key, in ``_meta``."""

_TRACE_CONTEXT = TraceContextTextMapPropagator()
"""A traced call's context goes in the request's ``_meta`` as ``traceparent`` (and ``tracestate``),
where MCP servers that trace look for it."""

_NAME = re.compile(r"[^A-Za-z0-9_.-]")


@dataclass(frozen=True, kw_only=True, slots=True)
class MCPTool:
    """What the developer says about one MCP tool, over what its annotations say (None: keep)."""

    read_only: bool | None = None
    destructive: bool | None = None
    idempotent: bool | None = None
    requires_approval: bool | None = None
    timeout: float | None = None
    retry: RetryPolicy | None = None
    trusted: bool | None = None
    """The server's output for this tool is trusted (see :mod:`planexec.trust`); by default it is not."""


@dataclass(kw_only=True)
class MCPToolset:
    """The tools of one MCP server. ``async with MCPToolset(server) as tools:`` connects and lists
    them; iterate it (or pass it in an agent's ``tools``) to use them.

    ``server``: :class:`MCPStdio`, :class:`MCPHttp`, or an in-process server object of the
    ``mcp`` SDK (for tests). ``prefix`` goes before each tool's name (to keep two servers' tools
    apart); ``tools``: per-tool overrides by the server's tool name; ``only``: keep just these
    tools; ``timeout``: seconds a call may take unless overridden (None: no limit);
    ``connect_timeout``: seconds to connect and list the tools."""

    server: MCPStdio | MCPHttp | Any
    prefix: str = ""
    tools: Mapping[str, MCPTool] = field(default_factory=dict)
    only: tuple[str, ...] | None = None
    timeout: float | None = 60.0
    connect_timeout: float = 30.0
    _listed: tuple[Tool, ...] = field(default=(), init=False, repr=False)
    _client: Any = field(default=None, init=False, repr=False)
    _holder: asyncio.Task[None] | None = field(default=None, init=False, repr=False)
    _closing: asyncio.Event | None = field(default=None, init=False, repr=False)
    _lock: asyncio.Lock | None = field(default=None, init=False, repr=False)
    _names: dict[str, str] = field(default_factory=dict, init=False, repr=False)
    _listed_once: bool = field(default=False, init=False, repr=False)
    _asked: int = field(default=0, init=False, repr=False)
    _refresher: asyncio.Task[None] | None = field(default=None, init=False, repr=False)
    changed: bool = field(default=False, init=False)
    """The server said its tools changed (``tools/list_changed``) and they have not been listed
    again since (they are, in the background, as soon as it says so)."""

    def __post_init__(self) -> None:
        problems = []
        if not isinstance(self.prefix, str) or _NAME.search(self.prefix):
            problems.append(Problem(code="mcp", where="prefix", message="letters, digits, _ - and . only"))
        if self.timeout is not None and not self.timeout > 0:
            problems.append(Problem(code="mcp", where="timeout", message="must be positive, or None"))
        if not self.connect_timeout > 0:
            problems.append(Problem(code="mcp", where="connect_timeout", message="must be positive"))
        for name, override in dict(self.tools).items():
            if not isinstance(override, MCPTool):
                problems.append(Problem(code="mcp", where=f"tools.{name}", message="must be an MCPTool(...)"))
        if problems:
            raise UsageError("invalid MCP toolset", problems)

    # -- lifecycle ------------------------------------------------------------------------------

    async def __aenter__(self) -> MCPToolset:
        await self.open()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    async def open(self) -> None:
        """Connect and list the tools (again, when the server said they changed)."""
        await self._connected()
        await self.refresh()

    async def refresh(self) -> None:
        """List the server's tools again."""
        asked = self._asked
        client = await self._connected()
        listed: list[Any] = []
        cursor: str | None = None
        for _ in range(100):  # a server that pages forever is cut off
            try:
                page = await asyncio.wait_for(
                    client.list_tools(cursor=cursor, cache_mode="refresh"), self.connect_timeout
                )
            except TimeoutError:
                raise TransientToolError(
                    f"the MCP server {self._label} did not list its tools within {self.connect_timeout:g} s"
                ) from None
            except Exception as e:
                if _is_connection_error(e):
                    raise TransientToolError(f"the MCP server {self._label} went away: {_why(e)}") from None
                raise await self._unreadable(client, cursor, e) from None
            listed += page.tools
            cursor = page.next_cursor
            if cursor is None:
                break
        tools, names, problems = [], {}, []
        for spec in listed:
            if self.only is not None and spec.name not in self.only:
                continue
            try:
                made = self._tool(spec)
            except ToolDefinitionError as e:
                problems += [
                    Problem(code=p.code, where=f"{spec.name}: {p.where}", message=p.message) for p in e.problems
                ]
                continue
            if made.name in names:
                problems.append(Problem(code="mcp", where=made.name, message="two tools have this name"))
                continue
            names[made.name] = spec.name
            tools.append(made)
        if problems:
            raise ToolDefinitionError(f"the MCP server {self._label} offers tools planexec cannot use", problems)
        self._listed, self._names, self._listed_once = tuple(tools), names, True
        self.changed = self._asked != asked  # said again while listing: list once more

    async def _unreadable(self, client: Any, cursor: str | None, error: Exception) -> ToolDefinitionError:
        """A listing the SDK could not read (a tool that breaks the protocol's own schema, such as
        an input schema that is not an object): every problem, each under its tool's name when
        the raw listing says it."""
        import pydantic

        summary = f"the MCP server {self._label} sent a tool listing planexec cannot read"
        if not isinstance(error, pydantic.ValidationError):
            return ToolDefinitionError(summary, [Problem(code="mcp", where="tools/list", message=_why(error))])
        names = await self._raw_names(client, cursor)
        problems = []
        for found in error.errors()[:20]:
            loc = list(found.get("loc", ()))
            where = "tools/list"
            if len(loc) >= 2 and loc[0] == "tools" and isinstance(loc[1], int):
                index = loc[1]
                tool = names[index] if index < len(names) else f"tool {index + 1} of the listing"
                where = ": ".join(x for x in (tool, ".".join(map(str, loc[2:]))) if x)
            problems.append(Problem(code="mcp", where=where, message=clip(str(found.get("msg", "")), 300)))
        return ToolDefinitionError(summary, problems)

    async def _raw_names(self, client: Any, cursor: str | None) -> list[str]:
        """The tools' names as the server sent them, read as plain JSON (for error messages only:
        the SDK has no public way to a listing it cannot read, so none is named when this fails)."""
        send = getattr(getattr(client.session, "_dispatcher", None), "send_raw_request", None)
        if send is None:
            return []
        try:
            params = {"cursor": cursor} if cursor is not None else None
            raw = await asyncio.wait_for(send("tools/list", params, {}), self.connect_timeout)
        except Exception:
            return []
        tools = raw.get("tools") if isinstance(raw, dict) else None
        if not isinstance(tools, list):
            return []
        return [clip(str(t.get("name")), 80) if isinstance(t, dict) else "?" for t in tools]

    async def close(self) -> None:
        """End the connection (the server process, for stdio, is stopped)."""
        refresher, self._refresher = self._refresher, None
        if refresher is not None and not refresher.done():
            refresher.cancel()
            with contextlib.suppress(BaseException):
                await refresher
        holder, self._holder = self._holder, None
        if holder is None:
            return
        if self._closing is not None:
            self._closing.set()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(asyncio.shield(holder), 10)
        if not holder.done():
            holder.cancel()
            with contextlib.suppress(BaseException):
                await holder
        self._client = None
        self._listed_once = False

    @property
    def is_open(self) -> bool:
        """Whether the tools have been listed and the toolset not closed since."""
        return self._holder is not None and bool(self._names or self._listed_once)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._listed)

    def __len__(self) -> int:
        return len(self._listed)

    @property
    def label(self) -> str:
        """The server, as messages name it (a command line or a URL)."""
        return self._label

    @property
    def _label(self) -> str:
        label = getattr(self.server, "label", None)
        return clip(label, 160) if isinstance(label, str) else type(self.server).__name__

    async def _connected(self) -> Any:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._client is not None and self._holder is not None and not self._holder.done():
                return self._client
            ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            self._closing = asyncio.Event()
            self._holder = asyncio.create_task(self._hold(ready, self._closing), name=f"mcp:{self._label}")
            try:
                self._client = await asyncio.wait_for(asyncio.shield(ready), self.connect_timeout)
            except TimeoutError:
                self._holder.cancel()
                raise TransientToolError(
                    f"the MCP server {self._label} did not answer within {self.connect_timeout:g} s"
                ) from None
            return self._client

    async def _drop(self, client: Any) -> None:
        """Give up a connection that died (once, however many calls saw it die): the next call
        opens a new one."""
        assert self._lock is not None
        async with self._lock:
            if self._client is not client:
                return
            self._client = None
            holder, self._holder = self._holder, None
            if self._closing is not None:
                self._closing.set()
        if holder is not None:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(holder, 10)

    async def _hold(self, ready: asyncio.Future[Any], closing: asyncio.Event) -> None:
        from mcp import Client

        target = self.server.target() if isinstance(self.server, MCPStdio | MCPHttp) else self.server
        try:
            async with Client(target, message_handler=self._on_message) as client:
                if not ready.done():
                    ready.set_result(client)
                listener = asyncio.create_task(self._listen(client), name=f"mcp-listen:{self._label}")
                try:
                    await closing.wait()
                finally:
                    listener.cancel()
                    with contextlib.suppress(BaseException):
                        await listener
        except BaseException as e:  # the connection ended: calls under way fail, the next reconnects
            if not ready.done():
                ready.set_exception(TransientToolError(f"cannot connect to the MCP server {self._label}: {_why(e)}"))
            if isinstance(e, asyncio.CancelledError):
                raise
        finally:
            if self._holder is asyncio.current_task():
                self._client = None

    async def _listen(self, client: Any) -> None:
        """On a connection of the 2026-07-28 protocol, changes to the tools come on a listen
        stream (older servers send the notification unasked: ``_on_message``)."""
        from mcp.client.subscriptions import ListenNotSupportedError

        try:
            async with client.listen(tools_list_changed=True) as changes:
                async for _event in changes:
                    self._said_changed()
        except ListenNotSupportedError:
            return
        except Exception:  # a server that cannot listen still serves its tools
            return

    async def _on_message(self, message: Any) -> None:
        method = getattr(getattr(message, "root", message), "method", None)
        if method == "notifications/tools/list_changed":
            self._said_changed()

    def _said_changed(self) -> None:
        """The server said its tools changed: list them again in the background, so that the
        next planning round of a run sees them (``changed`` stays set if listing fails: the next
        ``open`` tries again, and says why)."""
        self._asked += 1
        self.changed = True
        if self._refresher is None or self._refresher.done():
            self._refresher = asyncio.create_task(self._relist(), name=f"mcp-relist:{self._label}")

    async def _relist(self) -> None:
        while self.changed and self._holder is not None:
            try:
                await self.refresh()
            except Exception:
                return

    async def _settled(self) -> None:
        """Wait (a while) for a listing under way: a call that changed the server's tools returns
        once they are listed again, so the planner's next round sees them."""
        await asyncio.sleep(0)  # let a notification that came with the result be handled
        refresher = self._refresher
        if refresher is not None and not refresher.done():
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(asyncio.shield(refresher), self.connect_timeout)

    # -- tools ----------------------------------------------------------------------------------

    def _tool(self, spec: Any) -> Tool:
        override = self.tools.get(spec.name, MCPTool())
        hints = spec.annotations
        read_only = _pick(override.read_only, getattr(hints, "read_only_hint", None), False)
        destructive = _pick(override.destructive, getattr(hints, "destructive_hint", None), not read_only)
        idempotent = _pick(override.idempotent, getattr(hints, "idempotent_hint", None), read_only)
        name = self.prefix + _NAME.sub("_", spec.name)
        timeout = override.timeout if override.timeout is not None else self.timeout
        remote = spec.name

        async def invoke(args: dict[str, Any], ctx: ToolContext) -> Any:
            return await self._call(remote, args, ctx, write=not read_only, read_timeout=timeout)

        description = " ".join((spec.description or spec.title or f"the MCP tool {remote}").split())
        return Tool(
            name=name,
            description=description,
            parameters=spec.input_schema or {"type": "object"},
            invoke=invoke,
            output_schema=spec.output_schema,
            timeout=timeout,
            retry=override.retry or RetryPolicy(),
            side_effect=not read_only,
            sensitive=not read_only and destructive,
            idempotent=idempotent,
            requires_approval=bool(override.requires_approval),
            trusted=bool(override.trusted),
        )

    async def _call(
        self, remote: str, args: dict[str, Any], ctx: ToolContext, *, write: bool, read_timeout: float | None
    ) -> Any:
        client = await self._connected()
        meta: dict[str, Any] = {IDEMPOTENCY_META_KEY: ctx.idempotency_key} if write else {}
        _TRACE_CONTEXT.inject(meta)  # the call's span, when traced: the server's spans join the trace
        try:
            result = await client.call_tool(
                remote, args, read_timeout_seconds=read_timeout, progress_callback=_progress_of(ctx), meta=meta or None
            )
        except asyncio.CancelledError:
            raise
        except Exception as e:
            if self._holder is None or self._holder.done() or _is_connection_error(e):
                await self._drop(client)
                raise TransientToolError(f"the MCP server {self._label} went away during the call: {_why(e)}") from None
            if isinstance(e, RuntimeError) and "structured content" in str(e):  # the SDK checked the result
                raise ToolError(
                    f"the MCP server {self._label} answered {remote} with a result that does not fit the output "
                    f"schema it declared: {clip(str(e), 500)}"
                ) from None
            raise ToolError(f"the MCP server {self._label} refused the call: {_why(e)}") from None
        await self._settled()
        return _output(result)


def _progress_of(ctx: ToolContext) -> Any:
    """The call's progress notifications, passed on to the run (``ToolContext.report``)."""

    async def progress(done: float, total: float | None, message: str | None) -> None:
        ctx.report(done, total, message)

    return progress


def _pick(override: bool | None, hint: bool | None, default: bool) -> bool:
    if override is not None:
        return override
    return hint if isinstance(hint, bool) else default


def _output(result: Any) -> Any:
    blocks = list(result.content or [])
    texts = [b.text for b in blocks if getattr(b, "type", None) == "text"]
    if result.is_error:
        said = " ".join(texts) or "no reason given"
        raise ToolError(clip(said, 2_000))
    if result.structured_content is not None:
        return result.structured_content
    if len(texts) == len(blocks):
        return texts[0] if len(texts) == 1 else "\n".join(texts)
    return [b.model_dump(mode="json", by_alias=True, exclude_none=True) for b in blocks]


def _is_connection_error(error: BaseException) -> bool:
    import anyio
    from mcp import MCPError
    from mcp.types import CONNECTION_CLOSED

    closed = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, ConnectionError, EOFError)
    if isinstance(error, MCPError):
        return error.code == CONNECTION_CLOSED
    return isinstance(error, closed)


def _why(error: BaseException) -> str:
    if isinstance(error, BaseExceptionGroup):
        first = error.exceptions[0] if error.exceptions else error
        return _why(first)
    return clip(f"{type(error).__name__}: {error}", 300)
