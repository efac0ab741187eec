"""Publishing ratified commits to ``_delta_log/<v>.json``, inside the ``Catalog`` actor.

CATALOG_MANAGED.md, "Publishing Commits": copying ratified version ``v`` to
``_delta_log/<v>.json``, in order, promptly. The :class:`Publisher` is one
background thread of the catalog's process; the commit path hands it each
ratified version (:meth:`Publisher.submit`) and never waits for it.

Invariants:
- Per table, strictly in version order: ``v`` is written only after ``v - 1``
  was written, verified and marked published.
- Idempotent: the file is created with put-if-absent; a file already there
  with the same actions counts as published (a crash after the write, a
  client that published too). A file with *different* content is reported
  loudly (``logger.error`` and :meth:`Publisher.errors`) and that table's
  publishing stops: the catalog keeps serving the ratified commit, which
  readers must prefer over the published file anyway.
- A version is forgotten by the store (``mark_published``) only after the
  published file was made durable, read back and found equal to the
  ratified content. The versions queued together are published as one
  batch (:meth:`LogStore.put_if_absent_many`: on local disks their files
  are written and fsynced concurrently, then linked into place strictly in
  version order), their names made durable (:meth:`LogStore.sync_names`:
  one directory fsync), verified, and marked with one store write
  (``mark_published(v)`` covers every version <= v). A version's publish
  lag is measured when its file became visible.
- The backlog of one table (ratified, not yet published) is visible
  (:meth:`Publisher.backlog`) so the catalog can refuse new commits past its
  bound instead of piling up without limit.
- Publish lags (ratified → file visible) of the recent commits are kept for
  measurement (:meth:`Publisher.lags_ms`).
- ``on_published(table_id, v)`` (the maintenance hook) is called on this
  thread after ``mark_published`` covered ``v``, outside every lock, and
  must not block; an error it raises is logged, never stops publishing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from raydelta.actors.faults import crash_point
from raydelta.protocol.actions import parse_actions
from raydelta.protocol.file_names import commit_name
from raydelta.storage.log.store import LogStore

logger = logging.getLogger(__name__)

LAGS_KEPT = 100_000
MAX_BATCH = 256
"""Versions of one table published before one ``mark_published`` covers them."""


@dataclass
class _TableQueue:
    store: LogStore
    pending: deque[tuple[int, bytes, float]] = field(default_factory=deque)
    """``(version, data, ratified_at)`` in version order."""
    published_through: int = -1
    failed: str | None = None


class Publisher:
    """The catalog's publishing thread (see the module docstring).

    ``mark_published(table_id, version)`` tells the durable store; it is
    called from this thread only.
    """

    def __init__(
        self,
        mark_published: Callable[[str, int], None],
        *,
        on_published: Callable[[str, int], None] | None = None,
    ) -> None:
        self._mark_published = mark_published
        self._on_published = on_published
        self._tables: dict[str, _TableQueue] = {}
        self._wake = threading.Condition()
        self._lags: deque[float] = deque(maxlen=LAGS_KEPT)
        self._paused = False
        self._thread = threading.Thread(target=self._run, name="catalog-publisher", daemon=True)
        self._thread.start()

    def submit(self, table_id: str, store: LogStore, version: int, data: bytes) -> None:
        """Publish ``version`` of ``table_id`` after the versions submitted before it."""
        with self._wake:
            queue = self._tables.get(table_id)
            if queue is None:
                queue = self._tables[table_id] = _TableQueue(store, published_through=version - 1)
            if queue.pending and queue.pending[-1][0] >= version:
                return  # submitted already (a recovery racing a commit)
            if not queue.pending and version <= queue.published_through:
                return
            queue.pending.append((version, data, time.monotonic()))
            self._wake.notify()

    def forget(self, table_id: str) -> None:
        with self._wake:
            self._tables.pop(table_id, None)

    def backlog(self, table_id: str) -> int:
        """Versions of ``table_id`` ratified and not yet published."""
        with self._wake:
            queue = self._tables.get(table_id)
            return 0 if queue is None else len(queue.pending)

    def pending_data(self, table_id: str, version: int) -> bytes | None:
        """The exact bytes ``version`` of ``table_id`` will be published with, while
        it waits to be published (None otherwise)."""
        with self._wake:
            queue = self._tables.get(table_id)
            if queue is None:
                return None
            return next((data for v, data, _ in queue.pending if v == version), None)

    def published_through(self, table_id: str) -> int | None:
        with self._wake:
            queue = self._tables.get(table_id)
            return None if queue is None else queue.published_through

    def errors(self) -> dict[str, str]:
        """``{table_id: why its publishing stopped}``."""
        with self._wake:
            return {t: q.failed for t, q in self._tables.items() if q.failed is not None}

    def lags_ms(self) -> list[float]:
        with self._wake:
            return list(self._lags)

    def clear_lags(self) -> None:
        with self._wake:
            self._lags.clear()

    def pause(self, paused: bool) -> None:
        """Stop (or resume) publishing: for tests of a publisher falling behind."""
        with self._wake:
            self._paused = paused
            self._wake.notify()

    def _next(self) -> tuple[str, _TableQueue, list[tuple[int, bytes, float]]]:
        """A table with versions to publish, and those versions (in order)."""
        with self._wake:
            while True:
                if not self._paused:
                    for table_id, queue in self._tables.items():
                        if queue.pending and queue.failed is None:
                            return table_id, queue, list(queue.pending)[:MAX_BATCH]
                self._wake.wait()

    def _run(self) -> None:
        while True:
            table_id, queue, batch = self._next()
            done: list[tuple[int, float]] = []
            try:
                for version, visible_at in self._publish_batch(queue.store, batch):
                    done.append((version, visible_at - batch[len(done)][2]))
            except _Mismatch as mismatch:
                logger.error("publishing %s stopped: %s", table_id, mismatch)
                with self._wake:
                    queue.failed = str(mismatch)
            except Exception:  # storage trouble: the rest of the batch waits, in order
                logger.warning("publishing %s failed", table_id, exc_info=True)
                time.sleep(0.1)
            if not done:
                continue
            last = done[-1][0]
            try:  # one store write covers the whole run: every version <= last
                self._mark_published(table_id, last)
            except Exception:
                logger.warning("marking %s published failed", table_id, exc_info=True)
                time.sleep(0.1)
                continue
            with self._wake:
                while queue.pending and queue.pending[0][0] <= last:
                    queue.pending.popleft()
                queue.published_through = last
                self._lags.extend(lag * 1000 for _, lag in done)
            if self._on_published is not None:
                try:
                    self._on_published(table_id, last)
                except Exception:
                    logger.warning("the published hook of %s failed", table_id, exc_info=True)

    @staticmethod
    def _publish_batch(
        store: LogStore, batch: list[tuple[int, bytes, float]]
    ) -> Iterator[tuple[int, float]]:
        """Write and verify ``<v>.json`` for each version of ``batch`` (in order);
        yields each version verified with the time it became visible. A file
        that already exists is compared like any other (a crash after the
        write, or someone else published it): the rest are written after it."""
        start = 0
        while start < len(batch):
            rest = batch[start:]
            created = store.put_if_absent_many([(commit_name(v), d) for v, d, _ in rest])
            visible_at = time.monotonic()
            crash_point("catalog_mid_publish")
            checked = rest[: min(created + 1, len(rest))]  # created, then the one in place
            store.sync_names([commit_name(v) for v, _, _ in checked])  # durable names
            for version, data, _ in checked:
                name = commit_name(version)
                found = store.read(name)
                if found != data and parse_actions(found) != parse_actions(data):
                    raise _Mismatch(
                        f"{store.path_of(name)} exists with content other than ratified "
                        f"version {version}; the catalog keeps serving its ratified commit"
                    )
                yield version, visible_at
            start += created + 1


class _Mismatch(Exception):
    """A published file differs from the ratified commit of its version."""
