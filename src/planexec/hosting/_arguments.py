"""Tool arguments judged strictly by the input schema each tool publishes.

The SDK validates a tool's arguments leniently: ``true`` is taken for the integer 1, ``"5"`` for 5,
and an argument the tool does not have is dropped without a word. Here the arguments must fit the
schema the tool publishes — with ``additionalProperties: false`` added, so that the schema says
what is refused — or the call is refused with every problem listed at once, each saying where and
what (``limit: must be an integer, not a boolean``). What fits goes on to the SDK unchanged.
"""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from planexec._util.clip import clip
from planexec._util.json_schema import TooCostly, bounded, validator_for
from planexec.errors import Problem, UsageError

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError
    from mcp.server.mcpserver import MCPServer

__all__ = ["MAX_PROBLEMS", "argument_problems", "closed", "strict_server_class"]

_SHOWN_CHARS = 60
"""How much of a refused value a problem quotes."""
MAX_PROBLEMS = 20
"""How many problems a refusal lists one by one."""
MAX_WORK = 20_000
"""Schema keywords one judgement may apply (arguments that fit take a few dozen)."""


def closed(schema: Mapping[str, Any]) -> dict[str, Any]:
    """``schema`` (an object's) saying that no other property is allowed."""
    return {**schema, "additionalProperties": False}


def argument_problems(tool: str, schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> list[Problem]:
    """Everything in ``arguments`` that the input ``schema`` of ``tool`` does not allow; past
    ``MAX_PROBLEMS``, the last problem says that there are more."""
    known = schema.get("properties", {})
    unknown = (name for name in arguments if name not in known)
    found: dict[Problem, None] = {}  # each once, in order
    for name in itertools.islice(unknown, MAX_PROBLEMS + 1):
        message = f"{tool} has no such argument ({_names(known)})"
        found[Problem(code="unknown_argument", where=_path([name]), message=message)] = None
    given = {name: value for name, value in arguments.items() if name in known}
    try:
        with bounded(MAX_WORK):
            for error in _validator(json.dumps(schema)).iter_errors(given):
                if len(found) > MAX_PROBLEMS:
                    break
                found.update(dict.fromkeys(_described(error)))
    except TooCostly:
        found[Problem(code="too_large", where="arguments", message="too large to be judged")] = None
    problems = list(found)
    if len(problems) > MAX_PROBLEMS:
        problems[MAX_PROBLEMS:] = [Problem(code="more", where="", message="and more, not listed")]
    return problems


@functools.lru_cache(maxsize=64)
def _validator(schema_text: str) -> Any:
    return validator_for(_cheap_first(json.loads(schema_text)))


_CHEAP = ("type", "enum", "const", "required", "minItems", "maxItems", "minLength", "maxLength", "maxProperties")
"""Keywords that judge a value at once, whatever its size: applied before those that look inside it."""


def _cheap_first(schema: Any) -> Any:
    """``schema`` with, in each of its objects, the keywords of ``_CHEAP`` first (a validator
    applies keywords in order: a list too long is then said so before its items use up the work)."""
    if isinstance(schema, list):
        return [_cheap_first(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    ordered = {key: _cheap_first(schema[key]) for key in _CHEAP if key in schema}
    ordered.update({key: _cheap_first(value) for key, value in schema.items() if key not in ordered})
    return ordered


def _described(error: ValidationError) -> Iterable[Problem]:
    """``error`` as problems a caller reads: where, and what is wrong in plain words."""
    where = _path(error.absolute_path)
    keyword, limit, value = error.validator, cast(Any, error.validator_value), error.instance
    if keyword == "required":
        for name in limit:
            if isinstance(value, Mapping) and name not in value:
                yield Problem(code="missing_argument", where=_path([*error.absolute_path, name]), message="is required")
        return
    if keyword in ("anyOf", "oneOf") and error.context:
        # The branch of the value's own type says what is wrong (a string outside an enum); when
        # no branch has its type, the value is of none of the types allowed.
        branches: dict[Any, list[ValidationError]] = {}
        for inner in error.context:
            branches.setdefault(inner.relative_schema_path[0], []).append(inner)
        mistyped = {b for b, inner in branches.items() for e in inner if _is_top_type(e)}
        fitting = [inner for b, inner in branches.items() if b not in mistyped]
        if fitting:
            for inner_error in fitting[0]:
                yield from _described(inner_error)
            return
        types = [e.validator_value for inner in branches.values() for e in inner if _is_top_type(e)]
        message = f"must be {_or(t for group in types for t in _as_list(group))}, not {_kind(value)}"
        yield Problem(code="invalid_argument", where=where, message=message)
        return
    yield Problem(code="invalid_argument", where=where, message=_message(keyword, limit, value, error.message))


def _is_top_type(error: ValidationError) -> bool:
    """Whether ``error`` is a branch's own ``type`` refusing the value (not one deeper in)."""
    return error.validator == "type" and len(error.relative_schema_path) == 2


def _message(keyword: Any, limit: Any, value: Any, default: str) -> str:
    match keyword:
        case "type":
            return f"must be {_or(_as_list(limit))}, not {_kind(value)}"
        case "enum":
            return f"{_shown(value)} is not one of {', '.join(_shown(v) for v in limit)}"
        case "minLength" if value == "":
            return "is empty"
        case "minLength":
            return f"has {len(value):,} characters; at least {limit} characters"
        case "maxLength":
            return f"has {len(value):,} characters; at most {limit} characters"
        case "minimum":
            return f"{_shown(value)} is less than {limit}"
        case "maximum":
            return f"{_shown(value)} is more than {limit}"
        case "maxItems":
            return f"has {len(value):,} items; at most {limit}"
        case "minItems":
            return f"has {len(value):,} items; at least {limit}"
        case "additionalProperties":
            return "holds a property not allowed here"
        case _:
            return clip(default, 200)


_TYPE_WORDS = {
    "integer": "an integer",
    "number": "a number",
    "string": "a string",
    "boolean": "a boolean",
    "array": "an array",
    "object": "an object",
    "null": "null",
}


def _as_list(types: Any) -> list[str]:
    return [str(t) for t in types] if isinstance(types, list) else [str(types)]


def _or(types: Iterable[str]) -> str:
    words = list(dict.fromkeys(_TYPE_WORDS.get(t, t) for t in types))
    return " or ".join(words)


def _kind(value: Any) -> str:
    match value:
        case None:
            return "null"
        case bool():
            return "a boolean"
        case int():
            return "an integer"
        case float():
            return "a number"
        case str():
            return "a string"
        case list() | tuple():
            return "an array"
        case _:
            return "an object"


def _shown(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=True)
    except (TypeError, ValueError):
        text = repr(value)
    return clip(text, _SHOWN_CHARS)


def _names(properties: Mapping[str, Any]) -> str:
    return "it takes " + ", ".join(properties) if properties else "it takes none"


def _path(parts: Iterable[Any]) -> str:
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            shown = clip(str(part).encode("ascii", "backslashreplace").decode("ascii"), _SHOWN_CHARS)
            text += f".{shown}" if text else shown
    return text


@functools.cache
def strict_server_class() -> type[MCPServer[Any]]:
    """The SDK's ``MCPServer``, made strict about tool arguments (a class made on first use: the
    ``mcp`` SDK is an optional import)."""
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.types import CallToolResult, InputRequiredResult
    from mcp.types import Tool as ListedTool

    class StrictServer(MCPServer[Any]):
        """An ``MCPServer`` whose tools publish closed input schemas (``additionalProperties:
        false``) and refuse, as a tool error listing every problem, arguments that do not fit
        them: an unknown argument, a boolean for an integer, a string for a number."""

        async def list_tools(self) -> list[ListedTool]:
            return [tool.model_copy(update={"input_schema": closed(tool.input_schema)}) for tool in await self._tools()]

        async def call_tool(
            self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
        ) -> CallToolResult | InputRequiredResult:
            schema = {tool.name: tool.input_schema for tool in await self._tools()}.get(name)
            if schema is not None:
                problems = argument_problems(name, schema, arguments)
                if problems:
                    raise ToolError(str(UsageError(f"cannot call {name}", problems)))
            return await super().call_tool(name, arguments, context)

        async def _tools(self) -> Sequence[ListedTool]:
            return await super().list_tools()

    return StrictServer
