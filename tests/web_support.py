"""What the web page's browser tests share: the tools their served agents use, agent specs over
scripted planners, opening the page with its token, starting a run from it, and reading the plan
graph's geometry from the DOM (every node's box and every text's box, in page pixels)."""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .browser_support import Served

with contextlib.suppress(ImportError):  # without it the browser tests skip (or fail), saying so
    from playwright.sync_api import Locator, Page, expect

TOOLS_MODULE = "webpage_tools"
TOOLS = '''
import asyncio
from pathlib import Path

from planexec import tool
from planexec.errors import EffectUncertain

GATES = Path({gates!r})


@tool
async def gather(source: str) -> str:
    """Gather notes from a source; returns once the test opens that source's gate."""
    while not (GATES / source).exists():
        await asyncio.sleep(0.02)
    return f"notes from {{source}}"


@tool(side_effect=True, sensitive=True)
async def publish(title: str) -> str:
    """Publish a report."""
    return f"published {{title}}"


@tool
def count(word: str) -> int:
    """Count the letters of a word."""
    return len(word)


@tool
def fail(why: str) -> str:
    """Fail, saying why."""
    raise RuntimeError(why)


@tool(side_effect=True)
def transfer(amount: int) -> str:
    """Send money; the machine doing it is lost mid-call, so whether it was sent is unknown."""
    raise EffectUncertain("transfer", "the worker running it stopped answering")
'''
TOOL_NAMES = ("gather", "publish", "count", "fail", "transfer")


def write_tools(workdir: Path) -> str:
    """Write the tools module into ``workdir`` (gates under ``workdir/gates``); returns its name."""
    gates = workdir / "gates"
    gates.mkdir(exist_ok=True)
    (workdir / f"{TOOLS_MODULE}.py").write_text(TOOLS.format(gates=str(gates)))
    return TOOLS_MODULE


def tool_step(step_id: str, tool_name: str, args: dict[str, Any], *deps: str, **extra: Any) -> dict[str, Any]:
    """A planner's JSON for one tool step that depends on ``deps``."""
    return {
        "id": step_id,
        "description": f"{tool_name} {step_id}",
        "tool": tool_name,
        "args": args,
        "depends_on": deps,
        **extra,
    }


def agent_spec(workdir: Path, name: str, replies: list[Any], **fields: Any) -> str:
    """Write a scripted planner and an agent spec using the test tools; returns ``NAME=spec.json``."""
    script = workdir / f"{name}-planner.json"
    script.write_text(json.dumps(replies))
    spec = {
        "version": 4,
        "planner": f"scripted:{script}",
        "tools": [f"{TOOLS_MODULE}:{t}" for t in TOOL_NAMES],
        "cwd": str(workdir),
        **fields,
    }
    path = workdir / f"{name}.json"
    path.write_text(json.dumps(spec))
    return f"{name}={path}"


def layered_plan(size: int, width: int) -> dict[str, Any]:
    """A plan of ``size`` count steps in layers of ``width``, each step after one or two of the
    layer before; ids and tools of different lengths, some too long for a node."""
    steps: list[dict[str, Any]] = []
    for i in range(size):
        layer, place = divmod(i, width)
        deps = sorted({(layer - 1) * width + (place * 7 + 1) % width, (layer - 1) * width + (place * 3) % width})
        step_id = f"s{i:03d}_" + (
            "summarise_the_quarterly_figures_of_every_region_and_product_line" if i % 9 == 4 else "part"
        )
        steps.append(
            tool_step(step_id[:64], "count", {"word": f"w{i}"}, *([] if layer == 0 else [steps[d]["id"] for d in deps]))
        )
    return {"reason": f"{size} steps in layers of {width}", "steps": steps}


def open_page(page: Page, served: Served, route: str = "/") -> None:
    """Open the page with the token in the fragment, as ``planexec serve`` prints it."""
    page.goto(f"{served.url}#token={served.token}")
    expect(page.get_by_role("heading", name="Runs", exact=True)).to_be_visible()
    assert "token" not in page.url  # taken out of the address bar
    if route != "/":
        page.goto(f"{served.url}#{route}")


def node(page: Page, step_id: str) -> Locator:
    return page.locator(f'#dag-section svg.dag g.node[data-step="{step_id}"]')


def start_run(page: Page, agent: str, goal: str) -> str:
    page.get_by_label("Agent", exact=True).first.select_option(agent)
    page.get_by_label("Goal").fill(goal)
    page.get_by_role("button", name="Start run").click()
    page.wait_for_url(re.compile(r"#/runs/"))
    return page.url.rsplit("#/runs/", 1)[1]


@dataclass(frozen=True)
class Box:
    left: float
    top: float
    right: float
    bottom: float

    def overlaps(self, other: Box) -> bool:
        return (
            self.left < other.right and other.left < self.right and self.top < other.bottom and other.top < self.bottom
        )

    def holds(self, other: Box, slack: float = 0.5) -> bool:
        return (
            other.left >= self.left - slack
            and other.right <= self.right + slack
            and other.top >= self.top - slack
            and other.bottom <= self.bottom + slack
        )


@dataclass(frozen=True)
class NodeBox:
    step: str
    box: Box
    texts: list[tuple[str, Box]]
    font_px: float
    title: str


@dataclass(frozen=True)
class DagGeometry:
    nodes: list[NodeBox]
    svg: Box
    scroll: Box
    scroll_width: float
    client_width: float
    scale: float
    """How much the drawing is scaled on screen (1: not at all)."""


def dag_geometry(page: Page) -> DagGeometry:
    """The plan graph as laid out on the page: every node's box, its texts' boxes (as drawn), the
    smallest font size, the drawing's box and its scroll box."""
    data = page.evaluate(
        """() => {
            const box = (r) => ({
                left: r.left + scrollX, top: r.top + scrollY, right: r.right + scrollX, bottom: r.bottom + scrollY,
            });
            const svg = document.querySelector("#dag-section svg.dag");
            const scroller = svg.closest(".dag-scroll");
            const nodes = [...svg.querySelectorAll("g.node")].map((g) => ({
                step: g.dataset.step,
                box: box(g.querySelector("rect").getBoundingClientRect()),
                texts: [...g.querySelectorAll("text")].map((t) => [t.textContent, box(t.getBoundingClientRect())]),
                font: Math.min(...[...g.querySelectorAll("text")].map((t) => parseFloat(getComputedStyle(t).fontSize))),
                title: g.querySelector("title")?.textContent ?? "",
            }));
            return {
                nodes, svg: box(svg.getBoundingClientRect()), scroll: box(scroller.getBoundingClientRect()),
                scrollWidth: scroller.scrollWidth, clientWidth: scroller.clientWidth,
                scale: svg.getBoundingClientRect().width / svg.width.baseVal.value,
            };
        }"""
    )
    return DagGeometry(
        nodes=[
            NodeBox(
                step=n["step"],
                box=Box(**n["box"]),
                texts=[(text, Box(**b)) for text, b in n["texts"]],
                font_px=n["font"],
                title=n["title"],
            )
            for n in data["nodes"]
        ],
        svg=Box(**data["svg"]),
        scroll=Box(**data["scroll"]),
        scroll_width=data["scrollWidth"],
        client_width=data["clientWidth"],
        scale=data["scale"],
    )


def assert_readable(geometry: DagGeometry, steps: list[dict[str, Any]]) -> None:
    """No two nodes overlap, every text sits inside its node and apart from the node's other texts,
    nothing is scaled down or drawn outside the drawing, and a cut label is whole in its tooltip."""
    assert geometry.scale == 1, f"the graph is scaled by {geometry.scale}"
    nodes = geometry.nodes
    assert sorted(n.step for n in nodes) == sorted(s["id"] for s in steps)
    by_left = sorted(nodes, key=lambda n: n.box.left)
    for i, a in enumerate(by_left):  # sweep: only nodes that start before `a` ends can overlap it
        for b in by_left[i + 1 :]:
            if b.box.left >= a.box.right:
                break
            assert not a.box.overlaps(b.box), f"nodes {a.step} and {b.step} overlap: {a.box} {b.box}"
    for n in nodes:
        assert geometry.svg.holds(n.box), f"node {n.step} is outside the drawing: {n.box} {geometry.svg}"
        assert n.font_px >= 12, f"node {n.step} has {n.font_px}px text"
        for text, box in n.texts:
            assert n.box.holds(box, slack=0), f"{text!r} overflows node {n.step}: {box} {n.box}"
        for (upper, upper_box), (lower, lower_box) in zip(n.texts, n.texts[1:], strict=False):
            assert not upper_box.overlaps(lower_box), f"{upper!r} and {lower!r} overlap in node {n.step}"
        first = n.texts[0][0]
        assert first == n.step or (first.endswith("…") and n.step.startswith(first[:-1])), (first, n.step)
        assert n.step in n.title
