"""Randomized stress: many writers, one serial history, nothing lost or invented.

Clients (threads of this process *and* Ray tasks in other processes) run
random operations against one table through its actor:

- blind appends (read nothing, add files);
- deletes: choose a live file of a partition from a snapshot, open the
  transaction at that snapshot, read the partition and the file, remove it
  (and sometimes add a rewritten file), at a random isolation level;
- streaming batches: read the client's own app id and set the next batch,
  or contend with the other clients for one shared app id;
- now and then a table property change.

Meanwhile a foreign writer *process* appends with ``deltalake``
(delta-rs's own commit path) straight to the files; the table's
``delta.checkpointInterval`` is 10, so delta-rs also writes checkpoints
that the clients' snapshots then read.

Every acknowledged commit (txn id -> version) and every refused one (its
read set, its actions, the exception class and the winning version it
names) is recorded, then the history is checked from the files alone:

1. versions are contiguous ``0..N``;
2. every acknowledged commit is present exactly once, at its version, and
   no commit of ours is present that was not acknowledged; the foreign
   commits are exactly the writes deltalake reported as successful;
3. the final state from a serial replay of the log (``load_snapshot``),
   the actor's incremental snapshot and deltalake's view agree;
4. every refused commit really conflicted, and no acknowledged commit should
   have: an independent oracle, written from the documented rules for the
   operation shapes used here, finds the *first* commit after each read
   version that touches what the transaction read or wrote; for a refused
   commit it is the winning version named, with the same exception class;
   for an acknowledged one there is none before its version.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import pytest

from raydelta.actors.table.client import TableClient
from raydelta.protocol.actions import (
    Action,
    AddFile,
    CommitInfo,
    Metadata,
    Protocol,
    RemoveFile,
    Txn,
)
from raydelta.protocol.errors import DeltaConcurrentModificationException
from raydelta.protocol.events import IsolationLevel, is_append_only
from raydelta.storage.snapshot import load_snapshot

NewTable = Callable[..., tuple[str, TableClient]]
LogCommits = Callable[[str], list[tuple[int, list[Action]]]]

DATES = ("2024-01-01", "2024-01-02", "2024-01-03")
SHARED_APP = "shared-stream"
LEVELS = tuple(IsolationLevel)


@dataclass
class Record:
    """One transaction a client sent, and what became of it."""

    txn_id: str
    client: str
    kind: str
    isolation: str
    read_version: int
    read_dates: list[str] = field(default_factory=list)
    files_read: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    app_ids_read: list[str] = field(default_factory=list)
    app_ids_written: list[str] = field(default_factory=list)
    changes_metadata: bool = False
    version: int | None = None  # acknowledged
    error: str | None = None  # refused: exception class name
    winning_version: int | None = None


def _add(client: str, n: int, date: str, *, rng: random.Random) -> AddFile:
    return AddFile(
        path=f"date={date}/{client}-{n}.parquet",
        partitionValues={"date": date},
        size=rng.randint(100, 1000),
        modificationTime=int(time.time() * 1000),
        stats=json.dumps({"numRecords": rng.randint(1, 50)}),
    )


def run_client(uri: str, client: str, seed: int, operations: int) -> list[dict[str, Any]]:
    """One client's random operations; returns its records (as dicts, to cross Ray)."""
    rng = random.Random(seed)
    table = TableClient.open(uri)
    records: list[dict[str, Any]] = []
    batch = 0
    for n in range(operations):
        roll = rng.random()
        level = rng.choice(LEVELS)
        if roll < 0.30:
            txn = table.transaction(isolation_level=IsolationLevel.WRITE_SERIALIZABLE)
            record = Record(
                txn.txn_id, client, "append", txn.isolation_level.value, txn.read_version
            )
            txn.add(_add(client, n, rng.choice(DATES), rng=rng))
        elif roll < 0.68:
            snap = table.snapshot()
            date = rng.choice(DATES)
            live = [f for f in snap.add_files() if f.partition_values.get("date") == date]
            if not live:
                continue
            victim = rng.choice(sorted(live, key=lambda f: f.path)[:2])  # contend
            txn = table.transaction(isolation_level=level, snapshot=snap)
            if roll < 0.60:  # DELETE/UPDATE: reads the partition and the file
                txn.read({"date": date}).read_files([victim]).remove(victim)
                record = Record(
                    txn.txn_id,
                    client,
                    "delete",
                    level.value,
                    txn.read_version,
                    read_dates=[date],
                    files_read=[victim.path],
                    removed=[victim.path],
                )
                if rng.random() < 0.5:
                    txn.add(_add(client, n, date, rng=rng))
            else:  # a purge by path (think FSCK): removes without reading
                txn.remove(victim)
                record = Record(
                    txn.txn_id,
                    client,
                    "purge",
                    level.value,
                    txn.read_version,
                    removed=[victim.path],
                )
        elif roll < 0.95:
            txn = table.transaction(isolation_level=level)
            app = SHARED_APP if rng.random() < 0.5 else f"stream-{client}"
            done = txn.app_version(app)
            next_batch = (done + 1) if done is not None else 0
            if app != SHARED_APP:
                assert next_batch == batch, "a client's own stream lost a batch"
            txn.add(_add(client, n, rng.choice(DATES), rng=rng)).set_app_version(app, next_batch)
            record = Record(
                txn.txn_id,
                client,
                "stream",
                level.value,
                txn.read_version,
                app_ids_read=[app],
                app_ids_written=[app],
            )
        else:
            txn = table.transaction(isolation_level=level)
            txn.set_metadata(properties={f"stress.{client}": str(n)})
            record = Record(
                txn.txn_id, client, "metadata", level.value, txn.read_version, changes_metadata=True
            )
        time.sleep(rng.random() * 0.004)  # hold the transaction open a little
        try:
            record.version = txn.commit(operation=record.kind.upper())
            if record.kind == "stream" and record.app_ids_written[0] != SHARED_APP:
                batch += 1
        except DeltaConcurrentModificationException as conflict:
            record.error = type(conflict).__name__
            record.winning_version = conflict.winning_version
        records.append(asdict(record))
    return records


FOREIGN_WRITER = """
import json, sys, time
import pyarrow as pa
from deltalake import write_deltalake
path, count, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
import random
rng = random.Random(seed)
dates = {dates!r}
print(json.dumps({{"ready": True}}), flush=True)
sys.stdin.readline()  # go
for i in range(count):
    data = pa.table({{"date": [rng.choice(dates)], "value": pa.array([i], pa.int64())}})
    try:
        write_deltalake(path, data, mode="append")
        print(json.dumps({{"ok": True}}), flush=True)
    except Exception as exc:
        print(json.dumps({{"ok": False, "error": type(exc).__name__}}), flush=True)
    time.sleep(0.05 + rng.random() * 0.1)
"""


# --- the oracle -------------------------------------------------------------------------------


def _blind(actions: list[Action]) -> bool:
    info = next((a for a in actions if isinstance(a, CommitInfo)), None)
    if info is not None and info.is_blind_append is not None:
        return info.is_blind_append
    return is_append_only(actions)


def touches(record: Record, actions: list[Action]) -> str | None:
    """The exception a commit of ``actions`` forces on ``record``'s transaction, if any.

    Written from the documented rules, for the operation shapes of this test
    (no protocol changes; reads are partition equalities plus files).
    """
    if any(isinstance(a, Protocol) for a in actions):
        return "ProtocolChangedException"
    if any(isinstance(a, Metadata) for a in actions):
        return "MetadataChangedException"
    apps = {a.app_id for a in actions if isinstance(a, Txn)}
    if apps & (set(record.app_ids_read) | set(record.app_ids_written)):
        return "ConcurrentTransactionException"
    level = IsolationLevel(record.isolation)
    appends_count = level is IsolationLevel.SERIALIZABLE or (
        level is IsolationLevel.WRITE_SERIALIZABLE
        and (not _blind(actions) or record.changes_metadata)
    )
    if appends_count and record.read_dates:
        for action in actions:
            if (
                isinstance(action, AddFile)
                and action.data_change
                and action.partition_values.get("date") in record.read_dates
            ):
                return "ConcurrentAppendException"
    removed = {a.path for a in actions if isinstance(a, RemoveFile)}
    if removed & set(record.files_read):
        return "ConcurrentDeleteReadException"
    if removed & set(record.removed):
        return "ConcurrentDeleteDeleteException"
    return None


def first_conflict(record: Record, log: dict[int, list[Action]], until: int) -> tuple[int, str]:
    """The first version in ``(read_version, until)`` that touches ``record``, or (-1, "")."""
    for version in range(record.read_version + 1, until):
        found = touches(record, log[version])
        if found:
            return version, found
    return -1, ""


# --- the test ----------------------------------------------------------------------------------


def stress(
    new_table: NewTable,
    log_commits: LogCommits,
    ray_cluster: Any,
    *,
    threads: int,
    tasks: int,
    operations: int,
    foreign_writes: int,
    seed: int,
) -> None:
    uri, table = new_table(properties={"delta.checkpointInterval": "10"})
    path = uri[len("file://") :]
    seeding = table.transaction()
    for i, date in enumerate(DATES * 2):
        seeding.add(_add("seed", i, date, rng=random.Random(i)))
    seeding.commit(operation="SEED")

    foreign = subprocess.Popen(
        [
            sys.executable,
            "-c",
            FOREIGN_WRITER.format(dates=DATES),
            path,
            str(foreign_writes),
            str(seed),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert foreign.stdout is not None and foreign.stdin is not None
    assert json.loads(foreign.stdout.readline()) == {"ready": True}
    ray_cluster.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    remote_client = ray_cluster.remote(num_cpus=1, max_retries=0)(run_client)
    futures = [
        remote_client.remote(uri, f"task{i}", seed * 100 + i, operations) for i in range(tasks)
    ]
    results: dict[str, list[dict[str, Any]]] = {}
    failures: list[BaseException] = []

    def thread_main(name: str, client_seed: int) -> None:
        try:
            results[name] = run_client(uri, name, client_seed, operations)
        except BaseException as exc:  # reported below, with its traceback on stderr
            traceback.print_exc()
            failures.append(exc)

    workers = [
        threading.Thread(target=thread_main, args=(f"thread{i}", seed * 100 + 50 + i))
        for i in range(threads)
    ]
    foreign.stdin.write("go\n")
    foreign.stdin.flush()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    for i, records in enumerate(ray_cluster.get(futures)):
        results[f"task{i}"] = records
    out, err = foreign.communicate(timeout=120)
    assert not failures, failures
    assert foreign.returncode == 0, err
    foreign_results = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert len(foreign_results) == foreign_writes
    foreign_ok = sum(r["ok"] for r in foreign_results)

    records = [Record(**r) for rs in results.values() for r in rs]
    acknowledged = {r.txn_id: r for r in records if r.version is not None}
    refused = [r for r in records if r.error is not None]
    assert len(acknowledged) + len(refused) == len(records)

    # 1. contiguous versions, nothing beyond
    commits = log_commits(uri)
    last = commits[-1][0]
    assert [v for v, _ in commits] == list(range(last + 1))
    json_commits = sorted(
        name for name in log_files_names(path) if name.endswith(".json") and name[:20].isdigit()
    )
    assert len(json_commits) == last + 1
    assert table.version() == last

    # 2. exactly our acknowledged commits, each once at its version; the foreign ones
    log = dict(commits)
    ours: dict[str, list[int]] = {}
    foreign_versions = []
    for version, actions in commits:
        info = next((a for a in actions if isinstance(a, CommitInfo)), None)
        assert info is not None, f"v{version} has no commitInfo"
        if info.txn_id:
            ours.setdefault(info.txn_id, []).append(version)
        else:
            foreign_versions.append(version)
    for txn_id, versions in ours.items():
        assert len(versions) == 1, f"txn {txn_id} committed at {versions}"
    client_txns = {txn_id: v[0] for txn_id, v in ours.items() if v[0] > 1}  # after create+seed
    assert client_txns == {txn_id: r.version for txn_id, r in acknowledged.items()}
    assert len(foreign_versions) == foreign_ok

    # 3. one final state: serial replay == actor snapshot == deltalake
    replay = load_snapshot(uri)
    actor_view = table.snapshot()
    assert replay.version == actor_view.version == last
    replay_files = sorted(f.path for f in replay.add_files())
    assert sorted(f.path for f in actor_view.add_files()) == replay_files
    assert replay.txns == actor_view.txns
    assert replay.metadata == actor_view.metadata
    from deltalake import DeltaTable

    theirs = DeltaTable(path)
    assert theirs.version() == last
    their_adds = theirs.get_add_actions(flatten=True)
    their_files = sorted(str(p) for p in their_adds.column("path").to_pylist())
    assert their_files == replay_files
    # every stream's batches are 0..n-1: none lost, none written twice
    streams = {app for r in acknowledged.values() for app in r.app_ids_written}
    assert set(replay.txns) == streams
    for app, version in replay.txns.items():
        writes = [r for r in acknowledged.values() if app in r.app_ids_written]
        assert version == len(writes) - 1, f"{app}: batches were lost or repeated"

    # 4. refused commits really conflicted; acknowledged ones did not
    for record in refused:
        assert record.winning_version is not None
        assert record.read_version < record.winning_version <= last
        found = first_conflict(record, log, last + 1)
        assert found == (record.winning_version, record.error), (record, found)
    for record in acknowledged.values():
        assert record.version is not None
        assert first_conflict(record, log, record.version) == (-1, ""), record
        first = log[record.version][0]
        assert isinstance(first, CommitInfo) and first.read_version == record.read_version

    kinds = {r.kind for r in acknowledged.values()}
    assert {"append", "delete", "stream"} <= kinds
    assert refused, "the stress run produced no conflict at all"
    assert foreign_ok > 0


def log_files_names(path: str) -> list[str]:
    return os.listdir(os.path.join(path, "_delta_log"))


def test_stress_threads_tasks_and_a_foreign_writer(
    new_table: NewTable, log_commits: LogCommits, ray_cluster: Any
) -> None:
    stress(
        new_table,
        log_commits,
        ray_cluster,
        threads=3,
        tasks=2,
        operations=30,
        foreign_writes=25,
        seed=7,
    )


@pytest.mark.slow
def test_stress_long(new_table: NewTable, log_commits: LogCommits, ray_cluster: Any) -> None:
    stress(
        new_table,
        log_commits,
        ray_cluster,
        threads=4,
        tasks=2,
        operations=120,
        foreign_writes=100,
        seed=11,
    )
