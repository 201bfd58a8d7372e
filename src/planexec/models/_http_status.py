"""What an HTTP status from a provider means, the same for every adapter: whether to try again,
how long the server asked to wait, and a message that names the provider and the model — and,
for a refused key, which key to check."""

from __future__ import annotations

import email.utils
import time
from collections.abc import Mapping

from planexec.models._base import ModelCallError

__all__ = ["retry_after", "retryable_status", "status_error"]


def retryable_status(status: int) -> bool:
    """Worth another attempt: a timeout, a conflict, a rate limit or a server error."""
    return status in (408, 409, 429) or status >= 500


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds the server asked to wait: ``retry-after-ms``, else ``retry-after`` (seconds or an
    HTTP date); None when it asked for nothing readable."""
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def status_error(
    name: str,
    *,
    provider: str,
    status: int,
    detail: str,
    kind: str | None = None,
    key_env: str | None = None,
    headers: Mapping[str, str] | None = None,
    retryable: bool | None = None,
) -> ModelCallError:
    """The error for an HTTP ``status`` from model ``name`` (``provider:model``). A refused key
    (401, 403) says so and names the variable the key is read from."""
    what = f"{name} answered {status}" + (f" ({kind})" if kind else "")
    message = f"{what}: {detail}"
    if status in (401, 403):
        where = f" in {key_env}" if key_env else ""
        message += f" — the server refused the API key: check the API key{where}"
    return ModelCallError(
        message,
        provider=provider,
        retryable=retryable_status(status) if retryable is None else retryable,
        status=status,
        retry_after=retry_after(headers or {}),
    )
