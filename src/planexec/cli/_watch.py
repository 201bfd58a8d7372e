"""A run's events as they come, for a display: a fresh run's from the first, a resumed run's from
where this process picked it up."""

from __future__ import annotations

from collections.abc import AsyncIterator

from planexec.log import Event
from planexec.runtime import Run
from planexec.store import RunStore

__all__ = ["new_events"]


async def new_events(
    run: Run, *, since: int = 0, store: RunStore | None = None, interval: float = 0.5
) -> AsyncIterator[tuple[Event, bool]]:
    """Every event of ``run`` with whether it is new: after its first ``since`` (the history a
    resumed run was loaded with), until it finishes or is suspended.

    ``Run.events()`` replays the history first and ends at the first suspension it meets, which
    for a resumed run is an earlier process's. When that happens, the rest is read from ``store``
    while the run goes on (woken by the store as each batch is stored; at least every
    ``interval`` seconds it looks whether the run has ended), and finally from the run's own result.
    """
    seen = 0
    async for event in run.events():
        seen += 1
        yield event, seen > since
    if seen > since or store is None:
        return
    after = seen
    while not run.done:
        for stored in await store.read(run.run_id, after=after):
            after = stored.seq
            yield stored.event, after > since
        if not run.done:
            await store.wait_for_events(run.run_id, after=after, within=interval)
    result = await run.result()
    for index, event in enumerate(result.events[after:], start=after + 1):
        yield event, index > since
