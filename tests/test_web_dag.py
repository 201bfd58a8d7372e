"""The plan graph of large plans (50 and 200 steps) stays readable: laid out by the vendored dagre,
no two nodes overlap, no label leaves its node, nothing is scaled down, a wide plan scrolls and
says so, the keyboard moves along it; the drawing is a function a question card can reuse, with
steps marked new or changed. The vendored dagre is the npm package's file, licence beside it."""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .browser_support import ROOT, Screenshots, Served, chromium_required, start_serve, stop_serve
from .web_support import (
    agent_spec,
    assert_readable,
    dag_geometry,
    layered_plan,
    node,
    open_page,
    start_run,
    write_tools,
)

try:
    from playwright.sync_api import Page, expect
except ImportError:
    if chromium_required():
        raise
    pytest.skip("the playwright package is not installed (pip install -e '.[dev]')", allow_module_level=True)

expect.set_options(timeout=30_000)
VENDOR = ROOT / "src" / "planexec" / "server" / "static" / "assets" / "vendor"
PLANS = {50: layered_plan(50, 5), 200: layered_plan(200, 8)}
BIG = {"steps": "500", "tool_calls": "500"}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """``planexec serve`` with agents whose plans have 50 and 200 steps."""
    workdir = tmp_path_factory.mktemp("serve-dag")
    write_tools(workdir)
    args = ["--store", f"sqlite:///{workdir / 'runs.db'}"]
    for size, plan in PLANS.items():
        args += ["--agent", agent_spec(workdir, f"wide{size}", [plan, {"answer": "counted"}], budget=BIG)]
    server = start_serve(workdir, args, token=secrets.token_urlsafe(24))
    try:
        yield server
    finally:
        stop_serve(server.process)


def run_to_the_end(page: Page, served: Served, size: int) -> list[dict[str, Any]]:
    open_page(page, served)
    start_run(page, f"wide{size}", f"count {size} words")
    expect(page.locator("#run-status")).to_have_attribute("data-status", "finished")
    expect(page.locator("#run-steps")).to_have_text(f"{size} of {size} done")
    steps: list[dict[str, Any]] = PLANS[size]["steps"]
    expect(page.locator('#dag-section svg.dag g.node[data-status="succeeded"]')).to_have_count(size)
    return steps


@pytest.mark.parametrize("size", [50, 200])
def test_a_large_plan_is_drawn_readable_and_scrolls_with_a_cue(
    page: Page, served: Served, screenshots: Screenshots, size: int
) -> None:
    steps = run_to_the_end(page, served, size)
    geometry = dag_geometry(page)
    assert_readable(geometry, steps)
    long = [n for n in geometry.nodes if len(n.step) > 40]
    assert long, "some ids are too long for a node"
    for n in long:  # cut in the node (after a word), named as shown, whole in its tooltip (its description)
        shown = n.texts[0][0]
        assert shown.endswith("…")
        assert n.step[len(shown) - 1] == "_"
        assert n.step in n.title
        expect(node(page, n.step)).to_have_attribute("aria-label", f"Step {shown}, count, succeeded")
        expect(node(page, n.step)).to_have_accessible_description(re.compile(re.escape(n.step)))
    assert geometry.scroll_width > geometry.client_width  # wider than the window: it scrolls
    cue = page.locator("#dag-section .dag-more")
    expect(cue).to_be_visible()
    expect(cue).to_contain_text("More of the plan to the right")
    expect(page.locator("#dag-section .dag-frame")).to_contain_class("more-right")
    screenshots.take(page, f"dag-{size}-1366")
    screenshots.take(page, f"dag-{size}-1366-graph", part=page.locator("section:has(#dag-title)"))

    # the keyboard: the last step, scrolled into sight; then back along an arrow
    node(page, steps[0]["id"]).click()
    page.keyboard.press("End")
    last = steps[-1]["id"]
    assert page.evaluate("() => document.activeElement.dataset.step") == last
    box = page.locator("#dag-section .dag-scroll").bounding_box()
    focused = node(page, last).locator("rect").bounding_box()
    assert box is not None
    assert focused is not None
    assert box["x"] <= focused["x"]
    assert focused["x"] + focused["width"] <= box["x"] + box["width"] + 1
    expect(page.locator("#dag-section .dag-frame")).to_contain_class("more-left")
    page.keyboard.press("ArrowLeft")
    assert page.evaluate("() => document.activeElement.dataset.step") in steps[-1]["depends_on"]
    page.keyboard.press(" ")
    expect(page.locator("#step-title")).to_contain_text(page.evaluate("() => document.activeElement.dataset.step"))
    # one keyboard stop for the whole graph
    assert page.locator('#dag-section svg.dag g.node[tabindex="0"]').count() == 1


def test_a_200_step_plan_at_420_pixels_wide(narrow_page: Page, served: Served, screenshots: Screenshots) -> None:
    steps = run_to_the_end(narrow_page, served, 200)
    assert_readable(dag_geometry(narrow_page), steps)
    expect(narrow_page.locator("#dag-section .dag-more")).to_be_visible()
    assert narrow_page.evaluate("() => document.documentElement.scrollWidth") <= 420
    screenshots.take(narrow_page, "dag-200-420")
    screenshots.take(narrow_page, "dag-200-420-graph", part=narrow_page.locator("section:has(#dag-title)"))


def test_the_drawing_marks_new_and_changed_steps_for_a_plan_without_statuses(page: Page, served: Served) -> None:
    """What a question card will draw: a proposed plan, its steps marked against the last approved."""
    open_page(page, served)
    drawn = page.evaluate(
        """async () => {
            const { drawDag } = await import("./assets/dag.js");
            const LONG = "summarise_every_region_of_the_quarterly_report_in_one_page";
            const steps = [
                { id: "fetch", tool: "gather", depends_on: [] },
                { id: LONG, executor: "writer", depends_on: ["fetch"] },
                { id: "publish", tool: "publish", depends_on: [LONG] },
            ];
            const marks = { [LONG]: "added", publish: "changed" };
            const box = document.createElement("section");
            box.id = "proposal";
            document.querySelector("main").append(box);
            const dag = drawDag(steps, { markOf: (id) => marks[id] ?? null, label: "Proposed plan" });
            box.append(dag.element);
            return [...box.querySelectorAll("g.node")].map((g) => ({
                id: g.dataset.step, mark: g.dataset.mark ?? null, cls: g.getAttribute("class"),
                label: g.getAttribute("aria-label"), lines: [...g.querySelectorAll("text")].map((t) => t.textContent),
            }));
        }"""
    )
    long = "summarise_every_region_of_the_quarterly_report_in_one_page"
    assert [d["id"] for d in drawn] == ["fetch", long, "publish"]
    assert [d["mark"] for d in drawn] == [None, "added", "changed"]
    assert drawn[0]["lines"] == ["fetch", "gather", ""]
    assert drawn[1]["lines"][0].endswith("…")
    assert drawn[1]["lines"][1:] == ["model · writer", "new"]
    assert drawn[2]["lines"] == ["publish", "publish", "changed"]
    assert drawn[1]["label"] == f"Step {drawn[1]['lines'][0]}, model · writer, new"
    assert long.startswith(drawn[1]["lines"][0][:-1])
    assert "mark-changed" in drawn[2]["cls"]
    assert page.locator("#proposal svg").get_attribute("aria-label") == "Proposed plan: 3 steps"
    expect(page.locator("#proposal .legend")).to_have_count(0)  # no statuses, no colour legend


def test_the_vendored_layout_library_is_the_npm_packages_file_with_its_licence(web_packages: Path) -> None:
    package = web_packages / "@dagrejs" / "dagre"
    for vendored, original in [
        ("dagre.esm.js", "dist/dagre.esm.js"),
        ("dagre.esm.js.LEGAL.txt", "dist/dagre.esm.js.LEGAL.txt"),
        ("dagre.LICENSE.txt", "LICENSE"),
    ]:
        ours = hashlib.sha256((VENDOR / vendored).read_bytes()).hexdigest()
        assert ours == hashlib.sha256((package / original).read_bytes()).hexdigest(), vendored
    assert "MIT" in (package / "package.json").read_text()
    assert "Permission is hereby granted, free of charge" in (VENDOR / "dagre.LICENSE.txt").read_text()


def test_hostile_names_are_drawn_as_text_and_fit_their_nodes(page: Page, served: Served) -> None:
    """Ids, tools and descriptions as a planner might send them: markup, right-to-left text, very
    long words, an arrow to a missing step and a step listed twice."""
    open_page(page, served)
    drawn = page.evaluate(
        """async () => {
            const { drawDag } = await import("./assets/dag.js");
            const steps = [
                { id: "a", tool: "<img src=x onerror=window.pwned=1>", description: "<script>window.pwned=2</script>" },
                { id: "b".repeat(64), tool: "x".repeat(300), depends_on: ["a", "nowhere", "b".repeat(64)] },
                { id: "c", tool: "\u202egnirts\u202c مرحبا 🧪", depends_on: ["a"] },
                { id: "a", tool: "twice" },
            ];
            const box = document.createElement("section");
            box.id = "hostile";
            document.querySelector("main").append(box);
            box.append(drawDag(steps, { statusOf: () => "pending" }).element);
            const inside = (outer, inner) => inner.left >= outer.left - 0.5 && inner.right <= outer.right + 0.5
                && inner.top >= outer.top - 0.5 && inner.bottom <= outer.bottom + 0.5;
            return {
                pwned: window.pwned ?? null,
                images: box.querySelectorAll("img, script").length,
                nodes: [...box.querySelectorAll("g.node")].map((g) => {
                    const rect = g.querySelector("rect").getBoundingClientRect();
                    const texts = [...g.querySelectorAll("text")].map((t) => t.getBoundingClientRect());
                    return { id: g.dataset.step, fits: texts.every((t) => inside(rect, t)), width: rect.width };
                }),
                edges: box.querySelectorAll(".edges path").length,
            };
        }"""
    )
    assert drawn["pwned"] is None
    assert drawn["images"] == 0
    assert [n["id"] for n in drawn["nodes"]] == ["a", "b" * 64, "c"]  # the second "a" is not drawn again
    assert all(n["fits"] for n in drawn["nodes"]), drawn["nodes"]
    assert max(n["width"] for n in drawn["nodes"]) <= 240
    assert drawn["edges"] == 2  # a → b and a → c; none to a missing step, none from a step to itself
