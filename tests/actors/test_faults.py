"""Crash the table actor at the worst moments; the history stays right.

The actor is created here with ``RAYDELTA_FAULT_FILE`` in its environment
(``actors.faults``): a point listed in that JSON file makes the actor
process exit at once, as a killed process would, the first time it is
reached (the point is struck from the file, so the restarted actor goes
on). Ray restarts the actor (``max_restarts=-1``), the restarted actor
rebuilds its state from the log, and Ray retries the call in flight
(``max_task_retries=-1``): the client's ``commit()`` still returns.

Points: ``before_put`` (checked and rebased, nothing written), ``after_put``
(the commit file is written, no reply sent), ``reload`` (while rebuilding
from the log, i.e. a crash during recovery).

Checks: the client gets a version; the log has the commit exactly once
(by ``commitInfo.txnId``) at that version; a manual retry of the same
``Transaction.commit()`` returns the same version and writes nothing;
every commit acknowledged before is still there.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from raydelta.actors.faults import FAULT_FILE_ENV, arm
from raydelta.actors.table.client import TableClient
from raydelta.actors.table.placement import dedicated_slot, host_handle, set_dedicated
from raydelta.protocol.actions import Action, AddFile, CommitInfo
from raydelta.storage.snapshot import load_snapshot
from raydelta.storage.table_location import normalize_uri

MakeAdd = Callable[..., AddFile]
LogFiles = Callable[[str], dict[str, bytes]]
LogCommits = Callable[[str], list[tuple[int, list[Action]]]]

P1 = "2024-01-01"


@dataclass
class FaultyTable:
    uri: str
    table: TableClient
    handle: Any
    fault_file: Path

    def arm(self, *points: str) -> None:
        arm(str(self.fault_file), *points)

    def armed(self) -> list[str]:
        result: list[str] = json.loads(self.fault_file.read_text())
        return result


@pytest.fixture(scope="module")
def fault_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One fault file for the module: the same ``runtime_env`` for every actor, so
    Ray sets that environment up once."""
    return tmp_path_factory.mktemp("faults") / "faults.json"


@pytest.fixture(params=[True, False], ids=["channel", "ray"])
def faulty_table(
    request: pytest.FixtureRequest, reap_actors: str, tmp_path: Path, fault_file: Path
) -> Iterator[FaultyTable]:
    """A table whose actor reads the fault file; the handle commits over the
    actor's channel or only through Ray (both must be exactly-once)."""
    uri = normalize_uri(str(tmp_path / "table"))
    arm(str(fault_file))  # nothing armed yet
    set_dedicated(uri, True)  # a host of its own, which reads the fault file
    handle = host_handle(
        dedicated_slot(uri),
        options={"runtime_env": {"env_vars": {FAULT_FILE_ENV: str(fault_file)}}},
    )
    table = TableClient.create(
        uri,
        schema=pa.schema([("date", pa.string()), ("value", pa.int64())]),
        partition_by=["date"],
        use_channel=request.param,
    )
    assert table.actor._actor_id == handle._actor_id  # open_table found ours by name
    yield FaultyTable(uri, table, handle, fault_file)


def txn_versions(commits: list[tuple[int, list[Action]]]) -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    for version, actions in commits:
        info = actions[0]
        if isinstance(info, CommitInfo) and info.txn_id:
            found.setdefault(info.txn_id, []).append(version)
    return found


def acknowledge_some(ft: FaultyTable, make_add: MakeAdd, count: int) -> dict[str, int]:
    acknowledged = {}
    for i in range(count):
        txn = ft.table.transaction().add(make_add(f"date={P1}/before-{i}.parquet"))
        acknowledged[txn.txn_id] = txn.commit()
    return acknowledged


def check_history(ft: FaultyTable, log_commits: LogCommits, acknowledged: dict[str, int]) -> None:
    commits = log_commits(ft.uri)
    assert [v for v, _ in commits] == list(range(len(commits)))
    found = txn_versions(commits)
    for txn_id, version in acknowledged.items():
        assert found.get(txn_id) == [version], (
            f"{txn_id}: acknowledged {version}, log {found.get(txn_id)}"
        )
    assert all(len(v) == 1 for v in found.values())
    snap = load_snapshot(ft.uri)
    assert snap.version == commits[-1][0] == ft.table.version()
    assert ft.table.snapshot().num_files == snap.num_files


@pytest.mark.parametrize(
    "points",
    [
        pytest.param(("before_put",), id="before-put"),
        pytest.param(("after_put",), id="after-put-before-reply"),
        pytest.param(("after_put", "reload"), id="after-put-then-during-recovery"),
    ],
)
def test_a_crash_during_a_commit_is_exactly_once(
    points: tuple[str, ...],
    faulty_table: FaultyTable,
    make_add: MakeAdd,
    log_files: LogFiles,
    log_commits: LogCommits,
) -> None:
    ft = faulty_table
    acknowledged = acknowledge_some(ft, make_add, 3)
    ft.arm(*points)
    txn = ft.table.transaction().add(make_add(f"date={P1}/during-crash.parquet"))
    version = txn.commit()
    assert ft.armed() == [], "the actor did not reach the armed points"
    assert version == 4
    assert txn.committed is not None
    if "after_put" in points:
        # Ray's retry found the commit already in the log: nothing was written twice
        assert txn.committed.attempts == 0
    acknowledged[txn.txn_id] = version
    check_history(ft, log_commits, acknowledged)

    before = log_files(ft.uri)
    assert txn.commit() == version  # a manual retry of the same transaction
    assert txn.committed.attempts == 0
    assert log_files(ft.uri) == before

    # the restarted actor goes on committing
    after = ft.table.transaction().add(make_add(f"date={P1}/after.parquet"))
    acknowledged[after.txn_id] = after.commit()
    assert acknowledged[after.txn_id] == version + 1
    check_history(ft, log_commits, acknowledged)
    assert {f.path for f in ft.table.snapshot().add_files()} >= {
        f"date={P1}/during-crash.parquet",
        f"date={P1}/after.parquet",
    }


def test_a_retry_after_a_crash_is_rebased_not_duplicated(
    faulty_table: FaultyTable, make_add: MakeAdd, log_commits: LogCommits
) -> None:
    """A commit that crashed after its put, retried by hand after others won: the
    retry finds its txn id and returns the old version instead of a new one."""
    ft = faulty_table
    slow = ft.table.transaction().add(make_add(f"date={P1}/slow.parquet"))
    ft.arm("after_put")
    version = slow.commit()
    others = acknowledge_some(ft, make_add, 3)
    assert slow.commit() == version
    others[slow.txn_id] = version
    check_history(ft, log_commits, others)


def wait_for(condition: Callable[[], bool], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


@pytest.mark.parametrize(
    "points",
    [
        pytest.param(("after_put", "before_put", "after_put", "reload"), id="armed-points"),
        pytest.param((), id="killed-by-ray"),
    ],
)
def test_crashes_under_concurrent_writers_lose_and_duplicate_nothing(
    points: tuple[str, ...],
    faulty_table: FaultyTable,
    make_add: MakeAdd,
    log_commits: LogCommits,
    ray_cluster: Any,
) -> None:
    ft = faulty_table
    ft.arm(*points)
    acknowledged: dict[str, int] = {}
    lock = threading.Lock()
    errors: list[BaseException] = []

    def writer(name: str) -> None:
        table = TableClient.open(ft.uri, use_channel=ft.table.use_channel)
        try:
            for i in range(8):
                txn = table.transaction().add(make_add(f"date={P1}/{name}-{i}.parquet"))
                version = txn.commit()
                with lock:
                    acknowledged[txn.txn_id] = version
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(f"w{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    if not points:
        # kill the process outright, twice, while commits are in flight
        kills = 0
        for _ in range(2):
            wait_for(lambda: len(acknowledged) >= 4)
            at_kill = len(acknowledged)
            if at_kill == 32:
                break
            ray_cluster.kill(ft.handle, no_restart=False)
            kills += 1
            wait_for(lambda at_kill=at_kill: len(acknowledged) > at_kill)  # type: ignore[misc]
        assert kills >= 1
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert ft.armed() == []
    assert len(acknowledged) == 32
    assert sorted(acknowledged.values()) == list(range(1, 33))
    check_history(ft, log_commits, acknowledged)
    assert ft.table.snapshot().num_files == 32


class _Collector:
    """An idempotent subscriber that can say how far it has heard."""

    def __init__(self) -> None:
        self.versions: list[int] = []

    def on_commit(self, event: Any) -> None:
        if not self.versions or event.version > self.versions[-1]:
            self.versions.append(event.version)

    def last_seen_version(self) -> int:
        return self.versions[-1] if self.versions else -1

    def seen(self) -> list[int]:
        return self.versions


def test_a_restarted_actor_keeps_its_subscribers_and_publishes_a_retried_commit(
    faulty_table: FaultyTable, make_add: MakeAdd, ray_cluster: Any
) -> None:
    """Subscriptions live in the GCS key-value store, and a commit whose reply
    died with the process is published when its retry is answered."""
    ft = faulty_table
    collector = ray_cluster.remote(num_cpus=0)(_Collector).remote()
    ray_cluster.get(ft.table.actor.subscribe.remote("collector", collector))
    ft.arm("after_put")
    acknowledge_some(ft, make_add, 2)  # v1 (crash after its put, retried), v2
    assert ft.armed() == []  # the crash did happen
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if ray_cluster.get(collector.seen.remote())[-1:] == [2]:
            break
        time.sleep(0.05)
    assert ray_cluster.get(collector.seen.remote()) == [1, 2]


def test_subscribers_still_hear_of_commits_after_a_restart(
    faulty_table: FaultyTable, make_add: MakeAdd, ray_cluster: Any
) -> None:
    ft = faulty_table
    collector = ray_cluster.remote(num_cpus=0)(_Collector).remote()
    ray_cluster.get(ft.table.actor.subscribe.remote("collector", collector))
    acknowledge_some(ft, make_add, 1)  # v1
    ft.arm("after_put")
    acknowledge_some(ft, make_add, 2)  # v2 (crash after its put), v3
    # v1's event may have died with the process; the restarted actor asks the
    # collector what it last saw and re-sends the rest
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if ray_cluster.get(collector.seen.remote())[-1:] == [3]:
            break
        time.sleep(0.05)
    assert ray_cluster.get(collector.seen.remote()) == [1, 2, 3]


def test_a_subscriber_without_last_seen_version_hears_the_latest_commit_again(
    faulty_table: FaultyTable, make_add: MakeAdd, ray_cluster: Any
) -> None:
    ft = faulty_table
    collector = ray_cluster.remote(num_cpus=0)(_PlainCollector).remote()
    ray_cluster.get(ft.table.actor.subscribe.remote("plain", collector))
    acknowledge_some(ft, make_add, 1)  # v1
    ft.arm("after_put")
    acknowledge_some(ft, make_add, 1)  # v2, crash after its put
    assert ft.armed() == []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and 2 not in ray_cluster.get(collector.seen.remote()):
        time.sleep(0.05)
    assert 2 in ray_cluster.get(collector.seen.remote())


class _PlainCollector:
    def __init__(self) -> None:
        self.versions: list[int] = []

    def on_commit(self, event: Any) -> None:
        self.versions.append(event.version)

    def seen(self) -> list[int]:
        return self.versions
