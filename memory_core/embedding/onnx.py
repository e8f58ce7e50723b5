"""The local model exported to ONNX and run by ONNX Runtime (query embedding in a store shard)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import numpy as np

from ..errors import ConfigError, InvalidInput
from .batching import DEFAULT_MAX_BATCH_SIZE, DEFAULT_MAX_BATCH_TOKENS, plan_batches
from .encoder import EncodeResult, check_texts, normalize_rows
from .local import LocalEncoder

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
    overhead (the two compared in the README, "Retrieval and the read path").

    Built by ``OnnxEncoder.from_local``: the sentence-transformers module stack (transformer,
    pooling, any normalisation module) is traced with ``torch.onnx.export`` into a temporary
    file, loaded into an ``onnxruntime.InferenceSession``, and its vectors for
    ``ONNX_PROBE_TEXTS`` (one at a time and as one batch) are compared with the torch model's:
    a difference above ``ONNX_MAX_ABS_DIFF`` refuses the copy. The identity of the vectors is
    therefore the ``LocalEncoder``'s (``compute_identity`` of its files), checked numerically.

    ``encode`` (synchronous) returns an ``EncodeResult`` like ``LocalEncoder.encode``; calls
    from several threads at once are safe (a store shard's queries and its write lane): the
    tokenizer, whose settings a call may change, runs one call at a time under a lock, and
    ONNX Runtime's ``InferenceSession.run`` may be called concurrently.
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
        # the session runs calls from several threads at once (a shard's queries and its write
        # lane); the tokenizer's Rust backend may be reconfigured by a call (truncation,
        # padding): one tokenization at a time
        self._tokenize_lock = threading.Lock()
        self._counter = counter  # tokenizers.Tokenizer without truncation, for token counts
        self.max_batch_size = max_batch_size
        self.max_batch_tokens = max_batch_tokens
        self.input_names = input_names
        self.dimension = dimension
        self.max_seq_length = max_seq_length
        self.normalize = normalize

    @classmethod
    def from_local(cls, local: LocalEncoder, *, num_threads: int = 1) -> OnnxEncoder:
        import tempfile
        import warnings

        try:
            import onnxruntime as ort
            import torch
        except ImportError as e:  # pragma: no cover - both are dependencies of the project
            raise ConfigError(f"ONNX query encoding needs onnxruntime and onnx: {e}") from e
        model, tokenizer = local.model, local.tokenizer
        sample = tokenizer(
            ["hello world"], padding=True, truncation=True, max_length=local.max_seq_length, return_tensors="pt"
        )
        input_names = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in sample]

        class _SentenceEmbedding(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = model

            def forward(self, *tensors):
                return self.model(dict(zip(input_names, tensors, strict=True)))["sentence_embedding"]

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
        except Exception as e:
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
        except Exception as e:
            raise ConfigError(f"the ONNX copy of the embedding model cannot be checked: {e}") from e
        if not diff <= ONNX_MAX_ABS_DIFF:
            raise ConfigError(
                f"the ONNX copy of the embedding model differs from the torch model by {diff:.2e} "
                f"(> {ONNX_MAX_ABS_DIFF:g}) on the probe texts: use the torch runtime"
            )
        return encoder

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Input tokens per text, special tokens included, before truncation."""
        return [len(e.ids) for e in self._counter.encode_batch(check_texts(texts), add_special_tokens=True)]

    def encode(
        self, texts: Sequence[str], token_counts: Sequence[int] | None = None, *, query: bool = False
    ) -> EncodeResult:
        """Embed ``texts`` (n strings) → ``EncodeResult`` with float32 vectors ``[n, dim]``,
        grouped into forward passes as ``LocalEncoder.encode`` does (``plan_batches``: count
        and padded-token bounds); text beyond ``max_seq_length`` tokens is truncated and
        flagged; ``query`` changes nothing (as in ``LocalEncoder.encode``). Raises ``InvalidInput`` when ``texts`` is not a list of strings or
        ``token_counts`` does not have one entry per text."""
        texts = check_texts(texts)
        if not texts:
            return EncodeResult(vectors=np.empty((0, self.dimension), dtype=np.float32))
        if token_counts is not None:
            counts = list(token_counts)
        else:
            counts = self.count_tokens(texts)
        if len(counts) != len(texts):
            raise InvalidInput("token_counts must have one entry per text")
        vectors = np.empty((len(texts), self.dimension), dtype=np.float32)
        effective = [min(c, self.max_seq_length) for c in counts]
        for group in plan_batches(effective, self.max_batch_size, self.max_batch_tokens):
            with self._tokenize_lock:
                features = self.tokenizer(
                    [texts[i] for i in group],
                    padding=True,
                    truncation=True,
                    max_length=self.max_seq_length,
                    return_tensors="np",
                )
            feed = {name: np.asarray(features[name], dtype=np.int64) for name in self.input_names}
            (out,) = self.session.run(["sentence_embedding"], feed)
            vectors[group] = np.asarray(out, dtype=np.float32)
        if self.normalize:
            vectors = normalize_rows(vectors)
        return EncodeResult(vectors=vectors, truncated=[c > self.max_seq_length for c in counts], token_counts=counts)

    async def encode_async(
        self, texts: Sequence[str], token_counts: Sequence[int] | None = None, *, query: bool = False
    ) -> EncodeResult:
        """``encode`` in a worker thread (the ``Encoder`` protocol): the event loop keeps
        serving while the forward passes run."""
        return await asyncio.to_thread(self.encode, texts, token_counts)
