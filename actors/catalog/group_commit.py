"""Group commit of ratifications, inside the ``Catalog`` actor.

The catalog's durable write is one SQLite transaction ending in an fsync
(a few ms on a busy disk). Concurrent writers each paying for their own
fsync serialize on the disk; :class:`GroupRatifier` lets the commits that
queue up while one transaction is being made durable share the next one
(:meth:`~raydelta.storage.catalog.ratified_store.RatifiedCommitStore.ratify_many`).

How a commit uses it (the actor runs commits on several threads):

1. Under the actor's lock the table's coordinator checks, rebases and
   numbers the commit and :meth:`GroupRatifier.submit`\\ s its ratification;
   the coordinator applies it to its in-memory state so the next commit is
   judged against it.
2. Outside the lock, :meth:`GroupRatifier.wait` returns once the
   ratification is durable. The first waiter that finds no transaction in
   progress becomes the *leader*: it takes everything queued and writes it in
   one transaction; the others wait for it (leader/follower: a lone writer
   flushes its own commit, no thread hand-off).
3. Only then is the client answered.

Invariants:
- Durable before answered: :meth:`wait` returns only after the store's
  transaction holding that ratification committed; it raises the store's
  error when it did not.
- Order: tickets are written in submission order, one transaction at a
  time, so version ``v`` is never durable before ``v - 1`` of the same table
  (the store refuses it anyway), and ``on_durable`` (the publisher's
  hand-off) sees each table's versions in order.
- A failed transaction fails its ratifications and every one queued after
  it (they were numbered on top of it); the tables concerned are reported to
  ``on_failure`` so the actor reloads their coordinators from the store
  before their next use. Nothing speculative is ever durable: the store
  accepts only ``latest + 1``.
- Readers that must not see a version before it is durable wait for
  :meth:`settle` (every ticket submitted so far written, or failed).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from raydelta.actors.faults import crash_point
from raydelta.storage.catalog.ratified_store import Ratification, RatifiedCommitStore

MAX_GROUP = 512
"""Ratifications written in one transaction at most."""


@dataclass(eq=False)
class Ticket:
    """One submitted ratification, and the bytes its published file must hold."""

    ratification: Ratification
    data: bytes
    done: bool = False
    error: BaseException | None = field(default=None, repr=False)


class GroupRatifier:
    """Leader/follower group commit over a :class:`RatifiedCommitStore` (module doc)."""

    def __init__(
        self,
        store: RatifiedCommitStore,
        *,
        on_durable: Callable[[Ticket], None],
        on_failure: Callable[[set[str]], None],
    ) -> None:
        self._store = store
        self._on_durable = on_durable
        self._on_failure = on_failure
        self._cond = threading.Condition()
        self._queue: list[Ticket] = []
        self._flushing = False
        self._last: Ticket | None = None
        self.transactions = 0
        """Store transactions written (for measurement)."""
        self.ratified = 0

    @property
    def last(self) -> Ticket | None:
        """The latest ticket submitted (None before the first)."""
        with self._cond:
            return self._last

    def submit(self, ratification: Ratification, data: bytes) -> Ticket:
        """Queue ``ratification`` after every ticket submitted before it."""
        ticket = Ticket(ratification, data)
        with self._cond:
            self._queue.append(ticket)
            self._last = ticket
        return ticket

    def settle(self) -> None:
        """Wait until every ticket submitted so far is durable or failed."""
        last = self.last
        if last is not None:
            self._wait(last)

    def wait(self, ticket: Ticket | None) -> None:
        """Return once ``ticket`` is durable; raise the store's error if it is not."""
        if ticket is None:
            return
        self._wait(ticket)
        if ticket.error is not None:
            raise ticket.error

    def _wait(self, ticket: Ticket) -> None:
        with self._cond:
            while not ticket.done:
                if self._flushing or not self._queue:
                    self._cond.wait()
                    continue
                self._flushing = True
                batch, self._queue = self._queue[:MAX_GROUP], self._queue[MAX_GROUP:]
                self._cond.release()
                try:
                    self._flush(batch)
                finally:
                    self._cond.acquire()
                    self._flushing = False
                    self._cond.notify_all()

    def _flush(self, batch: Sequence[Ticket]) -> None:
        """Write ``batch`` in one store call; settle its tickets (and, on failure,
        the ones queued after it)."""
        written = 0
        error: BaseException | None = None
        try:
            crash_point("catalog_before_ratify")
            written = self._store.ratify_many([t.ratification for t in batch])
            crash_point("catalog_after_ratify")
        except BaseException as failure:  # handed to every waiter
            error = failure
            written = int(getattr(failure, "ratified_before", 0))
        for ticket in batch[:written]:
            self._on_durable(ticket)
        failed: list[Ticket] = list(batch[written:])
        with self._cond:
            self.transactions += 1
            self.ratified += written
            if error is not None:  # the queued ones were numbered on top of the failed ones
                failed.extend(self._queue)
                self._queue = []
            for ticket in batch[:written]:
                ticket.done = True
            for ticket in failed:
                ticket.error, ticket.done = error, True
        if failed:
            self._on_failure({t.ratification.table_id for t in failed})


__all__ = ["MAX_GROUP", "GroupRatifier", "Ticket"]
