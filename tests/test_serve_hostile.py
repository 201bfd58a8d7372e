"""``planexec serve`` against a hostile client and misbehaving tools: odd numbers and deep JSON,
control characters and lone surrogates, slow bodies, hundreds of streams dropped at once, races on
answers and cancels, path traversal on the page's files. Every refusal is a clear 4xx; the server
neither crashes nor holds other runs up, and logs neither its token nor a traceback."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.serve_support import (
    ADD_PLAN,
    ASK,
    HOLD_PLAN,
    ROOT,
    TOKEN,
    Server,
    run_status,
    sse_events,
    step,
    wait_for,
    write_agent,
)

STATIC = ROOT / "src" / "planexec" / "server" / "static"
HOSTILE = ["tests.serve_support:HOSTILE_TOOLS"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("hostile")
    agents = [
        write_agent(folder, "adder", [ADD_PLAN, {"answer": "5"}]),
        write_agent(folder, "asker", [ASK, ADD_PLAN, {"answer": "5"}]),
        write_agent(folder, "holder", [HOLD_PLAN, {"answer": "held"}]),
        write_agent(
            folder,
            "flooder",
            [{"steps": [step("big", "flood", {"megabytes": 50})]}, {"answer": "flooded"}],
            tools=HOSTILE,
        ),
        write_agent(folder, "boomer", [{"steps": [step("blow", "boom", {"after": 0.05})]}], tools=HOSTILE),
    ]
    served = Server(folder, agents).start()
    logged: list[str] = []
    assert served.process is not None
    assert served.process.stderr is not None
    stderr = served.process.stderr
    drain = threading.Thread(target=lambda: logged.extend(stderr), daemon=True)
    drain.start()
    served.logged = logged  # type: ignore[attr-defined]
    yield served
    served.kill()
    drain.join(timeout=10)


@pytest.fixture
def api(server: Server) -> Iterator[httpx.Client]:
    with server.client(timeout=30.0) as client:
        yield client


def start(api: httpx.Client, agent: str, goal: str = "add 2 and 3", **extra: Any) -> dict[str, Any]:
    response = api.post("/v1/runs", json={"agent": agent, "goal": goal, **extra})
    assert response.status_code == 201, response.text
    data: dict[str, Any] = response.json()
    return data


def refused(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert error["code"] == code, error
    return error


def raw(server: Server, request: bytes, *, timeout: float = 10.0) -> bytes:
    """Send ``request`` as it is (no client normalising it) and read the whole answer."""
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(request)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def server_fds(server: Server) -> int:
    assert server.process is not None
    return len(os.listdir(f"/proc/{server.process.pid}/fd"))


def assert_alive(api: httpx.Client) -> None:
    run_id = start(api, "adder")["run_id"]
    done = wait_for(run_status(api, run_id, "finished"), timeout=20, what="a run to finish")
    assert done["stop"]["kind"] == "goal_met"


# -- numbers, nesting and text ------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "-1", "-0.5", "1e400", "true", '"10"'])
def test_budget_caps_that_are_not_numbers_of_zero_or_more_are_refused(api: httpx.Client, value: str) -> None:
    body = '{"agent": "adder", "goal": "add", "budget": {"steps": ' + value + "}}"
    response = api.post("/v1/runs", content=body, headers={"content-type": "application/json"})
    assert response.status_code in (400, 422), response.text
    assert response.json()["error"]["code"] in ("invalid", "bad_json")


@pytest.mark.parametrize(
    "budget",
    [
        {"steps": 10**18, "cost": 1e300, "wall_time": None},
        {"steps": 10**30},
        {"steps": 1e308},
        {"steps": 2.5},
        {"wall_time": 1e-300, "model_calls": 10**18},
        {"tool_calls": 2**63},
    ],
)
def test_huge_or_odd_budget_caps_start_a_run_that_ends_or_are_refused(api: httpx.Client, budget: Any) -> None:
    response = api.post("/v1/runs", json={"agent": "adder", "goal": "add", "budget": budget})
    if response.status_code != 201:
        refused(response, 422, "invalid")
        return
    done = wait_for(run_status(api, response.json()["run_id"], "finished"), what="the run to finish")
    assert done["stop"]["kind"] in ("goal_met", "budget_exhausted", "budget"), done["stop"]


def test_thousands_of_budget_keys_or_constraints_are_refused(api: httpx.Client) -> None:
    budget = {f"k{i}": 1 for i in range(5_000)}
    error = refused(api.post("/v1/runs", json={"agent": "adder", "goal": "add", "budget": budget}), 422, "invalid")
    assert error["problems"]
    assert all(p["where"].startswith("budget.") for p in error["problems"])
    many = ["be quick"] * 5_000
    refused(api.post("/v1/runs", json={"agent": "adder", "goal": "add", "constraints": many}), 422, "invalid")


@pytest.mark.parametrize("depth", [1_000, 10_000])
def test_deeply_nested_json_is_refused_as_bad_json(api: httpx.Client, depth: int) -> None:
    body = '{"agent": "adder", "goal": "add", "budget": ' + "[" * depth + "]" * depth + "}"
    response = api.post("/v1/runs", content=body, headers={"content-type": "application/json"})
    refused(response, 400, "bad_json")


def test_duplicate_keys_take_the_last_value(api: httpx.Client) -> None:
    body = '{"agent": "nobody", "goal": "add", "agent": "adder"}'
    response = api.post("/v1/runs", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 201, response.text
    assert response.json()["agent"] == "adder"


def test_a_goal_of_control_characters_is_kept_as_text(server: Server, api: httpx.Client) -> None:
    goal = "".join(chr(c) for c in range(32) if c not in (9, 10, 13, 28, 29, 30, 31)) * 800
    goal = ("<script>alert(1)</script>" + goal)[:20_000]
    run_id = start(api, "adder", goal=goal)["run_id"]
    done = wait_for(run_status(api, run_id, "finished"), what="the run to finish")
    assert done["goal"] == goal
    with api.stream("GET", f"/v1/runs/{run_id}/events/stream") as response:
        events = list(sse_events(response.iter_lines()))
    assert events[0]["data"]["goal"] == goal
    assert events[-1]["event"] == "end"
    too_long = "\x01" * 20_001
    refused(api.post("/v1/runs", json={"agent": "adder", "goal": too_long}), 422, "invalid")
    blank = "\x1c\x1d\x1e\x1f \t\n" * 100
    refused(api.post("/v1/runs", json={"agent": "adder", "goal": blank}), 422, "invalid")


@pytest.mark.parametrize("where", ["goal", "constraints", "idempotency_key", "agent"])
def test_lone_surrogates_in_text_are_refused(api: httpx.Client, where: str) -> None:
    body: dict[str, Any] = {"agent": "adder", "goal": "add"}
    body[where] = ["ok \\ud800 then"] if where == "constraints" else "ok \\ud800 then"
    text = json.dumps(body).replace("\\\\ud800", "\\ud800")
    assert "\\ud800" in text
    response = api.post("/v1/runs", content=text, headers={"content-type": "application/json"})
    refused(response, 422, "invalid")


def test_a_lone_surrogate_in_a_tell_or_an_answer_is_refused(api: httpx.Client) -> None:
    run_id = start(api, "asker")["run_id"]
    waiting = wait_for(run_status(api, run_id, "waiting"), what="the question")
    question_id = waiting["questions"][0]["question_id"]
    headers = {"content-type": "application/json"}
    told = api.post(f"/v1/runs/{run_id}/tell", content='{"text": "x \\udfff y"}', headers=headers)
    refused(told, 422, "invalid")
    path = f"/v1/runs/{run_id}/questions/{question_id}/answer"
    answered = api.post(path, content='{"decision": "answer", "text": "\\ud83d"}', headers=headers)
    refused(answered, 422, "invalid")
    fine = api.post(path, json={"decision": "answer", "text": "2 and 3 \U0001f600"})
    assert fine.status_code == 200, fine.text
    assert wait_for(run_status(api, run_id, "finished"))["stop"]["kind"] == "goal_met"


@pytest.mark.parametrize("name", ["ädder", "adder\u202e", "a" * 64, "\u0000", "аддер"])
def test_unicode_agent_names_are_unknown_agents(api: httpx.Client, name: str) -> None:
    refused(api.post("/v1/runs", json={"agent": name, "goal": "add"}), 404, "unknown_agent")
    listed = api.get("/v1/runs", params={"agent": name})
    assert listed.status_code == 200
    assert listed.json()["runs"] == []


@pytest.mark.parametrize(
    "query",
    [
        "after=99999999999999999999999999",
        "after=9223372036854775808",
        "limit=99999999999999999999999999",
        "after=-1",
        "after=1e3",
    ],
)
def test_event_positions_beyond_any_log_are_answered(api: httpx.Client, query: str) -> None:
    run_id = start(api, "adder")["run_id"]
    wait_for(run_status(api, run_id, "finished"))
    response = api.get(f"/v1/runs/{run_id}/events?{query}")
    if response.status_code == 200:
        assert response.json()["events"] == []
    else:
        refused(response, 422, "invalid")


@pytest.mark.parametrize("query", ["since=nan", "since=inf", "until=-inf", "since=1e999", "until=nan"])
def test_odd_time_bounds_on_a_listing_are_answered(api: httpx.Client, query: str) -> None:
    response = api.get(f"/v1/runs?{query}")
    assert response.status_code in (200, 422), response.text


def test_a_last_event_id_far_beyond_the_log_sends_only_the_end(server: Server, api: httpx.Client) -> None:
    run_id = start(api, "adder")["run_id"]
    wait_for(run_status(api, run_id, "finished"))
    for last in ("99999999999999999999", "9223372036854775808"):
        headers = {"Last-Event-ID": last}
        with api.stream("GET", f"/v1/runs/{run_id}/events/stream", headers=headers) as response:
            assert response.status_code == 200
            events = list(sse_events(response.iter_lines()))
        assert [e["event"] for e in events] == ["end"]
    host = server.url.removeprefix("http://")
    for odd in (b"\xb2", b"\xb9\xb3", b"\xd9\xa1", b"1\xb2"):
        request = (
            f"GET /v1/runs/{run_id}/events/stream HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {TOKEN}\r\n"
            "Connection: close\r\nLast-Event-ID: "
        ).encode()
        answer = raw(server, request + odd + b"\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
        assert b'"bad_event_id"' in answer
    huge = api.get(f"/v1/runs/{run_id}/events/stream?after=99999999999999999999999999")
    assert huge.status_code in (200, 422), huge.text


# -- slow and many clients ----------------------------------------------------------------------------


def test_a_body_sent_very_slowly_holds_no_other_client_up(server: Server, api: httpx.Client) -> None:
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    body = json.dumps({"agent": "adder", "goal": "slowly"}).encode()
    head = (
        f"POST /v1/runs HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {TOKEN}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    slow = [socket.create_connection((host, int(port)), timeout=10) for _ in range(20)]
    try:
        for sock in slow:
            sock.sendall(head + body[:1])
        began = time.monotonic()
        assert_alive(api)
        assert time.monotonic() - began < 10
        for sock in slow:
            sock.sendall(body[1:])
        answers = [sock.recv(65536) for sock in slow]
        assert all(a.startswith(b"HTTP/1.1 201") for a in answers), answers[0]
    finally:
        for sock in slow:
            sock.close()


def test_hundreds_of_streams_dropped_at_once_are_let_go(server: Server, api: httpx.Client) -> None:
    run_id = start(api, "holder")["run_id"]
    wait_for(lambda: server.reached(run_id), what="the run to hold")
    before = server_fds(server)
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    request = (
        f"GET /v1/runs/{run_id}/events/stream HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
    ).encode()
    streams = []
    try:
        for _ in range(300):
            sock = socket.create_connection((host, int(port)), timeout=10)
            sock.sendall(request)
            streams.append(sock)
        for sock in streams:
            assert sock.recv(4096).startswith(b"HTTP/1.1 200")
        wait_for(lambda: server_fds(server) >= before + 300, what="the streams to be open")
        assert_alive(api)
    finally:
        for sock in streams:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            sock.close()
    wait_for(lambda: server_fds(server) <= before + 5, timeout=15, what="the dropped streams to be closed")
    server.open_gate(run_id)
    assert wait_for(run_status(api, run_id, "finished"))["stop"]["kind"] == "goal_met"
    assert_alive(api)


# -- races --------------------------------------------------------------------------------------------


def test_a_question_answered_twice_at_once_is_answered_once(server: Server, api: httpx.Client) -> None:
    for _ in range(3):
        run_id = start(api, "asker")["run_id"]
        waiting = wait_for(run_status(api, run_id, "waiting"), what="the question")
        path = f"/v1/runs/{run_id}/questions/{waiting['questions'][0]['question_id']}/answer"
        barrier = threading.Barrier(4)

        def answer(text: str, path: str = path, barrier: threading.Barrier = barrier) -> httpx.Response:
            with server.client() as client:
                barrier.wait()
                return client.post(path, json={"decision": "answer", "text": text})

        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(answer, ["2 and 3", "4 and 5", "6 and 7", "8 and 9"]))
        codes = sorted(r.status_code for r in results)
        assert codes == [200, 409, 409, 409], [r.text for r in results]
        # a loser finds the question decided, the log moved on, or (resumed at once) the run finished
        losers = {r.json()["error"]["code"] for r in results if r.status_code == 409}
        assert losers <= {"decided", "conflict", "finished", "busy"}, [r.text for r in results]
        assert wait_for(run_status(api, run_id, "finished"))["stop"]["kind"] == "goal_met"
        events = api.get(f"/v1/runs/{run_id}/events").json()["events"]
        assert sum(1 for e in events if e["event"]["kind"] == "approval_decided") == 1, events


def test_cancel_and_resume_at_once_end_the_run_cancelled(server: Server, api: httpx.Client) -> None:
    run_id = start(api, "holder")["run_id"]
    wait_for(lambda: server.reached(run_id), what="the run to hold")
    barrier = threading.Barrier(8)

    def act(what: str) -> httpx.Response:
        with server.client() as client:
            barrier.wait()
            return client.post(f"/v1/runs/{run_id}/{what}")

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(act, ["cancel", "resume"] * 4))
    for r in results:
        assert r.status_code in (202, 409), r.text
    assert any(r.status_code == 202 for r in results[::2])
    done = wait_for(run_status(api, run_id, "finished"), what="the run to finish")
    assert done["stop"]["kind"] == "cancelled"
    kinds = [e["event"]["kind"] for e in api.get(f"/v1/runs/{run_id}/events").json()["events"]]
    assert kinds[0] == "run_started"
    assert kinds.count("run_finished") == 1
    assert kinds[-1] == "run_finished"
    refused(api.post(f"/v1/runs/{run_id}/resume"), 409, "finished")
    refused(api.post(f"/v1/runs/{run_id}/cancel"), 409, "finished")


def test_a_tool_that_never_returns_is_stopped_by_the_wall_time_budget(server: Server, api: httpx.Client) -> None:
    run_id = start(api, "holder", budget={"wall_time": 1})["run_id"]
    began = time.monotonic()
    done = wait_for(run_status(api, run_id, "finished"), timeout=20, what="the run to run out of time")
    assert time.monotonic() - began < 15
    assert done["stop"]["kind"] not in (None, "goal_met"), done["stop"]
    kinds = [e["event"]["kind"] for e in api.get(f"/v1/runs/{run_id}/events").json()["events"]]
    assert kinds.count("run_finished") == 1
    assert kinds[-1] == "run_finished"


def test_a_run_waiting_for_a_worker_is_cancelled_at_once(server: Server, api: httpx.Client) -> None:
    held = [start(api, "holder", goal=f"hold {i}")["run_id"] for i in range(4)]
    queued = [start(api, "adder", goal=f"queued {i}")["run_id"] for i in range(2)]
    try:
        wait_for(lambda: all(server.reached(run_id) for run_id in held), what="the runs to hold")
        began = time.monotonic()
        cancelled = api.post(f"/v1/runs/{queued[0]}/cancel")
        assert time.monotonic() - began < 3
        assert cancelled.status_code == 202, cancelled.text
        assert (cancelled.json()["status"], cancelled.json()["stop"]["kind"]) == ("finished", "cancelled")
        assert api.get(f"/v1/runs/{queued[1]}").json()["status"] == "running"
        kinds = [e["event"]["kind"] for e in api.get(f"/v1/runs/{queued[0]}/events").json()["events"]]
        assert kinds[0] == "run_started"
        assert kinds[-1] == "run_finished"
        assert kinds.count("run_finished") == 1
    finally:
        for run_id in held:
            server.open_gate(run_id)
    for run_id in [*held, queued[1]]:
        assert wait_for(run_status(api, run_id, "finished"))["stop"]["kind"] == "goal_met"


def test_an_idempotency_key_reused_with_another_agent_is_a_conflict(api: httpx.Client) -> None:
    first = api.post("/v1/runs", json={"agent": "adder", "goal": "add"}, headers={"Idempotency-Key": "shared-1"})
    assert first.status_code == 201
    other = api.post("/v1/runs", json={"agent": "asker", "goal": "add"}, headers={"Idempotency-Key": "shared-1"})
    refused(other, 409, "idempotency_conflict")
    both = api.post(
        "/v1/runs",
        json={"agent": "adder", "goal": "add", "idempotency_key": "shared-1"},
        headers={"Idempotency-Key": "x"},
    )
    assert both.status_code == 200
    assert both.json()["run_id"] == first.json()["run_id"]


def test_the_same_key_sent_ten_times_at_once_starts_one_run(server: Server) -> None:
    barrier = threading.Barrier(10)

    def post(_: int) -> httpx.Response:
        with server.client() as client:
            barrier.wait()
            return client.post("/v1/runs", json={"agent": "adder", "goal": "add"}, headers={"Idempotency-Key": "burst"})

    with ThreadPoolExecutor(10) as pool:
        results = list(pool.map(post, range(10)))
    assert sorted(r.status_code for r in results) == [200] * 9 + [201]
    assert len({r.json()["run_id"] for r in results}) == 1


def test_acting_on_the_wrong_run_or_a_finished_one_is_refused(api: httpx.Client) -> None:
    asking = start(api, "asker")["run_id"]
    question_id = wait_for(run_status(api, asking, "waiting"))["questions"][0]["question_id"]
    other = start(api, "adder")["run_id"]
    wait_for(run_status(api, other, "finished"))
    wrong = api.post(f"/v1/runs/{other}/questions/{question_id}/answer", json={"decision": "answer", "text": "2"})
    assert wrong.status_code in (404, 409, 422), wrong.text
    refused(api.post(f"/v1/runs/{other}/tell", json={"text": "news", "constraint": True}), 409, "finished")
    refused(api.post(f"/v1/runs/{other}/fork", json={"at": 10**30}), 422, "invalid")
    infinite = api.post(f"/v1/runs/{other}/fork", content='{"at": 1e400}', headers={"content-type": "application/json"})
    refused(infinite, 422, "invalid")
    assert api.post(f"/v1/runs/{asking}/cancel").status_code == 202
    late = api.post(f"/v1/runs/{asking}/questions/{question_id}/answer", json={"decision": "answer", "text": "2"})
    assert late.status_code == 409, late.text


@pytest.mark.parametrize("method", ["PUT", "DELETE", "PATCH", "TRACE"])
def test_other_methods_get_a_json_refusal(api: httpx.Client, method: str) -> None:
    response = api.request(method, "/v1/runs")
    assert response.status_code in (404, 405), response.text
    assert response.json()["error"]["code"] in ("not_found", "method_not_allowed")


def test_a_chunked_body_over_the_limit_is_refused_and_not_kept(api: httpx.Client) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"agent": "adder", "goal": "'
        for _ in range(40):
            yield b"x" * 65_536
        yield b'"}'

    refused(api.post("/v1/runs", content=chunks(), headers={"content-type": "application/json"}), 413, "too_large")
    for body, kind in ((b"", "application/json"), (b"agent=adder&goal=add", "application/x-www-form-urlencoded")):
        response = api.post("/v1/runs", content=body, headers={"content-type": kind})
        assert response.status_code in (400, 422), response.text
    assert_alive(api)


# -- the token, CORS and the page ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "authorization",
    [
        f"Basic {TOKEN}",
        f"Bearer {TOKEN[:-1]}",
        f"Bearer {TOKEN}\x00",
        "Bearer " + "x" * 60_000,
        f"Bearer{TOKEN}",
        "Bearer \xff\xfe",
    ],
)
def test_near_miss_tokens_are_refused(server: Server, authorization: str) -> None:
    host = server.url.removeprefix("http://")
    request = f"GET /v1/runs HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nAuthorization: ".encode()
    answer = raw(server, request + authorization.encode("latin-1") + b"\r\n\r\n")
    assert int(answer.split(b" ", 2)[1]) in (400, 401, 431), answer[:300]
    assert b'"runs"' not in answer


def test_a_token_in_the_query_is_not_a_token(server: Server) -> None:
    with server.client(token=None) as anonymous:
        refused(anonymous.get("/v1/runs", params={"token": TOKEN, "access_token": TOKEN}), 401, "unauthorized")


def test_a_cors_preflight_gets_no_allowance_without_cors_origins(server: Server, api: httpx.Client) -> None:
    headers = {
        "Origin": "https://evil.example",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type",
    }
    with server.client(token=None) as anonymous:
        preflight = anonymous.options("/v1/runs", headers=headers)
    assert preflight.status_code in (401, 405)
    assert not any(name.lower().startswith("access-control-") for name in preflight.headers)
    read = api.get("/v1/runs", headers={"Origin": "https://evil.example"})
    assert read.status_code == 200
    assert "access-control-allow-origin" not in read.headers


TRAVERSALS = [
    "/assets/../../etc/passwd",
    "/assets/../../../../../../etc/passwd",
    "/assets/%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
    "/assets/%2e%2e%2f%2e%2e%2f%2e%2e%2f%2e%2e%2fetc%2fpasswd",
    "/assets/..%2f..%2f..%2f..%2f..%2fetc%2fpasswd",
    "/assets/%252e%252e/%252e%252e/etc/passwd",
    "/assets/....//....//....//etc/passwd",
    "/assets/..\\..\\..\\etc\\passwd",
    "/assets//etc/passwd",
    "/assets/%00",
    "/assets/app.js%00.png",
    "/assets/../_app.py",
    "/assets/%2e%2e/_app.py",
    "/assets/../../server/_app.py",
    "/assets/../v1/runs",
    "/assets/%2e%2e/v1/runs",
    "/assets/..%2fv1%2fruns",
]


@pytest.mark.parametrize("path", TRAVERSALS)
def test_the_page_files_do_not_reach_outside_their_folder(server: Server, path: str) -> None:
    answer = raw(server, f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
    status = int(answer.split(b" ", 2)[1])
    assert status in (400, 404), answer[:300]
    assert b"root:" not in answer
    assert b"def build_app" not in answer
    assert b'"runs"' not in answer


def test_the_page_puts_server_data_in_as_text_only() -> None:
    scripts = sorted((STATIC / "assets").glob("*.js"))
    assert scripts
    markup = re.compile(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|srcdoc")
    for path in scripts:
        found = markup.findall(path.read_text())
        assert not found, (path.name, found)
    page = (STATIC / "index.html").read_text()
    assert "script-src 'self'" in page
    assert "unsafe-inline" not in page


def test_the_page_and_errors_are_not_sniffed_as_markup(server: Server, api: httpx.Client) -> None:
    evil = "<img src=x onerror=alert(1)>"
    response = api.post("/v1/runs", json={"agent": evil, "goal": "add"})
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("application/json")
    assert response.headers.get("x-content-type-options") == "nosniff"
    with server.client(token=None) as anonymous:
        page = anonymous.get("/")
        assert page.status_code == 200
        assert page.headers.get("x-content-type-options") == "nosniff"
        assert page.headers.get("x-frame-options") == "DENY"
        script = anonymous.get("/assets/app.js")
        assert script.headers.get("x-content-type-options") == "nosniff"
        denied = anonymous.get("/v1/runs")
        assert denied.status_code == 401
        assert denied.headers.get("x-content-type-options") == "nosniff"
    stream = api.get("/v1/runs/no-such-run/events/stream")
    assert stream.status_code == 404
    assert stream.headers.get("x-frame-options") == "DENY"


# -- tools that misbehave -----------------------------------------------------------------------------


def test_a_tool_failing_mid_way_ends_the_run_with_a_typed_stop(api: httpx.Client) -> None:
    run_id = start(api, "boomer")["run_id"]
    done = wait_for(run_status(api, run_id, "finished"), what="the run to finish")
    assert done["stop"]["kind"] not in (None, "goal_met")
    run = api.get(f"/v1/runs/{run_id}").json()
    assert run["steps"][0]["status"] == "failed"
    assert "went away" in run["steps"][0]["error"]["message"]
    kinds = [e["event"]["kind"] for e in api.get(f"/v1/runs/{run_id}/events").json()["events"]]
    assert kinds[-1] == "run_finished"


def test_a_tool_returning_fifty_megabytes_ends_its_run_and_holds_no_one_up(api: httpx.Client) -> None:
    run_id = start(api, "flooder")["run_id"]
    assert_alive(api)
    done = wait_for(run_status(api, run_id, "finished"), timeout=60, what="the run to finish")
    assert done["stop"]["kind"] not in (None, "goal_met")
    run = api.get(f"/v1/runs/{run_id}")
    assert len(run.content) < 100_000
    flooded = run.json()["steps"][0]
    assert flooded["status"] == "failed"
    assert flooded["output"] is None
    assert flooded["error"]["kind"] == "invalid_output"
    kinds = [e["event"]["kind"] for e in api.get(f"/v1/runs/{run_id}/events").json()["events"]]
    assert kinds[-1] == "run_finished"
    assert_alive(api)


# -- last: what the server wrote ----------------------------------------------------------------------


def test_the_server_logged_neither_its_token_nor_a_traceback(server: Server, api: httpx.Client) -> None:
    assert api.get("/healthz").status_code == 200
    server.kill(signal.SIGTERM)
    logged = "".join(server.logged)  # type: ignore[attr-defined]
    assert TOKEN not in logged
    assert "Traceback" not in logged, logged[-4000:]
    assert "Exception in ASGI application" not in logged, logged[-4000:]
