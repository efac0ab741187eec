"""Unity Catalog clients over HTTP and raydelta writers through the ``Catalog``
committing to one managed table at once.

A UC client commits as delta-storage's coordinator does: it asks for the
latest version, stages its file for the next one and posts it; a 409 (the
version was taken) sends it back to read and try the next version with a
new file. raydelta's own writers append through the catalog (rebased
centrally). Checked: every acknowledged commit is in the published log
exactly once, at the version it was acknowledged with, versions are
contiguous, and the rows are exactly the acknowledged ones.
"""

from __future__ import annotations

import json
import threading

import pyarrow as pa
import pytest
import ray

from tests.uc_api.conftest import (
    UCServerFixture,
    create_uc_table,
    data_file,
    get_commits,
    local_path,
    post_commit,
    stage_commit,
)

UC_CLIENTS = 3
RAY_WRITERS = 2
COMMITS_EACH = 6


@pytest.mark.slow
def test_uc_clients_and_raydelta_writers_commit_exactly_once(uc_server: UCServerFixture) -> None:
    table = create_uc_table(uc_server)
    location = table["storage_location"]
    acknowledged: dict[int, int] = {}  # row id -> version acknowledged
    conflicts = [0]
    lock = threading.Lock()
    errors: list[BaseException] = []

    def uc_client(client: int) -> None:
        try:
            for i in range(COMMITS_EACH):
                row = 1000 * (client + 1) + i
                while True:
                    status, listed = get_commits(uc_server, table)
                    assert status == 200, listed
                    version = listed["latest_table_version"] + 1
                    info = stage_commit(location, version, [data_file(location, [row])])
                    status, body = post_commit(uc_server, table, info)
                    if status == 200:
                        with lock:
                            acknowledged[row] = version
                        break
                    assert (status, body["error_code"]) == (409, "COMMIT_VERSION_CONFLICT"), body
                    with lock:
                        conflicts[0] += 1
        except BaseException as error:
            errors.append(error)

    def ray_writer(writer: int) -> None:
        try:
            handle = uc_server.catalog.open_table("main.default.events")
            for i in range(COMMITS_EACH):
                row = 100 * (writer + 1) + i
                version = handle.append(pa.table({"id": pa.array([row], pa.int64())}))
                with lock:
                    acknowledged[row] = version
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=uc_client, args=(c,)) for c in range(UC_CLIENTS)]
    threads += [threading.Thread(target=ray_writer, args=(w,)) for w in range(RAY_WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    total = (UC_CLIENTS + RAY_WRITERS) * COMMITS_EACH
    assert len(acknowledged) == total
    assert ray.get(
        uc_server.catalog.actor.wait_published.remote("main.default.events", total, 120.0)
    )
    log = local_path(location) / "_delta_log"
    versions = sorted(int(p.name[:20]) for p in log.glob("*.json"))
    assert versions == list(range(total + 1))
    rows_in_version: dict[int, list[int]] = {}
    for version in range(1, total + 1):
        for line in (log / f"{version:020d}.json").read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                stats = json.loads(action["add"]["stats"])
                rows_in_version.setdefault(version, []).append(stats["minValues"]["id"])
    found = {row: version for version, rows in rows_in_version.items() for row in rows}
    assert found == acknowledged
    data = uc_server.catalog.open_table("main.default.events").to_arrow()
    assert sorted(data.column("id").to_pylist()) == sorted(acknowledged)
    assert get_commits(uc_server, table)[1]["latest_table_version"] == total
    print(f"{total} commits, {conflicts[0]} UC conflicts retried")
