"""Redaction: every rule with examples it must and must not touch, configuration, and a planted
secret that never reaches the SQLite file (WAL included) or PostgreSQL's rows."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from planexec import UsageError, Verdict
from planexec.runtime import Event, RunStarted, StepStarted, StepSucceeded, ToolCalled
from planexec.store import (
    PII_RULES,
    SECRET_RULES,
    MemoryStore,
    PostgresStore,
    RedactionRule,
    Redactor,
    SQLiteStore,
    luhn_valid,
)
from tests.test_store_support import BACKENDS, Backend, make_backend

PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7planted\nq8d0Zx==\n-----END RSA PRIVATE KEY-----"

# (rule, text, what it must become)
SECRET_POSITIVES = [
    ("private_key", f"key:\n{PEM}\ndone", "key:\n[REDACTED:private_key]\ndone"),
    ("private_key", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1r", "[REDACTED:private_key]"),
    ("private_key", "-----BEGIN PRIVATE KEY-----\nMIIEv\n-----END PRIVATE KEY-----", "[REDACTED:private_key]"),
    (
        "url_password",
        "postgresql://app:hunter2@db.example.com:5432/x",
        "postgresql://app:[REDACTED:password]@db.example.com:5432/x",
    ),
    ("url_password", "redis://:s3cret@cache:6379/0", "redis://:[REDACTED:password]@cache:6379/0"),
    (
        "bearer_token",
        "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOjF9.c2ln",
        "Authorization: Bearer [REDACTED:bearer_token]",
    ),
    ("bearer_token", "authorization=Basic dXNlcjpwYXNz", "authorization=Basic [REDACTED:bearer_token]"),
    ("bearer_token", "-H 'Authorization: token abcd1234efgh'", "-H 'Authorization: token [REDACTED:bearer_token]'"),
    ("bearer_token", "use bearer abcd1234efgh5678 here", "use bearer [REDACTED:bearer_token] here"),
    ("api_key", "key sk-abcdefghijklmnopqrstuvwxyz012345", "key [REDACTED:api_key]"),
    ("api_key", "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz_0123456789-xyz", "[REDACTED:api_key]"),
    ("api_key", "(sk-proj-abcdefghijklmnopqrstuvwx)", "([REDACTED:api_key])"),
    ("api_key", "stripe sk_live_4eC39HqLyjWDarjtT1zdp7dc", "stripe [REDACTED:api_key]"),
    ("api_key", "AIzaSyA-abcdefghijklmnopqrstuvwxyz01234", "[REDACTED:api_key]"),
    ("aws_access_key", "id AKIAIOSFODNN7EXAMPLE.", "id [REDACTED:aws_access_key]."),
    ("aws_access_key", "ASIAY34FZKBOKMUTVV7A", "[REDACTED:aws_access_key]"),
    ("github_token", "ghp_abcdefghijklmnopqrstuvwxyz0123456789", "[REDACTED:github_token]"),
    ("github_token", "github_pat_11ABCDEFG0123456789_abcdefghijklmnop", "[REDACTED:github_token]"),
    ("slack_token", "xoxb-123456789012-abcdefghijkl", "[REDACTED:slack_token]"),
    ("slack_token", "xoxp-1-2-3-abcdef0123", "[REDACTED:slack_token]"),
    ("secret_assignment", "api_key=abc123def456", "api_key=[REDACTED:secret]"),
    ("secret_assignment", 'config {"client_secret": "s3cr3t-value"}', 'config {"client_secret": "[REDACTED:secret]"}'),
    ("secret_assignment", "PASSWORD = 'hunter22'", "PASSWORD = '[REDACTED:secret]'"),
    ("secret_assignment", "export GITLAB_TOKEN=zzzz9999", "export GITLAB_TOKEN=[REDACTED:secret]"),
]

SECRET_NEGATIVES = [
    "sk-short",
    "ask-me-anything-about-this-long-topic-please",
    "https://example.com:8080/path?x=1",
    "https://user@example.com/repo.git",
    "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkq\n-----END PUBLIC KEY-----",
    "-----BEGIN CERTIFICATE-----\nMIIDdzCCAl+g\n-----END CERTIFICATE-----",
    "bearer instruments and Bearer tokens in general",
    "Authorization required",
    "max_tokens=100 and token_count: 5 and tokenizer: bert",
    "password: null",
    "AKIA1234",
    "ghp_short",
    "xoxo hugs",
    "a plain sentence with numbers 12345 and 2024-11-21",
]

PII_POSITIVES = [
    ("card_number", "card 4111 1111 1111 1111 ok", "card [REDACTED:card_number] ok"),
    ("card_number", "5555555555554444", "[REDACTED:card_number]"),
    ("card_number", "amex 3782-822463-10005", "amex [REDACTED:card_number]"),
    ("iban", "IBAN DE89 3704 0044 0532 0130 00.", "IBAN [REDACTED:iban]."),
    ("iban", "GB82WEST12345698765432", "[REDACTED:iban]"),
    ("us_ssn", "ssn 123-45-6789", "ssn [REDACTED:us_ssn]"),
    ("uk_nino", "NI number AB 12 34 56 C", "NI number [REDACTED:uk_nino]"),
    ("uk_nino", "AB123456C", "[REDACTED:uk_nino]"),
    ("es_dni", "DNI 12345678Z", "DNI [REDACTED:es_dni]"),
    ("es_dni", "NIE X1234567L", "NIE [REDACTED:es_dni]"),
    ("email", "write to john.doe+x@example.co.uk.", "write to [REDACTED:email]."),
    ("phone", "call +1 415 555 0123", "call [REDACTED:phone]"),
    ("phone", "(415) 555-0123", "[REDACTED:phone]"),
    ("phone", "415-555-0123", "[REDACTED:phone]"),
    ("phone", "+44 20 7946 0958", "[REDACTED:phone]"),
    ("phone", "+14155550123", "[REDACTED:phone]"),
    ("phone", "06 12 34 56 78", "[REDACTED:phone]"),
]

PII_NEGATIVES = [
    "4111 1111 1111 1112",  # fails the Luhn check
    "4111111111111112",
    "DE89 3704 0044 0532 0130 01",  # fails the mod-97 check
    "000-12-3456",  # not a valid SSN
    "666-12-3456",
    "123-00-6789",
    "BG123456A",  # not a valid NI prefix
    "AB123456E",
    "12345678A",  # wrong DNI check letter
    "user@localhost and @handle and a@b",
    "192.168.100.200",
    "1 000 000 000",
    "2024-11-21 12:30:45",
    "v1.2.3",
    "4155550123",
    "order 12345, 3.14159",
]


def test_every_built_in_rule_has_a_positive_example() -> None:
    named = {name for name, _, _ in SECRET_POSITIVES + PII_POSITIVES}
    assert named == {r.name for r in SECRET_RULES + PII_RULES}


@pytest.mark.parametrize(("rule", "text", "expected"), SECRET_POSITIVES)
def test_secret_rules_redact(rule: str, text: str, expected: str) -> None:
    assert Redactor().redact_text(text) == expected
    # the rule alone does it, and switching it off leaves the text as it was
    only = Redactor(secrets=False, rules=[r for r in SECRET_RULES if r.name == rule])
    assert only.redact_text(text) == expected
    assert Redactor(disable=[rule]).redact_text(text) != expected


@pytest.mark.parametrize("text", SECRET_NEGATIVES)
def test_secret_rules_leave_ordinary_text_alone(text: str) -> None:
    assert Redactor().redact_text(text) == text


@pytest.mark.parametrize(("rule", "text", "expected"), PII_POSITIVES)
def test_pii_rules_redact_when_asked(rule: str, text: str, expected: str) -> None:
    assert Redactor().redact_text(text) == text, "PII rules are off by default"
    assert Redactor(pii=True).redact_text(text) == expected
    only = Redactor(secrets=False, rules=[r for r in PII_RULES if r.name == rule])
    assert only.redact_text(text) == expected


@pytest.mark.parametrize("text", PII_NEGATIVES)
def test_pii_rules_leave_ordinary_text_alone(text: str) -> None:
    assert Redactor(pii=True).redact_text(text) == text


@pytest.mark.parametrize(
    ("number", "valid"),
    [("4111111111111111", True), ("4111 1111 1111 1112", False), ("79927398713", True), ("79927398710", False)],
)
def test_luhn(number: str, valid: bool) -> None:
    assert luhn_valid(number) is valid


def test_only_luhn_valid_card_numbers_are_redacted() -> None:
    redactor = Redactor(pii=True, disable=["phone"])
    base = "4539 1488 0343 646"
    for last in range(10):
        number = f"{base}{last}"
        redacted = redactor.redact_text(number) == "[REDACTED:card_number]"
        assert redacted is luhn_valid(number), number
    assert sum(luhn_valid(f"{base}{last}") for last in range(10)) == 1


def test_json_data_is_redacted_everywhere_keys_included() -> None:
    data = {
        "v": 2,
        "event": {
            "note": "mail me at ann@example.org",
            "ann@example.org": ["sk-abcdefghijklmnopqrstuvwxyz0123"],
            "headers": {"Authorization": "Basic abc", "Accept": "text/plain"},
            "password": "hunter2",
            "max_tokens": 100,
            "nested": [{"api_key": "value-1"}, {"token": ""}],
        },
    }
    out = Redactor(pii=True).redact(data)
    assert out == {
        "v": 2,
        "event": {
            "note": "mail me at [REDACTED:email]",
            "[REDACTED:email]": ["[REDACTED:api_key]"],
            "headers": {"Authorization": "[REDACTED:secret]", "Accept": "text/plain"},
            "password": "[REDACTED:secret]",
            "max_tokens": 100,
            "nested": [{"api_key": "[REDACTED:secret]"}, {"token": ""}],
        },
    }
    assert data["event"]["password"] == "hunter2", "the input is not changed"  # type: ignore[index]


def test_sensitive_fields_can_be_switched_off_or_changed() -> None:
    data = {"password": "hunter2", "pin": "1234"}
    assert Redactor(sensitive_fields=None).redact(data) == data
    assert Redactor(sensitive_fields=r"^pin$").redact(data) == {"password": "hunter2", "pin": "[REDACTED:secret]"}


def test_custom_rules_with_a_group_a_validator_and_a_label() -> None:
    ticket = RedactionRule(name="ticket", pattern=r"\bTCK-(?P<secret>\d{6})\b", validator=lambda s: s != "000000")
    badge = RedactionRule(name="badge", pattern=re.compile(r"badge #\d+", re.IGNORECASE), label="employee")
    redactor = Redactor(rules=[ticket, badge])
    assert redactor.redact_text("see TCK-123456 and TCK-000000") == "see TCK-[REDACTED:ticket] and TCK-000000"
    assert redactor.redact_text("BADGE #42") == "[REDACTED:employee]"
    assert redactor.redact_text("sk-abcdefghijklmnopqrstuvwxyz0123") == "[REDACTED:api_key]"
    assert Redactor(rules=[ticket], disable=["ticket"]).redact_text("TCK-123456") == "TCK-123456"


def test_custom_rules_with_inline_flags_and_backreferences() -> None:
    quoted = RedactionRule(name="quoted", pattern=r"(?P<q>['\"])classified:[^'\"]+(?P=q)")
    shout = RedactionRule(name="shout", pattern=r"(?i)codeword \w+")
    redactor = Redactor(secrets=False, rules=[quoted, shout])
    assert redactor.redact_text("""a 'classified:x' b""") == "a [REDACTED:quoted] b"
    assert redactor.redact_text("CODEWORD falcon") == "[REDACTED:shout]"
    assert redactor.redact_text("nothing here") == "nothing here"


def test_unknown_rule_names_are_reported_with_the_known_ones() -> None:
    with pytest.raises(UsageError) as caught:
        Redactor(disable=["phone_number", "api_key"])
    message = str(caught.value)
    assert "phone_number" in message
    assert "api_key" not in message.split("known rules")[0]
    assert "email" in message  # known names are listed, PII ones included


def test_off_changes_nothing() -> None:
    text = f"sk-abcdefghijklmnopqrstuvwxyz0123 {PEM}"
    assert Redactor.off().redact_text(text) == text
    assert Redactor.off().redact({"password": text}) == {"password": text}
    assert not Redactor.off().active


# -- nothing secret reaches the store -------------------------------------------------------------------

PLANTED = {
    "openai": "sk-proj-PLANTEDsecretVALUE0123456789abcdef",
    "aws": "AKIAPLANTEDSECRET123",
    "password": "PlantedPassw0rd",
    "field": "planted-field-value-77",
    "pem": "MIIEplantedPEMbody0000",
    "bearer": "plantedBearer0123456789",
}
MARKER = "visible-marker-2718"


def planted_run(run_id: str) -> list[Event]:
    return [
        RunStarted(at=1.0, run_id=run_id, goal=f"use {PLANTED['openai']} to {MARKER}", budget={}),
        StepStarted(
            at=2.0,
            step_id="s",
            executor="tools",
            tool="http",
            args={"url": f"postgresql://svc:{PLANTED['password']}@db.internal/app", "api_key": PLANTED["field"]},
        ),
        ToolCalled(
            at=3.0,
            step_id="s",
            call_id="c",
            tool="http",
            args={"headers": [f"Authorization: Bearer {PLANTED['bearer']}"]},
            output={
                "body": f"{MARKER} creds: {PLANTED['aws']}",
                "key": f"-----BEGIN PRIVATE KEY-----\n{PLANTED['pem']}\n-----END PRIVATE KEY-----",
            },
        ),
        StepSucceeded(at=4.0, step_id="s", output=f"{MARKER} ok", verdict=Verdict(passed=True)),
    ]


def assert_nothing_planted(raw: bytes) -> None:
    for name, secret in PLANTED.items():
        assert secret.encode() not in raw, f"the planted {name} secret was written"


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    with make_backend(request.param, tmp_path) as b:
        yield b


async def test_read_back_shows_placeholders(backend: Backend) -> None:
    store = backend.open()
    try:
        await store.append("r", planted_run("r"), expected_seq=0)
        text = repr([s.event for s in await store.read("r")]) + repr(await store.get_run("r"))
    finally:
        await store.close()
    assert_nothing_planted(text.encode())
    assert MARKER in text
    for label in ("api_key", "aws_access_key", "password", "secret", "private_key", "bearer_token"):
        assert f"[REDACTED:{label}]" in text, label


def _sqlite_files(path: Path) -> dict[str, bytes]:
    """The database file and its -wal and -shm files, those that exist, by suffix."""
    files = {suffix: Path(f"{path}{suffix}") for suffix in ("", "-wal", "-shm")}
    return {suffix: p.read_bytes() for suffix, p in files.items() if p.exists()}


def _sqlite_bytes(path: Path) -> bytes:
    return b"".join(_sqlite_files(path).values())


async def test_a_planted_secret_never_reaches_the_sqlite_file(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    store = SQLiteStore(path)
    try:
        await store.append("r", planted_run("r"), expected_seq=0)
        files = _sqlite_files(path)
        assert MARKER.encode() in files["-wal"], "while the store is open, the events are in the WAL"
        while_open = b"".join(files.values())
    finally:
        await store.close()
    after_close = _sqlite_bytes(path)
    for raw in (while_open, after_close):
        assert_nothing_planted(raw)
        assert MARKER.encode() in raw, "the check must see the data it looks through"


async def test_personal_data_stays_out_of_the_file_when_asked(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    events = [RunStarted(at=1.0, run_id="r", goal="mail ann@example.org about 4111 1111 1111 1111", budget={})]
    store = SQLiteStore(path, redactor=Redactor(pii=True))
    try:
        await store.append("r", events, expected_seq=0)
    finally:
        await store.close()
    raw = _sqlite_bytes(path)
    assert b"ann@example.org" not in raw
    assert b"4111 1111" not in raw
    assert b"[REDACTED:email]" in raw


async def test_a_planted_secret_never_reaches_postgresql(tmp_path: Path) -> None:
    import psycopg

    with make_backend("postgres", tmp_path) as backend:
        assert backend.url is not None
        store = backend.open()
        assert isinstance(store, PostgresStore)
        try:
            await store.append("r", planted_run("r"), expected_seq=0)
        finally:
            await store.close()
        with psycopg.connect(backend.url) as conn:
            rows = conn.execute("SELECT e::text FROM planexec_events AS e").fetchall()
            rows += conn.execute("SELECT r::text FROM planexec_runs AS r").fetchall()
    raw = "\n".join(row[0] for row in rows).encode()
    assert_nothing_planted(raw)
    assert MARKER.encode() in raw


async def test_memory_store_keeps_only_redacted_text() -> None:
    store = MemoryStore()
    await store.append("r", planted_run("r"), expected_seq=0)
    raw = "".join(str(v) for v in store._logs.values()).encode()
    assert_nothing_planted(raw)
    assert MARKER.encode() in raw
    await store.close()
