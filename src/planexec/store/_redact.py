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
from collections.abc import Iterable, Sequence
from typing import Any

from planexec.errors import Problem, UsageError
from planexec.store._redact_rules import (
    PII_RULES,
    SECRET_RULES,
    SENSITIVE_FIELDS,
    RedactionRule,
    luhn_valid,
)
from planexec.store._redact_rules import (
    longest_word as longest_word_of,
)

__all__ = ["PII_RULES", "SECRET_RULES", "SENSITIVE_FIELDS", "RedactionRule", "Redactor", "luhn_valid"]


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
                "unknown redaction rule name in disable"
                if len(unknown) == 1
                else "unknown redaction rule names in disable",
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
                    longest_word = longest_word_of(text)
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
