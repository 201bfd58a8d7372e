"""LangGraph's plan-and-execute agent, built the way LangGraph's plan-and-execute tutorial builds it.

The graph has three nodes: ``planner`` (a prompt piped into the model's structured output, a list
of step strings), ``agent`` (a prebuilt ReAct agent that carries out the first step of the plan,
calling tools) and ``replan`` (a prompt with the objective, the plan and every past step with its
result, piped into structured output: either the steps still to do or the final response). The
replanner runs after every step. The state keeps the input, the plan, the past steps (appended by a
reducer) and the response. The prompts are our own wording of the same content.

The scripted model plays all three roles (see ``PlanExecuteResponder``); it answers from the request
alone, so one compiled graph serves concurrent runs and a resumed process.
"""

from __future__ import annotations

import json
import operator
import warnings
from collections.abc import Sequence
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.tools import BaseTool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from pydantic import BaseModel, Field

from benchmarks.peers.scripted_chat import ScriptedChatModel, tool_call

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from langgraph.prebuilt import create_react_agent

__all__ = ["PlanExecuteResponder", "PlanExecuteState", "build_plan_execute", "step_text"]


class PlanExecuteState(TypedDict, total=False):
    input: str
    plan: list[str]
    past_steps: Annotated[list[tuple[str, str]], operator.add]
    response: str


class Plan(BaseModel):
    """The steps still to do, in the order to do them."""

    steps: list[str] = Field(description="the steps, in order; each must be doable on its own")


class Response(BaseModel):
    """The final answer for the user."""

    response: str


class Act(BaseModel):
    """What to do next: answer the user, or carry on with a revised plan."""

    action: Response | Plan = Field(
        description="Response to answer the user now; Plan to list the steps that still need doing."
    )


PLANNER_SYSTEM = (
    "Given an objective, write a short step-by-step plan. Each step should be a single task that, "
    "done correctly, moves the work toward the answer; leave out anything unnecessary. The last step "
    "should produce the final answer. Give each step every detail it needs, so no step relies on "
    "context it was not given."
)

REPLANNER_TEMPLATE = """Given an objective, keep a short step-by-step plan up to date. Each step should \
be a single task that, done correctly, moves the work toward the answer; leave out anything unnecessary. \
The last step should produce the final answer. Give each step every detail it needs.

Your objective:
{input}

The plan you were following:
{plan}

The steps done so far, with their results:
{past_steps}

Revise the plan to match. If nothing more is needed and you can answer the user, respond with the \
answer. Otherwise list only the steps that still need doing; never repeat a step that is done."""

EXECUTOR_PROMPT = "You are a careful assistant that carries out one task at a time with the tools given."

TASK_MARK = "\n\nCarry out step 1 of this plan: "


def step_text(step: dict[str, Any]) -> str:
    """How a planexec plan step reads as a plan-and-execute step string."""
    args = json.dumps(step["args"], separators=(",", ":"))
    return f"{step['id']}: {step['description']} (tool {step['tool']}, args {args})"


class PlanExecuteResponder:
    """The scripted planner, executor and replanner for one plan (a planexec plan's steps).

    Planner: the plan as step strings. Executor: call the tool of the step it is given, then report
    ``done: <output>`` (or ``failed: <error>``). Replanner: the steps after the last one done, the
    failed step again if it failed, and the answer once every step is done.
    """

    def __init__(self, steps: Sequence[dict[str, Any]], answer: str = "done") -> None:
        self.steps = list(steps)
        self.texts = [step_text(s) for s in self.steps]
        self.index = {s["id"]: i for i, s in enumerate(self.steps)}
        self.answer = answer

    def __call__(self, messages: Sequence[BaseMessage], tools: Sequence[str]) -> AIMessage:
        last = messages[-1]
        if tuple(tools) == ("Plan",):
            return tool_call("Plan", {"steps": self.texts})
        if tuple(tools) == ("Act",):
            return self._replan(str(last.content))
        if isinstance(last, ToolMessage):
            status = "failed" if last.status == "error" else "done"
            return AIMessage(content=f"{status}: {last.content}")
        text = str(last.content)
        task = text[text.rfind(TASK_MARK) + len(TASK_MARK) :]
        step = self.steps[self.index[task.split(":", 1)[0]]]
        return tool_call(step["tool"], step["args"])

    def _replan(self, prompt: str) -> AIMessage:
        # the last past step is the last "('<id>: ..." in the rendered list (a list, "['<id>: ...", once
        # the state has been through a checkpoint); search from the end
        start = max(prompt.rfind("('"), prompt.rfind("['")) + 2
        step_id = prompt[start : prompt.index(":", start)]
        result_at = prompt.index("', ", start) + 3
        failed = prompt[result_at : result_at + 8].lstrip("'\"").startswith("failed")
        k = self.index[step_id] + (0 if failed else 1)
        if k >= len(self.texts):
            return tool_call("Act", {"action": {"response": self.answer}})
        return tool_call("Act", {"action": {"steps": self.texts[k:]}})


def build_plan_execute(
    model: ScriptedChatModel, tools: Sequence[BaseTool], *, checkpointer: BaseCheckpointSaver[Any] | None = None
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The plan-and-execute graph: planner → agent → replan → (agent | end)."""
    planner = ChatPromptTemplate.from_messages(
        [("system", PLANNER_SYSTEM), ("placeholder", "{messages}")]
    ) | model.with_structured_output(Plan)
    replanner = ChatPromptTemplate.from_template(REPLANNER_TEMPLATE) | model.with_structured_output(Act)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create_react_agent is deprecated in LangGraph 1.x, still shipped
        agent = create_react_agent(model, list(tools), prompt=EXECUTOR_PROMPT)

    async def execute_step(state: PlanExecuteState) -> dict[str, Any]:
        plan = state["plan"]
        listing = "\n".join(f"{i}. {step}" for i, step in enumerate(plan, 1))
        task = plan[0]
        out = await agent.ainvoke({"messages": [("user", f"The plan:\n{listing}{TASK_MARK}{task}")]})
        return {"past_steps": [(task, str(out["messages"][-1].content))]}

    async def plan_step(state: PlanExecuteState) -> dict[str, Any]:
        plan = await planner.ainvoke({"messages": [("user", state["input"])]})
        assert isinstance(plan, Plan)
        return {"plan": plan.steps}

    async def replan_step(state: PlanExecuteState) -> dict[str, Any]:
        act = await replanner.ainvoke(dict(state))
        assert isinstance(act, Act)
        if isinstance(act.action, Response):
            return {"response": act.action.response}
        return {"plan": act.action.steps}

    def should_end(state: PlanExecuteState) -> str:
        return END if state.get("response") else "agent"

    workflow = StateGraph(PlanExecuteState)
    workflow.add_node("planner", plan_step)
    workflow.add_node("agent", execute_step)
    workflow.add_node("replan", replan_step)
    workflow.add_edge(START, "planner")
    workflow.add_edge("planner", "agent")
    workflow.add_edge("agent", "replan")
    workflow.add_conditional_edges("replan", should_end, ["agent", END])
    return workflow.compile(checkpointer=checkpointer)
