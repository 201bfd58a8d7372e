"""A ``planexec serve`` killed with SIGKILL in the middle of a run, then started again: the new
process picks the run up (it was this server's) and finishes it, and no effect happens twice."""

from __future__ import annotations

import signal
from pathlib import Path

from tests.serve_support import CHARGE_PLAN, Server, read_ledger, run_status, wait_for, write_agent


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
    assert first.process is not None and first.process.returncode == -signal.SIGTERM  # uvicorn ends as signalled
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
