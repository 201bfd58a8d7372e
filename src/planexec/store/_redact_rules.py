"""The redaction rules planexec ships, and the value a rule is: a name, a pattern, an optional
validator, the label its placeholder shows, and hints that let strings without them be skipped.

The rules are described, one by one, in :mod:`planexec.store._redact`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from planexec.errors import UsageError

__all__ = ["PII_RULES", "SECRET_RULES", "SENSITIVE_FIELDS", "RedactionRule", "longest_word", "luhn_valid"]

Validator = Callable[[str], bool]


class RedactionRule:
    """One named pattern. ``validator`` (given the matched secret) must return True for a match to
    count; ``label`` is shown in the placeholder and defaults to ``name``. ``hints`` are optional
    pieces of text of which every match contains at least one (compared case-insensitively), and
    ``min_length`` is the least number of characters a match has; ``one_word`` says a match never
    holds whitespace. A string without any of the hints, shorter than ``min_length`` or (with
    ``one_word``) without a word that long, is not searched, which keeps redaction cheap."""

    __slots__ = ("_hint_pattern", "hints", "label", "min_length", "name", "one_word", "pattern", "validator")

    def __init__(
        self,
        *,
        name: str,
        pattern: str | re.Pattern[str],
        validator: Validator | None = None,
        label: str | None = None,
        hints: Sequence[str] = (),
        min_length: int = 0,
        one_word: bool = False,
    ) -> None:
        if not name:
            raise UsageError("a redaction rule needs a name")
        if min_length < 0:
            raise UsageError(f"redaction rule {name!r}: min_length must not be negative, not {min_length}")
        self.name = name
        self.pattern: re.Pattern[str] = re.compile(pattern) if isinstance(pattern, str) else pattern
        self.validator = validator
        self.label = label or name
        self.hints: tuple[str, ...] = tuple(h.lower() for h in hints)
        self.min_length = min_length
        self.one_word = one_word
        self._hint_pattern = _any_of(self.hints)

    def may_match(self, lowered: str) -> bool:
        """False when ``lowered`` (a text in lower case) is too short, has no word long enough (for a
        ``one_word`` rule) or contains none of the hints: no match is possible."""
        if len(lowered) < self.min_length or (self.one_word and longest_word(lowered) < self.min_length):
            return False
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


def longest_word(text: str) -> int:
    """The length of the longest run of ``text`` without whitespace."""
    return max(map(len, text.split()), default=0)


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


def _has_digit(text: str) -> bool:
    return any(c.isdigit() for c in text)


_NAMED_SK_KEYS = ("sk-ant-", "sk-proj-", "sk-svcacct-", "sk-admin-")


def _api_key(text: str) -> bool:
    """Keys are random: a bare ``sk-`` key (no provider's prefix after it) without a single digit
    is a hyphenated word."""
    return not text.startswith("sk-") or text.startswith(_NAMED_SK_KEYS) or _has_digit(text)


_HEX = frozenset("0123456789abcdefABCDEF")
_WORDS = re.compile(r"[a-z]{4,}")


def _aws_secret(text: str) -> bool:
    """A 40-character candidate looks like a random key: upper case, lower case and a digit, not
    hex, and not made of words (CamelCase names and paths are mostly runs of lower-case letters)."""
    if not (_has_digit(text) and any(c.isupper() for c in text) and any(c.islower() for c in text)):
        return False
    if all(c in _HEX for c in text):
        return False
    letters = sum(c.isalpha() for c in text)
    in_words = sum(len(word) for word in _WORDS.findall(text))
    return 2 * in_words < letters


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


def _alone_after(neighbours: str) -> str:
    """Where a token starts: not right after one of ``neighbours`` (the body of a character class).
    After an escaped newline or tab (JSON text kept inside a string) the ``n``, ``r`` or ``t`` is
    stepped over: a rule using this puts what it replaces in a group named ``secret``. (One
    look-behind, tried at every place, then the cheap step: far faster than two look-behinds.)"""
    return rf"(?<![{neighbours}])(?:(?<=\\)[nrt])?"


def _token(neighbours: str, body: str) -> str:
    """``body``, as the secret, standing alone after any of ``neighbours`` (see :func:`_alone_after`)."""
    return rf"{_alone_after(neighbours)}(?P<secret>{body})"


_DIGITS = tuple("0123456789")
_BASE64URL = r"[A-Za-z0-9_\-]"

SECRET_RULES: tuple[RedactionRule, ...] = (
    RedactionRule(
        name="private_key",
        pattern=re.compile(
            r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
            r"(?:.*?-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|.*)",
            re.DOTALL,
        ),
        hints=("private key",),
        min_length=len("-----BEGIN PRIVATE KEY-----"),
    ),
    RedactionRule(
        name="url_password",
        # The password runs to the last "@" before the host: the host is followed by the end, a
        # path, a query, whitespace or a quote, and holds no "@" itself.
        pattern=r"://[^\s/?#:\"'<>\\]*:(?P<secret>[^\s/\"'<>\\]+)@(?=[^\s/?#@\"'<>\\]*(?:[\s/?#\"'<>\\]|$))",
        label="password",
        hints=("://",),
        min_length=len("://:x@"),
        one_word=True,
    ),
    RedactionRule(
        name="bearer_token",
        pattern=re.compile(
            _alone_after("A-Za-z0-9_")
            + r"(?:authorization[\"']?\s*[:=]\s*[\"']?(?:(?:bearer|basic|token|digest|[A-Za-z][\w-]{0,30})\s+)?"
            r"|bearer\s+(?=[\w\-.~+/]{20}|[\w\-.~+/]{0,19}\d)(?=[\w\-.~+/]{8}))"
            # a scheme before a ${VAR} reference (a header whose secret comes from the environment) is no secret
            r"(?![\w\-.~+/]+=*\s+\$\{[A-Za-z_])"
            r"(?P<secret>[\w\-.~+/]{4,}=*)",
            re.IGNORECASE,
        ),
        hints=("bearer", "authorization"),
        min_length=len("bearer 12345678"),
    ),
    RedactionRule(
        name="jwt",
        pattern=_token(
            r"A-Za-z0-9_\-",
            rf"eyJ{_BASE64URL}{{10,}}\.{_BASE64URL}*\.{_BASE64URL}*(?:\.{_BASE64URL}+\.{_BASE64URL}+)?",
        ),
        hints=("eyj",),
        min_length=len("eyJ") + 10 + len(".."),
        one_word=True,
    ),
    RedactionRule(
        name="api_key",
        pattern=_token(
            r"A-Za-z0-9_\-",
            r"sk-[A-Za-z0-9_\-]{20,}|(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}"
            r"|AIza[0-9A-Za-z_\-]{35}|glpat-[A-Za-z0-9_\-]{20,}|hf_[A-Za-z0-9]{30,}",
        ),
        validator=_api_key,
        hints=("sk-", "sk_", "rk_", "aiza", "glpat-", "hf_"),
        min_length=len("sk-") + 20,
        one_word=True,
    ),
    RedactionRule(
        name="aws_access_key",
        pattern=_token("A-Za-z0-9_", r"(?:AKIA|ASIA)[0-9A-Z]{16}") + r"(?![A-Za-z0-9_])",
        hints=("akia", "asia"),
        min_length=20,
        one_word=True,
    ),
    RedactionRule(
        name="github_token",
        pattern=_token("A-Za-z0-9_", r"gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255}")
        + r"(?![A-Za-z0-9_])",
        hints=("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
        min_length=len("github_pat_") + 22,
        one_word=True,
    ),
    RedactionRule(
        name="slack_token",
        pattern=_token("A-Za-z0-9_", r"xox[abposr]-[A-Za-z0-9\-]{10,}"),
        hints=("xox",),
        min_length=len("xoxb-") + 10,
        one_word=True,
    ),
    RedactionRule(
        name="aws_secret_key",
        pattern=_token(r"A-Za-z0-9+/_\-", "[A-Za-z0-9+/]{40}") + r"(?![A-Za-z0-9+/=_\-])",
        validator=_aws_secret,
        hints=_DIGITS,
        min_length=40,
        one_word=True,
    ),
    RedactionRule(
        name="secret_assignment",
        pattern=re.compile(
            r"(?:api[_\-]?key|apikey|secret[_\-]?key|access[_\-]?key|private[_\-]?key|secret|token|password|passwd)"
            r"\\?[\"']?\s*[:=]\s*\\?[\"']?(?P<secret>(?:[^\s\"',;&{}\[\]()<>\\]|\\(?![\"'])){4,})",
            re.IGNORECASE,
        ),
        validator=_assigned_value,
        label="secret",
        hints=("key", "secret", "token", "passw"),
        min_length=len("token=1234"),
    ),
)


PII_RULES: tuple[RedactionRule, ...] = (
    RedactionRule(
        name="iban",
        pattern=r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?\b",
        validator=_iban,
        hints=_DIGITS,
        min_length=15,
    ),
    RedactionRule(
        name="card_number",
        pattern=r"(?<![\d\-])(?<!\d[ \-])(?:\d[ \-]?){12,18}\d(?![\d\-])(?![ \-]\d)",
        validator=_card,
        hints=_DIGITS,
        min_length=13,
    ),
    RedactionRule(
        name="us_ssn",
        pattern=r"(?<![\d\-])(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}(?![\d\-])",
        hints=_DIGITS,
        min_length=len("123-45-6789"),
        one_word=True,
    ),
    RedactionRule(
        name="uk_nino",
        pattern=r"\b(?!BG|GB|NK|KN|TN|NT|ZZ)[A-CEGHJ-PR-TW-Z][A-CEGHJ-NPR-TW-Z] ?\d{2} ?\d{2} ?\d{2} ?[A-D]\b",
        hints=_DIGITS,
        min_length=len("AB123456C"),
    ),
    RedactionRule(
        name="es_dni",
        pattern=r"\b[XYZ0-9]\d{7}-?[A-Z]\b",
        validator=_dni,
        hints=_DIGITS,
        min_length=len("12345678Z"),
        one_word=True,
    ),
    RedactionRule(
        name="email",
        pattern=r"(?<![\w.+\-])[A-Za-z0-9._%+\-]+@[A-Za-z0-9](?:[A-Za-z0-9\-]*[A-Za-z0-9])?"
        r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9\-]*[A-Za-z0-9])?)*\.[A-Za-z]{2,}\b",
        hints=("@",),
        min_length=len("a@b.cd"),
        one_word=True,
    ),
    RedactionRule(
        name="phone",
        pattern=r"(?<![\w+.\-])(?<!\d[ .\-])"
        r"(?:\+\d{8,15}|(?:\+\d{1,3}[ .\-]?)?(?:\(\d{1,5}\)[ .\-]?)?\d{2,5}(?:[ .\-]\d{2,5}){1,5})"
        r"(?!\w)(?![ .\-:/]\d)",
        validator=_phone,
        hints=_DIGITS,
        min_length=len("+12345678"),
    ),
)

SENSITIVE_FIELDS = (
    r"(?i)^(?:.*[_\-.])?(?:api[_\-]?key|apikey|secret[_\-]?key|access[_\-]?key|private[_\-]?key|secret"
    r"|client[_\-]?secret|password|passwd|passphrase|token|access[_\-]?token|refresh[_\-]?token|auth[_\-]?token"
    r"|authorization|cookie|set[_\-]cookie)$"
)
"""Dictionary keys whose string values are replaced whole (matched case-insensitively)."""
