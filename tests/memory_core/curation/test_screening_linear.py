"""Screening runs in time linear in the text: hostile shapes at n and 8n characters take at
most 24× as long (linear: 8×, with room for a loaded machine; quadratic: 64×: the old
``(^|\\n)\\s*…`` pattern took ~24 s on ``"a" + "\\n" * 16000 + "a"``). The general timing-ratio test of every text rule is
tests/memory_core/test_linear_time.py; this one is screening's own."""

from __future__ import annotations

import time

import pytest

from memory_core.curation.screening import screen, screen_window
from memory_core.model_text import model_lines, model_text, skeleton

SHAPES = {
    "newlines": lambda n: "a" + "\n" * n + "a",
    "newline_space": lambda n: "\n " * (n // 2),
    "ignore": lambda n: "ignore " * (n // 7),
    "system_colon": lambda n: "system:" * (n // 7),
    "you_are_now": lambda n: "you are now " * (n // 12),
    "role_lines": lambda n: "user: system: x\n" * (n // 16),
    "hashes": lambda n: "#" * n + " system",
    "brackets": lambda n: "[" * n,
    "cyrillic_mix": lambda n: "\u0456gn\u043ere " * (n // 7),
    "zero_width": lambda n: "i\u200b" * (n // 2),
    "cjk": lambda n: "忽略" * (n // 2),
    "spaced_letters": lambda n: "a " * (n // 2),
}


def _seconds(fn, *texts: str) -> list[float]:
    """The best of 5 timings of ``fn`` on each text, measured in turns (so a load that comes
    and goes slows every size alike), in CPU seconds of this thread (``time.thread_time``:
    what other processes take of the shared cores does not count)."""
    best = [float("inf")] * len(texts)
    for _ in range(5):
        for i, text in enumerate(texts):
            started = time.thread_time()
            fn(text)
            best[i] = min(best[i], time.thread_time() - started)
    return best


def _both(text: str) -> None:
    screen(text)
    screen_window(text)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_screening_time_grows_linearly(shape):
    make = SHAPES[shape]
    t_small, t_large = _seconds(_both, make(4000), make(32000))
    assert t_large < 2.0, f"{shape}: {t_large:.3f}s for 32,000 characters"
    if t_large > 0.005:  # below that, timer noise decides the ratio
        assert t_large / max(t_small, 1e-4) < 24, f"{shape}: {t_small:.4f}s → {t_large:.4f}s for 8× the text"


def test_the_issue_newline_case_is_fast():
    (seconds,) = _seconds(_both, "a" + "\n" * 16000 + "a")
    assert seconds < 0.5


@pytest.mark.parametrize("fn", [model_text, model_lines, skeleton])
def test_normalisation_is_linear(fn):
    text = ("\u0456gn\u043ere \u200bＡ\n" * 2000)[:4000]
    t_small, t_large = _seconds(fn, text, text * 8)
    if t_large > 0.005:
        assert t_large / max(t_small, 1e-4) < 24
