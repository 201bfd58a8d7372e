"""Research brief: search two angles at once, read the best sources, and have a cheaper model draft
the brief from them.

What it shows: an upfront plan whose independent steps run in parallel; bindings that pass one
step's output (or a part of it) to the next; a model-driven step (no tool) carried out by a
separate executor model; acceptance checks on the step results.

    python examples/research_brief.py                           # offline, scripted models
    python examples/research_brief.py --model openai:gpt-4.1-mini

With ``--model`` (or ``PLANEXEC_EXAMPLE_MODEL``) the planner and the executor are that real model
(install the provider's extra and set its API key, e.g. ``OPENAI_API_KEY``); the tools stay the
offline ones below.
"""

from __future__ import annotations

import argparse
import asyncio
import os

from planexec import Agent, ModelExecutor, Planner, tool
from planexec.models import ModelRequest
from planexec.testing import FunctionModel, ScriptedModel

LIBRARY = {
    "https://example.org/heat-pumps-cold": (
        "Field trials in Canada and Norway: modern air-source heat pumps keep a seasonal efficiency "
        "(COP) of 2 to 3 down to -20 °C; below that, backup resistance heating takes over."
    ),
    "https://example.org/retrofit-costs": (
        "A retrofit costs 8,000 to 15,000 euros for a detached house; running costs are 30 to 50 % "
        "below an oil boiler at current prices."
    ),
    "https://example.org/grid-load": "Utilities report winter peak load rising as heat pumps spread.",
}


@tool
async def search(query: str) -> list[dict[str, str]]:
    """Search the web; the best results first.

    Args:
        query: what to look for
    """
    await asyncio.sleep(0.05)  # a search service's latency
    if "cost" in query:
        return [{"url": "https://example.org/retrofit-costs", "title": "What a retrofit costs"}]
    return [
        {"url": "https://example.org/heat-pumps-cold", "title": "Heat pumps in the cold"},
        {"url": "https://example.org/grid-load", "title": "Grid load in winter"},
    ]


@tool
async def fetch(url: str) -> str:
    """Fetch a page's text.

    Args:
        url: the page's address
    """
    await asyncio.sleep(0.05)
    return LIBRARY.get(url, "")


PLAN = {
    "steps": [
        {"id": "find_climate", "description": "search performance in the cold", "tool": "search",
         "args": {"query": "heat pump efficiency cold climate"}, "checks": [{"kind": "non_empty"}]},
        {"id": "find_costs", "description": "search retrofit costs", "tool": "search",
         "args": {"query": "heat pump retrofit cost"}, "checks": [{"kind": "non_empty"}]},
        {"id": "read_climate", "description": "read the best climate source", "tool": "fetch",
         "args": {"url": "${find_climate.0.url}"}, "depends_on": ["find_climate"]},
        {"id": "read_costs", "description": "read the best cost source", "tool": "fetch",
         "args": {"url": "${find_costs.0.url}"}, "depends_on": ["find_costs"]},
        {"id": "draft", "description": "draft a three-sentence brief from the two sources",
         "args": {"climate": "${read_climate}", "costs": "${read_costs}"},
         "depends_on": ["read_climate", "read_costs"], "expected": "three sentences citing both sources",
         "checks": [{"kind": "contains", "text": "COP"}]},
    ]
}  # fmt: skip


def draft_brief(request: ModelRequest) -> str:
    """The scripted drafting model: it writes the brief from the sources in its step's prompt."""
    if "-20 °C" not in request.last_user_text or "8,000" not in request.last_user_text:
        return "The sources are missing."  # fails the step's check, and the planner hears why
    return (
        "Modern air-source heat pumps keep a COP of 2 to 3 down to -20 °C, with backup heating below that. "
        "A retrofit costs 8,000 to 15,000 euros for a detached house. "
        "Running costs are 30 to 50 % below an oil boiler."
    )


def build_agent(model: str | None) -> tuple[Agent, list[ScriptedModel]]:
    """The agent, and the scripted models to check afterwards (none with a real model)."""
    tools = [search, fetch]
    if model:  # a real provider plans and drafts, e.g. "openai:gpt-4.1-mini"
        return Agent(Planner(model=model), executor=ModelExecutor(model=model), tools=tools, store=None), []
    planner = ScriptedModel([PLAN, {"answer": "Brief ready: heat pumps work in cold climates and pay back."}])
    drafter = FunctionModel(draft_brief)
    return Agent(planner, executor=drafter, tools=tools, store=None), [planner]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=os.environ.get("PLANEXEC_EXAMPLE_MODEL"), help="e.g. openai:gpt-4.1-mini")
    options = parser.parse_args()
    agent, scripted = build_agent(options.model)
    result = await agent.run(
        "Write a short brief: do heat pumps make sense in cold climates, and what do they cost?",
        constraints=["cite only fetched sources"],
    )
    result.raise_for_stop()
    for step_id, record in result.steps.items():
        took = (record.finished_at or 0) - (record.started_at or 0)
        print(f"{step_id:13} {record.status:9} {took * 1000:5.0f} ms")
    steps_time = sum((r.finished_at or 0) - (r.started_at or 0) for r in result.steps.values())
    print(f"{steps_time * 1000:.0f} ms of steps in {result.duration * 1000:.0f} ms of wall time")
    print("brief:", result.steps["draft"].output)
    print("answer:", result.answer)
    print(f"stop: {result.stop.kind}; model calls {result.model_calls}, tool calls {result.tool_calls}")
    for model in scripted:
        model.assert_consumed()


if __name__ == "__main__":
    asyncio.run(main())
