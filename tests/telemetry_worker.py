"""Resume the shop run of tests/telemetry_support.py in a process of its own, and print its spans.

    python -m tests.telemetry_worker STORE_URL RUN_ID

Prints one JSON document on stdout: ``{"stop": ..., "recorded": [...], "spans": [...]}``.
"""

from __future__ import annotations

import asyncio
import json
import sys

from tests.telemetry_support import ANSWER, Captured, shop_agent


async def main(store: str, run_id: str) -> None:
    captured = Captured()
    recorded: list[int] = []
    agent = shop_agent([ANSWER], store, captured.telemetry(), recorded)
    try:
        result = await (await agent.resume(run_id)).result()
    finally:
        await agent.aclose()
    spans = [s.to_json() for s in captured.spans()]
    captured.shutdown()
    json.dump({"stop": result.stop.kind, "recorded": recorded, "spans": spans}, sys.stdout)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
