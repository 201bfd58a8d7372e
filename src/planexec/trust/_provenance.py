"""Where a value came from: its sources, and whether the run trusts it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Literal

__all__ = ["Provenance", "Source", "SourceKind"]

SourceKind = Literal["goal", "constraint", "config", "tool", "model", "planner", "memory", "session", "human"]
"""Where a value came from:

``goal`` and ``constraint``: what the user asked (trusted); ``config``: the developer's
configuration (trusted); ``tool``: a tool's output (untrusted, unless the tool is declared
trusted); ``model``: what a model-driven step wrote (trusted only when everything it read was);
``planner``: a value the planner wrote into a step (trusted when the planning round that wrote it
read no untrusted text); ``memory``: a value of a remembered plan (trusted: plan memory holds
the developer's own runs); ``session``: what an earlier turn of a session returned or answered,
as a later turn's planner is shown it (trusted only when those runs trusted it); ``human``: a value a
human gave or confirmed (trusted)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Source:
    """One place a value came from.

    ``step``: for ``tool`` and ``model``, the step whose output it is (for ``planner``, the step
    the planner wrote it into); ``tool``: the tool that produced it; ``call``: for a tool that a
    model-driven step called, the call's id. ``trusted``: whether this source is trusted."""

    kind: SourceKind
    trusted: bool
    step: str | None = None
    tool: str | None = None
    call: str | None = None

    def __str__(self) -> str:
        if self.kind == "tool":
            where = f"tool:{self.step}" if self.step is not None else "tool"
            if self.tool is not None and self.tool != self.step:
                where += f" ({self.tool}{', call ' + self.call if self.call else ''})"
            return where + (" (trusted)" if self.trusted else "")
        if self.kind == "model":
            return f"model:{self.step}" if self.step is not None else "model"
        if self.kind == "planner":
            return "planner" if self.trusted else "planner after reading untrusted text"
        return self.kind


@dataclass(frozen=True, kw_only=True, slots=True)
class Provenance:
    """A value's label: where it came from (``sources``) and whether the run trusts it.

    A value is ``trusted`` when every source is, or when a human confirmed it as it was about to
    be used (``confirmed_by`` names them; its sources still say where it came from). A value made
    of several others (a string that interpolates two outputs, a model's answer that read a tool's
    output) takes the union of their labels: trusted only when all of them are."""

    trusted: bool
    sources: tuple[Source, ...] = ()
    confirmed_by: str | None = None
    """The human who confirmed the value (a yes to a question that showed it), if one did."""

    @classmethod
    def of(cls, *sources: Source) -> Provenance:
        """The label of a value made from ``sources``: trusted when each of them is."""
        unique = tuple(dict.fromkeys(sources))
        return cls(trusted=all(s.trusted for s in unique), sources=unique)

    @classmethod
    def union(cls, labels: Iterable[Provenance]) -> Provenance:
        """The label of a value made from values labelled ``labels``: every source of each,
        trusted when each of them is (a label no source fills is trusted)."""
        found = list(labels)
        if len(found) == 1:
            return found[0]
        sources = tuple(dict.fromkeys(s for label in found for s in label.sources))
        confirmed = {label.confirmed_by for label in found}
        by = next(iter(confirmed)) if len(confirmed) == 1 else None
        return cls(trusted=all(label.trusted for label in found), sources=sources, confirmed_by=by)

    def confirmed(self, by: str) -> Provenance:
        """This label once human ``by`` confirmed the value: trusted, its sources kept."""
        return replace(self, trusted=True, confirmed_by=by)

    @property
    def untrusted_sources(self) -> tuple[Source, ...]:
        """The sources that are not trusted (what a human would have to vouch for)."""
        return tuple(s for s in self.sources if not s.trusted)

    def __str__(self) -> str:
        if self.confirmed_by is not None and any(not s.trusted for s in self.sources):
            was = ", ".join(str(s) for s in self.untrusted_sources)
            return f"confirmed by {self.confirmed_by} (from {was})"
        shown = self.sources if self.trusted else self.untrusted_sources
        names = ", ".join(str(s) for s in shown) or "no source"
        return f"{'trusted' if self.trusted else 'untrusted'}: {names}"
