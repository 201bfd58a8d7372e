"""Toolsets: named groups of tools, looked up by name."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from planexec.errors import Problem, ToolDefinitionError, UnknownToolError
from planexec.tools._tool import Tool

__all__ = ["Toolset"]


class Toolset:
    """An immutable group of tools with unique names. Toolsets nest: ``Toolset(a, other_set)``."""

    __slots__ = ("_tools", "name")

    def __init__(self, *tools: Tool | Toolset | Iterable[Tool | Toolset], name: str = "tools") -> None:
        self.name = name
        found: dict[str, Tool] = {}
        problems: list[Problem] = []
        for t in _flatten(tools, problems):
            if t.name in found and found[t.name] is not t:
                problems.append(
                    Problem(code="duplicate_tool", where=f"toolset {name!r}", message=f"two tools are named {t.name!r}")
                )
            found[t.name] = t
        if problems:
            only_strays = all(p.code == "not_a_tool" for p in problems)
            raise ToolDefinitionError("not a tool" if only_strays else "invalid toolset", problems)
        self._tools = found

    def get(self, name: str) -> Tool:
        """The tool called ``name``; an unknown name raises ``UnknownToolError`` listing the known ones."""
        try:
            return self._tools[name]
        except KeyError:
            raise UnknownToolError(name, list(self._tools)) from None

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._tools)

    def subset(self, names: Iterable[str]) -> Toolset:
        """A toolset of the named tools; unknown names raise ``UnknownToolError``."""
        return Toolset(*(self.get(n) for n in names), name=self.name)

    def __repr__(self) -> str:
        return f"Toolset({', '.join(self._tools)}, name={self.name!r})"


def _flatten(items: Iterable[object], problems: list[Problem]) -> Iterator[Tool]:
    """The tools in ``items``, nested lists and toolsets included; a problem for each other thing."""
    for item in items:
        if isinstance(item, Tool):
            yield item
        elif isinstance(item, Toolset):
            yield from item
        elif isinstance(item, Iterable) and not isinstance(item, str | bytes):
            yield from _flatten(item, problems)
        else:
            problems.append(
                Problem(code="not_a_tool", where=repr(item)[:60], message="use @tool or Tool(...) to make one")
            )
