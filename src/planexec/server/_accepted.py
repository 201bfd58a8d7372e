"""The file of accepted runs: each run the server accepts is written down (JSON Lines, synced to
disk) before the request is answered, so that a run accepted and not begun when the process stops
or crashes is begun by the next start.

Writes are grouped: the requests accepted while one write is under way are written, and synced,
together by the next, in a worker thread — the event loop never waits for the disk, and a burst of
requests costs one sync per group instead of one each. A request is answered only once its line
is synced.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

__all__ = ["COMPACT_AFTER", "AcceptedRuns"]

COMPACT_AFTER = 10_000
"""Lines in the file past which it is rewritten with the runs not begun yet."""


class AcceptedRuns:
    """The accepted runs written down in ``path`` (None: nothing is written). ``keep`` names the
    runs still not begun: the file is rewritten with those alone once it is crowded."""

    def __init__(self, path: Path | None, keep: Callable[[], Collection[str]]) -> None:
        self.path = path
        self._keep = keep
        self.lines = 0
        """Lines in the file as far as this process knows."""
        self._waiting: list[tuple[str, asyncio.Future[None]]] = []
        self._writer: asyncio.Task[None] | None = None

    async def remember(self, line: Mapping[str, Any]) -> None:
        """Write ``line`` down; return once it is synced to disk (raises what the write raised)."""
        if self.path is None:
            return
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((json.dumps(line, separators=(",", ":")) + "\n", done))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_groups(), name="serve-accepted")
        await asyncio.shield(done)

    async def _write_groups(self) -> None:
        while self._waiting:
            group, self._waiting = self._waiting, []
            try:
                await asyncio.to_thread(self._append, "".join(text for text, _ in group))
            except OSError as e:
                for _, done in group:
                    if not done.done():
                        done.set_exception(e)
                continue
            self.lines += len(group)
            keep = self._keep()
            if self.lines > COMPACT_AFTER and self.lines > 4 * len(keep):
                await asyncio.to_thread(self.compact, keep)
            for _, done in group:
                if not done.done():
                    done.set_result(None)

    def _append(self, text: str) -> None:
        assert self.path is not None
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, text.encode())
            os.fsync(fd)
        finally:
            os.close(fd)

    def compact(self, keep: Collection[str]) -> None:
        """Rewrite the file with the runs ``keep`` only (atomically: a crash leaves the old file or
        the new one)."""
        if self.path is None or not self.path.exists():
            return
        kept = [line for line in self.read() if line.get("run_id") in keep]
        part = self.path.with_name(self.path.name + ".new")
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in kept).encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(part, self.path)
        self.lines = len(kept)

    def read(self) -> list[dict[str, Any]]:
        """Every line that can be read (the last line of a crash cut short is not)."""
        if self.path is None or not self.path.exists():
            return []
        lines = []
        for text in self.path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                line = json.loads(text)
            except ValueError:
                continue
            if isinstance(line, dict) and isinstance(line.get("run_id"), str):
                lines.append(line)
        return lines
