"""``planexec serve`` over a real socket: the token on every route, idempotent run creation, the
events as Server-Sent Events (in order, resumed after a dropped connection with nothing lost or
repeated), answering a question from the API, and bad input refused with a clear 4xx that leaves
other runs alone."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.serve_support import (
    ADD_PLAN,
    ASK,
    HOLD_PLAN,
    TOKEN,
    Server,
    run_status,
    sse_events,
    step,
    wait_for,
    write_agent,
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("serve")
    agents = [
        write_agent(folder, "adder", [ADD_PLAN, {"answer": "5"}]),
        write_agent(folder, "asker", [ASK, ADD_PLAN, {"answer": "5"}]),
        write_agent(folder, "holder", [HOLD_PLAN, {"answer": "held"}]),
        write_agent(folder, "planned", [ADD_PLAN, {"answer": "edited"}], approve_plan=True),
        write_agent(folder, "capped", [CHAIN, {"answer": "4"}], budget={"tool_calls": "2"}, rules={"on_budget": "ask"}),
    ]
    served = Server(folder, agents).start()
    yield served
    served.kill()


@pytest.fixture
def api(server: Server) -> Iterator[httpx.Client]:
    with server.client() as client:
        yield client


def start(api: httpx.Client, agent: str, goal: str = "add 2 and 3", **extra: Any) -> dict[str, Any]:
    response = api.post("/v1/runs", json={"agent": agent, "goal": goal, **extra})
    assert response.status_code == 201, response.text
    data: dict[str, Any] = response.json()
    return data


# -- the token ----------------------------------------------------------------------------------------


def _routes(api: httpx.Client) -> list[tuple[str, str]]:
    document = api.get("/v1/openapi.json").json()
    assert document["openapi"].startswith("3.1")
    found = []
    for path, operations in document["paths"].items():
        concrete = path.replace("{run_id}", "r1").replace("{question_id}", "q1")
        found += [(method.upper(), concrete) for method in operations]
    return found


def test_every_route_but_the_health_check_needs_the_token(server: Server, api: httpx.Client) -> None:
    routes = _routes(api)
    assert ("POST", "/v1/runs") in routes
    assert ("GET", "/v1/runs/r1/events/stream") in routes
    assert ("POST", "/v1/runs/r1/questions/q1/answer") in routes
    routes.append(("GET", "/v1/openapi.json"))
    for token in (None, "wrong-token-0123456789", TOKEN + "x"):
        with server.client(token=token) as anonymous:
            for method, path in routes:
                response = anonymous.request(method, path, json={} if method == "POST" else None)
                if path == "/healthz":
                    assert response.status_code == 200, (method, path)
                    assert response.json()["ok"] is True
                    continue
                assert response.status_code == 401, (method, path, response.text)
                assert response.headers["www-authenticate"].startswith("Bearer")
                assert response.json()["error"]["code"] == "unauthorized"
    assert api.get("/v1/runs").status_code == 200


# -- starting runs ------------------------------------------------------------------------------------


def test_a_retried_start_with_the_same_key_gets_the_same_run(api: httpx.Client) -> None:
    body = {"agent": "adder", "goal": "add 2 and 3", "idempotency_key": "order-1"}
    first = api.post("/v1/runs", json=body)
    again = api.post("/v1/runs", json=body)
    assert (first.status_code, again.status_code) == (201, 200)
    run_id = first.json()["run_id"]
    assert again.json()["run_id"] == run_id
    wait_for(run_status(api, run_id, "finished"), what="the run to finish")
    late = api.post("/v1/runs", json=body)
    assert (late.status_code, late.json()["run_id"], late.json()["status"]) == (200, run_id, "finished")

    changed = api.post("/v1/runs", json={**body, "goal": "add 4 and 5"})
    assert changed.status_code == 409
    assert changed.json()["error"]["code"] == "idempotency_conflict"

    header = {"Idempotency-Key": "order-2"}
    by_header = [api.post("/v1/runs", json={"agent": "adder", "goal": "add"}, headers=header) for _ in range(3)]
    assert [r.status_code for r in by_header] == [201, 200, 200]
    assert len({r.json()["run_id"] for r in by_header}) == 1
    listed = api.get("/v1/runs", params={"agent": "adder", "limit": 200}).json()["runs"]
    assert sum(1 for r in listed if r["run_id"] == run_id) == 1
    assert sum(1 for r in listed if r["run_id"] == by_header[0].json()["run_id"]) == 1


def test_a_finished_run_shows_its_plan_steps_usage_and_events(api: httpx.Client) -> None:
    run_id = start(api, "adder")["run_id"]
    done = wait_for(run_status(api, run_id, "finished"), what="the run to finish")
    assert (done["agent"], done["answer"], done["stop"]["kind"]) == ("adder", "5", "goal_met")
    (record,) = done["steps"]
    assert (record["id"], record["status"], record["output"], record["superseded"]) == ("sum", "succeeded", 5, False)
    assert done["plans"][0]["diff"]["added"] == ["sum"]
    assert done["usage"]["tool_calls"] == 1
    page = api.get(f"/v1/runs/{run_id}/events", params={"after": 0, "limit": 3}).json()
    assert [e["seq"] for e in page["events"]] == [1, 2, 3]
    assert page["events"][0]["event"]["kind"] == "run_started"
    rest = api.get(f"/v1/runs/{run_id}/events", params={"after": page["next"]}).json()
    assert len(page["events"]) + len(rest["events"]) == done["events"]
    assert rest["events"][-1]["event"]["kind"] == "run_finished"


def test_a_fork_reads_as_a_stored_run_as_soon_as_it_is_answered(api: httpx.Client) -> None:
    run_id = start(api, "adder")["run_id"]
    wait_for(run_status(api, run_id, "finished"), what="the run to finish")
    for _ in range(3):
        forked = api.post(f"/v1/runs/{run_id}/fork", json={"at": 2})
        assert forked.status_code == 201, forked.text
        new_id = forked.json()["run_id"]
        shown = api.get(f"/v1/runs/{new_id}")  # no window in which the new run is unknown
        assert shown.status_code == 200, shown.text
        assert api.get(f"/v1/runs/{new_id}/events").json()["events"][0]["event"]["kind"] == "run_started"
        wait_for(run_status(api, new_id, "finished"), what="the fork to finish")


def test_listing_filters_by_status_and_agent_and_pages_with_a_cursor(api: httpx.Client) -> None:
    ids = [start(api, "adder", goal=f"add {n}")["run_id"] for n in range(3)]
    for run_id in ids:
        wait_for(run_status(api, run_id, "finished"), what="the run to finish")
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"agent": "adder", "status": "finished", "limit": 2}
        if cursor is not None:
            params["cursor"] = cursor
        page = api.get("/v1/runs", params=params).json()
        assert all(r["agent"] == "adder" and r["status"] == "finished" for r in page["runs"])
        seen += [r["run_id"] for r in page["runs"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert len(seen) == len(set(seen))
    assert set(ids) <= set(seen)
    assert seen.index(ids[2]) < seen.index(ids[0])  # newest first
    assert api.get("/v1/runs", params={"agent": "asker", "status": "finished", "since": 4e9}).json()["runs"] == []


# -- events as Server-Sent Events ---------------------------------------------------------------------


def test_the_stream_resumes_after_a_dropped_connection_with_no_gap_and_no_duplicate(
    server: Server, api: httpx.Client
) -> None:
    run_id = start(api, "holder")["run_id"]
    received: list[dict[str, Any]] = []
    with server.client(timeout=20) as streaming:
        with streaming.stream("GET", f"/v1/runs/{run_id}/events/stream") as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            for event in sse_events(response.iter_lines()):
                received.append(event)
                if event.get("event") == "step_started" and event["data"]["step_id"] == "wait":
                    break  # the connection is dropped here, while the run goes on
        wait_for(lambda: server.reached(run_id), what="the run to reach its gate")
        server.open_gate(run_id)
        wait_for(run_status(api, run_id, "finished"), what="the run to finish")
        last = received[-1]["id"]
        with streaming.stream("GET", f"/v1/runs/{run_id}/events/stream", headers={"Last-Event-ID": last}) as response:
            received += list(sse_events(response.iter_lines()))
    numbered = [e for e in received if "id" in e]
    assert [int(e["id"]) for e in numbered] == list(range(1, len(numbered) + 1))
    assert received[-1] == {"event": "end", "data": {"status": "finished", "stop": "goal_met"}}
    logged = api.get(f"/v1/runs/{run_id}/events").json()["events"]
    assert [(e["seq"], e["event"]["kind"]) for e in logged] == [(int(e["id"]), e["event"]) for e in numbered]
    assert [e["data"] for e in numbered] == [e["event"] for e in logged]

    with api.stream("GET", f"/v1/runs/{run_id}/events/stream", params={"after": len(logged) - 1}) as response:
        tail = list(sse_events(response.iter_lines()))
    assert [e.get("event") for e in tail] == ["run_finished", "end"]


def test_a_client_that_never_reads_its_stream_holds_up_no_other_run(server: Server, api: httpx.Client) -> None:
    busy = start(api, "adder")["run_id"]
    wait_for(run_status(api, busy, "finished"), what="the run to finish")
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    stuck = []
    for _ in range(3):
        sock = socket.create_connection((host, int(port)))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
        request = f"GET /v1/runs/{busy}/events/stream HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
        sock.sendall(request.encode())
        stuck.append(sock)
    try:
        others = [start(api, "adder", goal=f"add {n}")["run_id"] for n in range(3)]
        for run_id in others:
            assert wait_for(run_status(api, run_id, "finished"), what="the run to finish")["answer"] == "5"
        assert api.get("/healthz").status_code == 200
    finally:
        for sock in stuck:
            sock.close()


# -- questions ----------------------------------------------------------------------------------------


CHAIN = {
    "steps": [
        step("s1", "add", {"a": 1, "b": 1}),
        step("s2", "add", {"a": "${s1}", "b": 1}, "s1"),
        step("s3", "add", {"a": "${s2}", "b": 1}, "s2"),
    ]
}


def test_a_run_that_reached_a_cap_is_raised_from_the_api_and_goes_on(api: httpx.Client) -> None:
    run_id = start(api, "capped", "count to four")["run_id"]
    waiting = wait_for(run_status(api, run_id, "waiting"), what="the run to reach its cap")
    (asked,) = waiting["questions"]
    assert (asked["kind"], asked["rule"]) == ("budget", "budget_cap")
    budget = asked["budget"]
    assert (budget["name"], budget["limit"], budget["used"]) == ("tool_calls", 2, 2)
    assert budget["spent"]["by_tool"] == {"add": 2}
    assert budget["rest"]["tool_calls"] == {"low": 1, "high": 1}
    url = f"/v1/runs/{run_id}/questions/{asked['question_id']}/answer"
    for body, expected in (
        ({"decision": "approve"}, "give the caps to raise"),
        ({"decision": "approve", "budget": {"tool_calls": 2}}, "not above what the run has used (2)"),
        ({"decision": "approve", "budget": {"tool_calls": -5, "nope": 1}}, "'nope' is not a budget"),
        ({"decision": "approve", "budget": {"tool_calls": "lots"}}, "budget.tool_calls"),
        ({"decision": "approve", "budget": {"tool_calls": 2.5}}, "must be a whole number"),
        ({"decision": "approve", "budget": {"cost": 1}}, "give a higher one"),
        ({"decision": "reject", "text": "no", "budget": {"tool_calls": 10}}, "only when approving a budget question"),
    ):
        refused = api.post(url, json=body)
        assert refused.status_code == 422, (body, refused.text)
        assert expected in refused.text, (body, refused.text)
    assert api.get(f"/v1/runs/{run_id}").json()["status"] == "waiting"
    answered = api.post(url, json={"decision": "approve", "budget": {"tool_calls": 10}})
    assert answered.status_code == 200, answered.text
    assert answered.json()["resumed"] is True
    done = wait_for(run_status(api, run_id, "finished"), what="the run to finish")
    assert (done["answer"], done["stop"]["kind"], done["usage"]["tool_calls"]) == ("4", "goal_met", 3)


def test_answering_a_question_from_the_api_resumes_the_run(api: httpx.Client) -> None:
    run_id = start(api, "asker")["run_id"]
    waiting = wait_for(run_status(api, run_id, "waiting"), what="the run to ask")
    (asked,) = waiting["questions"]
    assert (asked["kind"], asked["reason"]) == ("question", "Which numbers should I add?")
    inbox = api.get("/v1/inbox").json()["questions"]
    assert any(q["run_id"] == run_id and q["question_id"] == asked["question_id"] for q in inbox)
    url = f"/v1/runs/{run_id}/questions/{asked['question_id']}/answer"

    refused = api.post(url, json={"decision": "approve"})
    assert refused.status_code == 422, refused.text
    assert api.post(url, json={"decision": "answer", "text": "  "}).status_code == 422
    assert api.get(f"/v1/runs/{run_id}").json()["status"] == "waiting"

    answered = api.post(url, json={"decision": "answer", "text": "2 and 3"})
    assert answered.status_code == 200, answered.text
    assert answered.json()["resumed"] is True
    done = wait_for(run_status(api, run_id, "finished"), what="the run to finish")
    assert (done["answer"], done["stop"]["kind"]) == ("5", "goal_met")
    again = api.post(url, json={"decision": "answer", "text": "2 and 3"})
    assert again.status_code == 409
    assert all(q["run_id"] != run_id for q in api.get("/v1/inbox").json()["questions"])


def test_an_edited_plan_is_checked_like_any_plan_before_it_is_approved(api: httpx.Client) -> None:
    run_id = start(api, "planned")["run_id"]
    waiting = wait_for(run_status(api, run_id, "waiting"), what="the plan to wait for approval")
    (asked,) = waiting["questions"]
    assert asked["kind"] == "plan"
    assert [s["id"] for s in asked["plan"]["steps"]] == ["sum"]
    url = f"/v1/runs/{run_id}/questions/{asked['question_id']}/answer"

    unknown = {"steps": [step("s", "search_google", {"q": "x"})]}
    refused = api.post(url, json={"decision": "approve", "plan": unknown})
    assert refused.status_code == 422
    assert "search_google" in json.dumps(refused.json()["error"]["problems"])
    malformed = api.post(url, json={"decision": "approve", "plan": {"steps": "none"}})
    assert malformed.status_code == 422
    assert malformed.json()["error"]["problems"][0]["where"].startswith("plan")

    edited = {"steps": [step("sum", "add", {"a": 20, "b": 30})]}
    approved = api.post(url, json={"decision": "approve", "plan": edited})
    assert approved.status_code == 200, approved.text
    done = wait_for(run_status(api, run_id, "finished"), what="the run to finish")
    assert done["steps"][0]["output"] == 50
    assert [p["author"] for p in done["plans"]][-1] == "human"


def test_a_waiting_run_is_cancelled_and_a_finished_one_cannot_be(api: httpx.Client) -> None:
    run_id = start(api, "asker")["run_id"]
    wait_for(run_status(api, run_id, "waiting"), what="the run to ask")
    assert api.post(f"/v1/runs/{run_id}/resume").json()["error"]["code"] == "waiting"
    cancelled = api.post(f"/v1/runs/{run_id}/cancel")
    assert cancelled.status_code == 202, cancelled.text
    assert (cancelled.json()["status"], cancelled.json()["stop"]["kind"]) == ("finished", "cancelled")
    again = api.post(f"/v1/runs/{run_id}/cancel")
    assert (again.status_code, again.json()["error"]["code"]) == (409, "finished")


def test_a_running_run_is_cancelled(server: Server, api: httpx.Client) -> None:
    run_id = start(api, "holder")["run_id"]
    wait_for(lambda: server.reached(run_id), what="the run to reach its gate")
    cancelled = api.post(f"/v1/runs/{run_id}/cancel")
    assert cancelled.status_code == 202, cancelled.text
    assert cancelled.json()["stop"]["kind"] == "cancelled"
    assert api.get(f"/v1/runs/{run_id}").json()["steps"][-1]["status"] != "succeeded"


def test_a_running_run_is_told_news(server: Server, api: httpx.Client) -> None:
    run_id = start(api, "holder")["run_id"]
    wait_for(lambda: server.reached(run_id), what="the run to reach its gate")
    told = api.post(f"/v1/runs/{run_id}/tell", json={"text": "the numbers changed", "constraint": True})
    assert told.status_code == 202, told.text
    server.open_gate(run_id)
    done = wait_for(run_status(api, run_id, "finished"), what="the run to finish")
    assert done["stop"] is not None
    events = [e["event"] for e in api.get(f"/v1/runs/{run_id}/events").json()["events"]]
    (told_event,) = [e for e in events if e["kind"] == "information_added"]
    assert (told_event["text"], told_event["constraint"], told_event["by"]) == ("the numbers changed", True, "api")
    refused = api.post(f"/v1/runs/{run_id}/tell", json={"text": "too late"})
    assert (refused.status_code, refused.json()["error"]["code"]) == (409, "finished")


# -- bad input ----------------------------------------------------------------------------------------


def test_bad_input_gets_a_clear_4xx_and_leaves_other_runs_alone(server: Server, api: httpx.Client) -> None:
    running = start(api, "holder")["run_id"]
    wait_for(lambda: server.reached(running), what="the run to reach its gate")

    def error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
        assert response.status_code == status, response.text
        body: dict[str, Any] = response.json()["error"]
        assert body["code"] == code
        return body

    headers = {"content-type": "application/json"}
    error(api.post("/v1/runs", content=b'{"agent": "adder", "goal": ', headers=headers), 400, "bad_json")
    error(api.post("/v1/runs", content=b"\xff\xfe", headers=headers), 400, "bad_json")
    big = json.dumps({"agent": "adder", "goal": "x" * 2_000_000})
    error(api.post("/v1/runs", content=big, headers=headers), 413, "too_large")

    def chunks() -> Iterator[bytes]:
        yield b'{"agent": "adder", "goal": "'
        for _ in range(40):
            yield b"y" * 65_536
        yield b'"}'

    error(api.post("/v1/runs", content=chunks(), headers=headers), 413, "too_large")
    unknown = error(api.post("/v1/runs", json={"agent": "nobody", "goal": "add"}), 404, "unknown_agent")
    assert "adder" in unknown["problems"][0]["message"]
    invalid = error(api.post("/v1/runs", json={"agent": "adder", "goal": "", "budget": {"steps": -1}}), 422, "invalid")
    assert {p["where"] for p in invalid["problems"]} >= {"goal"}
    error(api.post("/v1/runs", json={"agent": "adder", "goal": "add", "budget": {"speed": 1}}), 422, "invalid")
    error(api.post("/v1/runs", json={"agent": "adder", "goal": "add", "colour": "red"}), 422, "invalid")
    error(api.post("/v1/runs", json=["agent", "adder"]), 422, "invalid")

    for bad in ("x'%20OR%20'1'='1", "a;DROP%20TABLE%20runs", "..%2F..%2Fetc%2Fpasswd", "a%00b", "%20", "r" * 129):
        response = api.get(f"/v1/runs/{bad}")
        assert response.status_code in (400, 404), (bad, response.text)
        if response.status_code == 400:
            assert response.json()["error"]["code"] == "bad_id"
    error(api.get("/v1/runs/x'y"), 400, "bad_id")
    error(api.get("/v1/runs/x'y/events/stream"), 400, "bad_id")
    error(api.post(f"/v1/runs/{running}/questions/q'1/answer", json={"decision": "approve"}), 400, "bad_id")
    error(api.get("/v1/runs/no-such-run"), 404, "unknown_run")
    error(api.post("/v1/runs/no-such-run/tell", json={"text": "hi"}), 404, "unknown_run")
    error(api.get("/v1/runs/no-such-run/events/stream"), 404, "unknown_run")
    error(api.get(f"/v1/runs/{running}/events/stream", headers={"Last-Event-ID": "3; drop"}), 400, "bad_event_id")
    error(api.get("/v1/runs", params={"status": "lost"}), 422, "invalid")
    error(api.get("/v1/runs", params={"cursor": "%%%"}), 400, "bad_cursor")
    error(api.post(f"/v1/runs/{running}/fork", json={"at": 10_000}), 422, "invalid")

    assert api.get(f"/v1/runs/{running}").json()["status"] == "running"
    server.open_gate(running)
    done = wait_for(run_status(api, running, "finished"), what="the run to finish")
    assert (done["stop"]["kind"], done["answer"]) == ("goal_met", "held")


def test_health_check_openapi_and_agents(server: Server, api: httpx.Client, tmp_path: Path) -> None:
    health = httpx.get(server.url + "/healthz")
    assert health.status_code == 200
    assert health.json()["ok"] is True
    document = api.get("/v1/openapi.json").json()
    assert "/v1/runs/{run_id}/events/stream" in document["paths"]
    agents = {a["name"]: a for a in api.get("/v1/agents").json()["agents"]}
    assert set(agents) == {"adder", "asker", "holder", "planned", "capped"}
    assert agents["planned"]["approve_plan"] is True
    assert set(agents["adder"]["tools"]) == {"add", "hold", "charge"}
