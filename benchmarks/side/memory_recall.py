"""Plan memory: how long finding a remembered plan takes with 10,000 of them (W12, retrieval).

Run: ``PYTHONPATH=. .venv/bin/python -m benchmarks.side.memory_recall [--entries 10000]``
(needs ``bfcl-eval`` for the goals, which ``make`` installs).

The goals are the user turns of BFCL's multi-turn tasks (all four categories, every turn: about
3,200 distinct requests over the same eight APIs, so they share much of their wording — the hard
case for a lexical index), each with its values (numbers, file and folder names, quoted text)
replaced at random, until there are ``--entries`` of them; each is remembered with a one-step
plan that holds its values, in a SQLite file, through ``PlanMemory.remember``.

Then ``PlanMemory.recall`` is timed, after one warm-up call, for three kinds of goal (1,000 each,
in turn): an exact repeat of a remembered goal, the same request with other values (a direct
reuse when the plan holds them), and a request that was never remembered (BFCL turns held out).
Every call asks the database whether anything changed (one small query), as it does in a run.
Printed: p50, p90, p99 and max per kind, what each call found, and — in the same sitting — a
search that compares the goal with every entry one by one (what an index saves).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from planexec.bfcl import load_tasks
from planexec.memory import LexicalEmbedder, PlanMemory
from planexec.plan import Step

_VALUE = re.compile(r"'[^']{1,40}'|\"[^\"]{1,40}\"|\b[\w-]+\.(?:txt|pdf|md|csv|py|log|json|docx)\b|\b\d+(?:\.\d+)?\b")
_WORDS = ["alpha", "beta", "gamma", "delta", "omega", "draft", "final", "notes", "report", "budget", "q3", "misc"]


def _values(text: str) -> list[str]:
    return [m.group() for m in _VALUE.finditer(text)]


def _vary(text: str, rng: random.Random) -> str:
    def swap(m: re.Match[str]) -> str:
        value = m.group()
        if value[0] in "'\"":
            return value[0] + rng.choice(_WORDS) + "_" + str(rng.randrange(1000)) + value[0]
        if "." in value and not value.replace(".", "").isdigit():
            return f"{rng.choice(_WORDS)}{rng.randrange(1000)}.{value.rsplit('.', 1)[1]}"
        if "." in value:
            return f"{rng.uniform(0, 1000):.2f}"
        return str(rng.randrange(1, 100_000))

    return _VALUE.sub(swap, text)


def _plan(goal: str) -> list[Step]:
    values = _values(goal) or ["x"]
    return [
        Step(
            id="s1",
            description="do what is asked",
            tool="api_call",
            args={f"v{i}": v.strip("'\"") for i, v in enumerate(values[:6])},
        )
    ]


def _requests() -> list[str]:
    seen: dict[str, None] = {}
    for category in ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context"):
        for task in load_tasks(category):
            for turn in task.turns:
                if turn.strip() and len(turn) < 2_000:
                    seen.setdefault(turn.strip(), None)
    return list(seen)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def _timed(memory: PlanMemory, goals: list[str]) -> tuple[list[float], dict[str, int]]:
    found = {"direct": 0, "guided": 0, "nothing": 0}
    times = []
    for goal in goals:
        start = time.perf_counter()
        recall = await memory.recall(goal, tools=["api_call"])
        times.append((time.perf_counter() - start) * 1000)
        found["nothing" if recall is None else recall.mode] += 1
    return times, found


def _brute(vectors: list[dict[str, float]], query: dict[str, float]) -> float:
    best = 0.0
    for v in vectors:
        score = sum(w * v.get(f, 0.0) for f, w in query.items())
        best = max(best, score)
    return best


async def main(entries: int, queries: int) -> None:
    rng = random.Random(7)
    requests = _requests()
    rng.shuffle(requests)
    held_out, pool = requests[:300], requests[300:]
    print(f"{len(requests):,} distinct BFCL requests; {len(pool):,} to remember from, {len(held_out)} held out")
    goals: list[str] = []
    while len(goals) < entries:
        base = pool[len(goals) % len(pool)]
        goals.append(base if len(goals) < len(pool) else _vary(base, rng))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "plans.db"
        memory = PlanMemory(path)
        start = time.perf_counter()
        for goal in goals:
            await memory.remember(goal=goal, steps=_plan(goal), answer=None, outputs={})
        wrote = time.perf_counter() - start
        print(f"remembered {entries:,} plans in {wrote:.1f} s ({wrote / entries * 1000:.2f} ms each)")
        fresh = PlanMemory(path)
        start = time.perf_counter()
        await fresh.recall("warm up", tools=["api_call"])
        print(f"a new memory loads and indexes them on its first call: {(time.perf_counter() - start) * 1000:.0f} ms")
        kinds = {
            "exact repeat": [rng.choice(goals) for _ in range(queries)],
            "other values": [_vary(rng.choice(pool), rng) for _ in range(queries)],
            "never seen": [rng.choice(held_out) for _ in range(queries)],
        }
        print(f"\nrecall latency over {queries:,} calls each (ms)")
        print(f"{'goal':<14}{'p50':>8}{'p90':>8}{'p99':>8}{'max':>8}   found")
        worst_p99 = 0.0
        for kind, batch in kinds.items():
            times, found = await _timed(fresh, batch)
            p99 = _pct(times, 0.99)
            worst_p99 = max(worst_p99, p99)
            shown = ", ".join(f"{k} {v}" for k, v in found.items())
            print(
                f"{kind:<14}{statistics.median(times):>8.2f}{_pct(times, 0.9):>8.2f}{p99:>8.2f}{max(times):>8.2f}   {shown}"
            )
        embedder = LexicalEmbedder()
        vectors: list[dict[str, float]] = []
        for goal in goals:
            v = embedder.vector(goal)
            norm = sum(x * x for x in v.values()) ** 0.5
            vectors.append({k: x / norm for k, x in v.items()})
        brute = []
        for goal in kinds["never seen"][:100]:
            q = embedder.vector(goal)
            norm = sum(x * x for x in q.values()) ** 0.5
            start = time.perf_counter()
            _brute(vectors, {k: x / norm for k, x in q.items()})
            brute.append((time.perf_counter() - start) * 1000)
        print(f"\ncomparing with every entry one by one (100 calls): median {statistics.median(brute):.1f} ms")
        print(f"goal: p99 <= 5 ms with {entries:,} plans — worst p99 {worst_p99:.2f} ms: {'met' if worst_p99 <= 5 else 'NOT met'}")
        await memory.close()
        await fresh.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=1_000)
    args: Any = parser.parse_args()
    asyncio.run(main(args.entries, args.queries))
