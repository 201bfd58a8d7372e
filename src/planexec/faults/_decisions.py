"""What the fault wrappers ask of a fault profile: which fault, if any, hits a call."""

from __future__ import annotations

from typing import Literal, Protocol

__all__ = ["Decider", "ModelFault", "ToolFault"]

ToolFault = Literal["error", "timeout", "malformed"]
ModelFault = Literal["invalid_json", "unknown_tool"]


class Decider(Protocol):
    """A fault profile as the wrappers see it (:class:`~planexec.faults.FaultProfile` is one)."""

    @property
    def seed(self) -> int: ...

    @property
    def rate_limit_storm(self) -> int: ...

    def tool_fault(self, tool: str, key: str, attempt: int) -> ToolFault | None: ...

    def model_fault(self, role: str, purpose: str, call: int) -> ModelFault | None: ...
