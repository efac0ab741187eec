"""Log lines from a future protocol version: known actions with fields this
reader does not know, next to action names it does not know.

Property: adding unknown keys (inside a known action's body, or as sibling
actions on its line) never fails a parse, never changes what the known
fields say, and keeps every unknown key (written back by serialize).
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from raydelta.protocol.actions import (
    ACTION_TYPES,
    ActionModel,
    UnknownAction,
    action_to_wrapper,
    parse_actions,
)

BASE_LINES = [
    {
        "add": {
            "path": "a",
            "partitionValues": {},
            "size": 1,
            "modificationTime": 2,
            "dataChange": True,
        }
    },
    {"remove": {"path": "a", "deletionTimestamp": 3, "dataChange": True}},
    {
        "metaData": {
            "id": "t",
            "format": {"provider": "parquet", "options": {}},
            "partitionColumns": [],
        }
    },
    {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
    {"txn": {"appId": "x", "version": 1}},
    {"commitInfo": {"timestamp": 1}},
    {"domainMetadata": {"domain": "d", "configuration": "{}", "removed": False}},
    {"cdc": {"path": "c", "partitionValues": {}, "size": 1, "dataChange": False}},
]

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-10, 10) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
NEW_NAMES = st.text(alphabet="abcdefghijklmnopqrstuvwxyzXYZ", min_size=1, max_size=10)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(BASE_LINES),
    st.dictionaries(NEW_NAMES, JSON_VALUES, max_size=3),
    st.dictionaries(NEW_NAMES, JSON_VALUES.filter(lambda v: v is not None), max_size=3),
    st.booleans(),
)
def test_unknown_keys_are_ignored_and_kept(
    line: dict[str, Any], new_fields: dict[str, Any], new_actions: dict[str, Any], first: bool
) -> None:
    ((name, body),) = line.items()
    known_fields = set(ACTION_TYPES[name].model_fields) | {
        f.alias for f in ACTION_TYPES[name].model_fields.values() if f.alias
    }
    extra = {k: v for k, v in new_fields.items() if k not in known_fields and k not in body}
    siblings = {k: v for k, v in new_actions.items() if k not in ACTION_TYPES}
    wrapper = {name: {**body, **extra}}
    wrapper = {**siblings, **wrapper} if first else {**wrapper, **siblings}
    parsed = parse_actions(json.dumps(wrapper))
    known = [a for a in parsed if isinstance(a, ActionModel)]
    unknown = [a for a in parsed if isinstance(a, UnknownAction)]
    assert len(known) == 1
    plain = parse_actions(json.dumps(line))[0]
    assert isinstance(plain, ActionModel)
    assert known[0].model_dump(exclude=set(extra)) == plain.model_dump()
    # unknown fields are written back as read (a null one may be left out:
    # in the log an absent optional field and a null one mean the same)
    written = action_to_wrapper(known[0])[name]
    assert {k: written[k] for k in extra if extra[k] is not None} == {
        k: v for k, v in extra.items() if v is not None
    }
    assert {u.name: u.body for u in unknown} == siblings
