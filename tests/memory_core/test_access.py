"""Identity and access (``memory_core.access``): API keys stored hashed, the two modes of
``Authenticator``, acting for another user, the per-user write rate limit, requests without
identity (``access.anonymous``), and the browser rules (same origin, JSON body types)."""

from __future__ import annotations

import sqlite3
import time

import pytest

from memory_core.access import (
    KEY_PREFIX,
    Authenticator,
    KeyRegistry,
    Principal,
    Role,
    WriteRateLimiter,
    check_body_type,
    check_same_origin,
    client_network,
    key_digest,
    parse_bearer,
)
from memory_core.config import AccessSettings, load_config
from memory_core.errors import (
    ConfigError,
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
from memory_core.sanitize import parse_origin


@pytest.fixture
def registry(tmp_path):
    r = KeyRegistry(tmp_path / "keys" / "access.sqlite")
    yield r
    r.close()


def api_key_auth(registry, **env) -> Authenticator:
    settings = AccessSettings(mode="api_key", api_keys={"admin_key_env": "BOOT_KEY" if env else None})
    return Authenticator(settings, registry, env)


# --------------------------------------------------------------------------- registry
def test_a_created_key_is_stored_only_as_its_digest(registry):
    key, record = registry.create("alice", "user", "laptop")
    assert key.startswith(KEY_PREFIX) and len(key) == len(KEY_PREFIX) + 43
    assert record.user_id == "alice" and record.role is Role.USER and record.revoked_at is None
    raw = open(registry.path, "rb").read() + open(registry.path + "-wal", "rb").read()
    assert key.encode() not in raw
    rows = sqlite3.connect(registry.path).execute("SELECT digest FROM api_keys").fetchall()
    assert rows == [(key_digest(key),)]


def test_verify_maps_a_key_to_its_user_and_role_until_revoked(registry):
    key, record = registry.create("root", Role.ADMIN)
    other, _ = registry.create("bob")
    assert registry.verify(key) == Principal("root", Role.ADMIN)
    assert registry.verify(other) == Principal("bob", Role.USER)
    assert registry.verify(key + "x") is None
    revoked = registry.revoke(record.key_id)
    assert revoked.revoked_at is not None
    assert registry.verify(key) is None
    assert registry.verify(other) == Principal("bob", Role.USER)
    assert registry.revoke(record.key_id).revoked_at == revoked.revoked_at  # first revocation kept


def test_unknown_key_ids_and_bad_key_requests_are_refused(registry):
    with pytest.raises(KeyNotFound):
        registry.revoke("key_0000")
    with pytest.raises(InvalidInput):
        registry.create("", "user")
    with pytest.raises(InvalidInput):
        registry.create("alice", "owner")
    with pytest.raises(InvalidInput):
        registry.create("alice", "user", "x\n" * 3)


def test_keys_and_users_are_listed_without_the_keys(registry):
    k1, r1 = registry.create("alice")
    registry.create("alice", "admin")
    registry.revoke(r1.key_id)
    registry.note_user("carol")
    registry.note_user("carol")
    assert registry.users() == [("alice", 1), ("carol", 0)]
    assert [k.user_id for k in registry.keys("alice")] == ["alice", "alice"]
    assert all(k1 not in str(k.public()) for k in registry.keys())


def test_a_key_check_and_a_write_never_wait_behind_an_admin_read(registry):
    """The admin views' reads hold their own connection and lock: while one is in progress
    (held here at its lock), ``verify`` and ``note_user`` on the ingress's loop answer, and the
    read sees what was written once it goes on."""
    import threading

    key, record = registry.create("alice")
    answered = threading.Event()
    checked: list = []
    with registry._read_lock:  # an admin page's read in progress, holding its snapshot
        registry._read_db.execute("BEGIN")
        assert registry._read_db.execute("SELECT COUNT(*) FROM users").fetchone()[0] == 1
        worker = threading.Thread(
            target=lambda: (checked.append(registry.verify(key)), registry.note_user("bob"), answered.set()),
            daemon=True,
        )
        worker.start()
        assert answered.wait(5.0), "the key check or the write waited behind the admin read"
        registry._read_db.execute("COMMIT")
    worker.join(5.0)
    assert [(p.user_id, p.key_id) for p in checked] == [("alice", record.key_id)]
    assert [u for u, _ in registry.users()] == ["alice", "bob"] and registry.user_count() == 2
    assert registry.verify(key).key_id == record.key_id


def test_an_in_memory_registry_reads_what_it_wrote():
    r = KeyRegistry(":memory:")
    key, record = r.create("alice")
    r.note_user("bob")
    assert r.verify(key).user_id == "alice" and r.user_count() == 2 and r.active_key_count() == 1
    assert [k.key_id for k in r.keys()] == [record.key_id]
    r.close()


def test_keys_survive_a_reopen(tmp_path):
    path = tmp_path / "access.sqlite"
    key, _ = KeyRegistry(path).create("alice")
    assert KeyRegistry(path).verify(key) == Principal("alice")


# --------------------------------------------------------------------------- api_key mode
def test_api_key_mode_reads_only_the_bearer_key(registry):
    key, _ = registry.create("bob")
    auth = api_key_auth(registry)
    assert auth.identify({"authorization": f"Bearer {key}"}, "203.0.113.9") == Principal("bob")
    assert auth.identify({"authorization": f"bearer   {key}"}, None) == Principal("bob")
    # a client-chosen identity header is not an identity in this mode
    assert auth.identify({"x-authz-user-id": "alice", "x-authz-role": "admin"}, "127.0.0.1") is None
    assert auth.identify({"authorization": f"Bearer {key}", "x-authz-user-id": "alice"}, "127.0.0.1").user_id == "bob"


@pytest.mark.parametrize("value", ["Bearer nope", "Basic YWxpY2U6cHc=", "Bearer", key_digest("x"), "Token mr_x"])
def test_api_key_mode_refuses_wrong_keys_with_401(registry, value):
    registry.create("bob")
    with pytest.raises(InvalidApiKey):
        api_key_auth(registry).identify({"authorization": value}, None)


def test_a_stored_digest_is_not_a_key(registry):
    key, _ = registry.create("bob")
    with pytest.raises(InvalidApiKey):
        api_key_auth(registry).identify({"authorization": f"Bearer {key_digest(key)}"}, None)


def test_the_bootstrap_admin_key_comes_from_the_environment(registry):
    auth = api_key_auth(registry, BOOT_KEY="s3cret-bootstrap")
    assert auth.identify({"authorization": "Bearer s3cret-bootstrap"}, None) == Principal("admin", Role.ADMIN)
    with pytest.raises(ConfigError, match="BOOT_KEY"):
        api_key_auth(registry, OTHER="x")  # named but unset: the replica must not start keyless


def test_parse_bearer():
    assert parse_bearer("Bearer abc") == "abc"
    with pytest.raises(InvalidApiKey):
        parse_bearer("abc")


# --------------------------------------------------------------------------- trusted_header mode
def test_trusted_header_mode_honours_identity_only_from_trusted_peers():
    auth = Authenticator(AccessSettings(trusted_proxies=["10.0.0.0/8", "::1/128"]), None, {})
    assert auth.identify({"x-authz-user-id": "alice"}, "10.1.2.3") == Principal("alice", Role.USER)
    assert auth.identify({"x-authz-user-id": "alice", "x-authz-role": "ADMIN"}, "::1") == Principal("alice", Role.ADMIN)
    assert auth.identify({}, "198.51.100.7") is None  # no identity from anyone: anonymous
    for headers in ({"x-authz-user-id": "alice"}, {"x-authz-role": "admin"}):
        for peer in ("198.51.100.7", None, "not-an-ip"):
            with pytest.raises(UntrustedIdentity):
                auth.identify(headers, peer)
    with pytest.raises(InvalidInput):
        auth.identify({"x-authz-user-id": "alice", "x-authz-role": "root"}, "10.0.0.1")
    # an Authorization header means nothing to this mode (it goes to the upstream)
    assert auth.identify({"authorization": "Bearer whatever"}, "10.0.0.1") is None


def test_access_settings_validate_networks_and_variable_names():
    with pytest.raises(ConfigError, match="global.access.trusted_proxies"):
        load_config({"global": {"access": {"trusted_proxies": ["10.0.0.0/33"]}}})
    with pytest.raises(ConfigError, match="global.access.api_keys.admin_key_env"):
        load_config({"global": {"access": {"api_keys": {"admin_key_env": "not a name"}}}})
    with pytest.raises(ConfigError, match="global.access.mode"):
        load_config({"global": {"access": {"mode": "open"}}})


# --------------------------------------------------------------------------- roles
def test_a_user_acts_only_on_its_own_memories_and_an_admin_on_anyones():
    alice, root = Principal("alice"), Principal("root", Role.ADMIN)
    assert alice.owner(None) == "alice" and alice.owner("alice") == "alice"
    with pytest.raises(Forbidden):
        alice.owner("bob")
    with pytest.raises(Forbidden):
        alice.require_admin("listing users")
    assert root.owner("bob") == "bob" and root.owner(None) == "root"
    with pytest.raises(InvalidInput):
        root.owner(" bob")  # the owner id rule holds for admins too


# --------------------------------------------------------------------------- rate limit
def test_writes_beyond_the_limit_are_refused_with_a_retry_time_until_the_window_moves():
    limiter = WriteRateLimiter(limit=3, window_s=1)
    for _ in range(3):
        limiter.take("alice")
    with pytest.raises(RateLimited) as refused:
        limiter.take("alice")
    assert refused.value.retry_after_s == 1
    limiter.take("bob")  # per user
    assert not limiter.allow("alice")
    time.sleep(1.1)
    assert limiter.allow("alice")


def test_a_request_costs_the_memories_it_writes_taken_whole_or_not_at_all():
    limiter = WriteRateLimiter(limit=10, window_s=60)
    limiter.take("alice", 6)  # a POST of 6 memories
    with pytest.raises(RateLimited, match="at most 10 memories per 60 s") as refused:
        limiter.take("alice", 5)  # 4 left: refused whole, nothing counted
    assert 55 <= refused.value.retry_after_s <= 60
    limiter.take("alice", 4)  # the 4 that remained are still there
    assert not limiter.allow("alice", 1)
    limiter.take("bob", 10)  # per user


def test_retry_after_is_when_the_request_fits_not_when_the_first_write_expires():
    limiter = WriteRateLimiter(limit=4, window_s=2)
    limiter.take("alice", 2)
    time.sleep(1.0)
    limiter.take("alice", 2)
    with pytest.raises(RateLimited) as small:
        limiter.take("alice", 2)  # fits once the first two expire (~1 s)
    with pytest.raises(RateLimited) as large:
        limiter.take("alice", 4)  # fits only once all four expire (~2 s)
    assert small.value.retry_after_s == 1 and large.value.retry_after_s == 2


def test_a_request_larger_than_the_whole_limit_is_too_large_not_rate_limited():
    limiter = WriteRateLimiter(limit=10, window_s=60)
    with pytest.raises(RequestTooLarge, match="write limit is 10 memories per 60 s"):
        limiter.take("alice", 11)
    limiter.take("alice", 10)  # the refusal counted nothing
    assert not limiter.allow("bob", 11)
    with pytest.raises(ValueError):
        limiter.take("alice", 0)


def test_a_zero_limit_is_off():
    limiter = WriteRateLimiter(limit=0, window_s=60)
    for _ in range(1000):
        limiter.take("alice")
    limiter.take("alice", 100_000)


def test_rate_limited_survives_pickling():
    import pickle

    again = pickle.loads(pickle.dumps(RateLimited("slow down", 7)))
    assert again.retry_after_s == 7 and str(again) == "slow down"


def test_a_gateway_secret_is_required_with_the_identity_headers_when_configured():
    settings = AccessSettings(trusted_proxies=["0.0.0.0/0"], gateway_secret_env="GW_SECRET")
    auth = Authenticator(settings, None, {"GW_SECRET": "a-long-gateway-secret"})
    ok = {"x-authz-user-id": "alice", "x-authz-gateway-secret": "a-long-gateway-secret"}
    assert auth.identify(ok, "203.0.113.5") == Principal("alice")
    for secret in (None, "", "a-long-gateway-secreT", "a-long-gateway-secret "):
        headers = {"x-authz-user-id": "alice", "x-authz-role": "admin"}
        if secret is not None:
            headers["x-authz-gateway-secret"] = secret
        with pytest.raises(UntrustedIdentity):
            auth.identify(headers, "203.0.113.5")
    assert auth.identify({}, "203.0.113.5") is None  # anonymous needs no secret
    for env in ({}, {"GW_SECRET": "short"}):
        with pytest.raises(ConfigError, match="GW_SECRET"):
            Authenticator(settings, None, env)


def test_ipv4_mapped_peers_match_ipv4_networks():
    auth = Authenticator(AccessSettings(), None, {})
    assert auth.trusted_peer("::ffff:127.0.0.1") and auth.trusted_peer("::1")
    assert not auth.trusted_peer("::ffff:10.0.0.1")


def test_a_short_bootstrap_admin_key_is_refused(registry):
    with pytest.raises(ConfigError, match="BOOT_KEY"):
        api_key_auth(registry, BOOT_KEY="short")


# --------------------------------------------------------------------------- without identity
GATEWAY, STRANGER = "10.0.0.5", "203.0.113.9"
GW_ENV = {"GW_SECRET": "a-long-gateway-secret"}


def anonymous_auth(allow: str | None, mode: str = "trusted_header", secret: bool = False, limit: int = 600):
    access: dict = {"mode": mode, "trusted_proxies": ["10.0.0.0/8"], "anonymous": {"rate_limit": {"limit": limit}}}
    if allow is not None:
        access["anonymous"]["allow"] = allow
    if secret:
        access["gateway_secret_env"] = "GW_SECRET"
    return Authenticator(load_config({"global": {"access": access}}).global_.access, None, GW_ENV)


@pytest.mark.parametrize(
    "mode, allow, secret, peer, headers, admitted",
    [
        # the default (allow: gateway): only what comes through the gateway
        ("trusted_header", None, False, GATEWAY, {}, True),
        ("trusted_header", None, False, STRANGER, {}, False),
        ("trusted_header", None, False, None, {}, False),
        ("trusted_header", "gateway", True, GATEWAY, {"x-authz-gateway-secret": "a-long-gateway-secret"}, True),
        ("trusted_header", "gateway", True, GATEWAY, {}, False),  # the gateway's address without its secret
        ("trusted_header", "gateway", True, GATEWAY, {"x-authz-gateway-secret": "a-long-gateway-secreT"}, False),
        ("trusted_header", "gateway", True, STRANGER, {"x-authz-gateway-secret": "a-long-gateway-secret"}, False),
        ("trusted_header", "anyone", False, GATEWAY, {}, True),
        ("trusted_header", "anyone", False, STRANGER, {}, True),
        ("trusted_header", "nobody", False, GATEWAY, {}, False),
        ("trusted_header", "nobody", False, STRANGER, {}, False),
        # api_key mode: a key always, whatever the policy says
        ("api_key", None, False, GATEWAY, {}, False),
        ("api_key", "anyone", False, STRANGER, {}, False),
    ],
)
def test_who_may_call_without_identity(mode, allow, secret, peer, headers, admitted):
    auth = anonymous_auth(allow, mode, secret)
    if admitted:
        auth.admit_anonymous(headers, peer)
    else:
        with pytest.raises(Unauthenticated) as refused:
            auth.admit_anonymous(headers, peer)
        assert refused.value.code == "unauthorized"


def test_the_default_policy_is_the_gateway_only():
    assert AccessSettings().anonymous.allow == "gateway"
    assert AccessSettings().allowed_origins == []
    with pytest.raises(ConfigError, match="global.access.anonymous.allow"):
        load_config({"global": {"access": {"anonymous": {"allow": "everyone"}}}})


def test_requests_without_identity_are_rate_limited_per_client_address():
    auth = anonymous_auth("anyone", limit=3)
    for _ in range(3):
        auth.admit_anonymous({}, STRANGER)
    with pytest.raises(RateLimited) as refused:
        auth.admit_anonymous({}, STRANGER)
    assert 1 <= refused.value.retry_after_s <= 60 and "without identity" in str(refused.value)
    auth.admit_anonymous({}, "203.0.113.10")  # another address has its own count
    # a refused request is not counted: the policy refuses before the limit counts
    gated, secret = anonymous_auth(None, secret=True, limit=1), {"x-authz-gateway-secret": GW_ENV["GW_SECRET"]}
    for _ in range(5):
        with pytest.raises(Unauthenticated):
            gated.admit_anonymous({}, GATEWAY)
    gated.admit_anonymous(secret, GATEWAY)
    with pytest.raises(RateLimited):
        gated.admit_anonymous(secret, GATEWAY)
    off = anonymous_auth("anyone", limit=0)
    for _ in range(100):
        off.admit_anonymous({}, STRANGER)


def test_an_ipv6_client_is_counted_by_its_64_network():
    """One host is commonly given a whole /64: every address in it shares one count, another
    /64 has its own, and an IPv4-mapped address counts as its IPv4 address."""
    auth = anonymous_auth("anyone", limit=3)
    for address in ("2001:db8:aa:bb::1", "2001:db8:aa:bb::2", "2001:db8:aa:bb:abcd:ef01:2345:6789"):
        auth.admit_anonymous({}, address)
    with pytest.raises(RateLimited):
        auth.admit_anonymous({}, "2001:db8:aa:bb::ffff")
    auth.admit_anonymous({}, "2001:db8:aa:bc::1")  # the next /64
    mapped = anonymous_auth("anyone", limit=1)
    mapped.admit_anonymous({}, "::ffff:203.0.113.9")
    with pytest.raises(RateLimited):
        mapped.admit_anonymous({}, "203.0.113.9")


@pytest.mark.parametrize(
    "peer, key",
    [
        ("203.0.113.9", "203.0.113.9"),
        ("2001:db8::1", "2001:db8::/64"),
        ("2001:DB8:0:0:ffff::1", "2001:db8::/64"),
        ("::ffff:198.51.100.2", "198.51.100.2"),
        ("unix-socket", "unix-socket"),
        (None, "unknown"),
        ("", "unknown"),
    ],
)
def test_client_network(peer, key):
    assert client_network(peer) == key


# --------------------------------------------------------------------------- browsers
@pytest.mark.parametrize(
    "value, origin",
    [
        ("https://app.example", "https://app.example"),
        ("HTTPS://App.Example:443", "https://app.example"),
        ("http://app.example:80", "http://app.example"),
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
        ("http://[::1]:8000", "http://[::1]:8000"),
        ("http://[::1]", "http://[::1]"),
        ("null", None),
        ("", None),
        ("file://", None),
        ("ftp://app.example", None),
        ("https://app.example/path", None),
        ("https://user@app.example", None),
        ("https://app.example:0", None),
        ("https://app.example:65536", None),
        ("https://app.example:８０", None),  # fullwidth digits are not a port
        ("https://app.example:80:80", None),
        ("https://", None),
        ("https://[::1", None),
        ("https://[::1]x", None),
        ("https://app example", None),
    ],
)
def test_parse_origin(value, origin):
    assert parse_origin(value) == origin


OWN = {"http://127.0.0.1:8000"}
ALLOWED = {"https://ui.example"}


@pytest.mark.parametrize(
    "fetch_site, origin, refused",
    [
        ("same-origin", None, False),
        ("same-origin", "http://127.0.0.1:8000", False),
        ("none", None, False),  # the user's own navigation
        ("cross-site", None, True),
        ("cross-site", "https://evil.example", True),
        ("CROSS-SITE", "https://evil.example", True),
        ("cross-site", "https://ui.example", False),  # an allowed origin
        ("same-site", "https://api.sibling.example", True),  # a sibling subdomain is another origin
        ("same-site", None, True),
        ("same-site", "https://ui.example", False),
        # no fetch metadata: an older browser, or not a browser at all
        (None, None, False),  # curl, the CLI, the openai client
        (None, "http://127.0.0.1:8000", False),
        (None, "http://127.0.0.1:8000/", True),  # not an origin: malformed
        (None, "https://evil.example", True),
        (None, "http://127.0.0.1:8001", True),  # another port is another origin
        (None, "https://127.0.0.1:8000", True),  # another scheme too
        (None, "null", True),  # a sandboxed frame, a file: page, a redirect across origins
        (None, "https://ui.example", False),
        (None, "https://UI.example:443", False),
        ("something-new", "https://evil.example", True),  # an unknown value: the Origin decides
        ("something-new", None, False),
    ],
)
def test_state_changing_requests_come_from_the_services_own_or_an_allowed_origin(fetch_site, origin, refused):
    for method in ("POST", "PUT", "PATCH", "DELETE", "post"):
        if refused:
            with pytest.raises(Forbidden):
                check_same_origin(method, fetch_site, origin, OWN, ALLOWED)
        else:
            check_same_origin(method, fetch_site, origin, OWN, ALLOWED)
    for method in ("GET", "HEAD", "OPTIONS"):  # reads are not guarded here
        check_same_origin(method, fetch_site, origin, OWN, ALLOWED)


@pytest.mark.parametrize(
    "content_type, json_lines, refused",
    [
        ("application/json", False, False),
        ("Application/JSON; charset=UTF-8", False, False),
        ('application/json; charset="utf-8"', False, False),
        ("application/merge-patch+json", False, False),
        ("application/json; charset=latin-1", False, True),
        (None, False, True),
        ("", False, True),
        ("text/plain", False, True),
        ("text/plain; charset=utf-8", False, True),
        ("application/x-www-form-urlencoded", False, True),
        ("multipart/form-data; boundary=x", False, True),
        ("text/json", False, True),
        ("application/jsonx", False, True),
        ("application/x-ndjson", False, True),  # JSON lines only where the endpoint takes them
        ("application/x-ndjson", True, False),
        ("application/x-ndjson; charset=utf-8", True, False),
        ("application/ndjson", True, False),
        ("application/jsonl", True, False),
        ("application/x-jsonlines", True, False),
        ("application/json", True, True),
        (None, True, True),
        ("text/plain", True, True),
    ],
)
def test_state_changing_requests_need_a_json_body_type(content_type, json_lines, refused):
    for method in ("POST", "PUT", "PATCH", "DELETE"):
        if refused:
            with pytest.raises(UnsupportedMediaType) as error:
                check_body_type(method, content_type, json_lines)
            assert error.value.code == "unsupported_media_type" and "content-type" in str(error.value)
        else:
            check_body_type(method, content_type, json_lines)
    check_body_type("GET", content_type, json_lines)  # reads carry no body type


def test_allowed_origins_are_validated_and_kept_in_normal_form():
    access = load_config({"global": {"access": {"allowed_origins": ["HTTPS://UI.example:443/", "http://[::1]:3000"]}}})
    assert access.global_.access.allowed_origins == ["https://ui.example", "http://[::1]:3000"]
    for bad in ("ui.example", "https://ui.example/app", "null", "*"):
        with pytest.raises(ConfigError, match="global.access.allowed_origins"):
            load_config({"global": {"access": {"allowed_origins": [bad]}}})
