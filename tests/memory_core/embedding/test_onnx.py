"""OnnxEncoder: parity with LocalEncoder on hard inputs (empty, emoji, mixed scripts, the
max_seq_length boundary, 64+ texts of very different lengths), and its input checks."""

import numpy as np
import pytest

from memory_core.errors import InvalidInput


@pytest.fixture(scope="module")
def onnx(local_encoder):
    from memory_core.embedding import OnnxEncoder

    return OnnxEncoder.from_local(local_encoder)


def test_onnx_matches_torch_on_hard_inputs(onnx, local_encoder):
    edge = ["", "  \t\n ", "🎉🔥👍🏽 ok 🇫🇷", "Hello мир 世界 مرحبا שלום नमस्ते", "\x00 a\u200b b \ufeff", "lorem " * 3000]
    boundary = [t for t in ("x " * n for n in range(250, 258)) if abs(local_encoder.count_tokens([t])[0] - 256) <= 1]
    batch = edge + boundary + [("word " * (i % 300)) for i in range(70)]  # 64+ texts, very different lengths
    got, want = onnx.encode(batch), local_encoder.encode(batch)
    assert np.abs(got.vectors - want.vectors).max() <= 1e-5
    assert got.truncated == want.truncated and got.token_counts == want.token_counts


def test_onnx_encode_checks_token_counts_like_local_encoder(onnx, local_encoder):
    with pytest.raises(InvalidInput):
        local_encoder.encode(["a", "b"], token_counts=[3])
    with pytest.raises(InvalidInput):
        onnx.encode(["a", "b"], token_counts=[3])


def test_onnx_encodes_from_several_threads_at_once_as_it_does_alone(onnx):
    """A store shard's queries and its write lane call one ``OnnxEncoder`` from two threads."""
    from concurrent.futures import ThreadPoolExecutor

    texts = [f"note {i}: the spare key is under pot number {i}" for i in range(24)]
    alone = onnx.encode(texts).vectors
    with ThreadPoolExecutor(max_workers=4) as pool:
        got = list(pool.map(lambda t: onnx.encode([t]).vectors[0], texts * 3))
    assert max(float(abs(g - alone[i % len(texts)]).max()) for i, g in enumerate(got)) <= 1e-5
