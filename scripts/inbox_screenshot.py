"""Regenerate the pictures of the web inbox in docs/images: what an approver sees before saying yes.

    .venv/bin/python scripts/inbox_screenshot.py [--out DIR]

It starts ``planexec serve`` (a throwaway SQLite store, scripted planners, loopback, a token) with
two agents — ``payer``, whose sensitive ``transfer`` step waits for a human with its arguments
bound from an earlier step, and ``poster``, whose plans a human approves, and whose first plan
fails and is patched — starts a run of each, waits until both wait for an answer, opens the inbox
in headless Chromium (Debian's /usr/bin/chromium through Playwright, 1366 px wide) and saves one
PNG per question card: ``inbox-step.png`` and ``inbox-patch.png``. The server is stopped whatever
happens; the browser reaches nothing but 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "images"
CHROMIUM = Path("/usr/bin/chromium")
LAUNCH_ARGS = [
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]

TOOLS = '''
from planexec import ToolError, tool


@tool
def quote(order: int) -> dict:
    """Look up what an order costs and whom to pay."""
    return {"total": 120, "payee": "ACME Ltd", "iban": "DE89 3704 0044 0532 0130 00"}


@tool(side_effect=True, sensitive=True)
def transfer(amount: int, to: str, iban: str, memo: str) -> str:
    """Send money to a supplier."""
    return f"sent {amount} to {to}"


@tool
def fetch(url: str) -> str:
    """Fetch a page."""
    if "old" in url:
        raise ToolError("404 not found")
    return "Release 2.4: faster search, two fixes."


@tool(side_effect=True)
def post(channel: str, text: str) -> str:
    """Post a message to a chat channel."""
    return f"posted to {channel}"


TOOLS = [quote, transfer, fetch, post]
'''


def _step(step_id: str, tool: str, args: dict[str, Any], *deps: str, description: str) -> dict[str, Any]:
    return {"id": step_id, "description": description, "tool": tool, "args": args, "depends_on": list(deps)}


PAY = {
    "reason": "look the order up, then pay the supplier",
    "steps": [
        _step("quote", "quote", {"order": 42}, description="look up order 42"),
        _step(
            "pay",
            "transfer",
            {"amount": "${quote.total}", "to": "${quote.payee}", "iban": "${quote.iban}", "memo": "order 42"},
            "quote",
            description="pay the supplier for order 42",
        ),
    ],
}
FIRST = {
    "reason": "fetch the release notes, then post them",
    "steps": [
        _step("get", "fetch", {"url": "https://old.example.org/notes"}, description="fetch the release notes"),
        _step("tell", "post", {"channel": "#ops", "text": "${get}"}, "get", description="post the notes to #ops"),
    ],
}
PATCH = {
    "reason": "the old address is gone: fetch from the new one, and also post to #all",
    "steps": [
        _step("get", "fetch", {"url": "https://new.example.org/notes"}, description="fetch the release notes"),
        _step("tell", "post", {"channel": "#ops", "text": "${get}"}, "get", description="post the notes to #ops"),
        _step("shout", "post", {"channel": "#all", "text": "New: ${get}"}, "get", description="post them to #all"),
    ],
}


def _agent(folder: Path, name: str, replies: list[Any], **fields: Any) -> str:
    (folder / f"{name}.planner.json").write_text(json.dumps(replies))
    planner = f"scripted:{folder / f'{name}.planner.json'}"
    spec = {"planner": planner, "tools": ["inbox_tools:TOOLS"], "cwd": str(folder)}
    (folder / f"{name}.json").write_text(json.dumps({**spec, **fields}))
    return f"{name}={folder / f'{name}.json'}"


def _serve(folder: Path, token: str, agents: list[str]) -> tuple[subprocess.Popen[str], str]:
    (folder / "token").write_text(token)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(folder)])}
    env.pop("PLANEXEC_STORE", None)
    args = [sys.executable, "-m", "planexec", "serve", "--port", "0", "--store", f"sqlite:///{folder / 'runs.db'}"]
    args += ["--token-file", str(folder / "token")]
    for agent in agents:
        args += ["--agent", agent]
    process = subprocess.Popen(args, cwd=folder, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert process.stderr is not None
    for line in process.stderr:
        if line.startswith("planexec serve: http://"):
            return process, line.split(": ", 1)[1].strip().rstrip("/")
    raise RuntimeError("planexec serve did not start")


def _until(check: Any, what: str, timeout: float = 30.0) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise RuntimeError(f"gave up waiting for {what}")


def _shoot(url: str, token: str, out: Path, width: int) -> list[Path]:
    from playwright.sync_api import sync_playwright

    saved = []
    args = [*LAUNCH_ARGS, *(["--no-sandbox"] if os.geteuid() == 0 else [])]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=args)
        try:
            page = browser.new_page(viewport={"width": width, "height": 900}, device_scale_factor=1)
            page.goto(f"{url}/#token={token}")
            page.wait_for_selector("text=Runs")
            page.goto(f"{url}/#/inbox")
            page.wait_for_selector("section.question[data-kind='plan']")
            page.wait_for_selector("section.question[data-kind='step']")
            for kind, name in (("step", "inbox-step.png"), ("plan", "inbox-patch.png")):
                card = page.locator(f"section.question[data-kind='{kind}']").first
                card.scroll_into_view_if_needed()
                path = out / (name if width == 1366 else name.replace(".png", f"-{width}.png"))
                card.screenshot(path=str(path))
                saved.append(path)
        finally:
            browser.close()
    return saved


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--width", type=int, default=1366, help="The window's width in pixels (420: a phone).")
    options = parser.parse_args()
    out = options.out
    token = secrets.token_urlsafe(24)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "inbox_tools.py").write_text(TOOLS)
        agents = [
            _agent(folder, "payer", [PAY, {"answer": "paid"}]),
            _agent(folder, "poster", [FIRST, PATCH, {"answer": "posted"}], approve_plan=True),
        ]
        process, url = _serve(folder, token, agents)
        try:
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=10) as api:
                api.post("/v1/runs", json={"agent": "payer", "goal": "pay ACME for order 42"}).raise_for_status()
                poster = api.post("/v1/runs", json={"agent": "poster", "goal": "post the release notes to #ops"})
                run_id = poster.raise_for_status().json()["run_id"]

                def first_plan() -> Any:
                    questions = api.get(f"/v1/runs/{run_id}").json().get("questions", [])
                    return questions[0] if questions and questions[0]["plan"]["version"] == 1 else None

                question = _until(first_plan, "the first plan's question")
                answer = f"/v1/runs/{run_id}/questions/{question['question_id']}/answer"
                api.post(answer, json={"decision": "approve"}).raise_for_status()

                def both() -> bool:
                    questions = api.get("/v1/inbox").json()["questions"]
                    kinds = {(q["kind"], (q.get("plan") or {}).get("version")) for q in questions}
                    return {("step", None), ("plan", 2)} <= kinds

                _until(both, "the step and the patch to wait for an answer")
            out.mkdir(parents=True, exist_ok=True)
            for path in _shoot(url, token, out, options.width):
                print(f"saved {path}")
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
