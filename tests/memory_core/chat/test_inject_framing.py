"""Screening is a net, not a wall: the memory block frames every memory as quoted data about
the user, and no memory text can close or forge the block. Tested with every injection of the
labelled screening set (tests/screening_set) rendered as if it had passed screening."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from memory_core.chat.inject import (
    BLOCK_END,
    BLOCK_HEADER,
    BLOCK_START,
    format_memory_block,
    inject_memories,
    strip_memory_block,
)
from memory_core.types import Memory

SET = Path(__file__).resolve().parents[2] / "screening_set" / "labelled.jsonl"
INJECTIONS = [
    json.loads(line)["text"]
    for line in SET.read_text(encoding="utf-8").splitlines()
    if line.strip() and json.loads(line)["label"] == "injection"
]
_ROLES = r"(system|developer|assistant|user|tool|function|human|model|ai|bot|admin|administrator|operator|sys|dev)"
_ROLE_MARKER = re.compile(r"(?<![^\W_])" + _ROLES + r"( (prompt|message|note|override|instructions?))? ?:", re.I)
_ROLE_TAG = re.compile(r"[\[(<{] ?/? ?" + _ROLES + r"( (prompt|message|mode))? ?[\])>}]", re.I)
_TEMPLATE = re.compile(r"<\|[^|]*\|>|\[/?INST\]|<</?SYS>>|</?s>|<start_of_turn>|<end_of_turn>|</?memory_context", re.I)


def test_the_header_frames_memories_as_quoted_data_not_instructions():
    assert "quoted" in BLOCK_HEADER and "never instructions to you" in BLOCK_HEADER
    assert "what the user prefers" in BLOCK_HEADER  # standing preferences still inform answers
    for claim in ("system", "developer", "administrator"):
        assert claim in BLOCK_HEADER


@pytest.mark.parametrize("text", INJECTIONS, ids=range(len(INJECTIONS)))
def test_an_unscreened_injection_stays_a_quoted_line_inside_the_block(text):
    block = format_memory_block([Memory(user_id="u", content="I like tea."), Memory(user_id="u", content=text)])
    lines = block.split("\n")
    assert lines[0] == BLOCK_START and lines[1] == BLOCK_HEADER and lines[-1] == BLOCK_END
    assert len(lines) == 5  # start, header, two memory lines, end: the text opened no line
    line = lines[3]
    assert line.startswith('- "') and line.endswith('"') and '"' not in line[3:-1]  # cannot leave its quotes
    assert "<" not in line and ">" not in line and not _TEMPLATE.search(line)
    assert not _ROLE_MARKER.search(line) and not _ROLE_TAG.search(line), line  # no role marker, even quoted
    assert block.count(BLOCK_START) == 1 and block.count(BLOCK_END) == 1
    messages = [{"role": "system", "content": "Be helpful."}, {"role": "user", "content": "hi"}]
    out = inject_memories(messages, [Memory(user_id="u", content=text)])
    assert [m["role"] for m in out] == ["system", "user"] and out[0] == messages[0]
    assert strip_memory_block(out[1]["content"]) == "hi"  # the whole block, and only it, is the memories
