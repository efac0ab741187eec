"""Tables on S3 (moto's server on loopback) end to end, through the actors:
create, write, time travel, V2 checkpoints with sidecars, metadata cleanup,
vacuum; concurrent writers (Ray tasks and a foreign deltalake writer); a
commit from another process seen at once; credentials never shown."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

import raydelta
from raydelta.protocol.errors import (
    InvalidArgumentError,
    UnsupportedStorageError,
    VersionNotFoundError,
)
from raydelta.protocol.file_names import LogFileKind
from raydelta.storage.cleanup.metadata import cleanup_metadata
from raydelta.storage.log.store import log_store_for

SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.string())])
DAY_MS = 24 * 3600 * 1000


def _rows(*ids: int, part: str = "a") -> pa.Table:
    return pa.table({"id": list(ids), "part": [part] * len(ids)}, schema=SCHEMA)


def _ids(table: raydelta.Table, **read: Any) -> list[int]:
    return sorted(table.to_arrow(**read).column("id").to_pylist())


@pytest.mark.slow
def test_a_table_lives_on_s3_with_deltalake_style_options(
    s3_server: Any, s3_table_uri: Callable[[], str]
) -> None:
    """The AWS_* keys crashed the TableActor's constructor; every layer (actor,
    checkpoint tasks, cleanup, data writer, scan) now reads them."""
    uri = s3_table_uri()
    options = s3_server.aws_options
    table = raydelta.create_table(
        uri,
        SCHEMA,
        partition_by=["part"],
        properties={"delta.checkpointPolicy": "v2"},
        storage_options=options,
    )
    assert table.append(_rows(1, 2)) == 1
    assert table.append(_rows(3, part="b")) == 2
    assert table.overwrite(_rows(4), where="part = 'a'") == 3
    assert _ids(table) == [3, 4]
    assert _ids(table, version=1) == [1, 2]  # time travel
    assert _ids(table, filter="part = 'b'") == [3]
    stamps = {entry.version: entry.timestamp for entry in table.history()}
    at_one = raydelta.load_snapshot(uri, timestamp=stamps[1], storage_options=options)
    assert at_one.version == 1  # time travel by timestamp, on S3's clock or the commit's

    summary = table.checkpoint(kind="v2")
    assert summary.version == 3
    store = log_store_for(uri, options)
    sidecars = store.list_dir("_sidecars")
    assert sidecars and all(f.kind is LogFileKind.SIDECAR for f in sidecars)
    assert json.loads(store.read("_last_checkpoint"))["version"] == 3
    assert table.append(_rows(5, part="b")) == 4
    snap = raydelta.load_snapshot(uri, storage_options=options)
    assert (snap.version, snap.num_files) == (4, 3)

    # Metadata cleanup three days on: commits before the checkpoint go, and so
    # does time travel to them; the checkpoint and what follows stay.
    report = cleanup_metadata(
        uri,
        retention_ms=DAY_MS,
        now_ms=int(time.time() * 1000) + 3 * DAY_MS,
        storage_options=options,
    )
    assert report.kept_checkpoint_version == 3
    remaining = {f.version for f in store.list_from(0) if f.kind is LogFileKind.COMMIT}
    assert remaining == {3, 4}
    with pytest.raises(VersionNotFoundError):
        raydelta.load_snapshot(uri, version=1, storage_options=options)
    assert _ids(table) == [3, 4, 5]

    # VACUUM deletes the file the overwrite replaced, on S3.
    fs = s3_server.filesystem()
    root = uri[len("s3://") :]
    before = set(fs.find(root + "/part=a"))
    report = table.vacuum(retention="0 hours", enforce_retention_duration=False, dry_run=False)
    assert len(report.files) == 1
    after = set(fs.find(root + "/part=a"))
    assert len(before - after) == 1 and (before - after).pop().endswith(report.files[0])
    assert _ids(table) == [3, 4, 5]


_DELTALAKE_WRITER = """
import json, sys, time, pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from deltalake.transaction import CommitProperties
uri, first, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
options = json.loads(sys.argv[4]) if len(sys.argv) > 4 else None
wait = len(sys.argv) > 5  # then: say ready, read a start time (wall clock) from stdin
acknowledged, failed = [], []
if wait:
    DeltaTable(uri, storage_options=options)  # warm: connections, the log read once
    print("ready", flush=True)
    time.sleep(max(0.0, float(sys.stdin.readline()) - time.time()))
for i in range(first, first + count):
    try:
        write_deltalake(
            uri, pa.table({"id": pa.array([i], pa.int64()), "part": ["dl"]}), mode="append",
            storage_options=options,
            commit_properties=CommitProperties(custom_metadata={"testCommitId": str(i)}),
        )
    except Exception as error:  # e.g. delta-rs's own retries exhausted: not acknowledged
        failed.append([i, f"{type(error).__name__}: {error}"])
    else:
        acknowledged.append(i)
    if wait:
        time.sleep(0.05)  # paced: a race of both sides, not one burst after the other
print(json.dumps({"acknowledged": acknowledged, "failed": failed}))
"""


class _Writer:
    """One of our writers (a Ray actor): open the table, then append from a start time."""

    def __init__(self, uri: str, options: dict[str, str]) -> None:
        self.table = raydelta.open_table(uri, storage_options=options)

    def warm_up(self, row_id: int) -> list[int]:
        """One acknowledged commit before the race (imports, connections)."""
        return [self.table.append(_rows(row_id, part="ours")), row_id]

    def run(self, start_at: float, first: int, count: int) -> list[list[int]]:
        time.sleep(max(0.0, start_at - time.time()))
        acknowledged = []
        for i in range(first, first + count):
            acknowledged.append([self.table.append(_rows(i, part="ours")), i])
            time.sleep(0.03)  # paced, so the foreign writer's commits land in between
        return acknowledged


@pytest.mark.slow
def test_ray_actors_and_a_deltalake_writer_commit_at_once_none_lost_none_twice(
    ray_cluster: Any, s3_server: Any, s3_table_uri: Callable[[], str]
) -> None:
    uri = s3_table_uri()
    options = s3_server.aws_options
    raydelta.create_table(uri, SCHEMA, partition_by=["part"], storage_options=options)
    foreign = subprocess.Popen(
        [sys.executable, "-c", _DELTALAKE_WRITER, uri, "1000", "8", json.dumps(options), "wait"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    writer_class = ray_cluster.remote(num_cpus=0, max_restarts=0)(_Writer)
    writers = [writer_class.remote(uri, options) for _ in range(2)]
    warm = ray_cluster.get([w.warm_up.remote(100 * i + 99) for i, w in enumerate(writers)])
    assert foreign.stdin is not None and foreign.stdout is not None
    assert foreign.stdout.readline().strip() == "ready"
    start_at = time.time() + 0.5  # every writer starts committing at once
    ours = [w.run.remote(start_at, first, 10) for w, first in zip(writers, (0, 100), strict=True)]
    foreign.stdin.write(f"{start_at}\n")
    foreign.stdin.flush()
    raced = [pair for result in ray_cluster.get(ours) for pair in result]
    acknowledged_ours = warm + raced
    out, _ = foreign.communicate(timeout=300)
    assert foreign.returncode == 0
    reported = json.loads(out.strip().splitlines()[-1])
    acknowledged_theirs = reported["acknowledged"]
    assert len(acknowledged_ours) == 22  # ours never fail: the actor rebases
    assert acknowledged_theirs, reported["failed"]  # the foreign writer got commits in
    assert len(acknowledged_theirs) + len(reported["failed"]) == 8

    store = log_store_for(uri, options)
    versions = [f.version for f in store.list_from(0) if f.kind is LogFileKind.COMMIT]
    # create + every acknowledged commit (a commit delta-rs gave up on is not in the log)
    assert versions == list(range(1 + 22 + len(acknowledged_theirs)))
    id_by_version: dict[int, int] = {}
    for version in versions[1:]:
        lines = [json.loads(line) for line in store.read(f"{version:020d}.json").splitlines()]
        adds = [a["add"] for a in lines if "add" in a]
        assert len(adds) == 1  # one writer's commit per version
        id_by_version[version] = json.loads(adds[0]["stats"])["minValues"]["id"]
    for version, row_id in acknowledged_ours:  # each at the version it was acknowledged with
        assert id_by_version[version] == row_id
    theirs = sorted(v for v, row_id in id_by_version.items() if row_id >= 1000)
    ours_versions = sorted(v for v, _ in raced)
    # The writers really raced: a foreign commit landed between two of ours.
    assert any(ours_versions[0] < v < ours_versions[-1] for v in theirs), (theirs, ours_versions)
    live = raydelta.open_table(uri, storage_options=options).to_arrow().column("id").to_pylist()
    expected = sorted([i for _, i in acknowledged_ours] + acknowledged_theirs)
    assert sorted(live) == expected  # every acknowledged row exactly once
    for writer in writers:
        ray_cluster.kill(writer)


def test_a_commit_from_another_process_is_seen_at_once(
    s3_server: Any, s3_table_uri: Callable[[], str]
) -> None:
    """This process keeps reading the table; another process (credentials from
    its environment, no options) commits; the next read here has it."""
    uri = s3_table_uri()
    options = {**s3_server.storage_options, "use_listings_cache": True}
    table = raydelta.create_table(uri, SCHEMA, storage_options=options)
    table.append(_rows(1))
    for _ in range(2):  # a long-lived reader: listings made, caches warm
        assert raydelta.load_snapshot(uri, storage_options=options).version == 1
    assert table.version() == 1
    env = {
        **os.environ,
        "AWS_ENDPOINT_URL": s3_server.endpoint,
        "AWS_ACCESS_KEY_ID": s3_server.storage_options["key"],
        "AWS_SECRET_ACCESS_KEY": s3_server.storage_options["secret"],
        "AWS_DEFAULT_REGION": s3_server.storage_options["client_kwargs"]["region_name"],
        "AWS_REGION": s3_server.storage_options["client_kwargs"]["region_name"],
        "AWS_ALLOW_HTTP": "true",
    }
    check = "import raydelta, sys; print(raydelta.load_snapshot(sys.argv[1]).version)"
    foreign = subprocess.run(
        [sys.executable, "-c", _DELTALAKE_WRITER, uri, "7", "1"],
        env=env,
        check=True,
        timeout=120,
        capture_output=True,
        text=True,
    )
    assert json.loads(foreign.stdout.splitlines()[-1])["acknowledged"] == [7]
    assert raydelta.load_snapshot(uri, storage_options=options).version == 2
    assert table.version() == 2
    assert _ids(table) == [1, 7]
    seen = subprocess.run(
        [sys.executable, "-c", check, uri],
        env=env,
        check=True,
        timeout=120,
        capture_output=True,
        text=True,
    )
    assert seen.stdout.strip() == "2"  # our reader with credentials from the environment


def test_storage_without_atomic_create_refuses_writes_unless_single_writer(
    s3_server: Any, s3_table_uri: Callable[[], str]
) -> None:
    uri = s3_table_uri()
    options = {**s3_server.aws_options, "conditional_put": "disabled"}
    with pytest.raises(UnsupportedStorageError, match="single_writer"):
        raydelta.create_table(uri, SCHEMA, storage_options=options)
    assert s3_server.filesystem().find(uri[len("s3://") :]) == []  # nothing written
    raydelta.release_table(uri)  # its actor was started with the refusing options
    single = {**options, "single_writer": "true"}
    table = raydelta.create_table(uri, SCHEMA, storage_options=single)
    assert table.append(_rows(1, 2)) == 1
    assert raydelta.load_snapshot(uri, storage_options=options).version == 1  # reads work


def test_credentials_are_never_shown(
    ray_cluster: Any,
    s3_server: Any,
    s3_table_uri: Callable[[], str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    uri = s3_table_uri()
    secret = s3_server.aws_options["AWS_SECRET_ACCESS_KEY"]
    caplog.set_level(logging.DEBUG, logger="raydelta")
    table = raydelta.create_table(uri, SCHEMA, storage_options=s3_server.aws_options)
    table.append(_rows(1))
    shown = [repr(table), str(table), repr(table.snapshot()), repr(table.history()), caplog.text]
    shown += [e["name"] for e in ray_cluster.util.list_named_actors(all_namespaces=True)]
    bad = {**s3_server.aws_options, "AWS_UNKNOWN_OPTION": secret}
    with pytest.raises(InvalidArgumentError) as caught:  # typed, in the caller, before any actor
        raydelta.open_table(s3_table_uri(), storage_options=bad)
    shown += [str(caught.value), repr(caught.value)]
    assert not [text for text in shown if secret in text]
