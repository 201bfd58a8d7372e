"""``planexec show RUN --receipts``: every side-effecting call of a run as a receipt — plan version →
approval → effect, each link an event named by its seq and hash — and whether the chain holds."""

from __future__ import annotations

import json

import click
from rich.console import Console

from planexec._util.plural import counted
from planexec.cli._common import EXIT_OK, EXIT_STOPPED, EXIT_USAGE, make_console, say
from planexec.cli._format import cut, when
from planexec.cli._options import Problems, Refused
from planexec.cli._report import json_text
from planexec.cli._store_options import StoreChoice, using_store
from planexec.runs import ApprovalReceipt, LoggedEvent, Receipt, Receipts, read_receipts

__all__ = ["print_receipts", "show_receipts"]

_HASH = 16
"""Hex digits of a hash shown to people (``--json`` gives all 64)."""


async def show_receipts(choice: StoreChoice, run_id: str, as_json: bool) -> int:
    """Print RUN's receipts; exit status 1 when its chain is broken, 2 when events cannot be read."""
    async with using_store(choice) as store:
        receipts = await read_receipts(store, run_id)
    if receipts.events == 0 and not receipts.problems and (receipts.chain is None or receipts.chain.events == 0):
        raise Refused(Problems.of("RUN", f"no run {run_id!r} in {choice.describe()} (`planexec runs` lists them)"))
    if as_json:
        click.echo(json_text(receipts.json()))
    else:
        print_receipts(make_console(as_json=False), receipts)
    if receipts.problems:
        click.echo(f"Error: run {run_id}: {counted(len(receipts.problems), 'problem')} reading its log:", err=True)
        for line in receipts.problems:
            click.echo(f"  - {line}", err=True)
        return EXIT_USAGE
    return EXIT_OK if receipts.chain is None or receipts.chain.intact else EXIT_STOPPED


def print_receipts(console: Console, receipts: Receipts) -> None:
    calls = counted(len(receipts.receipts), "side-effecting call")
    say(console, f"receipts of run {receipts.run_id}: {calls}; {_chain(receipts)}")
    for number, receipt in enumerate(receipts.receipts, start=1):
        say(console, "")
        for line in _lines(number, receipt):
            say(console, line)


def _chain(receipts: Receipts) -> str:
    chain = receipts.chain
    if chain is None:
        return "the chain was not checked"
    if chain.broken is not None:
        b = chain.broken
        return (
            f"its chain is broken at event {b.seq} ({b.problem}: {b.message}): what these receipts quote from "
            f"event {b.seq} on cannot be trusted (`planexec verify {receipts.run_id}` says more)"
        )
    if chain.begins_at is None:
        return f"none of its {chain.events} events is chained (written before the store kept a chain)"
    since = "" if chain.begins_at == 1 else f" (from event {chain.begins_at})"
    return f"chain intact over {chain.events} events{since}, head {_short(chain.head)}"


def _short(value: str | None) -> str:
    return "(no hash)" if value is None else value[:_HASH] + "…"


def _event(ref: LoggedEvent) -> str:
    return f"{ref.kind}, event {ref.seq} #{_short(ref.hash)}"


def _lines(number: int, r: Receipt) -> list[str]:
    made_by = "a tool step" if r.made_by == "step" else f"a call by model-driven step {r.step_id} ({r.call_id})"
    lines = [f"{number}. {r.tool} — step {r.step_id}, {made_by}: {r.why}"]
    if r.plan is None:
        lines.append("   plan      (the log holds no plan version for the step)")
    else:
        by = r.plan.author + (f" ({r.plan.model})" if r.plan.model else "")
        where = _event(r.plan.event) if r.plan.event is not None else "no plan_proposed event"
        reason = f': "{cut(r.plan.reason, 120)}"' if r.plan.reason else ""
        lines.append(f"   plan      v{r.plan.version} by {by}{reason} — {where}")
    if not r.approvals:
        lines.append(f"   approval  {r.no_approval}")
    for i, a in enumerate(r.approvals):
        lines += _approval(a, first=i == 0)
    args = cut(json.dumps(r.args, ensure_ascii=False, default=str), 300)
    key = f", idempotency key {r.idempotency_key}" if r.idempotency_key else ""
    again = f" (sent again: the first attempt is event {r.sent_before})" if r.sent_before is not None else ""
    lines.append(f"   effect    {r.tool} {args}{key}{again}")
    lines.append(f"             {r.outcome}: {cut(r.detail, 200)}")
    trail = [_event(r.started)]
    if r.call is not None:
        trail.append(_event(r.call))
    elif r.ended is not None:
        trail.append(_event(r.ended))
    lines.append(f"             {'; '.join(trail)}")
    return lines


def _approval(a: ApprovalReceipt, *, first: bool) -> list[str]:
    label = "approval " if first else "         "
    choice = f", chose {a.choice}" if a.choice else ""
    reason = f' ("{cut(a.reason, 120)}")' if a.reason else ""
    rule = f" [{a.rule}]" if a.rule else ""
    lines = [
        f"   {label} {a.approval_id} ({a.subject}{rule}): approved by {a.by} at {when(a.at)}{choice}{reason}",
        f"             covers {a.covers}",
        f"             asked in {_event(a.asked)}; answered in {_event(a.answered)}",
    ]
    if a.shown_args is not None:
        shown = json.dumps(a.shown_args, ensure_ascii=False, sort_keys=True, default=str)
        lines.append(f"             shown the arguments {cut(shown, 160)}")
    return lines
