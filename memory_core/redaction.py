"""Secrets and personal data kept out of memory: ``Redactor.redact`` runs on every text before
it is stored (``CuratingStore.write`` and ``update``), and applies a policy per kind.

Kinds (``KINDS``):

- ``credentials``: cloud keys and tokens found by the plugins of Yelp's ``detect-secrets``
  (``CREDENTIAL_PLUGINS``: AWS access key ids, Azure storage keys, GitHub, GitLab, Slack,
  Stripe, OpenAI (and, own pattern, its ``sk-proj-`` keys), npm, PyPI, SendGrid, Mailchimp, Twilio, Square, Discord, Telegram tokens,
  JWTs, private key blocks, ``scheme://user:password@`` URLs, ``password: X`` / ``api_key=X``
  assignments), and, with this module's own patterns, an AWS secret access key named as such
  and a password, passphrase, PIN, API key, secret or token *stated as such* ("the wifi
  password is hunter2", "my PIN is 4821"; not "my password manager is 1Password", nor "my
  password is too short": a value that is a plain word of ``_NOT_A_VALUE`` is none);
- ``card_number``: 13–19 digits (spaces or dashes between them allowed) that pass the Luhn
  check (``stdnum.luhn``) and start like a card of a known network (``_CARD_PREFIX``);
- ``iban``: ``stdnum.iban`` (the country's length and format and the mod-97 check; not the
  national check of the BBAN, which needs stdnum's bank registry and refuses valid accounts);
- ``phone``: numbers ``phonenumbers`` calls valid, in international form (``+…``) for any
  country, or national form for ``phone_region``, when written with separators or after a
  word such as "call" or "phone" (a bare run of digits is an order number more often);
- ``national_id``: US SSN (``stdnum.us.ssn``; dashed, or 9 digits after "SSN"/"social
  security"), Spanish DNI and NIE, Italian codice fiscale, French NIR, Brazilian CPF
  (dotted form), Indian Aadhaar (spaced form), each with its check digits (``python-stdnum``).

Policies (``POLICIES``): ``drop`` (the sentence holding the value is removed; a text with
nothing left is not stored at all), ``mask`` (the value becomes a short prefix + ``…[redacted]``:
a credential's public type prefix such as ``AKIA`` or ``ghp_``, or at most 4 characters and a
quarter of the value — none for a password), ``keep``.

Linear time: every rule reads caller text. This module's patterns are RE2
(``memory_core.linear_re``). detect-secrets' patterns are Python ``re`` (backtracking), so they
only ever see bounded windows: the text is cut into windows of ``WINDOW`` characters that
overlap by ``WINDOW - STEP`` (a credential of up to ``WINDOW - STEP`` characters lies whole in
one of them; a token cut at a window's edge is extended to its end by a bounded scan). The
number of windows grows linearly with the text and each costs a bounded time, so the whole
scan is linear (``tests/memory_core/test_redaction.py`` holds a timing-ratio test).
Validation (``stdnum``, ``phonenumbers``) only sees candidates of bounded length.

Nothing here logs: findings are counted per kind, the values never leave this module.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import phonenumbers
from detect_secrets.plugins.aws import AWSKeyDetector
from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
from detect_secrets.plugins.base import RegexBasedDetector
from detect_secrets.plugins.basic_auth import BasicAuthDetector
from detect_secrets.plugins.discord import DiscordBotTokenDetector
from detect_secrets.plugins.github_token import GitHubTokenDetector
from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
from detect_secrets.plugins.jwt import JwtTokenDetector
from detect_secrets.plugins.mailchimp import MailchimpDetector
from detect_secrets.plugins.npm import NpmDetector
from detect_secrets.plugins.openai import OpenAIDetector
from detect_secrets.plugins.pypi_token import PypiTokenDetector
from detect_secrets.plugins.sendgrid import SendGridDetector
from detect_secrets.plugins.slack import SlackDetector
from detect_secrets.plugins.square_oauth import SquareOAuthDetector
from detect_secrets.plugins.stripe import StripeDetector
from detect_secrets.plugins.telegram_token import TelegramBotTokenDetector
from detect_secrets.plugins.twilio import TwilioKeyDetector
from stdnum import iban as std_iban
from stdnum import luhn
from stdnum.br import cpf
from stdnum.es import dni, nie
from stdnum.fr import nir
from stdnum.in_ import aadhaar
from stdnum.it import codicefiscale
from stdnum.us import ssn

from . import linear_re
from .errors import InvalidInput
from .linear_re import NOT_SPACE, SPACE, START
from .types import Memory, MemoryChanges

CREDENTIALS = "credentials"
CARD_NUMBER = "card_number"
IBAN = "iban"
PHONE = "phone"
NATIONAL_ID = "national_id"
KINDS: tuple[str, ...] = (CREDENTIALS, CARD_NUMBER, IBAN, PHONE, NATIONAL_ID)
"""The kinds, most important first: where two findings overlap, the earlier kind wins."""
POLICIES: tuple[str, ...] = ("drop", "mask", "keep")
MASK = "…[redacted]"
"""What replaces a masked value (after its prefix)."""

WINDOW = 1024
"""Characters of one chunk that detect-secrets' (backtracking) patterns see at most."""
STEP = 896
"""In a run without whitespace longer than ``WINDOW``, the start of one window to the next
(they overlap by ``WINDOW - STEP``)."""
MAX_TOKEN = 4096
"""A token that a window cuts is extended by at most this many characters."""

CREDENTIAL_PLUGINS: tuple[RegexBasedDetector, ...] = (
    AWSKeyDetector(),
    AzureStorageKeyDetector(),
    BasicAuthDetector(),
    DiscordBotTokenDetector(),
    GitHubTokenDetector(),
    GitLabTokenDetector(),
    JwtTokenDetector(),
    MailchimpDetector(),
    NpmDetector(),
    OpenAIDetector(),
    PypiTokenDetector(),
    SendGridDetector(),
    SlackDetector(),
    SquareOAuthDetector(),
    StripeDetector(),
    TelegramBotTokenDetector(),
    TwilioKeyDetector(),
)
"""The detect-secrets plugins used (their ``denylist`` patterns). Not used: the entropy
plugins (they report every long word of chat), ``IPPublicDetector`` (an address is no
credential), the vendor plugins whose patterns need a keyword of code (IBM, Softlayer,
Cloudant, Artifactory), ``PrivateKeyDetector`` (it finds the ``BEGIN … PRIVATE KEY`` line, and
the whole block is wanted: ``_PRIVATE_KEY_BLOCK``, RE2), and ``KeywordDetector``: its patterns
backtrack (a 512-character window of ``passwordpassword…`` takes time quadratic in the window); ``_STATED`` (RE2) reads
``password: X`` / ``api_key=X`` / "my password is X" instead."""

_PUBLIC_PREFIX = linear_re.compile(
    r"^(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9]|ghp_|gho_|ghu_|ghs_|ghr_|github_pat_|glpat-|xox[abposr]-|"
    r"[sr]k_live_|sk-proj-|sk-|npm_|pypi-|SG\.|eyJ|AC|SK|sq0atp-|sq0csp-)"
)
"""The public part of a credential, kept when it is masked (it names the kind, not the key)."""

_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.+/=")
_PRIVATE_KEY_HEADER = linear_re.compile(r"-----BEGIN [A-Z ]{0,40}PRIVATE KEY[A-Z ]{0,20}-----")
"""The first line of a private key block; the block runs to the ``-----END …-----`` line
after it, or to the end of the text."""
_WORD_CHARS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_"
_KEY_CHARS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz/+"
_KEY_WORDS = (
    r"(?:(?:(?:db|database|key|admin|root|user|login|account)[ _-]?)?pass(?:word|wd|code|phrase)|"
    r"(?:db|database|key|admin|root|user|login|account)[ _-]?pass|pwd|pin(?:"
    + SPACE
    + r"+code)?|contrase[ñn]a|passwort|mot de passe|"
    r"api[ _-]?key|secret(?:[ _-]?(?:access[ _-]?)?key)?|(?:access|auth|bearer|api)[ _-]?token|token)"
)
_STATED = linear_re.compile(
    START
    + _KEY_WORDS
    + r"(?:"
    + SPACE
    + r"+(?:for|to|of|on)"
    + SPACE
    + r"+(?:(?:my|the|our|your)"
    + SPACE
    + r"+)?"
    + NOT_SPACE
    + r"{1,30}(?:"
    + SPACE
    + r"+"
    + NOT_SPACE
    + r"{1,30}){0,2})?"
    + r"[\"'`\]]{0,2}"
    + SPACE
    + r"*(?:(?:"
    + SPACE
    + r"(?:is|was|ist|es|est)"
    + SPACE
    + r")|[:=]{1,2}"
    + SPACE
    + r"*)(?:(?:now|still|just)"
    + SPACE
    + r"+)?[\"'`]?("
    + NOT_SPACE
    + r"{3,128})",
    linear_re.IGNORECASE,
)
"""A password, PIN, key, secret or token stated as such: ``<key word> [for <up to 3 words>]
is|:|= <value>`` (group 1: the value and what follows it up to a space)."""
_AWS_SECRET = linear_re.compile(r"(?i)aws[^\n]{0,30}?(?:secret|private)[^\n]{0,30}?[^A-Za-z0-9/+]([A-Za-z0-9/+]{40})")
"""An AWS secret access key (40 base64 characters) after "aws … secret" on the same line."""
_TOKEN_WORD = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_-"
_OPENAI_KEY = linear_re.compile(r"(?:^|[^0-9A-Za-z_-])(sk-(?:proj|svcacct|admin)-[A-Za-z0-9_-]{40,200})")
"""An OpenAI project, service-account or admin key (``sk-proj-…``): detect-secrets'
``OpenAIDetector`` only knows the older ``sk-…T3BlbkFJ…`` form."""
_NOT_A_VALUE = frozenset(
    """a an the my your our their his her its this that these those it not no too very so also
    same different wrong right correct incorrect changed reset expired weak strong long short
    secure safe saved stored written here there in on at for of to with and or but is was be been
    gone missing empty blank required needed easy hard simple complicated something nothing
    what which who why how where when case sensitive letters characters digits numbers only
    just still now set new old valid invalid protected encrypted hashed hidden private public
    important out that to safe unknown forgotten""".split()
)
"""Words after "password is" that are no password ("my password is too short")."""

_CARD = linear_re.compile(r"(?:^|[^0-9A-Za-z])([0-9](?:[ -]?[0-9]){12,18})")
_CARD_NETWORKS = (
    (linear_re.compile(r"^4"), (13, 16, 19)),  # Visa
    (linear_re.compile(r"^(?:5[1-5]|222[1-9]|22[3-9][0-9]|2[3-6][0-9]{2}|27[01][0-9]|2720)"), (16,)),  # Mastercard
    (linear_re.compile(r"^3[47]"), (15,)),  # American Express
    (linear_re.compile(r"^3(?:0[0-5]|[68])"), (14, 16, 19)),  # Diners Club
    (linear_re.compile(r"^6(?:011|4[4-9]|5)"), (16, 19)),  # Discover
    (linear_re.compile(r"^35(?:2[89]|[3-8][0-9])"), (16, 19)),  # JCB
    (linear_re.compile(r"^62"), (16, 17, 18, 19)),  # UnionPay
    (linear_re.compile(r"^220[0-4]"), (16, 17, 18, 19)),  # Mir
)
"""Card networks by their first digits and lengths (a Luhn-valid number of another start or
length is something else: an IMEI, a serial, a French NIR)."""


def _card_network(digits: str) -> bool:
    return any(len(digits) in lengths and prefix.search(digits) for prefix, lengths in _CARD_NETWORKS)


_IBAN = linear_re.compile(r"(?:^|[^A-Za-z0-9])([A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]){11,30})")
_PHONE = linear_re.compile(r"(?:^|[^0-9A-Za-z+_/#-])(\+?\(?[0-9][0-9 ().\-]{5,20}[0-9])")
_PHONE_WORD = linear_re.compile(
    r"(?i)(?:call|phone|mobile|cell|tel|telephone|text me|whatsapp|fax|reach me|ring)[^0-9\n]{0,24}$"
)
_ALNUM = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_NATIONAL_IDS: tuple[tuple[Any, str, Callable[[str], bool]], ...] = (
    (linear_re.compile(r"(?:^|[^0-9-])([0-9]{3}-[0-9]{2}-[0-9]{4})"), "0123456789-", ssn.is_valid),
    (
        linear_re.compile(r"(?i)(?:ssn|social security(?: number)?)[^0-9\n]{0,20}([0-9]{9})"),
        "0123456789",
        ssn.is_valid,
    ),
    (linear_re.compile(r"(?:^|[^0-9A-Za-z])([0-9]{8}-?[A-Z])"), _ALNUM, dni.is_valid),
    (linear_re.compile(r"(?:^|[^0-9A-Za-z])([XYZ]-?[0-9]{7}-?[A-Z])"), _ALNUM, nie.is_valid),
    (
        linear_re.compile(
            r"(?:^|[^0-9A-Za-z])([A-Z]{6}[0-9LMNPQRSTUV]{2}[A-Z][0-9LMNPQRSTUV]{2}[A-Z][0-9LMNPQRSTUV]{3}[A-Z])"
        ),
        _ALNUM,
        codicefiscale.is_valid,
    ),
    (
        linear_re.compile(r"(?:^|[^0-9])([12] ?[0-9]{2} ?[0-9]{2} ?[0-9AB]{2} ?[0-9]{3} ?[0-9]{3} ?[0-9]{2})"),
        "0123456789",
        nir.is_valid,
    ),
    (linear_re.compile(r"(?:^|[^0-9.])([0-9]{3}\.[0-9]{3}\.[0-9]{3}-[0-9]{2})"), "0123456789", cpf.is_valid),
    (
        linear_re.compile(r"(?i)(?:aadhaa?r|uidai|uid)[^0-9\n]{0,20}([2-9][0-9]{3} ?[0-9]{4} ?[0-9]{4})"),
        "0123456789",
        aadhaar.is_valid,
    ),
)
"""(candidate pattern with the value in group 1, characters that may not follow it,
validator) per national id form: US SSN (dashed; 9 digits after "SSN"), ES DNI, ES NIE, IT
codice fiscale, FR NIR, BR CPF, IN Aadhaar (after the word "aadhaar": 12 digits with a
Verhoeff check are too common otherwise)."""


def _followed_by(text: str, end: int, chars: str) -> bool:
    """Whether the character at ``end`` is one of ``chars`` (the value runs on: no match)."""
    return end < len(text) and text[end] in chars


@dataclass(frozen=True)
class Finding:
    """One detected value: its ``kind`` (``KINDS``), its span ``[start, end)`` in the text
    (characters), and ``keep`` characters of it that a mask may show (its public prefix)."""

    kind: str
    start: int
    end: int
    keep: int = 0


@dataclass(frozen=True)
class RedactionResult:
    """What ``Redactor.redact`` made of a text: ``text`` to store (``""`` when ``dropped``),
    ``findings`` (kind → values detected, whatever the policy), ``applied`` ((kind, policy) →
    values, for the metric), ``dropped`` (nothing is left: the memory is not stored) and
    ``changed`` (``text`` differs from the input)."""

    text: str
    findings: dict[str, int] = field(default_factory=dict)
    applied: dict[tuple[str, str], int] = field(default_factory=dict)
    dropped: bool = False
    changed: bool = False


def _windows(text: str) -> Iterator[tuple[int, str]]:
    """(offset, chunk) over ``text``: chunks of at most ``WINDOW`` characters cut after the
    last whitespace in reach (a token is never cut); a run without whitespace longer than
    ``WINDOW`` is cut into windows starting every ``STEP``. Every character is in one chunk,
    or two where windows overlap: the chunks add up to less than ``WINDOW / STEP`` times the
    text, and each ``rfind`` of at most ``WINDOW`` characters is followed by a step of at least
    ``STEP`` or by a window of the run."""
    n = len(text)
    at = 0
    while at < n:
        end = at + WINDOW
        if end >= n:
            yield at, text[at:]
            return
        cut = max(text.rfind(" ", at, end), text.rfind("\n", at, end), text.rfind("\t", at, end))
        if cut > at:
            yield at, text[at:cut]
            at = cut + 1
        else:
            yield at, text[at:end]
            at += STEP


SCAN_WINDOW = 4096
"""Characters of one window that an RE2 pattern of this module sees: RE2's Python binding
copies the whole text for every match it returns, so ``finditer`` over a long text with many
matches is quadratic; over windows of bounded size it is linear."""
SCAN_STEP = 3840
"""Start of one RE2 window to the next: a candidate of up to ``SCAN_WINDOW - SCAN_STEP`` (256)
characters lies whole in the window where it starts before the next window's start."""


def _scan(text: str, pattern: Any, not_after: str, group: int = 1) -> Iterator[tuple[int, int, Any]]:
    """(start, end, match) of group ``group`` of ``pattern``'s matches in ``text``, each
    once: RE2 windows of ``SCAN_WINDOW`` characters every ``SCAN_STEP``, a window keeping the
    matches that start before the next window's start. ``pattern`` begins with ``(?:^|[^…])``;
    at a window's start ``^`` stands for the character before it, which must not be one of
    ``not_after``."""
    n = len(text)
    at = 0
    while True:
        last = at + SCAN_WINDOW >= n
        window = text[at : at + SCAN_WINDOW]
        for m in pattern.finditer(window):
            start = at + m.start(group)
            if not last and start >= at + SCAN_STEP:
                break  # the next window has it whole
            if m.start() == 0 and at > 0 and not_after and text[at - 1] in not_after:
                continue  # inside a longer run cut by the window
            yield start, at + m.end(group), m
        if last:
            return
        at += SCAN_STEP


class _TokenEnds:
    """Where the run of token characters (``_TOKEN_CHARS``) holding a position ends. Each
    character of the text is walked at most once: a walk stops where an earlier one began,
    and a position inside a run already walked is answered by a bisection."""

    def __init__(self, text: str):
        self.text = text
        self.starts: list[int] = []  # walked intervals [start, end), sorted, disjoint
        self.ends: list[int] = []
        self.begun: dict[int, int] = {}  # walk start -> run end

    def __call__(self, end: int) -> int:
        """``end`` moved past the token characters that follow it (at most ``MAX_TOKEN``)."""
        i = bisect.bisect_right(self.starts, end) - 1
        if i >= 0 and end < self.ends[i]:
            return min(self.ends[i], end + MAX_TOKEN)
        text, pos = self.text, end
        while pos < len(text) and text[pos] in _TOKEN_CHARS:
            if pos in self.begun:
                pos = self.begun[pos]
                break
            pos += 1
        if pos > end:
            j = bisect.bisect_left(self.starts, end)
            self.starts.insert(j, end)
            self.ends.insert(j, pos)
            self.begun[end] = pos
        return min(pos, end + MAX_TOKEN)


def _public_prefix(value: str) -> int:
    m = _PUBLIC_PREFIX.search(value)
    return 0 if m is None else len(m.group(0))


def _spans_of(window: str, value: str) -> Iterator[int]:
    at = window.find(value)
    while at >= 0:
        yield at
        at = window.find(value, at + len(value))


def _credentials(text: str) -> Iterator[Finding]:
    token_end = _TokenEnds(text)
    for offset, window in _windows(text):
        for plugin in CREDENTIAL_PLUGINS:
            for value in set(plugin.analyze_string(window)):
                if not value:
                    continue
                for at in _spans_of(window, value):
                    start = offset + at
                    end = start + len(value)
                    if not isinstance(plugin, BasicAuthDetector):  # its value is the password only
                        end = _trim(text, end, token_end(end))
                    yield Finding(CREDENTIALS, start, end, _public_prefix(text[start:end]))
    block_end = 0
    for start, end, _ in _scan(text, _PRIVATE_KEY_HEADER, "", group=0):
        if start < block_end:
            continue  # inside the block of an earlier header
        close = text.find("-----END ", end)
        close = text.find("-----", close + 9) if close >= 0 else -1
        block_end = close + 5 if close >= 0 else len(text)
        yield Finding(CREDENTIALS, start, block_end)  # masked whole: a header left would be found again
    for start, end, _ in _scan(text, _STATED, _WORD_CHARS):
        finding = _stated_value(text, start, end, 0)
        if finding is not None:
            yield finding
    for start, end, _ in _scan(text, _OPENAI_KEY, _TOKEN_WORD):
        if not _followed_by(text, end, _TOKEN_WORD):
            yield Finding(CREDENTIALS, start, end, _public_prefix(text[start:end]))
    for start, end, _ in _scan(text, _AWS_SECRET, ""):
        if not _followed_by(text, end, _KEY_CHARS + "="):
            yield Finding(CREDENTIALS, start, end)


def _trim(text: str, least: int, end: int) -> int:
    """``end`` moved back over the dots that end a sentence after a token (not below ``least``)."""
    while end > least and text[end - 1] == ".":
        end -= 1
    return end


def _stated_value(text: str, start: int, end: int, offset: int) -> Finding | None:
    """The password-like value ``text[start:end]`` (its first word, without closing
    punctuation or quotes), or None when it is a plain word of ``_NOT_A_VALUE``."""
    words = text[start:end].split(maxsplit=1)
    stripped = words[0].rstrip(".,;:!?)\"'`]") if words else ""
    if len(stripped) < 3 or stripped.lower() in _NOT_A_VALUE or MASK in words[0]:  # masked already
        return None
    return Finding(CREDENTIALS, offset + start, offset + start + len(stripped))


def _digits(value: str) -> str:
    return "".join(ch for ch in value if ch.isdigit())


def _card_numbers(text: str) -> Iterator[Finding]:
    for start, end, _ in _scan(text, _CARD, _ALNUM):
        if _followed_by(text, end, "0123456789"):
            continue  # a longer number
        for _ in range(4):  # the whole run, then without its last group
            digits = _digits(text[start:end])
            if 13 <= len(digits) <= 19 and _card_network(digits) and luhn.is_valid(digits):
                yield Finding(CARD_NUMBER, start, end)
                break
            cut = max(text.rfind(" ", start, end), text.rfind("-", start, end))
            if cut <= start:
                break
            end = cut


def _ibans(text: str) -> Iterator[Finding]:
    for start, end, _ in _scan(text, _IBAN, _ALNUM):
        for _ in range(8):  # the whole run, then without its last group (a word after it)
            if std_iban.is_valid(text[start:end], check_country=False):
                yield Finding(IBAN, start, end)
                break
            cut = text.rfind(" ", start, end)
            if cut <= start:
                break
            end = cut


def _phones(text: str, region: str) -> Iterator[Finding]:
    for start, end, m in _scan(text, _PHONE, _ALNUM + "+_/#-"):
        run = m.group(1)
        if _followed_by(text, end, "0123456789"):
            continue
        for match in phonenumbers.PhoneNumberMatcher(run, region, leniency=phonenumbers.Leniency.VALID):
            raw = match.raw_string
            written = raw.startswith(("+", "(")) or any(not ch.isdigit() for ch in raw)
            before = text[max(0, start + match.start - 40) : start + match.start]
            if written or _PHONE_WORD.search(before):
                yield Finding(PHONE, start + match.start, start + match.end)


def _national_ids(text: str) -> Iterator[Finding]:
    for pattern, after, valid in _NATIONAL_IDS:
        for start, end, m in _scan(text, pattern, after):
            if not _followed_by(text, end, after) and valid(m.group(1)):
                yield Finding(NATIONAL_ID, start, end)


def detect(text: str, *, phone_region: str = "US") -> list[Finding]:
    """Every value of every kind in ``text`` (``KINDS``), sorted by start; of findings that
    overlap, the one of the earlier kind is kept (a card number is not also a phone number).
    Time linear in ``len(text)`` (module docstring)."""
    found: list[Finding] = [
        *_credentials(text),
        *_card_numbers(text),
        *_ibans(text),
        *_national_ids(text),
        *_phones(text, phone_region),
    ]
    rank = {kind: i for i, kind in enumerate(KINDS)}
    found.sort(key=lambda f: (rank[f.kind], f.start, -(f.end - f.start)))
    starts: list[int] = []  # the kept findings, sorted by start; they never overlap
    kept: list[Finding] = []
    for f in found:
        i = bisect.bisect_left(starts, f.start)
        if (i > 0 and kept[i - 1].end > f.start) or (i < len(kept) and kept[i].start < f.end):
            continue
        starts.insert(i, f.start)
        kept.insert(i, f)
    return kept


_SENTENCE_ENDS = ".!?。！？"


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """``[start, end)`` of each sentence of ``text``: a sentence ends after ``.!?。！？`` followed
    by whitespace or the end, or at a line break (which belongs to the gap between sentences).
    Linear: ``str.find`` per kind of end, then one pass over the ends found."""
    ends: list[tuple[int, int]] = []  # (end of the sentence, start of the next)
    for mark in _SENTENCE_ENDS:
        at = text.find(mark)
        while at >= 0:
            if at + 1 == len(text) or text[at + 1].isspace():
                ends.append((at + 1, at + 1))
            at = text.find(mark, at + 1)
    at = text.find("\n")
    while at >= 0:
        ends.append((at, at + 1))
        at = text.find("\n", at + 1)
    spans: list[tuple[int, int]] = []
    start = 0
    for end, following in sorted(ends):
        if end > start:
            spans.append((start, end))
        start = max(start, following)
    if start < len(text):
        spans.append((start, len(text)))
    return spans


class Redactor:
    """Applies ``settings`` (``config.RedactionSettings``: a policy per kind, ``phone_region``)
    to texts before they are stored. ``redact(text) -> RedactionResult``; never raises for any
    text; time linear in the text."""

    def __init__(self, settings: Any):
        self.settings = settings
        self.policies: dict[str, str] = {kind: getattr(settings, kind) for kind in KINDS}

    @property
    def active(self) -> bool:
        """Whether any kind is dropped or masked (with every kind ``keep``, texts still get
        ``findings`` counted)."""
        return any(p != "keep" for p in self.policies.values())

    def redact(self, text: str) -> RedactionResult:
        """``text`` with the sentences of ``drop`` findings removed and the values of ``mask``
        findings masked (module docstring). Masking keeps the text's layout; dropping removes
        a sentence with the whitespace before it, and the result is stripped."""
        findings = detect(text, phone_region=self.settings.phone_region)
        if not findings:
            return RedactionResult(text=text)
        counts = Counter(f.kind for f in findings)
        applied = Counter((f.kind, self.policies[f.kind]) for f in findings)
        drop = [f for f in findings if self.policies[f.kind] == "drop"]
        mask = [f for f in findings if self.policies[f.kind] == "mask"]
        if not drop and not mask:
            return RedactionResult(text=text, findings=dict(counts), applied=dict(applied))
        removed: list[tuple[int, int]] = []
        if drop:
            i = 0  # drop findings are sorted by start and never overlap: one sweep
            for start, end in sentence_spans(text):
                while i < len(drop) and drop[i].end <= start:
                    i += 1
                if i < len(drop) and drop[i].start < end:
                    removed.append((start, end))
            # a finding across sentences (a private key block) is removed whole too
            removed.extend((f.start, f.end) for f in drop)
        pieces: list[str] = []
        at = 0
        for start, end, replacement in _edits(text, removed, mask):
            pieces.append(text[at:start])
            pieces.append(replacement)
            at = end
        pieces.append(text[at:])
        out = "".join(pieces)
        if removed:
            out = _tidy(out)
        return RedactionResult(
            text=out,
            findings=dict(counts),
            applied=dict(applied),
            dropped=not out,
            changed=out != text,
        )


def _edits(text: str, removed: list[tuple[int, int]], mask: list[Finding]) -> list[tuple[int, int, str]]:
    """Non-overlapping (start, end, replacement) edits, by start: removed spans (merged) give
    ``""``; a masked value outside them gives its prefix + ``MASK``."""
    merged: list[list[int]] = []
    for start, end in sorted(removed):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    edits = [(s, e, "") for s, e in merged]
    i = 0  # mask findings are sorted by start: one sweep over the merged spans
    for f in mask:
        while i < len(merged) and merged[i][1] <= f.start:
            i += 1
        if i < len(merged) and merged[i][0] < f.end:
            continue
        keep = f.keep if f.kind == CREDENTIALS else min(4, (f.end - f.start) // 4)
        edits.append((f.start, f.end, text[f.start : f.start + keep] + MASK))
    return sorted(edits)


def _tidy(text: str) -> str:
    """``text`` without the blank lines and doubled spaces that removed sentences leave."""
    lines = (" ".join(part for part in line.split(" ") if part) for line in text.split("\n"))
    return "\n".join(line for line in lines if line.strip()).strip()


REDACTED_CONTENT = "[redacted]"
"""The content a dropped memory is reported with (it is not stored)."""


def redact_memories(redactor: Redactor, memories: Sequence[Memory]) -> tuple[list[Memory | None], Counter]:
    """``memories`` as they may be stored, in order: unchanged, redacted (new content, no
    vector: it is embedded again from the redacted text, so no vector encodes a secret), or
    ``None`` when nothing is left (not stored). Also the (kind, policy) → values counts."""
    out: list[Memory | None] = []
    applied: Counter = Counter()
    for memory in memories:
        result = redactor.redact(memory.content)
        applied.update(result.applied)
        if result.dropped:
            out.append(None)
        elif result.changed:
            out.append(
                memory.model_copy(update={"content": result.text, "embedding": None, "embedding_identity": None})
            )
        else:
            out.append(memory)
    return out, applied


def withheld(memory: Memory) -> Memory:
    """``memory`` as a dropped write reports it: its content withheld, no vector."""
    return memory.model_copy(update={"content": REDACTED_CONTENT, "embedding": None, "embedding_identity": None})


def redact_changes(redactor: Redactor, changes: MemoryChanges, count: Callable[[str, int], None]) -> MemoryChanges:
    """``changes`` of an update with its ``content`` (when given) redacted; each value
    found counted as ``count("redaction:<kind>:<policy>", n)``. Raises ``InvalidInput`` when
    nothing of the content is left (the update is refused: nothing is changed)."""
    content = changes.content
    if content is None:
        return changes
    result = redactor.redact(content)
    for (kind, policy), n in sorted(result.applied.items()):
        count(f"redaction:{kind}:{policy}", n)
    if result.dropped:
        raise InvalidInput("content: every sentence holds a secret or personal value that is not stored")
    return changes.with_changes(content=result.text) if result.changed else changes
