"""Input rules shared by every store and the HTTP API (the one place for them).

Every value a caller controls passes one of these rules before it reaches a store, and the
backend adapters then pass it as data (Qdrant filters, Valkey key names and hex TAG values)
or escape it (Milvus expression literals) as well. The rules:

- **Text** (every string of a request body, at any depth): valid Unicode, i.e. no lone
  UTF-16 surrogate (``"\\ud800"`` parses from JSON but cannot be encoded as UTF-8, stored
  or sent anywhere). ``check_json_text`` walks a parsed JSON body.
- **Memory content**: control characters other than tab/newline/CR removed, outer whitespace
  stripped, at least one *visible* character (whitespace-only and invisible-only content,
  e.g. ``"\\u200b\\u200c\\u200d"``, are both refused), at most ``MAX_CONTENT_BYTES``.
- **Owner, project and conversation ids** (``require_user_id`` / ``check_project_id`` /
  ``check_conversation_id``): 1..256 characters, no surrounding whitespace, no control,
  format or separator characters other than an inner ASCII space, so ``"alice\\u200b"`` can
  never alias ``"alice"``. The same rule for the ``x-project-id``/``x-conversation-id``
  headers of a chat request as for the REST fields.
- **Memory ids** (``MEMORY_ID_PATTERN``): 32 lowercase hex characters, the only format the
  service issues. A path id of another shape is "not found" before any store call; an import
  line with one is a per-line error. Ids are *scoped to their owner*: the last 16 hex
  characters are a tag derived from the owner's id and the first 16 (``new_memory_id`` /
  ``scoped_memory_id``), so an id issued for one user is never valid for another and two
  users never hold the same id (see ``migration.import_lines``).
- **Instants** (``check_instant``; every datetime field of a body, an import line or a
  stored record: ``created_at``, ``updated_at``, ``last_accessed``, ``valid_from``,
  ``valid_to``, ``expires_at``): a naive time is UTC; the time converted to UTC must be
  representable (years 1..9999 UTC: ``0001-01-01T00:00:00+23:59`` is not), which also makes
  its epoch milliseconds, the encoding of every backend, fit in 64 bits. Returned in UTC.
- **JSON values** (``check_json_value``, metadata): strings as above, integers within signed
  64 bits (what every backend stores losslessly), finite floats, object keys 1..256
  characters without control characters, nesting at most ``MAX_JSON_DEPTH``.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import secrets
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from pydantic import AfterValidator, Field

from .errors import InvalidInput

MAX_CONTENT_BYTES = 16 * 1024
"""Largest memory content accepted, in UTF-8 bytes. Larger content is rejected, never cut."""

MAX_USER_ID_CHARS = 256
MAX_SCOPE_ID_CHARS = 256
"""Longest project id and conversation id, in characters (REST fields and chat headers)."""
MAX_JSON_DEPTH = 32
"""Deepest nesting of a metadata value (an object or list inside another counts one level)."""
MAX_JSON_KEY_CHARS = 256
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_CONTROL_ALL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_FORBIDDEN_ID_CATEGORIES = frozenset({"Cc", "Cf", "Zs", "Zl", "Zp"})
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Zs", "Zl", "Zp", "Cs"})
"""Categories of characters that show nothing (controls, format characters such as the
zero-width space and joiners, separators, surrogates)."""
_BLANK = re.compile("[\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u2800\u3164\ufe00-\ufe0f\uffa0\U000e0100-\U000e01ef]")
"""Default-ignorable or blank code points outside those categories (Unicode's
Default_Ignorable_Code_Point property: Hangul fillers, variation selectors, the combining
grapheme joiner, Khmer inherent vowels; and the blank braille pattern U+2800)."""


# --------------------------------------------------------------------------- text
def check_text(value: str, field: str) -> str:
    """``value`` unchanged when it is valid Unicode (no lone surrogate); raises
    ``InvalidInput`` naming ``field`` and the position otherwise."""
    m = _SURROGATE.search(value)
    if m is not None:
        raise InvalidInput(
            f"{field}: text must be valid Unicode (lone surrogate U+{ord(m.group()):04X} at index {m.start()})"
        )
    return value


def check_json_text(value: Any, field: str = "body") -> Any:
    """Walk a parsed JSON value and refuse (``InvalidInput`` naming the path, e.g.
    ``messages.0.content``) any string or object key that is not valid Unicode. Returns
    ``value`` unchanged. Iterative, so any nesting ``json.loads`` accepted is walked."""
    stack: list[tuple[Any, str]] = [(value, field)]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            check_text(item, path)
        elif isinstance(item, dict):
            for k, v in item.items():
                if isinstance(k, str):
                    check_text(k, f"{path} (a key)")
                stack.append((v, f"{path}.{k}"))
        elif isinstance(item, (list, tuple)):
            stack.extend((v, f"{path}.{i}") for i, v in enumerate(item))
    return value


def is_visible(text: str) -> bool:
    """True when ``text`` has at least one character that shows something: not whitespace,
    not a control, format, separator or surrogate character, not a default-ignorable or blank
    code point (``_BLANK``)."""
    return any(
        not c.isspace() and unicodedata.category(c) not in _INVISIBLE_CATEGORIES and not _BLANK.match(c) for c in text
    )


def clean_content(content: str, max_bytes: int = MAX_CONTENT_BYTES, field: str = "content") -> str:
    """Return ``content`` with C0 control characters (except tab/newline/CR) removed and outer
    whitespace stripped. Unicode is otherwise kept byte-exact (no normalisation).

    Raises ``InvalidInput`` when the content is not a string, is not valid Unicode, has no
    visible character (empty, whitespace-only and invisible-only content alike) or is longer
    than ``max_bytes`` UTF-8 bytes.
    """
    if not isinstance(content, str):
        raise InvalidInput(f"{field} must be a string")
    check_text(content, field)
    cleaned = _CONTROL.sub("", content).strip()
    if not is_visible(cleaned):
        raise InvalidInput(f"{field} must not be empty (it has no visible character)")
    size = len(cleaned.encode("utf-8"))
    if size > max_bytes:
        raise InvalidInput(f"{field} is {size} bytes; the limit is {max_bytes} bytes (UTF-8)")
    return cleaned


# --------------------------------------------------------------------------- ids
def require_user_id(user_id: str | None, field: str = "user_id", max_chars: int = MAX_USER_ID_CHARS) -> str:
    """Validate an owner id (and, with ``field``, any id of the same rule) and return it
    unchanged: non-empty, at most ``max_chars`` characters, no leading/trailing whitespace and
    no control, format or separator characters other than an inner ASCII space (Unicode
    categories Cc, Cf, Zs, Zl, Zp — so ``"alice\\u00a0"`` or ``"alice\\u200b"`` can never
    alias ``"alice"``), valid Unicode. Raises ``InvalidInput`` otherwise. An empty user id
    never means "all users"."""
    if user_id is None or not isinstance(user_id, str) or not user_id:
        raise InvalidInput(f"{field} is required and must be non-empty")
    if len(user_id) > max_chars:
        raise InvalidInput(f"{field} is longer than {max_chars} characters")
    if user_id.isascii() and user_id.isprintable():
        # printable ASCII (U+0020..U+007E) holds no surrogate and, but for the space, no
        # character of the forbidden categories: the per-character walk below is not needed
        if user_id != user_id.strip():
            raise InvalidInput(f"{field} has surrounding whitespace or control/invisible characters")
        return user_id
    check_text(user_id, field)
    if user_id != user_id.strip() or any(
        c != " " and unicodedata.category(c) in _FORBIDDEN_ID_CATEGORIES for c in user_id
    ):
        raise InvalidInput(f"{field} has surrounding whitespace or control/invisible characters")
    return user_id


def check_project_id(project_id: str | None, field: str = "project_id") -> str | None:
    """``None`` (no project) or a project id following the id rule (see ``require_user_id``,
    at most ``MAX_SCOPE_ID_CHARS``). Raises ``InvalidInput``."""
    if project_id is None:
        return None
    return require_user_id(project_id, field, MAX_SCOPE_ID_CHARS)


def check_conversation_id(conversation_id: str | None, field: str = "conversation_id") -> str | None:
    """``None`` or a conversation id following the id rule (at most ``MAX_SCOPE_ID_CHARS``).
    Raises ``InvalidInput``."""
    if conversation_id is None:
        return None
    return require_user_id(conversation_id, field, MAX_SCOPE_ID_CHARS)


MAX_LABEL_CHARS = 64


def check_label(value: Any, field: str) -> str:
    """A provenance label (``source``, ``created_via``): a string of 1..``MAX_LABEL_CHARS``
    characters with a visible character and no control characters. Raises ``InvalidInput``."""
    if not isinstance(value, str) or not 0 < len(value) <= MAX_LABEL_CHARS:
        raise InvalidInput(f"{field} must be a string of 1..{MAX_LABEL_CHARS} characters")
    check_text(value, field)
    if _CONTROL_ALL.search(value) or not is_visible(value):
        raise InvalidInput(f"{field} must be visible text without control characters")
    return value


MEMORY_ID_PATTERN = r"^[0-9a-f]{32}$"
"""The one memory id format: 32 lowercase hex characters."""
_MEMORY_ID = re.compile(MEMORY_ID_PATTERN)
_ID_TAG_DOMAIN = b"memory-router/memory-id/v1\x00"


def is_memory_id(value: Any) -> bool:
    """True when ``value`` has the memory id format (``MEMORY_ID_PATTERN``)."""
    return isinstance(value, str) and _MEMORY_ID.fullmatch(value) is not None


def _id_tag(user_id: str, body: str) -> str:
    digest = hashlib.sha256(_ID_TAG_DOMAIN + user_id.encode("utf-8") + b"\x00" + body.encode("ascii"))
    return digest.hexdigest()[:16]


def new_memory_id(user_id: str) -> str:
    """A fresh id for a memory of ``user_id``: 16 random hex characters (64 bits) followed by
    their 16-hex owner tag (``is_scoped_to(id, user_id)`` is true)."""
    body = secrets.token_hex(8)
    return body + _id_tag(user_id, body)


def scoped_memory_id(user_id: str, seed: str) -> str:
    """The deterministic id of ``user_id`` derived from ``seed`` (e.g. an import line's own id,
    or its content and date): the same seed always gives the same id for the same user, and
    ids of two users never coincide (each carries its owner's tag)."""
    body = hashlib.sha256(_ID_TAG_DOMAIN + seed.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return body + _id_tag(user_id, body)


def is_scoped_to(memory_id: str, user_id: str) -> bool:
    """True when ``memory_id`` has the id format and carries ``user_id``'s owner tag (it was
    issued for that user). Ids issued before owner tags existed (plain UUID4 hex) are not."""
    return is_memory_id(memory_id) and secrets.compare_digest(memory_id[16:], _id_tag(user_id, memory_id[:16]))


def require_memory_id(memory_id: Any, field: str = "id") -> str:
    """``memory_id`` unchanged when it has the memory id format; raises ``InvalidInput``."""
    if not is_memory_id(memory_id):
        raise InvalidInput(f"{field} must be 32 lowercase hex characters (a memory id issued by this service)")
    return memory_id


# --------------------------------------------------------------------------- JSON values
def check_json_value(value: Any, field: str = "metadata") -> Any:
    """``value`` unchanged when every part of it is stored losslessly by every backend:
    strings valid Unicode, integers within signed 64 bits, floats finite, object keys strings
    of 1..``MAX_JSON_KEY_CHARS`` characters without control characters, nesting at most
    ``MAX_JSON_DEPTH``. Raises ``InvalidInput`` naming the path (``metadata.a.0``)."""
    stack: list[tuple[Any, str, int]] = [(value, field, 0)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, bool) or item is None:
            continue
        if isinstance(item, str):
            check_text(item, path)
        elif isinstance(item, int):
            if not INT64_MIN <= item <= INT64_MAX:
                raise InvalidInput(f"{path}: integer outside the signed 64-bit range")
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise InvalidInput(f"{path}: number must be finite")
        elif isinstance(item, (dict, list, tuple)):
            if depth >= MAX_JSON_DEPTH:
                raise InvalidInput(f"{path}: nested deeper than {MAX_JSON_DEPTH} levels")
            if isinstance(item, dict):
                for k, v in item.items():
                    if not isinstance(k, str) or not 0 < len(k) <= MAX_JSON_KEY_CHARS:
                        raise InvalidInput(f"{path}: keys must be strings of 1..{MAX_JSON_KEY_CHARS} characters")
                    check_text(k, f"{path} (a key)")
                    if _CONTROL_ALL.search(k):
                        raise InvalidInput(f"{path}: key {k!r} has control characters")
                    stack.append((v, f"{path}.{k}", depth + 1))
            else:
                stack.extend((v, f"{path}.{i}", depth + 1) for i, v in enumerate(item))
        else:
            raise InvalidInput(f"{path}: {type(item).__name__} is not a JSON value")
    return value


MAX_METADATA_BYTES = 16 * 1024
"""Largest ``metadata`` accepted, as compact JSON in UTF-8 bytes (it travels with every read)."""


def check_metadata(metadata: dict[str, Any] | None) -> dict[str, Any] | None:
    """``metadata`` unchanged if every value is stored losslessly (``sanitize.check_json_value``)
    and it serialises to at most ``MAX_METADATA_BYTES``; raises ``InvalidInput`` (a
    ``ValueError``) naming the offending path otherwise."""
    if metadata is None:
        return None
    check_json_value(metadata, "metadata")
    size = len(json.dumps(metadata, ensure_ascii=False, separators=(",", ":")).encode())
    if size > MAX_METADATA_BYTES:
        raise InvalidInput(f"metadata is {size} bytes as JSON; the limit is {MAX_METADATA_BYTES}")
    return metadata


INSTANT_FIELDS = ("created_at", "updated_at", "last_accessed", "valid_from", "valid_to", "expires_at")
"""The datetime fields of a memory (``types.Memory``), each checked by ``check_instant``."""


def check_instant(when: datetime, field: str = "") -> datetime:
    """``when`` as an aware UTC datetime (a naive one is taken as UTC, an aware one is
    converted). Raises ``InvalidInput`` (message starting with ``field``, when given) when
    ``when`` is not a datetime or its UTC time is outside what a ``datetime`` holds (before
    ``0001-01-01T00:00:00Z`` or after ``9999-12-31T23:59:59.999999Z``: e.g.
    ``0001-01-01T00:00:00+23:59`` or ``9999-12-31T23:59:59-23:59``). Every such UTC time has
    epoch milliseconds within ±2**53, so every backend encoding (int64 fields, Valkey's
    float scores, JSON numbers) holds it exactly. Leap seconds (``23:59:60``) and offsets of
    24 h or more never parse (pydantic refuses them)."""
    prefix = f"{field}: " if field else ""
    if not isinstance(when, datetime):
        raise InvalidInput(f"{prefix}must be a date and time")
    if when.tzinfo is None or when.utcoffset() is None:
        return when.replace(tzinfo=UTC)
    try:
        return when.astimezone(UTC)
    except (OverflowError, ValueError):
        raise InvalidInput(
            f"{prefix}{when.isoformat()} is outside the representable range once converted to UTC "
            "(0001-01-01T00:00:00Z .. 9999-12-31T23:59:59.999Z)"
        ) from None


def check_instants(values: Mapping[str, Any]) -> dict[str, Any]:
    """The ``INSTANT_FIELDS`` of ``values`` that are set (not ``None``), each through
    ``check_instant`` naming its field: ``{field: UTC datetime}``. Raises ``InvalidInput``."""
    return {k: check_instant(values[k], k) for k in INSTANT_FIELDS if values.get(k) is not None}


def _instant_field(when: datetime) -> datetime:
    return check_instant(when)  # pydantic names the field in the error's location


def check_not_future(when: datetime | None) -> datetime | None:
    """``when`` as an aware UTC-or-offset time (a naive one is taken as UTC); raises
    ``ValueError`` when it lies more than one minute (clock skew) in the future."""
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    if when > datetime.now(UTC) + timedelta(minutes=1):
        raise InvalidInput("created_at must not be in the future")
    return when


# --------------------------------------------------------------------------- field types
# the pydantic field types of request bodies and import lines, each checked by its one rule
Content = Annotated[str, AfterValidator(clean_content)]
"""Memory content: visible text, ≤ 16 KB UTF-8 (``sanitize.clean_content``; cleaned)."""
ProjectId = Annotated[str, Field(min_length=1, max_length=MAX_SCOPE_ID_CHARS), AfterValidator(check_project_id)]
ConversationId = Annotated[
    str, Field(min_length=1, max_length=MAX_SCOPE_ID_CHARS), AfterValidator(check_conversation_id)
]
Source = Annotated[
    str, Field(min_length=1, max_length=MAX_LABEL_CHARS), AfterValidator(lambda v: check_label(v, "source"))
]
Metadata = Annotated[dict[str, Any], AfterValidator(check_metadata)]
Text = Annotated[str, AfterValidator(lambda v: check_text(v, "text"))]
Instant = Annotated[datetime, AfterValidator(_instant_field)]
"""A date and time representable in UTC (``sanitize.check_instant``), returned in UTC."""
PastTime = Annotated[datetime, AfterValidator(_instant_field), AfterValidator(check_not_future)]
"""An ``Instant`` not in the future (``sanitize.check_not_future``)."""


# --------------------------------------------------------------------------- headers
USER_HEADER = "x-authz-user-id"
"""The caller, set by the gateway in front of the service from its authentication."""
ROLE_HEADER = "x-authz-role"
"""The caller's role (``user``/``admin``), set by the gateway with ``USER_HEADER``."""
GATEWAY_SECRET_HEADER = "x-authz-gateway-secret"
"""The shared secret a gateway sends with the identity headers (``access.gateway_secret_env``)."""
PROJECT_HEADER = "x-project-id"
"""Project scope of a chat request's memories."""
CONVERSATION_HEADER = "x-conversation-id"
"""Conversation of a chat request's turn (provenance of auto-stored memories)."""
DISABLE_HEADER = "x-disable-router-memory"
"""Turns memory off for one request (value ``true``/``1``/``yes``, any case)."""
CONTROLLED_HEADERS = frozenset(
    {USER_HEADER, ROLE_HEADER, GATEWAY_SECRET_HEADER, PROJECT_HEADER, CONVERSATION_HEADER, DISABLE_HEADER}
)
"""Headers this service acts on; each may appear at most once in a request."""
_TRUE_VALUES = frozenset({"true", "1", "yes"})


def normalize_headers(items: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Request headers as one ``{lower-case name: value}`` dict; the HTTP edge calls it once
    per request (``deployments.http.caller.read_caller``) and everything after reads its
    result. Values of ``CONTROLLED_HEADERS`` are decoded as UTF-8 (HTTP stacks hand
    header bytes over as latin-1). Raises ``InvalidInput`` when a controlled header appears
    more than once (a gateway that appends its authenticated ``x-authz-user-id`` instead of
    replacing the client's must not let the client choose) or is not valid UTF-8. For other
    headers the last value wins."""
    out: dict[str, str] = {}
    for name, value in items:
        key = name.lower()
        if key in CONTROLLED_HEADERS:
            if key in out:
                raise InvalidInput(f"header {key} must appear at most once")
            try:
                value = value.encode("latin-1").decode("utf-8")
            except (UnicodeEncodeError, UnicodeDecodeError):
                raise InvalidInput(f"header {key} is not valid UTF-8") from None
        out[key] = value
    return out


@dataclass(frozen=True)
class RequestContext:
    """Who asks and in which scope: a chat request's normalised headers read once at the
    edge (``request_context``).

    ``user_id``: the authenticated caller (``None``: no identity; chat then runs without
    memory); ``project_id``/``conversation_id``: the scope of the memories read and written;
    ``memory_disabled``: ``x-disable-router-memory`` was set; ``headers``: every header by
    lower-case name (``normalize_headers``; for the decisions' header match rules).
    """

    user_id: str | None = None
    project_id: str | None = None
    conversation_id: str | None = None
    memory_disabled: bool = False
    headers: Mapping[str, str] = field(default_factory=dict)


def request_context(headers: Mapping[str, str], user_id: str | None = None) -> RequestContext:
    """The memory scope of a request from its normalised ``headers`` (``normalize_headers``)
    and ``user_id``, the caller that ``access.Authenticator.identify`` established (it
    applied the owner id rule; ``None`` without identity): ``x-project-id`` and
    ``x-conversation-id`` checked by the project and conversation id rules (at most 256
    characters), ``x-disable-router-memory`` read as a flag. An empty value counts as
    absent; values are never stripped (a padded id is refused, not aliased). Raises
    ``InvalidInput`` naming the header."""
    project_id = check_project_id(headers.get(PROJECT_HEADER) or None, PROJECT_HEADER)
    conversation_id = check_conversation_id(headers.get(CONVERSATION_HEADER) or None, CONVERSATION_HEADER)
    disabled = (headers.get(DISABLE_HEADER) or "").strip().lower() in _TRUE_VALUES
    return RequestContext(
        user_id=user_id,
        project_id=project_id,
        conversation_id=conversation_id,
        memory_disabled=disabled,
        headers=headers,
    )


# --------------------------------------------------------------------------- browser origins
DEFAULT_PORTS = {"http": 80, "https": 443}
_HOST_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789.-_")
_IPV6_CHARS = frozenset("0123456789abcdef:.")


def parse_origin(value: str) -> str | None:
    """A browser origin (``Origin`` header, RFC 6454) in normal form: ``scheme://host[:port]``,
    lower case, the scheme's default port left out (``https://a.example:443`` →
    ``https://a.example``). ``None`` for anything else: ``null`` (an opaque origin), another
    scheme than http/https, a path, user info, a bad host or port. Linear in ``value``."""
    scheme, sep, rest = value.strip().lower().partition("://")
    if not sep or scheme not in DEFAULT_PORTS or not rest:
        return None
    port = ""
    if rest.startswith("["):  # an IPv6 literal
        host, bracket, tail = rest[1:].partition("]")
        if not bracket or not host or not set(host) <= _IPV6_CHARS or (tail and not tail.startswith(":")):
            return None
        host, port = f"[{host}]", tail[1:]
    else:
        host, _, port = rest.partition(":")
        if not host or not set(host) <= _HOST_CHARS:
            return None
    if ":" in port or (port and not (port.isascii() and port.isdigit() and 0 < int(port) < 65536)):
        return None
    if port and int(port) == DEFAULT_PORTS[scheme]:
        port = ""
    return f"{scheme}://{host}" + (f":{int(port)}" if port else "")
