"""Tools: ``@tool`` on functions, hand-built tools, retry policies and toolsets."""

from __future__ import annotations

import asyncio
import random
import threading
from dataclasses import FrozenInstanceError
from typing import Any, Optional

import pytest
from pydantic import BaseModel

from planexec import RetryPolicy, Tool, ToolContext, ToolError, Toolset, TransientToolError, UsageError, tool
from planexec.errors import ToolDefinitionError, UnknownToolError

CTX = ToolContext(run_id="run-1", step_id="step-1", attempt=1, idempotency_key="run-1:step-1")


class Filter(BaseModel):
    field: str
    value: int = 0


class Hit(BaseModel):
    title: str
    score: float


# -- names and descriptions ---------------------------------------------------------------------


def test_sync_function_becomes_a_tool() -> None:
    @tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    assert isinstance(add, Tool)
    assert add.name == "add"
    assert add.description == "Add two numbers."
    assert add.spec() == {"name": "add", "description": "Add two numbers.", "parameters": dict(add.parameters)}


async def test_sync_tool_runs_in_a_worker_thread() -> None:
    seen: list[threading.Thread] = []

    @tool
    def where() -> str:
        """Report the thread."""
        seen.append(threading.current_thread())
        return "ok"

    assert await where.invoke({}, CTX) == "ok"
    assert len(seen) == 1
    assert seen[0] is not threading.current_thread()


async def test_async_function_becomes_a_tool() -> None:
    @tool
    async def fetch(url: str) -> str:
        """Fetch a page."""
        await asyncio.sleep(0)
        return f"<html>{url}</html>"

    assert fetch.name == "fetch"
    assert await fetch.invoke({"url": "u"}, CTX) == "<html>u</html>"


def test_decorator_options_override_and_configure() -> None:
    policy = RetryPolicy(max_attempts=5)

    @tool(
        name="db.write-row",
        description="Write one row.",
        timeout=2.5,
        retry=policy,
        max_concurrency=2,
        side_effect=True,
        sensitive=True,
        idempotent=True,
    )
    def write(row: dict[str, Any]) -> None:
        """Docstring that is overridden."""

    assert write.name == "db.write-row"
    assert write.description == "Write one row."
    assert write.timeout == 2.5
    assert write.retry is policy
    assert write.max_concurrency == 2
    assert (write.side_effect, write.sensitive, write.idempotent) == (True, True, True)


def test_defaults_without_options() -> None:
    @tool
    def noop() -> None:
        """Do nothing."""

    assert noop.timeout is None
    assert noop.retry == RetryPolicy()
    assert noop.max_concurrency is None
    assert (noop.side_effect, noop.sensitive, noop.idempotent) == (False, False, False)
    assert noop.parameters["properties"] == {}


def test_the_decorator_registers_nothing() -> None:
    def f(x: int) -> int:
        """F."""
        return x

    first, second = tool(f), tool(f)
    assert first is not second
    assert first.name == second.name == "f"


def test_tool_value_is_frozen() -> None:
    @tool
    def f() -> None:
        """F."""

    with pytest.raises(FrozenInstanceError):
        setattr(f, "name", "g")  # noqa: B010 - assigning through setattr on purpose


# -- docstrings ----------------------------------------------------------------------------------


def test_google_style_docstring() -> None:
    @tool
    def search(query: str, limit: int = 10, exact: bool = False) -> list[str]:
        """Search the index
        for documents.

        Longer explanation that is not part of the description.

        Args:
            query (str): What to look for,
                over two lines.
            limit: How many results.
            exact: Match whole words only.

        Returns:
            The titles.
        """
        return []

    assert search.description == "Search the index for documents."
    props = search.parameters["properties"]
    assert props["query"]["description"] == "What to look for, over two lines."
    assert props["limit"]["description"] == "How many results."
    assert props["exact"]["description"] == "Match whole words only."


def test_rest_style_docstring() -> None:
    @tool
    def convert(amount: float, currency: str) -> float:
        """Convert money.

        :param amount: How much.
        :param str currency: The target currency code.
        :returns: The converted amount.
        """
        return amount

    assert convert.description == "Convert money."
    props = convert.parameters["properties"]
    assert props["amount"]["description"] == "How much."
    assert props["currency"]["description"] == "The target currency code."


def test_rest_params_right_after_the_summary() -> None:
    @tool
    def ping(host: str) -> str:
        """Ping a host.
        :param host: Where to.
        """
        return host

    assert ping.description == "Ping a host."
    assert ping.parameters["properties"]["host"]["description"] == "Where to."


def test_undocumented_parameters_have_no_description() -> None:
    @tool
    def f(a: int, b: int) -> int:
        """F.

        Args:
            a: The a.
        """
        return a + b

    props = f.parameters["properties"]
    assert props["a"]["description"] == "The a."
    assert "description" not in props["b"]


# -- schemas from type hints ---------------------------------------------------------------------


def test_schema_from_type_hints() -> None:
    @tool
    def search(
        query: str,
        limit: int = 10,
        ratio: float = 0.5,
        tags: list[str] | None = None,
        where: Optional[Filter] = None,  # noqa: UP045 - the old spelling must work too
        filters: list[Filter] | None = None,
    ) -> list[Hit]:
        """Search."""
        return []

    schema = search.parameters
    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False
    assert "title" not in schema
    assert schema["required"] == ["query"]
    props = schema["properties"]
    assert props["query"]["type"] == "string"
    assert props["limit"] == {"default": 10, "title": "Limit", "type": "integer"}
    assert props["ratio"]["type"] == "number"
    assert props["ratio"]["default"] == 0.5
    assert props["tags"]["default"] is None
    assert {"type": "array", "items": {"type": "string"}} in props["tags"]["anyOf"]
    assert {"type": "null"} in props["tags"]["anyOf"]
    assert {"$ref": "#/$defs/Filter"} in props["where"]["anyOf"]
    assert {"type": "null"} in props["where"]["anyOf"]
    assert schema["$defs"]["Filter"]["required"] == ["field"]
    assert search.output_schema is not None
    assert search.output_schema["type"] == "array"


async def test_tool_context_is_excluded_from_the_schema_and_injected() -> None:
    @tool
    async def keyed(item: str, context: ToolContext) -> dict[str, Any]:
        """Use the context."""
        return {"item": item, "key": context.idempotency_key, "step": context.step_id, "attempt": context.attempt}

    assert list(keyed.parameters["properties"]) == ["item"]
    assert keyed.parameters["required"] == ["item"]
    validated, problems = keyed.check_args({"item": "x"})
    assert problems == []
    assert validated == {"item": "x"}
    result = await keyed.invoke({"item": "x"}, CTX)
    assert result == {"item": "x", "key": "run-1:step-1", "step": "step-1", "attempt": 1}


async def test_sync_tool_gets_the_context_too() -> None:
    @tool
    def who(ctx: ToolContext) -> str:
        """Who calls."""
        return ctx.run_id

    assert who.parameters["properties"] == {}
    assert await who.invoke({}, CTX) == "run-1"


async def test_optional_tool_context_is_injected_and_excluded_too() -> None:
    """``ctx: ToolContext | None = None`` lets the function be called directly; it is still the context."""

    @tool
    def who(item: str, ctx: ToolContext | None = None) -> str:
        """Who calls."""
        return "none" if ctx is None else ctx.step_id

    assert list(who.parameters["properties"]) == ["item"]
    assert "$defs" not in who.parameters
    assert await who.invoke({"item": "x"}, CTX) == "step-1"


# -- argument checks -----------------------------------------------------------------------------


@tool
def typed(name: str, count: int, where: Filter, tags: list[str] | None = None) -> str:
    """Typed."""
    return f"{name}:{count}:{where.field}:{tags}"


def test_valid_arguments_are_validated_and_converted() -> None:
    validated, problems = typed.check_args({"name": "n", "count": 2, "where": {"field": "f"}})
    assert problems == []
    assert validated is not None
    assert validated["where"] == Filter(field="f", value=0)
    assert validated["tags"] is None
    assert validated["count"] == 2


async def test_validated_arguments_reach_the_function() -> None:
    validated, _ = typed.check_args({"name": "n", "count": 2, "where": {"field": "f"}, "tags": ["a"]})
    assert validated is not None
    assert await typed.invoke(validated, CTX) == "n:2:f:['a']"


@pytest.mark.parametrize(
    ("args", "where"),
    [
        ({"name": "n", "count": 1, "where": {"field": "f"}, "colour": "red"}, "colour"),
        ({"name": "n", "where": {"field": "f"}}, "count"),
        ({"name": "n", "count": "many", "where": {"field": "f"}}, "count"),
        ({"name": ["n"], "count": 1, "where": {"field": "f"}}, "name"),
        ({"name": "n", "count": 1, "where": {"value": 3}}, "where.field"),
        ({"name": "n", "count": 1, "where": {"field": "f"}, "tags": [1, "b"]}, "tags.0"),
    ],
)
def test_invalid_arguments_are_rejected(args: dict[str, Any], where: str) -> None:
    validated, problems = typed.check_args(args)
    assert validated is None
    assert [p.where for p in problems] == [where]
    assert problems[0].code == "invalid_argument"


def test_every_argument_problem_is_listed() -> None:
    validated, problems = typed.check_args({"count": "x", "extra": 1, "where": {}})
    assert validated is None
    assert sorted(p.where for p in problems) == ["count", "extra", "name", "where.field"]


# -- outputs -------------------------------------------------------------------------------------


def test_output_is_validated_by_the_return_annotation() -> None:
    @tool
    def best() -> Hit:
        """Best hit."""
        return Hit(title="t", score=1.0)

    @tool
    def many() -> list[Hit]:
        """All hits."""
        return []

    @tool
    def count() -> int:
        """Count."""
        return 0

    assert best.check_output(Hit(title="t", score=0.5)) == {"title": "t", "score": 0.5}
    assert best.check_output({"title": "t", "score": 2}) == {"title": "t", "score": 2.0}
    assert many.check_output([Hit(title="a", score=1), {"title": "b", "score": 0}]) == [
        {"title": "a", "score": 1.0},
        {"title": "b", "score": 0.0},
    ]
    assert count.check_output(3) == 3
    with pytest.raises(ValueError, match="score"):
        best.check_output({"title": "t"})
    with pytest.raises(ValueError, match="integer"):
        count.check_output("three")
    with pytest.raises(ValueError):  # noqa: PT011 - the message is pydantic's
        many.check_output("not a list")


def test_unannotated_output_becomes_json_data() -> None:
    @tool
    def anything():  # type: ignore[no-untyped-def]
        """Anything."""

    assert anything.output_schema is None
    assert anything.check_output((1, 2)) == [1, 2]
    assert anything.check_output({"hit": Hit(title="t", score=1)}) == {"hit": {"title": "t", "score": 1.0}}
    assert anything.check_output(Hit(title="t", score=1)) == {"title": "t", "score": 1.0}
    assert anything.check_output("text") == "text"
    assert anything.check_output(None) is None


# -- definition errors ---------------------------------------------------------------------------


def test_star_args_and_missing_hints_are_all_listed() -> None:
    def bad(a, b: int, *rest: int, **options: Any) -> None:  # type: ignore[no-untyped-def]
        """Bad."""

    with pytest.raises(ToolDefinitionError) as info:
        tool(bad)
    error = info.value
    assert isinstance(error, UsageError)
    assert len(error.problems) == 3
    messages = " | ".join(p.message for p in error.problems)
    assert "'a' needs a type hint" in messages
    assert "replace *rest with one parameter per argument" in messages
    assert "replace **options with one parameter per argument" in messages
    assert {p.code for p in error.problems} == {"tool_signature"}
    assert "3 problem" in str(error)


class Opaque:
    """A class pydantic knows nothing about."""


def test_every_problem_of_a_function_is_listed_in_planexecs_words() -> None:
    def bad(when: Opaque, n: int, **options: Any) -> Opaque:  # no docstring, no description=
        return when

    with pytest.raises(ToolDefinitionError) as info:
        tool(bad)
    problems = {(p.code, p.where): p.message for p in info.value.problems}
    assert set(problems) == {
        ("tool_description", "tool 'bad'"),
        ("tool_type", "tool 'bad' parameter 'when'"),
        ("tool_signature", "tool 'bad' parameter **options"),
        ("tool_type", "tool 'bad' return type"),
    }
    assert "write a docstring" in problems[("tool_description", "tool 'bad'")]
    opaque = f"{__name__}.Opaque has no JSON Schema"
    assert problems[("tool_type", "tool 'bad' parameter 'when'")].startswith(opaque)
    assert problems[("tool_type", "tool 'bad' return type")].startswith(opaque)
    assert "pydantic" not in str(info.value).replace("a pydantic model", "")  # none of pydantic's own wording
    assert "arbitrary_types_allowed" not in str(info.value)


def test_a_description_may_be_given_instead_of_a_docstring() -> None:
    def undocumented(n: int) -> int:
        return n

    assert tool(description="Return n.")(undocumented).description == "Return n."
    with pytest.raises(ToolDefinitionError, match="has no description"):
        tool(description="  ")(undocumented)
    with pytest.raises(ToolDefinitionError, match="the description must say what the tool does"):
        Tool(name="bare", description="", parameters={"type": "object"}, invoke=_echo)


def test_unresolvable_type_hint_is_a_definition_error() -> None:
    def bad(a: NoSuchType) -> None:  # type: ignore[name-defined]  # noqa: F821
        """Bad."""

    with pytest.raises(ToolDefinitionError) as info:
        tool(bad)
    assert [p.code for p in info.value.problems] == ["tool_hints"]


async def test_positional_only_parameters_work_or_are_refused() -> None:
    """A function the decorator accepts must be callable through the tool."""

    def add(a: int, /, b: int) -> int:
        """Add."""
        return a + b

    try:
        made = tool(add)
    except ToolDefinitionError:
        return
    validated, problems = made.check_args({"a": 1, "b": 2})
    assert problems == []
    assert validated is not None
    assert await made.invoke(validated, CTX) == 3


# -- hand-built tools ----------------------------------------------------------------------------


async def _echo(args: dict[str, Any], ctx: ToolContext) -> Any:
    return {"args": args, "step": ctx.step_id}


SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"q": {"type": "string"}, "n": {"type": "integer", "minimum": 1}},
    "required": ["q"],
    "additionalProperties": False,
}


async def test_hand_built_tool() -> None:
    echo = Tool(name="echo", description="Echo.", parameters=SCHEMA, invoke=_echo)
    assert echo.spec() == {"name": "echo", "description": "Echo.", "parameters": SCHEMA}
    assert echo.check_args({"q": "x", "n": 2}) == ({"q": "x", "n": 2}, [])
    assert await echo.invoke({"q": "x"}, CTX) == {"args": {"q": "x"}, "step": "step-1"}
    assert echo.check_output(("anything",)) == ("anything",)  # no output schema: passed through


def test_hand_built_tool_validates_with_its_json_schema() -> None:
    echo = Tool(name="echo", description="Echo.", parameters=SCHEMA, invoke=_echo)
    validated, problems = echo.check_args({"n": 0, "extra": True})
    assert validated is None
    assert {p.code for p in problems} == {"invalid_argument"}
    assert len(problems) == 3  # q missing, n below minimum, extra not allowed
    assert "n" in [p.where for p in problems]
    validated, problems = echo.check_args({"q": 5})
    assert validated is None
    assert [p.where for p in problems] == ["q"]


def test_hand_built_tool_output_schema() -> None:
    t = Tool(
        name="count",
        description="Count.",
        parameters={"type": "object"},
        invoke=_echo,
        output_schema={"type": "integer"},
    )
    assert t.check_output(3) == 3
    with pytest.raises(ValueError, match="output"):
        t.check_output("three")


def test_hand_built_tool_problems_are_all_listed() -> None:
    with pytest.raises(ToolDefinitionError) as info:
        Tool(
            name="bad name!",
            description="x",
            parameters={"type": "array"},
            invoke=_echo,
            timeout=0,
            max_concurrency=0,
        )
    assert len(info.value.problems) == 4


@pytest.mark.parametrize("name", ["", "has space", "emoji🙂", "semi;colon"])
def test_hand_built_tool_names(name: str) -> None:
    with pytest.raises(ToolDefinitionError):
        Tool(name=name, description="x", parameters={"type": "object"}, invoke=_echo)


def test_hand_built_tool_with_an_invalid_schema_is_a_definition_error() -> None:
    with pytest.raises(ToolDefinitionError):
        Tool(
            name="bad",
            description="x",
            parameters={"type": "object", "properties": {"a": {"type": "nonsense"}}},
            invoke=_echo,
        )


# -- retry policies ------------------------------------------------------------------------------


def test_retry_policy_defaults() -> None:
    policy = RetryPolicy()
    assert policy.max_attempts == 3
    assert policy.retries(TransientToolError("busy"))
    assert policy.retries(ConnectionError("reset"))
    assert policy.retries(TimeoutError())
    assert not policy.retries(ToolError("bad input"))
    assert not policy.retries(ValueError("bug"))
    assert not RetryPolicy(on_timeout=False).retries(TimeoutError())
    assert RetryPolicy(retry_on=(ValueError,)).retries(ValueError("x"))


def test_retry_policy_problems_are_all_listed() -> None:
    with pytest.raises(ToolDefinitionError) as info:
        RetryPolicy(max_attempts=0, initial_delay=-1, multiplier=0.5, jitter=1.5)
    assert len(info.value.problems) == 4
    assert {p.code for p in info.value.problems} == {"retry_policy"}
    with pytest.raises(ToolDefinitionError):
        RetryPolicy(max_delay=-0.1)
    with pytest.raises(ToolDefinitionError):
        RetryPolicy(jitter=-0.1)


def test_backoff_without_jitter_is_exact() -> None:
    policy = RetryPolicy(initial_delay=0.5, multiplier=3.0, max_delay=10.0, jitter=0.0)
    rng = random.Random(1)
    assert [policy.delay(n, rng) for n in range(1, 6)] == [0.5, 1.5, 4.5, 10.0, 10.0]


def test_backoff_with_jitter_is_seeded_and_bounded() -> None:
    policy = RetryPolicy(initial_delay=1.0, multiplier=2.0, max_delay=6.0, jitter=0.25)
    delays = [policy.delay(n, random.Random(7)) for n in range(1, 6)]
    twin = random.Random(7)
    for n, delay in zip(range(1, 6), delays, strict=True):
        base = min(6.0, 2.0 ** (n - 1))
        assert base * 0.75 <= delay <= base * 1.25
        assert delay == pytest.approx(base * (1 + random.Random(7).uniform(-0.25, 0.25)))
    # one generator over the sequence gives the same delays every time
    rng = random.Random(42)
    first = [policy.delay(n, rng) for n in range(1, 6)]
    rng = random.Random(42)
    assert [policy.delay(n, rng) for n in range(1, 6)] == first
    assert first != [policy.delay(n, twin) for n in range(1, 6)]


def test_zero_delay_stays_zero() -> None:
    policy = RetryPolicy(initial_delay=0.0, jitter=0.5)
    assert [policy.delay(n, random.Random(3)) for n in (1, 2, 3)] == [0.0, 0.0, 0.0]


# -- toolsets ------------------------------------------------------------------------------------


@tool
def alpha() -> str:
    """A."""
    return "a"


@tool
def beta() -> str:
    """B."""
    return "b"


@tool(name="alpha")
def alpha_again() -> str:
    """Another alpha."""
    return "a2"


def test_toolset_lookup_and_nesting() -> None:
    inner = Toolset(beta, name="inner")
    tools = Toolset(alpha, inner, [alpha])  # the same tool twice is fine
    assert tools.names == ("alpha", "beta")
    assert len(tools) == 2
    assert "beta" in tools
    assert "gamma" not in tools
    assert tools.get("beta") is beta
    assert list(tools) == [alpha, beta]
    assert tools.subset(["beta"]).names == ("beta",)


def test_toolset_refuses_duplicate_names() -> None:
    with pytest.raises(ToolDefinitionError) as info:
        Toolset(alpha, beta, alpha_again, name="mine")
    [problem] = info.value.problems
    assert problem.code == "duplicate_tool"
    assert "'alpha'" in problem.message
    assert "mine" in problem.where


def test_toolset_refuses_what_is_not_a_tool() -> None:
    def plain() -> None:
        pass

    with pytest.raises(ToolDefinitionError):
        Toolset(alpha, plain)  # type: ignore[arg-type]


def test_unknown_tool_lists_known_tools() -> None:
    tools = Toolset(beta, alpha)
    with pytest.raises(UnknownToolError) as info:
        tools.get("gamma")
    error = info.value
    assert isinstance(error, UsageError)
    assert error.name == "gamma"
    assert set(error.known) == {"alpha", "beta"}
    assert "alpha, beta" in str(error)
    assert error.problems[0].code == "unknown_tool"
    with pytest.raises(UnknownToolError):
        tools.subset(["alpha", "gamma"])
    with pytest.raises(UnknownToolError, match="no tools"):
        Toolset().get("x")


# -- tools that arrive as JSON Schemas ------------------------------------------------------------

ADD_SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"],
    "additionalProperties": False,
}


async def test_a_tool_from_a_json_schema_validates_and_calls_sync_or_async_functions() -> None:
    from planexec.tools import Tool, ToolContext

    async def add_async(a: int, b: int) -> int:
        return a + b

    seen: list[ToolContext] = []

    def add_sync(a: int, b: int, context: ToolContext) -> dict[str, int]:
        seen.append(context)
        return {"sum": a + b}

    ctx = ToolContext(run_id="r", step_id="s", attempt=1, idempotency_key="k")
    fast = Tool.from_schema("add", "Add two numbers.", ADD_SCHEMA, add_async)
    slow = Tool.from_schema(
        "add_sync",
        "Add two numbers.",
        ADD_SCHEMA,
        add_sync,
        output_schema={"type": "object", "properties": {"sum": {"type": "integer"}}, "required": ["sum"]},
        side_effect=True,
    )
    assert fast.check_args({"a": 1, "b": "2"})[0] is None
    assert [p.where for p in fast.check_args({"a": 1, "b": "2", "c": 3})[1]] == ["b", ""]
    assert await fast.invoke({"a": 1, "b": 2}, ctx) == 3
    assert await slow.invoke({"a": 1, "b": 2}, ctx) == {"sum": 3}
    assert seen == [ctx]
    assert slow.check_output({"sum": 3}) == {"sum": 3}
    with pytest.raises(ValueError, match="sum"):
        slow.check_output({"total": 3})
    assert slow.side_effect


def test_a_tool_from_a_json_schema_refuses_what_a_tool_may_not_be() -> None:
    from planexec.errors import ToolDefinitionError
    from planexec.tools import Tool

    with pytest.raises(ToolDefinitionError):
        Tool.from_schema("add", "Add.", {"type": "array"}, lambda: 0)
    with pytest.raises(ToolDefinitionError):
        Tool.from_schema("add", "Add.", {"type": "object", "properties": {"a": {"type": 12}}}, lambda a: a)
    with pytest.raises(ToolDefinitionError):
        Tool.from_schema("add", "Add.", ADD_SCHEMA, "not a function")  # type: ignore[arg-type]


async def test_a_tool_reports_progress_and_a_flood_or_garbage_is_not_logged() -> None:
    from planexec import Agent
    from planexec.log import ToolProgress
    from planexec.testing import ScriptedModel

    @tool
    async def crunch(ctx: ToolContext) -> str:
        """Crunch numbers."""
        ctx.report(float("nan"), 10, "not a number")
        ctx.report(1, float("inf"), "no finite total")
        ctx.report(True, 10, "a boolean")
        ctx.report(1, 10, "one   of\nten " + "x" * 1_000)
        for i in range(10_000):
            ctx.report(i, 10_000, "flood")
        return "done"

    model = ScriptedModel([{"steps": [{"id": "c", "description": "crunch", "tool": "crunch"}]}, {"answer": "ok"}])
    result = await Agent(model, tools=[crunch]).run("crunch")
    assert result.stop.kind == "goal_met", result.stop
    [only] = [e for e in result.events if isinstance(e, ToolProgress)]
    assert (only.step_id, only.progress, only.total, only.call_id) == ("c", 1.0, 10.0, None)
    assert only.message is not None
    assert only.message.startswith("one of ten")
    assert len(only.message) <= 200
