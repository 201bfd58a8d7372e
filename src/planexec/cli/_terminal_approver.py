"""Asking a human at the terminal: plan and step approvals as yes/no prompts, uncertain effects as
a choice (retry, skip, done).

Only used when both the input and the display are a terminal and ``--no-input`` is not given;
otherwise questions are saved in the run's log and the run is suspended. Prompts are asked one at
a time, with the live board paused so that the prompt is not drawn over.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any, Literal, cast

from rich.console import Console
from rich.markup import escape
from rich.prompt import Confirm, Prompt

from planexec._util.strict_json import MAX_CHARS, JSONRefused
from planexec._util.strict_json import loads as strict_loads
from planexec.cli._board import Display
from planexec.cli._questions import question_panel
from planexec.cli._text import plain, shown
from planexec.log import ChecklistResult
from planexec.runtime import ApprovalDecision, ApprovalRequest, Approvals
from planexec.store import Redactor

__all__ = ["TerminalApprover", "approvals_for", "is_interactive"]


def is_interactive(console: Console) -> bool:
    """Whether a human can be asked: the input is a terminal and so is the display."""
    return sys.stdin.isatty() and console.is_terminal


def approvals_for(
    console: Console, display: Display, *, no_input: bool, plan: bool, redactor: Redactor | None = None
) -> Approvals:
    """Ask at the terminal when a human is there; otherwise save questions in the log and suspend."""
    if not no_input and is_interactive(console):
        return Approvals(approver=TerminalApprover(console, display, redactor), plan=plan)
    return Approvals(deferred=True, plan=plan)


class TerminalApprover:
    """An approver that shows what is to be approved and asks yes or no."""

    def __init__(self, console: Console, display: Display, redactor: Redactor | None = None) -> None:
        self._console = console
        self._display = display
        self._redactor = redactor if redactor is not None else Redactor()
        self._lock = asyncio.Lock()

    async def __call__(self, request: ApprovalRequest) -> ApprovalDecision:
        async with self._lock:
            with self._display.paused():
                question = self._show(request)
                try:
                    if request.subject == "effect":
                        return await self._effect(question)
                    if request.subject == "question":
                        return await self._question(question)
                    if request.subject == "escalation":
                        return await self._escalation(question)
                    if request.subject == "answer":
                        return await self._checklist(question, request.checklist)
                    approved = await asyncio.to_thread(Confirm.ask, question, console=self._console, default=False)
                except EOFError:
                    return ApprovalDecision(approved=False, reason="no answer (end of input)", by="terminal")
        reason = "approved at the terminal" if approved else "declined at the terminal"
        return ApprovalDecision(approved=approved, reason=reason, by="terminal")

    async def _text(self, prompt: str) -> str:
        while True:
            text = await asyncio.to_thread(Prompt.ask, prompt, console=self._console, default="")
            if text.strip():
                return text
            self._console.print("an answer is needed", markup=False)

    async def _question(self, question: str) -> ApprovalDecision:
        text = await self._text(question)
        return ApprovalDecision(approved=True, text=text, reason="answered at the terminal", by="terminal")

    async def _escalation(self, question: str) -> ApprovalDecision:
        """An escalation: give guidance, let the planner try again, or stop the run."""
        answer = await asyncio.to_thread(
            Prompt.ask, question, console=self._console, choices=["guidance", "replan", "stop"], default="stop"
        )
        if answer == "stop":
            return ApprovalDecision(approved=False, reason="stopped at the terminal", by="terminal")
        if answer == "replan":
            return ApprovalDecision(approved=True, choice="replan", reason="replan at the terminal", by="terminal")
        text = await self._text("Guidance for the planner")
        return ApprovalDecision(
            approved=True, choice="guidance", text=text, reason="guided at the terminal", by="terminal"
        )

    async def _checklist(self, question: str, items: tuple[str, ...]) -> ApprovalDecision:
        """A final answer: tick or fail each item of the checklist (a failed item takes a note)."""
        results = []
        for item in items:
            ok = await asyncio.to_thread(Confirm.ask, escape(plain(f"{item}?")), console=self._console, default=False)
            note = "" if ok else await self._text(f"What is wrong ({plain(item)})")
            results.append(ChecklistResult(item=item, passed=ok, note=note))
        approved = all(r.passed for r in results)
        reason = "every item ticked at the terminal" if approved else "items failed at the terminal"
        return ApprovalDecision(approved=approved, checklist=tuple(results), reason=reason, by="terminal")

    async def _effect(self, question: str) -> ApprovalDecision:
        """An uncertain effect: call again, skip the step, or mark it done (with its output)."""
        answer = await asyncio.to_thread(
            Prompt.ask, question, console=self._console, choices=["retry", "skip", "done"], default="skip"
        )
        choice = cast(Literal["retry", "skip", "done"], answer)
        output: Any = None
        if choice == "done":
            while True:
                text = await asyncio.to_thread(
                    Prompt.ask, "The step's output (JSON; empty for none)", console=self._console, default=""
                )
                try:
                    output = strict_loads(text, max_chars=MAX_CHARS) if text.strip() else None
                    break
                except JSONRefused as e:
                    self._console.print(f"not JSON: {e}", markup=False)
        reason = f"{choice} at the terminal"
        return ApprovalDecision(approved=True, choice=choice, output=output, reason=reason, by="terminal")

    def _show(self, request: ApprovalRequest) -> str:
        """Show what is asked — the question's view: the goal, the step with its arguments as they
        will be sent and its effect, the plan with its changes and forecast, why it is asked and
        what each answer does (redacted, and never read as markup); return the prompt."""
        console = self._console
        view = request.view
        if view is not None:
            console.print(question_panel(view))
        else:  # an approver called with a request made by hand
            console.print(shown(f"{request.subject}: {self._redactor.redact_text(request.reason)}"))
        step = request.step
        sid = step.id if step is not None else "?"
        if request.subject == "plan":
            version = request.plan.version if request.plan is not None else "?"
            return f"Run plan v{version}?"
        if request.subject == "question":
            return escape(plain(self._redactor.redact_text(request.reason)))
        if request.subject == "escalation":
            return "Give guidance, let the planner try again, or stop the run?"
        if request.subject == "answer":
            return "Tick each item"
        if request.subject == "review":
            return escape(plain(f"Accept the result of step {sid}?"))
        if request.subject == "effect":
            return escape(plain(f"Step {sid}: call again, skip it, or mark it done?"))
        if request.subject == "budget":
            return escape(plain(f"Raise the {request.budget} budget and go on?"))
        return escape(plain(f"Run step {sid}?"))
