"""Identity and access: who a request is (``Principal``), how that is established
(``Authenticator``: a trusted gateway's headers, or API keys), the API keys themselves
(``KeyRegistry``: SQLite, keys stored as SHA-256 digests only) and the per-user write rate
limit (``WriteRateLimiter``, counted per memory written).

Two modes (``AccessSettings.mode``):

- ``trusted_header``: a gateway in front of the service authenticates the caller and sets
  ``x-authz-user-id`` (and ``x-authz-role``: ``user``/``admin``, default ``user``). The
  headers are honoured only from a peer address in ``trusted_proxies``; from any other peer
  they are refused (``UntrustedIdentity``, 403), so a client that reaches the service around
  the gateway cannot choose its identity.
- ``api_key``: the service authenticates ``Authorization: Bearer <key>`` itself. A key maps
  to a user id and a role. Identity headers sent by the client are ignored, and the key is
  never forwarded to an upstream model.

API keys are 256-bit random tokens (``mr_`` + 43 URL-safe characters), so one SHA-256 of
the key is the stored form (as GitHub and Stripe store their tokens): a leaked database
reveals no usable key, and a lookup is one indexed read. A key is shown once, when created.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import math
import secrets
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path

from limits import RateLimitItemPerSecond
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter

from .errors import (
    Forbidden,
    InvalidApiKey,
    InvalidInput,
    KeyNotFound,
    RateLimited,
    RequestTooLarge,
    Unauthenticated,
    UnsupportedMediaType,
    UntrustedIdentity,
)
from .sanitize import GATEWAY_SECRET_HEADER, ROLE_HEADER, USER_HEADER, parse_origin, require_user_id
from .sqlite_file import open_sqlite

KEY_PREFIX = "mr_"
"""Every API key starts with this (secret scanners can recognise a leaked key)."""
AUTHORIZATION_HEADER = "authorization"
MIN_SECRET_CHARS = 16
"""The shortest bootstrap admin key or gateway secret accepted from the environment."""


class Role(str, Enum):
    """What a caller may do: ``user`` acts on its own memories; ``admin`` also acts on any
    user's memories and runs the operator endpoints (keys, users, consolidation, restoring
    quarantined or superseded memories)."""

    USER = "user"
    ADMIN = "admin"


@dataclass(frozen=True)
class Principal:
    """An authenticated caller: ``user_id`` (the owner id rule of ``sanitize``) and ``role``;
    for the audit log, how it authenticated (``credential``: ``api_key``, ``bootstrap_key``
    or ``trusted_header``) and the public id of its API key (``key_id``), which take no part
    in comparisons."""

    user_id: str
    role: Role = Role.USER
    credential: str = field(default="trusted_header", compare=False)
    key_id: str | None = field(default=None, compare=False)

    @property
    def is_admin(self) -> bool:
        return self.role is Role.ADMIN

    def require_admin(self, action: str) -> None:
        """Raises ``Forbidden`` (403) unless the caller is an admin; ``action`` names what
        was refused in the message."""
        if not self.is_admin:
            raise Forbidden(f"{action} needs the admin role")

    def owner(self, requested: str | None) -> str:
        """The owner of the memories a request acts on: the caller, or ``requested`` (the
        ``user_id`` query parameter), which a ``user`` may only set to itself. Raises
        ``Forbidden`` (403) for a user naming another user, ``InvalidInput`` (400) for an id
        that breaks the owner id rule."""
        if requested is None or requested == self.user_id:
            return self.user_id
        require_user_id(requested, "user_id")
        if not self.is_admin:
            raise Forbidden("acting on another user's memories needs the admin role")
        return requested


# --------------------------------------------------------------------------- API keys
def new_api_key() -> str:
    """A fresh API key: ``mr_`` + 32 random bytes, URL-safe base64 (43 characters)."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def key_digest(key: str) -> str:
    """The stored form of ``key``: its SHA-256, hex (64 characters)."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def _secret_digest(environ: Mapping[str, str], env_name: str, setting: str) -> str:
    """``key_digest`` of the secret in ``environ[env_name]``, the variable the setting
    ``setting`` (its dotted name, for the message) names. Raises ``ConfigError`` when the
    variable is unset or shorter than ``MIN_SECRET_CHARS``."""
    from .errors import ConfigError

    secret = environ.get(env_name, "")
    if len(secret) < MIN_SECRET_CHARS:
        raise ConfigError(f"{setting}: the variable {env_name} is unset or shorter than {MIN_SECRET_CHARS} characters")
    return key_digest(secret)


@dataclass(frozen=True)
class KeyRecord:
    """A stored API key, without the key: ``key_id`` (public handle, ``key_`` + 16 hex),
    owner, role, optional ``name``, creation and revocation times (UTC, ISO 8601)."""

    key_id: str
    user_id: str
    role: Role
    name: str | None
    created_at: str
    revoked_at: str | None = None

    def public(self) -> dict:
        """JSON-ready dict for the admin API."""
        return {
            "key_id": self.key_id,
            "user_id": self.user_id,
            "role": self.role.value,
            "name": self.name,
            "created_at": self.created_at,
            "revoked_at": self.revoked_at,
        }


_SCHEMA = """
CREATE TABLE IF NOT EXISTS api_keys (
    key_id TEXT PRIMARY KEY,
    digest TEXT NOT NULL UNIQUE,
    user_id TEXT NOT NULL,
    role TEXT NOT NULL,
    name TEXT,
    created_at TEXT NOT NULL,
    revoked_at TEXT
);
CREATE TABLE IF NOT EXISTS users (
    user_id TEXT PRIMARY KEY,
    first_seen TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS api_keys_by_user ON api_keys (user_id);
"""
MAX_KEY_NAME_CHARS = 200


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class KeyRegistry:
    """API keys (hashed) and the users the service has seen, in one SQLite file (WAL mode,
    so every ingress replica on a node shares it; on a cluster put ``path`` on storage every
    ingress node mounts, or use ``trusted_header`` behind a gateway).

    ``path``: the database file (parent folders are created) or ``":memory:"``. Every method
    is thread-safe. ``verify`` and the writes take well under a millisecond (one indexed
    statement each; ``create``: one transaction of two) and run on the ingress's event loop; the admin views' reads (``users``,
    ``user_count``, ``active_key_count``, ``keys``) walk a table, and the service calls them
    on worker threads; they use a second connection with its own lock, so a request's key
    check never waits behind an admin page (WAL: a reader never blocks the writer).
    ``":memory:"`` (tests) has one connection for both."""

    def __init__(self, path: str | Path):
        self.path = str(path)
        self._lock = threading.Lock()
        self._db = open_sqlite(self.path)
        self._db.executescript(_SCHEMA)
        if self.path in ("", ":memory:"):  # a second connection would open another, empty database
            self._read_lock, self._read_db = self._lock, self._db
        else:
            try:
                self._read_lock, self._read_db = threading.Lock(), open_sqlite(self.path)
            except BaseException:
                self._db.close()
                raise

    def close(self) -> None:
        with self._lock:
            self._db.close()
        if self._read_db is not self._db:
            with self._read_lock:
                self._read_db.close()

    @staticmethod
    def _record(row: tuple) -> KeyRecord:
        key_id, user_id, role, name, created_at, revoked_at = row
        return KeyRecord(key_id, user_id, Role(role), name, created_at, revoked_at)

    def create(self, user_id: str, role: Role | str = Role.USER, name: str | None = None) -> tuple[str, KeyRecord]:
        """A new key for ``user_id`` with ``role``: returns ``(key, record)``; only the
        digest is stored, so ``key`` is never available again. Raises ``InvalidInput`` for a
        bad user id, role or name."""
        require_user_id(user_id, "user_id")
        try:
            role = Role(role)
        except ValueError:
            raise InvalidInput(f"role must be one of {[r.value for r in Role]}") from None
        if name is not None and (len(name) > MAX_KEY_NAME_CHARS or not name.isprintable()):
            raise InvalidInput(f"name: at most {MAX_KEY_NAME_CHARS} printable characters")
        key = new_api_key()
        record = KeyRecord("key_" + secrets.token_hex(8), user_id, role, name, _now())
        with self._lock:
            # one transaction: an admin read (its own connection) never sees the key without
            # its user
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute(
                    "INSERT INTO api_keys (key_id, digest, user_id, role, name, created_at) VALUES (?, ?, ?, ?, ?, ?)",
                    (record.key_id, key_digest(key), user_id, role.value, name, record.created_at),
                )
                self._db.execute(
                    "INSERT OR IGNORE INTO users (user_id, first_seen) VALUES (?, ?)", (user_id, record.created_at)
                )
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:  # SQLite may have rolled back already (I/O error)
                    self._db.execute("ROLLBACK")
                raise
        return key, record

    def revoke(self, key_id: str) -> KeyRecord:
        """Revoke ``key_id`` (from now on the key is refused, 401). Revoking a revoked key
        keeps its first revocation time. Raises ``KeyNotFound`` (404)."""
        with self._lock:
            self._db.execute(
                "UPDATE api_keys SET revoked_at = ? WHERE key_id = ? AND revoked_at IS NULL", (_now(), key_id)
            )
            row = self._db.execute(
                "SELECT key_id, user_id, role, name, created_at, revoked_at FROM api_keys WHERE key_id = ?", (key_id,)
            ).fetchone()
        if row is None:
            raise KeyNotFound(f"no API key {key_id!r}")
        return self._record(row)

    def keys(self, user_id: str | None = None) -> list[KeyRecord]:
        """Every key (of ``user_id`` when given), oldest first, revoked ones included."""
        sql = "SELECT key_id, user_id, role, name, created_at, revoked_at FROM api_keys"
        args: tuple = ()
        if user_id is not None:
            sql, args = sql + " WHERE user_id = ?", (user_id,)
        with self._read_lock:
            rows = self._read_db.execute(sql + " ORDER BY created_at, key_id", args).fetchall()
        return [self._record(r) for r in rows]

    def verify(self, key: str) -> Principal | None:
        """The principal of an active ``key``; ``None`` for an unknown or revoked key."""
        with self._lock:
            row = self._db.execute(
                "SELECT user_id, role, key_id FROM api_keys WHERE digest = ? AND revoked_at IS NULL", (key_digest(key),)
            ).fetchone()
        return None if row is None else Principal(row[0], Role(row[1]), credential="api_key", key_id=row[2])

    def note_user(self, user_id: str) -> None:
        """Remember that ``user_id`` has memories (the admin user list)."""
        with self._lock:
            self._db.execute("INSERT OR IGNORE INTO users (user_id, first_seen) VALUES (?, ?)", (user_id, _now()))

    def users(self, limit: int | None = None, offset: int = 0) -> list[tuple[str, int]]:
        """The users seen (written memories or hold a key), sorted by id, with the count of
        their active keys: ``[(user_id, active_keys)]``; ``limit``/``offset`` select one page
        (``None``: every user from ``offset`` on). Raises ``InvalidInput`` for a negative
        ``limit`` or ``offset``."""
        if (limit is not None and limit < 0) or offset < 0:
            raise InvalidInput("limit and offset must be ≥ 0")
        with self._read_lock:
            rows = self._read_db.execute(
                "SELECT p.user_id, (SELECT COUNT(*) FROM api_keys k WHERE k.user_id = p.user_id "
                "AND k.revoked_at IS NULL) FROM (SELECT user_id FROM users ORDER BY user_id LIMIT ? OFFSET ?) p "
                "ORDER BY p.user_id",
                (-1 if limit is None else limit, offset),
            ).fetchall()
        return [(r[0], int(r[1])) for r in rows]

    def user_count(self) -> int:
        """How many users have been seen (``users``' length without a page)."""
        with self._read_lock:
            return int(self._read_db.execute("SELECT COUNT(*) FROM users").fetchone()[0])

    def active_key_count(self) -> int:
        """How many keys are not revoked (every key's user is among ``users``)."""
        with self._read_lock:
            return int(self._read_db.execute("SELECT COUNT(*) FROM api_keys WHERE revoked_at IS NULL").fetchone()[0])


# --------------------------------------------------------------------------- who is asking
def parse_bearer(value: str) -> str:
    """The token of an ``Authorization: Bearer <token>`` value (RFC 6750 §2.1; the scheme
    is case-insensitive). Raises ``InvalidApiKey`` (401) for another scheme or no token."""
    scheme, _, token = value.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise InvalidApiKey("Authorization must be 'Bearer <API key>'")
    return token


IPV6_CLIENT_PREFIX = 64
"""The IPv6 prefix length counted as one client by the anonymous rate limit: one host is
commonly given a whole /64 (RFC 6177), so keying on the full address would let one client
take a fresh limit for every address it picks in it."""


def client_network(peer: str | None) -> str:
    """The key one client's anonymous requests count under: an IPv4 address as it is, an
    IPv6 address as its ``/64`` network (an IPv4-mapped IPv6 address as the IPv4 address),
    anything else (a Unix socket, no address) as the text itself or ``"unknown"``."""
    if not peer:
        return "unknown"
    try:
        address = ipaddress.ip_address(peer)
    except ValueError:
        return peer
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, IPV6_CLIENT_PREFIX), strict=False))
    return str(address)


class Authenticator:
    """Establishes a request's ``Principal`` by the configured mode (see the module).

    ``settings``: ``config.AccessSettings``; ``registry``: the key registry (``api_key``
    mode); ``environ``: where ``api_keys.admin_key_env`` is read (a bootstrap admin key, so a
    fresh deployment can create its first keys; it maps to ``api_keys.admin_user_id``).
    Raises ``ConfigError`` at construction when the named variable is unset or empty."""

    def __init__(self, settings, registry: KeyRegistry | None, environ: Mapping[str, str]):
        self.settings = settings
        self.registry = registry
        self._networks = [ipaddress.ip_network(n, strict=False) for n in settings.trusted_proxies]
        self._admin_digest: str | None = None
        self._gateway_digest: str | None = None
        secret_env = settings.gateway_secret_env
        if settings.mode == "trusted_header" and secret_env:
            self._gateway_digest = _secret_digest(environ, secret_env, "global.access.gateway_secret_env")
        env = settings.api_keys.admin_key_env
        if settings.mode == "api_key" and env:
            self._admin_digest = _secret_digest(environ, env, "global.access.api_keys.admin_key_env")
        anonymous = settings.anonymous.rate_limit
        self._anonymous_limit = WriteRateLimiter(
            anonymous.limit,
            anonymous.window_s,
            what="requests without identity from this address",
            unit="requests",
            verb="counts",
        )

    @property
    def api_key_mode(self) -> bool:
        return self.settings.mode == "api_key"

    def trusted_peer(self, peer: str | None) -> bool:
        """Whether ``peer`` (the TCP peer's address) is one of ``trusted_proxies``."""
        if peer is None:
            return False
        try:
            address = ipaddress.ip_address(peer)
        except ValueError:
            return False
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped  # ::ffff:127.0.0.1 from a dual-stack listener
        return any(address in network for network in self._networks)

    def from_gateway(self, headers: Mapping[str, str], peer: str | None) -> bool:
        """Whether a request comes through the gateway: ``peer`` is one of ``trusted_proxies``
        and, when ``gateway_secret_env`` is set, ``headers`` (lower-case names) carry the
        gateway secret."""
        if not self.trusted_peer(peer):
            return False
        if self._gateway_digest is None:
            return True
        return hmac.compare_digest(key_digest(headers.get(GATEWAY_SECRET_HEADER, "")), self._gateway_digest)

    def admit_anonymous(self, headers: Mapping[str, str], peer: str | None) -> None:
        """Let a request without identity through to an endpoint that works without a user
        (chat without memory, embeddings, models), by ``anonymous.allow``: ``gateway`` (only
        ``from_gateway``), ``anyone`` or ``nobody``; in ``api_key`` mode never. An admitted
        request counts against ``anonymous.rate_limit`` for ``peer`` (the client address).

        Raises ``Unauthenticated`` (401) when it is not admitted, ``RateLimited`` (429, with
        ``retry_after_s``) beyond the limit."""
        if self.api_key_mode:
            raise Unauthenticated("missing caller identity: send an API key (Authorization: Bearer)")
        allow = self.settings.anonymous.allow
        if allow == "nobody" or (allow == "gateway" and not self.from_gateway(headers, peer)):
            raise Unauthenticated(
                f"missing caller identity: send {USER_HEADER} through the gateway "
                f"(requests without identity: global.access.anonymous.allow = {allow})"
            )
        self._anonymous_limit.take(client_network(peer))

    def identify(self, headers: Mapping[str, str], peer: str | None) -> Principal | None:
        """The caller of a request, or ``None`` when it carries no identity. ``headers``:
        lower-case names (``sanitize.normalize_headers``); ``peer``: the client address.

        Raises ``InvalidApiKey`` (401: malformed, unknown or revoked key),
        ``UntrustedIdentity`` (403: identity headers from an untrusted peer) or
        ``InvalidInput`` (400: a malformed user id or role header)."""
        if self.api_key_mode:
            value = headers.get(AUTHORIZATION_HEADER)
            if not value:
                return None
            key = parse_bearer(value)
            if self._admin_digest is not None and hmac.compare_digest(key_digest(key), self._admin_digest):
                return Principal(self.settings.api_keys.admin_user_id, Role.ADMIN, credential="bootstrap_key")
            principal = self.registry.verify(key) if self.registry is not None else None
            if principal is None:
                raise InvalidApiKey("unknown or revoked API key")
            return principal
        user_id = headers.get(USER_HEADER) or None
        role_value = headers.get(ROLE_HEADER) or None
        if (user_id or role_value) and not self.trusted_peer(peer):
            raise UntrustedIdentity(
                f"{USER_HEADER}/{ROLE_HEADER} are accepted only from the trusted proxies (global.access.trusted_proxies)"
            )
        if (user_id or role_value) and self._gateway_digest is not None:
            sent = headers.get(GATEWAY_SECRET_HEADER, "")
            if not hmac.compare_digest(key_digest(sent), self._gateway_digest):
                raise UntrustedIdentity(f"{USER_HEADER}/{ROLE_HEADER} need the gateway's {GATEWAY_SECRET_HEADER}")
        if user_id is None:
            return None
        try:
            role = Role((role_value or Role.USER.value).lower())
        except ValueError:
            raise InvalidInput(f"{ROLE_HEADER} must be one of {[r.value for r in Role]}") from None
        return Principal(require_user_id(user_id, USER_HEADER), role)


# --------------------------------------------------------------------------- rate limit
class WriteRateLimiter:
    """At most ``limit`` memories written per user in any ``window_s`` seconds (a moving
    window, ``limits.strategies.MovingWindowRateLimiter``), per ingress replica: with N
    replicas a user may reach N × ``limit``. ``limit`` 0 turns the limit off.

    A request takes its whole cost (the memories it writes) up front, before any of them is
    written: either all of it fits in what remains of the window, or the request is refused
    and nothing is counted (so nothing is half-written)."""

    def __init__(
        self,
        limit: int,
        window_s: int,
        clock: Callable[[], float] = time.time,
        what: str = "writes for this user",
        unit: str = "memories",
        verb: str = "writes",
    ):
        self.enabled = limit > 0
        self._item = RateLimitItemPerSecond(max(limit, 1), window_s)
        self._storage = MemoryStorage()
        self._limiter = MovingWindowRateLimiter(self._storage)
        self._clock = clock
        self._what = what  # what is counted, for the message (the same limiter keys requests per address)
        self._unit = unit  # what one cost counts, and how a request takes it: "writes" 3 memories
        self._verb = verb

    @property
    def limit(self) -> int:
        """Memories per window (``0``: off)."""
        return self._item.amount if self.enabled else 0

    @property
    def window_s(self) -> int:
        return self._item.multiples

    def take(self, user_id: str, cost: int = 1) -> None:
        """Count ``cost`` (≥ 1) memories written by ``user_id``, all or none. Raises
        ``RateLimited`` (429) carrying ``retry_after_s`` (whole seconds until ``cost`` fits
        again, at least 1) when the window's remainder is smaller than ``cost``, and
        ``RequestTooLarge`` (413) when ``cost`` exceeds the whole limit (it never fits)."""
        if cost < 1:
            raise ValueError("cost must be at least 1")
        if not self.enabled:
            return
        limit, window = self._item.amount, self._item.multiples
        if cost > limit:
            raise RequestTooLarge(
                f"this request writes {cost} memories; the write limit is {limit} memories per {window} s "
                "per user (global.access.write_rate_limit.limit): send fewer at a time"
            )
        if self._limiter.hit(self._item, "writes", user_id, cost=cost):
            return
        raise RateLimited(
            f"too many {self._what}: at most {limit} {self._unit} per {window} s (this request {self._verb} {cost})",
            self._retry_after(user_id, cost),
        )

    def _retry_after(self, user_id: str, cost: int) -> int:
        """Whole seconds until ``cost`` more fit in the window: until the entry that leaves
        room for them expires (the moving window's log of ``MemoryStorage``, newest first)."""
        limit, window = self._item.amount, self._item.multiples
        entries = self._storage.events.get(self._item.key_for("writes", user_id), [])
        if len(entries) > limit - cost:
            frees_at = entries[limit - cost].atime + window
        else:  # the log moved meanwhile: the window's own reset time
            frees_at, _ = self._limiter.get_window_stats(self._item, "writes", user_id)
        return max(1, math.ceil(frees_at - self._clock()))

    def allow(self, user_id: str, cost: int = 1) -> bool:
        """``take`` as a yes/no (chat's auto-store skips a turn instead of failing the chat;
        a turn larger than the whole limit is refused too)."""
        try:
            self.take(user_id, cost)
        except (RateLimited, RequestTooLarge):
            return False
        return True


# --------------------------------------------------------------------------- browsers
JSON_CONTENT_TYPE = "application/json"
"""The body type of every state-changing request but an import (clients send it, body or not)."""
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
"""The state-changing methods: each needs a JSON body type and a same-origin browser."""
JSON_LINES_MEDIA_TYPES = frozenset(
    {"application/x-ndjson", "application/ndjson", "application/jsonl", "application/x-jsonlines"}
)
"""The body types of JSON lines (an import) accepted."""


def check_same_origin(
    method: str,
    fetch_site: str | None,
    origin: str | None,
    own_origins: Collection[str],
    allowed_origins: Collection[str],
) -> None:
    """Cross-site request forgery guard for a request with ``method``: a state-changing one
    (``UNSAFE_METHODS``) must come from the service's own origin or an allowed one.

    ``fetch_site``: the ``Sec-Fetch-Site`` header; ``origin``: the ``Origin`` header (``None``
    when absent); ``own_origins``: the service's origins as this request reaches it
    (``sanitize.parse_origin`` form); ``allowed_origins``: ``access.allowed_origins``. With fetch
    metadata, ``same-origin`` and ``none`` (the user's own navigation) pass, ``cross-site``
    and ``same-site`` (a sibling subdomain is another origin) pass only from an allowed
    origin. Without it (an older browser; non-browser clients send neither header) an
    ``Origin`` that is present must be the service's own or an allowed one; ``Origin: null``
    never is. Raises ``Forbidden`` (403)."""
    if method.upper() not in UNSAFE_METHODS:
        return
    site = (fetch_site or "").strip().lower()
    if site in ("same-origin", "none"):
        return
    parsed = parse_origin(origin) if origin is not None else None
    if parsed is not None and parsed in allowed_origins:
        return
    if site in ("cross-site", "same-site"):
        raise Forbidden(f"{site} requests are refused (global.access.allowed_origins lists other origins accepted)")
    if origin is None:
        return
    if parsed is None:
        raise Forbidden("requests from an opaque or malformed origin (Origin: null) are refused")
    if parsed not in own_origins:
        raise Forbidden(
            "cross-origin requests are refused (global.access.allowed_origins lists other origins accepted)"
        )


def check_body_type(method: str, content_type: str | None, json_lines: bool = False) -> None:
    """A state-changing request (``UNSAFE_METHODS``) must say its body is JSON
    (``application/json`` or ``application/*+json``) or, for an endpoint that takes JSON lines
    (``json_lines``: the import), one of ``JSON_LINES_MEDIA_TYPES``, also when it sends no
    body: a cross-site page cannot make a browser send these types without a CORS preflight,
    while an HTML form sends ``text/plain``, urlencoded or multipart bodies freely. A
    ``charset`` parameter other than UTF-8 is refused (JSON is UTF-8, RFC 8259).

    ``content_type``: the ``Content-Type`` header (``None`` when absent). Raises
    ``UnsupportedMediaType`` (415)."""
    if method.upper() not in UNSAFE_METHODS:
        return
    wanted = "JSON lines (application/x-ndjson)" if json_lines else "application/json"
    media, _, parameters = (content_type or "").partition(";")
    media = media.strip().lower()
    if json_lines:
        ok = media in JSON_LINES_MEDIA_TYPES
    else:
        ok = media == JSON_CONTENT_TYPE or (media.startswith("application/") and media.endswith("+json"))
    if not ok:
        shown = f"content-type {media}" if media else "no content-type"
        raise UnsupportedMediaType(f"{shown} is not accepted here: send {wanted}, also without a body")
    for parameter in parameters.split(";"):
        name, _, value = parameter.partition("=")
        charset = value.strip().strip('"').lower()
        if name.strip().lower() == "charset" and charset not in ("utf-8", "utf8"):
            raise UnsupportedMediaType(f"content-type charset {charset[:32]!r} is not accepted: JSON is UTF-8")
