"""The opt-in commit channel: the same answers as Ray, exactly once when it breaks
or hangs, no pickle on the wire, and nothing run for a peer without the token.

Every test talks to a real ``TableActor`` over real sockets on this machine;
the misbehaving peers (a server that never answers, one that forwards a
commit and drops the reply, one that cannot prove the token) are real
sockets too.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import ray

from raydelta.actors.table.channel import (
    CHANNEL_ENV,
    NONCE_BYTES,
    ChannelAddress,
    ChannelClient,
    ChannelRefused,
    CommitCall,
    handshake_mac,
    recv_frame,
    send_frame,
)
from raydelta.actors.table.client import TableClient
from raydelta.protocol.actions import Action, AddFile, CommitInfo
from raydelta.protocol.errors import TableNotFoundError
from raydelta.protocol.events import CommitRequest, ReadSet

NewTable = Callable[..., tuple[str, TableClient]]
MakeAdd = Callable[..., AddFile]
LogCommits = Callable[[str], list[tuple[int, list[Action]]]]
LogFiles = Callable[[str], dict[str, bytes]]

P1 = "2024-01-01"
SHORT_TIMEOUT_S = 0.5


def channel_of(table: TableClient) -> ChannelClient | None:
    return getattr(table._channels, "client", None)


def address_of(table: TableClient) -> ChannelAddress:
    address: ChannelAddress | None = ray.get(table.actor.channel_address.remote())
    assert address is not None
    return address


def txn_ids(commits: list[tuple[int, list[Action]]]) -> list[str | None]:
    return [a.txn_id for _, actions in commits for a in actions if isinstance(a, CommitInfo)]


@pytest.fixture
def channel_table(new_table: NewTable) -> tuple[str, TableClient]:
    """A fresh table and a handle that sends the hot calls over the channel."""
    uri, _ = new_table()
    return uri, TableClient.open(uri, use_channel=True)


# --- a misbehaving peer on a real socket ------------------------------------------------


class Peer:
    """A TCP server on 127.0.0.1 that plays one of several bad actors.

    ``behave(conn)`` runs per accepted connection in its own thread; ``received``
    collects every byte read through :meth:`read`.
    """

    def __init__(self, behave: Callable[[Peer, socket.socket], None]) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._behave = behave
        self._stop = threading.Event()
        self._conns: list[socket.socket] = []
        self.received = bytearray()
        self.token = secrets.token_bytes(32)
        threading.Thread(target=self._accept, daemon=True).start()

    def address(self, token: bytes | None = None) -> ChannelAddress:
        return ChannelAddress("127.0.0.1", self.port, self.token if token is None else token)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self._conns.append(conn)
            threading.Thread(target=self._run, args=(conn,), daemon=True).start()

    def _run(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError):
            self._behave(self, conn)

    def read(self, conn: socket.socket) -> bytes:
        frame = recv_frame(conn)
        self.received.extend(frame)
        return frame

    def handshake(self, conn: socket.socket, token: bytes | None = None) -> None:
        """The server's side of the handshake, proving ``token`` (ours by default)."""
        server_nonce = secrets.token_bytes(NONCE_BYTES)
        send_frame(conn, server_nonce)
        client_nonce = self.read(conn)[:NONCE_BYTES]
        mac = handshake_mac(token or self.token, b"server", server_nonce, client_nonce)
        send_frame(conn, mac)

    def hang(self) -> None:
        self._stop.wait()

    def close(self) -> None:
        self._stop.set()
        self._listener.close()
        for conn in self._conns:
            with contextlib.suppress(OSError):
                conn.close()


@pytest.fixture
def peers() -> Iterator[Callable[[Callable[[Peer, socket.socket], None]], Peer]]:
    made: list[Peer] = []

    def make(behave: Callable[[Peer, socket.socket], None]) -> Peer:
        made.append(Peer(behave))
        return made[-1]

    yield make
    for peer in made:
        peer.close()


def raw_connection(address: ChannelAddress) -> socket.socket:
    sock = socket.create_connection((address.host, address.port), timeout=30)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def closed_by_peer(sock: socket.socket) -> bool:
    """True once the other side closed the connection (EOF or reset)."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def commit_frame(make_add: MakeAdd, uri: str, path: str) -> tuple[str, bytes]:
    request = CommitRequest(
        txn_id=f"raw-{secrets.token_hex(8)}",
        read_set=ReadSet(read_version=None),
        actions=(make_add(path),),
        commit_time_ms=int(time.time() * 1000),
    )
    return request.txn_id, CommitCall(table=uri, request=request).model_dump_json().encode()


# --- the same answers as Ray ------------------------------------------------------------


def test_commits_travel_over_the_channel(
    channel_table: tuple[str, TableClient], make_add: MakeAdd
) -> None:
    uri, table = channel_table
    version = table.transaction().add(make_add(f"date={P1}/a.parquet")).commit()
    assert channel_of(table) is not None, "the commit did not use the channel"
    assert table.append_files(make_add(f"date={P1}/b.parquet")) == version + 1
    assert table.snapshot().num_files == 2
    ray_only = TableClient.open(uri)
    assert ray_only.append_files(make_add(f"date={P1}/c.parquet")) == version + 2
    assert channel_of(ray_only) is None
    assert ray_only.snapshot().num_files == table.snapshot().num_files == 3
    assert ray_only.head() == table.head()  # the head travels typed, and arrives equal
    assert table.version() == ray_only.version() == version + 2


def test_the_channel_is_opt_in(
    new_table: NewTable, make_add: MakeAdd, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri, table = new_table()
    monkeypatch.delenv(CHANNEL_ENV, raising=False)
    assert not table.use_channel and not TableClient.open(uri).use_channel
    table.append_files(make_add(f"date={P1}/a.parquet"))
    assert channel_of(table) is None
    monkeypatch.setenv(CHANNEL_ENV, "1")
    opted_in = TableClient.open(uri)
    assert opted_in.use_channel
    assert opted_in.append_files(make_add(f"date={P1}/b.parquet")) == 2
    assert channel_of(opted_in) is not None
    assert not TableClient.open(uri, use_channel=False).use_channel


def test_errors_raised_in_the_actor_arrive_typed(reap_actors: str, make_add: MakeAdd) -> None:
    table = TableClient.open(f"{reap_actors}/missing", use_channel=True)
    with pytest.raises(TableNotFoundError):
        table.append_files(make_add(f"date={P1}/a.parquet"))
    assert channel_of(table) is not None, "the error did not come over the channel"
    assert table.version() == -1


def test_threads_sharing_a_handle_get_distinct_versions(
    channel_table: tuple[str, TableClient], make_add: MakeAdd, log_commits: LogCommits
) -> None:
    uri, table = channel_table
    ray_only = TableClient.open(uri)

    def append(i: int) -> int:  # half over the channel, half through Ray
        handle = table if i % 2 else ray_only
        return handle.append_files(make_add(f"date={P1}/t{i}.parquet"))

    with ThreadPoolExecutor(8) as pool:
        versions = list(pool.map(append, range(40)))
    assert sorted(versions) == list(range(1, 41))
    assert [v for v, _ in log_commits(uri)] == list(range(41))


def test_a_handle_pickled_into_a_task_opens_its_own_channel(
    channel_table: tuple[str, TableClient], make_add: MakeAdd
) -> None:
    _, table = channel_table
    table.append_files(make_add(f"date={P1}/a.parquet"))

    @ray.remote(num_cpus=0)
    def commit_there(handle: TableClient, add: AddFile) -> tuple[int, bool]:
        version = handle.append_files(add)
        return version, getattr(handle._channels, "client", None) is not None

    version, used_channel = ray.get(commit_there.remote(table, make_add(f"date={P1}/b.parquet")))
    assert (version, used_channel) == (2, True)
    assert table.snapshot().num_files == 2


# --- exactly once when the channel breaks or hangs -------------------------------------


def test_a_broken_channel_falls_back_to_ray_exactly_once(
    channel_table: tuple[str, TableClient], make_add: MakeAdd, log_commits: LogCommits
) -> None:
    uri, table = channel_table
    table.append_files(make_add(f"date={P1}/a.parquet"))
    client = channel_of(table)
    assert client is not None
    client._sock.shutdown(socket.SHUT_RDWR)  # the connection dies under the handle
    txn = table.transaction().add(make_add(f"date={P1}/b.parquet"))
    version = txn.commit()
    assert channel_of(table) is not client
    assert txn.commit() == version  # a retry returns the version already won
    assert txn_ids(log_commits(uri)).count(txn.txn_id) == 1


def test_a_restarted_actor_serves_a_new_channel(
    channel_table: tuple[str, TableClient], make_add: MakeAdd
) -> None:
    uri, _ = channel_table
    table = TableClient.open(uri, use_channel=True, dedicated=True)  # killing its host kills
    table.append_files(make_add(f"date={P1}/a.parquet"))  # no other test's table
    before = address_of(table)
    ray.kill(table.host, no_restart=False)
    # ray.kill only asks: the old process may answer a little longer, so wait
    # until the restarted incarnation answers (it serves a channel of its own)
    deadline = time.monotonic() + 60
    after = before
    while after.token == before.token and time.monotonic() < deadline:
        time.sleep(0.05)
        after = address_of(table)
    assert after.token != before.token
    # the handle's connection was to the dead process: the call goes through Ray,
    # and the next one opens a channel to the new incarnation
    assert table.append_files(make_add(f"date={P1}/b.parquet")) == 2
    assert table.version() == 2 and channel_of(table) is not None
    assert table.snapshot().num_files == 2


def test_a_server_that_never_answers_the_handshake_is_given_up_on(
    peers: Callable[..., Peer],
) -> None:
    silent = peers(lambda peer, conn: peer.hang())
    with pytest.raises(TimeoutError):
        ChannelClient(silent.address(), connect_timeout_s=SHORT_TIMEOUT_S)


def test_a_hung_channel_falls_back_to_ray_and_commits_exactly_once(
    channel_table: tuple[str, TableClient],
    make_add: MakeAdd,
    log_commits: LogCommits,
    peers: Callable[..., Peer],
) -> None:
    """The handle's channel leads to a server that takes the call and never
    answers: after the call timeout the commit goes through Ray, once."""
    uri, table = channel_table

    def swallow(peer: Peer, conn: socket.socket) -> None:
        peer.handshake(conn)
        peer.read(conn)  # the call
        peer.hang()

    hung = peers(swallow)
    txn = table.transaction().add(make_add(f"date={P1}/hung.parquet"))
    table._channels.client = ChannelClient(hung.address(), call_timeout_s=SHORT_TIMEOUT_S)
    version = txn.commit()  # returns: the timeout handed the call to Ray
    assert version == 1 and channel_of(table) is None
    assert txn.txn_id.encode() in hung.received, "the call did reach the hung server"
    assert txn_ids(log_commits(uri)).count(txn.txn_id) == 1
    assert table.append_files(make_add(f"date={P1}/next.parquet")) == 2
    assert channel_of(table) is not None  # the next call opened the actor's own channel


def test_a_commit_whose_reply_is_lost_is_not_written_twice(
    channel_table: tuple[str, TableClient],
    make_add: MakeAdd,
    log_commits: LogCommits,
    peers: Callable[..., Peer],
) -> None:
    """A server that forwards the commit to the real actor (which writes it) and
    never passes the reply on: the Ray re-send gets the version already won."""
    uri, table = channel_table
    actor_address = address_of(table)
    forwarded = threading.Event()

    def forward_then_hang(peer: Peer, conn: socket.socket) -> None:
        peer.handshake(conn)
        call = peer.read(conn)
        upstream = ChannelClient(actor_address)
        send_frame(upstream._sock, call)
        recv_frame(upstream._sock)  # committed; the reply is dropped
        forwarded.set()
        peer.hang()

    proxy = peers(forward_then_hang)
    txn = table.transaction().add(make_add(f"date={P1}/lost-reply.parquet"))
    table._channels.client = ChannelClient(proxy.address(), call_timeout_s=SHORT_TIMEOUT_S)
    version = txn.commit()
    assert forwarded.is_set(), "the commit did not reach the actor over the channel"
    assert txn.committed is not None and txn.committed.attempts == 0  # found, not rewritten
    commits = log_commits(uri)
    assert txn_ids(commits).count(txn.txn_id) == 1
    assert [v for v, _ in commits] == [0, version]


# --- the handshake ---------------------------------------------------------------------


def test_a_wrong_token_is_refused_and_nothing_is_run(
    channel_table: tuple[str, TableClient], make_add: MakeAdd, log_files: LogFiles
) -> None:
    uri, table = channel_table
    address = address_of(table)
    with pytest.raises((ChannelRefused, OSError)):
        ChannelClient(ChannelAddress(address.host, address.port, b"x" * 32))
    before = log_files(uri)

    # a peer without the token answers the challenge with a guess, then sends a commit anyway
    sock = raw_connection(address)
    try:
        challenge = recv_frame(sock)
        guess = handshake_mac(b"x" * 32, b"client", challenge, b"n" * NONCE_BYTES)
        send_frame(sock, b"n" * NONCE_BYTES + guess)
        txn_id, frame = commit_frame(make_add, uri, f"date={P1}/intruder.parquet")
        with contextlib.suppress(OSError):
            send_frame(sock, frame)
        assert closed_by_peer(sock)
    finally:
        sock.close()
    # and one that skips the handshake and sends the commit first
    sock = raw_connection(address)
    try:
        recv_frame(sock)  # the challenge
        with contextlib.suppress(OSError):
            send_frame(sock, frame)
        assert closed_by_peer(sock)
    finally:
        sock.close()
    assert table.version() == 0
    assert log_files(uri) == before
    assert txn_id not in str(before)


def test_the_token_never_crosses_the_socket(
    channel_table: tuple[str, TableClient], peers: Callable[..., Peer]
) -> None:
    _, table = channel_table
    real = address_of(table)

    def record(peer: Peer, conn: socket.socket) -> None:  # sees all the client sends
        peer.handshake(conn, token=real.token)
        peer.read(conn)
        conn.close()

    recorder = peers(record)
    client = ChannelClient(ChannelAddress("127.0.0.1", recorder.port, real.token))
    with pytest.raises(OSError):  # the recorder takes the call and hangs up
        client.call("file:///any", "version", ())
    client.close()
    assert recorder.received and real.token not in bytes(recorder.received)
    assert real.token.hex().encode() not in bytes(recorder.received)


def test_a_server_that_cannot_prove_the_token_is_refused(
    channel_table: tuple[str, TableClient], peers: Callable[..., Peer]
) -> None:
    """Mutual: a client does not send calls to an impostor listening on the address."""
    _, table = channel_table
    impostor = peers(lambda peer, conn: (peer.handshake(conn, token=b"y" * 32), peer.hang()))
    with pytest.raises(ChannelRefused):
        ChannelClient(impostor.address(token=address_of(table).token))


# --- no pickle on the wire -------------------------------------------------------------


class _Payload:
    """Unpickling this creates a directory: the proof that something unpickled it."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Callable[[str], None], tuple[str]]:
        return (os.mkdir, (self.marker,))


def test_a_pickle_payload_is_refused_without_being_unpickled(
    channel_table: tuple[str, TableClient], tmp_path: Path
) -> None:
    _, table = channel_table
    marker = tmp_path / "unpickled"
    client = ChannelClient(address_of(table))  # authenticated: only the payload is wrong
    try:
        send_frame(client._sock, pickle.dumps(_Payload(str(marker))))
        refusal = json.loads(recv_frame(client._sock))
        assert refusal["kind"] == "refused"
        assert closed_by_peer(client._sock)
    finally:
        client.close()
    assert not marker.exists()
    assert table.version() == 0  # the actor goes on serving


def test_only_the_channel_methods_travel(channel_table: tuple[str, TableClient]) -> None:
    uri, table = channel_table
    client = ChannelClient(address_of(table))
    try:
        assert client.call(uri, "version", ()) == 0
        with pytest.raises(ValueError, match="not a channel method"):
            client.call(uri, "state", ())  # file tables never travel over the channel
        send_frame(client._sock, json.dumps({"method": "state"}).encode())
        assert json.loads(recv_frame(client._sock))["kind"] == "refused"
    finally:
        client.close()
