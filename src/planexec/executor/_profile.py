"""What the planner is told about an executor: its description, capabilities, tools and model.

An executor's description and capabilities are written by its developer and shown to the planner
in every planning request, so they are checked when the executor is made and kept small: the
planner's prompt stays bounded and deterministic however many executors an agent has.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from planexec._util.plural import counted
from planexec.errors import Problem, UsageError

__all__ = [
    "MAX_CAPABILITIES",
    "MAX_CAPABILITY_CHARS",
    "MAX_DESCRIPTION_CHARS",
    "ExecutorProfile",
    "check_profile",
    "executor_profile",
]

MAX_DESCRIPTION_CHARS = 500
"""The longest description an executor may have."""
MAX_CAPABILITIES = 16
"""The most capabilities an executor may list."""
MAX_CAPABILITY_CHARS = 40
"""The longest capability tag."""
_MAX_TOOLS_SHOWN = 24
"""The most tool names shown for one executor (the rest are counted)."""

_GENERIC = {
    "tools": "runs tool steps",
    "model": "a model that reasons and may call tools",
}


def check_profile(description: object, capabilities: object) -> tuple[str, tuple[str, ...], list[Problem]]:
    """``description`` and ``capabilities`` as an executor keeps them (the capabilities a tuple),
    with every problem found in them: a description is text of at most ``MAX_DESCRIPTION_CHARS``
    characters with no control characters but newlines and tabs; capabilities are at most
    ``MAX_CAPABILITIES`` distinct short tags (at most ``MAX_CAPABILITY_CHARS`` printable
    characters, no spaces or commas)."""
    problems: list[Problem] = []

    def problem(where: str, message: str) -> None:
        problems.append(Problem(code="executor", where=where, message=message))

    text = ""
    if not isinstance(description, str):
        problem("description", f"must be text, not {type(description).__name__}")
    elif len(description) > MAX_DESCRIPTION_CHARS:
        problem("description", f"is {len(description):,} characters long; at most {MAX_DESCRIPTION_CHARS}")
    elif any(not c.isprintable() and c not in "\n\t" for c in description):
        problem("description", "must not hold control or invisible characters (newlines and tabs are fine)")
    else:
        text = description
    tags: list[str] = []
    if isinstance(capabilities, str) or not isinstance(capabilities, Sequence):
        problem("capabilities", f"must be a list of short tags, not {type(capabilities).__name__}")
        return text, (), problems
    if len(capabilities) > MAX_CAPABILITIES:
        problem("capabilities", f"lists {counted(len(capabilities), 'tag')}; at most {MAX_CAPABILITIES}")
        capabilities = capabilities[:MAX_CAPABILITIES]
    for i, tag in enumerate(capabilities):
        where = f"capabilities[{i}]"
        if not isinstance(tag, str):
            problem(where, f"must be text, not {type(tag).__name__}")
        elif not tag:
            problem(where, "is empty")
        elif len(tag) > MAX_CAPABILITY_CHARS:
            problem(where, f"is {len(tag):,} characters long; at most {MAX_CAPABILITY_CHARS}")
        elif not tag.isprintable() or any(c.isspace() or c == "," for c in tag):
            problem(where, "must be printable, with no spaces, commas or control characters")
        elif tag in tags:
            problem(where, f"repeats {tag!r}")
        else:
            tags.append(tag)
    return text, tuple(tags), problems


@dataclass(frozen=True, kw_only=True, slots=True)
class ExecutorProfile:
    """An executor as the planner reads it, and as a run's log records it.

    ``tools``: the tools its steps may be granted (None: any). ``model``: its model's name, for a
    model executor that has one. An executor with neither a description nor capabilities is shown
    as a generic line, as it always was.
    """

    name: str
    kind: Literal["tools", "model"]
    description: str = ""
    capabilities: tuple[str, ...] = ()
    tools: tuple[str, ...] | None = None
    model: str | None = None
    max_concurrency: int | None = None

    @property
    def described(self) -> bool:
        return bool(self.description.strip() or self.capabilities)

    def text(self) -> str:
        """One line for the planner: the description, then what the executor has and may use."""
        if not self.described:
            return _GENERIC[self.kind]
        head = " ".join(self.description.split()) or _GENERIC[self.kind]
        notes: list[str] = []
        if self.kind == "tools":
            notes.append("runs tool steps")
        if self.model:
            notes.append(f"model {' '.join(self.model.split())[:80]}")
        if self.capabilities:
            notes.append("capabilities: " + ", ".join(self.capabilities))
        if self.tools is not None:
            shown = list(self.tools[:_MAX_TOOLS_SHOWN])
            if len(self.tools) > _MAX_TOOLS_SHOWN:
                shown.append(f"{len(self.tools) - _MAX_TOOLS_SHOWN} more")
            notes.append("may be granted: " + (", ".join(shown) or "no tools"))
        if self.max_concurrency is not None:
            notes.append(f"at most {counted(self.max_concurrency, 'step')} at once")
        return f"{head} [{'; '.join(notes)}]"

    def record(self) -> dict[str, Any]:
        """The profile as a run's log keeps it (JSON data)."""
        return {
            "description": self.description,
            "capabilities": list(self.capabilities),
            "tools": None if self.tools is None else list(self.tools),
            "model": self.model,
            "max_concurrency": self.max_concurrency,
        }

    @classmethod
    def from_record(cls, name: str, kind: Literal["tools", "model"], record: object) -> ExecutorProfile:
        """The profile a log records. A record that cannot be read (a damaged log) gives the
        generic profile, which a replay then shows the planner."""
        if not isinstance(record, Mapping):
            return cls(name=name, kind=kind)
        description, capabilities, problems = check_profile(
            record.get("description", ""), record.get("capabilities", ())
        )
        tools = record.get("tools")
        model = record.get("model")
        most = record.get("max_concurrency")
        if (
            problems
            or not (tools is None or (isinstance(tools, list) and all(isinstance(t, str) for t in tools)))
            or not (model is None or isinstance(model, str))
            or not (most is None or (type(most) is int and most >= 1))
        ):
            return cls(name=name, kind=kind)
        return cls(
            name=name,
            kind=kind,
            description=description,
            capabilities=capabilities,
            tools=None if tools is None else tuple(tools),
            model=model,
            max_concurrency=most,
        )


def executor_profile(executor: Any) -> ExecutorProfile:
    """The profile of ``executor``: any executor may have ``description`` and ``capabilities``
    (none when it has not); a model executor's model and tools are read from it. Raises
    :class:`UsageError` listing every problem of a description or capabilities."""
    from planexec.executor._model import ModelExecutor

    description, capabilities, problems = check_profile(
        getattr(executor, "description", ""), getattr(executor, "capabilities", ())
    )
    if problems:
        raise UsageError(f"invalid executor {executor.name!r}", problems)
    tools: tuple[str, ...] | None = None
    model: str | None = None
    if isinstance(executor, ModelExecutor):
        tools = None if executor.tools is None else tuple(executor.tools)
        model = executor.model if isinstance(executor.model, str) else executor.model.name
    return ExecutorProfile(
        name=executor.name,
        kind=executor.kind,
        description=description,
        capabilities=capabilities,
        tools=tools,
        model=model,
        max_concurrency=executor.max_concurrency,
    )
