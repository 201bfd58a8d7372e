"""The run page says what its own event log says, at every frame, while a run with replans goes on
(the offline demo: a step fails, a patch replaces steps, a review asks for a new answer), and once
it has finished: steps done of the current plan only, the plan version, usage as the API counts it,
no ghost rows of steps that never ran, a graph whose labels fit their nodes — at 1366×768 and at
420 px wide. The page's fold of a run's events agrees with the server's (``RunState``) for those
runs and for the recorded logs of every event schema version."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from planexec.log import load_event
from planexec.store import open_store

from .browser_support import Screenshots, Served, chromium_required, start_serve, stop_serve
from .web_support import assert_readable, dag_geometry, node, open_page, start_run

try:
    from playwright.sync_api import Page, expect
except ImportError:
    if chromium_required():
        raise
    pytest.skip("the playwright package is not installed (pip install -e '.[dev]')", allow_module_level=True)

expect.set_options(timeout=20_000)
FIXTURES = Path(__file__).parent / "fixtures"
DEMO_GOAL = "Audit the failing customer onboarding workflow (run r-4821): find the root cause and draft a fix."

PROBE = """() => {
    // at every frame: does the page say what its own event log lists?
    const probe = (window.planexecProbe = { frames: 0, checked: 0, wrong: [] });
    const text = (sel) => document.querySelector(sel)?.textContent.trim() ?? null;
    const usage = (name) => {
        const dt = [...document.querySelectorAll("#run-usage dt")].find((d) => d.textContent === name);
        return dt ? Number(dt.nextElementSibling.textContent.replace(/[^0-9]/g, "")) : null;
    };
    const look = () => {
        probe.frames += 1;
        const rows = [...document.querySelectorAll("table.log tbody tr")].map((r) => r.dataset.kind);
        if (rows.length) {
            probe.checked += 1;
            const count = (kind) => rows.filter((k) => k === kind).length;
            const plans = count("plan_proposed");
            const said = {
                plan: text("#run-plan"),
                calls: usage("Model calls"),
                finished: document.querySelector("#run-status")?.dataset.status === "finished",
                noPlan: [...document.querySelectorAll("section p.muted")].some((p) => p.textContent === "No plan yet."),
                graph: text("#dag-title"),
            };
            const wrong = [];
            if (plans && said.plan !== `version ${plans}`) wrong.push(`plan ${said.plan} with ${plans} plan_proposed`);
            if (plans && said.noPlan) wrong.push("says No plan yet");
            if (plans && said.graph !== `Plan, version ${plans}`) wrong.push(`graph ${said.graph}`);
            const calls = count("model_called");
            if (said.calls !== calls) wrong.push(`${said.calls} model calls shown, ${calls} logged`);
            if (said.finished !== rows.includes("run_finished")) wrong.push(`finished: ${said.finished}`);
            if (wrong.length && probe.wrong.length < 20) probe.wrong.push(`${rows.length} events: ${wrong.join("; ")}`);
        }
        if (!probe.stop) requestAnimationFrame(look);
    };
    requestAnimationFrame(look);
}"""


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """``planexec serve`` with its default agent, the offline demo, at the demo's own pace."""
    workdir = tmp_path_factory.mktemp("serve-demo")
    server = start_serve(workdir, ["--store", f"sqlite:///{workdir / 'runs.db'}"], token=secrets.token_urlsafe(24))
    try:
        yield server
    finally:
        stop_serve(server.process)


def api(served: Served) -> httpx.Client:
    return httpx.Client(base_url=served.url, headers={"Authorization": f"Bearer {served.token}"}, timeout=10)


FACTS = (
    "dl => Object.fromEntries([...dl.querySelectorAll('dt')]"
    ".map((t) => [t.textContent, t.nextElementSibling.innerText]))"
)
"""A list of facts (dt, dd) as an object: each name and its value as shown."""


def facts(page: Page) -> dict[str, str]:
    """The run's facts under its title, as a person reads them."""
    found: dict[str, str] = page.eval_on_selector(".run-head dl.facts", FACTS)
    return found


def usage(page: Page) -> dict[str, str]:
    """The run's usage, as a person reads it."""
    found: dict[str, str] = page.eval_on_selector("#run-usage", FACTS)
    return found


def assert_shows_the_finished_demo(page: Page, served: Served, run_id: str) -> dict[str, Any]:
    """What the finished demo's page says, checked against the API's detail of the run."""
    with api(served) as client:
        run: dict[str, Any] = client.get(f"/v1/runs/{run_id}").json()
    current = run["plans"][-1]["steps"]
    shown = facts(page)
    assert shown["Status"] == "finished: goal met"
    assert shown["Plan"] == f"version {len(run['plans'])}" == "version 3"
    assert shown["Steps"] == f"{len(current)} of {len(current)} done" == "6 of 6 done"
    used = usage(page)
    assert used["Model calls"] == str(run["usage"]["model_calls"])
    assert used["Tool calls"] == str(run["usage"]["tool_calls"])
    assert used["Input tokens"] == f"{run['usage']['input_tokens']:,}"
    assert used["Cost"] == shown["Cost"] == f"${run['cost']:.2f}"
    # the steps table: the current plan's steps, then the step replaced after it failed; no row
    # for a step a patch replaced before it ever started
    rows = page.locator("table.steps tbody tr")
    texts = rows.evaluate_all(
        "rows => rows.map((r) => [...r.children].slice(0, 2).map((c) => c.textContent).join(' | '))"
    )
    assert texts == [
        *(f"{s['id']} | succeeded" for s in current),
        "From earlier plan versions",
        "collect_logs | failed (plan v1)",
    ]
    assert "pending" not in page.locator("table.steps").inner_text()
    expect(page.locator("details.plan-version[open]")).to_have_count(1)  # the latest, as it came
    expect(page.locator("details.plan-version[open]")).to_have_attribute("data-version", "3")
    # what each version was forecast to cost, as the API's plan versions say it
    forecast = run["plans"][-1]["forecast"]
    said = page.locator("details.plan-version[open] p.forecast").inner_text()
    low, high = int(forecast["tool_calls"]["low"]), int(forecast["tool_calls"]["high"])
    tools = str(low) if low == high else f"{low}–{high}"
    assert said.startswith("Forecast: ")
    assert f"tool calls {tools}" in said
    for step in current:
        expect(node(page, step["id"])).to_have_attribute("data-status", "succeeded")
    assert_readable(dag_geometry(page), current)
    return run


def test_the_run_page_says_what_its_event_log_says_at_every_frame_of_a_run_with_replans(
    page: Page, demo: Served, screenshots: Screenshots
) -> None:
    open_page(page, demo)
    page.evaluate(PROBE)
    expect(page.get_by_label("Agent", exact=True).first).to_have_value("demo")
    run_id = start_run(page, "demo", DEMO_GOAL)
    expect(page.locator("#run-status")).to_have_attribute("data-status", "finished")
    expect(page.locator('table.log tr[data-kind="run_finished"]')).to_have_count(1)
    probe = page.evaluate("() => { window.planexecProbe.stop = true; return window.planexecProbe; }")
    assert probe["checked"] > 5, probe  # it looked at many frames while the run went on
    assert probe["wrong"] == [], "\n".join(probe["wrong"])
    logged = page.locator("table.log tbody tr").evaluate_all("rows => rows.map((r) => r.dataset.kind)")
    assert logged.count("plan_proposed") == 3
    assert "step_failed" in logged

    # the right-most node is whole on the screen, without scrolling
    geometry = dag_geometry(page)
    assert geometry.scroll_width <= geometry.client_width
    rightmost = max(geometry.nodes, key=lambda n: n.box.right)
    assert geometry.scroll.holds(rightmost.box), (rightmost, geometry.scroll)
    expect(page.locator("#dag-section .dag-more")).to_be_hidden()
    assert_shows_the_finished_demo(page, demo, run_id)
    screenshots.take(page, "run-demo-1366")

    # a node chosen with the keyboard, then the arrow keys along the arrows
    node(page, "read_workflow").click()
    expect(page.locator("#step-status")).to_have_text("succeeded")
    page.keyboard.press("ArrowRight")
    focused = page.evaluate("() => document.activeElement.dataset.step")
    assert focused == "find_root_cause"
    page.keyboard.press("Enter")
    expect(page.locator("#step-title")).to_contain_text("find_root_cause")


def test_the_finished_run_reads_the_same_at_420_pixels_wide(
    narrow_page: Page, demo: Served, screenshots: Screenshots
) -> None:
    page = narrow_page
    open_page(page, demo)
    with api(demo) as client:
        started = client.post("/v1/runs", json={"agent": "demo", "goal": DEMO_GOAL})
        run_id = started.json()["run_id"]
    page.goto(f"{demo.url}#/runs/{run_id}")
    expect(page.locator("#run-status")).to_have_attribute("data-status", "finished")
    screenshots.take(page, "run-demo-420")
    assert_shows_the_finished_demo(page, demo, run_id)
    # the page itself does not scroll sideways: the graph and the tables scroll in their boxes
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 420
    expect(page.locator("#dag-section .dag-more")).to_be_visible()
    expect(page.locator("#dag-section .dag-more")).to_contain_text("scroll")
    page.goto(f"{demo.url}#/")
    expect(page.locator("table.runs tbody tr").first).to_contain_text("6/6")
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 420
    screenshots.take(page, "runs-420")


def fold_in_page(page: Page, events: list[dict[str, Any]]) -> dict[str, Any]:
    """The page's own fold of ``events`` (assets/fold.js), as the run page makes it."""
    folded: dict[str, Any] = page.evaluate(
        "async (events) => (await import('./assets/fold.js')).foldRun(events).view()", events
    )
    return folded


def comparable(view: dict[str, Any]) -> dict[str, Any]:
    """A run view without what only the server makes (a plan's cost forecast, a question's
    wording) or only the page keeps (which plan version defined a step record)."""
    steps = [{k: v for k, v in s.items() if k != "plan_version"} for s in view["steps"]]
    plans = [{k: v for k, v in p.items() if k != "forecast"} for p in view["plans"]]
    questions = [
        {
            "question_id": q["question_id"],
            "kind": q.get("kind", q.get("subject")),
            "step": q["step"]["id"] if isinstance(q.get("step"), dict) else q.get("step_id"),
            "asked_at": q["asked_at"],
        }
        for q in view["questions"]
    ]
    return {**view, "steps": steps, "plans": plans, "questions": questions}


async def store_recorded_logs(db: Path) -> list[str]:
    """Store the recorded log of each event schema version (tests/fixtures) as a run of its own."""
    store = open_store(f"sqlite:///{db}")
    stored = []
    try:
        for path in sorted(FIXTURES.glob("events_v*.jsonl")):
            lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
            events = [load_event(json.loads(line)) for line in lines]
            run_id = getattr(events[0], "run_id", "")  # as the run's own first event names it
            await store.append(run_id, events, expected_seq=0)
            stored.append(run_id)
    finally:
        await store.close()
    return stored


def test_the_pages_fold_agrees_with_the_servers_for_every_run_served(page: Page, demo: Served) -> None:
    """The demo's runs, and the recorded logs of every event schema version, folded by the page
    from the events the API sends and by the server (``RunState``) into the run's detail."""
    with ThreadPoolExecutor(1) as thread:  # this thread's event loop is Playwright's
        recorded = thread.submit(asyncio.run, store_recorded_logs(demo.log.parent / "runs.db")).result()
    assert len(recorded) >= 10
    open_page(page, demo)
    with api(demo) as client:
        demo_run = client.post("/v1/runs", json={"agent": "demo", "goal": DEMO_GOAL}).json()["run_id"]
        page.goto(f"{demo.url}#/runs/{demo_run}")
        expect(page.locator("#run-status")).to_have_attribute("data-status", "finished")
        runs = [r["run_id"] for r in client.get("/v1/runs", params={"limit": 200}).json()["runs"]]
        assert set(recorded) <= set(runs)
        assert len(runs) > len(recorded)  # and the demo's
        for run_id in runs:
            expected = client.get(f"/v1/runs/{run_id}").json()
            page_of = client.get(f"/v1/runs/{run_id}/events", params={"limit": 5000}).json()
            events = [item["event"] for item in page_of["events"]]
            assert len(events) == expected["events"]
            assert comparable(fold_in_page(page, events)) == comparable(expected), run_id
