"""Unity Catalog's Delta commits endpoints over HTTP, against the catalog's ratification.

Clients commit as delta-storage's ``UCCommitCoordinatorClient`` does: write
``_delta_log/_staged_commits/<v>.<uuid>.json``, then ``POST
/delta/preview/commits`` naming it; ``GET`` lists the unbackfilled ones.
Checked: version v only right after v-1, at most once (a replay of the same
file is a success, another file for a taken version a 409 conflict, a gap a
400), durable across a catalog actor restart, published by the catalog with
exactly the staged bytes (so a client's own backfill, put-if-absent, and the
publisher agree), and no small cap on unpublished commits.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import pyarrow as pa
import ray

from raydelta.actors.cluster import NAMESPACE
from raydelta.protocol.actions import CommitInfo, parse_actions, serialize_actions
from tests.uc_api.conftest import (
    UCServerFixture,
    create_uc_table,
    data_file,
    get_commits,
    local_path,
    post_commit,
    stage_commit,
)


def _log(table: dict[str, Any]) -> Any:
    return local_path(table["storage_location"]) / "_delta_log"


def _published(table: dict[str, Any], version: int) -> bytes:
    return (_log(table) / f"{version:020d}.json").read_bytes()


def _staged(table: dict[str, Any], file_name: str) -> bytes:
    return (_log(table) / "_staged_commits" / file_name).read_bytes()


def _wait_published(server: UCServerFixture, table: dict[str, Any], version: int) -> None:
    name = f"{table['catalog_name']}.{table['schema_name']}.{table['name']}"
    assert ray.get(server.catalog.actor.wait_published.remote(name, version, 60.0))


def test_commits_in_order_published_with_the_staged_bytes(uc_server: UCServerFixture) -> None:
    table = create_uc_table(uc_server)
    # delta-storage's client writes staged files without creating their directory
    assert (_log(table) / "_staged_commits").is_dir()
    # delta-spark operates on a catalog-managed table only with vacuumProtocolCheck too
    protocol = json.loads((_log(table) / f"{0:020d}.json").read_text().splitlines()[1])
    assert set(protocol["protocol"]["readerFeatures"]) >= {"catalogManaged", "vacuumProtocolCheck"}
    assert set(protocol["protocol"]["writerFeatures"]) >= {
        "catalogManaged",
        "inCommitTimestamp",
        "vacuumProtocolCheck",
    }
    own = uc_server.catalog.create_table("main.default.own", pa.schema([("id", pa.int64())]))
    assert (local_path(own.uri) / "_delta_log" / "_staged_commits").is_dir()
    status, listed = get_commits(uc_server, table)
    assert (status, listed) == (200, {"commits": [], "latest_table_version": 0})
    files = []
    for version in (1, 2, 3):
        info = stage_commit(
            table["storage_location"], version, [data_file(table["storage_location"], [version])]
        )
        status, body = post_commit(uc_server, table, info)
        assert (status, body) == (200, {}), body
        files.append(info["file_name"])
    status, listed = get_commits(uc_server, table)
    assert status == 200 and listed["latest_table_version"] == 3
    for commit in listed["commits"]:  # whatever is not yet published is described exactly
        version = commit["version"]
        assert commit["file_name"] == files[version - 1]
        assert commit["file_size"] == len(_staged(table, commit["file_name"]))
    _wait_published(uc_server, table, 3)
    for version, name in enumerate(files, start=1):
        assert _published(table, version) == _staged(table, name)
    status, listed = get_commits(uc_server, table)
    assert (status, listed) == (200, {"commits": [], "latest_table_version": 3})
    # the rows are all there, read through the catalog
    rows = uc_server.catalog.open_table("main.default.events").to_arrow()
    assert sorted(rows.column("id").to_pylist()) == [1, 2, 3]


def test_unbackfilled_commits_are_listed_while_publishing_is_paused(
    uc_server: UCServerFixture,
) -> None:
    table = create_uc_table(uc_server)
    ray.get(uc_server.catalog.actor.pause_publishing.remote(True))
    try:
        infos = []
        for version in range(1, 61):  # past every cap others use (10 to 50)
            info = stage_commit(table["storage_location"], version, [])
            assert post_commit(uc_server, table, info) == (200, {})
            infos.append(info)
        status, listed = get_commits(uc_server, table, 1)
        assert status == 200 and listed["latest_table_version"] == 60
        assert [c["version"] for c in listed["commits"]] == list(range(1, 61))
        assert [c["file_name"] for c in listed["commits"]] == [i["file_name"] for i in infos]
        assert [c["timestamp"] for c in listed["commits"]] == [i["timestamp"] for i in infos]
        status, ranged = get_commits(uc_server, table, 10, 12)
        assert [c["version"] for c in ranged["commits"]] == [10, 11, 12]
        assert ranged["latest_table_version"] == 60
        # a client backfills 1..5 itself, as delta-spark does (put-if-absent of its file)
        for info in infos[:5]:
            target = _log(table) / f"{info['version']:020d}.json"
            target.write_bytes(_staged(table, info["file_name"]))
        status, body = post_commit(uc_server, table, None, latest_backfilled_version=5)
        assert (status, body) == (200, {})
    finally:
        ray.get(uc_server.catalog.actor.pause_publishing.remote(False))
    _wait_published(uc_server, table, 60)
    status = ray.get(uc_server.catalog.actor.publish_status.remote("main.default.events"))
    assert status["error"] is None  # the client's files were identical: no disagreement
    for info in infos:
        assert _published(table, info["version"]) == _staged(table, info["file_name"])


def test_at_most_once_replays_conflicts_and_gaps(uc_server: UCServerFixture) -> None:
    table = create_uc_table(uc_server)
    location = table["storage_location"]
    first = stage_commit(location, 1, [data_file(location, [1])])
    assert post_commit(uc_server, table, first) == (200, {})
    # the same commit again (a client that lost the answer): success, nothing new
    assert post_commit(uc_server, table, first) == (200, {})
    _wait_published(uc_server, table, 1)
    assert post_commit(uc_server, table, first) == (200, {})  # after publishing too
    # another file for the taken version: a conflict delta-storage retries after reading
    rival = stage_commit(location, 1, [data_file(location, [99])])
    status, body = post_commit(uc_server, table, rival)
    assert status == 409 and body["error_code"] == "COMMIT_VERSION_CONFLICT", body
    # a gap: refused, nothing ratified
    gap = stage_commit(location, 3, [data_file(location, [3])])
    status, body = post_commit(uc_server, table, gap)
    assert status == 400 and body["error_code"] == "INVALID_ARGUMENT", body
    status, listed = get_commits(uc_server, table)
    assert listed["latest_table_version"] == 1
    rows = uc_server.catalog.open_table("main.default.events").to_arrow()
    assert rows.column("id").to_pylist() == [1]
    history = uc_server.catalog.open_table("main.default.events").history()
    assert [h.version for h in history] == [1, 0]


def test_racing_clients_on_one_version_exactly_one_wins(uc_server: UCServerFixture) -> None:
    table = create_uc_table(uc_server)
    location = table["storage_location"]
    results: list[tuple[int, Any]] = []
    infos = [stage_commit(location, 1, [data_file(location, [i])]) for i in range(6)]
    barrier = threading.Barrier(len(infos))

    def race(info: dict[str, Any]) -> None:
        barrier.wait()
        results.append(post_commit(uc_server, table, info))

    threads = [threading.Thread(target=race, args=(info,)) for info in infos]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wins = [r for r in results if r[0] == 200]
    assert len(wins) == 1, results
    assert all(r[0] == 409 for r in results if r[0] != 200), results
    _wait_published(uc_server, table, 1)
    published = _published(table, 1)
    assert sum(_staged(table, i["file_name"]) == published for i in infos) == 1


def test_acknowledged_commits_survive_a_catalog_actor_restart(uc_server: UCServerFixture) -> None:
    table = create_uc_table(uc_server)
    location = table["storage_location"]
    ray.get(uc_server.catalog.actor.pause_publishing.remote(True))
    infos = []
    for version in (1, 2):
        info = stage_commit(location, version, [data_file(location, [version])])
        assert post_commit(uc_server, table, info) == (200, {})
        infos.append(info)
    # kill the actor's process (not the server): Ray restarts it from the durable store
    ray.kill(uc_server.catalog.actor, no_restart=False)
    status, listed = get_commits(uc_server, table)  # retried by Ray until the restart is up
    assert status == 200, listed
    assert listed["latest_table_version"] == 2
    # the namespaces and the table's name came back with it (saved under the root)
    admin = uc_server.admin_token
    assert uc_server.request("GET", "/catalogs/main", token=admin)[0] == 200
    assert uc_server.request("GET", "/schemas/main.default", token=admin)[0] == 200
    status, described = uc_server.request("GET", "/tables/main.default.events", token=admin)
    assert (status, described["table_id"]) == (200, table["table_id"])
    held = {c["version"]: c["file_name"] for c in listed["commits"]}
    assert all(held[i["version"]] == i["file_name"] for i in infos if i["version"] in held)
    # a replay of an acknowledged commit after the restart is still a success, not a second one
    assert post_commit(uc_server, table, infos[1]) == (200, {})
    info = stage_commit(location, 3, [data_file(location, [3])])
    assert post_commit(uc_server, table, info) == (200, {})
    _wait_published(uc_server, table, 3)
    rows = uc_server.catalog.open_table("main.default.events").to_arrow()
    assert sorted(rows.column("id").to_pylist()) == [1, 2, 3]
    # the server in front may restart too: nothing lives in it
    uc_server.restart_server()
    status, listed = get_commits(uc_server, table)
    assert (status, listed["latest_table_version"]) == (200, 3)
    assert ray.get_actor(f"catalog:{uc_server.catalog.name}", namespace=NAMESPACE) is not None


def test_raydelta_writers_and_uc_clients_share_one_history(uc_server: UCServerFixture) -> None:
    table = create_uc_table(uc_server)
    location = table["storage_location"]
    ours = uc_server.catalog.open_table("main.default.events")
    ray.get(uc_server.catalog.actor.pause_publishing.remote(True))
    try:
        assert ours.append(pa.table({"id": pa.array([10], pa.int64())})) == 1
        # a UC client learns of the inline version 1 as a staged file it can read
        _status, listed = get_commits(uc_server, table)
        assert listed["latest_table_version"] == 1
        (inline,) = listed["commits"]
        assert inline["version"] == 1
        materialized = _staged(table, inline["file_name"])
        assert inline["file_size"] == len(materialized)
        assert get_commits(uc_server, table)[1] == listed  # the same file every time
        # the bytes a restarted catalog would republish from its store are these too
        (held,) = uc_server.catalog.get_ratified_commits("main.default.events").commits
        assert serialize_actions(list(held.actions or ())) == materialized
        info = stage_commit(location, 2, [data_file(location, [20])])
        assert post_commit(uc_server, table, info) == (200, {})
        assert ours.append(pa.table({"id": pa.array([30], pa.int64())})) == 3
        # the client backfills version 1 from that file itself, before the publisher
        (_log(table) / f"{1:020d}.json").write_bytes(materialized)
    finally:
        ray.get(uc_server.catalog.actor.pause_publishing.remote(False))
    _wait_published(uc_server, table, 3)
    status = ray.get(uc_server.catalog.actor.publish_status.remote("main.default.events"))
    assert status["error"] is None  # the publisher found the very bytes it publishes
    rows = uc_server.catalog.open_table("main.default.events").to_arrow()
    assert sorted(rows.column("id").to_pylist()) == [10, 20, 30]
    infos = [
        next(a for a in parse_actions(_published(table, v)) if isinstance(a, CommitInfo))
        for v in (1, 2, 3)
    ]
    stamps = [i.in_commit_timestamp for i in infos]
    assert stamps == sorted(stamps) and len(set(stamps)) == 3
    assert json.loads(_published(table, 2).splitlines()[0])["commitInfo"]["engineInfo"] == (
        "tests/uc_api"
    )


def test_a_retried_transaction_in_a_new_staged_file_is_not_committed_twice(
    uc_server: UCServerFixture,
) -> None:
    """delta-spark retries a commit whose answer it lost in a *new* staged file of the
    same transaction (same ``txnId``): that is a replay, not a second commit."""
    table = create_uc_table(uc_server)
    location = table["storage_location"]
    first = stage_commit(location, 1, [data_file(location, [1])])
    assert post_commit(uc_server, table, first) == (200, {})
    original = _staged(table, first["file_name"])
    again = stage_commit(location, 1, [])
    retry = _log(table) / "_staged_commits" / again["file_name"]
    retry.write_bytes(original)  # same transaction, same content, another file
    again["file_size"] = len(original)
    assert post_commit(uc_server, table, again) == (200, {})
    _status, listed = get_commits(uc_server, table)
    assert listed["latest_table_version"] == 1
    rows = uc_server.catalog.open_table("main.default.events").to_arrow()
    assert rows.column("id").to_pylist() == [1]


def test_a_client_backfilling_other_bytes_is_reported_and_readers_keep_the_ratified_commit(
    uc_server: UCServerFixture,
) -> None:
    table = create_uc_table(uc_server)
    location = table["storage_location"]
    ray.get(uc_server.catalog.actor.pause_publishing.remote(True))
    info = stage_commit(location, 1, [data_file(location, [1])])
    assert post_commit(uc_server, table, info) == (200, {})
    rogue = stage_commit(location, 1, [data_file(location, [666])])
    (_log(table) / f"{1:020d}.json").write_bytes(_staged(table, rogue["file_name"]))
    ray.get(uc_server.catalog.actor.pause_publishing.remote(False))
    name = "main.default.events"
    for _ in range(600):
        status = ray.get(uc_server.catalog.actor.publish_status.remote(name))
        if status["error"] is not None:
            break
        threading.Event().wait(0.05)
    assert status["error"] is not None and "1" in status["error"], status
    # the catalog still holds the ratified commit, and it wins over the rogue file
    _status_code, listed = get_commits(uc_server, table)
    assert [c["file_name"] for c in listed["commits"]] == [info["file_name"]]
    rows = uc_server.catalog.open_table(name).to_arrow()
    assert rows.column("id").to_pylist() == [1]
