"""Input sanitizing shared by every store and the HTTP API (one place for these rules)."""

from __future__ import annotations

import re
import unicodedata

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
    """Validate an owner id: non-empty after stripping, at most 256 characters, no control
    characters. Returns it unchanged. Raises ``InvalidInput`` otherwise.

    An empty user id never means "all users".
    """
    if user_id is None or not isinstance(user_id, str) or not user_id.strip():
        raise InvalidInput(f"{field} is required and must be non-empty")
    if len(user_id) > MAX_USER_ID_CHARS:
        raise InvalidInput(f"{field} is longer than {MAX_USER_ID_CHARS} characters")
    if _CONTROL.search(user_id) or any(unicodedata.category(c) == "Cc" for c in user_id if c not in "\t"):
        raise InvalidInput(f"{field} contains control characters")
    return user_id
