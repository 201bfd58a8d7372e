"""Plans are written by a model, so everything in them is hostile input: sizes, nesting, regexes and
schemas. Checking, parsing, streaming and judging them must cost bounded time and memory, and
raise nothing but the documented problems.

Where a test guards against a slow path, the guard is a deadline many times the expected time
(a failure instead of a hang), never a measurement."""

from __future__ import annotations

import json
import math
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, cast

import pytest

from planexec import Agent, Step, Tool, Toolset, tool
from planexec._util.strict_json import MAX_CHARS, MAX_DEPTH, JSONRefused, json_problem, loads
from planexec.executor import Acceptance
from planexec.log import PlannerOutputRejected
from planexec.models import ModelResponse
from planexec.plan import (
    BindingError,
    CheckContext,
    FitsSchema,
    IncrementalChecker,
    Matches,
    check_steps,
    compile_args,
    render_text,
)
from planexec.plan._checks import MAX_PROBLEMS_PER_CODE
from planexec.plan._graph import MAX_CYCLES
from planexec.plan._plan import PlanDraft
from planexec.plan._schemas import MAX_SCHEMA_DEPTH, MAX_SCHEMA_NODES, schema_errors
from planexec.planner._reply import parse_reply
from planexec.planner._stream import StreamedSteps
from planexec.store import MemoryStore
from planexec.testing import ScriptedModel
from tests.support import add, events_of, tool_step


@tool
async def noop(value: Any = None) -> Any:
    """Return the value."""
    return value


CTX = CheckContext(tools=Toolset(noop, add), executors={"model": "model"}, default_executor="model")
BIG = 10_000


class TookTooLong(BaseException):
    """Raised by :func:`deadline`; a BaseException so that no ``except Exception`` swallows it."""


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Fail, instead of hanging, when the block is still running after ``seconds`` (set far above
    the expected time: this catches a quadratic or exponential slide, not a slow machine)."""

    def expire(signum: int, frame: FrameType | None) -> None:
        raise TookTooLong(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def nested(depth: int, leaf: Any = 1) -> Any:
    """A value ``depth`` lists deep, built without recursion."""
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def codes(problems: list[Any]) -> list[str]:
    return [p.code for p in problems]


# -- strict JSON ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "code", "where", "fragment"),
    [
        ({"items": [{"name": 1}, {"name": math.nan}]}, "not_json", ".items[1].name", "NaN is not JSON"),
        ([math.inf], "not_json", "[0]", "Infinity is not JSON"),
        ({"a": -math.inf}, "not_json", ".a", "-Infinity is not JSON"),
        ({"tags": {1, 2}}, "not_json", ".tags", "a set is not JSON data"),
        ({"when": object()}, "not_json", ".when", "an object is not JSON data"),
        ({"odd key": {3: "x"}}, "not_json", '["odd key"]', "the key 3 (an int) is not a string"),
        (nested(101), "too_deep", "[0]" * 100, "nested deeper than 100 levels"),
        ({"text": "x" * 2_000_000}, "too_large", ".text", "about 2,000,0"),
    ],
)
def test_json_problem_says_where_and_what(value: Any, code: str, where: str, fragment: str) -> None:
    problem = json_problem(value)
    assert problem is not None
    assert (problem.code, problem.where) == (code, where)
    assert fragment in problem.message
    if code == "too_large":
        assert "more than the limit of 1,000,000" in problem.message


def test_json_problem_accepts_json_data() -> None:
    data = {"a": [1, 2.5, True, None, "x", (1, 2)], "b": {"c": nested(MAX_DEPTH - 1)}}
    assert json_problem(data, max_depth=MAX_DEPTH + 1) is None
    assert json_problem(nested(MAX_DEPTH)) is None
    for scalar in (None, True, 0, -1.5, "", "x" * (MAX_CHARS - 2), 10**100):
        assert json_problem(scalar) is None


def test_json_problem_puts_the_prefix_before_the_path() -> None:
    problem = json_problem({"x": [math.nan]}, where="step 'a' args")
    assert problem is not None
    assert problem.where == "step 'a' args.x[0]"


def test_json_problem_is_iterative_and_stops_early() -> None:
    with deadline(20):
        problem = json_problem(nested(200_000))
        assert problem is not None
        assert problem.code == "too_deep"
        looped: list[Any] = []
        looped.append(looped)  # a cycle is nested infinitely deep: it is refused, not walked forever
        cycle = json_problem(looped)
        assert cycle is not None
        assert cycle.code == "too_deep"
        shared: list[Any] = [0]
        for _ in range(90):  # 2**90 paths through shared lists: the size limit stops the walk
            shared = [shared, shared]
        big = json_problem(shared)
        assert big is not None
        assert big.code == "too_large"
        assert json_problem(list(range(5_000_000)), max_chars=1000) is not None


@pytest.mark.parametrize("text", ["NaN", "[1, Infinity]", '{"a": -Infinity}'])
def test_loads_refuses_nan_and_infinity(text: str) -> None:
    with pytest.raises(JSONRefused) as caught:
        loads(text)
    assert caught.value.problem.code == "invalid_json"
    assert "is not JSON" in caught.value.problem.message
    assert isinstance(caught.value, ValueError)


def test_loads_refuses_deep_text_without_recursion_error() -> None:
    for depth in (MAX_DEPTH + 1, 10_000, 200_000):
        with pytest.raises(JSONRefused) as caught:
            loads("[" * depth + "]" * depth)
        assert caught.value.problem.code == "too_deep"
        assert "nested deeper than 100 levels" in caught.value.problem.message
    assert loads("[" * MAX_DEPTH + "]" * MAX_DEPTH) == nested(MAX_DEPTH - 1, [])


@pytest.mark.parametrize(
    ("text", "code"), [("{", "invalid_json"), ("1" * 5000, "invalid_json"), ("x" * 20, "too_large")]
)
def test_loads_refuses_what_is_not_strict_json(text: str, code: str) -> None:
    with pytest.raises(JSONRefused) as caught:
        loads(text, max_chars=10 if code == "too_large" else None)
    assert caught.value.problem.code == code


def test_loads_parses_json() -> None:
    assert loads('{"a": [1, 2.5, "é", null, true]}') == {"a": [1, 2.5, "é", None, True]}


# -- the static checks stay near-linear -----------------------------------------------------------


def test_a_chain_of_10000_steps_each_binding_the_first_checks_quickly() -> None:
    steps = [Step(id="s0", description="first", tool="noop")]
    steps += [
        Step(id=f"s{i}", description="next", tool="noop", args={"value": "${s0}"}, depends_on=(f"s{i - 1}",))
        for i in range(1, BIG)
    ]
    with deadline(30):  # about half a second; it took over 60 s when each binding walked the chain
        assert check_steps(steps, CTX) == []
    broken = [*steps[:-1], steps[-1].model_copy(update={"args": {"value": "${s9998}"}, "depends_on": ()})]
    with deadline(30):
        assert codes(check_steps(broken, CTX)) == ["binding_not_in_depends_on"]


def test_incremental_checks_of_a_long_chain_cost_each_step_alone() -> None:
    checker = IncrementalChecker(CTX)
    with deadline(30):
        assert checker.add(Step(id="s0", description="first", tool="noop")) == []
        for i in range(1, BIG):
            step = Step(id=f"s{i}", description="next", tool="noop", args={"value": "${s0}"}, depends_on=(f"s{i - 1}",))
            assert checker.add(step) == []
    assert len(checker) == BIG
    late = checker.add(Step(id="late", description="x", tool="noop", args={"value": "${s5}"}))
    assert codes(late) == ["binding_not_in_depends_on"]


def test_a_step_with_10000_dependencies() -> None:
    steps = [Step(id=f"d{i}", description="x") for i in range(BIG)]
    steps.append(Step(id="top", description="x", depends_on=tuple(f"d{i}" for i in range(BIG))))
    with deadline(30):  # it took over 10 s when the cycle search re-read the list at every step
        assert check_steps(steps, CTX) == []
        ghosts = Step(id="top", description="x", depends_on=tuple(f"ghost{i}" for i in range(BIG)))
        problems = check_steps([ghosts], CTX)
    assert codes(problems) == ["missing_dependency"] * (MAX_PROBLEMS_PER_CODE + 1)
    assert problems[-1].where == "plan"
    assert f"{BIG - MAX_PROBLEMS_PER_CODE:,} more 'missing_dependency' problems" in problems[-1].message


@pytest.mark.parametrize(
    ("make", "code"),
    [
        (lambda i: Step(id="same", description="x"), "duplicate_id"),
        (lambda i: Step(id=f"s{i}", description="x", tool=f"tool{i}"), "unknown_tool"),
        (lambda i: Step(id=f"s{i}", description="x", allowed_tools=(f"tool{i}",)), "unknown_allowed_tool"),
        (lambda i: Step(id=f"s{i}", description="x", checks=(Matches(pattern=f"(?=x{i})"),)), "invalid_pattern"),
    ],
)
def test_10000_problems_of_one_kind_are_counted_not_all_listed(make: Any, code: str) -> None:
    steps = [make(i) for i in range(BIG)]
    with deadline(30):
        problems = check_steps(steps, CTX)
    expected = BIG - 1 if code == "duplicate_id" else BIG
    assert codes(problems) == [code] * (MAX_PROBLEMS_PER_CODE + 1)
    assert f"{expected - MAX_PROBLEMS_PER_CODE:,} more {code!r} problems are not listed" in problems[-1].message


def test_a_problem_lists_a_bounded_number_of_known_names() -> None:
    many = Toolset(
        *(Tool(name=f"t{i:03}", description="x", parameters={"type": "object"}, invoke=noop.invoke) for i in range(100))
    )
    [problem] = check_steps([Step(id="a", description="x", tool="nope")], CheckContext(tools=many))
    assert "t000, t001" in problem.message
    assert "t029 and 70 more" in problem.message
    assert len(problem.message) < 300


def test_a_ring_of_10000_steps_is_one_short_cycle_problem() -> None:
    steps = [Step(id=f"s{i:05}", description="x", depends_on=(f"s{(i + 1) % BIG:05}",)) for i in range(BIG)]
    with deadline(30):
        problems = check_steps(steps, CTX)
    [cycle] = problems
    assert cycle.code == "cycle"
    assert cycle.where == "step 's00000'"
    assert cycle.message.startswith("dependency cycle (→ reads 'depends on'): s00000 → s00001 → ")
    assert "s00009 → … (9,989 more) … → s09999 → s00000" in cycle.message
    assert cycle.message.endswith("s09999 → s00000")
    assert len(cycle.message) < 400


def test_thousands_of_cycles_are_counted_and_a_few_described() -> None:
    steps: list[Step] = []
    for i in range(BIG // 2):
        steps += [
            Step(id=f"a{i}", description="x", depends_on=(f"b{i}",)),
            Step(id=f"b{i}", description="x", depends_on=(f"a{i}",)),
        ]
    with deadline(30):
        problems = check_steps(steps, CTX)
    assert codes(problems) == ["cycle"] * (MAX_CYCLES + 1)
    assert [p.where for p in problems[:2]] == ["step 'a0'", "step 'a1'"]
    assert f"{BIG // 2 - MAX_CYCLES:,} more dependency cycles" in problems[-1].message


# -- nesting: a problem, never a RecursionError -------------------------------------------------------


def test_deep_args_built_in_python_are_a_problem_everywhere() -> None:
    deep = {"value": nested(BIG)}
    step = Step(id="deep", description="x", tool="noop", args=deep)
    [problem] = check_steps([step], CTX)
    assert problem.code == "too_deep"
    assert problem.where.startswith("step 'deep' args.value[0][0]")
    assert codes(IncrementalChecker(CTX).add(step)) == ["too_deep"]
    # a model-driven step, a finished id and a binding do not reach a recursion either
    model_step = Step(id="m", description="x", args={"a": "${x}", "deep": nested(BIG)})
    finished = CheckContext(tools=Toolset(noop), default_executor="model", finished=["m"], finished_steps={"m": step})
    assert "too_deep" in codes(check_steps([model_step], finished))

    compiled = compile_args(deep, where="step 'deep' args")
    assert codes(list(compiled.problems)) == ["too_deep"]
    assert compiled.problems[0].where.startswith("step 'deep' args.value.0.0")
    with pytest.raises(BindingError) as caught:
        compiled.resolve({})
    assert codes(caught.value.problems) == ["too_deep"]

    with pytest.raises(BindingError) as rendered:
        render_text(nested(BIG))
    assert codes(rendered.value.problems) == ["too_deep"]
    text = compile_args({"x": "value: ${up}"}).resolve
    with pytest.raises(BindingError) as bound:
        text({"up": nested(BIG)})
    assert [(p.code, p.where) for p in bound.value.problems] == [("too_deep", "${up}")]

    at_the_limit = {"value": nested(MAX_DEPTH - 1)}  # args are the first level
    assert check_steps([Step(id="a", description="x", tool="noop", args=at_the_limit)], CTX) == []
    assert compile_args(at_the_limit).problems == ()


def deep_reply(depth: int) -> str:
    args = '{"a": ' + "[" * depth + "]" * depth + ', "b": 1}'
    return '{"steps": [{"id": "s1", "description": "d", "tool": "add", "args": ' + args + "}]}"


GOOD = {"steps": [tool_step("s1", "add", {"a": 1, "b": 2})]}


async def test_a_deep_reply_from_the_planner_is_sent_back_as_too_deep() -> None:
    planner = ScriptedModel(
        [
            ModelResponse(text=deep_reply(BIG)),  # as text: the strict parser refuses it
            ModelResponse(text=deep_reply(100)),  # parses, but its arguments are too deep for the checks
            GOOD,
            {"answer": "3"},
        ]
    )
    result = await Agent(planner, tools=[add]).run("1+2")
    assert result.stop.kind == "goal_met", result.stop
    rejected = events_of(result, PlannerOutputRejected)
    assert [codes(list(e.problems)) for e in rejected] == [["too_deep"], ["too_deep"]]
    assert "nested deeper than 105 levels" in rejected[0].problems[0].message
    assert rejected[1].problems[0].where.startswith("step 's1' args.a[0]")


@pytest.mark.parametrize("bad", ["deep", "nan"])
async def test_deep_or_nan_structured_output_from_an_adapter_is_refused_too(bad: str) -> None:
    # the run keeps a reply's parsed output only when it is strict JSON: else the planner reads the
    # text, strictly, and the problems go back to the model
    value: Any = nested(BIG) if bad == "deep" else math.nan
    hostile = ModelResponse(text="(structured)", parsed={"steps": [tool_step("s1", "add", {"a": value, "b": 1})]})
    planner = ScriptedModel([hostile, GOOD, {"answer": "3"}])
    store = MemoryStore()
    result = await Agent(planner, tools=[add], store=store).run("1+2", run_id="hostile")
    assert result.stop.kind == "goal_met", result.stop
    [rejected] = events_of(result, PlannerOutputRejected)
    assert codes(list(rejected.problems)) == ["invalid_json"]
    logged = [s.event for s in await store.read("hostile")]
    assert len(logged) == len(result.events)


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
async def test_nan_from_the_planner_is_invalid_json(constant: str) -> None:
    text = '{"steps": [{"id": "s1", "description": "d", "tool": "add", "args": {"a": ' + constant + ', "b": 1}}]}'
    planner = ScriptedModel([ModelResponse(text=text), GOOD, {"answer": "3"}])
    result = await Agent(planner, tools=[add]).run("1+2")
    assert result.stop.kind == "goal_met", result.stop
    [rejected] = events_of(result, PlannerOutputRejected)
    assert codes(list(rejected.problems)) == ["invalid_json"]
    assert f"{constant} is not JSON" in rejected.problems[0].message


@pytest.mark.parametrize(
    "text",
    ["```" + " " * 100_000 + "x", "```json\n" + "\n" * 100_000, " " * 100_000 + "```", "```" + "`" * 100_000],
    ids=["open-fence-spaces", "open-fence-newlines", "close-fence", "backticks"],
)
def test_a_reply_that_never_closes_its_code_fence_is_read_in_linear_time(text: str) -> None:
    with deadline(20):  # a regex for the fence backtracked for minutes on these
        value, problems = parse_reply(ModelResponse(text=text), PlanDraft)
    assert value is None
    assert codes(problems) == ["invalid_json"]
    value, problems = parse_reply(ModelResponse(text='```json\n{"steps": []}\n```'), PlanDraft)
    assert problems == []
    assert value == PlanDraft(steps=[])


def test_a_reply_with_thousands_of_invalid_steps_gets_a_short_list_back() -> None:
    steps = [{"id": f"{i}bad", "description": 1} for i in range(5000)]
    value, problems = parse_reply(ModelResponse(text=json.dumps({"steps": steps})), PlanDraft)
    assert value is None
    assert codes(problems) == ["invalid_output"] * (MAX_PROBLEMS_PER_CODE + 1)
    assert problems[-1].message == "9,980 more 'invalid_output' problems are not listed"


def test_the_streaming_reader_skips_a_deep_step_and_keeps_reading() -> None:
    deep = '{"id": "deep", "args": {"x": ' + "[" * BIG + "]" * BIG + "}}"
    text = '{"steps": [' + deep + ', {"id": "after", "args": {"x": NaN}}, {"id": "last"}], "confidence": NaN}'
    reader = StreamedSteps()
    found: list[dict[str, Any]] = []
    most = 0
    for i in range(0, len(text), 7):
        found += reader.feed(text[i : i + 7])
        most = max(most, reader.held)
    assert found == [{"id": "last"}]  # the deep step is skipped, and so is the step with NaN
    assert "confidence" not in reader.scalars
    assert most < 200  # the deep step stopped being kept as soon as it was too deep to be a step


# -- streaming: linear in the text -------------------------------------------------------------------


def plan_text(n: int) -> str:
    steps = [
        {
            "id": f"s{i}",
            "description": f'step {i}: "quoted", {{braces}} and [brackets]\\',
            "tool": "noop",
            "args": {"value": f"${{s{i - 1}}}" if i else "start", "more": [i, {"k": 'v}"]'}]},
            "depends_on": [f"s{i - 1}"] if i else [],
        }
        for i in range(n)
    ]
    return "```json\n" + json.dumps({"reason": "a long plan", "steps": steps, "confidence": 0.5}, indent=1) + "\n```"


def test_2000_streamed_steps_cost_linear_time_and_bounded_memory() -> None:
    text = plan_text(2000)
    expected = json.loads(text.strip("`json\n"))
    longest = max(len(json.dumps(s, indent=1)) for s in expected["steps"])
    rng = random.Random(20)
    chunks: list[str] = []
    pos = 0
    while pos < len(text):
        size = rng.randint(1, 50)
        chunks.append(text[pos : pos + size])
        pos += size

    whole = min(_timed(lambda: json.loads(text.strip("`json\n"))) for _ in range(3))
    reader = StreamedSteps()
    found: list[dict[str, Any]] = []
    most = 0
    started = time.perf_counter()
    with deadline(60):
        for chunk in chunks:
            found += reader.feed(chunk)
            most = max(most, reader.held)
    streamed = time.perf_counter() - started

    assert found == expected["steps"]
    assert reader.scalars == {"reason": "a long plan", "confidence": 0.5}
    assert most <= 2 * longest  # never more than the step being read (indented), however long the answer grows
    ratio = streamed / whole
    print(
        f"\n{len(chunks)} chunks of 1-50 characters ({len(text):,} in all): streamed in {streamed:.3f} s, "
        f"json.loads of the whole text {whole:.4f} s, ratio {ratio:.0f}"
    )
    assert streamed < max(500 * whole, 10.0)  # a loose multiple: the point is no quadratic slide


def test_one_character_chunks_are_read_in_one_pass() -> None:
    text = plan_text(2000)
    reader = StreamedSteps()
    found: list[dict[str, Any]] = []
    with deadline(60):  # about a second; re-reading the whole text per chunk took minutes
        for c in text:
            found += reader.feed(c)
    assert len(found) == 2000
    assert reader.held == 0


def _timed(fn: Any) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


# -- regexes: RE2, linear ---------------------------------------------------------------------------


@pytest.mark.parametrize("pattern", ["(?=a)b", "(?<!x)y", r"(a)\1", r"end\Z"])
def test_patterns_re2_cannot_compile_are_invalid_everywhere(pattern: str) -> None:
    steps = [
        Step(id="m", description="x", checks=(Matches(pattern=pattern),)),
        Step(id="o", description="x", output_schema={"properties": {"s": {"pattern": pattern}}}),
        Step(id="f", description="x", checks=(FitsSchema(json_schema={"patternProperties": {pattern: {}}}),)),
    ]
    problems = check_steps(steps, CTX)
    assert [(p.code, p.where) for p in problems] == [
        ("invalid_pattern", "step 'm'"),
        ("invalid_pattern", "step 'o'"),
        ("invalid_pattern", "step 'f'"),
    ]
    for p in problems:
        assert "RE2 syntax" in p.message


def test_catastrophic_patterns_run_in_linear_time() -> None:
    # In a child process, so that an exponential match fails this test instead of hanging the suite.
    code = textwrap.dedent(
        """
        import asyncio
        from typing import Any, cast
        from planexec import Step
        from planexec.executor import Acceptance
        from planexec.plan import FitsSchema, Matches
        from planexec.plan._schemas import schema_errors

        evil = "(a+)+$"
        text = "a" * 50 + "!"
        step = Step(id="s", description="x", checks=(Matches(pattern=evil),))
        verdict = asyncio.run(Acceptance().verdict(step, text, cast(Any, None)))
        assert not verdict.passed and "no match" in verdict.checks[0].detail, verdict
        assert schema_errors({"pattern": evil}, text)
        assert schema_errors({"patternProperties": {evil: False}}, {text: 1}) == []
        assert schema_errors({"patternProperties": {evil: {}}, "additionalProperties": False}, {text: 1})
        print("ok")
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


async def test_matches_checks_use_re2_semantics() -> None:
    step = Step(id="s", description="x", checks=(Matches(pattern=r"^\d{3}$"),))
    accept = Acceptance()
    assert (await accept.verdict(step, "123", cast(Any, None))).passed
    assert not (await accept.verdict(step, "12a", cast(Any, None))).passed
    deep = await accept.verdict(step, nested(BIG), cast(Any, None))
    assert not deep.passed
    assert "too deeply" in deep.checks[0].detail
    surrogate = await accept.verdict(
        Step(id="t", description="x", checks=(Matches(pattern="x"),)), "\ud800x", cast(Any, None)
    )
    assert surrogate.passed


# -- schemas the planner writes ------------------------------------------------------------------------


def schema_step(schema: dict[str, Any]) -> Step:
    return Step(id="s", description="x", output_schema=schema)


@pytest.mark.parametrize(
    ("schema", "fragment"),
    [
        ({"$ref": "https://example.com/schema.json"}, "only local refs"),
        ({"properties": {"a": {"$ref": "file:///etc/passwd"}}}, "only local refs"),
        ({"$ref": "other.json#/$defs/a"}, "only local refs"),
        ({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}, "$ref cycle"),
        ({"$defs": {"node": {"properties": {"next": {"$ref": "#/$defs/node"}}}}, "$ref": "#/$defs/node"}, "$ref cycle"),
        ({"$ref": "#/$defs/missing"}, "points at nothing"),
        ({"unevaluatedProperties": False}, "not supported"),
        ({"properties": {"a": {"$dynamicRef": "#meta"}}}, "not supported"),
        ({"properties": {"a": {"$id": "https://example.com/a"}}}, "only the top"),
    ],
)
def test_schema_refs_stay_local_and_finite(schema: dict[str, Any], fragment: str) -> None:
    problems = check_steps([schema_step(schema)], CTX)
    assert codes(problems) == ["invalid_schema"]
    assert fragment in problems[0].message
    assert problems[0].message.startswith("output_schema: ")


def doubling(levels: int) -> dict[str, Any]:
    """A schema of ``levels`` definitions, each using the next twice: 2**levels nodes once expanded."""
    defs: dict[str, Any] = {
        f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]} for i in range(levels)
    }
    defs[f"d{levels}"] = {"type": "string"}
    return {"$defs": defs, "$ref": "#/$defs/d0"}


def test_expanded_schemas_are_capped_in_size_and_depth() -> None:
    with deadline(30):
        [large] = check_steps([schema_step(doubling(14))], CTX)
        [deep] = check_steps([schema_step(doubling(60))], CTX)
    assert large.code == "invalid_schema"
    assert f"larger than {MAX_SCHEMA_NODES:,} JSON values once its $refs are expanded" in large.message
    assert deep.code == "invalid_schema"
    assert f"nested deeper than {MAX_SCHEMA_DEPTH} levels once its $refs are expanded" in deep.message
    assert check_steps([schema_step(doubling(5))], CTX) == []
    raw: dict[str, Any] = {"type": "string"}
    for _ in range(MAX_SCHEMA_DEPTH):
        raw = {"items": raw}
    [too_deep] = check_steps([schema_step(raw)], CTX)
    assert too_deep.code == "too_deep"


def test_a_schema_with_local_refs_judges_outputs() -> None:
    schema = {
        "$defs": {"name": {"type": "string", "minLength": 1}},
        "type": "object",
        "properties": {"first": {"$ref": "#/$defs/name"}, "last": {"$ref": "#/$defs/name", "maxLength": 3}},
        "required": ["first"],
        "additionalProperties": False,
    }
    assert check_steps([schema_step(schema)], CTX) == []
    assert schema_errors(schema, {"first": "Ada", "last": "Lov"}) == []
    errors = schema_errors(schema, {"first": "", "last": "Lovelace", "age": 36})
    assert len(errors) == 3
    assert any("'age' was unexpected" in e for e in errors)
    assert any(e.startswith("at /last:") for e in errors)


def test_unique_items_is_linear() -> None:
    items = [{"id": i, "tags": ["a", i]} for i in range(100_000)]
    schema = {"type": "array", "uniqueItems": True}
    with deadline(60):  # a few seconds at most; jsonschema's own comparison of unhashable items is quadratic
        assert schema_errors(schema, items) == []
        errors = schema_errors(schema, [*items, {"tags": ["a", 7], "id": 7.0}])
    assert errors == ["the array has non-unique elements: items 7 and 100000 are equal"]
    assert schema_errors(schema, [1, True]) == []
    assert schema_errors(schema, [[1], [1.0]]) != []


def test_a_tools_own_schema_judges_planner_arguments_in_linear_time() -> None:
    async def invoke(args: dict[str, Any], ctx: Any) -> Any:
        return None

    # the developer's schema is trusted; the planner's arguments are not: uniqueItems and a
    # backtracking-prone pattern meet 50,000 planner-written items
    tags = Tool(
        name="tag",
        description="tag items",
        parameters={
            "type": "object",
            "properties": {
                "items": {"type": "array", "uniqueItems": True},
                "label": {"type": "string", "pattern": "^(a+)+$"},
            },
        },
        invoke=invoke,
    )
    args = {"items": [{"n": i} for i in range(50_000)], "label": "a" * 5_000 + "!"}
    step = Step(id="t", description="tag", tool="tag", args=args)
    with deadline(60):  # seconds at most, against hours for a pairwise comparison and a backtracking regex
        problems = check_steps([step], CheckContext(tools=Toolset(tags)))
    assert [p.code for p in problems] == ["invalid_arguments"]
    assert "does not match" in problems[0].message


@pytest.mark.parametrize(
    ("schema", "output"),
    [
        ({"multipleOf": 0.1}, 10**400),
        ({"uniqueItems": True}, [nested(BIG), nested(BIG)]),
        ({"maximum": 1}, 10**5000),  # its message cannot even be written: the int is too long to print
    ],
    ids=["overflow", "deep", "unprintable"],
)
def test_an_exception_while_validating_fails_the_check(schema: dict[str, Any], output: Any) -> None:
    [reason] = schema_errors(schema, output)
    assert reason.startswith("the schema could not be applied to the output:")


async def test_acceptance_turns_schema_failures_into_failed_checks() -> None:
    step = Step(
        id="s",
        description="x",
        output_schema={"multipleOf": 0.1},
        checks=(FitsSchema(json_schema={"$ref": "http://example.com/s"}),),
    )
    verdict = await Acceptance().verdict(step, 10**400, cast(Any, None))
    assert not verdict.passed
    assert [c.name for c in verdict.checks] == ["output_schema", "schema"]
    assert "OverflowError" in verdict.checks[0].detail
    assert "the schema cannot be used" in verdict.checks[1].detail
