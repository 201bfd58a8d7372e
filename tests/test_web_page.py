"""The web page of ``planexec serve`` in a real headless Chromium, against a real server process:
a run started from the page whose DAG changes live and whose sensitive step is approved from the
inbox with the keyboard; a plan edited in the page (a wrong edit refused with its problems listed,
then one step removed) and its diff shown. Screenshots go under each test's tmp_path (and
``$PLANEXEC_SCREENSHOTS``)."""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from .browser_support import PageErrors, Screenshots, Served, chromium_required, start_serve, stop_serve
from .web_support import agent_spec, node, open_page, start_run, tool_step, write_tools

try:
    from playwright.sync_api import Page, expect
except ImportError:
    if chromium_required():
        raise
    pytest.skip("the playwright package is not installed (pip install -e '.[dev]')", allow_module_level=True)

LIVE_PLAN = {
    "reason": "two sources at once, then publish",
    "steps": [
        tool_step("gather_web", "gather", {"source": "web"}),
        tool_step("gather_docs", "gather", {"source": "docs"}),
        tool_step("publish", "publish", {"title": "weekly"}, "gather_web", "gather_docs"),
    ],
}
EDIT_PLAN = {
    "reason": "count three words",
    "steps": [
        tool_step("first", "count", {"word": "alpha"}),
        tool_step("second", "count", {"word": "beta"}),
        tool_step("third", "count", {"word": "gamma"}, "first"),
    ],
}


expect.set_options(timeout=15_000)

WAIT_PLAN = {"steps": [tool_step("wait", "gather", {"source": "never"})]}
"""One step that runs until it is cancelled (its gate is never opened)."""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """``planexec serve`` with three agents — ``reporter`` (parallel steps, then a sensitive one),
    ``counter`` (its plans approved by a human) and ``waiter`` (a step that runs until cancelled) —
    a SQLite store and a token file."""
    workdir = tmp_path_factory.mktemp("serve")
    write_tools(workdir)
    agents = [
        agent_spec(workdir, "reporter", [LIVE_PLAN, {"answer": "the weekly report is out"}]),
        agent_spec(workdir, "counter", [EDIT_PLAN, {"answer": "counted"}], approve_plan=True),
        agent_spec(workdir, "waiter", [WAIT_PLAN, {"answer": "waited"}]),
    ]
    args = ["--store", f"sqlite:///{workdir / 'runs.db'}"]
    for agent in agents:
        args += ["--agent", agent]
    server = start_serve(workdir, args, token=secrets.token_urlsafe(24))
    try:
        yield server
    finally:
        stop_serve(server.process)


def test_a_run_started_in_the_page_updates_its_dag_live_and_its_sensitive_step_is_approved_from_the_inbox(
    page: Page, served: Served, screenshots: Screenshots
) -> None:
    gates = Path(served.log).parent / "gates"
    open_page(page, served)
    run_id = start_run(page, "reporter", "Write the weekly report")

    # both gather steps run at once, and the page says so as it happens
    expect(node(page, "gather_web")).to_have_attribute("data-status", "running")
    expect(node(page, "gather_docs")).to_have_attribute("data-status", "running")
    expect(node(page, "publish")).to_have_attribute("data-status", "pending")
    expect(node(page, "gather_web")).to_contain_text("running")  # the status is written, not only coloured
    screenshots.take(page, "live-1-running")

    # a person tabbing through the steps table keeps their place as the run goes on
    page.get_by_role("button", name="gather_docs", exact=True).focus()
    (gates / "web").touch()
    expect(node(page, "gather_web")).to_have_attribute("data-status", "succeeded")
    expect(page.locator('table.steps tr[data-step="gather_web"] td[data-label="Status"]')).to_have_text("succeeded")
    assert page.evaluate("() => document.activeElement.textContent") == "gather_docs"
    expect(node(page, "gather_docs")).to_have_attribute("data-status", "running")
    (gates / "docs").touch()
    expect(node(page, "gather_docs")).to_have_attribute("data-status", "succeeded")
    expect(node(page, "publish")).to_have_attribute("data-status", "approval")
    expect(page.locator("#run-status")).to_have_attribute("data-status", "waiting")
    node(page, "gather_docs").focus()
    page.keyboard.press("Enter")  # a node is chosen with the keyboard: its details show
    expect(page.locator("#step-output")).to_have_text("notes from docs")
    screenshots.take(page, "live-2-waiting")

    # the inbox: Tab to the Approve button and press Enter
    page.get_by_role("link", name=re.compile("^Inbox")).click()
    card = page.locator("section.question", has_text=run_id)
    expect(card).to_contain_text("publish")
    screenshots.take(page, "live-3-inbox")
    approve = card.get_by_role("button", name="Approve")
    page.locator("body").focus()
    for _ in range(30):
        if approve.evaluate("b => b === document.activeElement"):
            break
        page.keyboard.press("Tab")
    else:
        pytest.fail("Tab never reached the Approve button")
    page.keyboard.press("Enter")
    # the card says it was answered, or is gone already (the inbox was read again once the run went on)
    expect(page.locator("section.question", has_text=run_id).filter(has_not_text="Answered")).to_have_count(0)

    page.goto(f"{served.url}#/runs/{run_id}")
    expect(page.locator("#run-status")).to_have_attribute("data-status", "finished")
    expect(node(page, "publish")).to_have_attribute("data-status", "succeeded")
    expect(page.locator(".answer")).to_contain_text("the weekly report is out")
    expect(page.locator('table.log tr[data-kind="run_finished"]')).to_have_count(1)
    screenshots.take(page, "live-4-finished")


def test_a_plan_edited_in_the_page_is_checked_and_its_diff_shown(
    page: Page, served: Served, screenshots: Screenshots, page_errors: PageErrors
) -> None:
    open_page(page, served)
    run_id = start_run(page, "counter", "Count three words")
    card = page.locator("section.question.subject-plan")
    expect(card).to_contain_text("third")
    expect(page.locator("#run-plan")).to_have_text("proposed, waiting for approval")
    expect(page.locator("#dag-section")).to_contain_text("waits for approval in the question above")
    card.get_by_text("Edit the plan").click()
    editor = card.locator("textarea")
    steps = json.loads(editor.input_value())
    assert [s["id"] for s in steps] == ["first", "second", "third"]

    # a wrong edit (third depends on the removed first) is refused, with the server's problems listed
    page_errors.allow(r"status of 422")
    editor.fill(json.dumps([s for s in steps if s["id"] != "first"], indent=2))
    card.get_by_role("button", name="Approve edited plan").click()
    problems = card.locator(".problems")
    expect(problems).to_contain_text("first")
    screenshots.take(page, "edit-1-refused")

    editor.fill(json.dumps([s for s in steps if s["id"] != "second"], indent=2))
    card.get_by_role("button", name="Approve edited plan").click()
    expect(page.locator("#run-status")).to_have_attribute("data-status", "finished")
    expect(node(page, "first")).to_have_attribute("data-status", "succeeded")
    expect(node(page, "third")).to_have_attribute("data-status", "succeeded")
    expect(node(page, "second")).to_have_count(0)
    latest = page.locator("details.plan-version").first
    expect(latest).to_contain_text("by human")
    edit = latest.locator(".edit")
    expect(edit).to_contain_text("Edited before approval")
    expect(edit.locator(".diff .removed")).to_have_text(re.compile(r"second"))
    expect(edit.locator(".diff .added, .diff .changed")).to_have_count(0)
    screenshots.take(page, "edit-2-diff")
    assert run_id in page.url


def test_a_run_is_cancelled_and_forked_from_an_event_through_keyboard_dialogs(
    page: Page, served: Served, screenshots: Screenshots
) -> None:
    open_page(page, served)
    run_id = start_run(page, "waiter", "Wait for a source that never comes")
    expect(node(page, "wait")).to_have_attribute("data-status", "running")

    cancel = page.get_by_role("button", name="Cancel run")
    cancel.focus()
    page.keyboard.press("Enter")
    dialog = page.get_by_role("dialog", name="Cancel this run?")
    expect(dialog).to_be_visible()
    page.keyboard.press("Escape")  # keeps the run
    expect(dialog).to_have_count(0)
    expect(page.locator("#run-status")).to_have_attribute("data-status", "running")
    cancel.focus()
    page.keyboard.press("Enter")
    expect(dialog).to_be_visible()
    page.keyboard.press("Enter")  # the dialog's default button confirms
    expect(page.locator("#run-status")).to_contain_text("cancelled")
    expect(node(page, "wait")).to_have_attribute("data-status", "cancelled")
    screenshots.take(page, "actions-1-cancelled")

    # fork from the plan's event: the new run replays up to it, then runs the step again
    proposed = page.locator('table.log tr[data-kind="plan_proposed"]')
    seq = proposed.get_attribute("data-seq")
    proposed.get_by_role("button", name="Fork here").click()
    fork = page.get_by_role("dialog", name=f"Fork from event {seq}")
    expect(fork.get_by_label("Agent")).to_have_value("waiter")
    fork.get_by_role("button", name="Fork").click()
    page.wait_for_url(re.compile(r"#/runs/(?!" + re.escape(run_id) + r"$)"))
    expect(node(page, "wait")).to_have_attribute("data-status", "running")
    expect(page.locator("table.log tbody tr").first).to_have_attribute("data-kind", "run_started")
    screenshots.take(page, "actions-2-forked")
    page.get_by_role("button", name="Cancel run").click()
    page.get_by_role("dialog").get_by_role("button", name="Cancel run").click()
    expect(page.locator("#run-status")).to_contain_text("cancelled")
