"""Provider embeddings through the official ``openai`` SDK: OpenAI itself, or any server that speaks
its embeddings API (``POST {base_url}/embeddings``).

* Texts are sent in batches (``batch_size`` texts, and at most about 400,000 characters, per
  request), one request after another; the vectors come back in the order of the texts, whatever
  order the server lists them in.
* A text longer than ``max_chars`` is clipped to it first. Characters are not tokens: a text that
  still has more tokens than the model takes is refused by the provider, and that refusal is a
  :class:`~planexec.models.ModelCallError`.
* Every reply is checked: one vector per text, each index once, numbers only, all finite, every
  vector of the expected size (``dimensions`` when given, else the model's own size when it is a
  known OpenAI model, else the size of the first vector this embedder was given). A reply that
  fails is refused with a non-retryable ``ModelCallError``; vectors are normalised to length 1.
* Failures are :class:`~planexec.models.ModelCallError` like a chat model's: timeouts, dropped
  connections, rate limits and server errors are retryable and retried (``retry``, with backoff,
  within the limits of the :class:`~planexec.models.Providers` in effect, under the same key as
  the provider's chat models); a refused key names the variable it was read from.
* Keys: ``api_key``, else the ``api_key_env`` variable (``OPENAI_API_KEY``), read when ``embed``
  is first called. OpenAI itself needs one: without it ``embed`` raises :class:`UsageError`
  naming the variable to set; other servers are sent a placeholder.
* Real requests obey :func:`~planexec.models.allow_model_requests`, as a chat model's do.
"""

from __future__ import annotations

import importlib.util
import math
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Literal

from planexec._util.clip import clip
from planexec._util.extras import install_hint
from planexec._util.plural import counted
from planexec.errors import Problem, UsageError
from planexec.memory._embed import Vector
from planexec.memory._texts import checked_texts, unit_vector
from planexec.models import ModelCallError, ModelRetryPolicy, call_with_retries, check_model_requests_allowed

if TYPE_CHECKING:
    import openai
    from openai import AsyncOpenAI

__all__ = ["OpenAIEmbedder"]

KNOWN_SIZES = {"text-embedding-3-small": 1536, "text-embedding-3-large": 3072, "text-embedding-ada-002": 1536}
"""How many numbers OpenAI's embedding models give (the ``text-embedding-3`` models can be asked for fewer)."""
REQUEST_CHARS = 400_000
"""Characters of text sent in one request at most (OpenAI takes 300,000 tokens a request)."""
_NO_KEY = "unused"
"""Sent to servers that need no key: the SDK insists on one."""
_DEFAULT_RETRY = ModelRetryPolicy()


class OpenAIEmbedder:
    """Dense vectors from an embedding model behind OpenAI's API or a server that speaks it.

    ``model`` is the embedding model (``text-embedding-3-small`` by default); ``dimensions`` asks
    a ``text-embedding-3`` model for shorter vectors. ``provider`` labels the embedder (``openai``,
    ``ollama``, ``vllm``, …); ``base_url`` (with its API path, e.g. ``http://localhost:11434/v1``)
    points at a compatible server, and when it is None the SDK's default (or ``OPENAI_BASE_URL``)
    is used. ``require_key`` defaults to true for ``openai`` only. ``client`` replaces the SDK
    client this embedder would build for each ``embed`` (its retries are turned off; the caller
    closes it). ``timeout`` bounds each request, in seconds.
    """

    kind: Literal["dense"] = "dense"

    def __init__(
        self,
        model: str = "text-embedding-3-small",
        *,
        provider: str = "openai",
        base_url: str | None = None,
        api_key: str | None = None,
        api_key_env: str | None = "OPENAI_API_KEY",
        require_key: bool | None = None,
        dimensions: int | None = None,
        batch_size: int = 256,
        max_chars: int = 8_000,
        timeout: float = 60.0,
        retry: ModelRetryPolicy = _DEFAULT_RETRY,
        client: AsyncOpenAI | None = None,
    ) -> None:
        problems = []
        if not isinstance(model, str) or not model.strip():
            problems.append(Problem(code="embedder", where="model", message="must name an embedding model"))
        if not isinstance(provider, str) or not provider.strip():
            problems.append(Problem(code="embedder", where="provider", message="must not be empty"))
        if dimensions is not None:
            native = KNOWN_SIZES.get(model) if isinstance(model, str) else None
            if not _whole(dimensions, 1):
                problems.append(Problem(code="embedder", where="dimensions", message="must be a whole number >= 1"))
            elif native is not None and dimensions > native:
                problems.append(
                    Problem(code="embedder", where="dimensions", message=f"{model} gives at most {native} numbers")
                )
        if not _whole(batch_size, 1) or batch_size > 2048:
            problems.append(Problem(code="embedder", where="batch_size", message="must be from 1 to 2048"))
        if not _whole(max_chars, 1):
            problems.append(Problem(code="embedder", where="max_chars", message="must be a whole number >= 1"))
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout < math.inf:
            problems.append(Problem(code="embedder", where="timeout", message="must be seconds > 0"))
        if importlib.util.find_spec("openai") is None:
            problems.append(Problem(code="extra", where="openai", message=install_hint("openai")))
        if problems:
            raise UsageError("invalid OpenAI embedder settings", problems)
        self.model = model
        self.provider = provider
        self.base_url = base_url
        self.dimensions = dimensions
        self.batch_size = batch_size
        self.max_chars = max_chars
        self.timeout = float(timeout)
        self.retry = retry
        self.api_key_env = api_key_env
        self.require_key = provider == "openai" if require_key is None else require_key
        self._api_key = api_key
        self._given = client.with_options(max_retries=0) if client is not None else None
        self._size: int | None = dimensions or KNOWN_SIZES.get(model)

    @property
    def name(self) -> str:
        """``provider:model``, with the ``dimensions`` asked for and, for an ``openai-compatible``
        server, its URL: vectors are comparable only between embedders of the same name."""
        name = f"{self.provider}:{self.model}"
        if self.dimensions is not None:
            name += f":dimensions={self.dimensions}"
        if self.provider == "openai-compatible" and self.base_url:
            name += f"@{self.base_url}"
        return name

    @property
    def limits_key(self) -> str:
        """What this embedder's requests count against in the limits of a ``Providers`` value: the
        same as the provider's chat models."""
        return self.base_url or self.provider

    def __repr__(self) -> str:
        return f"OpenAIEmbedder({self.name!r})"

    def missing_keys(self) -> tuple[Problem, ...]:
        """The key this embedder needs and has not got (none when a client was given)."""
        if self._given is not None or self._api_key or not self.require_key:
            return ()
        if self.api_key_env and os.environ.get(self.api_key_env):
            return ()
        if self.api_key_env:
            message = f"{self.api_key_env} is not set: set it, or pass api_key="
        else:
            message = "no API key: pass api_key="
        return (Problem(code="api_key", where=self.name, message=message),)

    async def embed(self, texts: Sequence[str]) -> list[Vector]:
        """One unit vector per text, in order."""
        checked = checked_texts(texts, self.name, allow_empty=False)
        if not checked:
            return []
        missing = self.missing_keys()
        if missing:
            raise UsageError(f"the embedder {self.name} has no API key", missing)
        clipped = [t[: self.max_chars] for t in checked]
        client = self._given or self._new_client()
        vectors: list[Vector] = []
        try:
            for start, batch in _batches(clipped, self.batch_size):
                vectors += await self._embed_batch(client, start, batch)
        finally:
            if client is not self._given:
                await client.close()
        return vectors

    def _new_client(self) -> AsyncOpenAI:
        from openai import AsyncOpenAI

        key = self._api_key or (os.environ.get(self.api_key_env) if self.api_key_env else None) or _NO_KEY
        return AsyncOpenAI(api_key=key, base_url=self.base_url, timeout=self.timeout, max_retries=0)

    async def _embed_batch(self, client: AsyncOpenAI, start: int, batch: list[str]) -> list[Vector]:
        import openai
        from openai import omit

        async def attempt() -> list[Vector]:
            check_model_requests_allowed(self.name)
            try:
                reply = await client.embeddings.create(
                    model=self.model,
                    input=batch,
                    encoding_format="float",
                    dimensions=self.dimensions if self.dimensions is not None else omit,
                    timeout=self.timeout,
                )
            except openai.APIError as e:
                raise self._call_error(e) from e
            except ValueError as e:  # a body that is not JSON: the SDK lets json.loads' error through
                raise self._malformed(f"a body that is not JSON ({e})") from e
            return self._vectors(reply, start, len(batch))

        return await call_with_retries(self.limits_key, attempt, self.retry)

    # -- the reply --------------------------------------------------------------------------

    def _vectors(self, reply: object, start: int, count: int) -> list[Vector]:
        """The ``count`` vectors of ``reply``, by index, checked and normalised."""
        data = getattr(reply, "data", None)
        if not isinstance(data, list):
            raise self._malformed("a body that is not a list of embeddings")
        if len(data) != count:
            raise self._malformed(f"{counted(len(data), 'embedding')} for {counted(count, 'text')}")
        indexes = [getattr(item, "index", None) for item in data]
        if all(i is None for i in indexes):
            indexes = list(range(count))  # a server that leaves the index out lists them in order
        ordered: list[Vector | None] = [None] * count
        for item, index in zip(data, indexes, strict=True):
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count:
                raise self._malformed(f"an embedding with the index {index!r}, for {counted(count, 'text')}")
            if ordered[index] is not None:
                raise self._malformed(f"two embeddings with the index {index}")
            ordered[index] = self._checked(getattr(item, "embedding", None), f"texts[{start + index}]")
        return [v for v in ordered if v is not None]

    def _checked(self, numbers: object, where: str) -> list[float]:
        if not isinstance(numbers, list) or not numbers:
            raise self._malformed(f"for {where} an embedding that is not a list of numbers")
        if not all(isinstance(x, int | float) and not isinstance(x, bool) for x in numbers):
            raise self._malformed(f"for {where} an embedding with items that are not numbers")
        values = [float(x) for x in numbers]
        if not all(math.isfinite(x) for x in values):
            raise self._malformed(f"for {where} an embedding with numbers that are not finite (NaN or infinity)")
        if self._size is None:
            self._size = len(values)
        if len(values) != self._size:
            raise self._malformed(f"for {where} an embedding of {counted(len(values), 'number')}, not {self._size}")
        if not any(values):
            raise self._malformed(f"for {where} an embedding of zeros only")
        return unit_vector(values)

    # -- errors -----------------------------------------------------------------------------

    def _malformed(self, what: str) -> ModelCallError:
        return ModelCallError(f"{self.name} answered {what}", provider=self.provider, retryable=False)

    def _call_error(self, error: openai.APIError) -> ModelCallError:
        import openai

        if isinstance(error, openai.APITimeoutError):
            return ModelCallError(
                f"{self.name}: the request timed out after {self.timeout:g}s", provider=self.provider, retryable=True
            )
        if isinstance(error, openai.APIConnectionError):
            return ModelCallError(
                f"{self.name}: cannot connect ({error.message})", provider=self.provider, retryable=True
            )
        detail = clip(str(error.message), 500)
        if not isinstance(error, openai.APIStatusError):
            retryable = error.type == "server_error" or error.code in ("server_error", "rate_limit_exceeded")
            return ModelCallError(
                f"{self.name} reported an error: {detail}", provider=self.provider, retryable=retryable
            )
        status = error.status_code
        message = f"{self.name} answered {status}: {detail}"
        if status in (401, 403):
            where = "passed as api_key=" if self._api_key else f"in {self.api_key_env}" if self.api_key_env else ""
            message += f" — the server refused the API key: check the API key {where}".rstrip()
        out_of_credit = status == 429 and error.code == "insufficient_quota"  # waiting does not add credit
        return ModelCallError(
            message,
            provider=self.provider,
            retryable=(status in (408, 409, 429) or status >= 500) and not out_of_credit,
            status=status,
            retry_after=_retry_after(error.response.headers),
        )


def _whole(value: object, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def _batches(texts: list[str], size: int) -> list[tuple[int, list[str]]]:
    """``texts`` in runs of at most ``size`` texts and about ``REQUEST_CHARS`` characters (a longer
    text goes alone), each with the position of its first text."""
    batches: list[tuple[int, list[str]]] = []
    batch: list[str] = []
    start = chars = 0
    for i, text in enumerate(texts):
        if batch and (len(batch) == size or chars + len(text) > REQUEST_CHARS):
            batches.append((start, batch))
            start, batch, chars = i, [], 0
        batch.append(text)
        chars += len(text)
    if batch:
        batches.append((start, batch))
    return batches


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds the server asked to wait (``retry-after-ms``, else ``retry-after`` in seconds), or None."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        try:
            return max(0.0, float(headers.get(name) or "") * scale)
        except ValueError:
            continue
    return None
