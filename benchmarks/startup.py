"""Start-up: how long the ``planexec`` command takes from process start to exit.

Run: ``.venv/bin/python -m benchmarks.startup`` (``--runs N`` for more runs per command).
``--src DIR`` measures the package in another source tree (e.g. an export of another branch:
``git archive main | tar -x -C /tmp/planexec-main``, then ``--src /tmp/planexec-main/src``) with
this interpreter and its installed dependencies, so that two versions compare in one sitting.

Each command runs as a fresh process (``python -c``, the ``planexec`` entry point's code), with
the output thrown away; the figure is the median wall time over the runs, after one unmeasured
warm-up run (so the files are in the page cache). The bare interpreter is measured as the floor.
One JSON line is printed per command, then a table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ENTRY = "import sys; sys.argv[0] = 'planexec'; from planexec.cli import entry; entry()"

COMMANDS: dict[str, tuple[str, list[str]]] = {
    "python -c pass (the floor)": ("pass", []),
    "python -c 'import planexec'": ("import planexec", []),
    "planexec --version": (ENTRY, ["--version"]),
    "planexec --help": (ENTRY, ["--help"]),
    "planexec run --help": (ENTRY, ["run", "--help"]),
}


def measure(code: str, args: list[str], *, runs: int, env: dict[str, str]) -> list[float]:
    """Wall seconds of ``runs`` fresh processes running ``code`` with ``args``."""
    command = [sys.executable, "-c", code, *args]
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)  # warm-up
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=10, help="runs per command (default 10)")
    parser.add_argument("--src", type=Path, help="the source tree to import planexec from (default: as installed)")
    options = parser.parse_args()
    env = dict(os.environ)
    if options.src is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(options.src.resolve()), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    origin = subprocess.run(
        [sys.executable, "-c", "import planexec; print(planexec.__file__)"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    rows = []
    for label, (code, args) in COMMANDS.items():
        times = measure(code, args, runs=options.runs, env=env)
        median = statistics.median(times)
        record = {"command": label, "median_s": round(median, 4), "runs": [round(t, 4) for t in times]}
        print(json.dumps(record), flush=True)
        rows.append((label, median, min(times), max(times)))
    print()
    print(f"planexec from {origin}; Python {platform.python_version()} on {platform.system()} {platform.release()}")
    print(f"median of {options.runs} runs, seconds from process start to exit")
    print()
    print("| command | median, s | fastest, s | slowest, s |")
    print("| --- | --- | --- | --- |")
    for label, median, fastest, slowest in rows:
        print(f"| `{label}` | {median:.3f} | {fastest:.3f} | {slowest:.3f} |")


if __name__ == "__main__":
    main()
