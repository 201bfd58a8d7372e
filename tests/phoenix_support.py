"""Trace tests' support: Arize Phoenix as an OpenTelemetry trace backend on 127.0.0.1.

The session-scoped fixture ``phoenix`` gives a :class:`Phoenix`: its ``url``, where OTLP/HTTP
traces go (``traces_endpoint``, ``{url}/v1/traces``), and a way to read the spans of a project back
from Phoenix's REST API, waiting until they have arrived (Phoenix answers the OTLP request before it
has written the spans; they show up a few tens of milliseconds later).

Where it comes from:

* ``PLANEXEC_TEST_PHOENIX`` set (a URL such as ``http://127.0.0.1:6006``): that server is used, and
  neither started nor stopped here.
* Otherwise ``scripts/phoenix start`` starts one the first time a test asks (it installs Phoenix
  into ``.venv-phoenix`` first when needed: about a minute; then 10 to 20 seconds to start, about
  450 MB), and ``scripts/phoenix stop DIR`` stops it when the session ends.
* When it cannot be started, the tests that need it are skipped, saying why, unless ``CI=true`` or
  ``PLANEXEC_REQUIRE_PHOENIX=1`` (``.ci/run`` sets it): then they fail.

Which project a span lands in: the ``x-project-name`` header of the OTLP request if there is one,
else the resource attribute ``openinference.project.name``, else the project ``default``. A
project exists once a span has arrived for it; before that its spans answer 404, which
:meth:`Phoenix.spans` reads as no spans.

What the REST API returns (Phoenix 20.26.1), ``GET /v1/projects/{project name or id}/spans``
with ``limit`` (at most 1000, default 100), ``cursor``, ``sort`` (``id``, the default, or
``start_time``), ``order`` (``desc``, the default, or ``asc``) and filters such as ``trace_id``,
``span_id``, ``parent_id`` (``null`` for roots), ``name`` (the list ones may repeat)::

    {"data": [
        {"id": "U3Bhbjox",                       # Phoenix's own id (a GlobalID), not the OTel one
         "name": "grandchild",
         "context": {"trace_id": "4478ec8c800506ab874cbc74922fba16",   # 32 lowercase hex digits
                     "span_id": "f4d5a5e5c7c89815"},                    # 16 lowercase hex digits
         "parent_id": "48741135d0cd3f81",        # the parent's OTel span id; null for a root
         "span_kind": "UNKNOWN",                 # from the attribute openinference.span.kind
         "start_time": "2026-11-26T18:13:22.384797+00:00",
         "end_time": "2026-11-26T18:13:22.384805+00:00",
         "status_code": "UNSET",                 # UNSET, OK or ERROR
         "status_message": "",
         "attributes": {"planexec.step.id": "s1", "planexec.attempt": 2, "planexec.score": 0.5,
                        "planexec.cached": true, "planexec.tools": ["a", "b"]},
         "events": [{"name": "retry", "timestamp": "2026-11-26T18:13:22.384756+00:00",
                     "attributes": {"planexec.reason": "timeout", "planexec.delay_ms": 250}}]}],
     "next_cursor": "U3Bhbjoy"}                  # null on the last page; pass it as ?cursor=

Attributes come back flat, under the keys they were sent with, with their JSON types (strings,
integers, floats, booleans, lists); a string that holds JSON stays a string. The attribute
``openinference.span.kind`` is not among them: it becomes ``span_kind``. Resource attributes are
not returned. There is no ``links`` field: Phoenix does not keep span links (the OTLP-shaped
variant, ``GET /v1/projects/{project}/spans/otlpv1``, has ``links``, always null).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import pytest

if TYPE_CHECKING:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

__all__ = ["Phoenix", "PhoenixSpan", "SpanEvent", "phoenix", "phoenix_required"]

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "phoenix"
START_TIMEOUT = 600.0
"""Seconds ``scripts/phoenix start`` may take: an install from the package index (about a minute
here), then the start itself (10 to 20 seconds; the script gives up after 120)."""
WAIT_TIMEOUT = 30.0
"""Seconds :meth:`Phoenix.wait_for_spans` waits by default."""
PAGE_SIZE = 1000
"""Spans per request when reading a project (Phoenix's maximum)."""

# No proxy for 127.0.0.1, whatever the environment says.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True)
class SpanEvent:
    """An event of a span, as Phoenix returns it."""

    name: str
    timestamp: str
    attributes: Mapping[str, Any]


@dataclass(frozen=True)
class PhoenixSpan:
    """A span read back from Phoenix's REST API (the fields of one item of its ``data``)."""

    name: str
    trace_id: str
    """32 lowercase hex digits, as ``format_trace_id`` writes an OTel trace id."""
    span_id: str
    """16 lowercase hex digits, as ``format_span_id`` writes an OTel span id."""
    parent_id: str | None
    """The parent's ``span_id``; None for a root span."""
    span_kind: str
    status_code: str
    status_message: str
    start_time: str
    end_time: str
    attributes: Mapping[str, Any]
    events: tuple[SpanEvent, ...]
    raw: Mapping[str, Any]
    """The item as the API returned it."""

    @classmethod
    def from_json(cls, item: Mapping[str, Any]) -> PhoenixSpan:
        return cls(
            name=item["name"],
            trace_id=item["context"]["trace_id"],
            span_id=item["context"]["span_id"],
            parent_id=item.get("parent_id"),
            span_kind=item["span_kind"],
            status_code=item["status_code"],
            status_message=item.get("status_message", ""),
            start_time=item["start_time"],
            end_time=item["end_time"],
            attributes=item.get("attributes") or {},
            events=tuple(
                SpanEvent(name=e["name"], timestamp=e["timestamp"], attributes=e.get("attributes") or {})
                for e in item.get("events") or ()
            ),
            raw=item,
        )


@dataclass(frozen=True)
class Phoenix:
    """A running Phoenix server."""

    url: str
    """The root, e.g. ``http://127.0.0.1:40123`` (the UI, ``/v1`` REST API, ``/graphql``)."""

    @property
    def traces_endpoint(self) -> str:
        """Where OTLP/HTTP (protobuf) spans go."""
        return f"{self.url}/v1/traces"

    def exporter(self) -> OTLPSpanExporter:
        """An OTLP/HTTP span exporter to this server that ignores any proxy of the environment."""
        import requests
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        session = requests.Session()
        session.trust_env = False
        return OTLPSpanExporter(endpoint=self.traces_endpoint, session=session, timeout=10)

    def get(self, path: str, params: Mapping[str, str | Sequence[str]] | None = None) -> Any:
        """``GET path`` (say ``/v1/projects``), its JSON; HTTPError on a status other than 2xx."""
        query = f"?{urllib.parse.urlencode(params, doseq=True)}" if params else ""
        with _OPENER.open(f"{self.url}{path}{query}", timeout=10) as response:  # always http://127.0.0.1
            return json.loads(response.read())

    def spans(self, project: str, *, trace_id: str | None = None, page_size: int = PAGE_SIZE) -> list[PhoenixSpan]:
        """Every span of ``project`` (of one trace, with ``trace_id``) in the order Phoenix stored them,
        reading page after page; none for a project that has no span yet."""
        path = f"/v1/projects/{urllib.parse.quote(project, safe='')}/spans"
        found: list[PhoenixSpan] = []
        cursor: str | None = None
        while True:
            params: dict[str, str] = {"limit": str(page_size), "sort": "id", "order": "asc"}
            if trace_id is not None:
                params["trace_id"] = trace_id
            if cursor is not None:
                params["cursor"] = cursor
            try:
                page = self.get(path, params)
            except urllib.error.HTTPError as e:
                if e.code == 404 and not found:  # "Project with name … not found": nothing arrived yet
                    return []
                raise
            found.extend(PhoenixSpan.from_json(item) for item in page["data"])
            cursor = page.get("next_cursor")
            if not cursor:
                return found

    def wait_for_spans(
        self,
        project: str,
        count: int,
        *,
        trace_id: str | None = None,
        counting: Callable[[PhoenixSpan], bool] | None = None,
        timeout: float = WAIT_TIMEOUT,
        page_size: int = PAGE_SIZE,
    ) -> list[PhoenixSpan]:
        """The spans of ``project`` (of one trace, with ``trace_id``) once there are at least ``count``
        (of those ``counting`` accepts, when given: spans of other instrumentations, such as a web
        framework's, may arrive first); fails the test, listing what did arrive, after ``timeout``
        seconds."""
        deadline = time.monotonic() + timeout
        delay = 0.02
        while True:
            spans = self.spans(project, trace_id=trace_id, page_size=page_size)
            if len([s for s in spans if counting is None or counting(s)]) >= count:
                return spans
            if time.monotonic() > deadline:
                where = f"project {project!r}" + (f", trace {trace_id}" if trace_id else "")
                names = ", ".join(s.name for s in spans) or "none"
                pytest.fail(f"{count} spans expected in {where} within {timeout:g}s; {len(spans)} arrived: {names}")
            time.sleep(delay)
            delay = min(delay * 2, 0.5)

    def wait_for_trace(
        self, project: str, trace_id: str, count: int, *, timeout: float = WAIT_TIMEOUT
    ) -> list[PhoenixSpan]:
        """The spans of one trace (its id as 32 hex digits) once at least ``count`` have arrived."""
        return self.wait_for_spans(project, count, trace_id=trace_id, timeout=timeout)


def phoenix_required() -> bool:
    """Whether a Phoenix that cannot be started fails the trace tests rather than skipping them."""
    return os.environ.get("CI", "").lower() == "true" or os.environ.get("PLANEXEC_REQUIRE_PHOENIX") == "1"


def _missing(reason: str) -> NoReturn:
    if phoenix_required():
        pytest.fail(f"{reason} (required here: CI=true or PLANEXEC_REQUIRE_PHOENIX=1; see scripts/phoenix)")
    pytest.skip(f"{reason}; scripts/phoenix installs and starts it")


def _healthy(url: str) -> bool:
    try:
        with _OPENER.open(f"{url}/healthz", timeout=5) as response:
            return bool(response.status == 200)
    except (OSError, ValueError):
        return False


def _start() -> tuple[Phoenix, str] | str:
    """Start a server with ``scripts/phoenix start``: it and its folder, or why it did not start."""
    try:
        done = subprocess.run(
            ["bash", str(SCRIPT), "start"],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"scripts/phoenix start failed: {e}"
    if done.returncode != 0:
        return f"scripts/phoenix start failed (status {done.returncode}):\n{done.stderr[-3000:].rstrip()}"
    values: dict[str, str] = {}
    for line in done.stdout.splitlines():
        name, _, value = line.partition("=")
        values[name] = next(iter(shlex.split(value)), "")  # printed with printf %q
    url, folder = values.get("PLANEXEC_TEST_PHOENIX"), values.get("PLANEXEC_PHOENIX_DIR")
    if not url or not folder:
        return f"scripts/phoenix start printed no URL and folder:\n{done.stdout}{done.stderr[-3000:].rstrip()}"
    return Phoenix(url=url), folder


def _stop(folder: str) -> None:
    done = subprocess.run(
        ["bash", str(SCRIPT), "stop", folder],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        raise AssertionError(f"scripts/phoenix stop {folder} failed:\n{done.stderr.rstrip()}")


@pytest.fixture(scope="session")
def phoenix() -> Iterator[Phoenix]:
    """Phoenix for the whole session: ``$PLANEXEC_TEST_PHOENIX``'s, or one started here when a test
    first asks and stopped when the session ends."""
    given = os.environ.get("PLANEXEC_TEST_PHOENIX")
    if given:
        url = given.rstrip("/")
        if not _healthy(url):
            pytest.fail(f"PLANEXEC_TEST_PHOENIX={given} does not answer GET /healthz")
        yield Phoenix(url=url)
        return
    started = _start()
    if isinstance(started, str):
        _missing(started)
    server, folder = started
    try:
        yield server
    finally:
        _stop(folder)
