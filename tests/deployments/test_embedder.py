"""The Embedder deployment's pure parts, without Ray: its batch sizing and user_config rules,
and its refusal of a model whose files give another identity than the application's."""

from __future__ import annotations

import dataclasses

import pytest

from memory_core.embedding import compute_identity
from memory_core.errors import EmbeddingIdentityMismatch, InvalidInput


def test_serve_batch_size_fn_uses_item_limits():
    from deployments.embedder import _Item, item_batch_size, validate_user_config

    items = [_Item("t", 150, 170, 16, 256), _Item("u", 100, 100, 16, 256)]
    assert item_batch_size(items[:1]) <= 16 < item_batch_size(items)  # 2 × 150 > 256
    assert validate_user_config({"max_batch_size": 4}, 256)["max_batch_tokens"] >= 256
    with pytest.raises(InvalidInput):
        validate_user_config({"max_batch_tokens": 100}, 256)
    with pytest.raises(InvalidInput):
        validate_user_config({"bogus": 1}, 256)


def test_embedder_refuses_a_different_identity(bundled_settings):
    from deployments.embedder import Embedder

    with pytest.raises(EmbeddingIdentityMismatch, match="rebuild"):
        wrong = dataclasses.replace(compute_identity(bundled_settings), digest="0" * 64)
        Embedder.func_or_class(bundled_settings, wrong)
