"""Readable test names for memory ids.

Stores accept one memory id format only (``memory_core.sanitize.MEMORY_ID_PATTERN``: 32
lowercase hex characters), so tests that want ids they can read and name in assertions map a
name to a valid id with ``tid`` and back with ``tname``:

- a name of 1..15 UTF-8 bytes (no NUL) becomes the hex of its bytes right-padded with ``"0"``
  to 32 characters: ``tid("a") == "61" + "0" * 30``. The padding is at least one whole
  ``00`` byte and a name never holds a NUL, so the mapping is reversible, and it keeps the
  order of names (``a < b`` ⇔ ``tid(a) < tid(b)``: hex digits sort like the bytes they spell
  and UTF-8 sorts like code points), so tests of id tie-breaks keep their expected order.
- a longer name becomes a hash-derived id, remembered in this process so ``tname`` can map it
  back (the order of such ids is not the order of their names).

``tname`` returns any id that ``tid`` did not make (e.g. an id issued by ``Memory()``)
unchanged, so it can be applied to every id a store returns.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from memory_core.sanitize import is_memory_id

_MAX_HEX_BYTES = 15
_long_names: dict[str, str] = {}


def tid(name: str) -> str:
    """The memory id of the test name ``name`` (see the module docstring)."""
    if not isinstance(name, str) or not name:
        raise ValueError("a test id name must be a non-empty string")
    raw = name.encode("utf-8")
    if b"\x00" in raw:
        raise ValueError("a test id name must not contain NUL")
    if len(raw) <= _MAX_HEX_BYTES:
        return raw.hex().ljust(32, "0")
    memory_id = hashlib.sha256(b"tests.ids\x00" + raw).hexdigest()[:32]
    _long_names[memory_id] = name
    return memory_id


def tname(memory_id: str) -> str:
    """The test name ``memory_id`` was made from by ``tid``; ``memory_id`` unchanged when it is
    not such an id."""
    if memory_id in _long_names:
        return _long_names[memory_id]
    if not is_memory_id(memory_id) or not memory_id.endswith("00"):
        return memory_id
    body = bytes.fromhex(memory_id).rstrip(b"\x00")
    try:
        name = body.decode("utf-8")
    except UnicodeDecodeError:
        return memory_id
    if not name or not name.isprintable() or b"\x00" in body:
        return memory_id
    return name


def tnames(memory_ids: Iterable[str]) -> list[str]:
    """``tname`` of each id, in order."""
    return [tname(i) for i in memory_ids]
