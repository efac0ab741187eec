"""A compaction file stands for its commits only when that is unambiguous.

Random logs over a few files (several spellings of each), app ids and
domains; a compaction file for a random range written in the shapes real
writers produce: reconciled (the spec; deltalake writes newest first),
every action of the range oldest first, newest first, and newest commit
first. Whenever :func:`compaction_replacement` accepts a file, folding it in
place of its commits gives the state of folding the commits themselves; a
reconciled file is always accepted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from raydelta.protocol.actions import (
    Action,
    AddFile,
    CommitInfo,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    Txn,
)
from raydelta.protocol.log_compaction import compaction_replacement, is_reconciled
from raydelta.protocol.reconciliation import TableState, apply_commits, fold_actions

ROOT = "/t"
FILES = {"a": ["a", "%61", "/t/a", "file:///t/a"], "b": ["b", "file:/t/b"], "c": ["c"]}


def _file_action(draw: Any) -> Action:
    name = draw(st.sampled_from(sorted(FILES)))
    path = draw(st.sampled_from(FILES[name]))
    size = draw(st.integers(1, 3))
    if draw(st.booleans()):
        return AddFile.model_validate(
            {"path": path, "size": size, "modificationTime": size, "partitionValues": {}}
        )
    return RemoveFile.model_validate({"path": path, "deletionTimestamp": size, "size": size})


@st.composite
def actions(draw: Any) -> Action:
    kind = draw(st.sampled_from(["file", "file", "file", "txn", "domain", "metadata", "info"]))
    if kind == "file":
        return _file_action(draw)
    if kind == "txn":
        return Txn.model_validate(
            {"appId": draw(st.sampled_from("xy")), "version": draw(st.integers(0, 3))}
        )
    if kind == "domain":
        return DomainMetadata(
            domain=draw(st.sampled_from(["d1", "d2"])),
            configuration=str(draw(st.integers(0, 2))),
            removed=draw(st.booleans()),
        )
    if kind == "metadata":
        return Metadata.model_validate(
            {"id": "t", "configuration": {"n": str(draw(st.integers(0, 2)))}}
        )
    return CommitInfo.model_validate({"timestamp": draw(st.integers(0, 9))})


FIRST: list[Action] = [
    Protocol.model_validate({"minReaderVersion": 1, "minWriterVersion": 2}),
    Metadata.model_validate({"id": "t"}),
]


def fingerprint(state: TableState) -> dict[str, Any]:
    return {
        "protocol": state.protocol,
        "metadata": state.metadata,
        "txns": state.txns,
        "domains": state.domain_actions,
        "adds": sorted(map(str, state.adds.to_pylist())),
        "removes": sorted(map(str, state.removes.to_pylist())),
    }


def replay(commits: Sequence[tuple[int, Sequence[Action]]]) -> TableState:
    return apply_commits(TableState(table_root=ROOT), commits)


def shapes(commits: Sequence[Sequence[Action]]) -> dict[str, list[Action]]:
    folded = fold_actions(commits, table_root=ROOT)
    reconciled: list[Action] = [
        *(a for a in (folded.protocol, folded.metadata) if a is not None),
        *folded.txns.values(),
        *folded.domains.values(),
        *reversed(list(folded.newest.values())),  # newest first, as deltalake writes
    ]
    flat = [a for commit in commits for a in commit]
    return {
        "reconciled": reconciled,
        "oldest-first": flat,
        "newest-first": list(reversed(flat)),
        "newest-commit-first": [a for commit in reversed(commits) for a in commit],
    }


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(actions(), max_size=5), min_size=2, max_size=7), st.data())
def test_an_accepted_compaction_replays_like_its_commits(
    bodies: list[list[Action]], data: st.DataObject
) -> None:
    commits: list[list[Action]] = [FIRST + bodies[0], *bodies[1:]]
    start = data.draw(st.integers(1, len(commits) - 1), label="start")
    end = data.draw(st.integers(start, len(commits) - 1), label="end")
    expected = fingerprint(replay(list(enumerate(commits))))
    covered = commits[start : end + 1]
    for shape, actions_in_file in shapes(covered).items():
        usable = compaction_replacement(actions_in_file, ROOT)
        if shape == "reconciled":
            assert is_reconciled(actions_in_file, ROOT)
            stateful = [a for a in actions_in_file if not isinstance(a, CommitInfo)]
            assert (usable is None) == (not stateful), shape
        if usable is None:
            continue
        units: list[tuple[int, Sequence[Action]]] = [
            *enumerate(commits[:start]),
            (end, usable),
            *list(enumerate(commits))[end + 1 :],
        ]
        assert fingerprint(replay(units)) == expected, shape


def test_an_unreconciled_file_whose_order_matters_is_refused() -> None:
    add = AddFile.model_validate(
        {"path": "a", "size": 1, "modificationTime": 1, "partitionValues": {}}
    )
    remove = RemoveFile.model_validate({"path": "file:///t/a", "deletionTimestamp": 2})
    assert compaction_replacement([add, remove], ROOT) is None
    assert compaction_replacement([remove, add], ROOT) is None
    # without the root, the two spellings are two files: nothing is ambiguous
    assert compaction_replacement([add, remove]) == [add, remove]
    # the same action twice is order-free: one is kept
    assert compaction_replacement([add, CommitInfo(), add], ROOT) == [add]
    assert compaction_replacement([CommitInfo()], ROOT) is None
