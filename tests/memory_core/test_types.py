"""The typed values of the store contract (``ListQuery``, ``MemoryScope``, ``MemoryChanges``):
each rule checked once, when the value is built, and refused as ``InvalidInput`` (HTTP 400
``invalid_request``), never as pydantic's ``ValidationError`` (a 500 at the edge); the values
are frozen and keep what was given (``project_id: None`` clears, an absent field does not)
across pickling, which is how they cross the store pool's actor hop."""

from __future__ import annotations

import pickle
from datetime import UTC, datetime, timedelta, timezone

import pytest
from pydantic import ValidationError

from memory_core.errors import InvalidInput
from memory_core.types import MAX_LIST_LIMIT, ListQuery, MemoryChanges, MemoryScope, MemoryState, MemoryType

REFUSED = [
    (ListQuery, {"user_id": ""}, "user_id is required"),
    (ListQuery, {"user_id": " alice"}, "user_id"),
    (ListQuery, {"user_id": "alice", "limit": 0}, f"limit must be in 1..{MAX_LIST_LIMIT}"),
    (ListQuery, {"user_id": "alice", "limit": MAX_LIST_LIMIT + 1}, f"limit must be in 1..{MAX_LIST_LIMIT}"),
    (ListQuery, {"user_id": "alice", "offset": -1}, "offset must be ≥ 0"),
    (ListQuery, {"user_id": "alice", "project_id": ""}, "project_id"),
    (ListQuery, {"user_id": "alice", "types": ["fact"]}, "types.0"),
    (ListQuery, {"user_id": "alice", "order": "oldest"}, "unknown fields: ['order']"),
    (MemoryScope, {"user_id": ""}, "user_id is required"),
    (MemoryScope, {"user_id": "alice", "states": ["active"]}, "unknown fields: ['states']"),
    (MemoryChanges, {"user_id": "bob"}, "fields not updatable: ['user_id']"),
    (MemoryChanges, {"created_at": datetime.now(UTC), "id": "x"}, "fields not updatable: ['created_at', 'id']"),
    (MemoryChanges, {"content": None}, "content cannot be null"),
    (MemoryChanges, {"type": None, "state": None}, "type, state cannot be null"),
    (MemoryChanges, {"content": " \x00 "}, "content"),
    (MemoryChanges, {"content": "x" * (16 * 1024 + 1)}, "content"),
    (MemoryChanges, {"importance": 1.5}, "importance must be in [0, 1]"),
    (MemoryChanges, {"importance": "high"}, "importance: "),
    (MemoryChanges, {"type": "fact"}, "type: "),
    (MemoryChanges, {"source": ""}, "source must be a string"),
    (MemoryChanges, {"metadata": {"n": 2**70}}, "metadata"),
    (MemoryChanges, {"superseded_by": "not-an-id"}, "superseded_by"),
    (MemoryChanges, {"merged_from": ["0" * 32, "nope"]}, "merged_from"),
    (MemoryChanges, {"state_reason": "x" * 4097}, "state_reason must be text of at most 4096"),
    (
        MemoryChanges,
        {"expires_at": datetime(9999, 12, 31, 23, 0, tzinfo=timezone(timedelta(hours=-23, minutes=-59)))},
        "expires_at: ",
    ),
]


@pytest.mark.parametrize(("kind", "fields", "message"), REFUSED, ids=lambda v: getattr(v, "__name__", None))
def test_a_value_the_rules_refuse_raises_invalid_input_with_the_rules_message(kind, fields, message):
    with pytest.raises(InvalidInput) as refused:
        kind(**fields)
    assert type(refused.value) is InvalidInput and message in str(refused.value)


def test_changes_hold_only_what_was_given_validated_and_survive_pickling():
    late = datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=timezone(timedelta(hours=2)))
    changes = MemoryChanges(content="  I moved to Osaka\x07 ", project_id=None, expires_at=late, merged_from=[])
    assert changes.as_dict() == {
        "content": "I moved to Osaka",
        "project_id": None,
        "merged_from": [],
        "expires_at": datetime(2030, 1, 2, 1, 4, 5, 678000, tzinfo=UTC),
    }
    hopped = pickle.loads(pickle.dumps(changes))
    assert hopped == changes and hopped.as_dict() == changes.as_dict()
    assert MemoryChanges().as_dict() == {} and MemoryChanges(conversation_id=None).as_dict() == {
        "conversation_id": None
    }
    with pytest.raises(ValidationError):
        changes.content = "changed behind the rules"  # frozen


def test_with_changes_adds_fields_and_validates_the_whole_again():
    base = MemoryChanges(content="I like tea", importance=0.2)
    more = base.with_changes(state=MemoryState.QUARANTINED, state_reason="reads as instructions")
    assert more.as_dict() == {
        "content": "I like tea",
        "importance": 0.2,
        "state": MemoryState.QUARANTINED,
        "state_reason": "reads as instructions",
    }
    assert base.as_dict() == {"content": "I like tea", "importance": 0.2}  # unchanged
    with pytest.raises(InvalidInput, match="importance must be in"):
        base.with_changes(importance=7)


def test_a_list_query_reads_empty_filters_as_none_and_carries_its_scope():
    query = ListQuery(user_id="alice", types=[], states=[], project_id="atlas")
    assert query.types is None and query.states is None and (query.limit, query.offset) == (50, 0)
    typed = ListQuery(user_id="alice", types=["episodic"], states=["superseded"], limit=3, offset=6)
    assert typed.types == (MemoryType.EPISODIC,) and typed.states == (MemoryState.SUPERSEDED,)
    assert typed.scope() == MemoryScope(user_id="alice", types=[MemoryType.EPISODIC])
    assert pickle.loads(pickle.dumps(typed)) == typed
    assert MemoryScope(user_id="alice", types=()).types is None


def test_a_list_query_is_not_a_deletion_scope():
    """``forget_by_scope`` takes a ``MemoryScope``: a list query (whose states and paging a
    deletion would ignore) is another type, refused by the type checker and by ``isinstance``."""
    query = ListQuery(user_id="alice", states=["quarantined"], limit=1)
    assert not isinstance(query, MemoryScope) and not isinstance(MemoryScope(user_id="alice"), ListQuery)
