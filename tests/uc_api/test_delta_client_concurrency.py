"""delta-storage's real UC clients and raydelta's writers on one managed table at once.

Two JVM threads each commit through their own ``UCCommitCoordinatorClient``
(delta-spark's default ``/delta/v1`` client; delta writes the staged files
and backfills), while raydelta writers append through the ``Catalog``. Then
the same under load while the HTTP server and the catalog actor are killed
and restarted. Checked: every acknowledged transaction (by its
``commitInfo.txnId``) is in the published log exactly once, versions are
contiguous, published bytes are the staged bytes, and the rows are exactly
the acknowledged ones.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest
import ray

from tests.uc_api.conftest import UCServerFixture, create_uc_table, data_file, local_path
from tests.uc_api.jvm_clients import DeltaCommitError, JvmUCClient

pytestmark = [pytest.mark.spark, pytest.mark.slow]

NAME = "main.default.events"
JVM_WRITERS = 2
RAY_WRITERS = 2


class Ledger:
    """What writers were told: row id -> txnId, and the failures they saw."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acknowledged: dict[int, str] = {}
        self.failures: Counter[str] = Counter()
        self.errors: list[BaseException] = []

    def ack(self, row: int, txn: str) -> None:
        with self.lock:
            self.acknowledged[row] = txn

    def saw(self, error: DeltaCommitError) -> None:
        with self.lock:
            kind = "conflict" if error.conflict else error.java_class
            self.failures[kind] += 1


def jvm_writer(
    spark: Any, server: UCServerFixture, info: dict[str, Any], ledger: Ledger, base: int, n: int
) -> threading.Thread:
    def run() -> None:
        try:
            client = JvmUCClient(spark, uri=server.url, token=server.admin_token, api="delta")
            table = client.table(info["storage_location"], name=("main", "default", "events"))
            for i in range(n):
                row, txn = base + i, str(uuid.uuid4())
                actions = [data_file(info["storage_location"], [row])]
                table.append(actions, txn_id=txn, on_error=ledger.saw)
                ledger.ack(row, txn)
        except BaseException as error:
            ledger.errors.append(error)

    return threading.Thread(target=run)


def ray_writer(server: UCServerFixture, ledger: Ledger, base: int, n: int) -> threading.Thread:
    def run() -> None:
        try:
            handle = server.catalog.open_table(NAME)
            for i in range(n):
                row = base + i
                handle.append(pa.table({"id": pa.array([row], pa.int64())}))
                ledger.ack(row, "")
        except BaseException as error:
            ledger.errors.append(error)

    return threading.Thread(target=run)


def check_log(server: UCServerFixture, info: dict[str, Any], ledger: Ledger) -> int:
    """Everything acknowledged is published exactly once; returns the last version."""
    total = len(ledger.acknowledged)
    assert ray.get(server.catalog.actor.wait_published.remote(NAME, total, 180.0))
    log = local_path(info["storage_location"]) / "_delta_log"
    versions = sorted(int(p.name[:20]) for p in log.glob("[0-9]*.json"))
    assert versions == list(range(total + 1))  # contiguous, one version per acknowledged txn
    rows: Counter[int] = Counter()
    txns: Counter[str] = Counter()
    staged = {p.name: p.read_bytes() for p in (log / "_staged_commits").glob("*.json")}
    for version in range(1, total + 1):
        raw = (log / f"{version:020d}.json").read_bytes()
        for line in raw.decode().splitlines():
            action = json.loads(line)
            if "commitInfo" in action:
                txns[action["commitInfo"].get("txnId", "")] += 1
            if "add" in action:
                rows[json.loads(action["add"]["stats"])["minValues"]["id"]] += 1
        engine = json.loads(raw.decode().splitlines()[0])["commitInfo"].get("engineInfo", "")
        if "jvm_clients" in engine:  # delta's staged file, published as-is
            assert raw in staged.values()
    assert dict(rows) == {row: 1 for row in ledger.acknowledged}
    jvm_txns = {t for t in ledger.acknowledged.values() if t}
    assert all(txns[t] == 1 for t in jvm_txns), txns
    data = server.catalog.open_table(NAME).to_arrow()
    assert sorted(data.column("id").to_pylist()) == sorted(ledger.acknowledged)
    return total


def test_jvm_clients_and_ray_writers_commit_exactly_once(
    spark: Any, uc_server: UCServerFixture
) -> None:
    info = create_uc_table(uc_server)
    ledger = Ledger()
    each = 6
    bases = [1000 * (w + 1) for w in range(JVM_WRITERS)]
    threads = [jvm_writer(spark, uc_server, info, ledger, base, each) for base in bases]
    threads += [ray_writer(uc_server, ledger, 100 * (w + 1), each) for w in range(RAY_WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not ledger.errors, ledger.errors
    assert len(ledger.acknowledged) == (JVM_WRITERS + RAY_WRITERS) * each
    # the only failure a JVM writer may see here is delta's conflict (a lost race)
    assert set(ledger.failures) <= {"conflict"}, ledger.failures
    check_log(uc_server, info, ledger)


def test_server_and_catalog_killed_under_load(spark: Any, uc_server: UCServerFixture) -> None:
    info = create_uc_table(uc_server)
    ledger = Ledger()
    each = 8
    bases = [1000 * (w + 1) for w in range(JVM_WRITERS)]
    threads = [jvm_writer(spark, uc_server, info, ledger, base, each) for base in bases]
    threads += [ray_writer(uc_server, ledger, 100, each)]
    for thread in threads:
        thread.start()
    # wait until the load is on, then take both down mid-commit
    deadline = time.monotonic() + 120
    while len(ledger.acknowledged) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(ledger.acknowledged) >= 3
    ray.kill(uc_server.catalog.actor, no_restart=False)  # Ray restarts it; calls in flight re-sent
    uc_server.restart_server()  # the HTTP server stopped mid-request and started again
    for thread in threads:
        thread.join()
    assert not ledger.errors, ledger.errors
    assert len(ledger.acknowledged) == (JVM_WRITERS + 1) * each
    print("failures seen by the JVM writers:", dict(ledger.failures))
    last = check_log(uc_server, info, ledger)
    # and the clients continue from there
    client = JvmUCClient(spark, uri=uc_server.url, token=uc_server.admin_token, api="delta")
    table = client.table(info["storage_location"], name=("main", "default", "events"))
    assert table.append([data_file(info["storage_location"], [99])]).version == last + 1
