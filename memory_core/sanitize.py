"""Input sanitizing shared by every store and the HTTP API (one place for these rules)."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

from .errors import InvalidInput

MAX_CONTENT_BYTES = 16 * 1024
"""Largest memory content accepted, in UTF-8 bytes. Larger content is rejected, never cut."""

MAX_USER_ID_CHARS = 256
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def clean_content(content: str, max_bytes: int = MAX_CONTENT_BYTES) -> str:
    """Return ``content`` with C0 control characters (except tab/newline/CR) removed and outer
    whitespace stripped. Unicode is otherwise kept byte-exact (no normalisation).

    Raises ``InvalidInput`` when the result is empty or longer than ``max_bytes`` UTF-8 bytes.
    """
    if not isinstance(content, str):
        raise InvalidInput("content must be a string")
    cleaned = _CONTROL.sub("", content).strip()
    if not cleaned:
        raise InvalidInput("content must not be empty")
    size = len(cleaned.encode("utf-8"))
    if size > max_bytes:
        raise InvalidInput(f"content is {size} bytes; the limit is {max_bytes} bytes (UTF-8)")
    return cleaned


def require_user_id(user_id: str | None, field: str = "user_id") -> str:
    """Validate an owner id and return it unchanged: non-empty, at most 256 characters, no
    leading/trailing whitespace and no control, format or separator characters other than an
    inner ASCII space (Unicode categories Cc, Cf, Zs, Zl, Zp — so ``"alice\u00a0"`` or
    ``"alice\u200b"`` can never alias ``"alice"``).
    Raises ``InvalidInput`` otherwise. An empty user id never means "all users".
    """
    if user_id is None or not isinstance(user_id, str) or not user_id:
        raise InvalidInput(f"{field} is required and must be non-empty")
    if len(user_id) > MAX_USER_ID_CHARS:
        raise InvalidInput(f"{field} is longer than {MAX_USER_ID_CHARS} characters")
    if user_id != user_id.strip() or any(
        c != " " and unicodedata.category(c) in _FORBIDDEN_ID_CATEGORIES for c in user_id
    ):
        raise InvalidInput(f"{field} has surrounding whitespace or control/invisible characters")
    return user_id


_FORBIDDEN_ID_CATEGORIES = frozenset({"Cc", "Cf", "Zs", "Zl", "Zp"})

CONTROLLED_HEADERS = frozenset({"x-authz-user-id", "x-project-id", "x-conversation-id", "x-disable-router-memory"})
"""Headers this service acts on; each may appear at most once in a request."""


def normalize_headers(items: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Request headers as one ``{lower-case name: value}`` dict, the single place headers
    are interpreted. Values of ``CONTROLLED_HEADERS`` are decoded as UTF-8 (HTTP stacks hand
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
