"""Accessibility of every page, checked by axe-core in Chromium (no serious or critical violation):
the runs list, a run page (its graph, its steps, its questions), the inbox with a question of every
kind the served agents ask — plan, step, effect, question, escalation, review, answer, budget — and
the plan editor open. And the keyboard: Tab reaches every control of the inbox in order, the graph is
one Tab stop whose steps the arrow keys reach, and a dialog keeps the focus until Escape closes it.
Screenshots of the inbox at 1366×768 and 420 px wide."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from .browser_support import Screenshots, Served, axe_violations, chromium_required, start_serve, stop_serve
from .web_support import agent_spec, node, open_page, tool_step, write_tools

try:
    from playwright.sync_api import Page, expect
except ImportError:
    if chromium_required():
        raise
    pytest.skip("the playwright package is not installed (pip install -e '.[dev]')", allow_module_level=True)

expect.set_options(timeout=20_000)

COUNT = {
    "reason": "count two words",
    "steps": [tool_step("first", "count", {"word": "alpha"}), tool_step("second", "count", {"word": "beta"}, "first")],
}
KINDS = ("plan", "step", "effect", "question", "escalation", "review", "answer", "budget")
AGENTS: dict[str, tuple[list[Any], dict[str, Any]]] = {
    # each agent's run ends up asking one kind of question
    "plan": ([COUNT, {"answer": "counted"}], {"approve_plan": True}),
    "step": (  # a title that takes a tool's output: where each argument comes from is on the card
        [
            {
                "steps": [
                    tool_step("first", "count", {"word": "alpha"}),
                    tool_step("publish", "publish", {"title": "weekly, ${first} words"}, "first"),
                ]
            },
            {"answer": "published"},
        ],
        {},
    ),
    "effect": ([{"steps": [tool_step("pay", "transfer", {"amount": 7})]}, {"answer": "paid"}], {}),
    "question": ([{"question": "Which words should I count?"}, COUNT, {"answer": "counted"}], {}),
    "escalation": ([{"steps": [tool_step("look", "search_everywhere", {"q": "x"})]}], {}),
    "review": (
        [
            {"steps": [tool_step("size", "count", {"word": "alpha"}, checks=[{"kind": "contains", "text": "9"}])]},
            {"answer": "5"},
        ],
        {"rules": {"on_fail": "review"}},
    ),
    "answer": ([COUNT, {"answer": "counted"}], {"rules": {"review_items": ["The answer says how many letters"]}}),
    "budget": ([COUNT, {"answer": "counted"}], {"budget": {"tool_calls": "1"}, "rules": {"on_budget": "ask"}}),
}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """``planexec serve`` with an agent for each kind of question, and one run of each waiting."""
    workdir = tmp_path_factory.mktemp("serve-a11y")
    write_tools(workdir)
    args = ["--store", f"sqlite:///{workdir / 'runs.db'}"]
    for kind, (replies, fields) in AGENTS.items():
        args += ["--agent", agent_spec(workdir, f"asks-{kind}", replies, **fields)]
    server = start_serve(workdir, args, token=secrets.token_urlsafe(24))
    try:
        with client(server) as api:
            for kind in KINDS:
                api.post("/v1/runs", json={"agent": f"asks-{kind}", "goal": f"a run that asks a {kind} question"})
        yield server
    finally:
        stop_serve(server.process)


def client(served: Served) -> httpx.Client:
    return httpx.Client(base_url=served.url, headers={"Authorization": f"Bearer {served.token}"}, timeout=10)


def asked(served: Served, kinds: tuple[str, ...] = KINDS) -> dict[str, dict[str, Any]]:
    """The open questions by kind, once there is one of each of `kinds`."""
    deadline = time.monotonic() + 30
    with client(served) as api:
        while True:
            by_kind = {q["kind"]: q for q in api.get("/v1/inbox").json()["questions"]}
            if set(kinds) <= set(by_kind):
                return by_kind
            if time.monotonic() > deadline:
                raise AssertionError(f"not every kind of question was asked: {sorted(by_kind)}")
            time.sleep(0.05)


def assert_no_violations(page: Page, modules: Path, where: str) -> None:
    found = axe_violations(page, modules)
    assert found == [], f"{where}:\n" + "\n".join(found)


def test_every_page_has_no_serious_accessibility_violation(
    axe_page: Page, served: Served, web_packages: Path, screenshots: Screenshots
) -> None:
    page = axe_page
    questions = asked(served)
    open_page(page, served)
    expect(page.locator("table.runs tbody tr")).to_have_count(len(KINDS))
    assert_no_violations(page, web_packages, "the runs list")

    page.goto(f"{served.url}#/inbox")
    cards = page.locator("section.question")
    expect(cards).to_have_count(len(KINDS))
    for kind in KINDS:
        expect(page.locator(f"section.question.subject-{kind}")).to_have_count(1)
    assert_no_violations(page, web_packages, "the inbox with every kind of question")
    screenshots.take(page, "inbox-every-kind-1366")

    plan_card = page.locator("section.question.subject-plan")
    plan_card.get_by_text("Edit the plan").click()
    expect(plan_card.get_by_label("The plan's steps, as JSON")).to_be_visible()
    assert_no_violations(page, web_packages, "the inbox with the plan editor open")

    for kind in ("plan", "review"):  # a run page with its graph, its steps and its question
        page.goto(f"{served.url}#/runs/{questions[kind]['run_id']}")
        expect(page.locator("section.run-questions section.question")).to_have_count(1)
        expect(page.locator("svg.dag g.node").first).to_be_visible()  # in the question or the plan
        assert_no_violations(page, web_packages, f"the page of a run asking a {kind} question")
    screenshots.take(page, "run-review-1366")

    page.get_by_role("button", name="Cancel run").click()
    expect(page.get_by_role("dialog")).to_be_visible()
    assert_no_violations(page, web_packages, "a dialog")
    page.keyboard.press("Escape")


def test_the_inbox_at_420_pixels_wide(narrow_page: Page, served: Served, screenshots: Screenshots) -> None:
    asked(served)
    open_page(narrow_page, served, "/inbox")
    expect(narrow_page.locator("section.question")).to_have_count(len(KINDS))
    assert narrow_page.evaluate("() => document.documentElement.scrollWidth") <= 420
    screenshots.take(narrow_page, "inbox-every-kind-420")
    for kind in ("plan", "effect"):
        card = narrow_page.locator(f"section.question.subject-{kind}")
        screenshots.take(narrow_page, f"inbox-{kind}-420", part=card)


DESCRIBE = (
    "(e) => e.tagName + ':' + (e.id || e.getAttribute('aria-label') || e.value || e.textContent.trim().slice(0, 30))"
)
"""A control as a short text: its tag and its id, label, value or text."""


def focusable(page: Page, within: str) -> list[str]:
    """The controls in ``within`` a keyboard can reach, in document order, as short descriptions."""
    found: list[str] = page.evaluate(
        f"""(within) => [...document.querySelector(within).querySelectorAll(
            "a[href], button, input, select, textarea, summary, [tabindex]"
        )].filter((e) => !e.disabled && e.tabIndex >= 0 && e.getClientRects().length)
          .filter((e) => !e.closest("details:not([open]) > :not(summary)"))
          .filter((e) => e.type !== "radio" || e.checked)  // a group of radio buttons is one stop
          .map({DESCRIBE})""",
        within,
    )
    return found


def active(page: Page) -> str:
    described: str = page.evaluate(f"() => ({DESCRIBE})(document.activeElement)")
    return described


def test_tab_reaches_every_control_in_order_and_dialogs_keep_the_focus(page: Page, served: Served) -> None:
    questions = asked(served)
    open_page(page, served, "/inbox")
    expect(page.locator("section.question")).to_have_count(len(KINDS))
    controls = focusable(page, "main")
    assert len(controls) > 3 * len(KINDS)
    page.locator("main").focus()
    reached = []
    for _ in range(len(controls)):
        page.keyboard.press("Tab")
        reached.append(active(page))
    assert reached == controls

    # a run page: the graph is one stop; its steps are reached with the arrow keys
    run_id = questions["answer"]["run_id"]
    page.goto(f"{served.url}#/runs/{run_id}")
    expect(node(page, "second")).to_have_attribute("data-status", "succeeded")
    controls = focusable(page, "main")
    assert sum(1 for c in controls if c.startswith("g:")) == 1  # an SVG element: its tag name as written
    page.locator("main").focus()
    for _ in range(len(controls)):
        page.keyboard.press("Tab")
        if page.evaluate("() => document.activeElement.dataset.step") == "first":
            break
    else:
        pytest.fail("Tab never reached the plan graph")
    page.keyboard.press("ArrowRight")
    assert page.evaluate("() => document.activeElement.dataset.step") == "second"
    page.keyboard.press("Enter")
    expect(page.locator("#step-title")).to_contain_text("second")

    # a dialog: Tab and Shift+Tab stay in it; Escape closes it and gives the focus back
    cancel = page.get_by_role("button", name="Cancel run")
    cancel.focus()
    page.keyboard.press("Enter")
    dialog = page.get_by_role("dialog", name="Cancel this run?")
    expect(dialog).to_be_visible()
    for key in ["Tab"] * 5 + ["Shift+Tab"] * 5:
        page.keyboard.press(key)
        assert page.evaluate("() => !!document.activeElement.closest('dialog')"), f"{key} left the dialog"
    page.keyboard.press("Escape")
    expect(dialog).to_have_count(0)
    assert page.evaluate("() => document.activeElement.textContent") == "Cancel run"
    expect(page.locator("#run-status")).to_have_attribute("data-status", "waiting")


CARD_TEXT = """(card) => ({
    title: card.querySelector('h3').textContent,
    facts: Object.fromEntries([...card.querySelectorAll('dl.facts:not(.answers)')].flatMap((dl) =>
        [...dl.querySelectorAll('dt')].map((dt) => [dt.textContent, dt.nextElementSibling.textContent]))),
    args: [...card.querySelectorAll('table.arguments tbody tr')].map((tr) =>
        [...tr.children].map((c) => c.textContent.replace(' (not run yet)', '').trim())),
    planRows: [...card.querySelectorAll('table.plan-steps tbody tr')].map((tr) => tr.dataset.step),
    changes: [...card.querySelectorAll('table.plan-steps tbody tr')].map((tr) => tr.lastElementChild.textContent),
    answers: [...card.querySelectorAll('dl.answers dt')].map((dt) =>
        [dt.textContent, dt.nextElementSibling.textContent]),
    review: card.querySelector('pre.under-review')?.textContent ?? null,
    caps: [...card.querySelectorAll('fieldset.caps input')].map((i) => i.name),
    violations: [...card.querySelectorAll('ul.violations li')].map((li) => [li.dataset.argument, li.dataset.rule]),
})"""
"""What a person reads on a question card."""


def _trust_cell(label: dict[str, Any] | None) -> str:
    """What the trust cell of an argument says: trusted, untrusted or who confirmed it, then where
    the value came from (the sources in question, or every source of a trusted value)."""
    if label is None:
        return "—"
    vouched = label["confirmed_by"] is not None or not label["trusted"]
    word = (
        f"confirmed by {label['confirmed_by']}"
        if label["confirmed_by"]
        else "trusted"
        if label["trusted"]
        else "untrusted"
    )
    sources = [s["text"] for s in label["sources"] if not (vouched and s["trusted"])]
    return f"{word} {', '.join(sources)}".strip()


@pytest.mark.parametrize("width", [1366, 420])
def test_each_kind_of_question_shows_what_the_decision_needs(browser: Any, served: Served, width: int) -> None:
    """Each card says what the question's view says: the title, the goal, why it is asked, the step
    with its arguments as they will be sent and its effect, a plan's steps and changes, the result
    under review, the caps to raise, and what each answer does — at a desk and on a phone."""
    questions = asked(served)
    context = browser.new_context(viewport={"width": width, "height": 900})
    try:
        page = context.new_page()
        open_page(page, served, "/inbox")
        expect(page.locator("section.question")).to_have_count(len(KINDS))
        for kind, view in questions.items():
            shown = page.locator(f"section.question.subject-{kind}").evaluate(CARD_TEXT)
            assert shown["title"] == view["title"], kind
            assert shown["facts"]["Goal"] == view["goal"], kind
            assert shown["facts"]["Why asked"].startswith(view["why"]), kind
            assert shown["answers"] == [[a["label"], a["does"]] for a in view["answers"]], kind
            step = view["step"]
            if step is not None and kind != "plan":
                assert shown["facts"]["Effect"] == step["effect"]["label"], kind
                assert shown["args"] == [
                    [a["name"], a["text"], a["binding"] or "—", _trust_cell(a["provenance"])] for a in step["arguments"]
                ], kind
            assert shown["violations"] == [[v["argument"], v["rule"]] for v in view["violations"]], kind
            if kind == "step":
                assert shown["violations"] == [["title", "untrusted_effect"]]
                assert shown["args"][0][3].startswith("untrusted ")
            if view["plan"] is not None:
                assert shown["planRows"] == [s["id"] for s in view["plan"]["steps"]]
                assert shown["facts"]["Changes"] == view["plan"]["changes"]["summary"]
                assert shown["facts"]["Forecast"] == view["plan"]["forecast"]["summary"]
            if kind in ("review", "answer"):
                assert shown["review"] == (
                    view["under_review"] if isinstance(view["under_review"], str) else str(view["under_review"])
                )
            if kind == "budget":
                assert view["budget"]["name"] in shown["caps"]
                assert shown["facts"]["Cap reached"].startswith(f"{view['budget']['name']}: ")
        if width == 420:
            assert page.evaluate("() => document.documentElement.scrollWidth") <= 420
    finally:
        context.close()


def test_an_uncertain_effect_is_marked_done_with_its_output_from_the_inbox(page: Page, served: Served) -> None:
    """The effect card takes the step's output (JSON) with "done": a wrong one is refused where it was
    typed, a right one becomes the step's output and the run goes on. (Last: it answers a question.)"""
    questions = asked(served)
    run_id = questions["effect"]["run_id"]
    open_page(page, served, "/inbox")
    card = page.locator("section.question.subject-effect")
    card.get_by_role("radio", name="done").check()
    field = card.get_by_label("The step's output, when marked done (JSON)")
    field.fill("{not json")
    card.get_by_role("button", name="Approve").click()
    expect(card.get_by_role("alert")).to_contain_text("The output is not JSON.")
    field.fill('{"receipt": "r-77"}')
    card.get_by_role("button", name="Approve").click()
    # the answer is confirmed where it survives the card leaving the inbox once the question is answered
    expect(page.locator("#toasts")).to_contain_text(f"Approve: {run_id}")
    deadline = time.monotonic() + 30
    with client(served) as api:
        while True:
            run = api.get(f"/v1/runs/{run_id}").json()
            if run["status"] == "finished":
                break
            assert time.monotonic() < deadline, run["status"]
            time.sleep(0.05)
    step = next(s for s in run["steps"] if s["id"] == questions["effect"]["step"]["id"] and not s["superseded"])
    assert (step["status"], step["output"]) == ("succeeded", {"receipt": "r-77"})


def test_a_cap_is_raised_from_the_inbox_and_a_mistyped_one_is_refused(page: Page, served: Served) -> None:
    """The budget card sends the caps typed in: one that is not a number is refused where it was
    typed (nothing is sent), a right one raises the cap and the run goes on. (Last: it answers.)"""
    view = asked(served, ("budget",))["budget"]
    open_page(page, served, "/inbox")
    card = page.locator("section.question.subject-budget")
    field = card.locator(f"fieldset.caps input[name={view['budget']['name']}]")
    field.fill("")
    field.press_sequentially("1e")
    card.get_by_role("button", name="Raise and go on").click()
    expect(card.get_by_role("alert")).to_contain_text("A cap is not a number.")
    expect(field).to_be_focused()
    with client(served) as api:
        assert api.get(f"/v1/runs/{view['run_id']}").json()["status"] == "waiting"
    field.fill(str(view["budget"]["limit"] + 5))
    card.get_by_role("button", name="Raise and go on").click()
    expect(page.locator("#toasts")).to_contain_text(f"Raise and go on: {view['run_id']}")
    deadline = time.monotonic() + 30
    with client(served) as api:
        while (run := api.get(f"/v1/runs/{view['run_id']}").json())["status"] != "finished":
            assert time.monotonic() < deadline, run["status"]
            time.sleep(0.05)
    assert (run["stop"]["kind"], run["answer"]) == ("goal_met", "counted"), run["stop"]
