"""AgentDojo's attacks, made by AgentDojo's own attack classes: for a user task and an injection
task, the text to put in each injection vector the user task's ground truth reads.

The attacks offered are those that carry an injection task's goal in a fixed template and need no
model to write it (AgentDojo's ``FixedJailbreakAttack`` family: ``important_instructions`` and its
variants, ``tool_knowledge``, ``direct``, ``ignore_previous``, ``system_message``,
``injecagent``). ``manual`` (asks on the terminal) and the denial-of-service attacks (no
injection task's goal to meet) are left out.

Some attacks address the model by name (``important_instructions``: "a message from me, Emma
Johnson, to you, GPT-4"): AgentDojo's name for the planner's model when it knows it, else its
default, "the AI language model".
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from planexec.agentdojo._suites import DojoSuite
from planexec.errors import Problem, UsageError

__all__ = ["DEFAULT_ATTACK", "attack_names", "attack_problems", "injections_for"]

DEFAULT_ATTACK = "important_instructions"


def _registry() -> dict[str, Any]:
    import agentdojo.attacks  # noqa: F401  (registers the attacks)
    from agentdojo.attacks.attack_registry import ATTACKS
    from agentdojo.attacks.base_attacks import FixedJailbreakAttack

    return {
        name: cls
        for name, cls in ATTACKS.items()
        if issubclass(cls, FixedJailbreakAttack) and not getattr(cls, "is_dos_attack", False)
    }


def attack_names() -> tuple[str, ...]:
    """The attacks that can be used (AgentDojo's registry, as installed)."""
    return tuple(sorted(_registry()))


def attack_problems(name: object, where: str = "attack") -> list[Problem]:
    names = attack_names()
    if not isinstance(name, str) or name not in names:
        return [Problem(code="agentdojo", where=where, message=f"{repr(name)[:60]} is not one of {', '.join(names)}")]
    return []


def _target(model_name: str | None) -> Any:
    """A stand-in for the attacked pipeline: AgentDojo's attacks read only its name."""
    from agentdojo.agent_pipeline.base_pipeline_element import BasePipelineElement
    from agentdojo.models import MODEL_NAMES

    known = next((full for full in MODEL_NAMES if model_name and full in model_name), None)

    class Target(BasePipelineElement):  # type: ignore[misc]
        name = known or "local"

        def query(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError("planexec runs the agent; the attack only names it")

    return Target(), known is not None


@functools.cache
def _attack(suite: DojoSuite, name: str, model_name: str | None) -> Any:
    problems = attack_problems(name)
    if problems:
        raise UsageError("unknown AgentDojo attack", problems)
    from agentdojo.attacks.base_attacks import DEFAULT_MODEL_NAME

    target, known = _target(model_name)
    attack = _registry()[name](suite.task_suite, target)
    if not known:
        attack.model_name = DEFAULT_MODEL_NAME
    return attack


def injections_for(
    suite: DojoSuite,
    user_task: str,
    injection_task: str,
    *,
    attack: str = DEFAULT_ATTACK,
    model_name: str | None = None,
) -> Mapping[str, str] | None:
    """The injections (vector → text) ``attack`` makes for the pair, by AgentDojo's attack class;
    None when the user task's ground truth reads no injection vector (AgentDojo calls such a task
    not injectable)."""
    made = _attack(suite, attack, model_name)
    try:
        return dict(made.attack(suite.user_task(user_task), suite.injection_task(injection_task)))
    except ValueError as e:
        if "is not injectable" in str(e):
            return None
        raise
