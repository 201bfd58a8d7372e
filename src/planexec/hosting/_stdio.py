"""MCP over this process's stdin and stdout, where every line is judged before the SDK reads it.

The SDK's stdio transport drops a line it cannot read as a JSON-RPC message without a word, so a
client that sent it waits forever. Here each line is checked first; one that is not a message gets
the error JSON-RPC 2.0 prescribes, written through the SDK's own writer, and the next line is
served as usual:

* not JSON (``NaN`` and ``Infinity`` included): ``-32700`` Parse error, ``id`` null;
* JSON that is not one message — a batch (an array), a value that is not an object, an object
  without ``method`` or with a ``method``, ``id`` or ``params`` of the wrong type, text holding a
  lone surrogate or nested deeper than the SDK reads: ``-32600`` Invalid Request, with the
  request's ``id`` when it can be read (a string or an integer), else ``id`` null.

A malformed *response* (an object with ``result`` or ``error``) is answered with ``id`` null: its id
is one of the server's own, not a request of the client's. A blank line is no message and is
skipped.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from io import TextIOWrapper
from typing import IO, TYPE_CHECKING, Any, cast

from planexec._util.clip import clip

if TYPE_CHECKING:
    from mcp.shared.message import SessionMessage

__all__ = ["INVALID_REQUEST", "PARSE_ERROR", "Refusal", "checked_stdio", "judge"]

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
_REASON_CHARS = 200
"""How much of a parser's complaint an error message quotes."""

RequestId = str | int


@dataclass(frozen=True, slots=True)
class Refusal:
    """The JSON-RPC error a line that is not a message is answered with."""

    id: RequestId | None
    code: int
    message: str

    def wire(self) -> dict[str, Any]:
        """The error response, as JSON data."""
        return {"jsonrpc": "2.0", "id": self.id, "error": {"code": self.code, "message": self.message}}


def judge(line: str) -> Refusal | None:
    """None when ``line`` is one JSON-RPC message the SDK reads; else the error to answer it with."""
    import pydantic_core

    try:
        value = pydantic_core.from_json(line, allow_inf_nan=False)
    except ValueError as e:
        return _unreadable(line, str(e))
    if isinstance(value, list):
        return _invalid(None, ["a batch (a JSON array) is not accepted: send each message on a line of its own"])
    if not isinstance(value, dict):
        return _invalid(None, [f"a message is a JSON object, not {_kind(value)}"])
    problems = _problems(value)
    if not problems:
        from mcp.types import jsonrpc_message_adapter
        from pydantic import ValidationError

        try:
            jsonrpc_message_adapter.validate_python(value, by_name=False)
        except ValidationError:
            problems = ["it is not a JSON-RPC request, notification or response"]
    return _invalid(_readable_id(value), problems) if problems else None


def _problems(message: dict[str, Any]) -> list[str]:
    """What makes ``message`` no JSON-RPC 2.0 message, each thing at once."""
    problems = []
    if message.get("jsonrpc") != "2.0":
        problems.append('jsonrpc must be "2.0"')
    if "method" in message:
        if not isinstance(message["method"], str):
            problems.append("method must be a string")
        if "id" in message and not _is_id(message["id"]):
            problems.append(f"id must be a string or an integer, not {_kind(message['id'])}")
        if message.get("params") is not None and not isinstance(message["params"], dict):
            problems.append(f"params must be an object, not {_kind(message['params'])}")
    elif "result" not in message and "error" not in message:
        problems.append("method is missing")
    return problems


def _unreadable(line: str, reason: str) -> Refusal:
    """The refusal of a line the SDK's parser cannot read: a parse error, unless the line is JSON
    by its grammar (a lone surrogate, nesting deeper than the SDK reads), when its id may be kept."""
    try:
        value = json.loads(line, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        return Refusal(id=None, code=PARSE_ERROR, message=f"Parse error: the line is not JSON ({_reason(reason)})")
    ident = _readable_id(value) if isinstance(value, dict) else None
    return _invalid(ident, [f"the message cannot be read ({_reason(reason)})"])


def _invalid(ident: RequestId | None, problems: list[str]) -> Refusal:
    return Refusal(id=ident, code=INVALID_REQUEST, message="Invalid Request: " + "; ".join(problems))


def _readable_id(message: dict[str, Any]) -> RequestId | None:
    """The id of a request, to answer it by; None for a response or an id that is not one."""
    if "method" not in message and ("result" in message or "error" in message):
        return None
    ident = message.get("id")
    return ident if _is_id(ident) else None


def _is_id(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    if not isinstance(value, str):
        return False
    try:
        value.encode("utf-8")  # a lone surrogate cannot be written back
    except UnicodeEncodeError:
        return False
    return True


def _kind(value: Any) -> str:
    match value:
        case None:
            return "null"
        case bool():
            return "a boolean"
        case int() | float():
            return "a number"
        case str():
            return "a string"
        case list():
            return "an array"
        case _:
            return "an object"


def _reason(text: str) -> str:
    return clip(text.encode("ascii", "backslashreplace").decode("ascii"), _REASON_CHARS)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# -- the transport --------------------------------------------------------------------------------------


class _Unowned(TextIOWrapper):
    """A text layer whose closing leaves the stream beneath it open (it is not this layer's)."""

    def close(self) -> None:
        with contextlib.suppress(ValueError):
            self.detach()


@contextlib.contextmanager
def _wire_stdin() -> Iterator[IO[bytes]]:
    """The bytes of this process's stdin; meanwhile file descriptor 0 reads the null device, so
    that a child process cannot take the protocol's input (put back on the way out).

    The duplicate read from is never closed: a thread may still be blocked reading it."""
    try:
        backed = sys.stdin.buffer.fileno() == 0
    except (AttributeError, OSError, ValueError):  # stdin replaced (in a test), or not a file
        backed = False
    if not backed:
        yield sys.stdin.buffer
        return
    wire = os.dup(0)  # not inherited by child processes (PEP 446)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
    finally:
        os.close(null)
    try:
        yield os.fdopen(wire, "rb", closefd=False)
    finally:
        os.dup2(wire, 0)


class _Answers:
    """Where refusals are written: the SDK's write stream, once it is known."""

    def __init__(self) -> None:
        import anyio

        self._ready = anyio.Event()
        self._stream: Any = None

    def attach(self, stream: Any) -> None:
        self._stream = stream
        self._ready.set()

    async def send(self, refusal: Refusal) -> None:
        import anyio
        from mcp.shared.message import SessionMessage
        from mcp.types import JSONRPCError

        await self._ready.wait()
        message: SessionMessage = SessionMessage(JSONRPCError.model_validate(refusal.wire()))
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):  # the server has stopped
            await self._stream.send(message)


async def _checked(lines: Any, answers: _Answers) -> AsyncIterator[str]:
    """The lines of ``lines`` that are messages; every other one is answered with its refusal."""
    async for line in lines:
        if not line.strip():
            continue
        refusal = judge(line)
        if refusal is None:
            yield line
        else:
            await answers.send(refusal)


@contextlib.asynccontextmanager
async def checked_stdio() -> AsyncIterator[tuple[Any, Any]]:
    """The SDK's stdio transport (its read and write streams), reading only lines judged to be
    messages; the others are answered with their error there and then."""
    import anyio
    from mcp.server.stdio import stdio_server

    answers = _Answers()
    with _wire_stdin() as wire:
        lines = anyio.wrap_file(_Unowned(wire, encoding="utf-8", errors="replace"))
        stdin = cast("anyio.AsyncFile[str]", _checked(lines, answers))  # the SDK only iterates over it
        async with stdio_server(stdin=stdin) as (read_stream, write_stream):
            answers.attach(write_stream)
            yield read_stream, write_stream
