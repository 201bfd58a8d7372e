"""Watching a run in the terminal: a live task board, or one plain line per event.

Both are driven the same way: ``async for event in run.events()`` and the run's folded state. The
board renders that state (one row per step); the plain lines describe each event as it comes.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Protocol

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from planexec._util.plural import counted
from planexec.cli._event_lines import cut, describe_event, seconds
from planexec.cli._text import plain, redacted_events, shown
from planexec.cli._watch import new_events
from planexec.log import (
    Event,
    RunResult,
    RunState,
    StepRecord,
)
from planexec.plan import render_text
from planexec.runtime import Run
from planexec.store import Redactor, RunStore

__all__ = [
    "Board",
    "Display",
    "LineDisplay",
    "LiveDisplay",
    "describe_event",
    "follow",
    "planner_activity",
    "step_rows",
]

STATUS = {
    "pending": ("waiting", "dim"),
    "running": ("running", "cyan"),
    "held": ("held", "bold yellow"),
    "succeeded": ("done", "green"),
    "failed": ("failed", "red"),
    "cancelled": ("cancelled", "yellow"),
    "dropped": ("dropped", "dim"),
}


def runs_on(rec: StepRecord) -> str:
    step = rec.step
    if step.tool is not None:
        return step.tool
    return f"{rec.executor or step.executor or 'default'} (model)"


def step_rows(state: RunState) -> list[StepRecord]:
    """The state's steps in a stable, readable order: by depth in the dependency graph, then by
    when they first appeared. Linear in the steps, and safe on any graph (cycles included)."""
    steps = state.steps
    order = {sid: index for index, sid in enumerate(steps)}
    deps = {sid: [d for d in rec.step.depends_on if d in steps] for sid, rec in steps.items()}
    depth: dict[str, int] = {}
    for root in steps:
        if root in depth:
            continue
        stack: list[tuple[str, int]] = [(root, 0)]
        on_path = {root}
        while stack:
            sid, i = stack[-1]
            if i < len(deps[sid]):
                stack[-1] = (sid, i + 1)
                dep = deps[sid][i]
                if dep not in depth and dep not in on_path:
                    stack.append((dep, 0))
                    on_path.add(dep)
                continue
            depth[sid] = 1 + max((depth[d] for d in deps[sid] if d in depth), default=-1)
            stack.pop()
            on_path.discard(sid)
    return [steps[sid] for sid in sorted(steps, key=lambda sid: (depth[sid], order[sid]))]


class Board:
    """A renderable task board over a run's folded state, re-rendered on every refresh."""

    def __init__(self, *, title: str = "planexec", clock: Callable[[], float] = time.time) -> None:
        self.title = title
        self._clock = clock
        self._state: RunState | None = None
        self._last = ""
        self._spinners: dict[str, Spinner] = {}

    def update(self, event: Event, state: RunState) -> None:
        self._state = state
        self._last = describe_event(event, state)

    def __rich__(self) -> RenderableType:
        state = self._state
        if state is None:
            return Text(f"{self.title}: starting…", style="dim")
        return Group(self._header(state), self._table(state), self._footer(state))

    def _header(self, state: RunState) -> RenderableType:
        text = Text()
        text.append(f"{plain(self.title)} ", style="bold")
        text.append(f"· run {plain(state.run_id)}", style="dim")
        plan = state.plan
        if plan is not None:
            text.append(f" · plan v{plan.version}", style="bold magenta")
            text.append(f" by {plan.author}")
            if plan.reason:
                text.append(f": {plain(cut(plan.reason, 160))}", style="italic")
        text.append(f"\ngoal: {plain(cut(state.goal, 200))}")
        activity = planner_activity(state)
        if activity:
            text.append(f"\n{activity}", style="yellow")
        return text

    def _table(self, state: RunState) -> Table:
        table = Table(expand=True, show_edge=False, pad_edge=False, header_style="bold")
        table.add_column("step", no_wrap=True, overflow="ellipsis", min_width=12)
        table.add_column("status", no_wrap=True, min_width=11)
        table.add_column("tool / executor", no_wrap=True, overflow="ellipsis", min_width=10)
        table.add_column("tries", justify="right", no_wrap=True, min_width=5)
        table.add_column("time", justify="right", no_wrap=True, min_width=6)
        table.add_column("detail", overflow="ellipsis", no_wrap=True, ratio=1, min_width=16)
        now = self._clock()
        asking = {a.step_id for a in state.pending_approvals if a.step_id is not None}
        for rec in step_rows(state):
            sid = rec.step.id
            table.add_row(
                shown(sid),
                self._status(rec, sid in asking),
                shown(runs_on(rec)),
                str(rec.attempts) if rec.attempts else "",
                self._time(rec, now),
                shown(cut(_detail(rec, state, sid in asking), 400)),
            )
        return table

    def _status(self, rec: StepRecord, asking: bool) -> RenderableType:
        if asking:
            return Text("approval?", style="bold yellow")
        label, style = STATUS[rec.status]
        if rec.status == "running":
            spinner = self._spinners.get(rec.step.id)
            if spinner is None:
                spinner = self._spinners[rec.step.id] = Spinner("dots", text=Text(label, style=style), style=style)
            return spinner
        return Text(label, style=style)

    @staticmethod
    def _time(rec: StepRecord, now: float) -> str:
        if rec.started_at is None:
            return ""
        end = rec.finished_at if rec.finished_at is not None else now
        return seconds(max(0.0, end - rec.started_at))

    def _footer(self, state: RunState) -> RenderableType:
        end = state.finished_at if state.finished_at is not None else self._clock()
        usage = state.usage
        text = Text(style="dim")
        text.append(
            f"model calls {state.model_calls} · tokens {usage.input_tokens:,} in / {usage.output_tokens:,} out · "
            f"${state.cost:.4f} · tool calls {state.tool_calls} · replans {state.replans} · "
            f"{seconds(max(0.0, end - state.started_at))}"
        )
        if self._last:
            text.append(f"\nlast: {plain(cut(self._last, 160))}")
        return text


_ACTIVITY: dict[str, str] = {
    "initial": "proposing a plan",
    "failure": "patching the plan",
    "after_step": "revising the plan",
    "turn": "choosing the next step",
    "finish": "writing the answer",
    "information": "replanning with new information",
    "review": "answering again after a refused answer",
}


def planner_activity(state: RunState) -> str | None:
    """What the planner is busy with (None: it is not planning)."""
    if state.finished or state.planning is None:
        return None
    trigger = state.planning.trigger
    return f"planner: {_ACTIVITY.get(trigger, trigger)}…"


def _detail(rec: StepRecord, state: RunState, asking: bool) -> str:
    if asking:
        return "waiting for a human's approval"
    if rec.status == "pending":
        waiting = [d for d in rec.step.depends_on if d not in state.outputs]
        return f"after {', '.join(waiting)}" if waiting else "ready"
    if rec.status == "running":
        if rec.step.tool is None:
            return f"{counted(len(rec.tool_calls), 'tool call')} so far"
        errors = rec.attempt_errors
        return f"retrying after: {errors[-1].message}" if errors else rec.step.description
    if rec.status == "failed" and rec.error is not None:
        return str(rec.error)
    if rec.status == "succeeded":
        calls = f"{counted(len(rec.tool_calls), 'tool call')} · " if rec.tool_calls else ""
        return calls + render_text(rec.output)
    return rec.step.description


# -- displays -------------------------------------------------------------------------------


class Display(Protocol):
    """Where a run is shown while it runs."""

    ticks: bool
    """Whether the display wants regular refreshes (for running clocks and spinners)."""

    def start(self) -> None: ...

    def update(self, event: Event, state: RunState) -> None: ...

    def tick(self) -> None: ...

    def stop(self) -> None: ...

    def paused(self) -> contextlib.AbstractContextManager[None]:
        """Get out of the way while something else (a prompt) uses the terminal."""
        ...


class LineDisplay:
    """One plain line per event, with the time since the run started."""

    ticks = False

    def __init__(self, console: Console) -> None:
        self.console = console

    def start(self) -> None:
        pass

    def update(self, event: Event, state: RunState) -> None:
        elapsed = max(0.0, event.at - state.started_at) if state.started_at else 0.0
        line = f"[{elapsed:7.2f}s] {describe_event(event, state)}"
        self.console.print(plain(line), markup=False, highlight=False, soft_wrap=True)

    def tick(self) -> None:
        pass

    def stop(self) -> None:
        pass

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        yield


class LiveDisplay:
    """The task board, redrawn in place on every event and a few times a second.

    Rendering happens only on the event loop's thread (no background refresh), so the board never
    reads the state while it changes.
    """

    ticks = True

    def __init__(self, console: Console, board: Board) -> None:
        self.board = board
        self._live = Live(
            board, console=console, auto_refresh=False, transient=False, redirect_stdout=False, redirect_stderr=False
        )
        self._running = False

    def start(self) -> None:
        if not self._running:
            self._live.start(refresh=True)
            self._running = True

    def update(self, event: Event, state: RunState) -> None:
        self.board.update(event, state)
        self.tick()

    def tick(self) -> None:
        if self._running:
            self._live.refresh()

    def stop(self) -> None:
        if self._running:
            self._live.refresh()
            self._live.stop()
            self._running = False

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        was_running = self._running
        self.stop()
        try:
            yield
        finally:
            if was_running:
                self.start()


async def _ticker(display: Display, interval: float) -> None:
    while True:
        await asyncio.sleep(interval)
        display.tick()


async def follow(
    run: Run,
    display: Display,
    *,
    interval: float = 0.1,
    since: int = 0,
    store: RunStore | None = None,
    redactor: Redactor | None = None,
) -> RunResult:
    """Show ``run`` on ``display`` until it finishes (or is suspended), and return its result.

    ``since``: how many events the run had when this process picked it up (they are not shown
    again); ``store``: where a resumed run's log can be read. Every event is shown as the store
    keeps it, passed through ``redactor`` (default: ``Redactor()``). If this coroutine is
    cancelled, the run is cancelled with it.
    """
    redactor = redactor if redactor is not None else Redactor()
    shown_state = RunState()
    display.start()
    ticker = asyncio.create_task(_ticker(display, interval)) if display.ticks else None
    try:
        async for event, new in new_events(run, since=since, store=store, interval=interval):
            (clean,) = redacted_events([event], redactor)
            shown_state.apply(clean)
            if new:
                display.update(clean, shown_state)
    except asyncio.CancelledError:
        run.cancel()
        raise
    finally:
        if ticker is not None:
            ticker.cancel()
            await asyncio.gather(ticker, return_exceptions=True)
        display.stop()
    return await run.result()
