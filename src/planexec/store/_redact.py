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
    private_key        PEM private keys of every kind — ``RSA``, ``EC``, ``DSA``, ``OPENSSH``, ``ENCRYPTED``
                       and plain ``PRIVATE KEY``, ``PGP PRIVATE KEY BLOCK`` — from the BEGIN line to the
                       matching END line, or to the end of the text when the END line is missing (a key
                       cut off is still a key); certificates and public keys are left alone
    url_password       the password in ``scheme://user:password@host``: anything but whitespace, ``/``,
                       quotes, ``<``, ``>`` and ``\\`` (so ``%``, ``!``, ``$``, ``~``, ``*``, ``:``, ``?``, ``#``
                       and ``@`` too) up to the last ``@`` before the host; the user may be empty or an
                       e-mail address                                                      → ``password``
    bearer_token       ``Authorization: <scheme> <credentials>`` and ``Bearer <token>``
    jwt                JSON Web Tokens: ``eyJ…`` and two more base64url segments (signed, the last
                       possibly empty), or four more (encrypted)
    api_key            Anthropic ``sk-ant-api03-…``/``sk-ant-admin01-…``; OpenAI ``sk-proj-…``,
                       ``sk-svcacct-…``, ``sk-admin-…`` and legacy ``sk-`` + 48 characters (hyphens and
                       underscores inside; a bare ``sk-`` key must hold a digit, so hyphenated words such
                       as ``sk-this-is-not-a-key`` are not one); ``sk_live_…``/``rk_live_…``, ``AIza…``,
                       ``glpat-…``, ``hf_…``
    aws_access_key     ``AKIA…``/``ASIA…`` access key ids
    github_token       classic ``ghp_…``, ``gho_…``, ``ghu_…``, ``ghs_…``, ``ghr_…``; fine-grained ``github_pat_…``
    slack_token        ``xoxb-…``, ``xoxp-…`` and the other ``xox?-`` forms
    aws_secret_key     a bare AWS secret access key. The heuristic: exactly 40 characters of
                       ``A–Z a–z 0–9 / +`` standing alone (no such character, nor ``-``, ``_`` or a ``=``
                       pad, right before or after), holding upper case, lower case and a digit, not all
                       hex, and not made of words (fewer than half of its letters in runs of four or more
                       lower-case letters). A random key passes 99.7 % of the time. Left alone: git SHAs
                       and other hex (one case), UUIDs (short groups), sha256 digests and base64 longer
                       than 40 characters or padded with ``=``, CamelCase names and paths (words). Base64
                       of exactly 30 bytes, unpadded and standing alone, looks just like a key and is
                       redacted
    secret_assignment  ``api_key=…``, ``token: …``, ``password = "…"``, ``client_secret=…`` and similar,
                       quoted or JSON-escaped (the value only)                               → ``secret``

A token (jwt, api_key, aws_access_key, github_token, slack_token, aws_secret_key, a bearer header)
also stands alone after an escaped newline or tab (``\\n``, ``\\r``, ``\\t``), so one at the start of
a line of JSON text kept in a string (a model's raw reply, a tool's JSON output) is caught.

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

A rule's ``hints`` (text every match contains), ``min_length`` (how long a match is at least)
and ``one_word`` (a match holds no whitespace) let the redactor skip strings cheaply: a string
shorter than ``min_length``, without a word that long, or holding none of the hints is not
searched. Every built-in rule has hints and a minimum length, so most strings of an event (ids,
keys, short values, prose without a hint) cost a few substring tests, and only the rules whose
hints a string holds are run on it; a custom rule without hints is tried on every string long
enough for it. Custom rules run after the built-in ones. Any rule can be switched off by name
with ``disable``; an unknown name is a :class:`~planexec.UsageError` that lists the known ones.
Rules are heuristics: they are tuned to miss little that looks like a secret, and to leave
ordinary numbers, dates, versions and addresses alone. Redaction is one-way: the log keeps the
placeholder, so a replay or a resumed run sees ``[REDACTED:…]`` where the secret was.
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
        if len(lowered) < self.min_length or (self.one_word and _longest_word(lowered) < self.min_length):
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


def _longest_word(text: str) -> int:
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
            _alone_after("A-Za-z0-9_") + r"(?:authorization[\"']?\s*[:=]\s*[\"']?(?:(?:bearer|basic|token|digest)\s+)?"
            r"|bearer\s+(?=[\w\-.~+/]{20}|[\w\-.~+/]{0,19}\d)(?=[\w\-.~+/]{8}))"
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

_FIELD_PLACEHOLDER = "[REDACTED:secret]"


class _Gate:
    """What a text of one length needs: the hints to look for, the rules each hint found calls for,
    and the rules tried whatever the text holds (those without hints); rules by their index."""

    __slots__ = ("always", "hints", "rules_by_hint")

    def __init__(self, rules: Sequence[RedactionRule], fitting: Sequence[int]) -> None:
        self.always = tuple(i for i in fitting if not rules[i].hints)
        by_hint: dict[str, list[int]] = {}
        for i in fitting:
            for hint in rules[i].hints:
                by_hint.setdefault(hint, []).append(i)
        self.rules_by_hint = {hint: tuple(indices) for hint, indices in by_hint.items()}
        self.hints = tuple(self.rules_by_hint)


def _length_gates(rules: Sequence[RedactionRule], longest: int) -> tuple[_Gate, ...]:
    """One gate for each text length up to ``longest``, holding the rules whose matches fit in a
    text that long; the last serves every longer text and holds every rule."""
    shared: dict[tuple[int, ...], _Gate] = {}
    gates: list[_Gate] = []
    for length in range(longest + 1):
        fitting = tuple(i for i, r in enumerate(rules) if r.min_length <= length or length == longest)
        if fitting not in shared:
            shared[fitting] = _Gate(rules, fitting)
        gates.append(shared[fitting])
    return tuple(gates)


_GATED_LENGTHS = 256
"""Texts up to this long get a gate of their own length; longer ones share the last gate."""
_CLEAN_TEXT_LENGTH = 64
_CLEAN_TEXTS = 4096


class Redactor:
    """Applies redaction rules to text and to JSON data. Immutable; share one freely."""

    __slots__ = ("_clean", "_fields", "_gates", "_longest", "_secret_keys", "_shortest", "rules")

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
        lengths = [r.min_length for r in self.rules]
        self._shortest = min(lengths, default=0)
        """A text shorter than this needs no rule run on it."""
        self._longest = min(max(lengths, default=0), _GATED_LENGTHS)
        self._gates = _length_gates(self.rules, self._longest)
        """By text length (``_longest`` and up share the last): which rules a text that long may need."""
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
        length = len(text)
        redacted = text
        if length >= self._shortest:
            # Only the rules whose matches fit in the text and whose hints it holds are run. Plain
            # substring tests find the hints: far cheaper than one search for any of them.
            gate = self._gates[length if length < self._longest else self._longest]
            lowered = text.lower()
            for hint in gate.hints:
                if hint in lowered:
                    redacted = self._apply(text, lowered, gate, gate.hints.index(hint))
                    break
            else:
                if gate.always:
                    redacted = self._apply(text, lowered, gate, len(gate.hints))
        if redacted == text and length <= _CLEAN_TEXT_LENGTH:
            if len(self._clean) >= _CLEAN_TEXTS:
                self._clean.clear()
            self._clean.add(text)
        return redacted

    def _apply(self, text: str, lowered: str, gate: _Gate, first: int) -> str:
        """``text`` after the rules of ``gate`` that ``lowered`` (the text in lower case) calls for;
        ``first`` is the index of the first of the gate's hints that it holds."""
        chosen = set(gate.always)
        for hint in gate.hints[first:]:
            if hint in lowered:
                chosen.update(gate.rules_by_hint[hint])
        longest_word = -1
        for index in sorted(chosen):
            rule = self.rules[index]
            if len(text) < rule.min_length:
                continue
            if rule.one_word:
                # Replacing a secret never makes a longer word that a later rule could match whole.
                if longest_word < 0:
                    longest_word = _longest_word(text)
                if longest_word < rule.min_length:
                    continue
            text = rule.apply(text)
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
