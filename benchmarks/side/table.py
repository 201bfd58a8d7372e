"""The table ``benchmarks.compare`` prints at the end: one row per figure, planexec beside the
LangGraph peers and a reference (the asyncio floor, a bound or a goal), with the ratio planexec ÷
peer where both are numbers. Rows of workloads that were not run are left out."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["FLOOR", "PE", "PX", "SEND", "W5_SIZES", "Results", "Row", "markdown", "table"]

PX, SEND, PE, FLOOR = "planexec", "langgraph_send", "langgraph_plan_execute", "asyncio"
W5_SIZES = (10, 20, 50)

Cell = tuple[str, float | None]
"""What a table cell shows, and the number the ratio columns use (None: no ratio)."""


def num(value: float | None, digits: int | None = None) -> Cell:
    if value is None:
        return ("—", None)
    if digits is None:
        a = abs(value)
        digits = 0 if a >= 100 else 1 if a >= 10 else 2 if a >= 1 else 3
    text = f"{value:,.{digits}f}"
    return (text, value)


def text(value: str) -> Cell:
    return (value, None)


@dataclass
class Row:
    workload: str
    figure: str
    px: Cell
    send: Cell
    pe: Cell
    reference: str = ""

    def cells(self) -> list[str]:
        out = [self.workload, self.figure, self.px[0], self.send[0], self.pe[0], self.reference]
        for peer in (self.send, self.pe):
            a, b = self.px[1], peer[1]
            out.append(f"{a / b:.3g}" if a is not None and b not in (None, 0.0) else "—")
        return out


class Results:
    def __init__(self) -> None:
        self.data: dict[tuple[str, str, str], dict[str, Any]] = {}

    def add(self, case: dict[str, Any], out: dict[str, Any]) -> None:
        self.data[(case["workload"], case["variant"], case["framework"])] = out

    def fig(self, workload: str, variant: str, framework: str, key: str) -> float | None:
        out = self.data.get((workload, variant, framework))
        if out is None or "figures" not in out:
            return None
        value = out["figures"].get(key)
        return float(value) if isinstance(value, int | float) else None

    def get(self, workload: str, variant: str, framework: str) -> dict[str, Any] | None:
        out = self.data.get((workload, variant, framework))
        return None if out is None else out.get("figures")

    def rss(self, workload: str, variant: str, framework: str) -> float | None:
        out = self.data.get((workload, variant, framework))
        return None if out is None or "peak_rss_mib" not in out else float(out["peak_rss_mib"])

    def runs(self, workload: str, variant: str, framework: str, key: str = "runs") -> str:
        value = self.fig(workload, variant, framework, key)
        return "" if value is None else f" ({int(value)} run{'s' if value != 1 else ''})"


def _ms(value: float | None) -> float | None:
    return None if value is None else value * 1e3


def _w1_rows(res: Results) -> list[Row]:
    rows = []
    for n in (100, 1000):
        v = f"N={n}"
        pe = num(res.fig("W1", v, PE, "us_per_step"))
        if n == 1000 and pe[1] is not None:
            pe = (pe[0] + res.runs("W1", v, PE), pe[1])
        floor = res.fig("W1", v, FLOOR, "us_per_step")
        rows.append(
            Row(
                f"W1, N = {n:,}",
                "µs of framework time per step",
                num(res.fig("W1", v, PX, "us_per_step")),
                num(res.fig("W1", v, SEND, "us_per_step")),
                pe,
                f"asyncio floor {num(floor)[0]}",
            )
        )
    v = "N=1000"
    rows.append(
        Row(
            "W1, N = 1,000",
            "peak RSS, MiB (whole process)",
            num(res.rss("W1", v, PX)),
            num(res.rss("W1", v, SEND)),
            num(res.rss("W1", v, PE)),
            f"asyncio floor {num(res.rss('W1', v, FLOOR))[0]}",
        )
    )
    return rows


def _w2_rows(res: Results) -> list[Row]:
    rows = []
    for wl in ("W2", "W2b", "W2z"):
        out = res.get(wl, wl, PX) or res.get(wl, wl, SEND) or {}
        bound, sbound = out.get("bound_s"), out.get("streaming_bound_s")
        pe_runs = res.runs(wl, wl, PE)
        pe = num(_ms(res.fig(wl, wl, PE, "median_s")), 0)
        pe = (pe[0] + pe_runs if pe[1] is not None and wl != "W2z" else pe[0], pe[1])
        floor = _ms(res.fig(wl, wl, FLOOR, "median_s"))
        rows.append(
            Row(
                wl,
                "makespan, ms (plan arrives whole)",
                num(_ms(res.fig(wl, wl, PX, "median_s")), 0),
                num(_ms(res.fig(wl, wl, SEND, "median_s")), 0),
                pe,
                f"bound {num(_ms(bound), 0)[0]}; asyncio {num(floor, 0)[0]}",
            )
        )
        if wl == "W2z" or sbound is None:
            continue
        stream = res.fig(wl, wl, f"{PX}_streaming", "median_s")
        floor_stream = res.fig(wl, wl, f"{FLOOR}_streaming", "median_s")
        rows.append(
            Row(
                wl,
                "makespan, ms, planner output streamed",
                num(_ms(stream), 0),
                text("— (no streaming dispatch)"),
                text("— (no streaming dispatch)"),
                f"bound {num(_ms(sbound), 0)[0]}; asyncio {num(_ms(floor_stream), 0)[0]}",
            )
        )
        send, pe_s = res.fig(wl, wl, SEND, "median_s"), res.fig(wl, wl, PE, "median_s")
        rows.append(
            Row(
                wl,
                "makespan ÷ streaming bound (best form of each)",
                num(None if stream is None else stream / sbound, 3),
                num(None if send is None else send / sbound, 3),
                num(None if pe_s is None else pe_s / sbound, 2),
                f"asyncio {num(None if floor_stream is None else floor_stream / sbound, 3)[0]}",
            )
        )
    return rows


def _w3_rows(res: Results) -> list[Row]:
    rows = []
    for c in ("200", "1000"):
        if res.get("W3", c, PX) is None:
            continue
        label = f"W3, {int(c):,} concurrent"
        for key, figure, scale in (
            ("runs_per_s", "runs per second", 1.0),
            ("p50_s", "p50 run latency, ms", 1e3),
            ("p99_s", "p99 run latency, ms", 1e3),
            ("cpu_ms_per_run", "CPU ms per run", 1.0),
        ):

            def f(fw: str, key: str = key, scale: float = scale, c: str = c) -> float | None:
                value = res.fig("W3", c, fw, key)
                return None if value is None else value * scale

            pe = num(f(PE))
            if pe[1] is not None and c == "1000":
                pe = (pe[0] + res.runs("W3", c, PE, "batches").replace("run", "batch"), pe[1])
            rows.append(Row(label, figure, num(f(PX)), num(f(SEND)), pe, f"asyncio floor {num(f(FLOOR))[0]}"))
        pe_rss = num(res.rss("W3", c, PE))
        rows.append(
            Row(
                label,
                "peak RSS, MiB",
                num(res.rss("W3", c, PX)),
                num(res.rss("W3", c, SEND)),
                pe_rss,
                f"asyncio floor {num(res.rss('W3', c, FLOOR))[0]}",
            )
        )
        sqlite = res.fig("W3", c, f"{PX}_sqlite", "runs_per_s")
        rows.append(
            Row(
                label,
                "runs per second, planexec with its default SQLite store",
                num(sqlite),
                text("—"),
                text("—"),
                "every event durable",
            )
        )
    return rows


def _w4_rows(res: Results) -> list[Row]:
    pe_long = "N=300" if res.get("W4", "N=300", PE) else "N=100"

    def pe_cell(key: str, variant: str, digits: int | None = None, *, label: bool = True) -> Cell:
        value = num(res.fig("W4", variant, PE, key), digits)
        return value if value[1] is None or not label else (f"{value[0]} (N = {int(variant[2:])})", value[1])

    rows = []
    for v in ("N=100", "N=1000"):
        n = int(v[2:])
        pv = "N=100" if v == "N=100" else pe_long
        rows.append(
            Row(
                f"W4, N = {n:,}",
                "µs added per step by the durable store",
                num(res.fig("W4", v, PX, "added_us_per_step")),
                num(res.fig("W4", v, SEND, "added_us_per_step")),
                pe_cell("added_us_per_step", pv, label=v != "N=100"),
                "goal ≤ 150",
            )
        )
        rows.append(
            Row(
                f"W4, N = {n:,}",
                "bytes stored per step",
                num(res.fig("W4", v, PX, "bytes_per_step"), 0),
                num(res.fig("W4", v, SEND, "bytes_per_step"), 0),
                pe_cell("bytes_per_step", pv, 0, label=v != "N=100"),
                "independent of N",
            )
        )
    rows.append(
        Row(
            "W4, N = 1,000",
            "ms to resume a run whose steps are done (answer pending)",
            num(res.fig("W4", "N=1000", PX, "resume_ms")),
            num(res.fig("W4", "N=1000", SEND, "resume_ms")),
            pe_cell("resume_ms", pe_long),
            f"planexec read + fold {num(res.fig('W4', 'N=1000', PX, 'read_and_fold_ms'))[0]} ms",
        )
    )
    return rows


def _w5_cell(res: Results, variant: str, framework: str, n: int) -> Cell:
    out = res.get("W5", variant, framework)
    if not out or str(n) not in out:
        return text("—")
    f = out[str(n)]
    shown = f"{f['model_calls']} calls; {f['planner_chars']:,} ({f['planner_chars_max']:,} max)"
    return (shown, float(f["planner_chars"]))


def _growth(res: Results, variant: str, framework: str) -> Cell:
    out = res.get("W5", variant, framework)
    lo, hi = W5_SIZES[0], W5_SIZES[-1]
    if not out or str(lo) not in out or str(hi) not in out:
        return text("—")
    exponent = math.log(out[str(hi)]["planner_chars"] / out[str(lo)]["planner_chars"]) / math.log(hi / lo)
    return num(exponent, 2)


def _w5_rows(res: Results) -> list[Row]:
    rows = []
    figure = "model calls; planner characters in total (max per call)"
    for n in W5_SIZES:
        rows.append(
            Row(
                f"W5, {n} steps, upfront",
                figure,
                _w5_cell(res, "upfront", PX, n),
                _w5_cell(res, "upfront", SEND, n),
                _w5_cell(res, "upfront", PE, n),
                "tokens ≈ characters ÷ 4",
            )
        )
        rows.append(
            Row(
                f"W5, {n} steps, step-by-step",
                figure,
                _w5_cell(res, "step", PX, n),
                text("—"),
                _w5_cell(res, "upfront", PE, n),
                "",
            )
        )
        rows.append(
            Row(
                f"W5, {n} steps, one failure",
                figure,
                _w5_cell(res, "upfront+failure", PX, n),
                text("— (fails the run)"),
                _w5_cell(res, "upfront+failure", PE, n),
                "",
            )
        )
    n = W5_SIZES[0]

    def schemas(variant: str, framework: str) -> Cell:
        out = res.get("W5", variant, framework)
        if not out or str(n) not in out:
            return text("—")
        f = out[str(n)]
        return num(float(f["planner_chars"] + f["planner_schema_chars"]), 0)

    rows.append(
        Row(
            f"W5, {n} steps, upfront",
            "planner characters incl. schemas sent beside the messages",
            schemas("upfront", PX),
            schemas("upfront", SEND),
            schemas("upfront", PE),
            "output and tool schemas as JSON",
        )
    )

    def shared(variant: str, framework: str) -> Cell:
        out = res.get("W5", variant, framework)
        share = out[str(n)].get("planner_prefix_share") if out and str(n) in out else None
        return text("—") if share is None else num(100 * share, 0)

    for variant, label in (("upfront+failure", "one failure"), ("step", "step-by-step")):
        rows.append(
            Row(
                f"W5, {n} steps, {label}",
                "% of planner input after the first call that repeats an earlier call's start",
                shared(variant, PX),
                text("—"),
                shared("upfront+failure" if variant == "upfront+failure" else "upfront", PE),
                "what a prefix cache can serve",
            )
        )
    for variant, label in (("upfront", "upfront"), ("step", "step-by-step"), ("upfront+failure", "one failure")):
        rows.append(
            Row(
                f"W5, {label}",
                f"growth of planner characters, {W5_SIZES[0]} → {W5_SIZES[-1]} steps (exponent)",
                _growth(res, variant, PX),
                _growth(res, "upfront", SEND) if variant == "upfront" else text("—"),
                _growth(res, "upfront" if variant == "step" else variant, PE),
                "1 linear, 2 quadratic",
            )
        )
    return rows


def _percent(share: float | None) -> Cell:
    return text("—") if share is None else num(100 * share, 0)


def _w6_rows(res: Results) -> list[Row]:
    def f(workload: str, framework: str, key: str) -> float | None:
        return res.fig(workload, workload.split()[1], framework, key)

    rows = [
        Row(
            "W6, step 10 of 20 fails once",
            "finished steps run again",
            num(f("W6 replan", PX, "finished_steps_rerun"), 0),
            text("— (no replanning)"),
            num(f("W6 replan", PE, "finished_steps_rerun"), 0),
            "must be 0",
        ),
        Row(
            "W6, step 10 of 20 fails once",
            "extra planner calls (extra model calls)",
            _pair(f("W6 replan", PX, "extra_planner_calls"), f("W6 replan", PX, "extra_model_calls")),
            text("—"),
            _pair(f("W6 replan", PE, "extra_planner_calls"), f("W6 replan", PE, "extra_model_calls")),
            "one planner call per replan",
        ),
        Row(
            "W6, step 10 of 20 fails once",
            "extra planner characters",
            num(f("W6 replan", PX, "extra_planner_chars"), 0),
            text("—"),
            num(f("W6 replan", PE, "extra_planner_chars"), 0),
            "",
        ),
        Row(
            "W6, step 10 of 20 fails once",
            "% of planner input after the first call that repeats an earlier call's start",
            _percent(f("W6 replan", PX, "planner_prefix_share")),
            text("—"),
            _percent(f("W6 replan", PE, "planner_prefix_share")),
            "what a prefix cache can serve",
        ),
        Row(
            "W6, step 10 of 20 fails once",
            "ms from the failure to the patched plan",
            num(f("W6 replan", PX, "ms_to_patched_plan")),
            text("—"),
            num(f("W6 replan", PE, "ms_to_patched_plan")),
            "model latency 0",
        ),
    ]
    kills = f("W6 crash", PX, "kills") or f("W6 crash", PE, "kills")
    label = f"W6, killed after step 10 ({int(kills or 0)} kills)"
    repeated_px = f("W6 crash", PX, "completed_calls_repeated")
    same_key = f("W6 crash", PX, "repeated_with_same_key")
    rows += [
        Row(
            label,
            "recorded-finished steps run again after resume",
            num(f("W6 crash", PX, "finished_steps_rerun"), 0),
            text("—"),
            num(f("W6 crash", PE, "finished_steps_rerun"), 0),
            "must be 0",
        ),
        Row(
            label,
            "completed tool calls run again (at-least-once window)",
            (
                f"{num(repeated_px, 0)[0]} ({num(same_key, 0)[0]} with the same idempotency key)",
                repeated_px,
            ),
            text("—"),
            (f"{num(f('W6 crash', PE, 'completed_calls_repeated'), 0)[0]} (no key)", None),
            "",
        ),
        Row(
            label,
            "ms from the resume call to the first step started",
            num(f("W6 crash", PX, "resume_to_first_step_ms")),
            text("—"),
            num(f("W6 crash", PE, "resume_to_first_step_ms")),
            "median over the kills",
        ),
    ]
    return rows


def _pair(a: float | None, b: float | None) -> Cell:
    if a is None:
        return text("—")
    return (f"{a:.0f} ({b:.0f})" if b is not None else f"{a:.0f}", a)


def table(res: Results) -> list[Row]:
    """Every row, less those of workloads that were not run."""
    rows = [*_w1_rows(res), *_w2_rows(res), *_w3_rows(res), *_w4_rows(res), *_w5_rows(res), *_w6_rows(res)]
    return [r for r in rows if any(not cell[0].startswith("—") for cell in (r.px, r.send, r.pe))]


HEADERS = [
    "workload",
    "figure",
    "planexec",
    "LangGraph Send fan-out",
    "LangGraph plan-and-execute",
    "reference",
    "planexec ÷ Send",
    "planexec ÷ P&E",
]


def markdown(rows: list[Row]) -> str:
    lines = ["| " + " | ".join(HEADERS) + " |", "| " + " | ".join("---" for _ in HEADERS) + " |"]
    lines += ["| " + " | ".join(r.cells()) + " |" for r in rows]
    return "\n".join(lines)
