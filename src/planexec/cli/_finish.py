"""The end of a command that ran an agent: the report (tables or JSON), why the run stopped, the
questions a suspended run waits for with the commands that answer them, and the exit status."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import click

from planexec._util.plural import counted
from planexec.cli._common import EXIT_STOPPED, EXIT_WAITING, View, exit_code
from planexec.cli._questions import answer_commands, question_json, question_text_lines
from planexec.cli._report import json_text, print_summary, result_json
from planexec.cli._store_options import StoreChoice, is_memory
from planexec.cli._text import plain, redacted_result, redactor_of
from planexec.log import RunResult, RunState
from planexec.store import RunStore
from planexec.views import QuestionView, question_view

__all__ = ["report_result", "waiting_lines"]


def waiting_lines(choice: StoreChoice, run_id: str, pending: Iterable[QuestionView]) -> list[str]:
    """What a suspended run waits for — each question as a human needs it — and the exact commands
    that answer each."""
    pending = list(pending)
    lines = [f"run {run_id} is saved in {choice.describe()} and waits for {counted(len(pending), 'answer')}:"]
    for view in pending:
        lines.append("")
        lines += [f"  {line}" for line in question_text_lines(view)]
    lines.append("")
    lines.append("answer with:")
    for view in pending:
        lines += [f"  {command}" for command in answer_commands(choice, view)]
    return lines


def report_result(
    view: View,
    result: RunResult,
    choice: StoreChoice,
    store: RunStore,
    *,
    extra: Iterable[tuple[str, str]] = (),
    json_extra: Mapping[str, Any] | None = None,
) -> int:
    """Print the result, redacted as the store keeps it, and return the exit status (0 goal met, 1
    stopped otherwise, 3 waiting)."""
    result = redacted_result(result, redactor_of(store))
    code = exit_code(result)
    state = RunState.fold(result.events)
    pending = [question_view(state, rec) for rec in state.pending_approvals] if code == EXIT_WAITING else []
    if view.as_json:
        data = result_json(result, store=choice.describe(), **(json_extra or {}))
        if code == EXIT_WAITING:
            data["pending_approvals"] = [question_json(view, choice=choice) for view in pending]
        click.echo(json_text(data))
    else:
        print_summary(view.console, result, extra=[("run id", result.run_id), ("store", choice.describe()), *extra])
    if code == EXIT_STOPPED:
        click.echo(plain(f"stopped: {result.stop}"), err=True)
    elif code == EXIT_WAITING:
        for line in waiting_lines(choice, result.run_id, pending):
            click.echo(plain(line), err=view.as_json)
        if is_memory(store):
            click.echo(
                "warning: the store is in memory: the run ends with this process and cannot be answered "
                "or resumed; name a lasting store with --store or PLANEXEC_STORE",
                err=True,
            )
    return code
