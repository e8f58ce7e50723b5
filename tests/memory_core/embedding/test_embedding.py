"""Model identity, physical collection names, batching helpers, encoders (local and remote)."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import httpx
import numpy as np
import pytest

from memory_core.config import EmbeddingSettings, RemoteEmbeddingSettings
from memory_core.embedding import (
    RemoteEncoder,
    batch_cost,
    compute_identity,
    physical_collection_name,
    plan_batches,
    resolve_model_path,
)
from memory_core.errors import ConfigError, EmbeddingUnavailable, InvalidInput


@pytest.fixture(scope="module")
def bundled_dir() -> Path:
    return resolve_model_path("bundled:all-MiniLM-L6-v2")


@pytest.fixture()
def model_copy(tmp_path, bundled_dir) -> Path:
    """A copy of the bundled model; the 87 MB weight file is symlinked unless a test replaces it."""
    dst = tmp_path / "model"
    shutil.copytree(bundled_dir, dst, ignore=shutil.ignore_patterns("model.safetensors"))
    (dst / "model.safetensors").symlink_to(bundled_dir / "model.safetensors")
    return dst


def _identity(path: Path, **kw) -> str:
    return compute_identity(EmbeddingSettings(model=str(path), **kw)).digest


# ---------------------------------------------------------------- resolve / identity
def test_resolve_model_path(bundled_dir, tmp_path):
    assert (bundled_dir / "modules.json").is_file()
    assert resolve_model_path(str(bundled_dir)) == bundled_dir
    with pytest.raises(ConfigError, match="unknown bundled"):
        resolve_model_path("bundled:nope")
    with pytest.raises(ConfigError, match="not a directory"):
        resolve_model_path(str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="no modules.json"):
        resolve_model_path(str(tmp_path))


def test_identity_fields_of_bundled_model(bundled_settings):
    ident = compute_identity(bundled_settings)
    assert ident.dimension == 384 and ident.max_seq_length == 256 and ident.dtype == "float32"
    assert len(ident.digest) == 64 and ident.short == ident.digest[:12] and ident.verifiable
    assert [p for p, _ in ident.weights] == ["model.safetensors"]
    assert {"vocab.txt", "tokenizer.json"} <= {p for p, _ in ident.tokenizer}
    assert {"modules.json", "1_Pooling/config.json"} <= {p for p, _ in ident.config}


def test_identity_does_not_depend_on_location_or_docs(model_copy, bundled_settings):
    base = compute_identity(bundled_settings).digest
    assert _identity(model_copy) == base  # same files elsewhere
    (model_copy / "README.md").write_text("changed docs")
    (model_copy / ".gitattributes").write_text("x")
    st_cfg = json.loads((model_copy / "config_sentence_transformers.json").read_text())
    st_cfg["__version__"]["sentence_transformers"] = "9.9.9"  # library versions: no effect
    (model_copy / "config_sentence_transformers.json").write_text(json.dumps(st_cfg))
    assert _identity(model_copy) == base
    assert _identity(model_copy, device="cpu") == base  # device is not part of the vectors' identity


@pytest.mark.parametrize(
    "change",
    ["weights", "vocab", "tokenizer_json", "pooling", "modules", "sbert_max_len", "prompts", "extra_module_file"],
)
def test_identity_changes_when_a_file_changes(model_copy, bundled_settings, bundled_dir, change):
    base = compute_identity(bundled_settings).digest
    if change == "weights":
        (model_copy / "model.safetensors").unlink()
        data = bytearray((bundled_dir / "model.safetensors").read_bytes())
        data[-1] ^= 0x01
        (model_copy / "model.safetensors").write_bytes(bytes(data))
    elif change == "vocab":
        with (model_copy / "vocab.txt").open("a") as f:
            f.write("newtoken\n")
    elif change == "tokenizer_json":
        (model_copy / "tokenizer.json").write_text((model_copy / "tokenizer.json").read_text() + " ")
    elif change == "pooling":
        cfg = json.loads((model_copy / "1_Pooling/config.json").read_text())
        cfg["pooling_mode_mean_tokens"], cfg["pooling_mode_cls_token"] = False, True
        (model_copy / "1_Pooling/config.json").write_text(json.dumps(cfg))
    elif change == "modules":
        mods = json.loads((model_copy / "modules.json").read_text())
        (model_copy / "modules.json").write_text(json.dumps(mods[:2]))  # drop Normalize
    elif change == "sbert_max_len":
        (model_copy / "sentence_bert_config.json").write_text(
            json.dumps({"max_seq_length": 128, "do_lower_case": False})
        )
    elif change == "prompts":
        st_cfg = json.loads((model_copy / "config_sentence_transformers.json").read_text())
        st_cfg["prompts"] = {"query": "query: "}
        (model_copy / "config_sentence_transformers.json").write_text(json.dumps(st_cfg))
    elif change == "extra_module_file":
        (model_copy / "2_Dense").mkdir()
        (model_copy / "2_Dense" / "config.json").write_text(json.dumps({"in_features": 384, "out_features": 128}))
    assert _identity(model_copy) != base


def test_identity_changes_with_settings(model_copy):
    base = _identity(model_copy)
    assert _identity(model_copy, normalize=False) != base
    assert _identity(model_copy, max_seq_length=128) != base
    assert _identity(model_copy, max_seq_length=256) == base  # explicit default = same vectors
    with pytest.raises(ConfigError, match="max_position_embeddings"):
        _identity(model_copy, max_seq_length=1024)


def test_dimension_read_from_files(model_copy):
    mods = json.loads((model_copy / "modules.json").read_text())
    mods.insert(2, {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"})
    mods[-1]["idx"] = 3
    (model_copy / "modules.json").write_text(json.dumps(mods))
    (model_copy / "2_Dense").mkdir()
    (model_copy / "2_Dense" / "config.json").write_text(json.dumps({"in_features": 384, "out_features": 128}))
    assert compute_identity(EmbeddingSettings(model=str(model_copy))).dimension == 128


def test_remote_identity_and_physical_names(bundled_settings):
    remote = RemoteEmbeddingSettings(base_url="http://emb:8080/v1/", model="e5", dimension=768)
    a = compute_identity(EmbeddingSettings(remote=remote))
    b = compute_identity(EmbeddingSettings(remote=remote.model_copy(update={"base_url": "http://emb:8080/v1"})))
    c = compute_identity(EmbeddingSettings(remote=remote.model_copy(update={"model": "e5-large"})))
    assert not a.verifiable and a.dimension == 768 and a.digest == b.digest != c.digest
    assert physical_collection_name("agentic_memory", a) == "agentic_memory"

    local = compute_identity(bundled_settings)
    name = physical_collection_name("agentic_memory", local)
    assert name == f"agentic_memory__{local.short}"
    assert name == physical_collection_name("agentic_memory", compute_identity(bundled_settings))  # stable
    assert physical_collection_name("other", local) != name
    with pytest.raises(InvalidInput):
        physical_collection_name("", local)


# ---------------------------------------------------------------- batching helpers
def test_plan_batches_bounds_count_and_tokens():
    lengths = [5, 100, 3, 50, 50, 7, 20, 256]
    groups = plan_batches(lengths, max_batch=3, max_tokens=150)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    for g in groups:
        assert len(g) <= 3
        assert len(g) == 1 or len(g) * max(lengths[i] for i in g) <= 150
    assert groups[0] == [7]  # 256 > budget: alone, longest first
    assert plan_batches([], 4, 100) == []
    assert plan_batches([10] * 10, 4, 10_000) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    with pytest.raises(InvalidInput):
        plan_batches([1], 0, 10)


def test_batch_cost_exceeds_limit_exactly_when_a_bound_is_crossed():
    for n in range(1, 12):
        for longest in (1, 7, 64, 256):
            cost = batch_cost([longest] * n, 8, 512)
            assert (cost > 8) == (n > 8 or n * longest > 512), (n, longest, cost)
    assert batch_cost([], 8, 512) == 0


def test_onnx_copy_reproduces_the_torch_vectors_and_truncation(local_encoder):
    from memory_core.embedding import OnnxEncoder

    onnx = OnnxEncoder.from_local(local_encoder)
    texts = ["short one", "word " * 5000, "北京大学的图书馆很大", "a medium sentence about lunch in Paris"]
    got, want = onnx.encode(texts), local_encoder.encode(texts)
    assert got.vectors.shape == (4, 384) and got.vectors.dtype == np.float32
    assert np.abs(got.vectors - want.vectors).max() <= 1e-5
    assert got.truncated == want.truncated == [False, True, False, False]
    assert got.token_counts == want.token_counts
    assert onnx.encode([]).vectors.shape == (0, 384)
    with pytest.raises(InvalidInput):
        onnx.encode("not a list")


def test_onnx_copy_that_does_not_match_is_refused(local_encoder, monkeypatch):
    from memory_core.embedding import onnx

    monkeypatch.setattr(onnx, "ONNX_MAX_ABS_DIFF", -1.0)  # no copy can be this close
    with pytest.raises(ConfigError, match="differs from the torch model"):
        onnx.OnnxEncoder.from_local(local_encoder)


# ---------------------------------------------------------------- local encoder
def test_local_encoder_truncates_long_input_and_keeps_order(local_encoder):
    texts = ["short one", "word " * 5000, "", "a medium sentence about lunch in Paris"]
    res = local_encoder.encode(texts)
    assert res.vectors.shape == (4, 384) and res.vectors.dtype == np.float32
    assert res.truncated == [False, True, False, False]
    assert res.token_counts[1] > 5000 and res.token_counts[2] == 2
    assert np.allclose(np.linalg.norm(res.vectors, axis=1), 1.0, atol=1e-5)
    # order restored: each row equals that text encoded alone
    for i, t in enumerate(texts):
        alone = local_encoder.encode([t]).vectors[0]
        assert float(alone @ res.vectors[i]) > 0.9999
    assert local_encoder.encode([]).vectors.shape == (0, 384)
    with pytest.raises(InvalidInput):
        local_encoder.encode("not a list")


# ---------------------------------------------------------------- remote encoder
def _remote(handler, **kw) -> RemoteEncoder:
    settings = RemoteEmbeddingSettings(base_url="http://emb.test", model="m", dimension=3, **kw)
    return RemoteEncoder(settings, transport=httpx.MockTransport(handler))


async def test_remote_encoder_normalizes_and_orders():
    seen = {}

    def handler(request: httpx.Request) -> httpx.Response:
        seen["url"] = str(request.url)
        seen["body"] = json.loads(request.content)
        data = [{"index": i, "embedding": [float(i + 1), 0.0, 0.0]} for i in range(len(seen["body"]["input"]))]
        return httpx.Response(200, json={"data": list(reversed(data)), "usage": {"prompt_tokens": 10}})

    enc = _remote(handler)
    res = await enc.encode(["a", "bbbb"])
    assert seen["url"] == "http://emb.test/v1/embeddings" and seen["body"]["model"] == "m"
    assert res.vectors.shape == (2, 3) and np.allclose(res.vectors, [[1, 0, 0], [1, 0, 0]])
    assert res.truncated == [False, False] and sum(res.token_counts) == 10
    await enc.aclose()


@pytest.mark.parametrize(
    "response",
    [
        httpx.Response(500, text="boom"),
        httpx.Response(200, json={"data": [{"index": 0, "embedding": [1.0, 0.0]}]}),  # wrong dimension
        httpx.Response(200, json={"data": []}),  # wrong count
        httpx.Response(200, json={"data": [{"index": 0, "embedding": [0.0, 0.0, 0.0]}]}),  # zero vector
        httpx.Response(200, text="not json"),
    ],
)
async def test_remote_encoder_errors(response):
    enc = _remote(lambda request: response)
    with pytest.raises(EmbeddingUnavailable):
        await enc.encode(["a"])
    await enc.aclose()


def test_remote_encoder_api_key(monkeypatch):
    with pytest.raises(ConfigError, match="EMB_KEY"):
        _remote(lambda r: httpx.Response(200), api_key_env="EMB_KEY")
    monkeypatch.setenv("EMB_KEY", "s3cret")
    enc = _remote(lambda r: httpx.Response(200), api_key_env="EMB_KEY")
    assert enc._client.headers["authorization"] == "Bearer s3cret"


async def test_coalescing_embed_fn_merges_concurrent_calls(local_encoder):

    from memory_core.embedding import CoalescingEmbedFn

    fn = CoalescingEmbedFn(local_encoder, max_batch=8)
    texts = [f"note {i} about gardening" for i in range(20)]
    out = await asyncio.gather(*(fn([t]) for t in texts))
    assert sum(fn.batch_sizes) == 20 and max(fn.batch_sizes) == 8
    ref = local_encoder.encode(texts).vectors
    assert np.allclose(np.asarray([o[0] for o in out]), ref, atol=1e-5)
    assert await fn([]) == []
