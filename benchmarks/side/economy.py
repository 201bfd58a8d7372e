"""W5 (economy: what the planner is sent) and W6, first half (a failed step and the replan).

The task: N sequential steps (step i looks record i up; its ~40-character result feeds nothing
else), model latency 0. planexec runs it under the upfront policy, the step-by-step policy, and
upfront with one step failing once; LangGraph's plan-and-execute agent runs the same task, and the
same task with the same failure. Figures per run: model calls, planner calls (planexec: every call,
all of them made by its planner; plan-and-execute: the planner and replanner calls, its executor
agent's calls counted apart), characters of message text sent to the planner per call and in
total, and all characters sent to any model. Tokens are characters ÷ 4. Schemas sent beside the
messages (planexec's plan schema; LangChain's tool and structured-output schemas) are counted
apart, as ``planner_schema_chars``.

``planner_prefix_share``: of the planner's input after its first call (schemas and messages, as a
provider's prompt cache sees them: schemas first, then each message's role and text), the share that
repeats the start of an earlier planner call of the run — what a prefix cache could serve,
character for character, with no minimum length (``benchmarks.side.prompt_cache`` measures it in
tokens against a stand-in server, with the providers' rules and prices).
"""

from __future__ import annotations

import json
import time
from typing import Any

from benchmarks.side.common import FailOnce, lc_lookup, px_lookup
from planexec import Agent, Planner
from planexec.log import PlanProposed, StepFailed
from planexec.models import ModelRequest
from planexec.testing import ScriptedModel

__all__ = ["task_steps", "w5_langgraph", "w5_planexec", "w5_send", "w6_replan_langgraph", "w6_replan_planexec"]


def task_steps(n: int) -> list[dict[str, Any]]:
    return [
        {
            "id": f"s{i}",
            "description": f"look record {i} up in the ledger",
            "tool": "lookup",
            "args": {"i": i},
            "depends_on": [f"s{i - 1}"] if i else [],
        }
        for i in range(n)
    ]


def prefix_share(prompts: list[str]) -> float | None:
    """Of the characters of ``prompts[1:]``, the share that repeats the start of an earlier prompt."""
    if len(prompts) < 2:
        return None
    served = sum(max(_common(p, q) for q in prompts[:i]) for i, p in enumerate(prompts) if i)
    return served / sum(len(p) for p in prompts[1:])


def _common(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _prompt(request: ModelRequest) -> str:
    schemas: list[Any] = []
    if request.output is not None:
        schemas.append(dict(request.output.json_schema))
    schemas += [dict(t.parameters) for t in request.tools]
    text = json.dumps(schemas, separators=(",", ":")) if schemas else ""
    return text + "".join(f"<{m.role}>{m.content}" for m in request.messages)


def _figures(planner_chars: list[int], all_chars: int, calls: int, schema_chars: int) -> dict[str, Any]:
    return {
        "model_calls": calls,
        "planner_calls": len(planner_chars),
        "planner_chars": sum(planner_chars),
        "planner_chars_max": max(planner_chars),
        "planner_chars_per_call": round(sum(planner_chars) / len(planner_chars), 1),
        "all_chars": all_chars,
        "planner_schema_chars": schema_chars,
    }


def _schema_chars(request: ModelRequest) -> int:
    """Characters of the schemas a planexec request sends beside its messages, as JSON."""
    schemas: list[Any] = [dict(t.parameters) for t in request.tools]
    if request.output is not None:
        schemas.append(dict(request.output.json_schema))
    return len(json.dumps(schemas, separators=(",", ":"))) if schemas else 0


def _turn(step: dict[str, Any]) -> dict[str, Any]:
    return {"thought": f"next: {step['description']}", "confidence": 0.9, "stop": False, "step": step}


async def w5_planexec(n: int, policy: str, *, fail: str | None = None) -> dict[str, Any]:
    """policy: ``upfront`` or ``step``; ``fail``: a step id that fails once (upfront only)."""
    steps = task_steps(n)
    fails = FailOnce(fail) if fail else None
    script: list[Any]
    if policy == "step":
        script = [*(_turn(s) for s in steps), {"thought": "all done", "confidence": 0.9, "stop": True, "answer": "ok"}]
    else:
        script = [{"reason": "one lookup per record", "steps": steps}]
        if fail is not None:
            at = next(i for i, s in enumerate(steps) if s["id"] == fail)
            script.append({"reason": "the record was locked: try it again", "steps": steps[at:]})
        script.append({"answer": "ok"})
    model = ScriptedModel(script)
    planner = Planner(model=model, policy="step" if policy == "step" else "upfront")
    result = await Agent(planner, tools=[px_lookup(fails)], store=None).run("look every record up")
    assert result.ok, result.stop
    model.assert_consumed()
    chars = [c.chars for c in model.calls]
    out = _figures(chars, sum(chars), len(model.calls), sum(_schema_chars(c) for c in model.calls))
    out["planner_prefix_share"] = prefix_share([_prompt(c) for c in model.calls])
    if fails is not None:
        out["tool_calls"] = fails.calls
    return out


def _graph(steps: list[dict[str, Any]], fails: FailOnce | None) -> tuple[Any, Any]:
    from benchmarks.peers.langgraph_plan_execute import PlanExecuteResponder, build_plan_execute
    from benchmarks.peers.scripted_chat import ScriptedChatModel

    model = ScriptedChatModel(responder=PlanExecuteResponder(steps, answer="ok"))
    return model, build_plan_execute(model, [lc_lookup(fails)])


def _langgraph_figures(model: Any) -> dict[str, Any]:
    calls = [c for c in model.calls if c.tools in (("Plan",), ("Act",))]
    planner = [c.chars for c in calls]
    out = _figures(planner, sum(c.chars for c in model.calls), len(model.calls), sum(c.schema_chars for c in calls))
    out["executor_calls"] = len(model.calls) - len(planner)
    out["planner_prefix_share"] = prefix_share([c.prompt for c in calls])
    return out


async def w5_langgraph(n: int, *, fail: str | None = None) -> dict[str, Any]:
    fails = FailOnce(fail) if fail else None
    model, graph = _graph(task_steps(n), fails)
    out = await graph.ainvoke({"input": "look every record up"})
    assert out["response"] == "ok"
    assert len(out["past_steps"]) == n + (1 if fail else 0)
    figures = _langgraph_figures(model)
    if fails is not None:
        figures["tool_calls"] = fails.calls
    return figures


async def w5_send(n: int) -> dict[str, Any]:
    """The Send fan-out graph on the same task: one orchestrator call and one answer call. (Its
    documented form has no replanning: a failing worker fails the whole run.)"""
    from benchmarks.peers.langgraph_send import SendResponder, build_send
    from benchmarks.peers.scripted_chat import ScriptedChatModel

    model = ScriptedChatModel(responder=SendResponder(task_steps(n), answer="ok"))
    out = await build_send(model, [lc_lookup()]).ainvoke({"goal": "look every record up"})
    assert out["answer"] == "ok"
    assert len(out["completed"]) == n
    chars = [c.chars for c in model.calls]
    return _figures(chars, sum(chars), len(chars), sum(c.schema_chars for c in model.calls))


W6_STEPS = 20
W6_FAIL = "s9"
"""W6: a 20-step plan whose 10th step fails once."""


def _failed_at(fails: FailOnce) -> float:
    assert fails.failed_at is not None
    return fails.failed_at


def _rerun_finished(calls: dict[str, int], failing: str) -> int:
    """Calls of steps other than the failing one beyond their first: finished steps run again."""
    return sum(c - 1 for sid, c in calls.items() if sid != failing)


async def w6_replan_planexec() -> dict[str, Any]:
    baseline = await w5_planexec(W6_STEPS, "upfront")
    steps = task_steps(W6_STEPS)
    fails = FailOnce(W6_FAIL)
    at = next(i for i, s in enumerate(steps) if s["id"] == W6_FAIL)
    model = ScriptedModel(
        [
            {"reason": "one lookup per record", "steps": steps},
            {"reason": "the record was locked: try it again", "steps": steps[at:]},
            {"answer": "ok"},
        ]
    )
    result = await Agent(model, tools=[px_lookup(fails)], store=None).run("look every record up")
    assert result.ok, result.stop
    assert any(isinstance(e, StepFailed) for e in result.events)
    patched = next(e for e in result.events if isinstance(e, PlanProposed) and e.trigger == "failure")
    chars = [c.chars for c in model.calls]
    return {
        "finished_steps_rerun": _rerun_finished(fails.calls, W6_FAIL),
        "extra_planner_calls": len(chars) - baseline["planner_calls"],
        "extra_planner_chars": sum(chars) - baseline["planner_chars"],
        "extra_model_calls": len(chars) - baseline["model_calls"],
        "ms_to_patched_plan": (patched.at - _failed_at(fails)) * 1e3,
        "planner_prefix_share": prefix_share([_prompt(c) for c in model.calls]),
    }


async def w6_replan_langgraph() -> dict[str, Any]:
    baseline = await w5_langgraph(W6_STEPS)
    fails = FailOnce(W6_FAIL)
    model, graph = _graph(task_steps(W6_STEPS), fails)
    failed_at = patched_at = 0.0
    async for update in graph.astream({"input": "look every record up"}, stream_mode="updates"):
        if "agent" in update and not failed_at and str(update["agent"]["past_steps"][0][1]).startswith("failed"):
            failed_at = _failed_at(fails)
        elif "replan" in update and failed_at and not patched_at:
            patched_at = time.time()
    figures = _langgraph_figures(model)
    return {
        "finished_steps_rerun": _rerun_finished(fails.calls, W6_FAIL),
        "extra_planner_calls": figures["planner_calls"] - baseline["planner_calls"],
        "extra_planner_chars": figures["planner_chars"] - baseline["planner_chars"],
        "extra_model_calls": figures["model_calls"] - baseline["model_calls"],
        "ms_to_patched_plan": (patched_at - failed_at) * 1e3,
        "planner_prefix_share": figures["planner_prefix_share"],
    }
