"""The commit channel: the same answers as Ray, exactly once when it breaks."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest
import ray

from raydelta.actors.channel import ChannelAddress, ChannelClient, ChannelClosed
from raydelta.actors.client import TableClient, open_table
from raydelta.protocol.actions import Action, AddFile, CommitInfo
from raydelta.protocol.errors import TableNotFoundError

NewTable = Callable[..., tuple[str, TableClient]]
MakeAdd = Callable[..., AddFile]
LogCommits = Callable[[str], list[tuple[int, list[Action]]]]

P1 = "2024-01-01"


def channel_of(table: TableClient) -> ChannelClient | None:
    return getattr(table._channels, "client", None)


def test_commits_travel_over_the_channel(new_table: NewTable, make_add: MakeAdd) -> None:
    uri, table = new_table()
    version = table.transaction().add(make_add(f"date={P1}/a.parquet")).commit()
    assert channel_of(table) is not None, "the commit did not use the channel"
    assert table.append_files(make_add(f"date={P1}/b.parquet")) == version + 1
    assert table.snapshot().num_files == 2
    ray_only = open_table(uri, use_channel=False)
    assert ray_only.append_files(make_add(f"date={P1}/c.parquet")) == version + 2
    assert channel_of(ray_only) is None
    assert ray_only.snapshot().num_files == table.snapshot().num_files == 3
    assert ray_only.head() == table.head()


def test_errors_raised_in_the_actor_arrive_typed(reap_actors: str, make_add: MakeAdd) -> None:
    table = open_table(f"{reap_actors}/missing")
    with pytest.raises(TableNotFoundError):
        table.append_files(make_add(f"date={P1}/a.parquet"))
    assert table.version() == -1


def test_a_broken_channel_falls_back_to_ray_exactly_once(
    new_table: NewTable, make_add: MakeAdd, log_commits: LogCommits
) -> None:
    uri, table = new_table()
    table.append_files(make_add(f"date={P1}/a.parquet"))
    client = channel_of(table)
    assert client is not None
    client._sock.shutdown(socket.SHUT_RDWR)  # the connection dies under the handle
    txn = table.transaction().add(make_add(f"date={P1}/b.parquet"))
    version = txn.commit()
    assert channel_of(table) is not client
    assert txn.commit() == version  # a retry returns the version already won
    txn_ids = [
        a.txn_id for _, actions in log_commits(uri) for a in actions if isinstance(a, CommitInfo)
    ]
    assert txn_ids.count(txn.txn_id) == 1


def test_a_restarted_actor_serves_a_new_channel(new_table: NewTable, make_add: MakeAdd) -> None:
    _, table = new_table()
    table.append_files(make_add(f"date={P1}/a.parquet"))
    before = ray.get(table.actor.channel_address.remote())
    ray.kill(table.actor, no_restart=False)
    # ray.kill only asks: the old process may answer a little longer, so wait
    # until the restarted incarnation answers (it serves a channel of its own)
    deadline = time.monotonic() + 60
    after = before
    while after.token == before.token and time.monotonic() < deadline:
        time.sleep(0.05)
        after = ray.get(table.actor.channel_address.remote())
    assert after is not None and after.token != before.token
    # the handle's connection was to the dead process: the call goes through Ray,
    # and the next one opens a channel to the new incarnation
    assert table.append_files(make_add(f"date={P1}/b.parquet")) == 2
    assert table.version() == 2 and channel_of(table) is not None
    assert table.snapshot().num_files == 2


def test_the_channel_refuses_a_wrong_token(new_table: NewTable) -> None:
    _, table = new_table()
    address: ChannelAddress = ray.get(table.actor.channel_address.remote())
    with pytest.raises((ChannelClosed, OSError)):
        ChannelClient(ChannelAddress(address.host, address.port, b"x" * 16))
    client = ChannelClient(address)
    try:
        assert client.call("version", ()) == 0
        with pytest.raises(ValueError, match="not a channel method"):
            client.call("state", ())  # file tables never travel over the channel
    finally:
        client.close()


def test_threads_sharing_a_handle_get_distinct_versions(
    new_table: NewTable, make_add: MakeAdd, log_commits: LogCommits
) -> None:
    uri, table = new_table()

    def append(i: int) -> int:
        return table.append_files(make_add(f"date={P1}/t{i}.parquet"))

    with ThreadPoolExecutor(8) as pool:
        versions = list(pool.map(append, range(40)))
    assert sorted(versions) == list(range(1, 41))
    assert [v for v, _ in log_commits(uri)] == list(range(41))


def test_a_handle_pickled_into_a_task_opens_its_own_channel(
    new_table: NewTable, make_add: MakeAdd
) -> None:
    _, table = new_table()
    table.append_files(make_add(f"date={P1}/a.parquet"))

    @ray.remote(num_cpus=0)
    def commit_there(handle: TableClient, add: AddFile) -> tuple[int, bool]:
        version = handle.append_files(add)
        return version, getattr(handle._channels, "client", None) is not None

    version, used_channel = ray.get(commit_there.remote(table, make_add(f"date={P1}/b.parquet")))
    assert (version, used_channel) == (2, True)
    assert table.snapshot().num_files == 2
