"""Helpers for the ``planexec serve`` tests: the tools the served agents use (their effects kept in
a ledger file the way a deduplicating service keeps them), agent spec files over scripted
planners, and the server as a process of its own, spoken to over a real socket."""

from __future__ import annotations

import asyncio
import fcntl
import functools
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import jsonschema

from planexec import ToolContext, tool

ROOT = Path(__file__).resolve().parent.parent
GATES_ENV = "PLANEXEC_TEST_GATES"
LEDGER_ENV = "PLANEXEC_TEST_LEDGER"
TOKEN = "serve-test-token-0123456789abcdef"


# -- the tools ------------------------------------------------------------------------------------


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tool
async def hold(key: str, ctx: ToolContext) -> str:
    """Wait until the test opens this run's gate (a file named after the run), saying it got here."""
    gates = Path(os.environ[GATES_ENV])
    (gates / f"{ctx.run_id}.reached").write_text(key)
    while not (gates / ctx.run_id).exists():  # noqa: ASYNC110  # the gate is a file another process writes
        await asyncio.sleep(0.02)
    return f"held {key}"


@tool(side_effect=True, idempotent=True)
def charge(account: str, amount: int, ctx: ToolContext) -> str:
    """Charge an account; the service keeps one effect per idempotency key."""
    path = Path(os.environ[LEDGER_ENV])
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        done = {e["key"] for e in read_ledger(path) if e["new"]}
        new = ctx.idempotency_key not in done
        line = {"key": ctx.idempotency_key, "account": account, "amount": amount, "new": new, "run": ctx.run_id}
        os.write(fd, (json.dumps(line) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    return f"receipt {account} {amount}"


TOOLS = [add, hold, charge]


def read_ledger(path: Path) -> list[dict[str, Any]]:
    """Every call the service had, in order (``new``: it made an effect)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# -- plans ----------------------------------------------------------------------------------------


def step(step_id: str, tool_name: str, args: dict[str, Any], *deps: str) -> dict[str, Any]:
    return {"id": step_id, "description": f"{tool_name} {step_id}", "tool": tool_name, "args": args, "depends_on": deps}


ADD_PLAN = {"steps": [step("sum", "add", {"a": 2, "b": 3})]}
ASK = {"question": "Which numbers should I add?"}
HOLD_PLAN = {"steps": [step("first", "add", {"a": 1, "b": 1}), step("wait", "hold", {"key": "got ${first}"}, "first")]}
CHARGE_PLAN = {
    "steps": [
        step("pay", "charge", {"account": "acme", "amount": 7}),
        step("wait", "hold", {"key": "${pay}"}, "pay"),
        step("refund", "charge", {"account": "acme", "amount": -7}, "wait"),
    ]
}


def write_agent(folder: Path, name: str, replies: list[Any], **fields: Any) -> str:
    """An agent spec file over a scripted planner with ``replies``; returns the ``--agent`` value."""
    (folder / f"{name}.planner.json").write_text(json.dumps(replies))
    spec = {"planner": f"scripted:{name}.planner.json", "tools": ["tests.serve_support:TOOLS"], "cwd": str(ROOT)}
    (folder / f"{name}.json").write_text(json.dumps({**spec, **fields}))
    return f"{name}={folder / f'{name}.json'}"


# -- the server -----------------------------------------------------------------------------------


@dataclass
class Server:
    """``planexec serve`` as a process of its own, on a store and token file in ``folder``."""

    folder: Path
    agents: list[str]
    process: subprocess.Popen[str] | None = None
    url: str = ""
    extra: list[str] = field(default_factory=list)

    def start(self) -> Server:
        token_file = self.folder / "token"
        token_file.write_text(TOKEN)
        (self.folder / "gates").mkdir(exist_ok=True)
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
            "PLANEXEC_ALLOW_MODEL_REQUESTS": "0",
            GATES_ENV: str(self.folder / "gates"),
            LEDGER_ENV: str(self.folder / "ledger.jsonl"),
        }
        env.pop("PLANEXEC_STORE", None)
        args = [sys.executable, "-m", "planexec", "serve", "--port", "0", "--store", f"sqlite:///{self.folder}/runs.db"]
        args += ["--token-file", str(token_file)]
        for agent in self.agents:
            args += ["--agent", agent]
        self.process = subprocess.Popen(
            [*args, *self.extra],
            cwd=self.folder,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.process.stderr is not None
        lines = []
        for line in self.process.stderr:
            lines.append(line)
            if line.startswith("planexec serve: http://"):
                self.url = line.split(": ", 1)[1].strip().rstrip("/")
                break
        assert self.url, "".join(lines)
        return self

    def client(self, *, token: str | None = TOKEN, timeout: float = 10.0) -> httpx.Client:
        """A client of the server that checks every answer against the API's OpenAPI document."""
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        hooks = {"response": [check_documented]}
        return httpx.Client(base_url=self.url, headers=headers, timeout=timeout, event_hooks=hooks)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Stop the process by its id and wait for it."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, sig)
            self.process.wait(timeout=30)
        if self.process is not None and self.process.stderr is not None:
            self.process.stderr.close()

    def open_gate(self, run_id: str) -> None:
        (self.folder / "gates" / run_id).write_text("open")

    def reached(self, run_id: str) -> bool:
        return (self.folder / "gates" / f"{run_id}.reached").exists()


# -- the contract ---------------------------------------------------------------------------------


@functools.cache
def api_document() -> dict[str, Any]:
    """The API's OpenAPI document, as ``GET /v1/openapi.json`` serves it."""
    from planexec.server import openapi_document

    return openapi_document()


def operation_of(method: str, path: str) -> dict[str, Any] | None:
    """The operation of the document that serves ``method`` at ``path`` (None: none does)."""
    for template, operations in api_document()["paths"].items():
        pattern = "/".join(
            "[^/]+" if re.fullmatch(r"\{\w+\}", part) else re.escape(part) for part in template.split("/")
        )
        if re.fullmatch(pattern, path) and method.lower() in operations:
            found: dict[str, Any] = operations[method.lower()]
            return found
    return None


def check_documented(response: httpx.Response) -> None:
    """Fail unless the document says the operation answers with this status, content type, headers
    and body (answers to requests no operation serves, a 404 or 405, are not checked)."""
    request = response.request
    operation = operation_of(request.method, request.url.path)
    if operation is None:
        return
    what = f"{request.method} {request.url.path} answered {response.status_code}"
    documented = operation["responses"].get(str(response.status_code))
    assert documented is not None, f"{what}, which its operation does not document: {sorted(operation['responses'])}"
    for name, header in documented.get("headers", {}).items():
        assert not header.get("required") or name in response.headers, f"{what} without the header {name}"
    media_type = response.headers.get("content-type", "").split(";")[0].strip()
    content = documented.get("content", {})
    assert media_type in content, f"{what} with {media_type!r}, not one of {sorted(content)}"
    schema = content[media_type].get("schema")
    if media_type == "application/json" and schema is not None:
        response.read()
        root = {**schema, "components": api_document()["components"]}
        errors = [e.message for e in jsonschema.Draft202012Validator(root).iter_errors(response.json())]
        assert not errors, f"{what} with a body its schema does not describe: {errors[:5]}"


def wait_for(check: Callable[[], Any], *, timeout: float = 20.0, what: str = "a condition") -> Any:
    """Poll ``check`` until it returns something truthy (returned); fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def run_status(client: httpx.Client, run_id: str, status: str) -> Callable[[], dict[str, Any] | None]:
    def check() -> dict[str, Any] | None:
        response = client.get(f"/v1/runs/{run_id}")
        data: dict[str, Any] = response.json()
        return data if response.status_code == 200 and data["status"] == status else None

    return check


def sse_events(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    """The events of a Server-Sent Events stream, as ``{"id", "event", "data"}``, as they arrive."""
    current: dict[str, Any] = {}
    for line in lines:
        if line == "":
            if "event" in current or "data" in current:
                yield current
            current = {}
        elif line.startswith(":"):
            continue
        else:
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "data":
                current["data"] = json.loads(value)
            elif name in ("id", "event"):
                current[name] = value


# -- tools that misbehave ---------------------------------------------------------------------------


@tool
def flood(megabytes: int) -> str:
    """Return an output of ``megabytes`` MiB."""
    return "x" * (megabytes * 1_048_576)


@tool
async def boom(after: float) -> str:
    """Fail part-way through its work."""
    await asyncio.sleep(after)
    raise RuntimeError("the service went away mid-stream")


HOSTILE_TOOLS = [*TOOLS, flood, boom]
