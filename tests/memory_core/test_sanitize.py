"""The input rules (memory_core.sanitize): one rule per kind of value, exact outcomes."""

from __future__ import annotations

import json
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_core.errors import InvalidInput
from memory_core.sanitize import (
    INT64_MAX,
    INT64_MIN,
    MAX_JSON_DEPTH,
    check_conversation_id,
    check_json_text,
    check_json_value,
    check_label,
    check_project_id,
    clean_content,
    is_memory_id,
    is_scoped_to,
    is_visible,
    new_memory_id,
    require_memory_id,
    require_user_id,
    scoped_memory_id,
)
from memory_core.types import Memory


# ---------------------------------------------------------------------- content
@pytest.mark.parametrize(
    "content",
    [
        "",
        "   ",
        "\n\t ",
        "\u200b\u200c\u200d",
        "\u2060",
        "\ufeff",
        " \u3164 ",
        "\u2800",
        "\u00a0\u2003",
        "\x00\x01",
        "\ufe0f",
    ],
)
def test_content_without_a_visible_character_is_refused_by_one_rule(content):
    assert not is_visible(content)
    with pytest.raises(InvalidInput, match="no visible character"):
        clean_content(content)


@pytest.mark.parametrize("content", ["a", "  x  ", "\u200bhi", "北京", "ผม", "😀", "é", "0"])
def test_visible_content_is_kept(content):
    assert clean_content(content) == content.strip()


def test_content_lone_surrogate_and_size():
    with pytest.raises(InvalidInput, match="valid Unicode"):
        clean_content("lone \ud800 here")
    with pytest.raises(InvalidInput, match="bytes"):
        clean_content("é" * 9000)  # 18 000 bytes
    assert clean_content("a\x00b\x07c") == "abc"  # C0 controls dropped, text kept


# ---------------------------------------------------------------------- ids
@pytest.mark.parametrize("value", ["alice", "Alice Smith", "用户", "a" * 256])
def test_owner_ids_accepted(value):
    assert require_user_id(value) == value


@pytest.mark.parametrize("value", ["", " alice", "alice ", "al\u200bice", "a\nb", "a\ud800", "a" * 257, "alice\u00a0"])
def test_owner_ids_refused(value):
    with pytest.raises(InvalidInput):
        require_user_id(value)


@pytest.mark.parametrize("code", range(0x80))
def test_every_ascii_character_inside_an_id_is_judged_by_its_unicode_category(code):
    """The printable-ASCII shortcut of ``require_user_id`` decides as the category rule does,
    for every ASCII character inside an id and at its ends."""
    c = chr(code)
    allowed_inside = c == " " or unicodedata.category(c) not in {"Cc", "Cf", "Zs", "Zl", "Zp"}
    for value, allowed in ((f"a{c}b", allowed_inside), (f"{c}ab", allowed_inside and c != " "),
                           (f"ab{c}", allowed_inside and c != " ")):  # fmt: skip
        if allowed:
            assert require_user_id(value) == value
        else:
            with pytest.raises(InvalidInput):
                require_user_id(value)


def test_project_and_conversation_ids_follow_the_id_rule_with_their_limit():
    assert check_project_id(None) is None and check_conversation_id(None) is None
    assert check_conversation_id("c" * 256) == "c" * 256
    with pytest.raises(InvalidInput, match="x-conversation-id is longer than 256"):
        check_conversation_id("c" * 257, "x-conversation-id")
    with pytest.raises(InvalidInput):
        check_project_id("p\u200b")


def test_memory_id_format_and_owner_scope():
    a = new_memory_id("alice")
    assert is_memory_id(a) and is_scoped_to(a, "alice") and not is_scoped_to(a, "bob")
    assert len({new_memory_id("alice") for _ in range(100)}) == 100
    assert scoped_memory_id("alice", "x") == scoped_memory_id("alice", "x")
    assert scoped_memory_id("alice", "x") != scoped_memory_id("bob", "x")
    assert is_scoped_to(scoped_memory_id("bob", "x"), "bob")
    assert not is_scoped_to("0" * 32, "alice")  # an id from before owner tags
    for bad in ["", "a" * 31, "A" * 32, "g" * 32, "a" * 33, f"{a}'", " " + a[1:], 5, None]:
        assert not is_memory_id(bad)
        with pytest.raises(InvalidInput):
            require_memory_id(bad)
    assert is_scoped_to(Memory(user_id="carol", content="x").id, "carol")  # the default id is scoped


@given(st.text(min_size=1, max_size=40), st.text(min_size=1, max_size=40))
@settings(max_examples=200, deadline=None)
def test_ids_of_two_users_never_coincide(user_a, user_b):
    seed = "same line id"
    if user_a != user_b:
        assert scoped_memory_id(user_a, seed) != scoped_memory_id(user_b, seed)
        assert not is_scoped_to(scoped_memory_id(user_a, seed), user_b)


# ---------------------------------------------------------------------- JSON values
@pytest.mark.parametrize(
    "value",
    [
        {"n": INT64_MAX},
        {"n": INT64_MIN},
        {"f": 1.7976931348623157e308},
        {"s": "a\x00b"},
        {"l": [1, "x", None, True]},
        {},
    ],
)
def test_json_values_stored_losslessly_pass(value):
    assert check_json_value(value) is value


@pytest.mark.parametrize(
    ("value", "where"),
    [
        ({"n": INT64_MAX + 1}, "metadata.n"),
        ({"n": INT64_MIN - 1}, "metadata.n"),
        ({"a": [{"b": 18446744073709551616}]}, "metadata.a.0.b"),
        ({"s": "x\ud800"}, "metadata.s"),
        ({"\udc00": 1}, "metadata (a key)"),
        ({"": 1}, "metadata"),
        ({"a\nb": 1}, "metadata"),
        ({"k" * 257: 1}, "metadata"),
        ({"f": float("nan")}, "metadata.f"),
        ({"f": float("inf")}, "metadata.f"),
    ],
)
def test_json_values_that_would_be_lost_are_refused_naming_the_path(value, where):
    with pytest.raises(InvalidInput) as e:
        check_json_value(value)
    assert str(e.value).startswith(where)


def test_json_depth_limit():
    ok: object = 1
    for _ in range(MAX_JSON_DEPTH - 1):
        ok = [ok]
    check_json_value({"a": ok})
    with pytest.raises(InvalidInput, match="nested deeper"):
        check_json_value({"a": [ok]})


def test_json_text_walks_every_string_and_key():
    body = json.loads('{"messages": [{"role": "user", "content": [{"type": "text", "text": "x\\ud800"}]}]}')
    with pytest.raises(InvalidInput, match=r"^body\.messages\.0\.content\.0\.text: .*U\+D800"):
        check_json_text(body)
    deep = json.loads("[" * 500 + '"\\udfff"' + "]" * 500)
    with pytest.raises(InvalidInput):
        check_json_text(deep)
    assert check_json_text({"ok": ["fine", 1, None]}) == {"ok": ["fine", 1, None]}


def test_labels():
    assert check_label("conversation", "source") == "conversation"
    for bad in ["", "x" * 65, "a\nb", "\u200b", 3]:
        with pytest.raises(InvalidInput):
            check_label(bad, "source")
