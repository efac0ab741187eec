"""Every conflict class x every isolation level, end to end through a ``TableActor``.

Each run seeds a table (``date``-partitioned unless said otherwise) with
three fresh files at version ``r``: ``date=P1/a``, ``date=P1/b``,
``date=P2/c``. Two transactions then open at version ``r``; the *winner*
commits first (``r + 1``), then the *loser*. The loser either commits at
``r + 2``, rebased over ``r + 1`` (the actor never hands a non-conflicting
commit back for a retry), or gets the exact delta-spark exception naming
version ``r + 1`` and the file, partition, app id or domain, and the log is
left as it was.

A table actor costs a process start, so the runs of one module share a
table per kind of table (only the winner's commit is checked against the
loser, so what earlier runs left in the table does not matter); the cases
that change the protocol or make the table append-only get fresh tables.

The expected outcomes follow Delta's "Concurrency control" documentation
(docs.delta.io/latest/concurrency-control.html) and delta-spark's
conflict checker that it describes:

- ``ConcurrentAppendException``: a concurrent operation added files to a
  partition the transaction read (anywhere, for an unpartitioned table or a
  whole-table read). Under ``WriteSerializable`` files added by *blind*
  appends (that read nothing) conflict with no operation; under
  ``Serializable`` they do; ``SnapshotIsolation`` (delta-spark's level for
  commits that change no data) ignores concurrent appends.
- ``ConcurrentDeleteReadException``: a concurrent operation deleted a file
  the transaction read, at every level.
- ``ConcurrentDeleteDeleteException``: a concurrent operation deleted a file
  the transaction deletes too, at every level.
- ``MetadataChangedException``: a concurrent metadata change, at every level
  (except the property enablements delta-spark merges, e.g. turning on
  deletion vectors on a table that supports them).
- ``ConcurrentTransactionException``: a concurrent commit set the version
  of an app id the transaction read (the same streaming query twice), or
  wrote the same metadata domain.
- ``ProtocolChangedException``: both commits change the protocol (an upgrade
  that only adds a feature the loser need not act on is absorbed).

The checks run in that order (protocol, metadata, domains, app ids, appends,
delete/read, delete/delete): a case is built so that exactly one applies.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pytest

from raydelta.actors.table.client import TableClient
from raydelta.actors.table.transaction import Transaction
from raydelta.protocol.actions import Action, AddFile, CommitInfo, Metadata, Protocol, RemoveFile
from raydelta.protocol.errors import (
    ConcurrentAppendException,
    ConcurrentDeleteDeleteException,
    ConcurrentDeleteReadException,
    ConcurrentTransactionException,
    DeltaConcurrentModificationException,
    MetadataChangedException,
    ProtocolChangedException,
)
from raydelta.protocol.events import IsolationLevel
from raydelta.protocol.table_features import upgrade_protocol

NewTable = Callable[..., tuple[str, TableClient]]
NewTables = Callable[..., list[tuple[str, TableClient]]]
MakeAdd = Callable[..., AddFile]
LogFiles = Callable[[str], dict[str, bytes]]
LogCommits = Callable[[str], list[tuple[int, list[Action]]]]

S = IsolationLevel.SERIALIZABLE
WS = IsolationLevel.WRITE_SERIALIZABLE
SI = IsolationLevel.SNAPSHOT_ISOLATION
LEVELS = (S, WS, SI)

P1, P2 = "2024-01-01", "2024-01-02"
A, B, C = "a", "b", "c"  # the seeded files of a run (see seed_path)
LEGACY = Protocol(minReaderVersion=1, minWriterVersion=2)
DOMAINS = upgrade_protocol(LEGACY, writer_features=["domainMetadata"])
DV_SUPPORTED = upgrade_protocol(
    LEGACY, reader_features=["deletionVectors"], writer_features=["deletionVectors"]
)

Outcome = type[DeltaConcurrentModificationException] | None
Build = Callable[["Ctx"], object]


def seed_path(run: str, name: str, partitioned: bool = True) -> str:
    """Path of seeded file ``name`` of one run (``a``, ``b`` in P1; ``c`` in P2)."""
    if not partitioned:
        return f"{run}-{name}.parquet"
    return f"date={P2 if name == C else P1}/{run}-{name}.parquet"


@dataclass
class Ctx:
    """One side of a run: its transaction and the run's seeded files.

    Names of files, app ids, domains and properties are prefixed with the run
    tag, so runs sharing a table never see each other's.
    """

    txn: Transaction
    files: dict[str, AddFile]  # by seed name: "a", "b", "c"
    make_add: MakeAdd
    partitioned: bool
    run: str

    def name(self, base: str) -> str:
        return f"{self.run}-{base}"

    def add(self, base: str, date: str = P1, **kw: Any) -> None:
        if self.partitioned:
            self.txn.add(self.make_add(f"date={date}/{self.name(base)}", date, **kw))
        else:
            self.txn.add(self.make_add(self.name(base), partitioned=False, **kw))

    # the shapes of delta-spark operations, as read set + actions

    def blind_append(self, tag: str, date: str = P1) -> None:
        """INSERT: reads nothing, adds a file."""
        self.add(f"{tag}-insert.parquet", date)

    def update(self, tag: str, seed: str, date: str = P1) -> None:
        """UPDATE/DELETE/MERGE of one file: reads its partition (a data predicate on
        an unpartitioned table) and the file, removes it, adds the rewritten rows."""
        self.txn.read({"date": date} if self.partitioned else "value > 5")
        self.txn.read_files([self.files[seed]]).remove(self.files[seed])
        self.add(f"{tag}-rewritten.parquet", date)

    def delete(self, seed: str, date: str = P1) -> None:
        """DELETE of a whole file: reads it, removes it."""
        self.txn.read({"date": date}).read_files([self.files[seed]]).remove(self.files[seed])

    def insert_select(self, tag: str, date: str = P1, source: str = B) -> None:
        """INSERT ... SELECT: reads a partition, adds a file (not a blind append)."""
        self.txn.read({"date": date}).read_files([self.files[source]])
        self.add(f"{tag}-insert-select.parquet", date)

    def compaction(self) -> None:
        """OPTIMIZE of P1: reads a and b, rewrites them with dataChange=false."""
        a, b = self.files[A], self.files[B]
        self.txn.read({"date": P1}).read_files([a, b])
        self.txn.remove(a, data_change=False).remove(b, data_change=False)
        self.add("compacted.parquet", dataChange=False, records=20)

    def set_property(self, key: str, value: str) -> None:
        self.txn.set_metadata(properties={key: value})

    def set_app(self, app: str) -> None:
        self.txn.set_app_version(self.name(app), 0)

    def read_app(self, app: str) -> None:
        assert self.txn.app_version(self.name(app)) is None

    def set_domain(self, domain: str, value: str) -> None:
        self.txn.set_domain(f"com.example.{self.name(domain)}", value)

    def read_domain(self, domain: str) -> None:
        assert self.txn.domain(f"com.example.{self.name(domain)}") is None


@dataclass(frozen=True)
class Case:
    winner: Build
    loser: Build
    expected: tuple[Outcome, Outcome, Outcome]  # (Serializable, WriteSerializable, Snapshot)
    needles: tuple[str, ...] = ()
    """What a conflict message must name besides the winning version, formatted
    with ``run`` (the run tag) and ``a`` (the path of seeded file a)."""
    table: dict[str, Any] = field(default_factory=dict)
    fresh: bool = False
    """Needs a table of its own per run (it changes the protocol or appendOnly)."""


def _both(*builds: Build) -> Build:
    def build(ctx: Ctx) -> None:
        for step in builds:
            step(ctx)

    return build


UNPARTITIONED = {"partition_by": [], "schema": pa.schema([("value", pa.int64())])}

CONFLICTS: dict[str, Case] = {
    "protocol-change": Case(
        winner=lambda c: c.txn.upgrade_protocol(
            reader_features=["deletionVectors"], writer_features=["deletionVectors"]
        ),
        loser=_both(
            lambda c: c.txn.upgrade_protocol(writer_features=["changeDataFeed"]),
            lambda c: c.blind_append("loser"),
        ),
        expected=(ProtocolChangedException,) * 3,
        needles=("protocol",),
        fresh=True,
    ),
    "metadata-change": Case(
        winner=lambda c: c.set_property(c.name("owner"), "team-b"),
        loser=lambda c: c.blind_append("loser"),
        expected=(MetadataChangedException,) * 3,
        needles=("{run}-owner",),
    ),
    "metadata-change-to-append-only-before-a-delete": Case(
        # the delete was valid at its read version: a conflict, not a rejected request
        winner=lambda c: c.set_property("delta.appendOnly", "true"),
        loser=lambda c: c.delete(A),
        expected=(MetadataChangedException,) * 3,
        needles=("delta.appendOnly",),
        fresh=True,
    ),
    "both-change-metadata": Case(
        winner=lambda c: c.set_property(c.name("one"), "1"),
        loser=lambda c: c.set_property(c.name("two"), "2"),
        expected=(MetadataChangedException,) * 3,
    ),
    "app-id-read-by-the-loser": Case(
        winner=_both(lambda c: c.set_app("stream"), lambda c: c.blind_append("winner")),
        loser=_both(lambda c: c.read_app("stream"), lambda c: c.blind_append("loser")),
        expected=(ConcurrentTransactionException,) * 3,
        needles=("{run}-stream",),
    ),
    "app-id-written-by-both": Case(
        winner=_both(lambda c: c.set_app("stream"), lambda c: c.blind_append("winner")),
        loser=_both(lambda c: c.set_app("stream"), lambda c: c.blind_append("loser")),
        expected=(ConcurrentTransactionException,) * 3,
        needles=("{run}-stream",),
    ),
    "same-domain-written-by-both": Case(
        winner=lambda c: c.set_domain("cursor", '{"offset":1}'),
        loser=_both(
            lambda c: c.set_domain("cursor", '{"offset":2}'), lambda c: c.blind_append("loser")
        ),
        expected=(ConcurrentTransactionException,) * 3,
        needles=("com.example.{run}-cursor",),
        table={"protocol": DOMAINS},
    ),
    "domain-read-by-the-loser": Case(
        winner=lambda c: c.set_domain("cursor", '{"offset":1}'),
        loser=_both(lambda c: c.read_domain("cursor"), lambda c: c.blind_append("loser")),
        expected=(ConcurrentTransactionException,) * 3,
        needles=("com.example.{run}-cursor",),
        table={"protocol": DOMAINS},
    ),
    "blind-append-into-a-read-partition": Case(
        winner=lambda c: c.blind_append("winner", P1),
        loser=lambda c: c.update("loser", A),
        expected=(ConcurrentAppendException, None, None),
        needles=("{run}-winner-insert.parquet", f"date={P1}"),
    ),
    "non-blind-append-into-a-read-partition": Case(
        winner=lambda c: c.insert_select("winner", P1),
        loser=lambda c: c.update("loser", A),
        expected=(ConcurrentAppendException, ConcurrentAppendException, None),
        needles=("{run}-winner-insert-select.parquet", f"date={P1}"),
    ),
    "blind-append-after-a-whole-table-read": Case(
        winner=lambda c: c.blind_append("winner", P2),
        loser=_both(lambda c: c.txn.read_whole_table(), lambda c: c.blind_append("summary")),
        expected=(ConcurrentAppendException, None, None),
        needles=("{run}-winner-insert.parquet",),
    ),
    "non-blind-append-after-a-whole-table-read": Case(
        winner=lambda c: c.insert_select("winner", P2, source=C),
        loser=_both(lambda c: c.txn.read_whole_table(), lambda c: c.blind_append("summary")),
        expected=(ConcurrentAppendException, ConcurrentAppendException, None),
        needles=("{run}-winner-insert-select.parquet",),
    ),
    "blind-append-into-a-read-unpartitioned-table": Case(
        winner=lambda c: c.blind_append("winner"),
        loser=lambda c: c.update("loser", A),
        expected=(ConcurrentAppendException, None, None),
        needles=("{run}-winner-insert.parquet",),
        table=UNPARTITIONED,
    ),
    "non-blind-append-into-a-read-unpartitioned-table": Case(
        winner=lambda c: c.update("winner", B),
        loser=lambda c: c.update("loser", A),
        expected=(ConcurrentAppendException, ConcurrentAppendException, None),
        needles=("{run}-winner-rewritten.parquet",),
        table=UNPARTITIONED,
    ),
    "delete-of-a-read-file": Case(
        winner=lambda c: c.delete(A),
        loser=lambda c: c.update("loser", A),
        expected=(ConcurrentDeleteReadException,) * 3,
        needles=("{a}",),
    ),
    "compaction-of-a-read-file": Case(
        winner=lambda c: c.compaction(),
        loser=lambda c: c.update("loser", A),
        expected=(ConcurrentDeleteReadException,) * 3,
        needles=("{a}",),
    ),
    "delete-delete": Case(
        winner=lambda c: c.delete(A),
        loser=lambda c: c.txn.remove(c.files[A]),  # removes without having read it
        expected=(ConcurrentDeleteDeleteException,) * 3,
        needles=("{a}", f"date={P1}"),
    ),
}

NON_CONFLICTS: dict[str, Case] = {
    "updates-of-disjoint-partitions": Case(
        winner=lambda c: c.update("winner", C, P2),
        loser=lambda c: c.update("loser", A, P1),
        expected=(None, None, None),
    ),
    "deletes-of-different-files-of-one-partition": Case(
        winner=lambda c: c.delete(B),
        loser=lambda c: c.delete(A),
        expected=(None, None, None),
    ),
    "two-blind-appends-into-one-partition": Case(
        winner=lambda c: c.blind_append("winner"),
        loser=lambda c: c.blind_append("loser"),
        expected=(None, None, None),
    ),
    "blind-append-after-an-update-of-its-partition": Case(
        winner=lambda c: c.update("winner", A),
        loser=lambda c: c.blind_append("loser"),
        expected=(None, None, None),
    ),
    "compaction-after-an-append-into-its-partition": Case(
        winner=lambda c: c.insert_select("winner", P1),
        loser=lambda c: c.compaction(),
        expected=(None, None, None),
    ),
    "different-app-ids": Case(
        winner=_both(lambda c: c.set_app("other"), lambda c: c.blind_append("winner")),
        loser=_both(
            lambda c: c.read_app("stream"),
            lambda c: c.set_app("stream"),
            lambda c: c.blind_append("loser"),
        ),
        expected=(None, None, None),
    ),
    "different-domains": Case(
        winner=lambda c: c.set_domain("one", "1"),
        loser=_both(lambda c: c.set_domain("two", "2"), lambda c: c.blind_append("loser")),
        expected=(None, None, None),
        table={"protocol": DOMAINS},
    ),
    "protocol-upgrade-absorbed-by-an-update": Case(
        winner=lambda c: c.txn.upgrade_protocol(
            reader_features=["deletionVectors"], writer_features=["deletionVectors"]
        ),
        loser=lambda c: c.update("loser", A),
        expected=(None, None, None),
        fresh=True,
    ),
    "enabling-deletion-vectors-merged-into-an-update": Case(
        winner=lambda c: c.set_property("delta.enableDeletionVectors", "true"),
        loser=lambda c: c.update("loser", A),
        expected=(None, None, None),
        table={"protocol": DV_SUPPORTED},
        fresh=True,
    ),
}


def _seed(table: TableClient, make_add: MakeAdd, partitioned: bool, run: str) -> dict[str, AddFile]:
    files = {
        name: make_add(seed_path(run, name, partitioned), P2 if name == C else P1)
        if partitioned
        else make_add(seed_path(run, name, False), partitioned=False)
        for name in (A, B, C)
    }
    table.transaction().add(*files.values()).commit(operation="SEED")
    return files


def _run(
    case: Case,
    level: IsolationLevel,
    run: str,
    uri: str,
    table: TableClient,
    make_add: MakeAdd,
    log_files: LogFiles,
    log_commits: LogCommits,
) -> None:
    partitioned = case.table.get("partition_by", ["date"]) != []
    files = _seed(table, make_add, partitioned, run)
    winner = Ctx(table.transaction(isolation_level=level), files, make_add, partitioned, run)
    loser = Ctx(table.transaction(isolation_level=level), files, make_add, partitioned, run)
    read = winner.txn.read_version
    assert loser.txn.read_version == read
    case.winner(winner)
    case.loser(loser)
    assert winner.txn.commit(operation="WINNER") == read + 1
    before = log_files(uri)
    expected = case.expected[LEVELS.index(level)]
    if expected is None:
        assert loser.txn.commit(operation="LOSER") == read + 2
        assert loser.txn.committed is not None
        assert loser.txn.committed.rebased_over == (read + 1,)
        _, actions = log_commits(uri)[read + 2]
        info = actions[0]
        assert isinstance(info, CommitInfo)
        assert info.read_version == read and info.txn_id == loser.txn.txn_id
        assert info.isolation_level == level.value and info.operation == "LOSER"
        written = {(type(a).__name__, getattr(a, "path", None)) for a in actions}
        for action in loser.txn.actions:
            assert (type(action).__name__, getattr(action, "path", None)) in written
        snap = table.snapshot()
        live = {f.path for f in snap.add_files()}
        for action in winner.txn.actions + loser.txn.actions:
            if isinstance(action, AddFile):
                assert action.path in live
            elif isinstance(action, RemoveFile):
                assert action.path not in live
        # what the winner changed in protocol or metadata survives the rebase
        for kind in (Metadata, Protocol):
            won = [a for a in winner.txn.actions if isinstance(a, kind)]
            if won and not any(isinstance(a, kind) for a in loser.txn.actions):
                assert (snap.metadata if kind is Metadata else snap.protocol) == won[0]
        return
    with pytest.raises(DeltaConcurrentModificationException) as caught:
        loser.txn.commit(operation="LOSER")
    error = caught.value
    assert type(error) is expected, f"{level.value}: {type(error).__name__}: {error}"
    assert error.winning_version == read + 1
    assert f"version {read + 1}" in str(error)
    for needle in case.needles:
        text = needle.format(run=run, a=files[A].path)
        assert text in str(error), f"{text!r} not in {error}"
    assert log_files(uri) == before
    assert table.version() == read + 1


def _tables(
    case: Case, module_table: NewTable, new_tables: NewTables
) -> list[tuple[str, TableClient]]:
    if case.fresh:
        return new_tables(len(LEVELS), **case.table)
    return [module_table(**case.table)] * len(LEVELS)


@pytest.mark.parametrize("name", list(CONFLICTS))
def test_conflict_class_at_every_isolation_level(
    name: str,
    module_table: NewTable,
    new_tables: NewTables,
    make_add: MakeAdd,
    log_files: LogFiles,
    log_commits: LogCommits,
) -> None:
    case = CONFLICTS[name]
    for level, (uri, table) in zip(LEVELS, _tables(case, module_table, new_tables), strict=True):
        run = f"{name}-{level.value}"
        _run(case, level, run, uri, table, make_add, log_files, log_commits)


@pytest.mark.parametrize("name", list(NON_CONFLICTS))
def test_non_conflicts_rebase_cleanly_at_every_isolation_level(
    name: str,
    module_table: NewTable,
    new_tables: NewTables,
    make_add: MakeAdd,
    log_files: LogFiles,
    log_commits: LogCommits,
) -> None:
    case = NON_CONFLICTS[name]
    for level, (uri, table) in zip(LEVELS, _tables(case, module_table, new_tables), strict=True):
        run = f"{name}-{level.value}"
        _run(case, level, run, uri, table, make_add, log_files, log_commits)


def test_the_first_conflicting_winner_is_named(module_table: NewTable, make_add: MakeAdd) -> None:
    """Three winners after the read version; the second is the first to conflict."""
    _, table = module_table()
    run = "first-conflicting"
    files = _seed(table, make_add, True, run)
    ctx = [Ctx(table.transaction(isolation_level=S), files, make_add, True, run) for _ in range(4)]
    loser, harmless, deleting, appending = ctx
    loser.update("loser", A)
    harmless.update("other", C, P2)
    deleting.delete(A)
    appending.blind_append("late", P1)
    read = loser.txn.read_version
    assert [t.txn.commit() for t in (harmless, deleting, appending)] == [
        read + 1,
        read + 2,
        read + 3,
    ]
    with pytest.raises(ConcurrentDeleteReadException) as caught:
        loser.txn.commit()
    assert caught.value.winning_version == read + 2
