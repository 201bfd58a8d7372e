"""Property-based tests: the static checks, the binding resolver and the scheduler."""

from __future__ import annotations

import asyncio
import json
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from planexec import Agent, Budget, Limits, RunResult, Step, ToolError, Toolset, tool
from planexec._util.json_schema import SafeValidator, bounded, quick_check
from planexec._util.strict_json import json_problem, loads
from planexec.log import PlanProposed, RunState, StepStarted, StepSucceeded
from planexec.models import ModelRequest
from planexec.plan import CheckContext, IncrementalChecker, Matches, check_steps, compile_args, render_text
from planexec.planner._stream import StreamedSteps
from planexec.testing import ScriptedModel
from tests.support import tool_step

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@tool
async def noop(value: Any = None) -> Any:
    """Return the value."""
    return value


CHECKS = CheckContext(tools=Toolset(noop))


# -- random DAGs ---------------------------------------------------------------------------------


@st.composite
def dags(draw: st.DrawFn, max_steps: int = 25) -> dict[str, tuple[str, ...]]:
    """Step id -> dependencies; every dependency is an earlier id, so there is no cycle."""
    n = draw(st.integers(min_value=1, max_value=max_steps))
    ids = [f"s{i}" for i in range(n)]
    deps: dict[str, tuple[str, ...]] = {}
    for i, sid in enumerate(ids):
        chosen = draw(st.lists(st.sampled_from(ids[:i]), unique=True, max_size=4)) if i else []
        deps[sid] = tuple(chosen)
    return deps


def ancestors_of(deps: Mapping[str, tuple[str, ...]], sid: str) -> set[str]:
    seen: set[str] = set()
    todo = list(deps[sid])
    while todo:
        d = todo.pop()
        if d not in seen:
            seen.add(d)
            todo.extend(deps.get(d, ()))
    return seen


def build(deps: Mapping[str, tuple[str, ...]], args: Callable[[str], dict[str, Any]] | None = None) -> list[Step]:
    return [
        Step(id=sid, description=f"step {sid}", tool="noop", args=args(sid) if args else {}, depends_on=d)
        for sid, d in deps.items()
    ]


def codes(steps: list[Step]) -> list[str]:
    return [p.code for p in check_steps(steps, CHECKS)]


@SETTINGS
@given(dags(), st.data())
def test_random_dag_has_no_problems(deps: dict[str, tuple[str, ...]], data: st.DataObject) -> None:
    # bind every step to a random ancestor (direct or transitive): still no problem
    def args(sid: str) -> dict[str, Any]:
        up = sorted(ancestors_of(deps, sid))
        if not up:
            return {"value": sid}
        target = data.draw(st.sampled_from(up))
        return {"value": data.draw(st.sampled_from(["${" + target + "}", "from ${" + target + "}"]))}

    assert codes(build(deps, args)) == []


@SETTINGS
@given(dags(), st.data())
def test_back_edge_makes_a_cycle(deps: dict[str, tuple[str, ...]], data: st.DataObject) -> None:
    deps = dict(deps)
    edges = [(sid, d) for sid, ds in deps.items() for d in ds]
    if not edges:
        # make an edge first: a later step depends on an earlier one
        ids = list(deps)
        if len(ids) < 2:
            deps = {"s0": (), "s1": ("s0",)}
            edges = [("s1", "s0")]
        else:
            later = data.draw(st.sampled_from(ids[1:]))
            deps[later] = (*deps[later], ids[0])
            edges = [(later, ids[0])]
    later, earlier = data.draw(st.sampled_from(edges))
    # a path earlier <- ... <- later exists; closing it from the other side makes a cycle
    candidates = [sid for sid in deps if later == sid or later in ancestors_of(deps, sid)]
    closer = data.draw(st.sampled_from(candidates))
    deps[earlier] = (*deps[earlier], closer)
    found = codes(build(deps))
    assert "cycle" in found
    assert "missing_dependency" not in found


@SETTINGS
@given(dags(), st.data())
def test_dangling_dependencies_are_all_reported(deps: dict[str, tuple[str, ...]], data: st.DataObject) -> None:
    deps = dict(deps)
    ids = list(deps)
    ghosts = data.draw(
        st.lists(st.tuples(st.sampled_from(ids), st.integers(0, 50)), min_size=1, max_size=6, unique_by=lambda t: t)
    )
    added: dict[str, list[str]] = {}
    for sid, k in ghosts:
        ghost = f"ghost{k}"
        if ghost not in added.setdefault(sid, []):
            added[sid].append(ghost)
    for sid, extra in added.items():
        deps[sid] = (*deps[sid], *extra)
    problems = [p for p in check_steps(build(deps), CHECKS) if p.code == "missing_dependency"]
    reported = sorted((p.where, p.message) for p in problems)
    expected = sorted(
        (f"step {sid!r}", f"depends on unknown step {ghost!r}") for sid, extra in added.items() for ghost in extra
    )
    assert reported == expected
    assert "cycle" not in [p.code for p in check_steps(build(deps), CHECKS)]


# -- checking steps one at a time -----------------------------------------------------------------

FAULTS = [
    None,
    None,
    None,
    "bind_ancestor",
    "bind_finished",
    "bind_non_ancestor",
    "bind_finished_without_dependency",
    "unknown_tool",
    "ghost_dependency",
    "self_dependency",
    "duplicate_id",
    "finished_id",
    "bad_pattern",
    "model_step",
    "model_step_unknown_tool",
    "tool_step_with_allowed_tools",
    "deep_args",
    "remote_ref",
]


@st.composite
def faulty_plans(draw: st.DrawFn) -> tuple[list[Step], CheckContext]:
    """Steps in a dependencies-first order, some with a fault, and the context they are checked in."""
    deps = draw(dags(max_steps=10))
    ids = list(deps)
    finished = tuple(draw(st.lists(st.sampled_from(["old1", "old2"]), unique=True)))
    steps: list[Step] = []
    for i, sid in enumerate(ids):
        fault = draw(st.sampled_from(FAULTS))
        fields: dict[str, Any] = {"id": sid, "description": "x", "tool": "noop", "depends_on": deps[sid]}
        ancestors = sorted(ancestors_of(deps, sid))
        others = [o for o in ids if o != sid and o not in ancestors]
        if fault == "bind_ancestor" and ancestors:
            fields["args"] = {"value": "${" + draw(st.sampled_from(ancestors)) + "}"}
        elif fault == "bind_finished" and finished:
            old = draw(st.sampled_from(finished))
            fields.update(depends_on=(*deps[sid], old), args={"value": "at ${" + old + ".x}"})
        elif fault == "bind_non_ancestor" and others:
            fields["args"] = {"value": "${" + draw(st.sampled_from(others)) + "}"}
        elif fault == "bind_finished_without_dependency" and finished:
            fields["args"] = {"value": "${" + finished[0] + "}"}
        elif fault == "unknown_tool":
            fields["tool"] = "nope"
        elif fault == "ghost_dependency":
            fields["depends_on"] = (*deps[sid], "ghost")
        elif fault == "self_dependency":
            fields["depends_on"] = (*deps[sid], sid)
        elif fault == "duplicate_id" and i:
            fields["id"] = ids[0]
        elif fault == "finished_id" and finished:
            fields["id"] = finished[0]
        elif fault == "bad_pattern":
            fields["checks"] = (Matches(pattern="(?=x)"),)
        elif fault == "model_step":
            fields.update(tool=None, allowed_tools=("noop",))
        elif fault == "model_step_unknown_tool":
            fields.update(tool=None, allowed_tools=("noop", "nope"))
        elif fault == "tool_step_with_allowed_tools":
            fields["allowed_tools"] = ("noop",)
        elif fault == "deep_args":
            value: Any = 1
            for _ in range(120):
                value = [value]
            fields["args"] = {"value": value}
        elif fault == "remote_ref":
            fields["output_schema"] = {"$ref": "https://example.com/s.json"}
        steps.append(Step.model_validate(fields))
    max_steps = draw(st.none() | st.integers(0, 12))
    ctx = CheckContext(tools=Toolset(noop), default_executor="model", finished=finished, max_steps=max_steps)
    return steps, ctx


@SETTINGS
@given(faulty_plans())
def test_steps_added_one_by_one_pass_exactly_when_the_whole_list_does(plan: tuple[list[Step], CheckContext]) -> None:
    steps, ctx = plan
    checker = IncrementalChecker(ctx)
    one_by_one = [checker.add(s) for s in steps]
    whole = check_steps(steps, ctx)
    note(f"one by one: {one_by_one}\nwhole: {whole}")
    assert (not any(one_by_one)) == (not whole)
    if not whole:
        assert checker.steps == tuple(steps)
    # a step's own problems are among those of the whole list (those about other steps aside)
    first_bad = next((problems for problems in one_by_one if problems), [])
    own = {"missing_dependency", "binding_missing_step", "duplicate_id"}
    assert {p.code for p in first_bad} - own <= {p.code for p in whole}


# -- strict JSON and the streaming reader ---------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='ab"\\{}[],: \n'),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(alphabet='k"}{', max_size=3), inner, max_size=3)
    ),
    max_leaves=12,
)


@SETTINGS
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
        max_leaves=30,
    )
)
def test_json_data_passes_and_reads_back(value: Any) -> None:
    assert json_problem(value) is None
    assert loads(json.dumps(value)) == value


@SETTINGS
@given(
    st.lists(st.dictionaries(st.sampled_from(["id", "args", "note"]), JSON_VALUES, max_size=3), max_size=6), st.data()
)
def test_streamed_steps_are_the_steps_of_the_whole_text(steps: list[dict[str, Any]], data: st.DataObject) -> None:
    text = "Here it is: " + json.dumps(
        {"reason": "r", "steps": steps, "confidence": 0.5}, indent=data.draw(st.sampled_from([None, 2]))
    )
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=30)))
    reader = StreamedSteps()
    found: list[dict[str, Any]] = []
    for start, end in zip([0, *cuts], [*cuts, len(text)], strict=True):
        found += reader.feed(text[start:end])
    assert found == steps
    assert reader.scalars == {"reason": "r", "confidence": 0.5}
    assert reader.held == 0


# -- the quick schema check ----------------------------------------------------------------------

_NAMES = st.sampled_from(["a", "b", "c", "d"])
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-5, max_value=5),
    st.floats(min_value=-5, max_value=5, allow_nan=False).map(lambda f: round(f, 1)),
    st.sampled_from(["", "x", "xyz", "a", "b"]),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_NAMES, inner, max_size=4)),
    max_leaves=12,
)
_TYPE_NAMES = st.sampled_from(["null", "boolean", "integer", "number", "string", "array", "object"])


@st.composite
def _schemas(draw: st.DrawFn, depth: int = 0) -> Any:
    """Schemas of the keywords the quick check covers, with an occasional one it does not."""
    if depth > 2 or draw(st.integers(0, 5)) == 0:
        return draw(st.sampled_from([True, {}, {"type": "string"}, {"type": "integer"}, {"type": "number"}]))
    schema: dict[str, Any] = {}
    keywords = draw(
        st.lists(
            st.sampled_from(
                [
                    "type",
                    "types",
                    "properties",
                    "required",
                    "additionalProperties",
                    "items",
                    "enum",
                    "const",
                    "anyOf",
                    "allOf",
                    "minimum",
                    "exclusiveMaximum",
                    "minLength",
                    "maxItems",
                    "description",
                    "default",
                    "format",
                    "oneOf",
                    "uniqueItems",
                ]
            ),
            unique=True,
            max_size=4,
        )
    )
    for key in keywords:
        if key == "type":
            schema["type"] = draw(_TYPE_NAMES)
        elif key == "types":
            schema["type"] = draw(st.lists(_TYPE_NAMES, min_size=1, max_size=3, unique=True))
        elif key == "properties":
            schema["properties"] = draw(st.dictionaries(_NAMES, _schemas(depth + 1), max_size=3))
        elif key == "required":
            schema["required"] = draw(st.lists(_NAMES, unique=True, max_size=2))
        elif key == "additionalProperties":
            schema["additionalProperties"] = draw(st.one_of(st.booleans(), _schemas(depth + 1)))
        elif key == "items":
            schema["items"] = draw(st.one_of(st.booleans(), _schemas(depth + 1)))
        elif key == "enum":
            schema["enum"] = draw(st.lists(_VALUES, min_size=1, max_size=4))
        elif key == "const":
            schema["const"] = draw(_VALUES)
        elif key in ("anyOf", "allOf", "oneOf"):
            schema[key] = draw(st.lists(_schemas(depth + 1), min_size=1, max_size=3))
        elif key in ("minimum", "exclusiveMaximum"):
            schema[key] = draw(st.one_of(st.integers(-3, 3), st.floats(-3, 3, allow_nan=False)))
        elif key in ("minLength", "maxItems"):
            schema[key] = draw(st.integers(0, 3))
        elif key == "format":
            schema["format"] = "date"
        elif key == "uniqueItems":
            schema["uniqueItems"] = True
        elif key == "description":
            schema["description"] = "what it is"
        else:
            schema[key] = draw(_VALUES)
    return schema


def _has_integral_float(value: Any) -> bool:
    if isinstance(value, float):
        return value.is_integer()
    if isinstance(value, list):
        return any(_has_integral_float(v) for v in value)
    if isinstance(value, dict):
        return any(_has_integral_float(v) for v in value.values())
    return False


@SETTINGS
@given(schema=_schemas(), values=st.lists(_VALUES, min_size=1, max_size=6))
def test_the_quick_check_passes_only_what_the_validator_passes(schema: Any, values: list[Any]) -> None:
    """A value the quick check passes has no problem for the validator; and apart from the cases it
    leaves to the validator (a float as an integer), it passes every value the validator passes."""
    SafeValidator.check_schema(schema)
    quick = quick_check(schema)
    validator = SafeValidator(schema)
    uncovered = {"oneOf", "uniqueItems"} & set(json.dumps(schema).replace('"', " ").split())
    if quick is None:
        assert uncovered, schema
        return
    for value in values:
        valid = not list(validator.iter_errors(value))
        note(f"{value!r}: valid {valid}")
        if quick(value):
            assert valid
        elif not _has_integral_float(value):
            assert not valid
        with bounded():
            assert not quick(value)  # a validation with a work budget counts its work: the validator's


# -- binding resolution --------------------------------------------------------------------------

KEYS = st.text(alphabet=string.ascii_letters + string.digits + "_-", min_size=1, max_size=8)
SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(KEYS, inner, max_size=5),
    max_leaves=25,
)


@st.composite
def paths_into(draw: st.DrawFn, value: Any) -> tuple[list[str], Any]:
    """A random valid path into ``value`` and the value found there."""
    path: list[str] = []
    while draw(st.booleans()):
        if isinstance(value, dict) and value:
            key = draw(st.sampled_from(sorted(value)))
            path.append(key)
            value = value[key]
        elif isinstance(value, list) and value:
            index = draw(st.integers(-len(value), len(value) - 1))
            path.append(str(index))
            value = value[index]
        else:
            break
    return path, value


def same_json(a: Any, b: Any) -> bool:
    """Equal, with the same JSON types all the way down (``1``, ``1.0`` and ``True`` differ)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


@SETTINGS
@given(JSON, st.data())
def test_path_binding_returns_the_value_at_the_path(output: Any, data: st.DataObject) -> None:
    path, expected = data.draw(paths_into(output))
    ref = "${" + ".".join(["out", *path]) + "}"
    compiled = compile_args({"x": ref, "nested": [{"y": ref}]})
    assert compiled.problems == ()
    resolved = compiled.resolve({"out": output, "other": 1})
    assert same_json(resolved["x"], expected)
    assert same_json(resolved["nested"][0]["y"], expected)


@SETTINGS
@given(JSON)
def test_whole_value_binding_keeps_the_value_identical(output: Any) -> None:
    resolved = compile_args({"x": "${out}"}).resolve({"out": output})
    assert resolved["x"] is output
    assert same_json(resolved["x"], output)


@SETTINGS
@given(JSON, st.data(), st.text(alphabet=string.ascii_letters + " :", max_size=10))
def test_text_binding_renders_the_value(output: Any, data: st.DataObject, prefix: str) -> None:
    path, expected = data.draw(paths_into(output))
    ref = "${" + ".".join(["out", *path]) + "}"
    resolved = compile_args({"x": f"{prefix}[{ref}]"}).resolve({"out": output})
    assert resolved["x"] == f"{prefix}[{render_text(expected)}]"


# -- the scheduler, end to end -------------------------------------------------------------------


@dataclass
class Recorder:
    """What the tool saw, in order: ("start" | "done" | "failed", step, fail flag)."""

    log: list[tuple[str, str, bool]] = field(default_factory=list)
    yields: dict[str, int] = field(default_factory=dict)


def step_json(sid: str, deps: tuple[str, ...], fail: bool) -> dict[str, Any]:
    return tool_step(sid, "work", {"step": sid, "fail": fail}, *deps)


async def run_dag(
    deps: dict[str, tuple[str, ...]],
    failing: set[str],
    yields: dict[str, int],
    replans: int,
    concurrency: int,
) -> tuple[RunResult, Recorder]:
    rec = Recorder(yields=yields)

    @tool
    async def work(step: str, fail: bool) -> str:
        """Do one step's work."""
        rec.log.append(("start", step, fail))
        for _ in range(rec.yields.get(step, 0)):
            await asyncio.sleep(0)
        if fail:
            rec.log.append(("failed", step, fail))
            raise ToolError(f"{step} failed")
        rec.log.append(("done", step, fail))
        return f"out:{step}"

    holder: dict[str, RunState] = {}

    def planner_reply(request: ModelRequest) -> dict[str, Any]:
        if request.purpose == "planner.propose":
            return {"steps": [step_json(sid, d, sid in failing) for sid, d in deps.items()]}
        if request.purpose == "planner.patch":
            # every unfinished step again, this time set to succeed
            state = holder["state"]
            done = {sid for sid, r in state.steps.items() if r.status == "succeeded"}
            steps = [step_json(sid, d, False) for sid, d in deps.items() if sid not in done]
            return {"reason": "retry without failures", "steps": steps}
        assert request.purpose == "planner.finish"
        return {"answer": "done"}

    planner = ScriptedModel([planner_reply] * 200)
    agent = Agent(
        planner,
        tools=[work],
        budget=Budget(replans=replans),
        limits=Limits(max_concurrency=concurrency, stall_rounds=50),
    )
    run = agent.start("run the DAG")
    holder["state"] = run.state
    async with asyncio.timeout(60):  # a guard against a hang only; nothing measures time
        result = await run.result()
    return result, rec


def check_run(
    deps: dict[str, tuple[str, ...]], failing: set[str], replans: int, result: RunResult, rec: Recorder
) -> None:
    # every run ends with a reason
    assert result.stop.kind in {"goal_met", "max_replans", "stalled"}, result.stop
    assert result.events[-1].kind == "run_finished"

    # the tool: each (step, fail) pair starts at most once; no step starts before its dependencies finished well
    starts = [(s, f) for what, s, f in rec.log if what == "start"]
    assert len(starts) == len(set(starts)), starts
    succeeded_so_far: set[str] = set()
    for what, sid, _fail in rec.log:
        if what == "start":
            assert set(deps[sid]) <= succeeded_so_far, (sid, deps[sid], succeeded_so_far)
        elif what == "done":
            succeeded_so_far.add(sid)

    # the log: a step starts only after all its dependencies succeeded, and once per definition of it
    state = RunState()
    started: set[tuple[str, int]] = set()
    for event in result.events:
        state.apply(event)
        if isinstance(event, StepStarted):
            record = state.steps[event.step_id]
            for d in record.step.depends_on:
                assert d in state.outputs, (event.step_id, d)
            key = (event.step_id, record.plan_version)
            assert key not in started, key
            started.add(key)
        elif isinstance(event, StepSucceeded):
            assert event.output == f"out:{event.step_id}"
        elif isinstance(event, PlanProposed):
            assert event.plan.version == len(state.plans)

    assert RunState.fold(result.events).outputs == result.outputs
    if result.stop.kind == "goal_met":
        assert result.answer == "done"
        assert result.outputs == {sid: f"out:{sid}" for sid in deps}
    if not failing:
        assert result.stop.kind == "goal_met"
        assert result.replans == 0
        assert sorted(s for s, _ in starts) == sorted(deps)
    else:
        assert result.replans <= replans
        if replans == 0:
            assert result.stop.kind == "max_replans"
            assert len(result.plans) == 1


@SETTINGS
@given(
    dags(),
    st.data(),
    st.sampled_from([0, 0, 1, 3]),
    st.integers(min_value=1, max_value=8),
)
async def test_scheduler_end_to_end(
    deps: dict[str, tuple[str, ...]], data: st.DataObject, replans: int, concurrency: int
) -> None:
    ids = list(deps)
    failing = set(data.draw(st.lists(st.sampled_from(ids), unique=True, max_size=3)))
    yields = {sid: data.draw(st.integers(0, 3)) for sid in ids}
    note(f"deps={deps} failing={sorted(failing)} yields={yields} replans={replans} concurrency={concurrency}")
    result, rec = await run_dag(deps, failing, yields, replans, concurrency)
    check_run(deps, failing, replans, result, rec)


async def test_step_dispatched_while_a_patch_is_installed_runs_once() -> None:
    """A step handed to its task just before a patch lands is already running: it must not start again."""
    deps: dict[str, tuple[str, ...]] = {"a": (), "b": (), "c": (), "d": ()}
    result, rec = await run_dag(deps, {"a"}, {"a": 0, "b": 1, "c": 2, "d": 2}, replans=1, concurrency=2)
    starts = [s for what, s, _ in rec.log if what == "start"]
    assert sorted(starts) == ["a", "a", "b", "c", "d"]
    check_run(deps, {"a"}, 1, result, rec)


async def test_dependents_wait_for_every_dependency_after_a_patch() -> None:
    """A step run twice must not count twice towards its dependents' readiness."""
    deps: dict[str, tuple[str, ...]] = {
        "s0": (),
        "s1": ("s0",),
        "s2": (),
        "s3": ("s2",),
        "s4": ("s3",),
        "s5": ("s1", "s4"),
        "s6": ("s1",),
    }
    yields = {"s0": 2, "s1": 1, "s2": 1, "s3": 1, "s4": 0, "s5": 2, "s6": 1}
    result, rec = await run_dag(deps, {"s2", "s3"}, yields, replans=3, concurrency=2)
    order = [(what, sid) for what, sid, _ in rec.log if what in ("start", "done")]
    assert order.index(("start", "s5")) > order.index(("done", "s4")), order
    assert result.stop.kind == "goal_met", result.stop
    check_run(deps, {"s2", "s3"}, 3, result, rec)
