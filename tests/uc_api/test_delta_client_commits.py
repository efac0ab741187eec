"""delta-storage 4.4.0's real Unity Catalog clients against raydelta's server.

Every request and every log file here is made by delta's own JVM classes
(``tests/uc_api/jvm_clients.py``): ``UCCommitCoordinatorClient`` over both REST
clients delta-spark may build (``/delta/v1``, its default, and the legacy
``/delta/preview/commits``). The server must give them what Unity Catalog
gives them: version v after v-1, a re-sent acknowledged commit answered as
done (never twice), a lost race as delta's retryable conflict, and a
published file that is byte for byte what delta's own backfill would write.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import ray

from tests.uc_api.conftest import UCServerFixture, create_uc_table, data_file, local_path
from tests.uc_api.jvm_clients import DeltaCommitError, JvmUCClient, JvmUCTable

pytestmark = pytest.mark.spark

COMMIT_FAILED = "io.delta.storage.commit.CommitFailedException"
INVALID_TARGET = "io.delta.storage.commit.uccommitcoordinator.InvalidTargetTableException"
APIS = ["delta", "legacy"]


def full_name(info: dict[str, Any]) -> str:
    return f"{info['catalog_name']}.{info['schema_name']}.{info['name']}"


def jvm_table(spark: Any, server: UCServerFixture, info: dict[str, Any], api: str) -> JvmUCTable:
    client = JvmUCClient(spark, uri=server.url, token=server.admin_token, api=api)  # type: ignore[arg-type]
    name = (info["catalog_name"], info["schema_name"], info["name"])
    return client.table(info["storage_location"], name=name)


def wait_published(server: UCServerFixture, info: dict[str, Any], version: int) -> None:
    assert ray.get(server.catalog.actor.wait_published.remote(full_name(info), version, 60.0))


def published(table: JvmUCTable, version: int) -> bytes:
    return (table.root / "_delta_log" / f"{version:020d}.json").read_bytes()


def ids_of(server: UCServerFixture, info: dict[str, Any]) -> list[int]:
    rows = server.catalog.open_table(full_name(info)).to_arrow()
    return sorted(rows.column("id").to_pylist())


def test_version_zero_carries_the_table_id_delta_needs(uc_server: UCServerFixture) -> None:
    info = create_uc_table(uc_server)
    zero = local_path(info["storage_location"]) / "_delta_log" / f"{0:020d}.json"
    metadata = next(
        json.loads(line)["metaData"] for line in zero.read_text().splitlines() if "metaData" in line
    )
    # delta-spark takes the coordinator's table id from here (extractUCTableId).
    assert metadata["configuration"]["io.unitycatalog.tableId"] == info["table_id"]


@pytest.mark.parametrize("api", APIS)
def test_commits_in_order_and_get_commits(spark: Any, uc_server: UCServerFixture, api: str) -> None:
    info = create_uc_table(uc_server)
    table = jvm_table(spark, uc_server, info, api)
    assert table.client.metastore_id()
    commits, latest = table.get_commits()
    assert (commits, latest) == ([], 0)
    done = []
    for version in (1, 2, 3):
        location = info["storage_location"]
        done.append(table.commit(version, [data_file(location, [version])]))
    assert [c.version for c in done] == [1, 2, 3]
    for commit in done:  # delta wrote each staged file itself, under _staged_commits
        assert Path(local_path(commit.path)).parent.name == "_staged_commits"
    commits, latest = table.get_commits()
    assert latest == 3
    assert all(c.path in {d.path for d in done} for c in commits)
    wait_published(uc_server, info, 3)
    for commit in done:
        assert published(table, commit.version) == Path(local_path(commit.path)).read_bytes()
    assert table.get_commits() == ([], 3)
    assert ids_of(uc_server, info) == [1, 2, 3]


@pytest.mark.parametrize("api", APIS)
def test_gap_and_version_zero_are_refused(spark: Any, uc_server: UCServerFixture, api: str) -> None:
    info = create_uc_table(uc_server)
    table = jvm_table(spark, uc_server, info, api)
    with pytest.raises(DeltaCommitError) as zero:
        table.commit(0, [data_file(info["storage_location"], [0])])
    assert zero.value.java_class == COMMIT_FAILED and zero.value.retryable is False
    with pytest.raises(DeltaCommitError) as gap:
        table.commit(2, [data_file(info["storage_location"], [2])])
    # a gap is a bad request (400): delta's non-retryable CommitFailedException
    assert gap.value.java_class == COMMIT_FAILED
    assert (gap.value.retryable, gap.value.conflict) == (False, False)
    assert table.get_commits()[1] == 0
    assert ids_of(uc_server, info) == []


@pytest.mark.parametrize("api", APIS)
def test_lost_race_is_deltas_retryable_conflict(
    spark: Any, uc_server: UCServerFixture, api: str
) -> None:
    info = create_uc_table(uc_server)
    first = jvm_table(spark, uc_server, info, api)
    second = jvm_table(spark, uc_server, info, api)
    location = info["storage_location"]
    won = first.commit(1, [data_file(location, [1])])
    with pytest.raises(DeltaCommitError) as lost:
        second.commit(1, [data_file(location, [2])])
    assert lost.value.java_class == COMMIT_FAILED
    assert (lost.value.retryable, lost.value.conflict) == (True, True)
    # the loser retries as delta-spark does: re-read, next version
    again = second.append([data_file(location, [2])])
    assert (won.version, again.version) == (1, 2)
    wait_published(uc_server, info, 2)
    assert ids_of(uc_server, info) == [1, 2]


@pytest.mark.parametrize("api", APIS)
def test_resent_acknowledged_commit_is_done_once(
    spark: Any, uc_server: UCServerFixture, api: str
) -> None:
    """The UC SDK re-sends a commit by itself after a 5xx or a broken connection:
    the server must answer the same (version, staged file) as done, not twice
    and not as a conflict (delta-spark would re-commit the data at v+1)."""
    info = create_uc_table(uc_server)
    table = jvm_table(spark, uc_server, info, api)
    done = table.commit(1, [data_file(info["storage_location"], [7])])
    jvm = table.jvm
    status = jvm.org.apache.hadoop.fs.FileSystem.get(
        jvm.java.net.URI(table.location), table.hadoop_conf
    ).getFileStatus(jvm.org.apache.hadoop.fs.Path(done.path))
    commit = jvm.io.delta.storage.commit.Commit(done.version, status, done.timestamp)
    descriptor = table.descriptor()
    resend = table.client.rest.commit  # the very request the SDK would repeat
    for _ in range(2):
        resend(
            info["table_id"],
            jvm.java.net.URI(table.location),
            descriptor.getTableIdentifier().orElse(None),
            jvm.java.util.Optional.of(commit),
            jvm.java.util.Optional.empty(),
            jvm.java.util.Optional.empty(),
            jvm.java.util.Optional.empty(),
            jvm.java.util.Optional.empty(),
            jvm.java.util.Optional.empty(),
            jvm.java.util.ArrayList(),
            jvm.java.util.Optional.empty(),
        )
    assert table.latest_version() == 1
    wait_published(uc_server, info, 1)
    assert ids_of(uc_server, info) == [7]
    history = uc_server.catalog.open_table(full_name(info)).history()
    assert [entry.version for entry in history] == [1, 0]


@pytest.mark.parametrize("api", APIS)
def test_delta_backfill_and_catalog_publisher_agree(
    spark: Any, uc_server: UCServerFixture, api: str
) -> None:
    info = create_uc_table(uc_server)
    table = jvm_table(spark, uc_server, info, api)
    location = info["storage_location"]
    done = [table.commit(v, [data_file(location, [v])]) for v in (1, 2, 3, 4)]
    # delta's own backfill over everything (what it runs after each commit),
    # racing the catalog's publisher: put-if-absent on both sides, same bytes
    table.backfill_to(4, 0)
    wait_published(uc_server, info, 4)
    table.backfill_to(4, 0)
    for commit in done:
        assert published(table, commit.version) == Path(local_path(commit.path)).read_bytes()
    assert table.get_commits() == ([], 4)
    assert ids_of(uc_server, info) == [1, 2, 3, 4]


def test_unknown_table_is_deltas_invalid_target(spark: Any, uc_server: UCServerFixture) -> None:
    info = create_uc_table(uc_server)
    table = jvm_table(spark, uc_server, info, "legacy")
    unknown = {**table.created_configuration(), "io.unitycatalog.tableId": str(uuid.uuid4())}
    with pytest.raises(Exception) as missing:
        table.client.coordinator.getCommits(table.descriptor(unknown), None, None)
    error = DeltaCommitError(missing.value)
    assert INVALID_TARGET in error.causes, error
