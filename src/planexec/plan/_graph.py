"""A plan's dependency graph: its cycles, and which steps each step comes after.

Built once per check, in time linear in the steps and their dependencies; cycles come from one
pass over the strongly connected components (each dependency looked at once), and "does step A
come after step B" is one bit of A's ancestor set (Python ints as bitsets, filled in dependency
order), so checking every binding of a plan costs no walk along its chains.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

from planexec.plan._step import Step

__all__ = ["MAX_CYCLES", "DependencyGraph", "describe_cycle"]

MAX_CYCLES = 5
"""How many dependency cycles are described; any more are counted."""

_CYCLE_IDS = 12
"""How many step ids a cycle's description shows."""


class DependencyGraph:
    """The steps of a plan (one per id: the first step with each id) and their ``depends_on``."""

    def __init__(self, steps: Mapping[str, Step]) -> None:
        self._steps = steps
        self._ids = list(steps)
        index = {sid: i for i, sid in enumerate(self._ids)}
        self._index = index
        self._others: dict[str, int] = {}
        """Bit positions of ids that are depended on but not steps here (finished or missing ones)."""
        self._deps: list[list[int]] = []
        self._outside: list[int] = []
        """For each step, the bits of its dependencies that are not steps here."""
        for sid, step in steps.items():
            inside: list[int] = []
            outside = 0
            for dep in step.depends_on:
                position = index.get(dep)
                if position is None:
                    outside |= 1 << self._other(dep)
                elif dep != sid:
                    inside.append(position)
            self._deps.append(inside)
            self._outside.append(outside)
        self._components: list[list[int]] | None = None
        self._component_of: list[int] = []
        self._ancestors: list[int] | None = None

    # -- cycles ------------------------------------------------------------------------------

    def cycles(self) -> tuple[list[list[str]], int]:
        """Up to ``MAX_CYCLES`` cycles (one through each group of steps that wait on each other in
        a circle, ids in "depends on" order), and how many such groups there are."""
        components = self._strong_components()
        circular = [c for c in components if len(c) > 1]
        circular.sort(key=min)
        return [self._cycle_in(c) for c in circular[:MAX_CYCLES]], len(circular)

    def _cycle_in(self, component: list[int]) -> list[str]:
        """The shortest cycle through the component's first step by id."""
        ids = self._ids
        start = min(component, key=lambda v: ids[v])
        label = self._component_of[start]
        parent = {start: start}
        queue = deque([start])
        while queue:
            v = queue.popleft()
            for w in self._deps[v]:
                if self._component_of[w] != label:
                    continue
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return [ids[x] for x in reversed(path)]
                if w not in parent:
                    parent[w] = v
                    queue.append(w)
        return [ids[start]]  # not reached: a component of two or more steps has a cycle through each

    def _strong_components(self) -> list[list[int]]:
        """Tarjan's algorithm without recursion; components come out dependencies first."""
        if self._components is not None:
            return self._components
        n = len(self._ids)
        deps = self._deps
        order = [-1] * n
        low = [0] * n
        cursor = [0] * n
        on_stack = [False] * n
        stack: list[int] = []
        components: list[list[int]] = []
        component_of = [-1] * n
        counter = 0
        for root in range(n):
            if order[root] != -1:
                continue
            order[root] = low[root] = counter
            counter += 1
            stack.append(root)
            on_stack[root] = True
            work = [root]
            while work:
                v = work[-1]
                i = cursor[v]
                if i < len(deps[v]):
                    cursor[v] = i + 1
                    w = deps[v][i]
                    if order[w] == -1:
                        order[w] = low[w] = counter
                        counter += 1
                        stack.append(w)
                        on_stack[w] = True
                        work.append(w)
                    elif on_stack[w] and order[w] < low[v]:
                        low[v] = order[w]
                    continue
                work.pop()
                if work and low[v] < low[work[-1]]:
                    low[work[-1]] = low[v]
                if low[v] == order[v]:
                    component: list[int] = []
                    while True:
                        w = stack.pop()
                        on_stack[w] = False
                        component_of[w] = len(components)
                        component.append(w)
                        if w == v:
                            break
                    components.append(component)
        self._components = components
        self._component_of = component_of
        return components

    # -- ancestors -----------------------------------------------------------------------------

    def reaches(self, step: Step, target: str) -> bool:
        """Whether ``target`` is among ``step``'s dependencies, directly or through other steps."""
        if target in step.depends_on:
            return True
        position = self._index.get(target)
        if position is None:
            position = self._others.get(target)
            if position is None:
                return False  # nothing depends on it
        return bool(self._ancestors_of(step) >> position & 1)

    def _ancestors_of(self, step: Step) -> int:
        ancestors = self._all_ancestors()
        position = self._index.get(step.id)
        if position is not None and self._steps[step.id] is step:
            return ancestors[position]
        # a second step with an id already taken: it is not in the graph, so work it out here
        bits = 0
        for dep in step.depends_on:
            p = self._index.get(dep)
            if p is None:
                other = self._others.get(dep)
                if other is not None:
                    bits |= 1 << other
            else:
                bits |= 1 << p | ancestors[p]
        return bits

    def _all_ancestors(self) -> list[int]:
        if self._ancestors is not None:
            return self._ancestors
        ancestors = [0] * len(self._ids)
        components = self._strong_components()
        component_of = self._component_of
        for label, component in enumerate(components):
            bits = 0
            for v in component:
                bits |= self._outside[v]
                for w in self._deps[v]:
                    if component_of[w] != label:
                        bits |= 1 << w | ancestors[w]
            if len(component) > 1:  # steps in a cycle come after each other, and after themselves
                for v in component:
                    bits |= 1 << v
            for v in component:
                ancestors[v] = bits
        self._ancestors = ancestors
        return ancestors

    def _other(self, sid: str) -> int:
        position = self._others.get(sid)
        if position is None:
            position = self._others[sid] = len(self._ids) + len(self._others)
        return position


def describe_cycle(cycle: list[str]) -> str:
    """``a → b → c → a``, with the middle of a long cycle left out."""
    shown = [*cycle, cycle[0]]
    if len(shown) > _CYCLE_IDS:
        head, tail = shown[: _CYCLE_IDS - 2], shown[-2:]
        shown = [*head, f"… ({len(cycle) - len(head) - 1:,} more) …", *tail]
    return " → ".join(shown)
