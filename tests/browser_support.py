"""Browser tests' support: Debian's Chromium driven by Playwright, and a `planexec serve` process.

Chromium is launched once per session from ``/usr/bin/chromium`` (Playwright's own browser
downloads are not used), headless, with host resolution limited to 127.0.0.1 so that the page
and the browser reach nothing off this machine. Each test gets a fresh context (1366×768) whose
page fails the test when it logs a console error or throws.

Without Chromium the browser tests are skipped, saying why, unless ``CI=true`` or
``PLANEXEC_REQUIRE_CHROMIUM=1`` (``.ci/run`` sets it after ``scripts/chromium`` installs it):
then they fail.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

try:
    from playwright.sync_api import Browser, ConsoleMessage, Error, Locator, Page, sync_playwright
except ImportError:  # the dev extra brings it; a bare install may not have it
    sync_playwright = None  # type: ignore[assignment]

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
VIEWPORT = {"width": 1366, "height": 768}
NARROW = {"width": 420, "height": 860}
LAUNCH_ARGS = [
    # every host name fails to resolve except the loopback address the tests use: no lookups of
    # Google's hosts, no traffic off this machine
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]


def chromium_required() -> bool:
    """Whether a missing Chromium fails the browser tests rather than skipping them."""
    return os.environ.get("CI", "").lower() == "true" or os.environ.get("PLANEXEC_REQUIRE_CHROMIUM") == "1"


def _missing(reason: str) -> None:
    if chromium_required():
        pytest.fail(f"{reason} (required here: CI=true or PLANEXEC_REQUIRE_CHROMIUM=1; see scripts/chromium)")
    pytest.skip(f"{reason}; install Debian's chromium package to run the browser tests")


@pytest.fixture(scope="module")  # the sync API holds an event loop in this thread while it is open
def browser() -> Iterator[Browser]:
    """Headless Chromium for the tests of one module."""
    if sync_playwright is None:
        _missing("the playwright package is not installed (pip install -e '.[dev]')")
    if not CHROMIUM.exists():
        _missing(f"Chromium is not installed at {CHROMIUM}")
    args = [*LAUNCH_ARGS, *(["--no-sandbox"] if os.geteuid() == 0 else [])]
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=args)
        try:
            yield launched
        finally:
            launched.close()


@dataclass
class PageErrors:
    """Console errors and uncaught exceptions of one test's page; ``allow`` lets expected ones pass."""

    seen: list[str] = field(default_factory=list)
    allowed: list[re.Pattern[str]] = field(default_factory=list)

    def allow(self, pattern: str) -> None:
        """Let console errors matching ``pattern`` pass (say, the 422 of a plan the test makes wrong)."""
        self.allowed.append(re.compile(pattern))

    def unexpected(self) -> list[str]:
        return [text for text in self.seen if not any(p.search(text) for p in self.allowed)]


@pytest.fixture
def page_errors() -> PageErrors:
    return PageErrors()


@contextlib.contextmanager
def watched_page(
    browser: Browser, page_errors: PageErrors, *, viewport: dict[str, int] = VIEWPORT, bypass_csp: bool = False
) -> Iterator[Page]:
    """A fresh page of ``viewport`` size in a context of its own, its console errors and uncaught
    exceptions kept in ``page_errors``. ``bypass_csp``: the page's Content Security Policy is not
    enforced (only to put axe-core into the page)."""
    context = browser.new_context(viewport=viewport, bypass_csp=bypass_csp)  # type: ignore[arg-type]
    opened = context.new_page()
    opened.set_default_timeout(15_000)

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            where = message.location.get("url", "")
            page_errors.seen.append(f"console error: {message.text} ({where})")

    def on_page_error(error: Error) -> None:
        page_errors.seen.append(f"uncaught: {error.message}\n{error.stack or ''}")

    opened.on("console", on_console)
    opened.on("pageerror", on_page_error)
    try:
        yield opened
    finally:
        context.close()


def fail_on_page_errors(page_errors: PageErrors) -> None:
    unexpected = page_errors.unexpected()
    if unexpected:
        pytest.fail("the page logged errors:\n" + "\n".join(unexpected))


@pytest.fixture
def page(browser: Browser, page_errors: PageErrors) -> Iterator[Page]:
    """A fresh page at 1366×768; the test fails if the page logs a console error or throws."""
    with watched_page(browser, page_errors) as opened:
        yield opened
    fail_on_page_errors(page_errors)


@pytest.fixture
def narrow_page(browser: Browser, page_errors: PageErrors) -> Iterator[Page]:
    """A fresh page 420 px wide (a phone held upright), failing the test as ``page`` does."""
    with watched_page(browser, page_errors, viewport=NARROW) as opened:
        yield opened
    fail_on_page_errors(page_errors)


@pytest.fixture
def axe_page(browser: Browser, page_errors: PageErrors) -> Iterator[Page]:
    """A fresh page at 1366×768 whose Content Security Policy lets the tests put axe-core in."""
    with watched_page(browser, page_errors, bypass_csp=True) as opened:
        yield opened
    fail_on_page_errors(page_errors)


# -- packages from npm: axe-core, and the layout library the page vendors -------------------------

WEB_PACKAGES = ROOT / "tests" / "web"
"""package.json and package-lock.json of what the browser tests install with npm; ``npm ci`` puts
the packages in its node_modules (not in git), again whenever the lock file changes."""


@pytest.fixture(scope="session")
def web_packages() -> Path:
    """The node_modules folder of ``tests/web``, installed with ``npm ci`` when missing or stale.
    Without npm the tests that need it are skipped (they fail where Chromium is required)."""
    npm = shutil.which("npm")
    if npm is None:
        _missing("npm is not installed (the tests install axe-core with it)")
    assert npm is not None
    modules = WEB_PACKAGES / "node_modules"
    lock = (WEB_PACKAGES / "package-lock.json").read_bytes()
    stamp = modules / ".planexec-lock"
    if not stamp.exists() or stamp.read_bytes() != lock:
        env = {
            **os.environ,
            "npm_config_audit": "false",
            "npm_config_fund": "false",
            "npm_config_update_notifier": "false",
        }
        installed = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts"],
            cwd=WEB_PACKAGES,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
        stamp.write_bytes(lock)
    return modules


SEVERE = ("serious", "critical")


def axe_violations(page: Page, modules: Path, *, exclude: Sequence[str] = ()) -> list[str]:
    """Run axe-core over the page as it is now; the serious and critical violations, one line each
    (rule, impact, help, and where). The page's context must bypass its CSP (``axe_page``)."""
    if not page.evaluate("() => typeof window.axe === 'object'"):
        page.add_script_tag(path=str(modules / "axe-core" / "axe.min.js"))
    results = page.evaluate(
        """async (exclude) => {
            const context = exclude.length ? { exclude: exclude.map((s) => [s]) } : document;
            const found = await axe.run(context, { resultTypes: ["violations"] });
            return found.violations.map((v) => ({
                id: v.id, impact: v.impact, help: v.help,
                nodes: v.nodes.map((n) => {
                    const why = n.failureSummary ? ": " + n.failureSummary.replace(/\\s+/g, " ") : "";
                    return n.target.join(" ") + why;
                }),
            }));
        }""",
        list(exclude),
    )
    return [
        f"{v['id']} ({v['impact']}): {v['help']} — " + "; ".join(v["nodes"][:4])
        for v in results
        if v["impact"] in SEVERE
    ]


@dataclass
class Screenshots:
    """Screenshots of a test for a human to look at: under its tmp_path, and also under
    ``$PLANEXEC_SCREENSHOTS`` when that names a directory."""

    folder: Path
    extra: Path | None
    taken: list[Path] = field(default_factory=list)

    def take(self, page: Page, name: str, *, part: Locator | None = None) -> Path:
        """Save the whole page (or only ``part`` of it) as ``NAME.png`` (a name unique across the
        tests, for ``$PLANEXEC_SCREENSHOTS``)."""
        path = self.folder / f"{name}.png"
        if part is None:
            page.screenshot(path=str(path), full_page=True)
        else:
            part.screenshot(path=str(path))
        self.taken.append(path)
        if self.extra is not None:
            copy = self.extra / path.name
            shutil.copyfile(path, copy)
            self.taken.append(copy)
        return path


@pytest.fixture
def screenshots(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Screenshots]:
    folder = tmp_path / "screenshots"
    folder.mkdir()
    extra_dir = os.environ.get("PLANEXEC_SCREENSHOTS")
    extra = Path(extra_dir) if extra_dir else None
    if extra is not None:
        extra.mkdir(parents=True, exist_ok=True)
    shots = Screenshots(folder=folder, extra=extra)
    yield shots
    for path in shots.taken:
        request.node.user_properties.append(("screenshot", str(path)))
    if shots.taken:
        # shown with the test's output (pytest -rA, or on a failure), and in a junit report as properties
        print("screenshots:\n" + "\n".join(f"  {p}" for p in shots.taken))


READY = re.compile(r"planexec serve: (http://127\.0\.0\.1:\d+/)")


@dataclass
class Served:
    """A ``planexec serve`` process on 127.0.0.1: its base URL and token."""

    process: subprocess.Popen[bytes]
    url: str
    token: str
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def start_serve(workdir: Path, args: Sequence[str], *, token: str, timeout: float = 30.0) -> Served:
    """Start ``planexec serve --port 0`` with ``args`` in ``workdir``; returns once it says where it
    listens. Its stdout and stderr go to ``workdir/serve.log``."""
    token_file = workdir / "token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    log = workdir / "serve.log"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(workdir), os.environ.get("PYTHONPATH", "")]),
        "PLANEXEC_ALLOW_MODEL_REQUESTS": "0",
        "PYTHONUNBUFFERED": "1",
        "XDG_DATA_HOME": str(workdir / "data"),
    }
    command = [
        sys.executable,
        "-m",
        "planexec",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--token-file",
        str(token_file),
        *args,
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(command, cwd=workdir, env=env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout
    while True:
        found = READY.search(log.read_text(errors="replace"))
        if found:
            return Served(process=process, url=found.group(1), token=token, log=log)
        if process.poll() is not None or time.monotonic() > deadline:
            stop_serve(process)
            raise AssertionError(f"planexec serve did not start:\n{log.read_text(errors='replace')}")
        time.sleep(0.05)


def stop_serve(process: subprocess.Popen[bytes]) -> None:
    """Stop the server this test started, by its pid: SIGTERM, then SIGKILL if it lingers."""
    if process.poll() is None:
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
