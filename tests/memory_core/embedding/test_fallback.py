"""``embedding.fallback``: its configuration, the cosine calibration (fit, file, identity
check), the script of a text, and the engine's turns (queries before passage batches)."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from memory_core.config import (
    EmbeddingSettings,
    FallbackModelSettings,
    MemoryStoreSettings,
    fallback_calibration_path,
    load_config,
)
from memory_core.embedding import compute_identity
from memory_core.embedding.encoder import EncodeResult
from memory_core.embedding.fallback import (
    POOLED,
    CosineCalibration,
    FallbackCalibration,
    FallbackModel,
    load_calibration,
    open_fallback,
    script_of,
)
from memory_core.errors import ConfigError
from tests.packages import needs_e5

MINILM = "bundled:all-MiniLM-L6-v2"
E5 = "bundled:multilingual-e5-small"


# --------------------------------------------------------------------------- configuration
def test_the_shipped_pair_is_accepted_and_named_in_yaml():
    config = load_config(
        {"global": {"stores": {"memory": {"embedding": {"model": MINILM, "fallback": {"model": E5}}}}}}
    )
    assert config.global_.stores.memory.embedding.fallback == FallbackModelSettings(model=E5)
    assert EmbeddingSettings(fallback={}).fallback.model == E5  # e5 is the default fallback


@pytest.mark.parametrize(
    ("embedding", "message"),
    [
        ({"model": E5, "fallback": {"model": E5}}, "must differ"),
        (
            {"remote": {"base_url": "http://127.0.0.1:1", "model": "m", "dimension": 4}, "fallback": {}},
            "needs a local embedding.model",
        ),
        ({"model": MINILM, "fallback": {"model": "bundled:all-mpnet-base-v2"}}, "no cosine calibration"),
        ({"model": E5, "fallback": {"model": MINILM}}, "benchmarks/fallback.py --fit"),
    ],
)
def test_a_pair_without_a_calibration_or_a_remote_model_is_refused(embedding, message):
    with pytest.raises(ConfigError, match=message):
        load_config({"global": {"stores": {"memory": {"embedding": embedding}}}})


def test_the_fallback_needs_hybrid_retrieval():
    with pytest.raises(ValueError, match="needs retrieval.hybrid"):
        MemoryStoreSettings(embedding={"fallback": {}}, retrieval={"hybrid": False})
    assert MemoryStoreSettings(embedding={"fallback": {}}).embedding.fallback is not None


def test_the_calibration_file_is_named_after_both_models(tmp_path):
    path = fallback_calibration_path(MINILM, "/models/my e5:v2")
    assert path.name == "all-MiniLM-L6-v2__my_e5_v2.json"


# --------------------------------------------------------------------------- calibration
def test_linear_equating_brings_the_fallback_to_the_models_mean_and_spread():
    rng = np.random.default_rng(7)
    x = rng.normal(0.8, 0.03, 500)  # a compressed scale, as e5's
    y = 0.1 + 5.0 * (x - 0.8) + rng.normal(0, 0.01, 500)  # the model's, with noise
    cal = CosineCalibration.linear(x, y)
    mapped = np.array([cal(c) for c in x])
    assert mapped.mean() == pytest.approx(y.mean(), abs=1e-3)
    assert mapped.std() == pytest.approx(y.std(), abs=1e-3)
    assert cal(1.0) == 1.0 and cal(-1.0) == -1.0  # clamped to a cosine's range
    assert all(np.diff([cal(c) for c in np.linspace(-1, 1, 50)]) >= 0)  # monotone
    assert cal.pairs == 500
    value = cal(0.83)
    assert value == np.float32(value)  # float32, as every reported similarity


@pytest.mark.parametrize(
    ("x", "y", "message"),
    [([0.5, 0.5, 0.5], [0.1, 0.2, 0.3], "all equal"), ([0.5], [0.1], "≥ 2"), ([0.1, 0.2], [0.1], "equal-length")],
)
def test_linear_equating_refuses_what_it_cannot_fit(x, y, message):
    with pytest.raises(ValueError, match=message):
        CosineCalibration.linear(x, y)


@pytest.mark.parametrize(
    ("fallback_knots", "primary_knots"),
    [((0.5,), (0.1,)), ((0.5, 0.4), (0.1, 0.2)), ((0.1, 0.5), (0.3, 0.2)), ((0.1, float("nan")), (0.1, 0.2))],
)
def test_knots_out_of_shape_or_order_are_refused(fallback_knots, primary_knots):
    with pytest.raises(ValueError):
        CosineCalibration(fallback_knots, primary_knots)


def _calibration(**tables: CosineCalibration) -> FallbackCalibration:
    return FallbackCalibration(
        tuple(sorted(tables.items())),
        model=MINILM,
        fallback=E5,
        identities=(("fallback", "f" * 64), ("model", "m" * 64)),
        source="test",
    )


def test_a_search_takes_its_scripts_table_else_the_pooled_one():
    thai = CosineCalibration((-1.0, 1.0), (-9.0, 1.0))
    pooled = CosineCalibration((-1.0, 1.0), (-1.0, 1.0))
    cal = _calibration(**{"THAI": thai, POOLED: pooled})
    assert cal.for_text("ฉันแพ้อาหารอะไร") is thai
    assert cal.for_text("ልጄ ስሙ ማን ነው") is pooled  # Ethiopic: no table of its own
    assert cal.for_text("🦐🦐") is pooled
    with pytest.raises(ValueError, match="pooled"):
        FallbackCalibration((("THAI", thai),))


def test_the_calibration_file_round_trips_and_is_checked_against_both_identities(tmp_path, monkeypatch):
    import memory_core.config as config

    monkeypatch.setattr(config, "FALLBACK_CALIBRATION_DIR", tmp_path)
    cal = _calibration(
        **{
            "LAO": CosineCalibration.linear([0.8, 0.9, 0.85], [0.1, 0.6, 0.3]),
            POOLED: CosineCalibration((-1, 1), (-2, 1)),
        }
    )
    fallback_calibration_path(MINILM, E5).write_text(cal.to_json(), encoding="utf-8")
    again = load_calibration(MINILM, E5, identities={"model": "m" * 64, "fallback": "f" * 64})
    assert again == FallbackCalibration.from_json(cal.to_json())
    assert again.for_text("ຂ້ອຍ")(0.87) == pytest.approx(cal.for_text("ຂ້ອຍ")(0.87), abs=1e-6)
    with pytest.raises(ConfigError, match="another fallback model"):
        load_calibration(MINILM, E5, identities={"model": "m" * 64, "fallback": "0" * 64})
    with pytest.raises(ConfigError, match="another model model"):
        load_calibration(MINILM, E5, identities={"model": "1" * 64})
    fallback_calibration_path(MINILM, E5).write_text(json.dumps({"tables": {"THAI": {}}}), encoding="utf-8")
    with pytest.raises(ConfigError, match="unreadable"):
        load_calibration(MINILM, E5)
    with pytest.raises(ConfigError, match="no calibration"):
        load_calibration(MINILM, "bundled:elsewhere")


@needs_e5
def test_the_shipped_calibration_matches_the_installed_models():
    """The file in the package was fitted on the very files installed here (else the service
    refuses it at start, and ``benchmarks/fallback.py --fit`` must be rerun)."""
    identities = {
        "model": compute_identity(EmbeddingSettings(model=MINILM)).digest,
        "fallback": compute_identity(EmbeddingSettings(model=E5)).digest,
    }
    cal = load_calibration(MINILM, E5, identities=identities)
    scripts = {script for script, _ in cal.tables}
    assert {POOLED, "THAI", "LAO", "KHMER"} <= scripts
    for _, table in cal.tables:  # e5's compressed scale: an unrelated pair's ~0.8 lands near 0
        assert table(0.80) < 0.2 < 0.5 < table(0.95)


@pytest.mark.parametrize(
    ("text", "script"),
    [
        ("ฉันแพ้กุ้ง", "THAI"),
        ("ຂ້ອຍແພ້ຖົ່ວດິນ", "LAO"),
        ("ለኦቾሎኒ አለርጂ አለብኝ", "ETHIOPIC"),
        ("მაქვს ალერგია", "GEORGIAN"),
        ("I love Chiang Mai (เชียงใหม่)", "LATIN"),  # the script of most letters
        ("123 !!", ""),
        ("", ""),
    ],
)
def test_script_of_a_text(text, script):
    assert script_of(text) == script


# --------------------------------------------------------------------------- the engine's turns
class GatedEncoder:
    """An encoder whose calls wait for a release, recording the order they ran in."""

    dimension = 4
    max_seq_length = None

    def __init__(self):
        self.order: list[tuple[str, tuple[str, ...]]] = []
        self.release = asyncio.Event()
        self.started = asyncio.Event()

    def count_tokens(self, texts):
        return [1] * len(texts)

    async def encode_async(self, texts, token_counts=None, *, query=False):
        self.order.append(("query" if query else "passage", tuple(texts)))
        self.started.set()
        await self.release.wait()
        vectors = np.tile(np.array([1.0, 0.0, 0.0, 0.0], np.float32), (len(texts), 1))
        return EncodeResult(vectors=vectors)


def _model(encoder, batch: int = 2) -> FallbackModel:
    return FallbackModel(
        encoder, _calibration(**{POOLED: CosineCalibration((-1, 1), (-1, 1))}), E5, passage_batch=batch
    )


async def test_a_waiting_search_goes_before_the_waiting_passage_batches():
    encoder = GatedEncoder()
    model = _model(encoder, batch=2)
    build = asyncio.ensure_future(model.embed_passages(["a", "b", "c"]))
    await encoder.started.wait()  # the build's first batch holds the engine
    write = asyncio.ensure_future(model.embed_passages(["w"]))  # waits for its turn
    await asyncio.sleep(0.01)
    query = asyncio.ensure_future(model.embed_query("q"))  # comes last, waits too
    await asyncio.sleep(0.01)
    encoder.release.set()
    built, written, q = await asyncio.gather(build, write, query)
    assert built.shape == (3, 4) and built.dtype == np.float32 and written.shape == (1, 4) and q.shape == (4,)
    assert encoder.order == [
        ("passage", ("a", "b")),
        ("query", ("q",)),  # before the passages that were waiting longer
        ("passage", ("w",)),
        ("passage", ("c",)),
    ]


async def test_concurrent_searches_share_one_engine_call_and_a_cancelled_one_frees_its_turn():
    encoder = GatedEncoder()
    model = _model(encoder)
    first = asyncio.ensure_future(model.embed_passages(["a"]))
    await encoder.started.wait()
    waiting = asyncio.ensure_future(model.embed_passages(["gone"]))
    q1, q2 = asyncio.ensure_future(model.embed_query("x")), asyncio.ensure_future(model.embed_query("y"))
    await asyncio.sleep(0.01)
    waiting.cancel()
    encoder.release.set()
    await asyncio.gather(first, q1, q2)
    assert encoder.order == [("passage", ("a",)), ("query", ("x", "y"))]
    assert (await asyncio.wait_for(model.embed_passages(["after"]), 5)).shape == (1, 4)


@needs_e5
def test_open_fallback_loads_e5_with_its_calibration(bundled_settings):
    assert open_fallback(bundled_settings) is None
    model = open_fallback(bundled_settings.model_copy(update={"fallback": FallbackModelSettings(model=E5)}))
    assert model is not None and model.dimension == 384 and model.label == E5
    assert model.represents("ฉันแพ้กุ้ง")  # e5 reads every script
    assert model.scale_for("ฉันแพ้กุ้ง") is model.calibration.for_text("ฉันแพ้กุ้ง")
