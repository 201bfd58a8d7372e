"""Redaction: secrets (and, when asked, personal data) are replaced before an event is written.

Every store passes each serialized event through a :class:`Redactor` before it touches memory,
a file or a database, so a key pasted into a goal or returned by a tool never reaches disk. The
redactor walks the event's JSON data and applies its rules to every string, dictionary keys
included; a match becomes a typed placeholder such as ``[REDACTED:api_key]``. Where a rule has a
group named ``secret`` only that group is replaced, so ``postgresql://app:hunter2@db/x`` becomes
``postgresql://app:[REDACTED:password]@db/x`` and stays readable.

Rules (applied in this order; each is a name, a regular expression, an optional validator that
must accept the match, and the label its placeholder shows):

Secrets, on by default (``Redactor(secrets=False)`` turns them off):
    private_key        PEM private keys, ``-----BEGIN … PRIVATE KEY-----`` up to its END line
                       (or to the end of the text when the END line is missing)
    url_password       the password in ``scheme://user:password@host``         → ``password``
    bearer_token       ``Authorization: <scheme> <credentials>`` and ``Bearer <token>``
    api_key            provider keys: ``sk-…``, ``sk-ant-…``, ``sk-proj-…``, ``sk_live_…``/``rk_live_…``,
                       ``AIza…``, ``glpat-…``, ``hf_…``
    aws_access_key     ``AKIA…``/``ASIA…`` access key ids
    github_token       ``ghp_…``, ``gho_…``, ``ghu_…``, ``ghs_…``, ``ghr_…``, ``github_pat_…``
    slack_token        ``xoxb-…``, ``xoxp-…`` and the other ``xox?-`` forms
    secret_assignment  ``api_key=…``, ``token: …``, ``password = "…"``, ``client_secret=…`` and similar
                       (the value only)                                        → ``secret``

Personal data, off by default (``Redactor(pii=True)`` turns them on):
    iban               international bank account numbers whose mod-97 check passes
    card_number        13–19 digit card numbers (spaces or dashes allowed) that start like a
                       card network's (2–6) and pass the Luhn check — and only those
    us_ssn             US social security numbers written ``123-45-6789``
    uk_nino            UK national insurance numbers (``AB 12 34 56 C``)
    es_dni             Spanish DNI/NIE numbers whose check letter is right (``12345678Z``)
    email              e-mail addresses
    phone              phone numbers: ``+`` and 8–15 digits, or 10–15 digits in groups separated by
                       spaces, dots or dashes, or with an area code in parentheses (IPv4 addresses,
                       dates, thousands and bare digit runs are left alone)

Besides the text rules, the value of any dictionary entry whose key names a secret (``password``,
``api_key``, ``token``, ``client_secret``, ``authorization``, … — see ``SENSITIVE_FIELDS``) is
replaced whole with ``[REDACTED:secret]``; pass ``sensitive_fields=None`` to turn that off.

Configuring::

    Redactor()                                   # secrets only (the default of every store)
    Redactor(pii=True)                           # secrets and personal data
    Redactor(pii=True, disable=["phone"])        # … without the phone rule
    Redactor(rules=[RedactionRule(name="ticket", pattern=r"\\bTCK-\\d{6}\\b", hints=["tck-"])])  # plus yours
    Redactor.off()                               # nothing is redacted

A rule's ``hints`` (text every match contains) let the redactor skip strings cheaply; a custom
rule without hints is tried on every string. Custom rules run after the built-in ones. Any rule
can be switched off by name with ``disable``; an unknown name is a :class:`~planexec.UsageError`
that lists the known ones. Rules are heuristics: they are tuned to miss little that looks like a
secret, and to leave ordinary numbers, dates, versions and addresses alone. Redaction is one-way:
the log keeps the placeholder, so a replay or a resumed run sees ``[REDACTED:…]`` where the
secret was.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from planexec._errors import Problem, UsageError

__all__ = ["PII_RULES", "SECRET_RULES", "SENSITIVE_FIELDS", "RedactionRule", "Redactor", "luhn_valid"]

Validator = Callable[[str], bool]


class RedactionRule:
    """One named pattern. ``validator`` (given the matched secret) must return True for a match to
    count; ``label`` is shown in the placeholder and defaults to ``name``. ``hints`` are optional
    pieces of text of which every match contains at least one (compared case-insensitively): a
    string without any of them is not searched, which keeps redaction cheap."""

    __slots__ = ("_hint_pattern", "hints", "label", "name", "pattern", "validator")

    def __init__(
        self,
        *,
        name: str,
        pattern: str | re.Pattern[str],
        validator: Validator | None = None,
        label: str | None = None,
        hints: Sequence[str] = (),
    ) -> None:
        if not name:
            raise UsageError("a redaction rule needs a name")
        self.name = name
        self.pattern: re.Pattern[str] = re.compile(pattern) if isinstance(pattern, str) else pattern
        self.validator = validator
        self.label = label or name
        self.hints: tuple[str, ...] = tuple(h.lower() for h in hints)
        self._hint_pattern = _any_of(self.hints)

    def may_match(self, lowered: str) -> bool:
        """False when ``lowered`` (a text in lower case) contains none of the hints: no match is possible."""
        return self._hint_pattern is None or self._hint_pattern.search(lowered) is not None

    def __repr__(self) -> str:
        return f"RedactionRule(name={self.name!r}, pattern={self.pattern.pattern!r}, label={self.label!r})"

    def apply(self, text: str) -> str:
        """``text`` with every accepted match replaced by ``[REDACTED:<label>]``."""
        return self.pattern.sub(self._replace, text)

    def _replace(self, match: re.Match[str]) -> str:
        named = "secret" in self.pattern.groupindex and match.group("secret") is not None
        secret = match.group("secret") if named else match.group(0)
        if self.validator is not None and not self.validator(secret):
            return match.group(0)
        placeholder = f"[REDACTED:{self.label}]"
        if not named:
            return placeholder
        start, end = match.span("secret")
        whole_start = match.start()
        whole = match.group(0)
        return whole[: start - whole_start] + placeholder + whole[end - whole_start :]


def _any_of(hints: Sequence[str]) -> re.Pattern[str] | None:
    """One search for any of ``hints`` (lower case) in a lower-cased text."""
    return re.compile("|".join(re.escape(h) for h in hints)) if hints else None


# -- validators ------------------------------------------------------------------------------------


def luhn_valid(number: str) -> bool:
    """True when the digits of ``number`` (other characters ignored) pass the Luhn check."""
    digits = [int(c) for c in number if c.isdigit()]
    if not digits:
        return False
    total = 0
    for i, d in enumerate(reversed(digits)):
        if i % 2 == 1:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


def _card(text: str) -> bool:
    digits = re.sub(r"\D", "", text)
    return 13 <= len(digits) <= 19 and digits[0] in "23456" and luhn_valid(digits)


def _iban(text: str) -> bool:
    compact = text.replace(" ", "")
    if not 15 <= len(compact) <= 34:
        return False
    moved = compact[4:] + compact[:4]
    as_digits = "".join(str(int(c, 36)) for c in moved)
    return int(as_digits) % 97 == 1


_DNI_LETTERS = "TRWAGMYFPDXBNJZSQVHLCKE"


def _dni(text: str) -> bool:
    compact = text.replace("-", "")
    body, letter = compact[:-1], compact[-1]
    body = str("XYZ".index(body[0])) + body[1:] if body[0] in "XYZ" else body
    return _DNI_LETTERS[int(body) % 23] == letter


_NOT_SECRETS = frozenset({"null", "none", "true", "false", "undefined", "redacted", "string", "required"})


def _assigned_value(text: str) -> bool:
    return text.lower() not in _NOT_SECRETS


def _phone(text: str) -> bool:
    digits = re.sub(r"\D", "", text)
    if text.startswith("+"):
        return 8 <= len(digits) <= 15
    if not 10 <= len(digits) <= 15:
        return False
    if re.match(r"\d{4}[.\-]\d{1,2}[.\-]\d{1,2}\b", text):
        return False  # a date
    groups = re.split(r"[ .\-()]+", text.strip("()"))
    groups = [g for g in groups if g]
    if "." in text and len(groups) == 4 and all(len(g) <= 3 and int(g) <= 255 for g in groups):
        return False  # an IPv4 address
    if "(" not in text and len(groups[0]) <= 3 and all(len(g) == 3 for g in groups[1:]):
        return False  # a number with thousands separators
    return len(groups) >= 3 or "(" in text


# -- the built-in rules ------------------------------------------------------------------------------

SECRET_RULES: tuple[RedactionRule, ...] = (
    RedactionRule(
        name="private_key",
        pattern=re.compile(
            r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY-----(?:.*?-----END[A-Z0-9 ]*PRIVATE KEY-----|.*)", re.DOTALL
        ),
        hints=("private key",),
    ),
    RedactionRule(
        name="url_password",
        pattern=r"://[^\s/?#@:]*:(?P<secret>[^\s/?#@]+)@",
        label="password",
        hints=("://",),
    ),
    RedactionRule(
        name="bearer_token",
        pattern=re.compile(
            r"\b(?:authorization[\"']?\s*[:=]\s*[\"']?(?:(?:bearer|basic|token|digest)\s+)?"
            r"|bearer\s+(?=[\w\-.~+/]{20}|[\w\-.~+/]{0,19}\d)(?=[\w\-.~+/]{8}))"
            r"(?P<secret>[\w\-.~+/]{4,}=*)",
            re.IGNORECASE,
        ),
        hints=("bearer", "authorization"),
    ),
    RedactionRule(
        name="api_key",
        pattern=r"(?<![\w-])(?:sk-(?:ant-|proj-|svcacct-)?[A-Za-z0-9_\-]{20,}|(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}"
        r"|AIza[0-9A-Za-z_\-]{35}|glpat-[A-Za-z0-9_\-]{20,}|hf_[A-Za-z0-9]{30,})",
        hints=("sk-", "sk_", "rk_", "aiza", "glpat-", "hf_"),
    ),
    RedactionRule(name="aws_access_key", pattern=r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b", hints=("akia", "asia")),
    RedactionRule(
        name="github_token",
        pattern=r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b",
        hints=("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    ),
    RedactionRule(name="slack_token", pattern=r"\bxox[abposr]-[A-Za-z0-9\-]{10,}", hints=("xox",)),
    RedactionRule(
        name="secret_assignment",
        pattern=re.compile(
            r"(?:api[_\-]?key|apikey|secret[_\-]?key|access[_\-]?key|private[_\-]?key|secret|token|password|passwd)"
            r"[\"']?\s*[:=]\s*[\"']?(?P<secret>[^\s\"',;&{}\[\]()<>]{4,})",
            re.IGNORECASE,
        ),
        validator=_assigned_value,
        label="secret",
        hints=("key", "secret", "token", "passw"),
    ),
)

_DIGITS = tuple("0123456789")

PII_RULES: tuple[RedactionRule, ...] = (
    RedactionRule(
        name="iban",
        pattern=r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?\b",
        validator=_iban,
        hints=_DIGITS,
    ),
    RedactionRule(
        name="card_number",
        pattern=r"(?<![\d\-])(?<!\d[ \-])(?:\d[ \-]?){12,18}\d(?![\d\-])(?![ \-]\d)",
        validator=_card,
        hints=_DIGITS,
    ),
    RedactionRule(
        name="us_ssn",
        pattern=r"(?<![\d\-])(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}(?![\d\-])",
        hints=_DIGITS,
    ),
    RedactionRule(
        name="uk_nino",
        pattern=r"\b(?!BG|GB|NK|KN|TN|NT|ZZ)[A-CEGHJ-PR-TW-Z][A-CEGHJ-NPR-TW-Z] ?\d{2} ?\d{2} ?\d{2} ?[A-D]\b",
        hints=_DIGITS,
    ),
    RedactionRule(name="es_dni", pattern=r"\b[XYZ0-9]\d{7}-?[A-Z]\b", validator=_dni, hints=_DIGITS),
    RedactionRule(
        name="email",
        pattern=r"(?<![\w.+\-])[A-Za-z0-9._%+\-]+@[A-Za-z0-9](?:[A-Za-z0-9\-]*[A-Za-z0-9])?"
        r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9\-]*[A-Za-z0-9])?)*\.[A-Za-z]{2,}\b",
        hints=("@",),
    ),
    RedactionRule(
        name="phone",
        pattern=r"(?<![\w+.\-])(?<!\d[ .\-])"
        r"(?:\+\d{8,15}|(?:\+\d{1,3}[ .\-]?)?(?:\(\d{1,5}\)[ .\-]?)?\d{2,5}(?:[ .\-]\d{2,5}){1,5})"
        r"(?!\w)(?![ .\-:/]\d)",
        validator=_phone,
        hints=_DIGITS,
    ),
)

SENSITIVE_FIELDS = (
    r"(?i)^(?:.*[_\-.])?(?:api[_\-]?key|apikey|secret[_\-]?key|access[_\-]?key|private[_\-]?key|secret"
    r"|client[_\-]?secret|password|passwd|passphrase|token|access[_\-]?token|refresh[_\-]?token|auth[_\-]?token"
    r"|authorization|cookie|set[_\-]cookie)$"
)
"""Dictionary keys whose string values are replaced whole (matched case-insensitively)."""

_FIELD_PLACEHOLDER = "[REDACTED:secret]"
_CLEAN_TEXT_LENGTH = 64
_CLEAN_TEXTS = 4096


class Redactor:
    """Applies redaction rules to text and to JSON data. Immutable; share one freely."""

    __slots__ = ("_clean", "_fields", "_hints", "_secret_keys", "rules")

    def __init__(
        self,
        *,
        secrets: bool = True,
        pii: bool = False,
        rules: Sequence[RedactionRule] = (),
        disable: Iterable[str] = (),
        sensitive_fields: str | re.Pattern[str] | None = SENSITIVE_FIELDS,
    ) -> None:
        chosen = [*(SECRET_RULES if secrets else ()), *(PII_RULES if pii else ()), *rules]
        known = {r.name for r in (*SECRET_RULES, *PII_RULES, *rules)}
        off = set(disable)
        unknown = sorted(off - known)
        if unknown:
            listing = ", ".join(sorted(known))
            raise UsageError(
                "unknown redaction rule name(s) in disable",
                [Problem(code="unknown_rule", where=f"rule {n!r}", message=f"known rules: {listing}") for n in unknown],
            )
        self.rules: tuple[RedactionRule, ...] = tuple(r for r in chosen if r.name not in off)
        self._hints = _any_of([h for r in self.rules for h in r.hints]) if all(r.hints for r in self.rules) else None
        """When every rule has hints: a text with none of them needs no rule run on it."""
        self._clean: set[str] = set()
        """Short texts seen to need nothing (keys and ids repeat in every event)."""
        self._fields: re.Pattern[str] | None = (
            re.compile(sensitive_fields) if isinstance(sensitive_fields, str) else sensitive_fields
        )
        self._secret_keys: dict[str, bool] = {}
        """Whether a dictionary key names a secret, by key (keys repeat in every event)."""

    @classmethod
    def off(cls) -> Redactor:
        """A redactor that changes nothing."""
        return cls(secrets=False, pii=False, sensitive_fields=None)

    @property
    def active(self) -> bool:
        return bool(self.rules) or self._fields is not None

    def redact_text(self, text: str) -> str:
        """``text`` with every rule applied in order."""
        if text in self._clean:
            return text
        original = text
        lowered = text.lower()
        if self._hints is None or self._hints.search(lowered) is not None:
            for rule in self.rules:
                if rule.may_match(lowered):
                    redacted = rule.apply(text)
                    if redacted != text:
                        text, lowered = redacted, redacted.lower()
        if text == original and len(text) <= _CLEAN_TEXT_LENGTH:
            if len(self._clean) >= _CLEAN_TEXTS:
                self._clean.clear()
            self._clean.add(text)
        return text

    def redact(self, data: Any) -> Any:
        """JSON data (dicts, lists, strings, numbers) with every string redacted; keys included."""
        if not self.active:
            return data
        return self._walk(data)

    def _walk(self, data: Any) -> Any:
        # The hot path of every append: plain loops, scalars and known-clean strings handled inline.
        if isinstance(data, str):
            return data if data in self._clean else self.redact_text(data)
        if isinstance(data, dict):
            out: dict[str, Any] = {}
            for key, value in data.items():
                new_key = self.redact_text(key) if isinstance(key, str) and key not in self._clean else key
                if isinstance(value, str):
                    if value and self._names_a_secret(key):
                        out[new_key] = _FIELD_PLACEHOLDER
                    else:
                        out[new_key] = value if value in self._clean else self.redact_text(value)
                elif value is None or isinstance(value, int | float):
                    out[new_key] = value
                else:
                    out[new_key] = self._walk(value)
            return out
        if isinstance(data, list | tuple):
            return [self._walk(item) for item in data]
        return data

    def _names_a_secret(self, key: Any) -> bool:
        if self._fields is None:
            return False
        known = self._secret_keys.get(key)
        if known is None:
            known = self._fields.search(str(key)) is not None
            if len(self._secret_keys) >= _CLEAN_TEXTS:
                self._secret_keys.clear()
            self._secret_keys[key] = known
        return known
