"""The hash chain of a run's log: every stored event carries the hash of the log before it.

Each backend computes the chain as it appends, over the bytes it writes (the redacted envelope
as UTF-8 JSON text), so every writer — a run's journal, an answer written by another process, the
server, a worker — gets it without doing anything. Format, version 1 (``run`` is the run id as
UTF-8; ``data(k)`` the stored bytes of event ``k``; ``||`` concatenation)::

    link(1)    = SHA-256("planexec chain v1" || 0x00 || run)     the run's genesis value
    hash(k)    = SHA-256(link(k) || data(k))                      the event's own hash
    link(k+1)  = hash(k)
    head       = hash(last event)

A store keeps ``link(k)`` and ``hash(k)`` (32 bytes each) with every event and the head with the
run's summary, so an append needs nothing it has not read already (the summary row, which it reads
in its transaction to check ``expected_seq``): the chain stays right when other stores or processes
append to the same run. Events written before a store kept a chain have neither; the first event a
newer store appends after them links to the chain computed over them as they were then, so the
chain *begins* there and covers them from then on. (A head that is not 32 bytes — damaged, or
written by hand — is recomputed the same way: the chain of the stored events is what counts.)

:func:`verify_chain` recomputes the chain from the stored bytes and names the first event where it
breaks (:class:`ChainBreak`) or reports it intact with its head (:class:`ChainReport`). The chain
holds no secret: whoever can write the database can rewrite an event and recompute every hash
after it. What that cannot hide is that every later hash, the head included, changes — so a head
kept elsewhere (printed by ``planexec verify``, sent to another system) exposes any rewrite of the
log up to where it was kept.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal

from planexec.errors import Problem, UsageError
from planexec.store._common import check_run_id

if TYPE_CHECKING:
    from planexec.store._base import RunStore

__all__ = [
    "CHAIN_PREFIX",
    "ChainBreak",
    "ChainProblem",
    "ChainReport",
    "RawEvent",
    "RawLog",
    "chain_hashes",
    "check_chain",
    "event_hash",
    "genesis",
    "verify_chain",
]

CHAIN_PREFIX = b"planexec chain v1\x00"
"""What the genesis value hashes before the run id: names the chain's format and version."""


def genesis(run_id: str) -> bytes:
    """``link(1)`` of run ``run_id``: the value its first event links to."""
    return hashlib.sha256(CHAIN_PREFIX + run_id.encode("utf-8", "surrogatepass")).digest()


def event_hash(link: bytes, data: bytes) -> bytes:
    """The hash of an event stored as ``data`` that links to ``link``: the next event's link."""
    return hashlib.sha256(link + data).digest()


def chain_hashes(head: bytes, datas: Iterable[bytes]) -> list[tuple[bytes, bytes]]:
    """``(link, hash)`` of each event stored as ``datas`` appended after ``head``, in order."""
    out: list[tuple[bytes, bytes]] = []
    link = head
    for data in datas:
        own = hashlib.sha256(link + data).digest()
        out.append((link, own))
        link = own
    return out


def stored_head(value: object) -> bytes | None:
    """A head as a run's summary row holds it, if it is one (32 bytes); None for none, or for
    something else written there (the append then recomputes it from the stored events)."""
    if isinstance(value, bytes | bytearray | memoryview) and len(value) == 32:
        return bytes(value)
    return None


def unchained_head(run_id: str, datas: Iterable[bytes]) -> bytes:
    """The head of a log whose events were written without a chain: the chain over them as they are."""
    link = genesis(run_id)
    for data in datas:
        link = hashlib.sha256(link + data).digest()
    return link


@dataclass(frozen=True, kw_only=True, slots=True)
class RawEvent:
    """One event as a store holds it: its bytes and its place in the chain."""

    seq: int
    data: bytes
    """The stored bytes (the redacted envelope, UTF-8 JSON text)."""
    link: bytes | None
    """The hash of the log before it; None for an event written before the store kept a chain."""
    hash: bytes | None
    """Its own hash, ``SHA-256(link || data)``; None with ``link``."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RawLog:
    """A run's log as stored, read in one go: every event row and what the run's summary says."""

    run_id: str
    events: tuple[RawEvent, ...]
    """In order of ``seq``."""
    last_seq: int
    """The last seq the run's summary records (0 for an unknown run)."""
    head: bytes | None
    """The head the run's summary records; None before the store kept a chain."""


ChainProblem = Literal["missing", "out_of_place", "changed", "unlinked", "extra", "head", "kept"]
"""Why a chain breaks at an event:

``missing``       the event is not in the store (deleted, or never written);
``out_of_place``  its link is not the hash of the log before it: an event before it was removed,
                  inserted or moved, or its link was changed (for the first chained event after
                  events written without a chain: one of those was changed since the chain began);
``changed``       its stored bytes do not hash to its own hash: the event was edited;
``unlinked``      it has no link although the chain began before it;
``extra``         it lies beyond the last event the run's summary records, or before the first;
``head``          the head the run's summary records is not the hash of its last event: events
                  after it were removed, or the head was changed;
``kept``          no event hashes to the head kept elsewhere: the log up to where it was kept was
                  rewritten (its chain recomputed after it)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ChainBreak:
    """The first place a run's chain breaks."""

    seq: int
    """The event at fault (for ``head`` and ``kept``: the last event)."""
    problem: ChainProblem
    expected: str
    """What the chain computed there (hex): the link or hash the event should carry, the kept head."""
    found: str | None
    """What the store holds there (hex), or None when it holds nothing."""
    message: str

    def __str__(self) -> str:
        return f"event {self.seq}: {self.message}"


@dataclass(frozen=True, kw_only=True, slots=True)
class ChainReport:
    """What :func:`verify_chain` found: intact (with the head to keep), or the first break."""

    run_id: str
    events: int
    """How many events the store holds for the run."""
    begins_at: int | None
    """The first event that carries a link (1 for a log written by a store that keeps a chain);
    None when none does. Events before it were written without a chain; the chain covers them as
    they were when it began."""
    head: str | None
    """The hash of the last event (hex), computed from the stored bytes; None for an empty log and
    for a chain broken before its end. Keep it elsewhere: a later verification given it (``kept``)
    proves the log up to it unchanged."""
    broken: ChainBreak | None = None
    kept_at: int | None = None
    """The event whose hash is the kept head given to the verification, when it was given and found."""

    @property
    def intact(self) -> bool:
        return self.broken is None

    @property
    def unchained(self) -> int:
        """How many events were written before the chain began."""
        return self.events if self.begins_at is None else self.begins_at - 1

    def json(self) -> dict[str, Any]:
        """The report as JSON data (``intact`` and ``unchained`` included)."""
        return {**asdict(self), "intact": self.intact, "unchained": self.unchained}

    def describe(self) -> str:
        """One sentence: intact or broken, where the chain begins, and the head."""
        if self.broken is not None:
            return f"run {self.run_id}: its chain is broken at event {self.broken.seq}: {self.broken.message}"
        if self.events == 0:
            return f"run {self.run_id}: no events"
        if self.begins_at is None:
            return (
                f"run {self.run_id}: none of its {self.events} events is chained (they were written before "
                f"the store kept a chain); their hash is {self.head}"
            )
        since = (
            ""
            if self.begins_at == 1
            else (
                f" (events 1-{self.begins_at - 1} were written before the store kept a chain: the chain begins at "
                f"event {self.begins_at} and covers them as they were then)"
            )
        )
        kept = "" if self.kept_at is None else f"; the kept head is event {self.kept_at}'s"
        return f"run {self.run_id}: chain intact over {self.events} events{since}; head {self.head}{kept}"


def _hex(value: bytes | None) -> str | None:
    return None if value is None else value.hex()


def _gap(first: int, end: int) -> str:
    return f"event {first} is missing" if first == end else f"events {first}-{end} are missing"


def check_chain(raw: RawLog, *, kept: str | None = None) -> ChainReport:
    """Recompute ``raw``'s chain and report the first break, or that it is intact.

    ``kept``: a head kept elsewhere earlier (hex): the chain must still pass through it.
    """
    walk = _Walk(raw, _kept(kept))
    broken = walk.run()
    if broken is None and kept is not None and walk.kept_at is None:
        message = (
            "no event hashes to the kept head: the log up to where that head was kept was rewritten "
            "(and its chain recomputed after the change)"
        )
        found = walk.hashes[-1].hex() if walk.hashes else None
        broken = ChainBreak(seq=walk.last, problem="kept", expected=kept, found=found, message=message)
    whole = broken is None or broken.problem == "kept"
    return ChainReport(
        run_id=raw.run_id,
        events=len(raw.events),
        begins_at=walk.begins_at,
        head=walk.hashes[-1].hex() if walk.hashes and whole else None,
        broken=broken,
        kept_at=walk.kept_at,
    )


class _Walk:
    """One pass along a stored log, recomputing its chain."""

    def __init__(self, raw: RawLog, kept: bytes | None) -> None:
        self.raw = raw
        self.kept = kept
        self.kept_at: int | None = None
        self.begins_at: int | None = None
        self.hashes: list[bytes] = []
        self.link = genesis(raw.run_id)
        """The link the next event must carry."""
        self.last = 0

    def run(self) -> ChainBreak | None:
        for row in self.raw.events:
            broken = self._check(row)
            if broken is not None:
                return broken
        return self._check_end()

    def _break(self, seq: int, problem: ChainProblem, expected: bytes, found: bytes | None, why: str) -> ChainBreak:
        return ChainBreak(seq=seq, problem=problem, expected=expected.hex(), found=_hex(found), message=why)

    def _check(self, row: RawEvent) -> ChainBreak | None:
        link, last = self.link, self.last
        if row.seq <= last:
            why = f"it lies outside the log's numbering, before event {last + 1} (inserted)"
            return self._break(row.seq, "extra", link, row.link, why)
        if row.seq != last + 1:
            why = f"{_gap(last + 1, row.seq - 1)} from the store (deleted, or never written)"
            return self._break(last + 1, "missing", link, None, why)
        if row.seq > self.raw.last_seq:
            why = f"it lies beyond event {self.raw.last_seq}, the last one the run's summary records (inserted)"
            return self._break(row.seq, "extra", link, row.link, why)
        own = hashlib.sha256(link + row.data).digest()
        if row.link is None and row.hash is None:
            if self.begins_at is not None:
                why = f"it has no link, but the chain began at event {self.begins_at}"
                return self._break(row.seq, "unlinked", link, None, why)
        else:
            first = self.begins_at is None
            if first:
                self.begins_at = row.seq
            if row.link != link:
                if first and row.seq > 1:
                    why = (
                        f"events 1-{row.seq - 1}, written before the store kept a chain, changed since "
                        "the chain began here"
                    )
                else:
                    why = (
                        "its link is not the hash of the log before it: an event before it was removed, "
                        "inserted or moved, or its link was changed"
                    )
                return self._break(row.seq, "out_of_place", link, row.link, why)
            if row.hash != own:
                why = "its stored bytes do not hash to the hash it was written with: the event was edited"
                return self._break(row.seq, "changed", own, row.hash, why)
        self.hashes.append(own)
        if self.kept is not None and self.kept_at is None and own == self.kept:
            self.kept_at = row.seq
        self.link, self.last = own, row.seq
        return None

    def _check_end(self) -> ChainBreak | None:
        raw, last = self.raw, self.last
        if raw.last_seq > last:
            why = f"{_gap(last + 1, raw.last_seq)} from the store (the run's summary records {raw.last_seq} events)"
            return self._break(last + 1, "missing", self.link, None, why)
        if self.begins_at is not None and raw.head != self.link:
            why = (
                f"the head the run's summary records is not the hash of its last event ({last}): events after "
                "it were removed, or the head was changed"
            )
            return self._break(last, "head", self.link, raw.head, why)
        return None


def _kept(kept: str | None) -> bytes | None:
    if kept is None:
        return None
    try:
        value = bytes.fromhex(kept)
    except (ValueError, TypeError):
        value = b""
    return value if len(value) == 32 else None


def is_head(text: object) -> bool:
    """Whether ``text`` is a head as :func:`verify_chain` reports it: 64 hex digits."""
    return isinstance(text, str) and len(text) == 64 and _kept(text) is not None


async def verify_chain(store: RunStore, run_id: str, *, kept: str | None = None) -> ChainReport:
    """Check run ``run_id``'s chain in ``store``: the first break, or intact with its head.

    ``kept`` is a head reported by an earlier verification (64 hex digits) and kept elsewhere: the
    chain must still pass through it, which a rewrite of the log before it cannot fake. Raises
    :class:`~planexec.UsageError` for a malformed ``kept``, and what ``store.read_raw`` raises.
    An unknown run reports intact with no events.
    """
    check_run_id(run_id)
    if kept is not None and not is_head(kept):
        raise UsageError(
            "cannot verify the chain",
            [Problem(code="kept", where="kept", message=f"{kept!r} is not a head: 64 hex digits")],
        )
    raw = await store.read_raw(run_id)
    return check_chain(raw, kept=None if kept is None else kept.lower())


def raw_events(rows: Sequence[tuple[int, object, object, object]]) -> tuple[RawEvent, ...]:
    """Raw events from database rows of (seq, data, link, hash), whatever types the driver gave."""
    return tuple(
        RawEvent(seq=int(seq), data=_bytes(data) or b"", link=_bytes(link), hash=_bytes(own))
        for seq, data, link, own in rows
    )


def _bytes(value: object) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    return str(value).encode("utf-8", "surrogatepass")
