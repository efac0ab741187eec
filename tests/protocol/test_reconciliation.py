"""Action reconciliation: the Arrow fold equals the spec's rules applied one by one."""

from __future__ import annotations

import pickle
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raydelta.protocol import path_index
from raydelta.protocol.actions import (
    Action,
    AddFile,
    DomainMetadata,
    Format,
    Metadata,
    Protocol,
    RemoveFile,
    Txn,
)
from raydelta.protocol.deletion_vectors import DeletionVectorDescriptor
from raydelta.protocol.file_actions import ADD_SCHEMA, REMOVE_SCHEMA, actions_to_table, drop_rows
from raydelta.protocol.reconciliation import (
    TableState,
    apply_commits,
    replay,
    state_from_checkpoint,
)

PATHS = ["a.parquet", "b.parquet", "dir/c.parquet", "special p@#h.parquet"]
DVS = [
    None,
    DeletionVectorDescriptor.model_validate(
        {
            "storageType": "u",
            "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^",
            "offset": 4,
            "sizeInBytes": 40,
            "cardinality": 6,
        }
    ),
    DeletionVectorDescriptor.model_validate(
        {
            "storageType": "u",
            "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^",
            "offset": 90,
            "sizeInBytes": 40,
            "cardinality": 7,
        }
    ),
]


def _metadata(tag: str) -> Metadata:
    return Metadata(
        id="id-" + tag,
        format=Format(),
        schemaString='{"type":"struct","fields":[]}',
        partitionColumns=[],
        configuration={"tag": tag},
    )


@st.composite
def file_action(draw: Any, version: int) -> Action:
    path = draw(st.sampled_from(PATHS))
    dv = draw(st.sampled_from(DVS))
    if draw(st.booleans()):
        return AddFile(
            path=path,
            size=version + 1,
            modificationTime=version,
            dataChange=True,
            deletionVector=dv,
            stats='{"numRecords": 10}',
        )
    return RemoveFile(path=path, deletionTimestamp=version, dataChange=True, deletionVector=dv)


@st.composite
def commit(draw: Any, version: int) -> list[Action]:
    actions: list[Action] = []
    seen: set[tuple[str, str, str | None]] = set()
    for action in draw(st.lists(file_action(version), max_size=5)):
        assert isinstance(action, (AddFile, RemoveFile))
        # A valid commit holds at most one action of a type per path.
        key = (type(action).__name__, action.path, None)
        if key in seen:
            continue
        seen.add(key)
        actions.append(action)
    if draw(st.booleans()):
        actions.append(Txn(appId=draw(st.sampled_from(["x", "y"])), version=version))
    if draw(st.integers(0, 4)) == 0:
        actions.append(_metadata(str(version)))
    if draw(st.integers(0, 4)) == 0:
        actions.append(
            DomainMetadata(domain="d", configuration=str(version), removed=draw(st.booleans()))
        )
    return actions


@st.composite
def history(draw: Any) -> list[tuple[int, list[Action]]]:
    first: list[Action] = [Protocol(minReaderVersion=1, minWriterVersion=2), _metadata("0")]
    count = draw(st.integers(0, 8))
    return [(0, first)] + [(v, draw(commit(v))) for v in range(1, count + 1)]


def naive_replay(commits: list[tuple[int, list[Action]]]) -> dict[str, Any]:
    """The spec's rules, one action at a time, in plain dicts."""
    files: dict[tuple[str, str | None], AddFile | RemoveFile] = {}
    txns: dict[str, int] = {}
    domains: dict[str, DomainMetadata] = {}
    metadata = protocol = None
    for _, actions in commits:
        # removes before adds inside one commit (see apply_commits)
        ordered = [a for a in actions if isinstance(a, RemoveFile)] + [
            a for a in actions if not isinstance(a, RemoveFile)
        ]
        for action in ordered:
            if isinstance(action, (AddFile, RemoveFile)):
                files[(action.path, action.dv_unique_id)] = action
            elif isinstance(action, Txn):
                txns[action.app_id] = action.version
            elif isinstance(action, DomainMetadata):
                domains[action.domain] = action
            elif isinstance(action, Metadata):
                metadata = action
            elif isinstance(action, Protocol):
                protocol = action
    return {
        "adds": {k: a.size for k, a in files.items() if isinstance(a, AddFile)},
        "removes": {k for k, a in files.items() if isinstance(a, RemoveFile)},
        "txns": txns,
        "domains": {k: d.configuration for k, d in domains.items() if not d.removed},
        "metadata": metadata,
        "protocol": protocol,
    }


def observed(state: TableState) -> dict[str, Any]:
    return {
        "adds": {(a.path, a.dv_unique_id): a.size for a in state.add_files()},
        "removes": {(r.path, r.dv_unique_id) for r in state.remove_files()},
        "txns": {k: t.version for k, t in state.txns.items()},
        "domains": {k: d.configuration for k, d in state.domains.items()},
        "metadata": state.metadata,
        "protocol": state.protocol,
    }


@settings(max_examples=100, deadline=None)
@given(history())
def test_replay_equals_rules_applied_one_by_one(commits: list[tuple[int, list[Action]]]) -> None:
    state = replay(commits)
    assert observed(state) == naive_replay(commits)
    assert state.version == commits[-1][0]
    # the add and remove collections never share a key
    assert not set(observed(state)["adds"]) & observed(state)["removes"]


@settings(max_examples=100, deadline=None)
@given(history(), st.integers(0, 8))
def test_folding_in_steps_equals_one_fold(
    commits: list[tuple[int, list[Action]]], split: int
) -> None:
    split = min(split, len(commits))
    stepwise = apply_commits(replay(commits[:split]), commits[split:])
    assert observed(stepwise) == observed(replay(commits))


@settings(max_examples=100, deadline=None)
@given(history(), st.integers(1, 8))
def test_checkpoint_base_equals_full_replay(
    commits: list[tuple[int, list[Action]]], split: int
) -> None:
    """A checkpoint (reconciled state written as rows) + later commits = full replay."""
    split = min(split, len(commits))
    at_checkpoint = replay(commits[:split])
    non_file: list[Action] = [a for a in (at_checkpoint.protocol, at_checkpoint.metadata) if a]
    non_file += list(at_checkpoint.txns.values()) + list(at_checkpoint.domain_actions.values())
    base = state_from_checkpoint(
        at_checkpoint.version, non_file, at_checkpoint.adds, at_checkpoint.removes
    )
    assert observed(apply_commits(base, commits[split:])) == observed(replay(commits))


def test_same_path_different_dvs_are_different_logical_files() -> None:
    add_plain = AddFile(path="f", size=1, modificationTime=0)
    add_dv = AddFile(path="f", size=1, modificationTime=0, deletionVector=DVS[1])
    remove_plain = RemoveFile(path="f", deletionTimestamp=5)
    state = replay([(0, [add_plain]), (1, [remove_plain, add_dv])])
    assert [(a.path, a.dv_unique_id) for a in state.add_files()] == [("f", DVS[1].unique_id)]
    assert [(r.path, r.dv_unique_id) for r in state.remove_files()] == [("f", None)]


def test_readd_after_remove_clears_the_tombstone() -> None:
    add = AddFile(path="foo", size=1, modificationTime=1700000000000)
    state = replay([(0, [add]), (1, [RemoveFile(path="foo", deletionTimestamp=1)]), (2, [add])])
    assert [a.path for a in state.add_files()] == ["foo"]
    assert state.removes.num_rows == 0


def test_domain_tombstone_hides_domain_but_is_kept() -> None:
    state = replay(
        [
            (0, [DomainMetadata(domain="d", configuration="1")]),
            (1, [DomainMetadata(domain="d", configuration="1", removed=True)]),
        ]
    )
    assert state.domains == {}
    assert state.domain_actions["d"].removed


def test_expired_tombstones_are_dropped_by_cutoff() -> None:
    state = replay(
        [
            (
                0,
                [
                    AddFile(path="a", size=1, modificationTime=0),
                    AddFile(path="b", size=1, modificationTime=0),
                ],
            ),
            (
                1,
                [
                    RemoveFile(path="a", deletionTimestamp=100),
                    RemoveFile(path="b", deletionTimestamp=200),
                ],
            ),
        ]
    )
    kept = state.without_expired_tombstones(150)
    assert [r.path for r in kept.remove_files()] == ["b"]


def test_drop_rows_slices_and_filters_the_same() -> None:
    table = actions_to_table(
        [AddFile(path=f"p{i}", size=i, modificationTime=0) for i in range(100)], ADD_SCHEMA
    )
    few = [3, 4, 50]
    many = list(range(0, 100, 2))
    for drop in (few, many, [], [0], [99]):
        result = drop_rows(table, drop)
        expected = [f"p{i}" for i in range(100) if i not in drop]
        assert result.column("path").to_pylist() == expected


def test_file_tables_keep_the_canonical_layout() -> None:
    state = replay(
        [
            (0, [AddFile(path="a", size=1, modificationTime=0)]),
            (1, [RemoveFile(path="a", deletionTimestamp=1)]),
        ]
    )
    assert state.adds.schema == ADD_SCHEMA
    assert state.removes.schema == REMOVE_SCHEMA
    assert isinstance(state.adds, pa.Table)


@settings(max_examples=150, deadline=None)
@given(history(), st.integers(0, 8), st.integers(0, 3))
def test_folding_through_a_path_index_equals_replay(
    commits: list[tuple[int, list[Action]]], split: int, overlay_limit: int
) -> None:
    """Commits folded one at a time into an indexed state (built, carried
    through drops and appends, rebuilt once the overlay grows) = full replay."""
    split = max(1, min(split, len(commits)))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(path_index, "INDEX_MIN_ROWS", 1)
        patch.setattr(path_index, "OVERLAY_MIN_ROWS", overlay_limit)
        state = replay(commits[:split])
        for version, actions in commits[split:]:
            state = apply_commits(state, [(version, actions)], keep_index=True)
            for table, index in (
                (state.adds, state.adds_index),
                (state.removes, state.removes_index),
            ):
                if index is not None:
                    assert index.describes(table)
        assert observed(state) == observed(replay(commits))
        assert observed(state) == naive_replay(commits)


def test_a_path_index_is_never_pickled() -> None:
    adds = [
        AddFile(path=f"f{i}.parquet", size=1, modificationTime=0, dataChange=True) for i in range(4)
    ]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(path_index, "INDEX_MIN_ROWS", 1)
        state = apply_commits(replay([(0, [*adds[:2]])]), [(1, adds[2:])], keep_index=True)
    assert state.adds_index is not None and state.adds_index.describes(state.adds)
    copy = pickle.loads(pickle.dumps(state))
    assert copy.adds_index is None and copy.removes_index is None
    assert observed(copy) == observed(state)
