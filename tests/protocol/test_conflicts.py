"""Conflict detection (delta-spark's rules) and the server-side rebase.

The operation matrix follows the "Write conflicts" table of Delta's
concurrency-control documentation (docs.delta.io/latest/concurrency-control.html):
INSERT vs INSERT cannot conflict; UPDATE/DELETE/MERGE vs INSERT can conflict
under Serializable, not under WriteSerializable; UPDATE/DELETE/MERGE vs
UPDATE/DELETE/MERGE, OPTIMIZE vs UPDATE/DELETE/MERGE and OPTIMIZE vs
OPTIMIZE can conflict under both; OPTIMIZE vs INSERT cannot. "Can conflict"
means "when they touch the same files": each pair is run on the same
partition (expected outcome below) and on disjoint partitions (never).
Which exception is raised follows delta-spark's check order (appends before
deletes), with one documented raydelta difference: ``dataChange=false`` adds
(compaction output) are not counted as appends.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
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
from raydelta.protocol.conflicts import check_conflicts, effective_isolation_level
from raydelta.protocol.errors import (
    ConcurrentAppendException,
    ConcurrentDeleteDeleteException,
    ConcurrentDeleteReadException,
    ConcurrentTransactionException,
    DeltaConcurrentModificationException,
    InvalidFileActionError,
    MetadataChangedException,
    ProtocolChangedException,
    UnsupportedTableFeatureException,
)
from raydelta.protocol.events import FileRef, IsolationLevel, ReadSet
from raydelta.protocol.predicates import parse_predicate
from raydelta.protocol.rebase import in_commit_timestamp, rebase, with_in_commit_timestamp
from raydelta.protocol.row_tracking import (
    ROW_TRACKING_DOMAIN,
    assign_row_tracking,
    high_water_mark_of,
    row_tracking_domain,
)
from raydelta.protocol.schema import DATE
from raydelta.protocol.table_configuration import TableConfiguration
from raydelta.protocol.winning_commits import WinningCommit

S = IsolationLevel.SERIALIZABLE
WS = IsolationLevel.WRITE_SERIALIZABLE
SI = IsolationLevel.SNAPSHOT_ISOLATION
LEVELS = [S, WS, SI]

P1, P2 = "2024-01-01", "2024-01-02"
READ_VERSION = 3


def field(name: str, type_: str, metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": name, "type": type_, "nullable": True, "metadata": metadata or {}}


def schema(*fields: dict[str, Any]) -> str:
    return json.dumps({"type": "struct", "fields": list(fields)})


SCHEMA = schema(field("date", "date"), field("value", "long"))
LEGACY = Protocol(minReaderVersion=1, minWriterVersion=2)
FEATURES = Protocol(
    minReaderVersion=3,
    minWriterVersion=7,
    readerFeatures=["deletionVectors", "columnMapping", "v2Checkpoint"],
    writerFeatures=[
        "appendOnly",
        "invariants",
        "deletionVectors",
        "columnMapping",
        "v2Checkpoint",
        "domainMetadata",
        "rowTracking",
        "inCommitTimestamp",
    ],
)
METADATA = Metadata(id="table-id", schemaString=SCHEMA, partitionColumns=["date"])
CONFIG = TableConfiguration(LEGACY, METADATA)
FEATURE_CONFIG = TableConfiguration(FEATURES, METADATA)
UNPARTITIONED = TableConfiguration(LEGACY, METADATA.model_copy(update={"partition_columns": []}))


def add(
    path: str,
    date: str | None = P1,
    *,
    data_change: bool = True,
    records: int = 10,
    base_row_id: int | None = None,
    commit_version: int | None = None,
) -> AddFile:
    return AddFile(
        path=path,
        partitionValues={"date": date},
        size=100,
        modificationTime=1,
        dataChange=data_change,
        stats=json.dumps({"numRecords": records}),
        baseRowId=base_row_id,
        defaultRowCommitVersion=commit_version,
    )


def remove(path: str, date: str | None = P1, *, data_change: bool = True) -> RemoveFile:
    return RemoveFile(
        path=path,
        partitionValues={"date": date},
        dataChange=data_change,
        deletionTimestamp=1,
        extendedFileMetadata=True,
    )


def ref(path: str, date: str = P1) -> FileRef:
    return FileRef(path=path, partition_values={"date": date})


def pred(text: str) -> Any:
    return parse_predicate(text)


def winner(version: int, *actions: Action, blind: bool | None = None, **kw: Any) -> WinningCommit:
    info = [] if blind is None else [CommitInfo(operation="W", isBlindAppend=blind)]
    return WinningCommit.from_actions(version, [*info, *actions], **kw)


def check(
    read: ReadSet,
    own: Sequence[Action],
    winners: Sequence[WinningCommit],
    config: TableConfiguration = CONFIG,
    **kw: Any,
) -> None:
    check_conflicts(read, own, winners, read_configuration=config, **kw)


def outcome(fn: Callable[[], None]) -> type[Exception] | None:
    try:
        fn()
    except DeltaConcurrentModificationException as exc:
        return type(exc)
    return None


# --- the operations of the documentation's matrix ---------------------------------------------


@dataclass(frozen=True)
class Op:
    """A transaction: what it read and what it commits."""

    read: Callable[[str, IsolationLevel], ReadSet]
    actions: Callable[[str, str], list[Action]]


def _insert_read(date: str, level: IsolationLevel) -> ReadSet:
    return ReadSet.blind_append(READ_VERSION, isolation_level=level)


def _insert_actions(date: str, tag: str) -> list[Action]:
    return [
        CommitInfo(operation="WRITE", isBlindAppend=True),
        add(f"{date}/{tag}-new.parquet", date),
    ]


def _update_read(date: str, level: IsolationLevel) -> ReadSet:
    # reads the partition, finds one matching file: date/a
    return ReadSet(
        read_version=READ_VERSION,
        predicates=(pred(f"date = '{date}'"),),
        files_read=(ref(f"{date}/a.parquet", date),),
        isolation_level=level,
    )


def _update_actions(date: str, tag: str) -> list[Action]:
    return [
        CommitInfo(operation="UPDATE", isBlindAppend=False),
        remove(f"{date}/a.parquet", date),
        add(f"{date}/{tag}-rewritten.parquet", date),
    ]


def _optimize_read(date: str, level: IsolationLevel) -> ReadSet:
    return ReadSet(
        read_version=READ_VERSION,
        predicates=(pred(f"date = '{date}'"),),
        files_read=(ref(f"{date}/a.parquet", date), ref(f"{date}/b.parquet", date)),
        isolation_level=level,
    )


def _optimize_actions(date: str, tag: str) -> list[Action]:
    return [
        CommitInfo(operation="OPTIMIZE", isBlindAppend=False),
        remove(f"{date}/a.parquet", date, data_change=False),
        remove(f"{date}/b.parquet", date, data_change=False),
        add(f"{date}/{tag}-compacted.parquet", date, data_change=False),
    ]


OPS = {
    "INSERT": Op(_insert_read, _insert_actions),
    "UPDATE": Op(_update_read, _update_actions),  # DELETE and MERGE have the same shape
    "OPTIMIZE": Op(_optimize_read, _optimize_actions),
}

# (current, winner) -> expected exception per isolation level (S, WS, SI), same partition.
SAME_PARTITION: dict[tuple[str, str], tuple[type[Exception] | None, ...]] = {
    ("INSERT", "INSERT"): (None, None, None),
    ("INSERT", "UPDATE"): (None, None, None),  # a blind insert read nothing
    ("INSERT", "OPTIMIZE"): (None, None, None),
    ("UPDATE", "INSERT"): (ConcurrentAppendException, None, None),
    ("UPDATE", "UPDATE"): (
        ConcurrentAppendException,
        ConcurrentAppendException,
        ConcurrentDeleteReadException,
    ),
    ("UPDATE", "OPTIMIZE"): (ConcurrentDeleteReadException,) * 3,
    ("OPTIMIZE", "INSERT"): (None, None, None),  # compaction runs at SnapshotIsolation
    ("OPTIMIZE", "UPDATE"): (ConcurrentDeleteReadException,) * 3,
    ("OPTIMIZE", "OPTIMIZE"): (ConcurrentDeleteReadException,) * 3,
}

MATRIX = [
    pytest.param(current, won, level, expected[i], id=f"{current}-after-{won}-{level.value}")
    for (current, won), expected in SAME_PARTITION.items()
    for i, level in enumerate(LEVELS)
]


@pytest.mark.parametrize(("current", "won", "level", "expected"), MATRIX)
def test_operation_matrix_same_partition(
    current: str, won: str, level: IsolationLevel, expected: type[Exception] | None
) -> None:
    mine, theirs = OPS[current], OPS[won]
    winning = winner(READ_VERSION + 1, *theirs.actions(P1, "w"))
    result = outcome(lambda: check(mine.read(P1, level), mine.actions(P1, "me"), [winning]))
    assert result is expected


@pytest.mark.parametrize(
    ("current", "won", "level"),
    [
        pytest.param(c, w, lv, id=f"{c}-after-{w}-{lv.value}")
        for c in OPS
        for w in OPS
        for lv in LEVELS
    ],
)
def test_operation_matrix_disjoint_partitions_never_conflict(
    current: str, won: str, level: IsolationLevel
) -> None:
    mine, theirs = OPS[current], OPS[won]
    winning = winner(READ_VERSION + 1, *theirs.actions(P2, "w"))
    check(mine.read(P1, level), mine.actions(P1, "me"), [winning])


# --- every conflict class x every isolation level -------------------------------------------


def _update_own() -> list[Action]:
    return _update_actions(P1, "me")


CLUSTERING_PROTOCOL = Protocol(
    minReaderVersion=1,
    minWriterVersion=7,
    writerFeatures=["appendOnly", "invariants", "domainMetadata", "clustering"],
)

# name -> (own actions, read set builder, winning actions, blind flag, expected per S/WS/SI)
CLASS_CASES: dict[str, tuple[Any, ...]] = {
    "protocol": (
        _update_own(),
        _update_read,
        [CLUSTERING_PROTOCOL],
        None,
        (ProtocolChangedException,) * 3,
    ),
    "metadata": (
        _update_own(),
        _update_read,
        [
            METADATA.model_copy(
                update={
                    "schema_string": schema(
                        field("date", "date"), field("value", "long"), field("extra", "string")
                    )
                }
            )
        ],
        None,
        (MetadataChangedException,) * 3,
    ),
    "domain": (
        [*_update_own(), DomainMetadata(domain="com.example.cursor", configuration="1")],
        _update_read,
        [DomainMetadata(domain="com.example.cursor", configuration="2")],
        None,
        (ConcurrentTransactionException,) * 3,
    ),
    "app-id": (
        _update_own(),
        lambda d, lv: _update_read(d, lv).model_copy(update={"app_ids_read": ("stream-1",)}),
        [Txn(appId="stream-1", version=8)],
        None,
        (ConcurrentTransactionException,) * 3,
    ),
    "append-from-non-blind-winner": (
        _update_own(),
        _update_read,
        [add(f"{P1}/n.parquet")],
        False,
        (ConcurrentAppendException, ConcurrentAppendException, None),
    ),
    "append-from-blind-winner": (
        _update_own(),
        _update_read,
        [add(f"{P1}/n.parquet")],
        True,
        (ConcurrentAppendException, None, None),
    ),
    "delete-read": (
        _update_own(),
        _update_read,
        [remove(f"{P1}/a.parquet")],
        False,
        (ConcurrentDeleteReadException,) * 3,
    ),
    "delete-delete": (
        [CommitInfo(operation="DELETE"), remove(f"{P1}/a.parquet")],
        lambda d, lv: ReadSet.blind_append(READ_VERSION, isolation_level=lv),
        [remove(f"{P1}/a.parquet")],
        False,
        (ConcurrentDeleteDeleteException,) * 3,
    ),
}


@pytest.mark.parametrize(
    ("case", "level"),
    [pytest.param(c, lv, id=f"{c}-{lv.value}") for c in CLASS_CASES for lv in LEVELS],
)
def test_conflict_class_by_isolation_level(case: str, level: IsolationLevel) -> None:
    own, read, winning, blind, expected = CLASS_CASES[case]
    winning_commit = winner(READ_VERSION + 1, *winning, blind=blind)
    result = outcome(lambda: check(read(P1, level), own, [winning_commit]))
    assert result is expected[LEVELS.index(level)]


# --- messages ----------------------------------------------------------------------------------


def test_messages_name_the_winning_version_and_the_file_or_partition() -> None:
    read = _update_read(P1, S)
    with pytest.raises(ConcurrentAppendException) as append:
        check(read, _update_own(), [winner(7, add(f"{P1}/n.parquet"), blind=True)])
    assert append.value.winning_version == 7
    assert "version 7" in str(append.value)
    assert "partition [date=2024-01-01]" in str(append.value)
    assert f"{P1}/n.parquet" in str(append.value)

    with pytest.raises(ConcurrentDeleteReadException) as delete_read:
        check(read, _update_own(), [winner(5, remove(f"{P1}/a.parquet"))])
    assert "version 5" in str(delete_read.value) and f"{P1}/a.parquet" in str(delete_read.value)

    with pytest.raises(ConcurrentDeleteDeleteException) as delete_delete:
        check(
            ReadSet.blind_append(3),
            [remove(f"{P1}/a.parquet")],
            [winner(4, remove(f"{P1}/a.parquet"))],
        )
    assert "version 4" in str(delete_delete.value)
    assert "date=2024-01-01" in str(delete_delete.value)

    with pytest.raises(ConcurrentTransactionException, match="'stream-1'") as txn:
        check(
            ReadSet(read_version=3, app_ids_read=("stream-1",)),
            [add("x")],
            [winner(4, Txn(appId="stream-1", version=1))],
        )
    assert txn.value.winning_version == 4


def test_the_first_conflicting_winner_is_reported_in_version_order() -> None:
    harmless = winner(4, add(f"{P2}/x.parquet", P2), blind=False)
    first = winner(5, remove(f"{P1}/a.parquet"))
    later = winner(6, add(f"{P1}/y.parquet"), blind=False)
    with pytest.raises(DeltaConcurrentModificationException) as caught:
        check(_update_read(P1, S), _update_own(), [later, first, harmless])
    assert caught.value.winning_version == 5
    assert isinstance(caught.value, ConcurrentDeleteReadException)


# --- appends: what "should have been read" means ---------------------------------------------


def test_whole_table_read_conflicts_with_any_add_and_any_remove() -> None:
    read = ReadSet.whole_table(3, isolation_level=S)
    with pytest.raises(ConcurrentAppendException):
        check(read, _update_own(), [winner(4, add(f"{P2}/x.parquet", P2), blind=True)])
    with pytest.raises(ConcurrentDeleteReadException):
        check(read, _update_own(), [winner(4, remove(f"{P2}/z.parquet", P2, data_change=False))])


def test_unpartitioned_table_any_read_predicate_conflicts_with_any_add() -> None:
    read = ReadSet(read_version=3, predicates=(pred("value > 5"),), isolation_level=WS)
    own: list[Action] = [remove("a.parquet", None), add("b.parquet", None)]
    with pytest.raises(ConcurrentAppendException):
        check(read, own, [winner(4, add("c.parquet", None), blind=False)], config=UNPARTITIONED)
    check(read, own, [winner(4, add("c.parquet", None), blind=True)], config=UNPARTITIONED)


def test_predicate_on_a_data_column_is_conservative_but_partitions_still_prune() -> None:
    own = _update_own()
    data_only = ReadSet(read_version=3, predicates=(pred("value > 5"),), isolation_level=S)
    with pytest.raises(ConcurrentAppendException):
        check(data_only, own, [winner(4, add(f"{P2}/x.parquet", P2), blind=True)])
    pruned = ReadSet(
        read_version=3, predicates=(pred(f"date = '{P1}' AND value > 5"),), isolation_level=S
    )
    check(pruned, own, [winner(4, add(f"{P2}/x.parquet", P2), blind=True)])
    with pytest.raises(ConcurrentAppendException):
        check(pruned, own, [winner(4, add(f"{P1}/x.parquet"), blind=True)])


def test_typed_partition_predicates_decide_appends() -> None:
    int_meta = Metadata(
        id="t", schemaString=schema(field("p", "long"), field("v", "long")), partitionColumns=["p"]
    )
    config = TableConfiguration(LEGACY, int_meta)
    read = ReadSet(read_version=3, predicates=(pred("p > 9"),), isolation_level=S)
    own = [remove("a", None)]

    def add_p(value: str) -> AddFile:
        return AddFile(
            path=f"p={value}/f", partitionValues={"p": value}, size=1, modificationTime=1
        )

    with pytest.raises(ConcurrentAppendException):  # 10 > 9 as integers
        check(read, own, [winner(4, add_p("10"), blind=True)], config=config)
    check(read, own, [winner(4, add_p("9"), blind=True)], config=config)
    check(read, own, [winner(4, add_p(""), blind=True)], config=config)  # null partition


def test_files_read_without_predicates_treat_any_add_as_read() -> None:
    read = ReadSet(read_version=3, files_read=(ref(f"{P1}/a.parquet"),), isolation_level=WS)
    with pytest.raises(ConcurrentAppendException):
        check(read, _update_own(), [winner(4, add(f"{P2}/x.parquet", P2), blind=False)])


def test_read_nothing_never_conflicts_on_data() -> None:
    read = ReadSet.blind_append(3, isolation_level=S)
    own = _insert_actions(P1, "me")
    busy = winner(4, remove(f"{P1}/a.parquet"), add(f"{P1}/b.parquet"), blind=False)
    check(read, own, [busy])


def test_rearranging_adds_are_not_appends() -> None:
    # raydelta difference from delta-spark: a dataChange=false add alone (a stats
    # recommit) does not make a concurrent reader conflict.
    read = _update_read(P1, S)
    check(read, _update_own(), [winner(4, add(f"{P1}/a.parquet", data_change=False))])


def test_write_serializable_counts_blind_appends_when_this_commit_changes_metadata() -> None:
    read = _update_read(P1, WS)
    own = [*_update_own(), METADATA.model_copy(update={"description": "new"})]
    with pytest.raises(ConcurrentAppendException):
        check(read, own, [winner(4, add(f"{P1}/n.parquet"), blind=True)])


def test_blind_append_is_derived_when_commit_info_is_silent() -> None:
    read = _update_read(P1, WS)
    # no commitInfo: only data-changing adds -> blind -> no conflict under WS
    check(read, _update_own(), [WinningCommit.from_actions(4, [add(f"{P1}/n.parquet")])])
    # commitInfo says not blind: conflict
    with pytest.raises(ConcurrentAppendException):
        check(read, _update_own(), [winner(4, add(f"{P1}/n.parquet"), blind=False)])


# --- deletes ----------------------------------------------------------------------------------


def test_delete_read_by_predicate_when_no_files_were_recorded() -> None:
    read = ReadSet(read_version=3, predicates=(pred(f"date = '{P1}'"),), isolation_level=SI)
    own: list[Action] = [CommitInfo(), add(f"{P1}/n.parquet")]
    with pytest.raises(ConcurrentDeleteReadException):
        check(read, own, [winner(4, remove(f"{P1}/a.parquet"))])
    check(read, own, [winner(4, remove(f"{P2}/a.parquet", P2))])
    # compaction in the read partition rearranges without changing data
    check(read, own, [winner(4, remove(f"{P1}/a.parquet", data_change=False))])


def test_delete_read_matches_paths_not_partitions_when_files_were_recorded() -> None:
    read = _update_read(P1, S)
    check(read, _update_own(), [winner(4, remove(f"{P1}/other.parquet"))])


def test_removing_different_files_in_the_same_partition_does_not_conflict() -> None:
    read = ReadSet.blind_append(3)
    check(read, [remove(f"{P1}/a.parquet")], [winner(4, remove(f"{P1}/b.parquet"))])


# --- domains and app ids --------------------------------------------------------------------


def test_domains_and_app_ids() -> None:
    read = ReadSet(read_version=3, app_ids_read=("a1",), domains_read=("com.x",))
    own: list[Action] = [
        add("f"),
        Txn(appId="mine", version=1),
        DomainMetadata(domain="com.y", configuration="{}"),
    ]
    config = FEATURE_CONFIG
    # unrelated domain / app id: fine; both bump the row-id high-water mark: fine
    check(
        read,
        [*own, row_tracking_domain(10)],
        [
            winner(
                4,
                Txn(appId="other", version=2),
                DomainMetadata(domain="com.z", configuration="{}"),
                row_tracking_domain(20),
            )
        ],
        config=config,
    )
    with pytest.raises(ConcurrentTransactionException, match=r"'com\.x'"):
        check(
            read,
            own,
            [winner(4, DomainMetadata(domain="com.x", configuration="{}"))],
            config=config,
        )
    with pytest.raises(ConcurrentTransactionException, match=r"'com\.y'"):
        check(
            read,
            own,
            [winner(4, DomainMetadata(domain="com.y", configuration="{}"))],
            config=config,
        )
    with pytest.raises(ConcurrentTransactionException, match="mine"):
        check(read, own, [winner(4, Txn(appId="mine", version=2))], config=config)


# --- protocol changes -------------------------------------------------------------------------


def test_protocol_upgrades_that_a_rebase_absorbs_pass() -> None:
    upgraded = FEATURES.model_copy(
        update={
            "writer_features": [*(FEATURES.writer_features or []), "vacuumProtocolCheck"],
            "reader_features": [*(FEATURES.reader_features or []), "vacuumProtocolCheck"],
        }
    )
    check(_update_read(P1, S), _update_own(), [winner(4, upgraded)], config=FEATURE_CONFIG)
    # legacy (1, 2) to table features listing the same features plus deletion vectors
    listed = Protocol(
        minReaderVersion=3,
        minWriterVersion=7,
        readerFeatures=["deletionVectors"],
        writerFeatures=["appendOnly", "invariants", "deletionVectors"],
    )
    check(_update_read(P1, S), _update_own(), [winner(4, listed)])


DROPPED = FEATURES.model_copy(
    update={
        "writer_features": [
            "appendOnly",
            "invariants",
            "deletionVectors",
            "columnMapping",
            "v2Checkpoint",
        ]
    }
)
WRITER_3 = LEGACY.model_copy(update={"min_writer_version": 3})


@pytest.mark.parametrize(
    ("read_config", "winning", "own_changes_protocol"),
    [
        pytest.param(CONFIG, CLUSTERING_PROTOCOL, False, id="adds-clustering"),
        pytest.param(
            CONFIG, Protocol(minReaderVersion=1, minWriterVersion=1), False, id="lowers-versions"
        ),
        pytest.param(FEATURE_CONFIG, DROPPED, False, id="drops-features"),
        pytest.param(CONFIG, WRITER_3, True, id="both-change-protocol"),
        pytest.param(None, WRITER_3, False, id="read-protocol-unknown"),
    ],
)
def test_protocol_changes_that_conflict(
    read_config: TableConfiguration | None, winning: Protocol, own_changes_protocol: bool
) -> None:
    own = _update_own()
    if own_changes_protocol:
        own.append(LEGACY.model_copy(update={"min_writer_version": 4}))
    with pytest.raises(ProtocolChangedException, match="version 4"):
        if read_config is not None:
            check(_update_read(P1, S), own, [winner(4, winning)], config=read_config)
        else:
            check_conflicts(
                _update_read(P1, S),
                own,
                [winner(4, winning)],
                partition_columns=["date"],
                column_types={"date": DATE},
            )


def test_protocol_the_engine_cannot_write_is_refused() -> None:
    unknown = Protocol(minReaderVersion=1, minWriterVersion=7, writerFeatures=["futureFeature"])
    with pytest.raises(UnsupportedTableFeatureException):
        check(_update_read(P1, S), _update_own(), [winner(4, unknown)])


# --- metadata changes ------------------------------------------------------------------------


def with_conf(**conf: str) -> Metadata:
    return METADATA.model_copy(update={"configuration": conf})


MAPPED_SCHEMA = schema(
    field(
        "date", "date", {"delta.columnMapping.id": 1, "delta.columnMapping.physicalName": "date"}
    ),
    field(
        "value", "long", {"delta.columnMapping.id": 2, "delta.columnMapping.physicalName": "value"}
    ),
)

MERGEABLE = {
    "deletion-vectors": with_conf(**{"delta.enableDeletionVectors": "true"}),
    "row-tracking": with_conf(
        **{
            "delta.enableRowTracking": "true",
            "delta.rowTracking.materializedRowIdColumnName": "_row_id_x",
            "delta.rowTracking.materializedRowCommitVersionColumnName": "_row_cv_x",
        }
    ),
    "v2-checkpoints": with_conf(**{"delta.checkpointPolicy": "v2"}),
    "in-commit-timestamps": with_conf(
        **{
            "delta.enableInCommitTimestamps": "true",
            "delta.inCommitTimestampEnablementVersion": "4",
            "delta.inCommitTimestampEnablementTimestamp": "1700000000000",
        }
    ),
    "column-mapping-name": METADATA.model_copy(
        update={
            "schema_string": MAPPED_SCHEMA,
            "configuration": {
                "delta.columnMapping.mode": "name",
                "delta.columnMapping.maxColumnId": "2",
            },
        }
    ),
    "same-metadata-recommitted": METADATA,
}


@pytest.mark.parametrize("name", list(MERGEABLE))
def test_allow_listed_metadata_changes_merge(name: str) -> None:
    check(_update_read(P1, S), _update_own(), [winner(4, MERGEABLE[name])], config=FEATURE_CONFIG)


@pytest.mark.parametrize("name", [n for n in MERGEABLE if n != "same-metadata-recommitted"])
def test_allow_listed_changes_conflict_when_this_commit_changes_metadata(name: str) -> None:
    own = [*_update_own(), METADATA.model_copy(update={"description": "mine"})]
    with pytest.raises(MetadataChangedException, match="version 4"):
        check(_update_read(P1, S), own, [winner(4, MERGEABLE[name])], config=FEATURE_CONFIG)


ICT_ON = {
    "delta.enableInCommitTimestamps": "true",
    "delta.inCommitTimestampEnablementVersion": "2",
    "delta.inCommitTimestampEnablementTimestamp": "5",
}

UNMERGEABLE = {
    "disable-deletion-vectors": (METADATA, with_conf(**{"delta.enableDeletionVectors": "false"})),
    "other-property": (METADATA, with_conf(**{"delta.appendOnly": "true"})),
    "remove-property": (with_conf(**{"delta.enableDeletionVectors": "true"}), METADATA),
    "disable-ict": (
        with_conf(**ICT_ON),
        with_conf(**{**ICT_ON, "delta.enableInCommitTimestamps": "false"}),
    ),
    "change-ict-enablement-version": (
        with_conf(**ICT_ON),
        with_conf(**{**ICT_ON, "delta.inCommitTimestampEnablementVersion": "3"}),
    ),
    "checkpoint-policy-classic": (
        with_conf(**{"delta.checkpointPolicy": "v2"}),
        with_conf(**{"delta.checkpointPolicy": "classic"}),
    ),
    "materialized-names-without-enablement": (
        METADATA,
        with_conf(**{"delta.rowTracking.materializedRowIdColumnName": "x"}),
    ),
    "column-mapping-id-mode": (
        METADATA,
        METADATA.model_copy(
            update={
                "schema_string": MAPPED_SCHEMA,
                "configuration": {"delta.columnMapping.mode": "id"},
            }
        ),
    ),
    "schema-change-with-column-mapping": (
        METADATA,
        METADATA.model_copy(
            update={
                "schema_string": schema(
                    *json.loads(MAPPED_SCHEMA)["fields"], field("extra", "long")
                ),
                "configuration": {"delta.columnMapping.mode": "name"},
            }
        ),
    ),
    "schema-change": (
        METADATA,
        METADATA.model_copy(
            update={"schema_string": schema(field("date", "date"), field("value", "string"))}
        ),
    ),
    "partition-columns": (METADATA, METADATA.model_copy(update={"partition_columns": []})),
    "table-id": (METADATA, METADATA.model_copy(update={"id": "other"})),
}


@pytest.mark.parametrize("name", list(UNMERGEABLE))
def test_metadata_changes_that_conflict(name: str) -> None:
    read_metadata, winning = UNMERGEABLE[name]
    config = TableConfiguration(FEATURES, read_metadata)
    with pytest.raises(MetadataChangedException, match="version 4"):
        check(_update_read(P1, S), _update_own(), [winner(4, winning)], config=config)


def test_feature_enablement_needs_the_feature_supported() -> None:
    for name in (
        "deletion-vectors",
        "row-tracking",
        "v2-checkpoints",
        "in-commit-timestamps",
        "column-mapping-name",
    ):
        with pytest.raises(MetadataChangedException):
            check(_update_read(P1, S), _update_own(), [winner(4, MERGEABLE[name])], config=CONFIG)


def test_feature_enabled_by_a_winner_protocol_upgrade_in_the_same_commit() -> None:
    # the winner adds deletionVectors support and turns it on at once
    upgraded = Protocol(
        minReaderVersion=3,
        minWriterVersion=7,
        readerFeatures=["deletionVectors"],
        writerFeatures=["appendOnly", "invariants", "deletionVectors"],
    )
    check(
        _update_read(P1, S),
        _update_own(),
        [winner(4, upgraded, MERGEABLE["deletion-vectors"])],
        config=CONFIG,
    )


def test_identity_only_metadata_update_is_tolerated() -> None:
    tagged = CommitInfo.model_validate(
        {"operation": "WRITE", "tags": {"delta.identity.schemaUpdate": "true"}}
    )
    changed = METADATA.model_copy(
        update={"schema_string": schema(field("date", "date"), field("value", "long", {"x": 1}))}
    )
    check(_update_read(P1, S), _update_own(), [WinningCommit.from_actions(4, [tagged, changed])])
    with pytest.raises(MetadataChangedException):
        check(
            _update_read(P1, S),
            [*_update_own(), METADATA],
            [WinningCommit.from_actions(4, [tagged, changed])],
        )


def test_unknown_read_metadata_makes_any_metadata_change_conflict() -> None:
    with pytest.raises(MetadataChangedException, match="unknown"):
        check_conflicts(
            _update_read(P1, S),
            _update_own(),
            [winner(4, MERGEABLE["deletion-vectors"])],
            partition_columns=["date"],
            column_types={"date": DATE},
        )


def test_successive_allowed_changes_compare_against_the_previous_winner() -> None:
    first = MERGEABLE["deletion-vectors"]
    second = with_conf(**{"delta.enableDeletionVectors": "true", "delta.checkpointPolicy": "v2"})
    check(
        _update_read(P1, S),
        _update_own(),
        [winner(4, first), winner(5, second)],
        config=FEATURE_CONFIG,
    )


# --- column mapping: partition values keyed by physical names -------------------------------


def test_partition_values_are_matched_by_physical_name_under_column_mapping() -> None:
    mapped = schema(
        field(
            "date",
            "date",
            {"delta.columnMapping.id": 1, "delta.columnMapping.physicalName": "col-d"},
        ),
        field(
            "value",
            "long",
            {"delta.columnMapping.id": 2, "delta.columnMapping.physicalName": "col-v"},
        ),
    )
    meta = Metadata(
        id="t",
        schemaString=mapped,
        partitionColumns=["date"],
        configuration={"delta.columnMapping.mode": "name"},
    )
    config = TableConfiguration(FEATURES, meta)

    def add_physical(path: str, date: str) -> AddFile:
        return AddFile(path=path, partitionValues={"col-d": date}, size=1, modificationTime=1)

    read = ReadSet(read_version=3, predicates=(pred(f"date = '{P1}'"),), isolation_level=S)
    own = [remove("mine", None)]
    check(read, own, [winner(4, add_physical("x", P2), blind=True)], config=config)
    with pytest.raises(ConcurrentAppendException, match=r"partition \[date=2024-01-01\]"):
        check(read, own, [winner(4, add_physical("x", P1), blind=True)], config=config)


# --- isolation downgrade ------------------------------------------------------------------------


def test_commits_changing_no_data_run_at_snapshot_isolation() -> None:
    assert effective_isolation_level(S, _optimize_actions(P1, "o")) is SI
    assert effective_isolation_level(S, [CommitInfo(), row_tracking_domain(3)]) is SI
    assert effective_isolation_level(S, _update_own()) is S
    assert effective_isolation_level(WS, [add("x", data_change=False), METADATA]) is WS
    assert effective_isolation_level(WS, [Txn(appId="a", version=1)]) is WS
    assert effective_isolation_level(SI, _update_own()) is SI


# --- winning commit summaries -------------------------------------------------------------------


def test_winning_commit_summary() -> None:
    actions: list[Action] = [
        CommitInfo(operation="MERGE", inCommitTimestamp=1234),
        METADATA,
        LEGACY,
        add("a"),
        remove("b"),
        Txn(appId="app", version=3),
        DomainMetadata(domain="com.x", configuration="{}"),
        row_tracking_domain(41),
    ]
    summary = WinningCommit.from_actions(9, actions, file_timestamp=77)
    assert summary.version == 9
    assert summary.protocol == LEGACY and summary.metadata == METADATA
    assert [a.path for a in summary.added_files] == ["a"]
    assert [r.path for r in summary.removed_files] == ["b"]
    assert summary.app_ids == {"app"}
    assert {d.domain for d in summary.domains} == {"com.x", ROW_TRACKING_DOMAIN}
    assert summary.in_commit_timestamp == 1234
    assert summary.row_id_high_water_mark == 41
    assert summary.file_timestamp == 77
    assert summary.is_blind_append is False  # it removes and changes metadata
    assert WinningCommit.from_actions(1, [add("a")]).is_blind_append is True
    assert WinningCommit.from_actions(1, [add("a", data_change=False)]).is_blind_append is False
    assert WinningCommit.from_actions(1, [LEGACY]).is_blind_append is False
    # commitInfo.isBlindAppend wins over derivation
    assert winner(1, add("a"), blind=False).is_blind_append is False
    assert winner(1, remove("a"), blind=True).is_blind_append is True
    with pytest.raises(InvalidFileActionError):
        high_water_mark_of(DomainMetadata(domain=ROW_TRACKING_DOMAIN, configuration="{}"))
    with pytest.raises(InvalidFileActionError):
        high_water_mark_of(
            DomainMetadata(domain=ROW_TRACKING_DOMAIN, configuration='{"highWaterMark": true}')
        )


# --- rebase: in-commit timestamps ------------------------------------------------------------


def test_in_commit_timestamp_is_monotonic() -> None:
    assert in_commit_timestamp(100, None) == 100
    assert in_commit_timestamp(100, 50) == 100
    assert in_commit_timestamp(100, 100) == 101
    assert in_commit_timestamp(100, 500) == 501


def test_rebase_stamps_ict_after_the_last_winner_and_puts_commit_info_first() -> None:
    own: list[Action] = [add("a"), CommitInfo(operation="WRITE", inCommitTimestamp=1)]
    winners = [
        winner(4, CommitInfo(inCommitTimestamp=900)),
        winner(5, CommitInfo(inCommitTimestamp=1000)),
    ]
    out = rebase(
        own,
        winners,
        new_version=6,
        state_high_water_mark=None,
        in_commit_timestamps_enabled=True,
        row_tracking_supported=False,
        now_ms=500,
    )
    info = out[0]
    assert isinstance(info, CommitInfo)
    assert info.in_commit_timestamp == 1001 and info.timestamp == 1001
    assert info.operation == "WRITE"
    assert out[1:] == [add("a")]
    later = rebase(
        own,
        winners,
        new_version=6,
        state_high_water_mark=None,
        in_commit_timestamps_enabled=True,
        row_tracking_supported=False,
        now_ms=5000,
    )
    assert isinstance(later[0], CommitInfo) and later[0].in_commit_timestamp == 5000


def test_rebase_creates_commit_info_and_uses_fallback_timestamps() -> None:
    out = rebase(
        [add("a")],
        [],
        new_version=4,
        state_high_water_mark=None,
        in_commit_timestamps_enabled=True,
        row_tracking_supported=False,
        now_ms=10,
        previous_commit_timestamp=20,
    )
    assert isinstance(out[0], CommitInfo) and out[0].in_commit_timestamp == 21
    # a winner without ICT (this commit enables ICT): its file time is the previous time
    no_ict = winner(4, add("b"), file_timestamp=70)
    out = rebase(
        [add("a")],
        [no_ict],
        new_version=5,
        state_high_water_mark=None,
        in_commit_timestamps_enabled=True,
        row_tracking_supported=False,
        now_ms=10,
    )
    assert isinstance(out[0], CommitInfo) and out[0].in_commit_timestamp == 71


def test_rebase_without_ict_leaves_commit_info_alone() -> None:
    own: list[Action] = [add("a"), CommitInfo(operation="WRITE")]
    out = rebase(
        own,
        [winner(4, CommitInfo(inCommitTimestamp=9))],
        new_version=5,
        state_high_water_mark=None,
        in_commit_timestamps_enabled=False,
        row_tracking_supported=False,
        now_ms=1,
    )
    assert out == own


def test_rebase_moves_this_commits_ict_enablement_to_the_new_version() -> None:
    enabling = with_conf(
        **{
            "delta.enableInCommitTimestamps": "true",
            "delta.inCommitTimestampEnablementVersion": "4",
            "delta.inCommitTimestampEnablementTimestamp": "3",
        }
    )
    out = rebase(
        [CommitInfo(), enabling],
        [winner(4, add("b"), file_timestamp=50)],
        new_version=5,
        state_high_water_mark=None,
        in_commit_timestamps_enabled=True,
        row_tracking_supported=False,
        now_ms=10,
    )
    meta = next(a for a in out if isinstance(a, Metadata))
    assert meta.configuration["delta.inCommitTimestampEnablementVersion"] == "5"
    assert meta.configuration["delta.inCommitTimestampEnablementTimestamp"] == "51"
    # provenance from an earlier version (carried by any metadata change) is kept
    carried = with_conf(
        **{
            "delta.enableInCommitTimestamps": "true",
            "delta.inCommitTimestampEnablementVersion": "2",
            "delta.inCommitTimestampEnablementTimestamp": "3",
        }
    )
    out = rebase(
        [CommitInfo(), carried],
        [winner(4, CommitInfo(inCommitTimestamp=60))],
        new_version=5,
        state_high_water_mark=None,
        in_commit_timestamps_enabled=True,
        row_tracking_supported=False,
        now_ms=10,
    )
    assert next(a for a in out if isinstance(a, Metadata)) == carried


def test_with_in_commit_timestamp_keeps_other_commit_info_fields() -> None:
    info = CommitInfo.model_validate({"operation": "X", "engineInfo": "e", "txnId": "t"})
    out = with_in_commit_timestamp([add("a"), info], 5)
    assert isinstance(out[0], CommitInfo)
    assert out[0].to_json_dict() == {
        "operation": "X",
        "engineInfo": "e",
        "txnId": "t",
        "timestamp": 5,
        "inCommitTimestamp": 5,
    }


# --- rebase: row tracking -----------------------------------------------------------------------


def _ranges(actions: Sequence[Action]) -> list[tuple[int, int]]:
    return [
        (a.base_row_id, a.base_row_id + (a.num_records or 0))
        for a in actions
        if isinstance(a, AddFile) and a.base_row_id is not None
    ]


def _hwm(actions: Sequence[Action]) -> int | None:
    found = [
        high_water_mark_of(a)
        for a in actions
        if isinstance(a, DomainMetadata) and a.domain == ROW_TRACKING_DOMAIN
    ]
    assert len(found) <= 1
    return found[0] if found else None


def test_rebase_assigns_row_ids_above_every_high_water_mark() -> None:
    # read at HWM 99; winners took ids 100..149 and 150..159
    w1 = winner(
        4, add("w1", records=50, base_row_id=100, commit_version=4), row_tracking_domain(149)
    )
    w2 = winner(
        5, add("w2", records=10, base_row_id=150, commit_version=5), row_tracking_domain(159)
    )
    own: list[Action] = [
        CommitInfo(),
        add("new1", records=5),
        add("copy", records=7, base_row_id=20, commit_version=2),  # a recommitted file
        add("new2", records=3),
        row_tracking_domain(107),  # stale: the client's own provisional mark
    ]
    out = rebase(
        own,
        [w2, w1],
        new_version=6,
        state_high_water_mark=159,
        in_commit_timestamps_enabled=False,
        row_tracking_supported=True,
        now_ms=1,
    )
    adds = {a.path: a for a in out if isinstance(a, AddFile)}
    assert (adds["new1"].base_row_id, adds["new2"].base_row_id) == (160, 165)
    assert adds["new1"].default_row_commit_version == 6
    assert adds["copy"].base_row_id == 20 and adds["copy"].default_row_commit_version == 2
    assert _hwm(out) == 167
    assert isinstance(out[0], CommitInfo) and isinstance(out[1], DomainMetadata)


def test_rebase_reassigns_ids_provisionally_assigned_at_an_earlier_attempt() -> None:
    first = assign_row_tracking([add("n", records=4)], 99, 4)
    assert _ranges(first) == [(100, 104)] and _hwm(first) == 103
    w = winner(4, add("w", records=10, base_row_id=100), row_tracking_domain(109))
    out = rebase(
        first,
        [w],
        new_version=5,
        state_high_water_mark=109,
        in_commit_timestamps_enabled=False,
        row_tracking_supported=True,
        now_ms=1,
        read_high_water_mark=99,
    )
    assert _ranges(out) == [(110, 114)] and _hwm(out) == 113
    n = next(a for a in out if isinstance(a, AddFile))
    assert n.default_row_commit_version == 5


def test_assign_row_tracking_rules() -> None:
    # ids above the mark are provisional and reassigned; copies below are kept
    out = assign_row_tracking(
        [
            add("p", records=2, base_row_id=500),
            add("c", records=2, base_row_id=1, commit_version=1),
        ],
        9,
        7,
    )
    adds = {a.path: a for a in out if isinstance(a, AddFile)}
    assert adds["p"].base_row_id == 10 and adds["c"].base_row_id == 1
    assert _hwm(out) == 11
    # a copy without a commit version (row tracking enabled since) gets this version
    out = assign_row_tracking([add("c", base_row_id=1)], 9, 7)
    assert next(a for a in out if isinstance(a, AddFile)).default_row_commit_version == 7
    # no row ids anywhere yet
    assert _ranges(assign_row_tracking([add("a", records=3)], None, 0)) == [(0, 3)]
    # nothing fresh, no domain given: no domain emitted
    assert _hwm(assign_row_tracking([add("c", base_row_id=1, commit_version=1)], 9, 7)) is None
    with pytest.raises(InvalidFileActionError, match="numRecords"):
        assign_row_tracking([AddFile(path="x", size=1, modificationTime=1)], 9, 7)


def test_rebase_without_row_tracking_leaves_files_alone() -> None:
    own: list[Action] = [add("a")]
    assert (
        rebase(
            own,
            [winner(4, row_tracking_domain(9))],
            new_version=5,
            state_high_water_mark=9,
            in_commit_timestamps_enabled=False,
            row_tracking_supported=False,
            now_ms=1,
        )
        == own
    )


def test_rebase_marks_row_tracking_not_preserved_when_a_winner_enabled_it() -> None:
    info = CommitInfo.model_validate(
        {"operation": "UPDATE", "tags": {"delta.rowTracking.preserved": "true"}}
    )
    out = rebase(
        [info, add("a", base_row_id=1, commit_version=1)],
        [winner(4, MERGEABLE["row-tracking"])],
        new_version=5,
        state_high_water_mark=9,
        in_commit_timestamps_enabled=False,
        row_tracking_supported=True,
        now_ms=1,
    )
    tags = next(a for a in out if isinstance(a, CommitInfo)).model_extra or {}
    assert tags["tags"]["delta.rowTracking.preserved"] == "false"


@settings(max_examples=200, deadline=None)
@given(
    read_hwm=st.integers(-1, 50),
    winner_sizes=st.lists(st.lists(st.integers(0, 6), max_size=3), max_size=4),
    own_files=st.lists(
        st.tuples(st.sampled_from(["fresh", "copy", "provisional"]), st.integers(0, 6)),
        max_size=6,
    ),
)
def test_rebase_never_produces_overlapping_row_ids(
    read_hwm: int, winner_sizes: list[list[int]], own_files: list[tuple[str, int]]
) -> None:
    hwm = read_hwm
    winners: list[WinningCommit] = []
    taken: list[tuple[int, int]] = []
    for i, sizes in enumerate(winner_sizes):
        version = READ_VERSION + 1 + i
        adds = []
        for j, n in enumerate(sizes):
            adds.append(add(f"w{i}-{j}", records=n, base_row_id=hwm + 1, commit_version=version))
            taken.append((hwm + 1, hwm + 1 + n))
            hwm += n
        winners.append(winner(version, *adds, row_tracking_domain(hwm)))
    own: list[Action] = [CommitInfo()]
    copies = {}
    for k, (kind, n) in enumerate(own_files):
        if kind == "fresh":
            own.append(add(f"o{k}", records=n))
        elif kind == "provisional":  # assigned at an earlier attempt, above the read mark
            own.append(add(f"o{k}", records=n, base_row_id=read_hwm + 1 + k, commit_version=4))
        elif read_hwm >= 0:
            copy = add(f"o{k}", records=n, base_row_id=read_hwm // 2, commit_version=1)
            copies[copy.path] = copy
            own.append(copy)
    new_version = READ_VERSION + 1 + len(winners)
    out = rebase(
        own,
        winners,
        new_version=new_version,
        state_high_water_mark=hwm if winners else read_hwm,
        in_commit_timestamps_enabled=False,
        row_tracking_supported=True,
        now_ms=1,
        read_high_water_mark=read_hwm,
    )

    fresh = [a for a in out if isinstance(a, AddFile) and a.path not in copies]
    ranges = sorted(
        (a.base_row_id or 0, (a.base_row_id or 0) + (a.num_records or 0)) for a in fresh
    )
    for (_, end), (start, _) in itertools.pairwise(ranges):
        assert end <= start  # own fresh ranges are disjoint
    for start, end in ranges:
        assert start > hwm  # above every mark seen
        for t_start, t_end in taken:
            assert end <= t_start or t_end <= start or start == end or t_start == t_end
    assert all(a.default_row_commit_version == new_version for a in fresh)
    for a in out:
        if isinstance(a, AddFile) and a.path in copies:
            assert a == copies[a.path]
    total = sum(a.num_records or 0 for a in fresh)
    if total:
        assert _hwm(out) == hwm + total
        assert all(end - 1 <= (_hwm(out) or 0) for _, end in ranges)
    elif hwm < 0:
        assert _hwm(out) is None  # no row id was ever assigned: no mark to record
