"""A ``planexec serve`` killed with SIGKILL in the middle of a run, then started again: the new
process picks the run up (it was this server's) and finishes it, and no effect happens twice."""

from __future__ import annotations

import functools
import signal
from pathlib import Path

from tests.serve_support import CHARGE_PLAN, HOLD_PLAN, Server, read_ledger, run_status, wait_for, write_agent


def test_a_server_killed_mid_run_finishes_the_run_when_started_again_with_no_effect_repeated(tmp_path: Path) -> None:
    agents = [write_agent(tmp_path, "payer", [CHARGE_PLAN, {"answer": "paid and refunded"}])]
    first = Server(tmp_path, agents).start()
    try:
        with first.client() as api:
            created = api.post("/v1/runs", json={"agent": "payer", "goal": "pay, wait, refund"})
            assert created.status_code == 201, created.text
            run_id = created.json()["run_id"]
            wait_for(lambda: first.reached(run_id), what="the run to reach its gate")

            def paid_and_waiting() -> bool:
                steps = {s["id"]: s["status"] for s in api.get(f"/v1/runs/{run_id}").json()["steps"]}
                return steps.get("pay") == "succeeded" and steps.get("wait") == "running"

            wait_for(paid_and_waiting, what="the store to show the payment made and the wait under way")
    finally:
        first.kill(signal.SIGKILL)
    assert [(e["amount"], e["new"]) for e in read_ledger(tmp_path / "ledger.jsonl")] == [(7, True)]

    (tmp_path / "gates" / f"{run_id}.reached").unlink()
    second = Server(tmp_path, agents).start()
    try:
        with second.client() as api:
            wait_for(lambda: second.reached(run_id), what="the restarted server to go on with the run")
            second.open_gate(run_id)
            done = wait_for(run_status(api, run_id, "finished"), what="the run to finish")
            assert (done["stop"]["kind"], done["answer"]) == ("goal_met", "paid and refunded")
            statuses = {s["id"]: s["status"] for s in done["steps"] if not s["superseded"]}
            assert statuses == {"pay": "succeeded", "wait": "succeeded", "refund": "succeeded"}
            kinds = [e["event"]["kind"] for e in api.get(f"/v1/runs/{run_id}/events").json()["events"]]
            assert kinds.count("run_resumed") == 1
            assert kinds.count("run_finished") == 1
    finally:
        second.kill(signal.SIGTERM)
    ledger = read_ledger(tmp_path / "ledger.jsonl")
    assert [(e["amount"], e["new"]) for e in ledger] == [(7, True), (-7, True)]
    assert len({e["key"] for e in ledger}) == 2


def test_a_server_stopped_mid_run_leaves_the_run_unfinished_and_goes_on_with_it_when_started_again(
    tmp_path: Path,
) -> None:
    agents = [write_agent(tmp_path, "payer", [CHARGE_PLAN, {"answer": "paid and refunded"}])]
    first = Server(tmp_path, agents).start()
    try:
        with first.client() as api:
            run_id = api.post("/v1/runs", json={"agent": "payer", "goal": "pay, wait, refund"}).json()["run_id"]
            wait_for(lambda: first.reached(run_id), what="the run to reach its gate")
    finally:
        first.kill(signal.SIGTERM)
    assert first.process is not None
    assert first.process.returncode == -signal.SIGTERM  # uvicorn ends as signalled, after the app shut down
    (tmp_path / "gates" / f"{run_id}.reached").unlink()
    second = Server(tmp_path, agents).start()
    try:
        with second.client() as api:
            stopped = api.get(f"/v1/runs/{run_id}").json()
            assert stopped["stop"] is None
            wait_for(lambda: second.reached(run_id), what="the restarted server to go on with the run")
            second.open_gate(run_id)
            done = wait_for(run_status(api, run_id, "finished"), what="the run to finish")
            assert done["stop"]["kind"] == "goal_met"
    finally:
        second.kill(signal.SIGTERM)
    assert [(e["amount"], e["new"]) for e in read_ledger(tmp_path / "ledger.jsonl")] == [(7, True), (-7, True)]


def test_runs_accepted_but_not_begun_when_the_server_dies_are_begun_by_the_next_start(tmp_path: Path) -> None:
    """One worker: the first run holds it, the next two wait for it. The server dies (SIGKILL)
    with all three answered 201; the next start goes on with the first and begins the other two."""
    agents = [write_agent(tmp_path, "holder", [HOLD_PLAN, {"answer": "held"}])]
    first = Server(tmp_path, agents, extra=["--workers", "1"]).start()
    try:
        with first.client() as api:
            ids = []
            for i in range(3):
                created = api.post("/v1/runs", json={"agent": "holder", "goal": f"hold {i}"})
                assert created.status_code == 201, created.text
                ids.append(created.json()["run_id"])
            wait_for(lambda: first.reached(ids[0]), what="the first run to hold the only worker")
            assert [api.get(f"/v1/runs/{r}").json()["events"] for r in ids[1:]] == [0, 0]  # not begun
    finally:
        first.kill(signal.SIGKILL)

    (tmp_path / "gates" / f"{ids[0]}.reached").unlink()
    second = Server(tmp_path, agents, extra=["--workers", "1"]).start()
    try:
        with second.client() as api:
            for run_id in ids:
                wait_for(functools.partial(second.reached, run_id), what=f"run {run_id} to reach its gate")
                second.open_gate(run_id)
                done = wait_for(run_status(api, run_id, "finished"), what=f"run {run_id} to finish")
                assert (done["stop"]["kind"], done["answer"]) == ("goal_met", "held")
            goals = {r["run_id"]: r["goal"] for r in api.get("/v1/runs", params={"agent": "holder"}).json()["runs"]}
            assert [goals[r] for r in ids] == ["hold 0", "hold 1", "hold 2"]  # each begun once, as asked
    finally:
        second.kill(signal.SIGTERM)
    # The file of accepted runs keeps only what has not begun: the next start leaves nothing in it.
    third = Server(tmp_path, agents).start()
    try:
        wait_for(lambda: (tmp_path / "serve-accepted.jsonl").read_text() == "", what="the file to be rewritten")
    finally:
        third.kill(signal.SIGTERM)
