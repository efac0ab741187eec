"""A file path holding a control character is refused at the commit, table unchanged.

NUL (and the other ASCII control characters, raw or percent-encoded) in
``add.path``, ``remove.path``, ``cdc.path``, a ``p`` deletion vector's path
or a ``u`` one's random prefix: no store can hold (or portably list) such a
name and no reader can follow it, and a committed action stays in the log
for good (:mod:`raydelta.protocol.commit_paths`). Each case goes through
a real ``TableActor`` by the Table API (the ``Transaction`` builder,
``append_files``) and by the raw transaction API, and must come back as
:class:`UnsafePathError` with the ``_delta_log`` byte for byte as it was,
the same version and snapshot, deltalake reading the same table, and the
next good commit going through. (The Unity Catalog routes and staged
commits of catalog-managed tables: ``tests/uc_api/test_rest_errors.py``.)
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from deltalake import DeltaTable

from raydelta.actors.table.client import TableClient
from raydelta.protocol import z85
from raydelta.protocol.actions import Action, AddCDCFile, AddFile, RemoveFile
from raydelta.protocol.deletion_vectors import DeletionVectorDescriptor
from raydelta.protocol.errors import UnsafePathError
from raydelta.protocol.events import CommitRequest, ReadSet

NewTable = Callable[..., tuple[str, TableClient]]
MakeAdd = Callable[..., AddFile]
LogFiles = Callable[[str], dict[str, bytes]]

P1 = "2024-01-01"
DV_TABLE = {"properties": {"delta.enableDeletionVectors": "true"}}
CDF_TABLE = {"properties": {"delta.enableChangeDataFeed": "true"}}
BAD = {
    "nul": "\x00",
    "nul-encoded": "%00",
    "newline": "\n",
    "unit-separator": "\x1f",
    "delete": "\x7f",
}


def _commit_raw(table: TableClient, actions: list[Action]) -> int:
    request = CommitRequest(
        txn_id=str(uuid.uuid4()),
        read_set=ReadSet(read_version=table.version()),
        actions=tuple(actions),
        commit_time_ms=int(time.time() * 1000),
    )
    return int(table._call("commit", request).raise_if_conflict().version)


def _dv(storage_type: str, path_or_inline_dv: str) -> DeletionVectorDescriptor:
    return DeletionVectorDescriptor.model_construct(
        storage_type=storage_type,
        path_or_inline_dv=path_or_inline_dv,
        offset=1,
        size_in_bytes=34,
        cardinality=1,
    )


def _peer_state(uri: str) -> tuple[int, list[str]]:
    table = DeltaTable(uri)
    return table.version(), sorted(table.file_uris())


Actions = Callable[[str, str, MakeAdd], list[Action]]
"""(table uri, the bad character, make_add) -> the actions to commit."""

CASES: dict[str, tuple[dict[str, Any], Actions]] = {
    "add": ({}, lambda uri, c, make_add: [make_add(f"date={P1}/part{c}1.parquet")]),
    "remove": (
        {},
        lambda uri, c, make_add: [
            RemoveFile(path=f"date={P1}/gone{c}.parquet", deletionTimestamp=1)
        ],
    ),
    "cdc": (
        CDF_TABLE,
        lambda uri, c, make_add: [
            AddCDCFile(path=f"_change_data/cdc{c}.parquet", partitionValues={"date": P1}, size=1)
        ],
    ),
    "dv-absolute": (
        DV_TABLE,
        lambda uri, c, make_add: [
            make_add("with-dv.parquet").model_copy(
                update={"deletion_vector": _dv("p", f"{uri}/deletion_vector{c}.bin")}
            )
        ],
    ),
    "dv-relative-prefix": (
        DV_TABLE,
        lambda uri, c, make_add: [
            make_add("with-dv.parquet").model_copy(
                update={"deletion_vector": _dv("u", f"ab{c}" + z85.encode_uuid(uuid.uuid4()))}
            )
        ],
    ),
}

Route = Callable[[TableClient, list[Action]], int]
ROUTES: dict[str, Route] = {
    "raw": _commit_raw,
    "transaction": lambda table, actions: _through_transaction(table, actions),
}


def _through_transaction(table: TableClient, actions: list[Action]) -> int:
    txn = table.transaction()
    for action in actions:
        if isinstance(action, AddFile):
            txn.add(action)
        elif isinstance(action, RemoveFile):
            txn.remove(action)
        elif isinstance(action, AddCDCFile):
            txn.add_change_data(action)
    return txn.commit()


@pytest.mark.parametrize("route", sorted(ROUTES))
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_control_character_in_a_file_path_is_refused_table_unchanged(
    case: str, route: str, module_table: NewTable, make_add: MakeAdd, log_files: LogFiles
) -> None:
    options, build = CASES[case]
    uri, table = module_table(**options)
    before_files = log_files(uri)
    before_version = table.version()
    before_snapshot = table.snapshot()
    before_peer = _peer_state(uri)
    for name, character in BAD.items():
        actions = build(uri, character, make_add)
        with pytest.raises(UnsafePathError, match="control character"):
            ROUTES[route](table, actions)
        assert log_files(uri) == before_files, name
        assert table.version() == before_version, name
    after = table.snapshot()
    assert after.version == before_snapshot.version
    assert after.state.adds.equals(before_snapshot.state.adds)
    assert after.state.removes.equals(before_snapshot.state.removes)
    assert _peer_state(uri) == before_peer
    good = make_add(f"date={P1}/good-{uuid.uuid4().hex}.parquet")
    assert table.append_files(good) == before_version + 1


def test_append_files_refuses_a_nul_path(
    module_table: NewTable, make_add: MakeAdd, log_files: LogFiles
) -> None:
    uri, table = module_table()
    before = log_files(uri)
    with pytest.raises(UnsafePathError, match="U\\+0000"):
        table.append_files(make_add(f"date={P1}/a\x00b.parquet"))
    assert log_files(uri) == before


def test_printable_and_non_ascii_names_still_commit(new_table: NewTable, make_add: MakeAdd) -> None:
    # the refusal is the control characters only: spaces, tabs' printable
    # neighbours, escapes of printable characters and non-ASCII names commit
    uri, table = new_table()
    paths = [f"date={P1}/a b.parquet", f"date={P1}/%41~!.parquet", f"date={P1}/ünï€ode.parquet"]
    version = table.append_files(*(make_add(p) for p in paths))
    assert table.snapshot().version == version
    assert len(DeltaTable(uri).file_uris()) == len(paths)
