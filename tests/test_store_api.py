"""The public names of planexec.store are pinned."""

from __future__ import annotations

import planexec.store

PUBLIC = [
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


def test_public_names_are_pinned() -> None:
    """Adding or removing a public name is an API change: update this list on purpose."""
    assert sorted(planexec.store.__all__) == sorted(PUBLIC)
    assert len(set(planexec.store.__all__)) == len(planexec.store.__all__)
    for name in planexec.store.__all__:
        assert getattr(planexec.store, name, None) is not None, name


def test_every_backend_is_a_run_store() -> None:
    for cls in (planexec.store.MemoryStore, planexec.store.SQLiteStore, planexec.store.PostgresStore):
        methods = ("append", "read", "read_raw", "last_seq", "get_run", "list_runs", "delete", "expire", "close")
        for method in (*methods, "queue", "plan_memory"):
            assert callable(getattr(cls, method)), f"{cls.__name__}.{method}"
    assert issubclass(planexec.store.AppendConflict, planexec.PlanexecError)
