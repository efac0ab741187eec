"""One spelling of a log path everywhere paths are compared.

The spec: ``path`` is a URI "which needs to be decoded to get the data file
path", relative to the table root or absolute. So a file referenced as
``a.parquet``, ``%61.parquet`` and ``file:///root/a.parquet`` is one file for
reconciliation, conflicts, checkpoint keys and VACUUM, and percent-encoding
is decoded exactly once (``%2520`` is a literal ``%20``).
"""

from __future__ import annotations

from urllib.parse import quote

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raydelta.protocol.actions import AddFile, RemoveFile
from raydelta.protocol.checkpoint_plan import key_strings
from raydelta.protocol.cleanup_rules import TableRoot, resolve_path
from raydelta.protocol.conflicts import check_conflicts
from raydelta.protocol.errors import (
    ConcurrentDeleteDeleteException,
    ConcurrentDeleteReadException,
)
from raydelta.protocol.events import FileRef, ReadSet
from raydelta.protocol.file_actions import (
    ADD_SCHEMA,
    actions_to_table,
    canonical_path,
    table_root_key,
)
from raydelta.protocol.path_index import PathIndex
from raydelta.protocol.reconciliation import TableState, apply_commits
from raydelta.protocol.winning_commits import WinningCommit

ROOT = "/data/my table"
ROOT_KEY = table_root_key("file:///data/my%20table/")


def spellings(relative: str) -> list[str]:
    """Ways real writers spell the file ``relative`` (decoded) under ``ROOT``."""
    encoded = quote(relative, safe="/")
    absolute = f"{ROOT}/{relative}"
    absolute_encoded = quote(absolute, safe="/")
    plain = [] if "%" in relative else [relative, absolute]  # unencoded, as some writers do
    return [
        *plain,
        encoded,
        quote(relative, safe=""),  # even '/' encoded
        "".join(f"%{b:02X}" for b in relative.encode()),  # every byte encoded
        "file:" + absolute_encoded,
        "file://" + absolute_encoded,
        "file://localhost" + absolute_encoded,
        "FILE://" + absolute_encoded,
    ]


RELATIVE_NAMES = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="/"),
    min_size=1,
    max_size=12,
).filter(lambda s: s not in (".", ".."))
RELATIVE_PATHS = st.lists(RELATIVE_NAMES, min_size=1, max_size=3).map("/".join)


def add(path: str) -> AddFile:
    return AddFile.model_validate(
        {"path": path, "size": 1, "modificationTime": 1, "partitionValues": {}}
    )


def remove(path: str) -> RemoveFile:
    return RemoveFile.model_validate({"path": path, "deletionTimestamp": 2})


def test_root_key_is_decoded_without_trailing_slash() -> None:
    assert ROOT_KEY == ROOT
    assert table_root_key("/data/my table") == ROOT
    assert table_root_key("s3://bucket/t/") == "s3://bucket/t"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("a.parquet", "a.parquet"),
        ("%61.parquet", "a.parquet"),
        ("a%2520b.parquet", "a%20b.parquet"),  # decoded once, not twice
        ("p=a%20b/c.parquet", "p=a b/c.parquet"),
        ("file:///data/my%20table/a.parquet", "a.parquet"),
        ("file:/data/my%20table/a.parquet", "a.parquet"),
        ("/data/my table/a.parquet", "a.parquet"),
        ("file:///data/other/a.parquet", "/data/other/a.parquet"),
        ("file:///data/my%20table2/a.parquet", "/data/my table2/a.parquet"),
        ("s3://bucket/t/a%3Ab.parquet", "s3://bucket/t/a:b.parquet"),
        ("file://host/share/a.parquet", "file://host/share/a.parquet"),
    ],
)
def test_canonical_spelling(raw: str, expected: str) -> None:
    assert canonical_path(raw, ROOT_KEY) == expected


@settings(max_examples=200, deadline=None)
@given(RELATIVE_PATHS)
def test_every_spelling_of_a_file_has_one_canonical_path(relative: str) -> None:
    assert {canonical_path(s, ROOT_KEY) for s in spellings(relative)} == {relative}


@settings(max_examples=200, deadline=None)
@given(RELATIVE_PATHS.filter(lambda p: "." not in p.split("/") and ".." not in p.split("/")))
def test_vacuum_resolves_paths_as_reconciliation_keys_them(relative: str) -> None:
    """VACUUM (cleanup_rules.resolve_path) decodes the same way: the file it
    protects is the file reconciliation keeps."""
    root = TableRoot(ROOT)
    for raw in spellings(relative):
        resolved = resolve_path(raw, root).relative
        if resolved is not None and "//" not in relative:
            assert resolved == canonical_path(raw, ROOT_KEY)


@settings(max_examples=100, deadline=None)
@given(RELATIVE_PATHS, st.data())
def test_reconciliation_treats_every_spelling_as_one_file(
    relative: str, data: st.DataObject
) -> None:
    forms = spellings(relative)
    added = data.draw(st.sampled_from(forms))
    removed = data.draw(st.sampled_from(forms))
    readded = data.draw(st.sampled_from(forms))
    base = TableState(table_root=ROOT_KEY)
    state = apply_commits(base, [(0, [add(added)]), (1, [remove(removed)])])
    assert state.adds.num_rows == 0 and state.removes.num_rows == 1
    state = apply_commits(state, [(2, [add(readded)])])
    assert state.adds.column("path").to_pylist() == [readded]
    assert state.removes.num_rows == 0
    # all at once equals one at a time
    at_once = apply_commits(base, [(0, [add(added)]), (1, [remove(removed)]), (2, [add(readded)])])
    assert at_once.adds.column("path").to_pylist() == [readded]


def test_without_a_root_absolute_and_relative_stay_distinct() -> None:
    state = apply_commits(
        TableState(), [(0, [add("a.parquet")]), (1, [remove(f"{ROOT}/a.parquet")])]
    )
    assert state.adds.column("path").to_pylist() == ["a.parquet"]
    # decoding does not need the root
    state = apply_commits(state, [(2, [remove("%61.parquet")])])
    assert state.adds.num_rows == 0


def test_large_states_find_odd_spellings_through_the_path_index() -> None:
    """Past PathIndex.INDEX_MIN_ROWS the fold probes the index: rows whose
    raw path is encoded or absolute are found by canonical path there too."""
    n = 70_000
    paths = [f"part-{i}.parquet" for i in range(n)]
    paths[7] = f"file://{quote(ROOT)}/odd%20{7}.parquet"
    table = actions_to_table([add(p) for p in paths], ADD_SCHEMA)
    base = TableState(version=0, adds=table, table_root=ROOT_KEY)
    index = PathIndex.build(table, ROOT_KEY)
    assert index.rows_with_paths([], canonical={"odd 7.parquet"}) == [7]
    state = apply_commits(base, [(1, [remove("odd 7.parquet")])], keep_index=True)
    assert state.adds.num_rows == n - 1 and state.removes.num_rows == 1
    state = apply_commits(
        state, [(2, [remove("part-8.parquet"), add("%6Eew.parquet")])], keep_index=True
    )
    assert state.adds_index is not None
    state = apply_commits(state, [(3, [remove(f"{ROOT}/new.parquet")])], keep_index=True)
    assert state.adds.num_rows == n - 2


def test_checkpoint_key_strings_use_the_root_relative_spelling() -> None:
    table = pa.table({"path": ["a.parquet", "%61.parquet", f"file://{quote(ROOT)}/a.parquet"]})
    assert key_strings(table, ROOT_KEY).to_pylist() == ["a.parquet"] * 3


def _winner(*actions: AddFile | RemoveFile) -> WinningCommit:
    return WinningCommit.from_actions(1, list(actions))


def test_conflicts_compare_canonical_paths() -> None:
    read = ReadSet(read_version=0, files_read=(FileRef(path="p=a%20b/f.parquet"),))
    winner = _winner(remove(f"file://{quote(ROOT)}/p=a b/f.parquet"))
    with pytest.raises(ConcurrentDeleteReadException):
        check_conflicts(read, [], [winner], table_root=ROOT_KEY)
    with pytest.raises(ConcurrentDeleteDeleteException):
        check_conflicts(
            ReadSet(read_version=0),
            [remove("p=a b/f.parquet")],
            [_winner(remove("p=a%20b/f.parquet"))],
        )
