"""``TableHost``: the Ray actor process that hosts many tables' coordinators.

Tables are virtual actors: a table's
:class:`~raydelta.actors.table.hosted.HostedTable` is activated inside a host
on the table's first call, and deactivated when idle for
:data:`IDLE_ENV` seconds or, least recently used first, when the host's
memory passes :data:`MEMORY_ENV`; its next call activates it again from the
log. Which host owns which table is :mod:`raydelta.actors.table.placement`;
the claim that makes that ownership exclusive is
:mod:`raydelta.actors.table.ownership`.

Invariants:
- A host serves a table only if the placement names it (a pooled host: the
  rendezvous over its view of the pool, and the table is not dedicated; a
  dedicated host: its one table) and it holds the table's current claim;
  otherwise the call raises :class:`~raydelta.protocol.errors.TableMovedError`
  and nothing was served (handles then send it to the owner).
- Each table has its own lock; the host's lock guards only its dict of
  tables. Commits run in the ``commits`` concurrency group, other calls in
  the default group's :data:`~raydelta.actors.table.placement.HOST_THREADS`
  threads, ``status`` in its own group outside every lock.
- ``max_restarts=-1`` and ``max_task_retries=-1``: if the process dies, Ray
  restarts the host and retries the calls in flight; tables reactivate from
  the log, and the coordinator's ``txnId`` check makes a retried commit
  exactly-once. A restarted host that finds itself off its node retires (its
  node's tables belong to the surviving hosts), and an incarnation superseded
  by a newer one of the same host exits when it meets a table claimed
  elsewhere (the incarnation fence of :mod:`raydelta.actors.table.incarnation`).
- One commit channel per host (:mod:`raydelta.actors.table.channel`), started
  on the first request for its address; a channel call names its table and
  runs exactly as the Ray call of the same name.
- It takes no CPU slot (``num_cpus=0``): hosts are mostly I/O and must not
  starve the tasks that do the heavy work.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import ray

from raydelta.actors.cluster import NAMESPACE
from raydelta.actors.table import placement
from raydelta.actors.table.channel import CHANNEL_METHODS, ChannelAddress, ChannelServer
from raydelta.actors.table.hosted import Deactivated, HostedTable
from raydelta.actors.table.incarnation import IncarnationUnconfirmed, gcs_fence
from raydelta.actors.table.ownership import claim_table, gcs_claims
from raydelta.actors.table.placement import is_dedicated, rendezvous, set_dedicated
from raydelta.protocol import table_properties as props
from raydelta.protocol.errors import TableMovedError
from raydelta.protocol.events import CommitReply, CommitRequest

logger = logging.getLogger(__name__)

COMMIT_THREADS = 16
"""Threads serving ``commit`` over Ray: concurrent writers' requests meet in
each table's queue, and one lock holder commits them as one group."""

IDLE_ENV = "RAYDELTA_TABLE_IDLE_S"
"""Seconds without a call after which a host deactivates a table
(default :data:`DEFAULT_IDLE_S`)."""

DEFAULT_IDLE_S = 600.0

MEMORY_ENV = "RAYDELTA_HOST_MEMORY_BYTES"
"""A host whose RSS passes this deactivates its least recently used tables
(default :data:`DEFAULT_MEMORY_BYTES`)."""

DEFAULT_MEMORY_BYTES = 4 << 30

HOUSEKEEPING_S = 1.0
"""How often a host refreshes its view of the pool and looks for tables to deactivate."""

SHED_FRACTION = 0.1
"""Under memory pressure, the share of idle tables deactivated per round."""

ACTIVATION_ATTEMPTS = 4

STATUS_INACTIVE_LIMIT = 1000
"""``status()`` names at most this many of the tables deactivated on a host."""


def _float_env(name: str, default: float) -> float:
    try:
        return float(os.environ[name])
    except (KeyError, ValueError):
        return default


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


@ray.remote(  # type: ignore[call-overload]  # the stubs lack concurrency_groups
    num_cpus=0,
    max_restarts=-1,
    max_task_retries=-1,
    concurrency_groups={"status": 1, "commits": COMMIT_THREADS},
)
class TableHost:
    """See the module docstring. Reach tables through
    :class:`raydelta.actors.table.client.TableClient`."""

    def __init__(self, name: str, node_id: str | None, dedicated: str | None) -> None:
        self._name = name
        self._node_id = node_id
        self._dedicated = dedicated
        self._started = time.monotonic()
        self._retired = node_id is not None and ray.get_runtime_context().get_node_id() != node_id
        self._fence = gcs_fence(str(ray.get_runtime_context().get_actor_id()), NAMESPACE)
        self._claims = gcs_claims(NAMESPACE)
        self._lock = threading.Lock()
        self._tables: dict[str, HostedTable] = {}
        self._activating: dict[str, threading.Lock] = {}
        self._options: dict[str, dict[str, Any] | None] = {}
        self._deactivated = 0
        self._idle_s = _float_env(IDLE_ENV, DEFAULT_IDLE_S)
        self._memory_limit = int(_float_env(MEMORY_ENV, DEFAULT_MEMORY_BYTES))
        self._channel: ChannelServer | None = None
        self._channel_failed = False
        if self._retired:
            logger.warning("%s restarted off its node %s: retiring", name, node_id)
            threading.Thread(target=self._retire, name="raydelta-retire", daemon=True).start()
        else:
            threading.Thread(target=self._housekeep, name="raydelta-host", daemon=True).start()

    # --- calls ---------------------------------------------------------------------------

    def call(
        self, table_uri: str, storage_options: dict[str, Any] | None, method: str, *args: Any
    ) -> Any:
        """``method(*args)`` on the table (activated if needed)."""
        return self._run(table_uri, storage_options, lambda table: getattr(table, method)(*args))

    @ray.method(concurrency_group="commits")
    def commit(
        self, table_uri: str, storage_options: dict[str, Any] | None, request: CommitRequest
    ) -> CommitReply:
        """Commit one request to the table (group commit: see :mod:`.hosted`)."""
        return self._run(table_uri, storage_options, lambda table: table.commit(request))  # type: ignore[no-any-return]

    def with_table(self, table_uri: str, function: Callable[[HostedTable], Any]) -> Any:
        """``function(hosted_table)`` in this process (tests and benchmarks look inside)."""
        return self._run(table_uri, self._options.get(table_uri), function)

    def _dispatch(self, table_uri: str, method: str, args: tuple[Any, ...]) -> Any:
        """Run a channel call as the Ray call of the same name."""
        if method not in CHANNEL_METHODS:
            raise ValueError(f"not a channel method: {method}")
        if table_uri not in self._options:  # storage options travel only through Ray
            raise _NeedsRay(f"{table_uri} was never opened through Ray on this host")
        return self._run(
            table_uri, self._options[table_uri], lambda table: getattr(table, method)(*args)
        )

    def _run(
        self,
        table_uri: str,
        storage_options: dict[str, Any] | None,
        action: Callable[[HostedTable], Any],
    ) -> Any:
        for _ in range(ACTIVATION_ATTEMPTS):
            table = self._table(table_uri, storage_options)
            try:
                return action(table)
            except Deactivated:  # closed while the call waited: a fresh activation serves it
                continue
            except TableMovedError:
                self._drop(table, release=False)
                self._exit_if_superseded()
                raise
        raise TableMovedError(f"{table_uri} kept being deactivated on {self._name}")

    def _exit_if_superseded(self) -> None:
        """A table of this host was claimed elsewhere, or a call came for a table
        placed elsewhere: if this process's node was declared dead, or Ray
        restarted this host meanwhile, this process is a zombie and exits (its
        calls are re-sent by their clients to the owners)."""
        with contextlib.suppress(IncarnationUnconfirmed):  # unreachable: the claims still fence
            self._fence.check()
        try:
            own = ray.get_runtime_context().get_node_id()
            alive = {node["NodeID"] for node in ray.nodes() if node.get("Alive")}  # type: ignore[no-untyped-call]
        except Exception:  # cannot tell: the claims still fence
            return
        if own not in alive:
            logger.error("%s: this node was declared dead: exiting before serving", self._name)
            os._exit(1)

    # --- activation ----------------------------------------------------------------------

    def _placed_here(self, table_uri: str, *, refresh: bool = False) -> bool:
        if self._retired:
            return False
        if self._dedicated is not None:
            return table_uri == self._dedicated
        return rendezvous(table_uri, placement.POOL.slots(refresh=refresh)).name == self._name

    def _table(self, table_uri: str, storage_options: dict[str, Any] | None) -> HostedTable:
        table = self._tables.get(table_uri)
        if table is not None and not table.closed:
            return table
        with self._lock:
            gate = self._activating.setdefault(table_uri, threading.Lock())
        with gate:
            table = self._tables.get(table_uri)
            if table is not None and not table.closed:
                return table
            return self._activate(table_uri, storage_options)

    def _activate(self, table_uri: str, storage_options: dict[str, Any] | None) -> HostedTable:
        """Claim and load the table (its activation gate is held)."""
        # a caller that sees the pool change before this host does: look again
        placed = self._placed_here(table_uri) or self._placed_here(table_uri, refresh=True)
        if not placed or (self._dedicated is None and is_dedicated(table_uri)):
            self._exit_if_superseded()
            raise TableMovedError(f"{table_uri} is not placed on {self._name}")
        claim = claim_table(table_uri, self._name, self._claims)
        try:
            table = HostedTable(table_uri, claim, storage_options)
        except BaseException:
            claim.release()
            raise
        if self._dedicated is None and props.is_true(table.table_property(props.DEDICATED_HOST)):
            set_dedicated(table_uri, True)  # the table asks for a host of its own
            table.close()
            raise TableMovedError(
                f"{table_uri} has {props.DEDICATED_HOST}: it moves to its own host"
            )
        self._options.setdefault(table_uri, storage_options)
        with self._lock:
            self._tables[table_uri] = table
        return table

    def _drop(self, table: HostedTable, *, release: bool) -> None:
        table.close(release=release)
        with self._lock:
            if self._tables.get(table.table_uri) is table:
                del self._tables[table.table_uri]
                self._deactivated += 1

    def release(self, table_uri: str) -> bool:
        """Deactivate the table now (``release_table``); whether it was active."""
        table = self._tables.get(table_uri)
        if table is None:
            return False
        self._drop(table, release=True)
        return True

    def release_under(self, roots: list[str]) -> list[str]:
        """Deactivate every active table at or under one of ``roots`` (URIs);
        returns their URIs (tests' teardown, dropping a directory of tables)."""
        with self._lock:
            tables = list(self._tables.values())
        released = []
        for table in tables:
            uri = table.table_uri
            if any(uri == root or uri.startswith(root.rstrip("/") + "/") for root in roots):
                self._drop(table, release=True)
                released.append(uri)
        return released

    # --- housekeeping --------------------------------------------------------------------

    def _housekeep(self) -> None:
        while True:
            time.sleep(HOUSEKEEPING_S)
            try:
                placement.POOL.slots(refresh=True)
                self._shed()
            except Exception:  # housekeeping must never take the host down
                logger.warning("table host housekeeping failed", exc_info=True)

    def _shed(self) -> None:
        """Deactivate the tables placed elsewhere now, those idle too long, and,
        under memory pressure, the least recently used share of the rest."""
        now = time.monotonic()
        with self._lock:
            tables = list(self._tables.values())
        idle = sorted((t for t in tables if not t.busy), key=lambda t: t.last_used)
        for table in idle:
            if not self._placed_here(table.table_uri) or now - table.last_used > self._idle_s:
                self._drop(table, release=True)
        if _rss_bytes() > self._memory_limit:
            remaining = [t for t in idle if not t.closed]
            for table in remaining[: max(1, int(len(remaining) * SHED_FRACTION))]:
                self._drop(table, release=True)

    def _retire(self) -> None:
        """Leave for good (this incarnation runs off its node: see the module docstring)."""
        time.sleep(HOUSEKEEPING_S)
        ray.kill(ray.get_runtime_context().current_actor, no_restart=True)

    # --- channel and status --------------------------------------------------------------

    def channel_address(self) -> ChannelAddress | None:
        """Where this incarnation serves its commit channel, started on the first
        request (None: it cannot listen; use Ray only). The address holds the
        channel's secret token: it travels only through Ray."""
        with self._lock:
            if self._channel is None and not self._channel_failed:
                try:
                    address = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
                    self._channel = ChannelServer(address, self._dispatch)
                except OSError:
                    self._channel_failed = True
                    logger.warning("no commit channel on %s", self._name, exc_info=True)
            return None if self._channel is None else self._channel.address

    def ping(self) -> str:
        return self._name

    @ray.method(concurrency_group="status")
    def status(self) -> dict[str, Any]:
        """What ``raydelta status`` shows of this host and its active tables, from memory only."""
        with self._lock:
            tables = list(self._tables.values())
        active = {t.table_uri for t in tables}
        inactive = sorted(uri for uri in self._options if uri not in active)
        return {
            **self._fields(len(tables)),
            "tables": [t.status() for t in tables],
            "inactive": inactive[:STATUS_INACTIVE_LIMIT],
        }

    @ray.method(concurrency_group="status")
    def table_status(self, table_uri: str) -> dict[str, Any] | None:
        """One table's status with its host's (None when not active here)."""
        table = self._tables.get(table_uri)
        if table is None:
            return None
        return {**self._fields(len(self._tables)), **table.status()}

    def _fields(self, active: int) -> dict[str, Any]:
        context = ray.get_runtime_context()
        return {
            "host": self._name,
            "dedicated": self._dedicated,
            "node_id": context.get_node_id(),
            "node_ip": ray.util.get_node_ip_address(),  # type: ignore[no-untyped-call]
            "pid": os.getpid(),
            "host_restarts": self._fence.number - 1,
            "host_incarnation": self._fence.number,
            "uptime_s": time.monotonic() - self._started,
            "rss_bytes": _rss_bytes(),
            "channel": self._channel is not None,
            "active": active,
            "deactivated": self._deactivated,
            "known": len(self._options),
        }


class _NeedsRay(Exception):
    """A channel call the host cannot serve without what only Ray carries."""
