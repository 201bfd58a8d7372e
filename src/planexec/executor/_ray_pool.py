"""Pools of long-lived Ray actors that run a Ray executor's tool calls (``RayOptions(actors=N)``).

A Ray task per call pays for a task round trip and a fresh event loop every time, and whatever a
tool builds for itself (a client, a connection pool, a loaded model) is built again wherever the
next call lands. A pool keeps ``N`` actors alive instead: each is an async Ray actor running up to
``actor_concurrency`` calls at once on one event loop, in one worker process that stays. A tool's
invoke is sent to each actor once and kept there, so what the tool caches at module level (a
``functools.cache``\\ d client, say) stays warm from one call to the next.

- **Placement.** Every actor asks for the resources of the options it was made with (CPUs, GPUs,
  custom resources, ``runtime_env``) for its whole life, so the pool lands on nodes that have them
  and holds them until it is closed.
- **Spreading.** A call goes to the actor with the fewest calls in flight; an actor is created
  (lazily) when every actor of the pool is busy and the pool has fewer than ``N``.
- **Failures.** Ray neither restarts a pool's actors nor retries their calls (``max_restarts=0``,
  ``max_task_retries=0``). An actor that died (its process or its node) is dropped from the pool and
  a new one is made when a call needs it; the call that was running on it is handled by the
  executor (sent again when that is safe, else :class:`~planexec.errors.EffectUncertain`). A call
  that is not safe to repeat is sent only to an actor that has just answered (``ready``), so that
  one that died while idle is skipped rather than leaving the call's effect uncertain.
- **Giving up.** A call the run gives up on is cancelled (``ray.cancel``: the tool sees
  ``CancelledError``). Ray cannot force-stop one call of an actor, so a call still running
  ``kill_after`` seconds later has its actor killed and replaced; the other calls that actor was
  running are lost with it (and handled as above).
- **Lifetime.** Actors belong to the process that made them: ``await executor.close()`` kills them,
  and they end with that process (or when the executor is garbage collected).
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from planexec.tools import Invoke, ToolContext

if TYPE_CHECKING:
    from types import ModuleType

__all__ = ["ActorPool", "PoolActor"]


class PoolActor:
    """The body of every pool actor: holds the invokes sent to it and runs calls on its loop."""

    def __init__(self) -> None:
        self._invokes: dict[str, Invoke] = {}

    async def ready(self) -> bool:
        """Answer: the actor is alive (asked before a call that must not be sent to a dead one)."""
        return True

    async def call(
        self,
        tool_key: str,
        invoke: Invoke | None,
        args: dict[str, Any],
        run_id: str,
        step_id: str,
        attempt: int,
        key: str,
    ) -> Any:
        """One attempt at a call of the tool ``tool_key`` (its invoke sent along the first time)."""
        if invoke is not None:
            self._invokes[tool_key] = invoke
        ctx = ToolContext(run_id=run_id, step_id=step_id, attempt=attempt, idempotency_key=key)
        return await self._invokes[tool_key](args, ctx)


@dataclass(eq=False)
class _Member:
    """One actor of a pool, as the process that owns it sees it."""

    handle: Any
    in_flight: int = 0
    loaded: set[str] = field(default_factory=set)
    dead: bool = False  # set from the thread that kills an actor whose cancelled call went on


class ActorPool:
    """Up to ``size`` actors made with ``actor_options``; see the module docstring."""

    def __init__(self, actor_class: Any, actor_options: dict[str, Any], size: int) -> None:
        self._class = actor_class
        self._options = actor_options
        self._size = size
        self._members: list[_Member] = []
        self.closed = False

    def pick(self) -> _Member:
        """The least busy live actor, or a new one when every actor is busy and there is room; it
        counts one more call in flight until :meth:`done`."""
        self._members = [m for m in self._members if not m.dead]
        idle = min(self._members, key=lambda m: m.in_flight, default=None)
        if idle is None or (idle.in_flight > 0 and len(self._members) < self._size):
            idle = _Member(self._class.options(**self._options).remote())
            self._members.append(idle)
        idle.in_flight += 1
        return idle

    @staticmethod
    def submit(member: _Member, tool_key: str, shipped: Any, call_args: tuple[Any, ...]) -> Any:
        """Send one call to ``member`` (with the tool's invoke, the first time it gets that tool)."""
        invoke = None if tool_key in member.loaded else shipped
        return member.handle.call.remote(tool_key, invoke, *call_args)

    @staticmethod
    def done(member: _Member, tool_key: str | None = None, *, ran: bool = False) -> None:
        """A call picked ``member`` and ended; ``ran``: the actor ran it, so it holds the tool now (a
        call cancelled before it started may never have delivered the invoke)."""
        member.in_flight -= 1
        if ran and tool_key is not None:
            member.loaded.add(tool_key)

    def drop(self, member: _Member, ray: ModuleType) -> None:
        """Forget an actor that died or was lost (killing it, should it still be there)."""
        member.dead = True
        _kill(ray, member.handle)

    def give_up(self, ray: ModuleType, member: _Member, ref: Any, kill_after: float | None) -> None:
        """Cancel a call; if it is still running ``kill_after`` seconds later, kill its actor (watched
        from a thread of its own, so that neither the run nor its loop waits)."""
        ray.cancel(ref)
        if kill_after is None:
            return

        def kill_if_running() -> None:
            try:
                done, _ = ray.wait([ref], timeout=kill_after)
                if not done and ray.is_initialized():
                    member.dead = True
                    _kill(ray, member.handle)
            except BaseException:  # Ray shut down meanwhile: nothing left to kill
                pass

        threading.Thread(target=kill_if_running, name="planexec-ray-actor-cancel", daemon=True).start()

    def close(self, ray: ModuleType) -> None:
        """Kill every actor of the pool; calls still running on them are lost."""
        self.closed = True
        members, self._members = self._members, []
        for member in members:
            member.dead = True
            _kill(ray, member.handle)


def _kill(ray: ModuleType, handle: Any) -> None:
    with contextlib.suppress(Exception):  # already gone, or Ray shut down: nothing to kill
        ray.kill(handle, no_restart=True)
