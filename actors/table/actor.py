"""``TableActor``: the Ray actor that owns one table's history.

One named, detached, restartable actor per table URI, in the ``raydelta``
namespace, so a notebook, a Ray job and a Spark driver all reach the same
one. It wraps a :class:`~raydelta.actors.table.coordinator.CommitCoordinator`.

Invariants:
- Method calls run one at a time under one lock (shared with the channel's
  threads), which is what turns concurrent writers into one serial history.
  Other methods run in Ray's order of the calls of one caller; ``commit``
  runs in its own concurrency group of threads, so two commits a caller
  sends without waiting for the first reply may land in either order.
- Group commit: a ``commit`` call (over Ray or the channel) queues its
  request, then takes the lock; the lock holder commits every request queued
  so far, in arrival order, with
  :meth:`~raydelta.actors.table.coordinator.CommitCoordinator.commit_many`: each
  request is checked and rebased as it would be alone, each is its own
  version, the commit files are written together (fsynced concurrently,
  linked in version order), and no caller is answered before its version is
  durable. A caller whose request a lock holder committed finds its reply
  when it gets the lock. One writer alone makes groups of one.
- ``max_restarts=-1`` and ``max_task_retries=-1``: if the process dies, Ray
  restarts the actor (which rebuilds from the log) and retries the calls in
  flight; the coordinator's ``txnId`` check makes the retry exactly-once.
- Every version the actor learns of (its own commits, and commits other
  engines wrote, picked up by ``catch_up``) is published once, in order, as a
  :class:`~raydelta.protocol.events.CommitPublished`, fire-and-forget: a slow or dead
  subscriber never delays or fails a commit. Subscriptions (and the version
  each started after) live in the cluster's GCS key-value store, so a
  restarted actor still has them; before serving anything it asks each
  subscriber for ``last_seen_version()`` and re-sends the commits of its
  window after that, so events a crash swallowed are delivered. A subscriber
  without ``last_seen_version`` gets the latest commit again instead. Delivery
  is at least once: subscribers must be idempotent.
- Its hot, small methods can also be served over a direct socket (the
  opt-in commit channel, :mod:`raydelta.actors.table.channel`), started the first
  time a client asks for :meth:`channel_address`; a channel call runs
  exactly as the Ray call of the same name, under the same lock.
- Commits fold nothing into the file tables: once enough are pending
  (:meth:`~raydelta.actors.table.coordinator.CommitCoordinator.fold_work`), a
  background thread folds them outside the lock and installs the result
  under it, so no commit waits for a fold.
- It takes no CPU slot (``num_cpus=0``): a table actor is mostly I/O and
  must not starve the tasks that do the heavy work.
- :meth:`TableActor.status` runs in its own concurrency group, outside the
  lock: it answers while commits queue, reads only counters, and never
  changes state.
- An incarnation that is no longer the actor's (its node declared dead and
  the actor restarted elsewhere while the old process lives on) serves no
  commit, over Ray or the channel: every commit first passes the
  incarnation fence of :mod:`raydelta.actors.table.incarnation`, whose numbers
  also give ``status()["restarts"]``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps
from typing import Any, TypeVar

import ray

from raydelta.actors.cluster import NAMESPACE, table_actor_name
from raydelta.actors.table.channel import CHANNEL_METHODS, ChannelAddress, ChannelServer
from raydelta.actors.table.coordinator import CommitCoordinator
from raydelta.actors.table.history import PendingFold
from raydelta.actors.table.incarnation import gcs_fence
from raydelta.actors.table.metrics import CommitCounters, TableMetrics
from raydelta.protocol.actions import Action
from raydelta.protocol.errors import VersionNotFoundError
from raydelta.protocol.events import CommitCommitted, CommitReply, CommitRequest
from raydelta.protocol.reconciliation import TableHead, TableState

logger = logging.getLogger(__name__)


actor_name = table_actor_name


F = TypeVar("F", bound=Callable[..., Any])

COMMIT_THREADS = 16
"""Threads serving ``commit`` over Ray: concurrent writers' requests meet in the
queue, and one lock holder commits them as one group."""


def _serial(method: F) -> F:
    """Run ``method`` under the actor's lock (Ray calls and channel calls alike),
    then publish any version it committed or picked up."""

    @wraps(method)
    def locked(self: TableActor, *args: Any, **kwargs: Any) -> Any:
        self._in_flight += 1  # a racy counter is fine: status() only reports it
        try:
            with self._lock:
                result = method(self, *args, **kwargs)
                self._publish_new_versions()
                return result
        finally:
            self._in_flight -= 1

    return locked  # type: ignore[return-value]


@ray.remote(  # type: ignore[call-overload]  # the stubs lack concurrency_groups
    num_cpus=0,
    max_restarts=-1,
    max_task_retries=-1,
    concurrency_groups={"status": 1, "commits": COMMIT_THREADS},
)
class TableActor:
    """See the module docstring. Reach it through
    :meth:`raydelta.actors.table.client.TableClient.open`."""

    def __init__(self, table_uri: str, storage_options: dict[str, Any] | None = None) -> None:
        self._lock = threading.RLock()
        self._queue_lock = threading.Lock()
        self._queue: list[_Slot] = []
        self._in_flight = 0
        self._started = time.monotonic()
        self._fence = gcs_fence(str(ray.get_runtime_context().get_actor_id()), NAMESPACE)
        self._incarnation = self._fence.number
        self._counters = CommitCounters()
        self._metrics = TableMetrics(table_uri)
        self._coordinator = CommitCoordinator(table_uri, storage_options=storage_options)
        self._subscribers: dict[str, Subscription] = _load_subscribers(table_uri)
        self._published_through = self._coordinator.version
        self._resend_missed_events()
        self._channel: ChannelServer | None = None
        self._channel_failed = False
        self._folding = False

    def channel_address(self) -> ChannelAddress | None:
        """Where this incarnation serves its commit channel, started on the first
        request (None: it cannot listen; use Ray only). The address holds the
        channel's secret token: it travels only through Ray."""
        with self._lock:
            if self._channel is None and not self._channel_failed:
                try:
                    host = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
                    self._channel = ChannelServer(host, self._dispatch)
                except OSError:
                    self._channel_failed = True
                    logger.warning(
                        "no commit channel for %s", self._coordinator.table_uri, exc_info=True
                    )
            return None if self._channel is None else self._channel.address

    def _dispatch(self, method: str, args: tuple[Any, ...]) -> Any:
        """Run a channel call as the Ray method of the same name."""
        if method not in CHANNEL_METHODS:
            raise ValueError(f"not a channel method: {method}")
        return getattr(self, method)(*args)

    @_serial
    def ping(self) -> int:
        return self._coordinator.version

    @_serial
    def version(self) -> int:
        """Latest version, after picking up commits other engines wrote."""
        self._coordinator.catch_up()
        return self._coordinator.version

    @_serial
    def create(self, request: CommitRequest) -> CommitReply:
        self._fence.check()
        return self._coordinator.create(request)

    @ray.method(concurrency_group="commits")
    def commit(self, request: CommitRequest) -> CommitReply:
        """Commit one request (group commit: see the module docstring)."""
        slot = _Slot(request)
        with self._queue_lock:
            self._queue.append(slot)
        self._in_flight += 1
        try:
            with self._lock:
                if not slot.done:
                    self._commit_queued()
                    self._publish_new_versions()
                    self._fold_in_background()
        finally:
            self._in_flight -= 1
        return slot.reply()

    def _fold_in_background(self) -> None:
        """Start folding the pending commits in a thread, if enough wait and
        no fold runs (the lock is held)."""
        if self._folding:
            return
        work = self._coordinator.fold_work()
        if work is None:
            return
        self._folding = True
        threading.Thread(target=self._fold, args=(work,), name="raydelta-fold", daemon=True).start()

    def _fold(self, work: PendingFold | None) -> None:
        """Fold until fewer than the threshold wait (commits go on meanwhile)."""
        try:
            while work is not None:
                folded = work.run()
                with self._lock:
                    self._coordinator.install_fold(work, folded)
                    work = self._coordinator.fold_work()
                    if work is None:
                        self._folding = False
        except Exception:  # the commits stay pending; a snapshot folds them
            logger.warning("folding pending commits failed", exc_info=True)
            self._folding = False

    def _commit_queued(self) -> None:
        """Commit every queued request, in arrival order, as one group (the lock is held)."""
        with self._queue_lock:
            batch, self._queue = self._queue, []
        try:
            self._fence.check()
        except BaseException as error:
            for slot in batch:
                slot.fill(error)
            raise
        start = time.perf_counter()
        try:
            results = self._coordinator.commit_many([slot.request for slot in batch])
        except BaseException as error:
            for slot in batch:
                slot.fill(error)
            raise
        elapsed = (time.perf_counter() - start) / len(batch)
        for slot, result in zip(batch, results, strict=True):
            if not isinstance(result, Exception):
                rebased = isinstance(result, CommitCommitted) and bool(result.rebased_over)
                self._counters.record(result.kind, rebased=rebased)
                self._metrics.commit(result.kind, elapsed, rebased=rebased)
            slot.fill(result)

    @ray.method(concurrency_group="status")
    def status(self) -> dict[str, Any]:
        """What ``raydelta status`` shows, from memory only (no lock, no I/O).

        ``queue_depth`` counts the calls this process holds (running, or
        waiting for the lock: channel calls); calls still queued in Ray in
        front of the actor are not visible to it."""
        context = ray.get_runtime_context()
        counters = self._counters
        return {
            "table": self._coordinator.table_uri,
            "version": self._coordinator.version,
            "queue_depth": self._in_flight,
            "commits": counters.outcomes.get("committed", 0),
            "commits_per_second": counters.commits_per_second(),
            "conflicts": counters.outcomes.get("conflict", 0),
            "rejected": counters.outcomes.get("rejected", 0),
            "rebased": counters.rebased,
            "restarts": self._incarnation - 1,
            "incarnation": self._incarnation,
            "uptime_s": time.monotonic() - self._started,
            "node_id": context.get_node_id(),
            "node_ip": ray.util.get_node_ip_address(),  # type: ignore[no-untyped-call]
            "pid": os.getpid(),
            "channel": self._channel is not None,
        }

    @_serial
    def head(self) -> TableHead:
        """Protocol, metadata, txns and domains at the latest version, no files."""
        self._coordinator.catch_up()
        return self._coordinator.head()

    @_serial
    def state(self) -> TableState:
        """The whole reconciled state (ships the file tables: use sparingly)."""
        self._coordinator.catch_up()
        return self._coordinator.state()

    @_serial
    def tail(self, since_version: int) -> tuple[int, list[tuple[int, list[Action]]] | None]:
        """``(latest, commits after since_version)``; None when out of the window."""
        self._coordinator.catch_up()
        return self._coordinator.version, self._coordinator.tail(since_version)

    @_serial
    def timestamp(self) -> int:
        return self._coordinator.snapshot().timestamp

    @_serial
    def reload(self) -> int:
        self._coordinator.reload()
        return self._coordinator.version

    @_serial
    def subscribe(self, name: str, handle: Any) -> None:
        """``handle.on_commit.remote(event)`` is called for every version after
        the current one (see the module docstring)."""
        self._subscribers[name] = Subscription(handle, self._published_through)
        _save_subscribers(self._coordinator.table_uri, self._subscribers)

    @_serial
    def unsubscribe(self, name: str) -> None:
        self._subscribers.pop(name, None)
        _save_subscribers(self._coordinator.table_uri, self._subscribers)

    def _publish_new_versions(self) -> None:
        latest = self._coordinator.version
        if latest <= self._published_through:
            return
        first, self._published_through = self._published_through + 1, latest
        if self._subscribers:
            self._send(range(first, latest + 1), list(self._subscribers))

    def _send(self, versions: range, names: list[str]) -> None:
        for version in versions:
            try:
                event = self._coordinator.published_event(version)
            except VersionNotFoundError:  # older than the window (a long catch-up)
                continue
            for name in names:
                subscription = self._subscribers.get(name)
                if subscription is None or version <= subscription.since:
                    continue
                try:
                    subscription.handle.on_commit.remote(event)
                except Exception:  # a dead subscriber must never fail a commit
                    logger.warning("dropping subscriber %s", name, exc_info=True)
                    self._subscribers.pop(name, None)
                    _save_subscribers(self._coordinator.table_uri, self._subscribers)

    def _resend_missed_events(self) -> None:
        """After a restart: re-send what each subscriber may have missed."""
        latest = self._coordinator.version
        for name, subscription in list(self._subscribers.items()):
            seen = _last_seen_version(subscription.handle)
            after = latest - 1 if seen is None else seen
            self._send(range(max(after, subscription.since) + 1, latest + 1), [name])


class _Slot:
    """One queued commit request and, once its group is committed, its outcome."""

    __slots__ = ("done", "request", "result")

    def __init__(self, request: CommitRequest) -> None:
        self.request = request
        self.done = False
        self.result: CommitReply | BaseException | None = None

    def fill(self, result: CommitReply | BaseException) -> None:
        self.result = result
        self.done = True

    def reply(self) -> CommitReply:
        if isinstance(self.result, BaseException):
            raise self.result
        assert self.result is not None
        return self.result


@dataclass(frozen=True)
class Subscription:
    """A subscriber's handle and the version its subscription started after."""

    handle: Any
    since: int


LAST_SEEN_TIMEOUT_S = 5.0


def _last_seen_version(handle: Any) -> int | None:
    """The subscriber's ``last_seen_version()``, or None if it has none or does
    not answer in time."""
    try:
        method = handle.last_seen_version
    except AttributeError:
        return None
    try:
        return int(ray.get(method.remote(), timeout=LAST_SEEN_TIMEOUT_S))
    except Exception:
        logger.warning("no last_seen_version from a subscriber", exc_info=True)
        return None


def _subscribers_key(table_uri: str) -> bytes:
    return f"subscribers:{table_uri}".encode()


def _load_subscribers(table_uri: str) -> dict[str, Subscription]:
    """Subscriptions a previous incarnation of this table's actor saved."""
    from ray import cloudpickle
    from ray.experimental import internal_kv

    data = internal_kv._internal_kv_get(_subscribers_key(table_uri), namespace=NAMESPACE)
    if not data:
        return {}
    try:
        loaded: dict[str, Subscription] = cloudpickle.loads(data)
    except Exception:  # a subscriber's class is gone: start without it
        logger.warning("could not restore subscribers of %s", table_uri, exc_info=True)
        return {}
    return {k: v for k, v in loaded.items() if isinstance(v, Subscription)}


def forget_subscribers(table_uri: str) -> None:
    """Drop the saved subscriptions of a table (its actors were stopped)."""
    from ray.experimental import internal_kv

    internal_kv._internal_kv_del(_subscribers_key(table_uri), namespace=NAMESPACE)


def _save_subscribers(table_uri: str, subscribers: dict[str, Subscription]) -> None:
    from ray import cloudpickle
    from ray.experimental import internal_kv

    data: bytes = cloudpickle.dumps(subscribers)  # type: ignore[no-untyped-call]
    internal_kv._internal_kv_put(_subscribers_key(table_uri), data, namespace=NAMESPACE)
