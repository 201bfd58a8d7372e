"""``@tool``: a Python function (sync or async) made into a tool value.

The schema is built in four steps:
1. read the signature and the resolved type hints;
2. read the docstring: the first paragraph describes the tool, an ``Args:`` section (Google
   style) or ``:param name:`` lines (reST) describe the parameters;
3. make a pydantic model with one field per parameter (a ``ToolContext`` parameter is left out
   and passed in at call time), forbidding unknown arguments;
4. take the JSON Schema of that model as the tool's ``parameters``, and a type adapter of the
   return annotation as the output check.

The decorator returns the tool and registers nothing anywhere.
"""

from __future__ import annotations

import functools
import inspect
import re
import typing
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, get_type_hints, overload

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, create_model
from pydantic_core import to_jsonable_python

from planexec._util.strict_json import json_problem
from planexec.errors import Problem, ToolDefinitionError
from planexec.tools._threads import run_in_thread
from planexec.tools._tool import ArgsValidator, OutputNotJSON, RetryPolicy, Tool, ToolContext
from planexec.trust import ArgumentRule

__all__ = ["tool"]

F = TypeVar("F", bound=Callable[..., Any])

_JSON_PRIMITIVES = (str, int, float, bool, type(None))


def _parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    if not doc:
        return "", {}
    text = inspect.cleandoc(doc)
    params: dict[str, str] = {}
    for m in re.finditer(r"^:param\s+(?:\w+\s+)?(\w+):\s*(.+)$", text, re.MULTILINE):
        params[m.group(1)] = m.group(2).strip()
    section = re.search(r"^(?:Args|Arguments|Parameters):\s*$", text, re.MULTILINE)
    if section:
        current: str | None = None
        for line in text[section.end() :].splitlines()[1:]:
            if not line.strip():
                continue
            if not line.startswith((" ", "\t")):
                break
            item = re.match(r"^\s+(\w+)(?:\s*\([^)]*\))?\s*:\s*(.*)$", line)
            if item and (current is None or len(line) - len(line.lstrip()) <= 4):
                current = item.group(1)
                params[current] = item.group(2).strip()
            elif current is not None:
                params[current] = f"{params[current]} {line.strip()}".strip()
    summary = re.split(r"\n\s*\n|^(?:Args|Arguments|Parameters|Returns|Raises):", text, maxsplit=1, flags=re.MULTILINE)[
        0
    ]
    summary = re.sub(r"^:param.*$", "", summary, flags=re.MULTILINE)
    return " ".join(summary.split()), params


def _to_json(value: Any) -> Any:
    """``value`` as JSON data, converted where need be (tuples, dates, models, sets …). NaN and
    infinities are kept (never turned into null), so that the run refuses them with an error that
    says so; a dictionary key that is not a string is refused rather than turned into one (two keys
    could become the same and one value be lost)."""
    if type(value) in _JSON_PRIMITIVES:
        return value
    if json_problem(value, max_chars=None) is not None:  # not plain JSON data: look at its keys first
        key = _key_not_text(value)
        if key is not None:
            raise OutputNotJSON(f"the dictionary key {key!r} ({type(key).__name__}) is not a string")
    try:
        return to_jsonable_python(value, inf_nan_mode="constants")
    except Exception as e:  # no JSON form, or nested too deep to convert
        raise OutputNotJSON(f"{type(e).__name__}: {e}") from None


def _key_not_text(value: Any) -> object | None:
    """The first dictionary key in ``value`` that is not a string (plain containers only), or None."""
    stack = [value]
    seen = 0
    while stack and seen < 1_000_000:
        item = stack.pop()
        seen += 1
        if isinstance(item, dict):
            for key, member in item.items():
                if not isinstance(key, str):
                    found: object = key
                    return found
                stack.append(member)
        elif isinstance(item, list | tuple | set | frozenset):
            stack.extend(item)
    return None


_TYPES_THAT_WORK = (
    "str, int, float, bool, None, lists and dicts of them, Literal, an Enum, a dataclass, a TypedDict "
    "or a pydantic model"
)


def _type_name(annotation: Any) -> str:
    if not isinstance(annotation, type):
        return repr(annotation).replace("typing.", "")
    if annotation.__module__ == "builtins":
        return annotation.__qualname__
    return f"{annotation.__module__}.{annotation.__qualname__}"


def _has_schema(annotation: Any) -> bool:
    try:
        TypeAdapter(annotation).json_schema()
    except Exception:
        return False
    return True


def _type_problem(where: str, annotation: Any, consequence: str) -> Problem:
    return Problem(
        code="tool_type",
        where=where,
        message=f"{_type_name(annotation)} has no JSON Schema, so {consequence}; use {_TYPES_THAT_WORK}",
    )


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _build(
    fn: Callable[..., Any],
    *,
    name: str | None,
    description: str | None,
    timeout: float | None,
    retry: RetryPolicy | None,
    max_concurrency: int | None,
    side_effect: bool,
    sensitive: bool,
    idempotent: bool,
    requires_approval: bool,
    trusted: bool = False,
    argument_rules: Mapping[str, ArgumentRule] | None = None,
) -> Tool:
    tool_name = name or fn.__name__
    where = f"tool {tool_name!r}"
    hints = _read_hints(fn, tool_name, where)  # 1
    summary, param_docs = _parse_docstring(fn.__doc__)  # 2
    problems: list[Problem] = []
    if not (description or "").strip() and not summary:
        problems.append(
            Problem(
                code="tool_description",
                where=where,
                message="has no description, and the planner chooses tools by theirs: "
                "write a docstring that says what it does, or pass description=",
            )
        )
    params = _read_parameters(fn, hints, param_docs, where, problems)
    output_adapter, output_schema = _read_output(hints.get("return", Any), where, problems)  # 4
    args_model, parameters = _arguments_model(tool_name, where, params.fields, problems)  # 3, 4
    if problems or args_model is None:
        raise ToolDefinitionError(f"cannot make {tool_name!r} a tool", problems)
    return Tool(
        name=tool_name,
        description=(description or "").strip() or summary,
        parameters=parameters,
        invoke=_invoker(fn, params),
        output_schema=output_schema,
        timeout=timeout,
        retry=retry or RetryPolicy(),
        max_concurrency=max_concurrency,
        side_effect=side_effect,
        sensitive=sensitive,
        idempotent=idempotent,
        requires_approval=requires_approval,
        trusted=trusted,
        argument_rules=argument_rules if argument_rules is not None else {},
        validator=_validator(args_model, tuple(params.fields)),
        output_validator=_output_check(output_adapter),
    )


def _read_hints(fn: Callable[..., Any], tool_name: str, where: str) -> dict[str, Any]:
    """Step 1: the function's resolved type hints."""
    try:
        return get_type_hints(fn, include_extras=True)
    except Exception as e:
        raise ToolDefinitionError(
            f"cannot read the type hints of {tool_name!r}",
            [Problem(code="tool_hints", where=where, message=str(e))],
        ) from e


@dataclass(slots=True)
class _Parameters:
    """What the signature says: a field per argument, and how the function takes the rest."""

    fields: dict[str, Any] = field(default_factory=dict)
    """Each argument's annotation and pydantic ``Field``, by name."""
    context: str | None = None
    """The parameter that takes the ``ToolContext``, if one does."""
    positional: list[str] = field(default_factory=list)
    """The positional-only parameters, in order."""


def _read_parameters(
    fn: Callable[..., Any], hints: Mapping[str, Any], docs: Mapping[str, str], where: str, problems: list[Problem]
) -> _Parameters:
    """Step 3's fields: one per parameter (a ``ToolContext`` left out); what cannot be one is a problem."""
    params = _Parameters()
    for pname, param in inspect.signature(fn).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            stars = "*" if param.kind is param.VAR_POSITIONAL else "**"
            problems.append(
                Problem(
                    code="tool_signature",
                    where=f"{where} parameter {stars}{pname}",
                    message="a tool's arguments are named, typed parameters (its JSON Schema lists them): "
                    f"replace {stars}{pname} with one parameter per argument",
                )
            )
            continue
        annotation = hints.get(pname)
        if annotation is ToolContext or ToolContext in typing.get_args(annotation):
            params.context = pname
            continue
        if param.kind is param.POSITIONAL_ONLY:
            params.positional.append(pname)
        if annotation is None:
            problems.append(
                Problem(code="tool_signature", where=where, message=f"parameter {pname!r} needs a type hint")
            )
            continue
        default = ... if param.default is inspect.Parameter.empty else param.default
        params.fields[pname] = (annotation, Field(default, description=docs.get(pname)))
    return params


def _read_output(
    returns: Any, where: str, problems: list[Problem]
) -> tuple[TypeAdapter[Any] | None, dict[str, Any] | None]:
    """Step 4, for the output: a type adapter of the return annotation and its JSON Schema (None
    when the function returns anything, or the type has no schema)."""
    if returns in (Any, None, type(None)):
        return None, None
    try:
        adapter: TypeAdapter[Any] = TypeAdapter(returns)
    except Exception:
        problems.append(_type_problem(f"{where} return type", returns, "the tool's output cannot be checked"))
        return None, None
    try:
        return adapter, adapter.json_schema()
    except Exception:
        return adapter, None


def _arguments_model(
    tool_name: str, where: str, fields: dict[str, Any], problems: list[Problem]
) -> tuple[type[BaseModel] | None, dict[str, Any]]:
    """Steps 3 and 4, for the arguments: the pydantic model that forbids unknown ones, and its JSON
    Schema as the tool's ``parameters``."""
    try:
        model = create_model(f"{tool_name}_args", __config__=ConfigDict(extra="forbid"), **fields)
        parameters = model.model_json_schema()
    except Exception as e:
        found = [
            _type_problem(f"{where} parameter {pname!r}", annotation, "the planner cannot be told what to pass")
            for pname, (annotation, _) in fields.items()
            if not _has_schema(annotation)
        ]
        problems += found or [
            Problem(code="tool_schema", where=where, message=f"its parameters have no JSON Schema: {_first_line(e)}")
        ]
        return None, {}
    parameters.pop("title", None)
    return model, parameters


def _validator(arguments: type[BaseModel], names: tuple[str, ...]) -> ArgsValidator:
    def validate(args: Mapping[str, Any]) -> tuple[dict[str, Any] | None, list[Problem]]:
        try:
            model = arguments.model_validate(args)
        except ValidationError as e:
            return None, [
                Problem(
                    code="invalid_argument",
                    where=".".join(str(p) for p in err["loc"]),
                    message=err["msg"],
                )
                for err in e.errors(include_url=False)
            ]
        return {k: getattr(model, k) for k in names}, []

    return validate


def _output_check(output_adapter: TypeAdapter[Any] | None) -> Callable[[Any], Any]:
    def check_output(output: Any) -> Any:
        if output_adapter is None:
            return _to_json(output)
        try:
            value = output_adapter.validate_python(output)
        except ValidationError as e:
            raise ValueError(str(e)) from None
        return _to_json(value)

    return check_output


def _invoker(fn: Callable[..., Any], params: _Parameters) -> Callable[[dict[str, Any], ToolContext], Awaitable[Any]]:
    is_async = inspect.iscoroutinefunction(fn)
    context_param = params.context
    positional = tuple(params.positional)

    async def invoke(args: dict[str, Any], ctx: ToolContext) -> Any:
        if is_async and context_param is None and not positional:
            return await fn(**args)  # the common case, kept short: it runs for every call
        kwargs = dict(args)
        if context_param is not None:
            kwargs[context_param] = ctx
        leading = [kwargs.pop(name) for name in positional]
        if is_async:
            return await fn(*leading, **kwargs)
        return await run_in_thread(functools.partial(fn, *leading, **kwargs))  # in a copy of the context

    return invoke


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    retry: RetryPolicy | None = None,
    max_concurrency: int | None = None,
    side_effect: bool = False,
    sensitive: bool = False,
    idempotent: bool = False,
    requires_approval: bool = False,
    trusted: bool = False,
    argument_rules: Mapping[str, ArgumentRule] | None = None,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    retry: RetryPolicy | None = None,
    max_concurrency: int | None = None,
    side_effect: bool = False,
    sensitive: bool = False,
    idempotent: bool = False,
    requires_approval: bool = False,
    trusted: bool = False,
    argument_rules: Mapping[str, ArgumentRule] | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a sync or async function a :class:`Tool`; use bare (``@tool``) or with options.

    Sync functions run in a worker thread so that a slow one never blocks other steps.
    ``requires_approval=True``: the tool never runs without a human's yes (see :class:`Tool`).
    ``trusted=True``: its output is trusted; ``argument_rules``: rules its arguments must pass
    before each call, e.g. ``{"to": Trusted()}`` (see :mod:`planexec.trust`).
    A parameter annotated ``ToolContext`` receives the call's context (run, step, attempt and
    idempotency key) and is not part of the schema.
    """

    def wrap(f: Callable[..., Any]) -> Tool:
        return _build(
            f,
            name=name,
            description=description,
            timeout=timeout,
            retry=retry,
            max_concurrency=max_concurrency,
            side_effect=side_effect,
            sensitive=sensitive,
            idempotent=idempotent,
            requires_approval=requires_approval,
            trusted=trusted,
            argument_rules=argument_rules,
        )

    if fn is not None:
        return wrap(fn)
    return wrap


def from_schema(
    name: str,
    description: str,
    input_schema: Mapping[str, Any],
    fn: Callable[..., Any],
    *,
    output_schema: Mapping[str, Any] | None = None,
    timeout: float | None = None,
    retry: RetryPolicy | None = None,
    max_concurrency: int | None = None,
    side_effect: bool = False,
    sensitive: bool = False,
    idempotent: bool = False,
    requires_approval: bool = False,
    trusted: bool = False,
    argument_rules: Mapping[str, ArgumentRule] | None = None,
) -> Tool:
    """A tool whose arguments are described by a JSON Schema rather than by ``fn``'s signature.

    ``fn`` (sync or async) is called with the validated arguments as keyword arguments, and with
    the call's :class:`ToolContext` as ``context=`` when it takes a parameter of that name or type.
    Its result is converted to JSON data (and checked against ``output_schema`` when given). The
    schemas are checked as any tool's are: a JSON object, a valid draft 2020-12 schema of type
    object."""
    if not callable(fn):
        raise ToolDefinitionError(
            f"invalid tool {name!r}", [Problem(code="tool", where=f"tool {name!r}", message="fn must be callable")]
        )
    context_param = _context_parameter(fn)
    is_async = inspect.iscoroutinefunction(fn) or (
        not inspect.isroutine(fn) and inspect.iscoroutinefunction(type(fn).__call__)
    )

    async def invoke(args: dict[str, Any], ctx: ToolContext) -> Any:
        kwargs = dict(args)
        if context_param is not None:
            kwargs[context_param] = ctx
        if is_async:
            return await fn(**kwargs)
        return await run_in_thread(functools.partial(fn, **kwargs))  # in a copy of the context

    def check_output(output: Any) -> Any:
        value = _to_json(output)
        if checked is not None:
            return checked(value)
        return value

    made = Tool(
        name=name,
        description=description,
        parameters=input_schema,
        invoke=invoke,
        output_schema=output_schema,
        timeout=timeout,
        retry=retry or RetryPolicy(),
        max_concurrency=max_concurrency,
        side_effect=side_effect,
        sensitive=sensitive,
        idempotent=idempotent,
        requires_approval=requires_approval,
        trusted=trusted,
        argument_rules=argument_rules if argument_rules is not None else {},
    )
    checked = made.output_validator
    object.__setattr__(made, "output_validator", check_output)
    return made


def _context_parameter(fn: Callable[..., Any]) -> str | None:
    """The name of ``fn``'s parameter that takes the :class:`ToolContext`, if it has one."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    try:
        hints = get_type_hints(fn)
    except Exception:
        hints = {}
    for pname, param in signature.parameters.items():
        if param.kind in (param.VAR_KEYWORD, param.VAR_POSITIONAL):
            continue
        annotation = hints.get(pname, param.annotation)
        if annotation is ToolContext or annotation == "ToolContext" or pname == "context":
            return pname
    return None
