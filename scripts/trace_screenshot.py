"""Regenerate docs/images/phoenix-demo-trace.png: the trace of the offline demo as Arize Phoenix draws it.

    .venv/bin/python scripts/trace_screenshot.py [--output PATH]

It starts a throwaway Phoenix with ``scripts/phoenix start`` (which installs it into .venv-phoenix
first when needed), runs ``planexec demo --store memory:// --no-live --otlp-endpoint URL`` with the
resource attribute ``openinference.project.name=planexec-demo`` (so the spans land in a project of
that name), waits until the whole trace has arrived (REST API), opens the trace's page in headless
Chromium (Debian's /usr/bin/chromium, through Playwright; 1600×1000, device scale factor 1), lays
the page out for a readable picture (side navigation collapsed, the trace drawer widened, one line
per span in the tree), waits until every span is in the tree and the root span's details are shown
(its attributes sorted by key), and saves a PNG. Phoenix is stopped whatever happens.

The browser stays on this machine: every host name but 127.0.0.1 fails to resolve, and any request
to anything but Phoenix's address is aborted and makes the script fail (Phoenix runs with
PHOENIX_ALLOW_EXTERNAL_RESOURCES=false, so none is expected).

The UI URL of a trace is ``/projects/<project id>/traces/<trace id>``: the project's id is the
GlobalID from ``GET /v1/projects`` (e.g. ``UHJvamVjdDoy``), the trace's id its 32 hex digits.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PHOENIX_SCRIPT = ROOT / "scripts" / "phoenix"
OUTPUT = ROOT / "docs" / "images" / "phoenix-demo-trace.png"
PROJECT = "planexec-demo"
ROOT_SPAN = "invoke_agent planexec"
CHROMIUM = Path("/usr/bin/chromium")
VIEWPORT = {"width": 1600, "height": 1000}
LAUNCH_ARGS = [
    # every host name fails to resolve except the loopback address Phoenix listens on
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
SPANS_TIMEOUT = 60.0
"""Seconds to wait for the demo's spans to arrive in Phoenix after the demo has ended."""
SETTLED = 1.0
"""Seconds the span count must stay the same (with the root span there) to count as complete."""
UI_TIMEOUT_MS = 30_000
# A first-run dialog or banner Phoenix may show; closed when present.
DISMISS = re.compile(r"^(dismiss|close|got it|no thanks|skip|maybe later)$", re.IGNORECASE)

# No proxy for 127.0.0.1, whatever the environment says.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def say(message: str) -> None:
    print(f"trace_screenshot: {message}", file=sys.stderr, flush=True)


def start_phoenix() -> tuple[str, str]:
    """Start Phoenix with scripts/phoenix: its URL and folder."""
    done = subprocess.run(
        ["bash", str(PHOENIX_SCRIPT), "start"],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"scripts/phoenix start failed (status {done.returncode}):\n{done.stderr[-3000:]}")
    values: dict[str, str] = {}
    for line in done.stdout.splitlines():
        name, _, value = line.partition("=")
        values[name] = next(iter(shlex.split(value)), "")  # printed with printf %q
    url, folder = values.get("PLANEXEC_TEST_PHOENIX"), values.get("PLANEXEC_PHOENIX_DIR")
    if not url or not folder:
        raise SystemExit(f"scripts/phoenix start printed no URL and folder:\n{done.stdout}{done.stderr[-3000:]}")
    return url, folder


def stop_phoenix(folder: str) -> None:
    done = subprocess.run(
        ["bash", str(PHOENIX_SCRIPT), "stop", folder],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        say(f"scripts/phoenix stop {folder} failed:\n{done.stderr.rstrip()}")


def get(url: str, path: str, params: dict[str, str] | None = None) -> Any:
    query = f"?{urllib.parse.urlencode(params)}" if params else ""
    with _OPENER.open(f"{url}{path}{query}", timeout=10) as response:  # always http://127.0.0.1
        return json.loads(response.read())


def run_demo(url: str) -> None:
    """Run the offline demo, its spans sent to Phoenix at ``url`` into the project PROJECT."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])),
        "OTEL_RESOURCE_ATTRIBUTES": f"openinference.project.name={PROJECT}",
        "PLANEXEC_ALLOW_MODEL_REQUESTS": "0",
        "NO_PROXY": "127.0.0.1",
        "no_proxy": "127.0.0.1",
    }
    with tempfile.TemporaryDirectory(prefix="planexec-demo.") as workdir:
        command = [
            sys.executable,
            "-m",
            "planexec",
            "demo",
            "--store",
            "memory://",
            "--no-live",
            "--otlp-endpoint",
            url,
            "--workdir",
            workdir,
        ]
        done = subprocess.run(
            command, cwd=workdir, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300
        )
    if done.returncode != 0:
        raise SystemExit(f"planexec demo failed (status {done.returncode}):\n{done.stdout}{done.stderr}")


def wait_for_trace(url: str) -> tuple[str, list[dict[str, Any]]]:
    """The demo's trace id and spans, once its root span is there and no more spans arrive."""
    path = f"/v1/projects/{urllib.parse.quote(PROJECT, safe='')}/spans"
    deadline = time.monotonic() + SPANS_TIMEOUT
    seen, since = -1, time.monotonic()
    spans: list[dict[str, Any]] = []
    while True:
        try:
            spans = get(url, path, {"limit": "1000"})["data"]
        except urllib.error.HTTPError as e:
            if e.code != 404:  # 404: the project has no span yet
                raise
            spans = []
        roots = [s for s in spans if s.get("parent_id") is None and s["name"] == ROOT_SPAN]
        if len(spans) != seen:
            seen, since = len(spans), time.monotonic()
        elif len(roots) == 1 and time.monotonic() - since >= SETTLED:
            trace_id = roots[0]["context"]["trace_id"]
            return trace_id, [s for s in spans if s["context"]["trace_id"] == trace_id]
        if time.monotonic() > deadline:
            names = ", ".join(s["name"] for s in spans) or "none"
            raise SystemExit(f"the demo's trace did not arrive in {SPANS_TIMEOUT:g}s; {len(spans)} spans: {names}")
        time.sleep(0.2)


def project_id(url: str) -> str:
    """The GlobalID of the project PROJECT, as the UI's routes want it."""
    for project in get(url, "/v1/projects")["data"]:
        if project["name"] == PROJECT:
            return str(project["id"])
    raise SystemExit(f"Phoenix has no project {PROJECT!r}")


def screenshot(url: str, page_url: str, spans: list[dict[str, Any]], output: Path) -> None:
    """Open ``page_url`` in headless Chromium, lay the trace out, and save the viewport as ``output``."""
    from playwright.sync_api import Route, expect, sync_playwright

    origin = urllib.parse.urlsplit(url).netloc
    blocked: list[str] = []

    def only_phoenix(route: Route) -> None:
        parts = urllib.parse.urlsplit(route.request.url)
        if parts.scheme in ("http", "https", "ws", "wss") and parts.netloc != origin:
            blocked.append(route.request.url)
            route.abort()
        else:
            route.continue_()

    args = [*LAUNCH_ARGS, *(["--no-sandbox"] if os.geteuid() == 0 else [])]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=args)
        try:
            context = browser.new_context(viewport=VIEWPORT, device_scale_factor=1)  # type: ignore[arg-type]
            context.set_default_timeout(UI_TIMEOUT_MS)
            context.route("**/*", only_phoenix)
            page = context.new_page()
            page.on("console", lambda m: say(f"console {m.type}: {m.text}") if m.type == "error" else None)
            page.on("pageerror", lambda e: say(f"page error: {e.message}"))
            page.goto(page_url)

            tree = page.locator("#trace-tree")
            expect(tree.get_by_text(ROOT_SPAN, exact=True)).to_be_visible()
            dismiss = page.get_by_role("button", name=DISMISS)
            for index in range(dismiss.count()):
                button = dismiss.nth(index)  # not the trace drawer's own close button
                if button.is_visible() and button.evaluate("b => !b.closest('[aria-label=\"Detail drawer\"]')"):
                    button.click()

            # More room for the trace: the side navigation collapsed, the drawer as wide as it goes.
            collapse = page.get_by_role("button", name="Collapse side navigation")
            if collapse.count():
                collapse.click()
            handle = page.get_by_label("Resize drawer")
            box = handle.bounding_box()
            if box is not None:
                y = box["y"] + box["height"] / 2
                page.mouse.move(box["x"] + box["width"] / 2, y)
                page.mouse.down()
                page.mouse.move(0, y, steps=10)
                page.mouse.up()
            # One line per span, so that the whole tree fits.
            hide_metrics = page.get_by_role("button", name="Hide metrics in trace tree")
            if hide_metrics.count():
                hide_metrics.click()
                expect(page.get_by_role("button", name="Show metrics in trace tree")).to_be_visible()

            # Every span in the tree (all expanded), and the root span's details on the right.
            for name, count in Counter(s["name"] for s in spans).items():
                expect(tree.get_by_text(name, exact=True)).to_have_count(count)
                expect(tree.get_by_text(name, exact=True).last).to_be_in_viewport()
            details = page.locator("#span-details")
            expect(details.get_by_text(ROOT_SPAN, exact=True).first).to_be_visible()
            expect(details.get_by_text("planexec.run.status", exact=True)).to_be_visible()
            details.get_by_role("columnheader", name="Key", exact=True).click()  # the same order every time
            tree_box = tree.bounding_box()
            if tree_box is not None:  # the pointer somewhere empty, so that nothing shows as hovered
                page.mouse.move(tree_box["x"] + 20, tree_box["y"] + tree_box["height"] - 10)
            page.evaluate("document.fonts.ready")
            page.wait_for_load_state("networkidle")

            output.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(output), animations="disabled", caret="hide")
            context.close()
        finally:
            browser.close()
    if blocked:
        raise SystemExit("the page asked for resources off this machine:\n" + "\n".join(sorted(set(blocked))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=OUTPUT, help=f"where to save the PNG (default: {OUTPUT})")
    options = parser.parse_args()
    if not CHROMIUM.exists():
        raise SystemExit(f"Chromium is not installed at {CHROMIUM}")

    say("starting Phoenix")
    url, folder = start_phoenix()
    try:
        say(f"Phoenix is on {url}; running the demo")
        run_demo(url)
        trace_id, spans = wait_for_trace(url)
        say(f"trace {trace_id}: {len(spans)} spans")
        page_url = f"{url}/projects/{urllib.parse.quote(project_id(url), safe='')}/traces/{trace_id}"
        say(f"opening {page_url}")
        screenshot(url, page_url, spans, options.output)
    finally:
        say("stopping Phoenix")
        stop_phoenix(folder)
    say(f"saved {options.output} ({options.output.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
