"""A run is addressable by every endpoint from the moment ``POST /v1/runs`` answers 201, even while it
waits for a worker and nothing of it is stored yet: a ``tell`` is heard when it begins (before it
plans), an answer or a resume is refused as premature (409, not 404), a fork waits a moment for its
first events, and reading, following and cancelling it work as they did."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from .serve_support import ADD_PLAN, HOLD_PLAN, Server, run_status, wait_for, write_agent


@pytest.fixture(scope="module")
def busy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """``planexec serve`` with one worker, so that a second run waits while a first one holds it."""
    folder = tmp_path_factory.mktemp("serve-pending")
    agents = [
        write_agent(folder, "holder", [HOLD_PLAN, {"answer": "held"}]),
        write_agent(folder, "adder", [ADD_PLAN, {"answer": "5"}]),
    ]
    served = Server(folder, agents, extra=["--workers", "1"]).start()
    yield served
    served.kill()


def _start(api: httpx.Client, agent: str, goal: str) -> str:
    response = api.post("/v1/runs", json={"agent": agent, "goal": goal})
    assert response.status_code == 201, response.text
    run_id: str = response.json()["run_id"]
    return run_id


def _events(api: httpx.Client, run_id: str) -> list[dict[str, Any]]:
    page: list[dict[str, Any]] = api.get(f"/v1/runs/{run_id}/events").json()["events"]
    return [item["event"] for item in page]


def test_a_run_waiting_for_a_worker_answers_every_endpoint_and_hears_what_it_was_told(busy: Server) -> None:
    with busy.client() as api:
        holding = _start(api, "holder", "hold the only worker")
        wait_for(lambda: busy.reached(holding), what="the first run to hold the worker")
        waiting = _start(api, "adder", "add 2 and 3")

        assert api.get(f"/v1/runs/{waiting}").json()["status"] == "running"
        told = api.post(f"/v1/runs/{waiting}/tell", json={"text": "use 2 and 3 only"})
        assert told.status_code == 202, told.text
        constraint = api.post(f"/v1/runs/{waiting}/tell", json={"text": "no rounding", "constraint": True})
        assert constraint.status_code == 202, constraint.text

        answered = api.post(f"/v1/runs/{waiting}/questions/q1/answer", json={"decision": "approve"})
        assert (answered.status_code, answered.json()["error"]["code"]) == (409, "no_question")
        resumed = api.post(f"/v1/runs/{waiting}/resume")
        assert (resumed.status_code, resumed.json()["error"]["code"]) == (409, "running")
        forked = api.post(f"/v1/runs/{waiting}/fork", json={"at": 1})
        assert (forked.status_code, forked.json()["error"]["code"]) == (409, "not_started")
        assert api.get(f"/v1/runs/{waiting}/events").status_code == 200

        busy.open_gate(holding)
        done = wait_for(run_status(api, waiting, "finished"), what="the waiting run to finish")
        assert done["stop"]["kind"] == "goal_met"
        kinds = [(e["kind"], e.get("text")) for e in _events(api, waiting)]
        # told before it began: logged right after its first event, so its first plan knew it
        assert kinds[:4] == [
            ("run_started", None),
            ("information_added", "use 2 and 3 only"),
            ("information_added", "no rounding"),
            ("planning_started", None),
        ]
        wait_for(run_status(api, holding, "finished"), what="the first run to finish")


def test_a_tell_sent_the_moment_the_run_is_accepted_is_never_lost(busy: Server) -> None:
    # each run may still wait for the worker, be running, or (on a slow client) have finished
    # already: a tell is heard (202, and in its log), or refused as finished — never dropped
    with busy.client() as api:
        runs = []
        for n in range(8):
            run_id = _start(api, "adder", f"add, number {n}")
            told = api.post(f"/v1/runs/{run_id}/tell", json={"text": f"note {n}"})
            if told.status_code == 409:
                assert told.json()["error"]["code"] == "finished", told.text
                assert api.get(f"/v1/runs/{run_id}").json()["status"] == "finished"
                continue
            assert told.status_code == 202, told.text
            runs.append((run_id, f"note {n}"))
        assert runs, "every run finished before its tell: the test no longer tells a run that waits"
        for run_id, note in runs:
            wait_for(run_status(api, run_id, "finished"), what=f"run {run_id} to finish")
            texts = [e.get("text") for e in _events(api, run_id) if e["kind"] == "information_added"]
            assert texts == [note], run_id


def test_a_run_that_could_not_begin_is_refused_as_finished_not_unknown(tmp_path: Path) -> None:
    agents = [write_agent(tmp_path, "broken", [ADD_PLAN], mcp=["/nonexistent/mcp-server --stdio"])]
    served = Server(tmp_path, agents).start()
    try:
        with served.client() as api:
            response = api.post("/v1/runs", json={"agent": "broken", "goal": "x"})
            if response.status_code != 201:
                pytest.skip(f"the agent is refused before it is accepted here: {response.text}")
            run_id = response.json()["run_id"]
            wait_for(run_status(api, run_id, "finished"), what="the run to fail to begin")
            told = api.post(f"/v1/runs/{run_id}/tell", json={"text": "hello"})
            assert (told.status_code, told.json()["error"]["code"]) == (409, "finished")
            resumed = api.post(f"/v1/runs/{run_id}/resume")
            assert (resumed.status_code, resumed.json()["error"]["code"]) == (409, "finished")
    finally:
        served.kill()
