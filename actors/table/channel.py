"""The commit channel: an opt-in direct socket from a table handle to its table host.

A Ray actor call costs 1.3 to 2.5 ms on a busy 2-core node, most of it in the
task machinery, while a commit's own work (check, rebase, fsync'd
put-if-absent) is about 1 ms. A handle opened with ``use_channel=True`` (or
with ``RAYDELTA_CHANNEL=1`` in its environment) therefore sends the hot,
small calls (``commit``, ``create``, ``head``, ``tail``, ``version``,
``ping``) over a plain TCP connection to a thread in the table's host (one
channel per host; each call names its table); everything
else, and every call the channel cannot carry, goes through Ray. By default
a handle uses Ray only, and an actor listens only once a client asked it for
its address.

Invariants:
- The channel changes the transport, not the semantics: the actor runs a
  channel call exactly as the Ray method of the same name, under the same
  lock, and a commit is acknowledged only after its put.
- Every call the channel fails to deliver or answer (refused handshake,
  connect, send or receive timeout, broken connection, an actor that died or
  restarted) is re-sent through Ray. Every channel method is read-only or
  idempotent (commits carry their ``txnId``), so a re-send returns the
  version the commit already won: exactly once, whichever transport won.
- No pickle: a frame is a length-prefixed JSON document of one of the
  pydantic models below (:data:`ChannelCall`, :data:`ChannelReply`), built
  from the typed events of :mod:`raydelta.protocol.events` and the log's
  own action wrappers, validated on receipt. A frame that does not validate
  is answered with :class:`ChannelRefusal` and the connection is closed;
  nothing in it is run. Frames are at most :data:`MAX_FRAME_BYTES`.
- Authenticated handshake, both ways: the server sends a random challenge,
  the client answers with its own nonce and the HMAC-SHA256 of both under
  the actor incarnation's random token, the server checks it with
  ``hmac.compare_digest`` and proves knowing the token the same way. The
  token crosses only Ray (:meth:`TableHost.channel_address`), never the
  socket. A connection that fails the handshake is closed before any call
  is read.
- Timeouts: connecting and the handshake take at most
  :data:`CONNECT_TIMEOUT_S`; each send and each reply at most the client's
  call timeout (:data:`CALL_TIMEOUT_S`), after which the connection is
  dropped (its state is unknown) and the call goes through Ray. A hung
  actor thread never hangs a client on the channel.
- Frames never carry file tables (``state`` and ``snapshot`` stay on Ray,
  whose Arrow serialization ships only the live slices).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import os
import secrets
import socket
import socketserver
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_serializer,
    field_validator,
)

from raydelta.protocol import errors
from raydelta.protocol.actions import (
    Action,
    DomainMetadata,
    Metadata,
    Protocol,
    Txn,
    action_to_wrapper,
)
from raydelta.protocol.events import CommitReply, CommitRequest, actions_in
from raydelta.protocol.reconciliation import TableHead

logger = logging.getLogger(__name__)

CHANNEL_METHODS = frozenset({"commit", "create", "head", "tail", "version", "ping"})
"""The actor methods a channel carries: small replies, read-only or idempotent."""

CHANNEL_ENV = "RAYDELTA_CHANNEL"
"""``RAYDELTA_CHANNEL=1`` turns the channel on for handles that do not say."""

CONNECT_TIMEOUT_S = 2.0
"""Connecting and the handshake, together."""

CALL_TIMEOUT_S = 10.0
"""Sending one call and receiving its reply, each (then the call goes through Ray)."""

SERVER_IDLE_TIMEOUT_S = 3600.0
"""An authenticated connection with no call for this long is closed by the actor."""

MAX_FRAME_BYTES = 64 << 20
"""Larger calls and replies go through Ray."""

PROTOCOL_NAME = b"raydelta-channel/1"
NONCE_BYTES = 32
_HEADER = struct.Struct(">I")


def channel_enabled() -> bool:
    """Whether handles use the channel when not told (``RAYDELTA_CHANNEL=1``)."""
    return os.environ.get(CHANNEL_ENV, "0").strip().lower() in {"1", "true", "yes", "on"}


@dataclass(frozen=True)
class ChannelAddress:
    """Where one actor incarnation listens, and the secret its handshake proves."""

    host: str
    port: int
    token: bytes

    def __repr__(self) -> str:  # the token stays out of logs
        return f"ChannelAddress({self.host!r}, {self.port})"


class ChannelClosed(ConnectionError):
    """The connection broke or timed out before a reply arrived (the call may
    or may not have run)."""


class ChannelRefused(ConnectionError):
    """The handshake failed: a wrong token on either side, or not our protocol."""


class ChannelFallback(Exception):
    """The channel cannot carry this call (too large, or an answer the wire
    format does not express); the connection is fine, send it through Ray."""


# --- wire format ------------------------------------------------------------------------


class _Frame(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class _WithActions(_Frame):
    """Actions travel as the log's wrappers (``{"add": {...}}``)."""

    actions: tuple[Action, ...] = ()

    _parse_actions = field_validator("actions", mode="before")(actions_in)

    @field_serializer("actions")
    def _serialize_actions(self, actions: tuple[Action, ...]) -> list[Any]:
        return [action_to_wrapper(a) for a in actions]


class _CallFrame(_Frame):
    """A call names its table: one channel serves every table of a host."""

    table: str = Field(min_length=1)


class CommitCall(_CallFrame):
    method: Literal["commit"] = "commit"
    request: CommitRequest


class CreateCall(_CallFrame):
    method: Literal["create"] = "create"
    request: CommitRequest


class HeadCall(_CallFrame):
    method: Literal["head"] = "head"


class TailCall(_CallFrame):
    method: Literal["tail"] = "tail"
    since_version: int = Field(ge=-1)


class VersionCall(_CallFrame):
    method: Literal["version"] = "version"


class PingCall(_CallFrame):
    method: Literal["ping"] = "ping"


ChannelCall = Annotated[
    CommitCall | CreateCall | HeadCall | TailCall | VersionCall | PingCall,
    Field(discriminator="method"),
]


class CommitAnswer(_Frame):
    kind: Literal["commit"] = "commit"
    reply: CommitReply


class HeadAnswer(_WithActions):
    """A :class:`TableHead` as the actions it folds (protocol, metadata, txns, domains)."""

    kind: Literal["head"] = "head"
    version: int

    @classmethod
    def of(cls, head: TableHead) -> HeadAnswer:
        actions: list[Action] = [a for a in (head.protocol, head.metadata) if a is not None]
        actions.extend(head.txns.values())
        actions.extend(head.domain_actions.values())
        return cls(version=head.version, actions=tuple(actions))

    def head(self) -> TableHead:
        protocol = next((a for a in self.actions if isinstance(a, Protocol)), None)
        metadata = next((a for a in self.actions if isinstance(a, Metadata)), None)
        txns = {a.app_id: a for a in self.actions if isinstance(a, Txn)}
        domains = {a.domain: a for a in self.actions if isinstance(a, DomainMetadata)}
        return TableHead(self.version, protocol, metadata, txns, domains)


class TailCommit(_WithActions):
    version: int


class TailAnswer(_Frame):
    kind: Literal["tail"] = "tail"
    latest: int
    commits: tuple[TailCommit, ...] | None


class IntAnswer(_Frame):
    kind: Literal["int"] = "int"
    value: int


class ErrorAnswer(_Frame):
    """The call raised one of :mod:`raydelta.protocol.errors`' classes with a
    message only; the client raises the same class."""

    kind: Literal["error"] = "error"
    exception: str
    message: str


class UseRayAnswer(_Frame):
    """The channel cannot carry this answer (see :class:`ChannelFallback`)."""

    kind: Literal["use_ray"] = "use_ray"
    reason: str


class ChannelRefusal(_Frame):
    """The frame was not a valid call; the server closes the connection."""

    kind: Literal["refused"] = "refused"
    reason: str


ChannelReply = Annotated[
    CommitAnswer
    | HeadAnswer
    | TailAnswer
    | IntAnswer
    | ErrorAnswer
    | UseRayAnswer
    | ChannelRefusal,
    Field(discriminator="kind"),
]

_CALLS: TypeAdapter[Any] = TypeAdapter(ChannelCall)
_REPLIES: TypeAdapter[Any] = TypeAdapter(ChannelReply)


def _call_frame(table: str, method: str, args: tuple[Any, ...]) -> _Frame:
    """The typed call for ``table.method(*args)``."""
    if method == "commit":
        (request,) = args
        return CommitCall(table=table, request=request)
    if method == "create":
        (request,) = args
        return CreateCall(table=table, request=request)
    if method == "tail":
        (since_version,) = args
        return TailCall(table=table, since_version=since_version)
    if method == "head" and not args:
        return HeadCall(table=table)
    if method == "version" and not args:
        return VersionCall(table=table)
    if method == "ping" and not args:
        return PingCall(table=table)
    raise ValueError(f"not a channel method: {method}{args!r}")


def _call_args(call: Any) -> tuple[Any, ...]:
    if isinstance(call, (CommitCall, CreateCall)):
        return (call.request,)
    if isinstance(call, TailCall):
        return (call.since_version,)
    return ()


def _answer_frame(method: str, result: Any) -> _Frame:
    """The typed answer for ``method``'s ``result`` (raises TypeError if it has another type)."""
    if method in ("commit", "create"):
        return CommitAnswer(reply=result)
    if method == "head":
        if not isinstance(result, TableHead):
            raise TypeError(f"head returned {type(result).__name__}")
        return HeadAnswer.of(result)
    if method == "tail":
        latest, commits = result
        return TailAnswer(
            latest=latest,
            commits=None
            if commits is None
            else tuple(TailCommit(version=v, actions=tuple(a)) for v, a in commits),
        )
    return IntAnswer(value=result)


def _error_answer(error: Exception) -> _Frame:
    """An exception the client can raise as the same class, or a fallback to Ray
    (which carries any exception, so both transports raise the same)."""
    cls = type(error)
    if (
        isinstance(error, errors.RaydeltaError)
        and cls.__module__ == errors.__name__
        and getattr(errors, cls.__name__, None) is cls
        and error.args == (str(error),)
    ):
        return ErrorAnswer(exception=cls.__name__, message=str(error))
    return UseRayAnswer(reason=f"{cls.__name__} is not carried by the channel")


def _raise_error(answer: ErrorAnswer) -> None:
    cls = getattr(errors, answer.exception, None)
    if not (isinstance(cls, type) and issubclass(cls, errors.RaydeltaError)):
        raise ChannelFallback(f"unknown error class {answer.exception!r}")
    raise cls(answer.message)


def _value_of(answer: Any) -> Any:
    if isinstance(answer, CommitAnswer):
        return answer.reply
    if isinstance(answer, HeadAnswer):
        return answer.head()
    if isinstance(answer, TailAnswer):
        commits = (
            None
            if answer.commits is None
            else [(c.version, list(c.actions)) for c in answer.commits]
        )
        return answer.latest, commits
    if isinstance(answer, IntAnswer):
        return answer.value
    if isinstance(answer, ErrorAnswer):
        _raise_error(answer)
    if isinstance(answer, UseRayAnswer):
        raise ChannelFallback(answer.reason)
    raise ChannelClosed(f"the actor refused the call: {answer.reason}")


_ANSWER_KINDS = {
    "commit": (CommitAnswer,),
    "create": (CommitAnswer,),
    "head": (HeadAnswer,),
    "tail": (TailAnswer,),
    "version": (IntAnswer,),
    "ping": (IntAnswer,),
}


# --- frames and handshake ----------------------------------------------------------------


def send_frame(sock: socket.socket, payload: bytes) -> None:
    """One frame: a 4-byte big-endian length, then ``payload``."""
    if len(payload) > MAX_FRAME_BYTES:
        raise ChannelFallback(f"a frame of {len(payload)} bytes is over the channel's limit")
    sock.sendall(_HEADER.pack(len(payload)) + payload)


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    chunks = []
    remaining = size
    while remaining:
        chunk = sock.recv(min(remaining, 1 << 20))
        if not chunk:
            raise ChannelClosed("connection closed")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def recv_frame(sock: socket.socket) -> bytes:
    (size,) = _HEADER.unpack(_recv_exact(sock, _HEADER.size))
    if size > MAX_FRAME_BYTES:
        raise ChannelClosed(f"a frame of {size} bytes announced, over the channel's limit")
    return _recv_exact(sock, size)


def handshake_mac(token: bytes, role: bytes, server_nonce: bytes, client_nonce: bytes) -> bytes:
    """HMAC-SHA256 under ``token`` binding the protocol, the role and both nonces."""
    message = b"|".join((PROTOCOL_NAME, role, server_nonce, client_nonce))
    return hmac.new(token, message, hashlib.sha256).digest()


# --- server (inside the actor) ---------------------------------------------------------


class ChannelServer:
    """Serves ``dispatch(table, method, args)`` to token holders, one thread per connection.

    ``dispatch`` must run the call as the host's Ray call of that name does
    (the ``TableHost`` passes a function that takes the table's lock).
    """

    def __init__(self, host: str, dispatch: Callable[[str, str, tuple[Any, ...]], Any]) -> None:
        token = secrets.token_bytes(32)
        outer = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                outer._serve(self.request)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._dispatch = dispatch
        self._token = token
        self._server = Server((host, 0), Handler)
        port = self._server.server_address[1]
        self.address = ChannelAddress(host, int(port), token)
        thread = threading.Thread(
            target=self._server.serve_forever, name="raydelta-channel", daemon=True
        )
        thread.start()

    def _handshake(self, sock: socket.socket) -> bool:
        server_nonce = secrets.token_bytes(NONCE_BYTES)
        send_frame(sock, server_nonce)
        answer = recv_frame(sock)
        if len(answer) != NONCE_BYTES + hashlib.sha256().digest_size:
            return False
        client_nonce, mac = answer[:NONCE_BYTES], answer[NONCE_BYTES:]
        expected = handshake_mac(self._token, b"client", server_nonce, client_nonce)
        if not hmac.compare_digest(mac, expected):
            return False
        send_frame(sock, handshake_mac(self._token, b"server", server_nonce, client_nonce))
        return True

    def _serve(self, sock: socket.socket) -> None:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(CONNECT_TIMEOUT_S)
            if not self._handshake(sock):
                logger.warning("channel: a connection failed the handshake")
                return
            sock.settimeout(SERVER_IDLE_TIMEOUT_S)
            while True:
                body = recv_frame(sock)
                try:
                    call = _CALLS.validate_json(body)
                except ValidationError as error:
                    reason = f"not a channel call ({error.error_count()} errors)"
                    refusal = ChannelRefusal(reason=reason)
                    send_frame(sock, refusal.model_dump_json().encode())
                    return
                send_frame(sock, self._answer(call))
        except (ChannelClosed, ChannelFallback, OSError):
            return
        finally:
            with contextlib.suppress(OSError):
                sock.close()

    def _answer(self, call: Any) -> bytes:
        method: str = call.method
        try:
            answer = _answer_frame(method, self._dispatch(call.table, method, _call_args(call)))
        except Exception as error:  # sent back, raised in the caller (or re-sent by Ray)
            answer = _error_answer(error)
        payload = answer.model_dump_json().encode()
        if len(payload) > MAX_FRAME_BYTES:
            payload = UseRayAnswer(reason="reply over the frame limit").model_dump_json().encode()
        return payload

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


# --- client (in the table handle) -----------------------------------------------------


class ChannelClient:
    """One authenticated connection to one actor incarnation; not thread-safe
    (one per thread).

    Raises :class:`ChannelRefused` if the server does not prove the token,
    ``OSError`` (``TimeoutError`` included) if it cannot connect and finish the
    handshake within ``connect_timeout_s``.
    """

    def __init__(
        self,
        address: ChannelAddress,
        *,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        call_timeout_s: float = CALL_TIMEOUT_S,
    ) -> None:
        sock = socket.create_connection((address.host, address.port), timeout=connect_timeout_s)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            server_nonce = recv_frame(sock)
            if len(server_nonce) != NONCE_BYTES:
                raise ChannelRefused("not a raydelta channel")
            client_nonce = secrets.token_bytes(NONCE_BYTES)
            mac = handshake_mac(address.token, b"client", server_nonce, client_nonce)
            send_frame(sock, client_nonce + mac)
            proof = recv_frame(sock)
            expected = handshake_mac(address.token, b"server", server_nonce, client_nonce)
            if not hmac.compare_digest(proof, expected):
                raise ChannelRefused("the server did not prove the channel token")
            sock.settimeout(call_timeout_s)
        except BaseException:
            sock.close()
            raise
        self._sock = sock

    def call(self, table: str, method: str, args: tuple[Any, ...]) -> Any:
        """``table``'s method's result, or its exception re-raised here.

        Raises :class:`ChannelClosed` (or another ``OSError``, ``TimeoutError``
        included) when the connection broke or timed out: the call may or may
        not have run, and this client must be closed. Raises
        :class:`ChannelFallback` when the call or its answer does not fit the
        channel (the connection stays usable). Raises ``ValueError`` for a
        method the channel does not carry.
        """
        payload = _call_frame(table, method, args).model_dump_json().encode()
        send_frame(self._sock, payload)
        body = recv_frame(self._sock)
        try:
            answer = _REPLIES.validate_json(body)
        except ValidationError as error:
            raise ChannelClosed(f"an invalid reply from the actor: {error}") from None
        if not isinstance(answer, (*_ANSWER_KINDS[method], ErrorAnswer, UseRayAnswer)):
            raise ChannelClosed(f"a {answer.kind!r} reply to {method!r}")
        return _value_of(answer)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()
