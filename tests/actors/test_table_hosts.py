"""Tables as virtual actors: many tables per host, deactivation, claims, a
killed host and a frozen one, on the session's real Ray cluster.

Every table here is a real Delta table on local disk; deltalake reads them
back. A test that kills or freezes a host uses a host of its own
(``dedicated``) or kills a pooled host only after its own writers are done,
so no other test's table is hit.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import deltalake
import pytest

from raydelta.actors.table.client import TableClient, release_table
from raydelta.actors.table.host import IDLE_ENV, MEMORY_ENV
from raydelta.actors.table.placement import (
    POOL,
    dedicated_slot,
    host_handle,
    hosts_per_node,
    rendezvous,
    set_dedicated,
)
from raydelta.protocol.actions import Action, CommitInfo
from raydelta.protocol.errors import TableMovedError
from raydelta.protocol.events import CommitRequest, ReadSet

MakeAdd = Any
NewTable = Any

P1 = "2024-01-01"
DEADLINE_S = 120.0


def wait_until(predicate: Any, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def txn_versions(commits: list[tuple[int, list[Action]]]) -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    for version, actions in commits:
        for action in actions:
            if isinstance(action, CommitInfo) and action.txn_id:
                found.setdefault(action.txn_id, []).append(version)
    return found


def test_many_tables_share_the_pool_and_each_keeps_its_own_history(
    new_table: NewTable, make_add: MakeAdd, ray_cluster: Any
) -> None:
    tables = [new_table() for _ in range(12)]
    for i, (_, table) in enumerate(tables):
        table.append_files(make_add(f"date={P1}/{i}.parquet"))
    hosts = {ray_cluster.get(t.actor.status.remote())["host"] for _, t in tables}
    alive = sum(1 for n in ray_cluster.nodes() if n["Alive"])
    assert len(hosts) <= hosts_per_node() * alive  # a few processes, not one per table
    for i, (uri, table) in enumerate(tables):
        slot = rendezvous(uri, POOL.slots(refresh=True))
        assert ray_cluster.get(table.actor.status.remote())["host"] == slot.name
        assert table.version() == 1
        assert deltalake.DeltaTable(uri).version() == 1
        assert [f.path for f in table.snapshot().add_files()] == [f"date={P1}/{i}.parquet"]
    listed = set()
    for host in hosts:
        handle = ray_cluster.get_actor(host, namespace="raydelta")
        listed |= {entry["table"] for entry in ray_cluster.get(handle.status.remote())["tables"]}
    assert {uri for uri, _ in tables} <= listed


def test_a_held_lock_of_one_table_does_not_hold_up_another_on_the_same_host(
    new_table: NewTable, make_add: MakeAdd, ray_cluster: Any, tmp_path: Path
) -> None:
    """Table A's lock is held inside the host (by a call that waits for a file);
    a commit to table B on the same host completes meanwhile."""
    first_uri, first = new_table()
    slot = rendezvous(first_uri, POOL.slots(refresh=True))
    second = None
    for _ in range(200):  # a second table placed on the same host
        uri, table = new_table()
        if rendezvous(uri, POOL.slots()).name == slot.name:
            second = table
            break
    assert second is not None
    first.append_files(make_add(f"date={P1}/a.parquet"))
    second.append_files(make_add(f"date={P1}/b.parquet"))
    go = tmp_path / "go"
    held = tmp_path / "held"

    def hold_lock(hosted: Any, held_path: str, go_path: str) -> int:
        with hosted._lock:
            Path(held_path).touch()
            deadline = time.monotonic() + 120
            while not os.path.exists(go_path) and time.monotonic() < deadline:
                time.sleep(0.01)
            return int(hosted._coordinator.version)

    ref = first.actor.__ray_call__.remote(hold_lock, str(held), str(go))
    wait_until(held.exists, "table A's lock to be taken")
    assert second.append_files(make_add(f"date={P1}/b2.parquet")) == 2  # while A's lock is held
    assert not go.exists()
    go.touch()
    assert ray_cluster.get(ref) == 1


def test_an_idle_table_is_deactivated_and_its_next_call_rebuilds_it(
    reap_actors: str, make_add: MakeAdd, ray_cluster: Any, tmp_path: Path
) -> None:
    import pyarrow as pa

    uri = f"{reap_actors}/idle"
    set_dedicated(uri, True)
    host_handle(dedicated_slot(uri), options={"runtime_env": {"env_vars": {IDLE_ENV: "0.5"}}})
    table = TableClient.create(
        uri, schema=pa.schema([("date", pa.string())]), partition_by=["date"]
    )
    table.append_files(make_add(f"date={P1}/a.parquet"))
    host = table.host
    wait_until(lambda: ray_cluster.get(host.status.remote())["active"] == 0, "deactivation")
    status = ray_cluster.get(host.status.remote())
    assert status["deactivated"] >= 1 and status["inactive"] == [uri]
    other = TableClient.open(uri)
    assert other.snapshot().version == 1  # rebuilt from the log
    assert table.append_files(make_add(f"date={P1}/b.parquet")) == 2
    assert {f.path for f in other.snapshot().add_files()} == {
        f"date={P1}/a.parquet",
        f"date={P1}/b.parquet",
    }


def test_memory_pressure_deactivates_tables_and_nothing_is_lost(
    reap_actors: str, make_add: MakeAdd, ray_cluster: Any, log_commits: Any
) -> None:
    import pyarrow as pa

    uri = f"{reap_actors}/pressure"
    set_dedicated(uri, True)
    host_handle(dedicated_slot(uri), options={"runtime_env": {"env_vars": {MEMORY_ENV: "1"}}})
    table = TableClient.create(
        uri, schema=pa.schema([("date", pa.string())]), partition_by=["date"]
    )
    versions = []
    for i in range(20):
        versions.append(table.append_files(make_add(f"date={P1}/{i}.parquet")))
        time.sleep(0.1)  # the host sheds its idle tables every second
    assert ray_cluster.get(table.host.status.remote())["deactivated"] >= 1
    assert versions == list(range(1, 21))
    assert [v for v, _ in log_commits(uri)] == list(range(21))


def test_deactivation_racing_commits_and_snapshots_loses_nothing_and_serves_nothing_stale(
    new_table: NewTable, make_add: MakeAdd, ray_cluster: Any, log_commits: Any
) -> None:
    """Writers commit and readers take snapshots while the table is deactivated
    again and again at random moments: every acknowledged commit is in the log
    exactly once, at its version, and no snapshot is older than a commit
    acknowledged before it was asked for."""
    uri, _ = new_table()
    rng = random.Random(20261202)
    acked: dict[str, int] = {}
    lock = threading.Lock()
    stale: list[str] = []
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer(index: int) -> None:
        table = TableClient.open(uri, use_channel=index % 2 == 1)
        try:
            for i in range(25):
                txn = table.transaction().add(make_add(f"date={P1}/w{index}-{i}.parquet"))
                version = txn.commit()
                with lock:
                    acked[txn.txn_id] = version
        except BaseException as error:
            errors.append(error)

    def reader() -> None:
        table = TableClient.open(uri)
        try:
            while not stop.is_set():
                with lock:
                    floor = max(acked.values(), default=0)
                seen = table.snapshot().version
                if seen < floor:
                    stale.append(f"snapshot {seen} after an acknowledged {floor}")
        except BaseException as error:
            errors.append(error)

    def deactivator() -> None:
        host = TableClient.open(uri).host
        while not stop.is_set():
            time.sleep(rng.uniform(0.0, 0.05))
            ray_cluster.get(host.release.remote(uri))

    writers = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    others = [threading.Thread(target=reader), threading.Thread(target=deactivator)]
    for thread in writers + others:
        thread.start()
    for thread in writers:
        thread.join(timeout=600)
    stop.set()
    for thread in others:
        thread.join(timeout=60)
    assert errors == []
    assert stale == []
    commits = log_commits(uri)
    assert [v for v, _ in commits] == list(range(len(commits)))
    found = txn_versions(commits)
    assert len(acked) == 100
    for txn_id, version in acked.items():
        assert found.get(txn_id) == [version]
    assert deltalake.DeltaTable(uri).version() == 100


def test_a_killed_host_brings_its_tables_back_and_loses_no_commit(
    new_table: NewTable, make_add: MakeAdd, ray_cluster: Any, log_commits: Any
) -> None:
    """Writers commit to 50 tables at random; one pooled host is SIGKILLed under
    them. Ray restarts it, its tables reactivate from the log, the calls in
    flight are re-sent (exactly once by txnId); deltalake reads every table
    as we do."""
    tables = [uri for uri, _ in (new_table() for _ in range(50))]
    target = rendezvous(tables[0], POOL.slots(refresh=True))
    on_target = [uri for uri in tables if rendezvous(uri, POOL.slots()).name == target.name]
    acked: dict[str, dict[str, int]] = {uri: {} for uri in tables}
    lock = threading.Lock()
    errors: list[BaseException] = []
    progress = [0] * 4

    def writer(index: int) -> None:
        rng = random.Random(index)
        handles = {uri: TableClient.open(uri, use_channel=index % 2 == 1) for uri in tables}
        try:
            for i in range(40):
                uri = rng.choice(on_target if i % 2 == 0 else tables)
                txn = handles[uri].transaction().add(make_add(f"date={P1}/w{index}-{i}.parquet"))
                version = txn.commit()
                with lock:
                    acked[uri][txn.txn_id] = version
                progress[index] += 1
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    wait_until(lambda: min(progress) >= 5, "the writers to get going")
    host = host_handle(target)
    before = ray_cluster.get(host.status.remote())
    os.kill(before["pid"], signal.SIGKILL)
    for thread in threads:
        thread.join(timeout=600)
    assert errors == []
    after = ray_cluster.get(host.status.remote())
    assert after["pid"] != before["pid"] and after["host_incarnation"] == 2
    total = 0
    for uri in tables:
        commits = log_commits(uri)
        assert [v for v, _ in commits] == list(range(len(commits)))
        found = txn_versions(commits)
        for txn_id, version in acked[uri].items():
            assert found.get(txn_id) == [version], (uri, txn_id)
        committed = {t for t, versions in found.items() if versions != [0]}  # not the create
        assert committed == set(acked[uri])  # nothing committed twice or unacknowledged
        total += len(acked[uri])
        ours = TableClient.open(uri).snapshot()
        theirs = deltalake.DeltaTable(uri)
        assert theirs.version() == ours.version
        assert sorted(theirs.file_uris()) == sorted(
            f"{uri.removeprefix('file://')}/{f.path}" for f in ours.add_files()
        )
    assert total == 4 * 40


def test_a_frozen_host_whose_table_moved_commits_nothing_once_thawed(
    new_table: NewTable, make_add: MakeAdd, ray_cluster: Any, log_commits: Any
) -> None:
    """Split brain: the table's host is frozen (SIGSTOP), the table moves to a
    host of its own and commits there; thawed, the old host is sent a commit
    directly and serves nothing."""
    uri, table = new_table()
    table.append_files(make_add(f"date={P1}/before.parquet"))
    old_host = table.host
    old = ray_cluster.get(old_host.status.remote())
    os.kill(old["pid"], signal.SIGSTOP)
    try:
        moved = TableClient.open(uri, dedicated=True)  # claims the table: waits out the lease
        assert moved.append_files(make_add(f"date={P1}/moved.parquet")) == 2
    finally:
        os.kill(old["pid"], signal.SIGCONT)
    request = CommitRequest(
        txn_id=str(uuid.uuid4()),
        read_set=ReadSet(read_version=None),
        actions=(make_add(f"date={P1}/split-brain.parquet"),),
        commit_time_ms=int(time.time() * 1000),
    )
    with pytest.raises(TableMovedError):
        ray_cluster.get(old_host.commit.remote(uri, None, request))
    assert request.txn_id not in txn_versions(log_commits(uri))
    assert moved.version() == 2
    release_table(uri)  # back to the pool
    assert TableClient.open(uri).version() == 2
