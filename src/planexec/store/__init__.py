"""Durable run logs: one interface, three backends, redaction before anything is written.

    open_store()                       # $PLANEXEC_STORE, else ~/.local/share/planexec/runs.db
    open_store("sqlite:///tmp/r.db")   # SQLiteStore: one file, WAL, no server (the default)
    open_store("postgresql://…")       # PostgresStore: needs the postgres extra
    open_store("memory://")            # MemoryStore: for tests

Every backend implements :class:`RunStore` and passes the same conformance suite. Besides the
logs, a store says what it offers — ``durable``, ``queue()`` (the workers' :class:`RunQueue`,
PostgreSQL only) and ``plan_memory()`` (where plan memory keeps its entries:
:class:`PlanMemoryBackend`) — so that nothing outside this package asks which class it is.

Every stored event carries the hash of the log before it, a chain computed by the store as it
appends, over the bytes it writes (after redaction): :func:`verify_chain` checks a run's chain and
names the first event where it breaks, or reports it intact with its head, to keep elsewhere.

Failures are typed the same way everywhere (see :mod:`planexec.store._base`): a store that cannot
be reached, times out, refuses a write or is damaged raises :class:`~planexec.StoreError`, whose
message names the store with its password hidden; a log with events that cannot be read raises
:class:`~planexec.LogUnreadable` from ``read``, holding the events that can. Timeouts:
``SQLiteStore(busy_timeout=30)`` for a lock held elsewhere; ``PostgresStore(connect_timeout=10,
statement_timeout=30)``, also settable in the URL (``?connect_timeout=10&options=-c%20statement_timeout%3D30s``).
"""

from planexec.store._base import AppendConflict, RunStatus, RunStore, RunSummary, StoredEvent
from planexec.store._chain import ChainBreak, ChainProblem, ChainReport, RawEvent, RawLog, check_chain, verify_chain
from planexec.store._failures import safe_url
from planexec.store._memory import MemoryStore
from planexec.store._plan_memory import EntryChange, PlanMemoryBackend
from planexec.store._postgres import PostgresStore
from planexec.store._queue import Claim, QueueEntry, QueueState, RunQueue, Told
from planexec.store._redact import PII_RULES, SECRET_RULES, SENSITIVE_FIELDS, RedactionRule, Redactor, luhn_valid
from planexec.store._signals import Feed, Fresh
from planexec.store._sqlite import SQLiteStore
from planexec.store._url import default_store_path, open_store, plan_memory_at

__all__ = [
    "PII_RULES",
    "SECRET_RULES",
    "SENSITIVE_FIELDS",
    "AppendConflict",
    "ChainBreak",
    "ChainProblem",
    "ChainReport",
    "Claim",
    "EntryChange",
    "Feed",
    "Fresh",
    "MemoryStore",
    "PlanMemoryBackend",
    "PostgresStore",
    "QueueEntry",
    "QueueState",
    "RawEvent",
    "RawLog",
    "RedactionRule",
    "Redactor",
    "RunQueue",
    "RunStatus",
    "RunStore",
    "RunSummary",
    "SQLiteStore",
    "StoredEvent",
    "Told",
    "check_chain",
    "default_store_path",
    "luhn_valid",
    "open_store",
    "plan_memory_at",
    "safe_url",
    "verify_chain",
]
