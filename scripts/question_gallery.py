"""Every kind of question a run asks, as the command line shows it: one small run per kind (a
scripted planner, fixed clock and ids), each suspended on its question in a throwaway SQLite
store, and the question rendered as ``planexec approvals`` renders it — the panel docs/how-to/
approvals.md shows. The same view is what ``--json``, the HTTP API, the web page, the TypeScript
client and the MCP tools carry.

    python scripts/question_gallery.py            # print the gallery (Markdown)
    python scripts/question_gallery.py --write    # put it into docs/how-to/approvals.md
    python scripts/question_gallery.py --write --pictures  # and each card of the web inbox, as a PNG
    python scripts/question_gallery.py --json     # the views as JSON, one per kind

tests/test_question_gallery.py checks that the page shows what this prints.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "how-to" / "approvals.md"
START = "<!-- gallery: made by scripts/question_gallery.py; do not edit by hand -->"
END = "<!-- gallery end -->"
WIDTH = 104


def _context() -> Any:
    from planexec import RunContext

    ticks = itertools.count()
    return RunContext(
        clock=lambda: 1_800_000_000.0 + next(ticks) * 0.5,
        new_id=lambda: f"q{next(ticks):04d}",
        seed=1,
    )


def _step(step_id: str, tool: str, args: dict[str, Any], *deps: str, **extra: Any) -> dict[str, Any]:
    return {"id": step_id, "description": extra.pop("description", f"{tool} {step_id}"), "tool": tool, "args": args,
            "depends_on": list(deps), **extra}  # fmt: skip


def _tools() -> list[Any]:
    from planexec import ToolError, tool
    from planexec.errors import EffectUncertain

    @tool
    def quote(order: int) -> dict[str, Any]:
        """Look up what an order costs and whom to pay."""
        return {"total": 120, "payee": "ACME Ltd"}

    @tool(side_effect=True, sensitive=True)
    def transfer(amount: int, to: str, memo: str) -> str:
        """Send money."""
        return f"sent {amount} to {to}"

    @tool(side_effect=True)
    def post(channel: str, text: str) -> str:
        """Post a message to a channel."""
        if channel == "#ops-lost":
            raise EffectUncertain("post", "the connection dropped after the request was sent")
        return f"posted to {channel}"

    @tool
    def count(text: str) -> int:
        """Count the words of a text."""
        return len(text.split())

    @tool
    def fetch(url: str) -> str:
        """Fetch a page."""
        if "old" in url:
            raise ToolError("404 not found")
        return "four words in all"

    return [quote, transfer, post, count, fetch]


PAY = {
    "reason": "look the order up, then pay",
    "steps": [
        _step("quote", "quote", {"order": 42}, description="look up order 42"),
        _step(
            "pay",
            "transfer",
            {"amount": "${quote.total}", "to": "${quote.payee}", "memo": "order 42"},
            "quote",
            description="pay the supplier",
        ),
    ],
}


def _kinds() -> list[tuple[str, str, dict[str, Any], Callable[[], dict[str, Any]]]]:
    """(kind, heading, what the run is, how the agent is made): one run per kind of question."""
    from planexec import AnswerReview, Approvals, Escalation, Limits

    ask = Approvals(deferred=True)
    patch_first = {
        "reason": "fetch the notes, then post them",
        "steps": [
            _step("get", "fetch", {"url": "https://old.example.org/notes"}, description="fetch the notes"),
            _step("tell", "post", {"channel": "#ops", "text": "${get}"}, "get", description="post the notes"),
        ],
    }
    patch = {
        "reason": "the old address is gone: fetch from the new one, and post a second time to #all",
        "steps": [
            _step("get", "fetch", {"url": "https://new.example.org/notes"}, description="fetch the notes"),
            _step("tell", "post", {"channel": "#ops", "text": "${get}"}, "get", description="post the notes"),
            _step("shout", "post", {"channel": "#all", "text": "notes: ${get}"}, "get", description="post to all"),
        ],
    }
    lost = {"steps": [_step("tell", "post", {"channel": "#ops-lost", "text": "deploy done"}, description="announce")]}
    unknown = {"steps": [_step("wire", "wire_money", {"amount": 120}, description="wire the money")]}
    checked = _step("count", "count", {"text": "four words in all"}, description="count the words")
    failing = {"steps": [{**checked, "checks": [{"kind": "matches", "pattern": "^5$"}]}]}
    chain = {
        "steps": [
            _step("a", "count", {"text": "one"}),
            _step("b", "count", {"text": "one two"}, "a"),
            _step("c", "count", {"text": "one two three"}, "b"),
        ]
    }
    plan_ask = {"approvals": Approvals(deferred=True, plan=True)}
    return [
        ("plan", "A plan to approve", {"goal": "pay ACME for order 42", "replies": [PAY, {"answer": "paid"}]},
         lambda: dict(plan_ask)),
        ("plan", "A patch to approve: the changes since the last yes",
         {"goal": "post the release notes to #ops", "replies": [patch_first, patch, {"answer": "4"}]},
         lambda: {**plan_ask, "answers": {"plan": True}}),
        ("step", "A step to approve", {"goal": "pay ACME for order 42", "replies": [PAY, {"answer": "paid"}]},
         lambda: {"approvals": ask}),
        ("effect", "An effect that may or may not have happened",
         {"goal": "tell #ops the deploy is done", "replies": [lost, {"answer": "told"}]},
         lambda: {"approvals": ask}),
        ("question", "The planner asks",
         {"goal": "pay ACME", "replies": [{"question": "Which order should I pay, 42 or 43?"}, PAY]},
         lambda: {"approvals": ask}),
        ("escalation", "The planner is stuck", {"goal": "wire 120 to ACME", "replies": [unknown]},
         lambda: {"approvals": ask}),
        ("review", "A result that failed its checks",
         {"goal": "count the words of the notes", "replies": [failing, {"answer": "5"}]},
         lambda: {"approvals": ask, "escalation": Escalation(on_fail="review")}),
        ("answer", "The final answer, against a checklist",
         {"goal": "count the words of the notes", "replies": [{"steps": [checked]}, {"answer": "It has 4 words."}]},
         lambda: {"approvals": ask, "review": AnswerReview(checklist=["says how many words", "names the text"])}),
        ("budget", "A cap reached: raise it or stop",
         {"goal": "count three texts", "replies": [chain, {"answer": "counted"}], "budget": {"tool_calls": 2}},
         lambda: {"approvals": ask, "limits": Limits(on_budget="ask")}),
    ]  # fmt: skip


async def _waiting(folder: Path, n: int, spec: dict[str, Any], extra: dict[str, Any]) -> tuple[Any, Any]:
    """Run until the run waits for its question; return (store, the view of the question)."""
    from planexec import Agent, ApprovalDecision, Budget
    from planexec.runs import answer, open_questions
    from planexec.store import SQLiteStore
    from planexec.testing import ScriptedModel

    store = SQLiteStore(folder / "gallery.db")
    budget = Budget(wall_time=60, **spec.get("budget", {}))
    answers = extra.pop("answers", {})
    agent = Agent(
        ScriptedModel(spec["replies"], name="planner"),
        tools=_tools(),
        store=store,
        budget=budget,
        context=_context(),
        **extra,
    )
    run_id = f"run-{n}"
    result = await agent.run(spec["goal"], run_id=run_id)
    while answers and result.stop.kind == "waiting":  # answer the first question, to show the next one
        [view] = [q for q in await open_questions(store) if q.run_id == run_id]
        if view.kind not in answers:
            break
        await answer(store, run_id, ApprovalDecision(approved=True, by="ana", reason="fine"))
        answers.pop(view.kind)
        result = await (await agent.resume(run_id)).result()
    questions = [q for q in await open_questions(store) if q.run_id == run_id]
    if len(questions) != 1:
        raise RuntimeError(f"run {run_id} did not wait for one question: {result.stop}")
    return store, questions[0]


async def gallery(folder: Path | None = None) -> tuple[str, list[dict[str, Any]]]:
    """The gallery as Markdown, and the views as JSON data; the runs are kept in ``folder`` (its
    ``gallery.db``) when one is given."""
    from rich.console import Console

    from planexec.cli import question_panel

    sections: list[str] = []
    views: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        where = folder if folder is not None else Path(tmp)
        for n, (kind, heading, spec, make) in enumerate(_kinds()):
            store, view = await _waiting(where, n, spec, make())
            await store.close()
            assert view.kind == kind, (kind, view.kind)
            out = io.StringIO()
            console = Console(file=out, width=WIDTH, color_system=None, force_terminal=False, legacy_windows=False)
            console.print(question_panel(view))
            text = "\n".join(line.rstrip() for line in out.getvalue().splitlines())
            picture = f"![{heading}, in the web inbox](../images/questions/{picture_name(n, kind)})"
            sections.append(f"#### {heading} (`{kind}`)\n\n```text\n{text}\n```\n\n{picture}\n")
            views.append(view.model_dump(mode="json"))
    return "\n".join(sections), views


def picture_name(n: int, kind: str) -> str:
    return f"{n}-{kind}.png"


PICTURES = ROOT / "docs" / "images" / "questions"
LAUNCH_ARGS = [
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]


def pictures(folder: Path, views: list[dict[str, Any]]) -> list[Path]:
    """Each question's card in the web inbox of ``planexec serve`` over the gallery's store, as a PNG
    in docs/images/questions (headless Chromium, 1366 px wide; nothing but 127.0.0.1 reached)."""
    import secrets
    import signal
    import subprocess

    from playwright.sync_api import sync_playwright

    token = secrets.token_urlsafe(24)
    (folder / "token").write_text(token)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    env.pop("PLANEXEC_STORE", None)
    args = [sys.executable, "-m", "planexec", "serve", "--port", "0", "--token-file", str(folder / "token")]
    args += ["--store", f"sqlite:///{folder / 'gallery.db'}"]
    process = subprocess.Popen(args, cwd=folder, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)  # fmt: skip
    saved: list[Path] = []
    try:
        assert process.stderr is not None
        url = next(line for line in process.stderr if line.startswith("planexec serve: http://"))
        url = url.split(": ", 1)[1].strip().rstrip("/")
        PICTURES.mkdir(parents=True, exist_ok=True)
        launch = [*LAUNCH_ARGS, *(["--no-sandbox"] if os.geteuid() == 0 else [])]
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=launch)
            try:
                page = browser.new_page(viewport={"width": 1366, "height": 900}, device_scale_factor=1)
                page.emulate_media(reduced_motion="reduce")
                page.goto(f"{url}/#token={token}")
                page.wait_for_selector("text=Runs")
                page.goto(f"{url}/#/inbox")
                page.wait_for_selector("section.question")
                for n, view in enumerate(views):
                    title = f"q-{view['run_id']}-{view['question_id']}-title"
                    card = page.locator(f"section.question[aria-labelledby='{title}']")
                    card.wait_for()
                    card.scroll_into_view_if_needed()
                    path = PICTURES / picture_name(n, view["kind"])
                    card.screenshot(path=str(path))
                    saved.append(path)
            finally:
                browser.close()
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=20)
    return saved


def _page_with(gallery_text: str) -> str:
    page = PAGE.read_text(encoding="utf-8")
    head, _, rest = page.partition(START)
    _, _, tail = rest.partition(END)
    return f"{head}{START}\n\n{gallery_text}\n{END}{tail}"


def main() -> int:
    os.environ["TZ"] = "UTC"
    time.tzset()
    sys.path.insert(0, str(ROOT / "src"))
    with tempfile.TemporaryDirectory() as tmp:
        text, views = asyncio.run(gallery(Path(tmp)))
        if "--json" in sys.argv:
            print(json.dumps(views, indent=2, ensure_ascii=False))
        elif "--write" in sys.argv:
            PAGE.write_text(_page_with(text), encoding="utf-8")
            print(f"wrote {PAGE.relative_to(ROOT)}")
            if "--pictures" in sys.argv:
                for path in pictures(Path(tmp), views):
                    print(f"saved {path.relative_to(ROOT)}")
        else:
            print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
