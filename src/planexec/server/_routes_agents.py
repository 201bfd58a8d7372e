"""The agents goals can be started with: ``GET /v1/agents``."""

from __future__ import annotations

from planexec.server._bodies import AgentList, AgentView
from planexec.server._contract import refusals
from planexec.server._shared import Routes, ServedHere

__all__ = ["agents_routes"]

agents_routes = Routes()


@agents_routes.get("/v1/agents", tags=["agents"], responses=refusals())
async def list_agents(served: ServedHere) -> AgentList:
    """The agents goals can be started with."""
    return AgentList(agents=[AgentView(**a.describe(served.store)) for a in served.agents.values()])
