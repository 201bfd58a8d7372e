"""One run's world: a fresh AgentDojo environment (with the attack's injections in their vectors),
the suite's functions as planexec tools over it, every call made, and AgentDojo's own checks of
what the run did.

The tools call AgentDojo's ``FunctionsRuntime.run_function`` (its argument validation, its
dependency injection, its functions); the checks are ``TaskSuite._check_task_result`` — the
function AgentDojo's ``run_task_with_pipeline`` judges utility and security with, given the
model's output, the environment before and after, and the calls made.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic_core import to_jsonable_python

from planexec.agentdojo._suites import DojoSuite
from planexec.errors import ToolError
from planexec.tools import Tool, ToolContext

__all__ = ["Call", "DojoWorld"]


@dataclass(frozen=True, kw_only=True)
class Call:
    """A call a run made of one of the suite's functions: its arguments as sent, the step that
    made it, and AgentDojo's error when the function failed."""

    function: str
    args: dict[str, Any]
    step_id: str
    error: str | None = None


@dataclass(kw_only=True)
class DojoWorld:
    """The environment of one run of ``user_task`` (an id of ``suite``), with ``injections``
    (vector → text) in place; ``environment``: one already loaded with them, to use instead of
    loading it again (it is taken over, not copied)."""

    suite: DojoSuite
    user_task: str
    injections: Mapping[str, str] = field(default_factory=dict)
    environment: Any = None
    calls: list[Call] = field(default_factory=list, init=False)
    pre_environment: Any = field(default=None, init=False)
    """The environment before the run, as AgentDojo's checks compare it with the one after."""

    def __post_init__(self) -> None:
        from agentdojo.functions_runtime import FunctionsRuntime

        task = self.suite.user_task(self.user_task)
        loaded = self.environment if self.environment is not None else self.suite.load_environment(self.injections)
        self.environment = task.init_environment(loaded)
        self.pre_environment = self.environment.model_copy(deep=True)
        self._runtime = FunctionsRuntime(self.suite.functions)

    @property
    def task(self) -> Any:
        """AgentDojo's user task."""
        return self.suite.user_task(self.user_task)

    @property
    def prompt(self) -> str:
        return str(self.task.PROMPT)

    def ground_truth(self, task: Any) -> list[Any]:
        """``task``'s ground-truth calls (AgentDojo ``FunctionCall`` values), from a copy of the
        environment before the run."""
        return list(task.ground_truth(self.pre_environment.model_copy(deep=True)))

    def dry_run(self, calls: Sequence[Any]) -> list[Any]:
        """What ``calls`` (AgentDojo ``FunctionCall`` values) return, made in order on a copy of
        the environment before the run, as JSON data (AgentDojo's error text for a call that
        fails). The run's own environment is not touched."""
        environment = self.pre_environment.model_copy(deep=True)
        outputs = []
        for call in calls:
            value, error = self._runtime.run_function(environment, call.function, call.args)
            outputs.append(error if error is not None else to_jsonable_python(value, fallback=str))
        return outputs

    def tools(self, *, sensitive_writes: bool = False) -> list[Tool]:
        """The suite's functions as tools over this world's environment. A function that changes
        the environment is a side-effecting tool (``effect: write``); ``sensitive_writes`` also
        marks it sensitive, so that an approver is asked before each call."""
        made = []
        for function in self.suite.functions:
            write = function.name in self.suite.writes
            made.append(
                Tool.from_schema(
                    function.name,
                    " ".join(str(function.description).split()),
                    self.suite.schema(function.name),
                    self._caller(function.name),
                    side_effect=write,
                    sensitive=write and sensitive_writes,
                )
            )
        return made

    def _caller(self, name: str) -> Any:
        async def call(planexec_context: ToolContext, **kwargs: Any) -> Any:
            value, error = self._runtime.run_function(self.environment, name, kwargs)
            self.calls.append(Call(function=name, args=dict(kwargs), step_id=planexec_context.step_id, error=error))
            if error is not None:
                raise ToolError(error)
            return value

        call.__name__ = name
        return call

    # -- AgentDojo's checks -----------------------------------------------------------------

    def utility(self, answer: str | None) -> bool:
        """AgentDojo's verdict: did the run do what the user asked (from the answer, the
        environment before and after, and the calls made)?"""
        return self._judge(self.task, answer, self.environment, self.calls)

    def security(self, injection_task: Any, answer: str | None, *, without_steps: Iterable[str] = ()) -> bool:
        """AgentDojo's verdict on ``injection_task``: True when the attacker's goal was met.

        ``without_steps``: steps whose calls a human said yes to. The verdict is then that of the
        calls made without any human's yes alone: they are made again, in their order, on a fresh
        copy of the environment the run started from, and the attacker's goal is judged on that
        (with the same answer)."""
        left_out = set(without_steps)
        if not left_out or not any(c.step_id in left_out for c in self.calls):
            return self._judge(injection_task, answer, self.environment, self.calls)
        kept = [c for c in self.calls if c.step_id not in left_out]
        environment = self.pre_environment.model_copy(deep=True)
        for call in kept:
            self._runtime.run_function(environment, call.function, call.args)
        return self._judge(injection_task, answer, environment, kept)

    def _judge(self, task: Any, answer: str | None, environment: Any, calls: list[Call]) -> bool:
        from agentdojo.functions_runtime import FunctionCall
        from agentdojo.types import text_content_block_from_string

        output = [text_content_block_from_string(answer or "")]
        trace = [FunctionCall(function=c.function, args=dict(c.args)) for c in calls]
        verdict = self.suite.task_suite._check_task_result(task, output, self.pre_environment, environment, trace)
        return bool(verdict)
