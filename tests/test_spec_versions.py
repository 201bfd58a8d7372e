"""Agent specs of every recorded version keep loading into the same typed values, and runs that
recorded one (under the first event's ``cli`` key, before version 10) resume and replay."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from planexec import ApprovalDecision, Escalation
from planexec.log import RunStarted
from planexec.models import ModelSettings
from planexec.runs import (
    SPEC_VERSION,
    AgentSpec,
    EnsembleRule,
    ImportRef,
    LimitRule,
    MCPCommand,
    MCPHeader,
    MCPUrl,
    ModelRef,
    ReviewRule,
    Rules,
    TrustRule,
    answer,
    build_agent,
    recorded_spec,
    resume,
)
from planexec.store import SQLiteStore

SPECS = Path(__file__).parent / "fixtures" / "specs"

V9_RULES = Rules(
    turn_format="flat",
    sealed=False,
    extractor=ModelRef("openai:gpt-4.1-nano"),
    escalation=Escalation(confidence_floor=0.6, on_low_confidence="stop", on_fail="retry", retries=2),
    ensemble=EnsembleRule(
        escalate_to=(ModelRef("openai:gpt-4.1"), ModelRef("anthropic:claude-sonnet-4-5")),
        escalate_on=("repair_failed", "low_confidence"),
        confidence_below=0.4,
    ),
    review=ReviewRule(
        checks=(ImportRef("billing.checks", "cites_invoice"),),
        rubric="cites the invoice",
        judge=ModelRef("openai:gpt-4.1"),
        checklist=("amount is right",),
        max_rounds=3,
    ),
    limits=LimitRule(on_budget="ask", over_forecast="run"),
    trust=TrustRule(trusted_tools=("read_invoice",), untrusted_effects=False, answer="withhold"),
)

V9 = AgentSpec(
    planner=ModelRef("scripted:/srv/agent/planner.json"),
    executor=ModelRef("openai:gpt-4.1-mini"),
    tools=(ImportRef("billing.tools", "TOOLS"),),
    mcp=(MCPCommand(("uvx", "mcp-server-fetch", "--port", "0")), MCPUrl("https://mcp.example.org/mcp")),
    mcp_headers=(MCPHeader("X-Team", "billing"), MCPHeader("Authorization", "Bearer ${MCP_TOKEN}")),
    executors=(ImportRef("billing.deploy", "EXECUTORS"),),
    memory=True,
    policy="upfront",
    replan="after_each_step",
    budget={"steps": 12, "cost": None},
    approve_plan=True,
    constraints=("never pay twice",),
    cwd="/srv/agent",
    planner_settings=ModelSettings(temperature=0.2, stop=("END",)),
    executor_settings=ModelSettings(max_tokens=256),
    step_timeout=45.0,
    rules=V9_RULES,
)
"""What the version 9 fixture reads as; each earlier version is this less what it lacked."""


def _expected(version: int) -> AgentSpec:
    """The typed spec the fixture of ``version`` reads as."""
    spec = V9
    if version < 9:
        spec = spec.with_typed(
            rules=Rules(
                **{
                    **V9_RULES.__dict__,
                    "limits": None,
                    "trust": TrustRule(trusted_tools=("read_invoice",), untrusted_effects=False),
                }
            )
        )
    if version < 8:
        spec = spec.with_typed(rules=Rules(**{**spec.rules.__dict__, "trust": None}))
    if version < 7:
        spec = spec.with_typed(policy="step", rules=Rules(**{**spec.rules.__dict__, "extractor": None}))
    if version < 6:
        spec = spec.with_typed(executors=(), memory=False)
    if version < 5:
        spec = spec.with_typed(rules=Rules(**{**spec.rules.__dict__, "ensemble": None}))
    if version < 4:
        spec = spec.with_typed(mcp=(), mcp_headers=())
    if version < 3:
        spec = spec.with_typed(rules=Rules())
    if version < 2:
        spec = spec.with_typed(planner_settings=ModelSettings(), executor_settings=ModelSettings(), step_timeout=None)
    return spec


@pytest.mark.parametrize("version", range(1, SPEC_VERSION + 1))
def test_a_spec_of_every_version_loads_into_its_typed_values(version: int) -> None:
    data = json.loads((SPECS / f"spec_v{version}.json").read_text())
    assert data.get("version", 1) == version
    spec = AgentSpec.from_dict(data)
    assert spec.problems == ()
    assert spec == _expected(version)
    again = json.loads(json.dumps(spec.to_dict()))
    assert again["version"] == SPEC_VERSION
    assert AgentSpec.from_dict(again) == spec


def test_the_recorded_form_is_typed() -> None:
    data = json.loads((SPECS / f"spec_v{SPEC_VERSION}.json").read_text())
    assert data == V9.to_dict()
    assert data["budget"] == {"steps": 12, "cost": None}
    assert data["tools"] == [{"module": "billing.tools", "attr": "TOOLS"}]
    assert data["mcp"] == [
        {"command": ["uvx", "mcp-server-fetch", "--port", "0"]},
        {"url": "https://mcp.example.org/mcp"},
    ]
    assert data["planner_settings"] == {"temperature": 0.2, "stop": ["END"]}
    assert data["rules"]["escalation"]["confidence_floor"] == 0.6


def test_texts_and_typed_values_build_the_same_spec() -> None:
    texts = AgentSpec(
        planner="scripted:/srv/agent/planner.json",
        executor="openai:gpt-4.1-mini",
        tools=("billing.tools:TOOLS",),
        budget={"steps": "12", "cost": "none"},
        planner_settings=("temperature=0.2",),
        step_timeout="45",
        rules={"on_fail": "retry", "escalate_to": ("openai:gpt-4.1",)},
    )
    typed = AgentSpec(
        planner=ModelRef("scripted:/srv/agent/planner.json"),
        executor=ModelRef("openai:gpt-4.1-mini"),
        tools=(ImportRef("billing.tools", "TOOLS"),),
        budget={"steps": 12, "cost": None},
        planner_settings=ModelSettings(temperature=0.2),
        step_timeout=45.0,
        rules=Rules(
            escalation=Escalation(on_fail="retry"), ensemble=EnsembleRule(escalate_to=(ModelRef("openai:gpt-4.1"),))
        ),
    )
    assert texts == typed
    assert texts.problems == typed.problems == ()


def test_typed_values_are_checked_like_texts() -> None:
    spec = AgentSpec(
        policy="sideways",
        budget={"steps": -3, "tokens": 5},
        step_timeout=0,
        rules=Rules(ensemble=EnsembleRule(escalate_to=(ModelRef("openai:gpt-4.1"),), confidence_below=2.0)),
        mcp_headers=(MCPHeader("Authorization", "Bearer secret"),),
    )
    wheres = [p.where for p in spec.problems]
    assert wheres == [
        "policy",
        "budget.tokens",
        "budget.steps",
        "step_timeout",
        "confidence_below",
        "mcp_headers 'Authorization'",
    ]
    assert spec.policy == "upfront"  # a value that cannot be read reads as unset


TOOLS = '''
from planexec import tool


@tool(trusted=True)
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


TOOLS = [add]
'''
PLAN = {"steps": [{"id": "sum", "description": "Add 2 and 3", "tool": "add", "args": {"a": 2, "b": 3}}]}


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    s = SQLiteStore(tmp_path / "runs.db")
    yield s
    await s.close()


async def test_a_run_recorded_with_a_version_9_spec_resumes_and_replays(tmp_path: Path, store: SQLiteStore) -> None:
    module = f"spec_v9_tools_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(TOOLS)
    script = tmp_path / "planner.json"
    script.write_text(json.dumps([PLAN, {"answer": "5"}]))
    old: dict[str, Any] = {
        "version": 9,
        "planner": f"scripted:{script}",
        "tools": [f"{module}:TOOLS"],
        "approve_plan": True,
        "cwd": str(tmp_path),
        "budget": {"steps": "10", "cost": "none"},
        "planner_settings": ["temperature=0"],
        "rules": {"on_fail": "patch", "untrusted_answer": "label"},
    }
    agent = build_agent(AgentSpec.from_dict(old), store=store)
    waiting = await agent.start("add", metadata={"cli": old}).result()
    assert waiting.stop.kind == "waiting"

    log = [e.event for e in await store.read(waiting.run_id)]
    assert isinstance(log[0], RunStarted)
    assert "agent_spec" not in log[0].config
    recorded = await recorded_spec(store, log[0])
    assert recorded.own
    assert recorded.problems == ()
    assert recorded.spec.budget == {"steps": 10, "cost": None}

    await answer(store, waiting.run_id, ApprovalDecision(approved=True))
    done = await (await resume(store, waiting.run_id)).result()
    assert (done.stop.kind, done.answer) == ("goal_met", "5")
    report = await build_agent(recorded.spec, store=store).replay(waiting.run_id)
    assert report.matched, report
