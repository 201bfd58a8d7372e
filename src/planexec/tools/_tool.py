"""The tool value: a name, a description, a JSON Schema for arguments, and one async invoke."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from planexec._util.json_schema import SafeValidator, quick_check, validator_for
from planexec._util.strict_json import json_problem
from planexec._util.tasks import abandon
from planexec.errors import OutputNotJSON, Problem, ToolCrashed, ToolDefinitionError, TransientToolError
from planexec.trust import ArgumentRule, rule_problems

__all__ = ["ArgsValidator", "OutputNotJSON", "RetryPolicy", "Tool", "ToolContext", "ToolCrashed", "call_with_timeout"]


def _check_json_schema(schema: Any, where: str, title: str) -> None:
    """A schema the tool is defined with must be a JSON object (models are sent it as JSON, and
    the planner reads it): refused otherwise, whatever validates the tool's arguments."""
    problem: Problem | None
    if not isinstance(schema, Mapping):
        problem = Problem(code="tool_schema", where=where, message="must be a JSON Schema object")
    else:
        problem = json_problem(dict(schema), where=where)
    if problem is not None:
        raise ToolDefinitionError(title, [Problem(code="tool_schema", where=problem.where, message=problem.message)])


@dataclass(frozen=True, kw_only=True, slots=True)
class RetryPolicy:
    """How a failed call is tried again: exponential backoff with jitter.

    Only errors of the kinds in ``retry_on`` are retried; a timeout counts when ``on_timeout``.
    The delay before attempt ``n + 1`` is ``min(max_delay, initial_delay * multiplier**(n-1))``,
    spread by up to ``jitter`` (a fraction) either way.
    """

    max_attempts: int = 3
    initial_delay: float = 0.2
    multiplier: float = 2.0
    max_delay: float = 10.0
    jitter: float = 0.1
    retry_on: tuple[type[BaseException], ...] = (TransientToolError, ConnectionError)
    on_timeout: bool = True

    def __post_init__(self) -> None:
        problems = []
        if self.max_attempts < 1:
            problems.append("max_attempts must be at least 1")
        if self.initial_delay < 0 or self.max_delay < 0:
            problems.append("delays must not be negative")
        if self.multiplier < 1:
            problems.append("multiplier must be at least 1")
        if not 0 <= self.jitter <= 1:
            problems.append("jitter must be between 0 and 1")
        if problems:
            raise ToolDefinitionError(
                "invalid retry policy",
                [Problem(code="retry_policy", where="RetryPolicy", message=m) for m in problems],
            )

    def delay(self, attempt: int, rng: random.Random) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        base = min(self.max_delay, self.initial_delay * self.multiplier ** (attempt - 1))
        if self.jitter and base:
            base *= 1 + rng.uniform(-self.jitter, self.jitter)
        return max(0.0, base)

    def retries(self, error: BaseException) -> bool:
        if isinstance(error, TimeoutError):
            return self.on_timeout
        return isinstance(error, self.retry_on)


NO_RETRY = RetryPolicy(max_attempts=1)


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolContext:
    """What a tool may know about the call it serves. Declare a parameter of this type to get it."""

    run_id: str
    step_id: str
    attempt: int
    idempotency_key: str
    """Stable for a step across attempts and restarts: pass it on to services that deduplicate."""
    progress: Callable[[float, float | None, str | None], None] | None = field(default=None, repr=False, compare=False)
    """Where :meth:`report` goes (set by the run; None: nowhere)."""

    def report(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        """Say how far the call has come (``progress`` of ``total``); the run logs it as a
        ``tool_progress`` event, now and then. Never raises."""
        if self.progress is not None:
            with contextlib.suppress(Exception):
                self.progress(progress, total, message)


ArgsValidator = Callable[[Mapping[str, Any]], tuple[dict[str, Any] | None, list[Problem]]]
"""Checks arguments; returns the validated (possibly coerced) arguments, or None and problems."""

Invoke = Callable[[dict[str, Any], ToolContext], Awaitable[Any]]


@dataclass(frozen=True, kw_only=True)
class Tool:
    """A tool, as a plain value. Build one with ``@tool``, from an MCP server, or by hand.

    ``invoke`` receives arguments already validated against ``parameters``.
    """

    name: str
    description: str
    parameters: Mapping[str, Any]
    invoke: Invoke
    output_schema: Mapping[str, Any] | None = None
    timeout: float | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    max_concurrency: int | None = None
    side_effect: bool = False
    sensitive: bool = False
    idempotent: bool = False
    requires_approval: bool = False
    """Never run without a human's yes: with no one to ask, its steps are refused. Nothing a model
    writes can lift it, and a model-driven step cannot call it."""
    trusted: bool = False
    """Its output is trusted: it vouches for what it returns, whatever its arguments (declare only
    tools whose output no outsider can shape: your own database, not a web page or an inbox)."""
    argument_rules: Mapping[str, ArgumentRule] = field(default_factory=dict)
    """Rules its arguments must pass before each call, by argument name (``"*"``: every argument
    not named; see :mod:`planexec.trust`). A call that breaks one is asked about or refused, as
    the run's ``TrustPolicy`` says."""
    validator: ArgsValidator | None = field(default=None, repr=False, compare=False)
    """Validates arguments; when None, ``parameters`` is applied as JSON Schema."""
    output_validator: Callable[[Any], Any] | None = field(default=None, repr=False, compare=False)
    """Validates and converts the output to JSON-ready data; when None, ``output_schema`` is used."""

    def __post_init__(self) -> None:
        _check_json_schema(self.parameters, "parameters", "invalid argument schema")
        if self.output_schema is not None:
            _check_json_schema(self.output_schema, "output_schema", "invalid output schema")
        problems = []
        if not self.name or not all(c.isalnum() or c in "_-." for c in self.name):
            problems.append("the name must be non-empty: letters, digits, _ - and . only")
        if not self.description.strip():
            problems.append("the description must say what the tool does: the planner chooses tools by it")
        if self.parameters.get("type", "object") != "object":
            problems.append("parameters must be a JSON Schema of type object")
        if self.timeout is not None and self.timeout <= 0:
            problems.append("timeout must be positive")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            problems.append("max_concurrency must be at least 1")
        found = [Problem(code="tool", where=f"tool {self.name!r}", message=m) for m in problems]
        if not isinstance(self.trusted, bool):
            found.append(Problem(code="tool", where=f"tool {self.name!r}", message="trusted must be True or False"))
        found += rule_problems(self.argument_rules, self.parameters, where=f"tool {self.name!r} argument_rules")
        if found:
            raise ToolDefinitionError(f"invalid tool {self.name!r}", found)
        if isinstance(self.argument_rules, Mapping):
            object.__setattr__(self, "argument_rules", dict(self.argument_rules))
        if self.validator is None:
            object.__setattr__(self, "validator", _schema_validator(self.parameters))
        if self.output_validator is None and self.output_schema is not None:
            object.__setattr__(self, "output_validator", _output_schema_validator(self.output_schema))

    @classmethod
    def from_schema(
        cls,
        name: str,
        description: str,
        input_schema: Mapping[str, Any],
        fn: Callable[..., Any],
        **options: Any,
    ) -> Tool:
        """A tool whose arguments arrive as a JSON Schema (an MCP tool, an OpenAI function spec):
        ``fn`` (sync or async) is called with the validated arguments as keyword arguments.
        ``options``: ``output_schema``, ``timeout``, ``retry``, ``max_concurrency``,
        ``side_effect``, ``sensitive``, ``idempotent``, ``requires_approval``, ``trusted``,
        ``argument_rules``."""
        from planexec.tools._function import from_schema

        return from_schema(name, description, input_schema, fn, **options)

    def check_args(self, args: Mapping[str, Any]) -> tuple[dict[str, Any] | None, list[Problem]]:
        """Validate arguments: the validated arguments, or None and every problem found."""
        assert self.validator is not None  # set in __post_init__
        return self.validator(args)

    def check_output(self, output: Any) -> Any:
        """Validate and convert an output; raises ``ValueError`` describing what does not fit."""
        if self.output_validator is None:
            return output
        return self.output_validator(output)

    def spec(self) -> dict[str, Any]:
        """The tool as a model sees it."""
        return {"name": self.name, "description": self.description, "parameters": dict(self.parameters)}


def _location(path: Any) -> str:
    return ".".join(str(p) for p in path)


_VALID_SCHEMAS: set[str] = set()
"""Schemas (as canonical JSON) already checked against the meta-schema: checking one costs about a
millisecond, and the same schemas come again (a toolset built per task, an MCP server listed anew)."""
_VALID_SCHEMAS_MAX = 4096


def _check_schema(schema: Mapping[str, Any]) -> None:
    """``check_schema``, skipped for a schema checked before."""
    try:
        key = json.dumps(schema, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError):
        key = None
    if key is not None and key in _VALID_SCHEMAS:
        return
    jsonschema.Draft202012Validator.check_schema(schema)
    if key is not None:
        if len(_VALID_SCHEMAS) >= _VALID_SCHEMAS_MAX:
            _VALID_SCHEMAS.clear()
        _VALID_SCHEMAS.add(key)


def _schema_validator(schema: Mapping[str, Any]) -> ArgsValidator:
    try:
        _check_schema(schema)
    except RecursionError:
        raise ToolDefinitionError(
            "invalid argument schema",
            [Problem(code="tool_schema", where="parameters", message="nested too deeply to be checked")],
        ) from None
    except jsonschema.SchemaError as e:
        where = "parameters." + ".".join(str(p) for p in e.absolute_path) if e.absolute_path else "parameters"
        raise ToolDefinitionError(
            "invalid argument schema", [Problem(code="tool_schema", where=where, message=e.message)]
        ) from None
    validator = validator_for(schema)
    quick = _quick_for(validator, schema)

    def validate(args: Mapping[str, Any]) -> tuple[dict[str, Any] | None, list[Problem]]:
        checked = dict(args)
        if quick is not None and quick(checked):
            return checked, []
        problems = [
            Problem(code="invalid_argument", where=_location(e.absolute_path), message=e.message)
            for e in validator.iter_errors(checked)
        ]
        return (None, problems) if problems else (checked, [])

    return validate


def _output_schema_validator(schema: Mapping[str, Any]) -> Callable[[Any], Any]:
    try:
        _check_schema(schema)
    except jsonschema.SchemaError as e:
        raise ToolDefinitionError(
            "invalid output schema", [Problem(code="tool_schema", where="output_schema", message=e.message)]
        ) from None
    validator = validator_for(schema)
    quick = _quick_for(validator, schema)

    def validate(output: Any) -> Any:
        if quick is not None and quick(output):
            return output
        errors = [f"{_location(e.absolute_path) or 'output'}: {e.message}" for e in validator.iter_errors(output)]
        if errors:
            raise ValueError("; ".join(errors))
        return output

    return validate


def _quick_for(validator: Any, schema: Mapping[str, Any]) -> Callable[[Any], bool] | None:
    """A quick check of the values ``validator`` finds no problem with (see ``quick_check``)."""
    return quick_check(schema) if isinstance(validator, SafeValidator) else None


def _crash(tool: Tool, error: BaseException) -> BaseException:
    """What to raise for a ``BaseException`` out of a tool: a real cancellation goes on as it is."""
    if isinstance(error, asyncio.CancelledError):
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            return error
    return ToolCrashed(tool.name, error)


async def call_with_timeout(tool: Tool, args: dict[str, Any], ctx: ToolContext, *, grace: float = 1.0) -> Any:
    """One attempt at a tool call, bounded by the tool's timeout.

    A tool that ignores its cancellation when its time is up is given ``grace`` more seconds, then
    abandoned: the call fails as timed out all the same. Anything a tool raises that is not an
    ``Exception`` (bar a real cancellation) becomes :class:`ToolCrashed`.
    """
    if tool.timeout is None:
        try:
            return await tool.invoke(args, ctx)
        except Exception:
            raise
        except BaseException as e:
            raise _crash(tool, e) from None
    call = asyncio.ensure_future(_guarded(tool, args, ctx))
    try:
        done, _ = await asyncio.wait((call,), timeout=tool.timeout)
    except BaseException:  # the caller was cancelled: the call is cancelled too, and not waited for
        _cancel(call, grace)
        raise
    if done:
        return call.result()
    _cancel(call, grace)
    await asyncio.wait((call,), timeout=grace)
    raise TimeoutError(f"{tool.name} did not finish within {tool.timeout:g}s")


async def _guarded(tool: Tool, args: dict[str, Any], ctx: ToolContext) -> Any:
    try:
        return await tool.invoke(args, ctx)
    except Exception:
        raise
    except BaseException as e:
        raise _crash(tool, e) from None


def _cancel(call: asyncio.Future[Any], grace: float) -> None:
    """Cancel ``call``; if it has not ended ``grace`` seconds later, abandon it."""
    if call.done():
        _read(call)
        return
    call.cancel()
    call.add_done_callback(_read)
    if isinstance(call, asyncio.Task):
        loop = asyncio.get_running_loop()
        handle = loop.call_later(grace, abandon, call)
        call.add_done_callback(lambda _f: handle.cancel())


def _read(call: asyncio.Future[Any]) -> None:
    if not call.cancelled():
        call.exception()  # nobody waits for it any more: its error is not news
