"""The ranking formula alone (memory_core.retrieval.fusion), with exact values."""

from __future__ import annotations

import pytest

from memory_core.retrieval.fusion import FusionWeights, Signals, base_score, final_score

SCORE = FusionWeights(
    fusion="score", lexical_weight=0.4, rrf_k=60, neighbor_weight=0.5, speaker_weight=0.3, temporal_weight=0.2
)
RRF = FusionWeights(
    fusion="rrf", lexical_weight=0.4, rrf_k=60, neighbor_weight=0.5, speaker_weight=0.3, temporal_weight=0.2
)


def test_score_fusion_weighs_cosine_against_max_normalised_bm25():
    s = Signals(similarity=0.5, bm25=3.0)
    assert base_score(s, SCORE, max_bm25=6.0) == pytest.approx(0.6 * 0.5 + 0.4 * 0.5)
    assert base_score(Signals(similarity=0.5), SCORE, max_bm25=6.0) == pytest.approx(0.3)  # not a lexical hit
    assert base_score(Signals(similarity=0.5, bm25=1.0), SCORE, max_bm25=0.0) == pytest.approx(0.3)  # no lexical side


def test_lexical_weight_is_clamped_to_unit_interval():
    heavy = FusionWeights(**{**SCORE.__dict__, "lexical_weight": 7.0})
    light = FusionWeights(**{**SCORE.__dict__, "lexical_weight": -1.0})
    s = Signals(similarity=0.8, bm25=2.0)
    assert base_score(s, heavy, max_bm25=4.0) == pytest.approx(0.5)
    assert base_score(s, light, max_bm25=4.0) == pytest.approx(0.8)


def test_rrf_puts_a_first_rank_on_both_sides_at_one():
    assert base_score(Signals(similarity=0.1, vector_rank=1, lexical_rank=1), RRF, 0.0) == pytest.approx(1.0)
    only_vector = base_score(Signals(similarity=0.9, vector_rank=3), RRF, 0.0)
    assert only_vector == pytest.approx(0.6 / 63 * 61)
    assert base_score(Signals(similarity=0.9), RRF, 0.0) == 0.0


def test_temporal_bonus_neighbour_and_speaker():
    s = Signals(similarity=0.5, temporal_match=True, speaker_named=True)
    base = base_score(s, SCORE, max_bm25=0.0)
    assert base == pytest.approx(0.3 + 0.2)
    assert final_score(base, [0.1, 0.4], s, SCORE) == pytest.approx(0.5 + 0.5 * 0.4 + 0.3)
    assert final_score(base, [], Signals(similarity=0.5), SCORE) == pytest.approx(0.5)
    no_neighbours = FusionWeights(**{**SCORE.__dict__, "neighbor_weight": 0.0})
    assert final_score(0.5, [0.9], Signals(similarity=0.5), no_neighbours) == pytest.approx(0.5)
