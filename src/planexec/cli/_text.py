"""Text from a run, made safe to show in a terminal.

Goals, plans, outputs, errors and answers come from users, models and tools, so the CLI never lets
them act on the terminal: Rich markup in them is shown as it is (``[output]`` stays ``[output]``),
and control characters — escape sequences that could restyle or hide what a human reviews,
carriage returns, bidirectional overrides, lone surrogates — are shown as visible escapes. Secrets
are redacted before anything is shown, by the store's redactor, exactly as the store writes them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from rich.text import Text

from planexec.log import Event, RunResult, RunState, dump_event, load_event
from planexec.store import Redactor, RunStore

__all__ = ["plain", "redacted_events", "redacted_result", "redactor_of", "shown"]

_UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f"
    "\ud800-\udfff\ufeff\ufff9-\ufffb\U000e0000-\U000e007f]"
)
"""Control characters, and characters that are invisible or change how the text around them is
shown (bidirectional controls, zero-width characters, tag characters): shown as escapes."""


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def plain(text: str) -> str:
    """``text`` with every control character shown as an escape (tabs and newlines kept)."""
    return _UNSAFE.sub(_escape, text)


def shown(text: str, style: str = "") -> Text:
    """``text`` as a Rich ``Text``: never read as markup, control characters made visible."""
    return Text(plain(text), style=style)


def redactor_of(store: RunStore | None) -> Redactor:
    """The redactor ``store`` writes with (the default one when it has none)."""
    found = getattr(store, "redactor", None)
    return found if isinstance(found, Redactor) else Redactor()


def redacted_events(events: Sequence[Event], redactor: Redactor) -> list[Event]:
    """``events`` as the store keeps them: every value passed through ``redactor``."""
    if not redactor.active:
        return list(events)
    return [load_event(redactor.redact(dump_event(e))) for e in events]


def redacted_result(result: RunResult, redactor: Redactor) -> RunResult:
    """``result`` rebuilt from its redacted log, to print or save."""
    if not redactor.active:
        return result
    events = redacted_events(result.events, redactor)
    return RunResult.from_state(RunState.fold(events), events)
