"""LangGraph's orchestrator–worker pattern with ``Send``, built the way LangGraph's workflow
documentation builds it, run over a plan with dependencies superstep by superstep.

As documented: an ``orchestrator`` node asks the model for a plan through structured output; a
conditional edge returns one ``Send`` per piece of work to a ``worker`` node, all of which run in
parallel within one superstep and append their results to a list channel with an ``operator.add``
reducer; a ``synthesizer`` node writes the answer. The documented graph fans out once; our plans
have dependencies, so the workers join in a ``join`` node and the same conditional edge sends the
steps whose dependencies have all finished, superstep by superstep, until none are left. A worker
runs its step's tool (no model call, as planexec's tool executor does not call one either), and the
synthesizer makes the workload's one answer call (the documented one only joins the sections).
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.tools import BaseTool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Send
from pydantic import BaseModel, Field

from benchmarks.peers.scripted_chat import ScriptedChatModel, tool_call

__all__ = ["SendResponder", "SendState", "build_send"]


class PlanStep(BaseModel):
    """One step: a tool call that may start once the steps it depends on have finished."""

    id: str
    description: str
    tool: str
    args: dict[str, Any] = Field(default_factory=dict)
    depends_on: list[str] = Field(default_factory=list)


class Steps(BaseModel):
    """The plan: every step needed to reach the goal."""

    steps: list[PlanStep]


class SendState(TypedDict, total=False):
    goal: str
    steps: list[dict[str, Any]]
    completed: Annotated[list[tuple[str, Any]], operator.add]
    answer: str


class WorkerState(TypedDict):
    step: dict[str, Any]
    completed: Annotated[list[tuple[str, Any]], operator.add]


ORCHESTRATOR_SYSTEM = (
    "Break the goal into steps, each a call of one of the tools. Say which earlier steps each step "
    "needs; steps that need nothing unfinished run in parallel."
)
SYNTHESIZER_SYSTEM = "Write the final answer to the goal from the results of the steps."


class SendResponder:
    """The scripted orchestrator (the plan) and synthesizer (the answer)."""

    def __init__(self, steps: Sequence[Mapping[str, Any]], answer: str = "done") -> None:
        self.plan = {"steps": [dict(s) for s in steps]}
        self.answer = answer

    def __call__(self, messages: Sequence[BaseMessage], tools: Sequence[str]) -> AIMessage:
        if tuple(tools) == ("Steps",):
            return tool_call("Steps", self.plan)
        return AIMessage(content=self.answer)


def build_send(
    model: ScriptedChatModel, tools: Sequence[BaseTool], *, checkpointer: BaseCheckpointSaver[Any] | None = None
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """orchestrator → (Send worker …) → join → (Send worker … | synthesizer) → end."""
    planner = model.with_structured_output(Steps)
    by_name = {t.name: t for t in tools}

    async def orchestrator(state: SendState) -> dict[str, Any]:
        plan = await planner.ainvoke([SystemMessage(ORCHESTRATOR_SYSTEM), HumanMessage(state["goal"])])
        assert isinstance(plan, Steps)
        return {"steps": [s.model_dump() for s in plan.steps]}

    async def worker(state: WorkerState) -> dict[str, Any]:
        step = state["step"]
        output = await by_name[step["tool"]].ainvoke(step["args"])
        return {"completed": [(step["id"], output)]}

    def join(state: SendState) -> dict[str, Any]:
        return {}

    async def synthesizer(state: SendState) -> dict[str, Any]:
        record = "\n".join(f"- {sid}: {out}" for sid, out in state.get("completed", []))
        reply = await model.ainvoke([SystemMessage(SYNTHESIZER_SYSTEM), HumanMessage(f"{state['goal']}\n{record}")])
        return {"answer": str(reply.content)}

    def assign_workers(state: SendState) -> list[Send] | str:
        done = {sid for sid, _ in state.get("completed", [])}
        ready = [
            Send("worker", {"step": s})
            for s in state["steps"]
            if s["id"] not in done and all(d in done for d in s["depends_on"])
        ]
        return ready or "synthesizer"

    builder = StateGraph(SendState)
    builder.add_node("orchestrator", orchestrator)
    builder.add_node("worker", worker)
    builder.add_node("join", join)
    builder.add_node("synthesizer", synthesizer)
    builder.add_edge(START, "orchestrator")
    builder.add_conditional_edges("orchestrator", assign_workers, ["worker", "synthesizer"])
    builder.add_edge("worker", "join")
    builder.add_conditional_edges("join", assign_workers, ["worker", "synthesizer"])
    builder.add_edge("synthesizer", END)
    return builder.compile(checkpointer=checkpointer)
