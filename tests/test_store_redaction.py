"""Redaction: every rule with examples it must and must not touch, configuration, and a planted
secret that never reaches the SQLite file (WAL included) or PostgreSQL's rows."""

from __future__ import annotations

import base64
import hashlib
import json
import random
import re
import string
from collections.abc import Iterator
from pathlib import Path

import pytest

from planexec import UsageError
from planexec.executor import Verdict
from planexec.log import Event, RunStarted, StepStarted, StepSucceeded, ToolCalled
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
    ("bearer_token", "Authorization: ApiKey k-1234567890", "Authorization: ApiKey [REDACTED:bearer_token]"),
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
    "Authorization: Bearer ${MCP_TOKEN}",
    "authorization: Custom ${TEAM_KEY}",
    "max_tokens=100 and token_count: 5 and tokenizer: bert",
    "password: null",
    "AKIA1234",
    "ghp_short",
    "xoxo hugs",
    "a plain sentence with numbers 12345 and 2024-11-21",
]


# -- every common kind of secret -----------------------------------------------------------------------

ALNUM = string.ascii_letters + string.digits
BASE64 = ALNUM + "+/"


def fake(length: int, *, seed: int, alphabet: str = ALNUM) -> str:
    """``length`` characters drawn from ``alphabet``, the same for the same seed."""
    rng = random.Random(seed)
    return "".join(rng.choice(alphabet) for _ in range(length))


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def make_jwt(header: dict[str, str], claims: dict[str, object], signature: bytes) -> str:
    return ".".join(b64url(part) for part in (json.dumps(header).encode(), json.dumps(claims).encode(), signature))


def make_pem(label: str, body: str, *, headers: str = "") -> str:
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    return "\n".join(
        [f"-----BEGIN {label}-----", *([headers, ""] if headers else []), *lines, f"-----END {label}-----"]
    )


JWT = make_jwt({"alg": "HS256", "typ": "JWT"}, {"sub": "user-8812", "iat": 1767225600}, hashlib.sha256(b"k").digest())
UNSIGNED_JWT = make_jwt({"alg": "none"}, {"sub": "user-8812"}, b"")
JWE = ".".join(
    [
        b64url(json.dumps({"alg": "RSA-OAEP", "enc": "A256GCM"}).encode()),  # header
        fake(342, seed=1, alphabet=ALNUM + "-_"),  # encrypted key
        fake(16, seed=2),  # initialisation vector
        fake(120, seed=3, alphabet=ALNUM + "-_"),  # ciphertext
        fake(22, seed=4),  # tag
    ]
)
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
GITHUB_CLASSIC = {
    prefix: prefix + fake(36, seed=10 + i) for i, prefix in enumerate(("ghp_", "gho_", "ghu_", "ghs_", "ghr_"))
}
GITHUB_FINE_GRAINED = f"github_pat_11{fake(20, seed=20)}_{fake(59, seed=21)}"
ANTHROPIC = f"sk-ant-api03-{fake(40, seed=30)}-{fake(30, seed=31)}_{fake(21, seed=32)}AA"
ANTHROPIC_ADMIN = f"sk-ant-admin01-{fake(50, seed=33)}_{fake(40, seed=34)}-AA"
OPENAI_PROJECT = f"sk-proj-{fake(70, seed=40)}-{fake(40, seed=41)}_{fake(44, seed=42)}"
OPENAI_SERVICE = f"sk-svcacct-{fake(60, seed=43)}_{fake(30, seed=44)}-{fake(60, seed=45)}"
OPENAI_ADMIN = f"sk-admin-{fake(50, seed=46)}-{fake(40, seed=47)}"
OPENAI_LEGACY = "sk-" + fake(48, seed=48)
PEM_BODY = base64.b64encode(bytes(random.Random(50).randrange(256) for _ in range(300))).decode()
PRIVATE_KEY_LABELS = (
    "RSA PRIVATE KEY",
    "EC PRIVATE KEY",
    "DSA PRIVATE KEY",
    "OPENSSH PRIVATE KEY",
    "PRIVATE KEY",
    "ENCRYPTED PRIVATE KEY",
    "PGP PRIVATE KEY BLOCK",
)

SAMPLE_SECRETS = {
    "jwt": JWT,
    "aws_secret_key": AWS_SECRET,
    "private_key": PEM_BODY[:48],
    "url_password": "p%40ss!w$rd~*",
    "github_token": GITHUB_CLASSIC["ghp_"],
    "github_fine_grained": GITHUB_FINE_GRAINED,
    "anthropic": ANTHROPIC,
    "openai": OPENAI_PROJECT,
}
"""One secret of each kind the redactor must catch (for a PEM key, a piece of its body)."""


def carrying_every_secret(where: str) -> str:
    """A text that carries each of :data:`SAMPLE_SECRETS` the way it is usually written, some of them
    at the start of a line (which JSON text keeps as an escaped ``\\n``)."""
    return (
        f"{where}: the session token {JWT}; aws secret {AWS_SECRET}.\n"
        f"key:\n{make_pem('PGP PRIVATE KEY BLOCK', PEM_BODY)}\n"
        f"dsn postgresql://:{SAMPLE_SECRETS['url_password']}@db.internal:5432/app and GH={GITHUB_CLASSIC['ghp_']}\n"
        f"{GITHUB_FINE_GRAINED}\n{ANTHROPIC} is the anthropic key, {OPENAI_PROJECT} the openai one"
    )


# (rule, text, what it must become), with every other rule on as well
KINDS = [
    ("jwt", f"the session cookie {JWT} has expired", "the session cookie [REDACTED:jwt] has expired"),
    ("jwt", f'{{"id_token": "{JWT}", "n": 1}}', '{"id_token": "[REDACTED:jwt]", "n": 1}'),
    ("jwt", f"GET /callback?state=7&jwt={JWT}&next=/", "GET /callback?state=7&jwt=[REDACTED:jwt]&next=/"),
    ("jwt", f"{UNSIGNED_JWT} (alg none)", "[REDACTED:jwt] (alg none)"),
    ("jwt", f"encrypted: {JWE}", "encrypted: [REDACTED:jwt]"),
    ("jwt", f'"claims:\\n{JWT}\\n"', '"claims:\\n[REDACTED:jwt]\\n"'),
    ("aws_secret_key", AWS_SECRET, "[REDACTED:aws_secret_key]"),
    ("aws_secret_key", f"rotate {AWS_SECRET}, then redeploy.", "rotate [REDACTED:aws_secret_key], then redeploy."),
    ("aws_secret_key", f'{{"SecretAccessKey": "{AWS_SECRET}"}}', '{"SecretAccessKey": "[REDACTED:aws_secret_key]"}'),
    ("aws_secret_key", f"aws_secret_access_key = {AWS_SECRET}", "aws_secret_access_key = [REDACTED:aws_secret_key]"),
    ("aws_secret_key", f'"[default]\\n{AWS_SECRET}\\n"', '"[default]\\n[REDACTED:aws_secret_key]\\n"'),
    ("aws_secret_key", f"(key:{AWS_SECRET})", "(key:[REDACTED:aws_secret_key])"),
    *[
        ("private_key", f"before\n{make_pem(label, PEM_BODY)}\nafter", "before\n[REDACTED:private_key]\nafter")
        for label in PRIVATE_KEY_LABELS
    ],
    *[
        ("private_key", f"cut off:\n{make_pem(label, PEM_BODY)[:150]}", "cut off:\n[REDACTED:private_key]")
        for label in PRIVATE_KEY_LABELS
    ],
    (
        "private_key",
        make_pem("RSA PRIVATE KEY", PEM_BODY, headers="Proc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,3F1C0A9B"),
        "[REDACTED:private_key]",
    ),
    (
        "private_key",
        json.dumps({"key": make_pem("EC PRIVATE KEY", PEM_BODY), "ok": True}),
        '{"key": "[REDACTED:private_key]", "ok": true}',
    ),
    (
        "private_key",
        f"{make_pem('CERTIFICATE', PEM_BODY)}\n{make_pem('PRIVATE KEY', PEM_BODY)}",
        f"{make_pem('CERTIFICATE', PEM_BODY)}\n[REDACTED:private_key]",
    ),
    (
        "url_password",
        "postgresql://app:p%40ss!w$rd~*@db.internal:5432/app",
        "postgresql://app:[REDACTED:password]@db.internal:5432/app",
    ),
    ("url_password", "redis://:s3cr!t~*$@cache:6379/0", "redis://:[REDACTED:password]@cache:6379/0"),
    (
        "url_password",
        "connecting to mysql://root:Tr0ub4dor&3@10.0.0.5/prod failed after 3 tries",
        "connecting to mysql://root:[REDACTED:password]@10.0.0.5/prod failed after 3 tries",
    ),
    (
        "url_password",
        '{"dsn": "amqp://guest:gu$st!*~@rabbit:5672/vhost", "retries": 3}',
        '{"dsn": "amqp://guest:[REDACTED:password]@rabbit:5672/vhost", "retries": 3}',
    ),
    (
        "url_password",
        '{\\"dsn\\": \\"mongodb://admin:pa$$w0rd@mongo:27017/db\\"}',
        '{\\"dsn\\": \\"mongodb://admin:[REDACTED:password]@mongo:27017/db\\"}',
    ),
    (
        "url_password",
        "OperationalError: could not connect to postgresql://svc:Secr3t!pass@db:5432/x: connection refused",
        "OperationalError: could not connect to postgresql://svc:[REDACTED:password]@db:5432/x: connection refused",
    ),
    ("url_password", "postgres://u:p@ss@host/db", "postgres://u:[REDACTED:password]@host/db"),
    (
        "url_password",
        "smtp://me@example.com:app-pass-123@smtp.example.com:587",
        "smtp://me@example.com:[REDACTED:password]@smtp.example.com:587",
    ),
    ("url_password", "ftp://user:pa:ss@files.example.com/", "ftp://user:[REDACTED:password]@files.example.com/"),
    ("url_password", "redis://:p#ss?word@cache:6379", "redis://:[REDACTED:password]@cache:6379"),
    ("url_password", "[db](postgres://u:pw123@host/db)", "[db](postgres://u:[REDACTED:password]@host/db)"),
    *[
        (
            "github_token",
            f"git clone https://{token}@github.com/org/repo",
            "git clone https://[REDACTED:github_token]@github.com/org/repo",
        )
        for token in GITHUB_CLASSIC.values()
    ],
    ("github_token", f"GH_TOKEN={GITHUB_FINE_GRAINED}", "GH_TOKEN=[REDACTED:github_token]"),
    ("github_token", f"{GITHUB_FINE_GRAINED}.", "[REDACTED:github_token]."),
    ("github_token", f'"out\\n{GITHUB_CLASSIC["gho_"]}"', '"out\\n[REDACTED:github_token]"'),
    ("api_key", f"ANTHROPIC_API_KEY={ANTHROPIC}", "ANTHROPIC_API_KEY=[REDACTED:api_key]"),
    ("api_key", f"x-api-key: {ANTHROPIC_ADMIN}", "x-api-key: [REDACTED:api_key]"),
    ("api_key", f'{{"key": "{OPENAI_PROJECT}"}}', '{"key": "[REDACTED:api_key]"}'),
    ("api_key", f"OpenAI(api_key='{OPENAI_SERVICE}')", "OpenAI(api_key='[REDACTED:api_key]')"),
    ("api_key", f"admin {OPENAI_ADMIN}", "admin [REDACTED:api_key]"),
    ("api_key", f"legacy {OPENAI_LEGACY}.", "legacy [REDACTED:api_key]."),
    ("api_key", f'"text\\n{OPENAI_PROJECT}"', '"text\\n[REDACTED:api_key]"'),
    ("aws_access_key", '"ids:\\nAKIAIOSFODNN7EXAMPLE"', '"ids:\\n[REDACTED:aws_access_key]"'),
    ("slack_token", '"\\txoxb-123456789012-abcdefghijkl"', '"\\t[REDACTED:slack_token]"'),
    ("bearer_token", '"headers:\\nBearer abcd1234efgh5678"', '"headers:\\nBearer [REDACTED:bearer_token]"'),
    (
        "secret_assignment",
        '{\\"password\\": \\"hunter22\\", \\"n\\": 1}',
        '{\\"password\\": \\"[REDACTED:secret]\\", \\"n\\": 1}',
    ),
]

GIT_SHA = hashlib.sha1(b"planexec").hexdigest()
SHA256_HEX = hashlib.sha256(b"planexec").hexdigest()
DIGEST = hashlib.sha256(b"planexec").digest()

LOOKALIKES = [
    GIT_SHA,
    GIT_SHA.upper(),
    f"commit {GIT_SHA} (HEAD -> main)",
    SHA256_HEX,
    f"docker.io/library/python@sha256:{SHA256_HEX}",
    "f47ac10b-58cc-4372-a567-0e02b2c3d479",
    "F47AC10B-58CC-4372-A567-0E02B2C3D479",
    "1.24.3-rc.1+build.5",
    "v2.0.0",
    "2024-11-21T12:30:45.123456+00:00",
    "2026-03-01",
    base64.b64encode(DIGEST).decode(),  # 44 characters, padded
    base64.b64encode(DIGEST[:28]).decode(),  # 40 characters with ==
    base64.b64encode(DIGEST[:29]).decode(),  # 40 characters with =
    base64.b64encode(DIGEST + DIGEST[:1]).decode(),  # 44 characters, unpadded
    base64.b64encode(DIGEST * 2).decode(),  # 88 characters
    base64.b64encode(DIGEST[:15]).decode(),  # 20 characters
    "Pneumonoultramicroscopicsilicovolcanoconiosis",
    "Supercalifragilisticexpialidocious",
    "ConfigurationManagerFactoryBuilderV2Impl",
    "HTTPServerRequestHandlerFactory2Builder1",
    "Users/John/Documents/Project2024Backups1",
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHqLJv0P3kT2cWbJ7oZ8Yz4nR1sXq5mDfE6uVwT9aB2c ops@build",
]
"""Ordinary values that look a little like secrets and must come back unchanged."""

KIND_NEGATIVES = [
    *LOOKALIKES,
    "eyJhbGciOiJIUzI1NiJ9",  # a JWT header alone
    "monkeyJump.example.com and a.b.c",
    "sk-this-is-not-a-key-at-all-really-no",
    "risk-assessment-for-the-quarterly-review-2024",
    "desk-lamp and sk-learn",
    "ghp_" + "x" * 20,
    f"x{AWS_SECRET}",  # 41 characters
    f"{AWS_SECRET}==",
    f"{AWS_SECRET}-suffix",
    f"/prefix/{AWS_SECRET}",
    fake(40, seed=60, alphabet="0123456789abcdef"),
    fake(40, seed=61, alphabet=string.ascii_lowercase + string.digits),
    fake(40, seed=62, alphabet=string.ascii_uppercase + string.digits),
    *[make_pem(label, PEM_BODY) for label in ("CERTIFICATE", "PUBLIC KEY", "RSA PUBLIC KEY", "PGP PUBLIC KEY BLOCK")],
    make_pem("SSH2 PUBLIC KEY", PEM_BODY),
    "ssh://git@github.com:22/org/repo.git",
    "https://mastodon.social/@alice",
    "https://example.com:443/@alice/posts",
    "http://[::1]:8080/health",
    "git@github.com:org/repo.git",
    "http://localhost:3000 and admin@example.com",
    "see https://example.com/a:b@c",
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
    named = {name for name, _, _ in SECRET_POSITIVES + KINDS + PII_POSITIVES}
    assert named == {r.name for r in SECRET_RULES + PII_RULES}


@pytest.mark.parametrize(("rule", "text", "expected"), SECRET_POSITIVES + KINDS)
def test_secret_rules_redact(rule: str, text: str, expected: str) -> None:
    assert Redactor().redact_text(text) == expected
    # the rule alone does it, and switching it off leaves the text as it was
    only = Redactor(secrets=False, rules=[r for r in SECRET_RULES if r.name == rule])
    assert only.redact_text(text) == expected
    assert Redactor(disable=[rule]).redact_text(text) != expected


@pytest.mark.parametrize("text", SECRET_NEGATIVES + KIND_NEGATIVES)
def test_secret_rules_leave_ordinary_text_alone(text: str) -> None:
    assert Redactor().redact_text(text) == text


def test_bare_aws_secret_keys_are_caught_and_hex_is_not() -> None:
    redactor = Redactor()
    keys = [fake(40, seed=seed, alphabet=BASE64) for seed in range(2_000)]
    caught = [k for k in keys if redactor.redact_text(f"key {k}.") == "key [REDACTED:aws_secret_key]."]
    assert len(caught) >= 0.995 * len(keys), "a random key passes the heuristic 99.7 % of the time"
    for alphabet in ("0123456789abcdef", "0123456789ABCDEF", string.ascii_lowercase + string.digits):
        values = [fake(40, seed=seed, alphabet=alphabet) for seed in range(500)]
        assert [v for v in values if redactor.redact_text(v) != v] == []


def test_lookalikes_inside_text_and_json_come_back_unchanged() -> None:
    redactor = Redactor()
    text = " ".join(LOOKALIKES)
    assert redactor.redact_text(text) == text
    assert redactor.redact_text(json.dumps(LOOKALIKES)) == json.dumps(LOOKALIKES)
    assert redactor.redact({"values": LOOKALIKES}) == {"values": LOOKALIKES}


def test_every_sample_secret_is_gone_from_a_text_carrying_them_all() -> None:
    for text in (carrying_every_secret("goal"), json.dumps({"note": carrying_every_secret("output")})):
        redacted = Redactor().redact_text(text)
        for kind, secret in SAMPLE_SECRETS.items():
            assert secret not in redacted, kind
        for label in ("jwt", "aws_secret_key", "private_key", "password", "github_token", "api_key"):
            assert f"[REDACTED:{label}]" in redacted, label


def test_every_built_in_rule_can_be_skipped_cheaply() -> None:
    for rule in SECRET_RULES + PII_RULES:
        assert rule.hints, rule.name
        assert rule.min_length > 0, rule.name


@pytest.mark.parametrize("rule", SECRET_RULES + PII_RULES, ids=lambda r: r.name)
def test_hints_and_min_length_never_hide_a_match(rule: RedactionRule) -> None:
    positives = [t for _, t, _ in SECRET_POSITIVES + KINDS + PII_POSITIVES]
    negatives = SECRET_NEGATIVES + KIND_NEGATIVES + PII_NEGATIVES
    for text in [*positives, *negatives, carrying_every_secret("x")]:
        if rule.apply(text) != text:
            assert rule.may_match(text.lower()), (rule.name, text)


def test_a_string_without_hints_or_too_short_is_not_searched() -> None:
    seen: list[str] = []

    def record(text: str) -> bool:
        seen.append(text)
        return True

    rule = RedactionRule(name="anything", pattern=r"(?s).+", validator=record, hints=["zz"], min_length=6)
    redactor = Redactor(secrets=False, rules=[rule])
    assert redactor.redact_text("no hint in this fairly long text") == "no hint in this fairly long text"
    assert redactor.redact_text("zz 1") == "zz 1"  # shorter than min_length
    assert seen == []
    assert redactor.redact_text("zz 1234") == "[REDACTED:anything]"
    assert seen == ["zz 1234"]
    # a rule without hints is tried on every string long enough for it
    bare = Redactor(secrets=False, rules=[RedactionRule(name="any", pattern=r"\d{3}", min_length=3)])
    assert bare.redact_text("12") == "12"
    assert bare.redact_text("a 123") == "a [REDACTED:any]"


def test_a_one_word_rule_needs_a_word_that_long() -> None:
    seen: list[str] = []

    def record(text: str) -> bool:
        seen.append(text)
        return True

    rule = RedactionRule(name="long", pattern=r"\S{12,}", validator=record, min_length=12, one_word=True)
    redactor = Redactor(secrets=False, rules=[rule])
    assert redactor.redact_text("many short words, none of them long") == "many short words, none of them long"
    assert seen == []
    assert redactor.redact_text("one word is abcdefghijkl long") == "one word is [REDACTED:long] long"
    assert rule.may_match("one word is abcdefghijkl long")
    assert not rule.may_match("many short words, none of them long")


def test_base64_of_exactly_thirty_bytes_is_taken_for_a_key() -> None:
    """The one look-alike the bare AWS rule cannot tell apart (documented in the rule table)."""
    thirty = base64.b64encode(DIGEST[:30]).decode()
    assert len(thirty) == 40
    assert Redactor().redact_text(thirty) == "[REDACTED:aws_secret_key]"


def test_a_rule_for_very_long_matches_is_tried_only_on_texts_that_long() -> None:
    rule = RedactionRule(name="essay", pattern=r"(?s)essay:.{300,}", hints=["essay:"], min_length=306)
    redactor = Redactor(secrets=False, rules=[rule])
    short = "essay: " + "x" * 280
    assert redactor.redact_text(short) == short
    assert redactor.redact_text("essay: " + "x" * 320) == "[REDACTED:essay]"


def test_min_length_must_not_be_negative() -> None:
    with pytest.raises(UsageError, match="min_length"):
        RedactionRule(name="x", pattern="x", min_length=-1)


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
PLANTED_LABELS = [
    "api_key",
    "aws_access_key",
    "aws_secret_key",
    "bearer_token",
    "github_token",
    "jwt",
    "password",
    "private_key",
    "secret",
]
"""The placeholders the planted run leaves behind."""


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
                "kinds": carrying_every_secret(MARKER),
            },
        ),
        StepSucceeded(
            at=4.0, step_id="s", output=json.dumps({"log": carrying_every_secret(MARKER)}), verdict=Verdict(passed=True)
        ),
    ]


def assert_nothing_planted(raw: bytes) -> None:
    for name, secret in (PLANTED | SAMPLE_SECRETS).items():
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
    for label in PLANTED_LABELS:
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
