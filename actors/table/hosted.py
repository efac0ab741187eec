"""``HostedTable``: one table's coordinator as a table host holds it.

A :class:`~raydelta.actors.table.host.TableHost` holds many tables; each is
one ``HostedTable`` wrapping a
:class:`~raydelta.actors.table.coordinator.CommitCoordinator`, activated on
the first call and deactivated when idle (its state dropped, rebuilt from
the log on the next call).

Invariants:
- Each table has its own lock (shared with the host's channel threads): the
  calls of one table run one at a time, which is what turns concurrent
  writers into one serial history; calls to different tables of one host
  never wait for each other's lock.
- Group commit: a ``commit`` queues its request, then takes the lock; the
  lock holder commits every request queued so far, in arrival order, with
  :meth:`~raydelta.actors.table.coordinator.CommitCoordinator.commit_many`:
  each request is checked and rebased as it would be alone, each is its own
  version, the commit files are written together, and no caller is answered
  before its version is durable. A caller whose request a lock holder
  committed finds its reply when it gets the lock.
- Nothing is served without the table's claim
  (:mod:`raydelta.actors.table.ownership`): every call first checks it, so a
  host whose claim was superseded (the table moved, or the host was declared
  dead and came back) serves nothing and raises
  :class:`~raydelta.protocol.errors.TableMovedError`.
- :meth:`close` (deactivation) runs under the lock: a call that finds the
  table closed raises :class:`Deactivated` before doing anything, and the
  host sends it to a fresh activation; a commit a lock holder already
  committed still gets its reply. Nothing acknowledged is lost: a reply
  comes only after the version is durable in the log.
- Every version the table learns of (its own commits, and commits other
  engines wrote, picked up by ``catch_up``) is published once, in order, as a
  :class:`~raydelta.protocol.events.CommitPublished`, fire-and-forget: a slow
  or dead subscriber never delays or fails a commit. Subscriptions live in
  the GCS (:mod:`raydelta.actors.table.subscriptions`); on activation each
  subscriber is asked for ``last_seen_version()`` and sent the commits of the
  window after it. Delivery is at least once: subscribers must be idempotent.
- Commits fold nothing into the file tables: once enough are pending
  (:meth:`~raydelta.actors.table.coordinator.CommitCoordinator.fold_work`),
  a background thread folds them outside the lock and installs the result
  under it, so no commit waits for a fold.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

from raydelta.actors.table.coordinator import CommitCoordinator
from raydelta.actors.table.history import PendingFold
from raydelta.actors.table.metrics import CommitCounters, TableMetrics
from raydelta.actors.table.ownership import TableClaim
from raydelta.actors.table.subscriptions import (
    Subscription,
    last_seen_version,
    load_subscribers,
    save_subscribers,
)
from raydelta.protocol.actions import Action
from raydelta.protocol.errors import VersionNotFoundError
from raydelta.protocol.events import CommitCommitted, CommitReply, CommitRequest
from raydelta.protocol.reconciliation import TableHead, TableState

logger = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])


class Deactivated(Exception):
    """The table was deactivated while the call waited: the host retries it on
    a fresh activation (never seen outside the host)."""


def _serial(method: F) -> F:
    """Run ``method`` under the table's lock, after the claim check, then
    publish any version it committed or picked up."""

    @wraps(method)
    def locked(self: HostedTable, *args: Any, **kwargs: Any) -> Any:
        self._in_flight += 1  # a racy counter is fine: status() only reports it
        self.last_used = time.monotonic()
        try:
            with self._lock:
                self._serve_check()
                result = method(self, *args, **kwargs)
                self._publish_new_versions()
                return result
        finally:
            self._in_flight -= 1

    return locked  # type: ignore[return-value]


class HostedTable:
    """See the module docstring. Built by the host on a table's first call;
    raises what loading the table raises (an unreachable store...)."""

    def __init__(
        self, table_uri: str, claim: TableClaim, storage_options: dict[str, Any] | None = None
    ) -> None:
        self._lock = threading.RLock()
        self._queue_lock = threading.Lock()
        self._queue: list[_Slot] = []
        self._in_flight = 0
        self._started = self.last_used = time.monotonic()
        self._claim = claim
        self.closed = False
        self._counters = CommitCounters()
        self._metrics = TableMetrics(table_uri)
        self._coordinator = CommitCoordinator(table_uri, storage_options=storage_options)
        self._subscribers: dict[str, Subscription] = load_subscribers(table_uri)
        self._published_through = self._coordinator.version
        self._resend_missed_events()
        self._folding = False

    @property
    def table_uri(self) -> str:
        return self._coordinator.table_uri

    @property
    def claim(self) -> TableClaim:
        return self._claim

    def table_property(self, key: str) -> str | None:
        """A table property at the latest version this table knows (None: unset,
        or no table yet)."""
        metadata = self._coordinator.history.head.metadata
        return None if metadata is None else metadata.configuration.get(key)

    @property
    def busy(self) -> bool:
        """Whether a call is running or waiting for this table."""
        return self._in_flight > 0

    def _serve_check(self) -> None:
        """Raise unless this table may serve now (the lock is held)."""
        if self.closed:
            raise Deactivated(self.table_uri)
        self._claim.check()

    def close(self, *, release: bool = True) -> None:
        """Deactivate: serve nothing more, fail queued uncommitted requests with
        :class:`Deactivated` (their callers retry on a fresh activation), and
        release the claim (``release=False`` when it was superseded)."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            with self._queue_lock:
                batch, self._queue = self._queue, []
            for slot in batch:
                slot.fill(Deactivated(self.table_uri))
        if release:
            try:
                self._claim.release()
            except Exception:  # the next owner then waits one lease: slower, still safe
                logger.warning("could not release the claim on %s", self.table_uri, exc_info=True)

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
        return self._coordinator.create(request)

    def commit(self, request: CommitRequest) -> CommitReply:
        """Commit one request (group commit: see the module docstring)."""
        slot = _Slot(request)
        with self._queue_lock:
            self._queue.append(slot)
        self._in_flight += 1
        self.last_used = time.monotonic()
        try:
            with self._lock:
                if not slot.done:
                    self._check_before_commit(slot)
                    self._commit_queued()
                    self._publish_new_versions()
                    self._fold_in_background()
        finally:
            self._in_flight -= 1
        return slot.reply()

    def _check_before_commit(self, slot: _Slot) -> None:
        """:meth:`_serve_check`; on failure this caller's request leaves the
        queue, so that it is never committed behind an error reply (the lock is held)."""
        try:
            self._serve_check()
        except BaseException:
            with self._queue_lock:
                if slot in self._queue:
                    self._queue.remove(slot)
            raise

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

    def status(self) -> dict[str, Any]:
        """This table's part of ``raydelta status``, from memory only (no lock, no I/O).

        ``queue_depth`` counts the calls the host holds for this table (running,
        or waiting for the lock); calls still queued in Ray are not visible."""
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
            "claim": self._claim.number,
            # the table's activations across the cluster: a move or a lost host is a restart
            "incarnation": self._claim.number,
            "restarts": self._claim.number - 1,
            "active_s": time.monotonic() - self._started,
            "idle_s": time.monotonic() - self.last_used,
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
        save_subscribers(self._coordinator.table_uri, self._subscribers)

    @_serial
    def unsubscribe(self, name: str) -> None:
        self._subscribers.pop(name, None)
        save_subscribers(self._coordinator.table_uri, self._subscribers)

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
                    save_subscribers(self._coordinator.table_uri, self._subscribers)

    def _resend_missed_events(self) -> None:
        """After a restart: re-send what each subscriber may have missed."""
        latest = self._coordinator.version
        for name, subscription in list(self._subscribers.items()):
            seen = last_seen_version(subscription.handle)
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
