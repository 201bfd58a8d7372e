"""The ready queue: which steps may start now, critical path first.

A step becomes ready the moment its own dependencies have succeeded (never layer by layer).
Among ready steps, the one with the longest chain of work still behind it goes first; ties keep
the plan's order. Limits (global, per tool, per executor) are applied by the caller's
``can_start``: a step that may not start now is set aside and offered again next time.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Sequence

from planexec.plan import Step

__all__ = ["ReadyQueue"]


class ReadyQueue:
    __slots__ = ("_dependents", "_heap", "_priority", "_remaining", "_steps")

    def __init__(self) -> None:
        self._steps: dict[str, Step] = {}
        self._remaining: dict[str, int] = {}
        self._dependents: dict[str, list[str]] = {}
        self._priority: dict[str, tuple[int, int]] = {}
        self._heap: list[tuple[int, int, str]] = []

    def load(self, steps: Sequence[Step], succeeded: Collection[str], waiting: Collection[str]) -> None:
        """Index a plan version. ``waiting``: ids that still have to run (pending, not running)."""
        self._steps = {s.id: s for s in steps}
        self._dependents = {s.id: [] for s in steps}
        for s in steps:
            for d in s.depends_on:
                if d in self._dependents:
                    self._dependents[d].append(s.id)
        self._priority = {}
        depth = self._longest_paths(steps)
        for index, s in enumerate(steps):
            self._priority[s.id] = (-depth[s.id], index)
        self._remaining = {}
        self._heap = []
        for s in steps:
            if s.id not in waiting:
                continue
            left = sum(1 for d in s.depends_on if d not in succeeded)
            self._remaining[s.id] = left
            if left == 0:
                self._heap.append((*self._priority[s.id], s.id))
        heapq.heapify(self._heap)

    def _longest_paths(self, steps: Sequence[Step]) -> dict[str, int]:
        """For each step, the number of steps on the longest chain from it to the end (itself included)."""
        depth: dict[str, int] = {}
        order: list[str] = []
        indegree = {s.id: 0 for s in steps}
        for s in steps:
            for dep in self._dependents[s.id]:
                indegree[dep] += 1
        # Kahn's algorithm from the roots of the "dependents" direction, then fold backwards.
        queue = [sid for sid, n in indegree.items() if n == 0]
        while queue:
            sid = queue.pop()
            order.append(sid)
            for dep in self._dependents[sid]:
                indegree[dep] -= 1
                if indegree[dep] == 0:
                    queue.append(dep)
        for sid in reversed(order):
            depth[sid] = 1 + max((depth[d] for d in self._dependents[sid]), default=0)
        for sid in self._steps:
            depth.setdefault(sid, 1)
        return depth

    def add(self, step: Step, succeeded: Collection[str]) -> None:
        """A step of a plan still streaming: it can start once its dependencies have succeeded.
        Its place in the critical path is not known yet, so streamed steps go in arrival order."""
        self._steps[step.id] = step
        self._dependents.setdefault(step.id, [])
        for d in step.depends_on:
            self._dependents.setdefault(d, []).append(step.id)
        self._priority[step.id] = (0, len(self._priority))
        left = sum(1 for d in step.depends_on if d not in succeeded)
        self._remaining[step.id] = left
        if left == 0:
            heapq.heappush(self._heap, (*self._priority[step.id], step.id))

    def succeeded(self, step_id: str) -> None:
        """A step succeeded: its dependents whose dependencies are now all done become ready."""
        for dep in self._dependents.get(step_id, ()):
            left = self._remaining.get(dep)
            if left is None:
                continue
            left -= 1
            self._remaining[dep] = left
            if left == 0:
                heapq.heappush(self._heap, (*self._priority[dep], dep))

    def pop(self, can_start: Callable[[Step], bool], limit: int) -> list[Step]:
        """Up to ``limit`` ready steps that ``can_start`` allows, best first."""
        started: list[Step] = []
        deferred: list[tuple[int, int, str]] = []
        heap = self._heap
        while heap and len(started) < limit:
            item = heapq.heappop(heap)
            sid = item[2]
            if self._remaining.get(sid) != 0:
                continue
            step = self._steps[sid]
            if can_start(step):
                del self._remaining[sid]
                started.append(step)
            else:
                deferred.append(item)
        for item in deferred:
            heapq.heappush(heap, item)
        return started

    @property
    def has_ready(self) -> bool:
        return bool(self._heap)

    def any_ready(self, can_start: Callable[[Step], bool]) -> bool:
        """Whether a ready step is one ``can_start`` allows (``has_ready``, with steps set aside)."""
        return any(self._remaining.get(sid) == 0 and can_start(self._steps[sid]) for _, _, sid in self._heap)
