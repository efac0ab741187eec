"""A catalog's automatic maintenance of its managed tables: :class:`MaintenanceActor`.

The catalog tells it one thing, through one narrow hook
(:class:`MaintenanceHook`, called by the publisher): "version ``v`` of table
``T`` is published". The actor reads the newly published commits, asks the
table's policy (:mod:`raydelta.protocol.maintenance_policy`) what is due, and
runs that job as a Ray task (:mod:`raydelta.actors.catalog.maintenance_jobs`):
checkpoint, metadata cleanup, auto-compaction (OPTIMIZE) or VACUUM. Clients
asking the catalog to maintain a table are served by the same actor
(:meth:`MaintenanceActor.run_now`), one job at a time per table.

One actor per catalog, started by the catalog on its first published
version and owned by the catalog's process (it goes when the catalog goes;
a restarted catalog starts a new one, which rebuilds its view of each table
from the log on the next published version).

Invariants:
- Never on an unpublished version: every job's version is one the hook
  reported published (checkpoint, cleanup) or the catalog's own latest
  ratified snapshot (VACUUM protection, OPTIMIZE's read).
- Never blocking commits: the hook only sends a message (``.remote()``, no
  wait); the actor's work runs on its own thread and in Ray tasks; the jobs
  that commit (OPTIMIZE, VACUUM START / END) commit through the catalog like
  any writer (conflicts checked, rebased), as the maintenance principal.
- One job at a time per table; a failing job is recorded (``status()``) and
  its trigger is not retried before the next one (a failed VACUUM: after the
  interval).
- Progress and history: :meth:`MaintenanceActor.status` per table: what runs,
  and the last :data:`HISTORY_KEPT` runs with their reports.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import ray

from raydelta.actors.catalog.client import CatalogTableClient
from raydelta.actors.catalog.maintenance_jobs import (
    Compactor,
    initial_configuration,
    run_job,
    scan_commits,
)
from raydelta.protocol.maintenance_policy import (
    JobKind,
    MaintenanceDefaults,
    MaintenanceJob,
    MaintenancePolicy,
    MaintenanceState,
    next_job,
)
from raydelta.storage.log.reader import read_last_checkpoint
from raydelta.storage.log.store import LogStore, log_store_for

logger = logging.getLogger(__name__)

HISTORY_KEPT = 50
MAINTENANCE_PRINCIPAL = "raydelta-maintenance"
"""The principal the maintenance commits as (WRITE on every table) when the
catalog has authorization on."""
IDLE_WAIT_S = 0.5
INITIAL_SCAN_COMMITS = 1000
"""At first sight of a table, at most this many of its newest commits are read."""


def maintenance_actor_name(catalog_actor_name: str) -> str:
    return f"maintenance:{catalog_actor_name}"


@dataclass
class _Run:
    job: MaintenanceJob
    ref: Any
    started_ms: int
    requested: threading.Event | None = None
    outcome: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Table:
    """The actor's mutable record of one table (see :class:`MaintenanceState`)."""

    table_id: str
    name: str
    location: str
    store: LogStore
    target: int = -1
    """The newest version the hook reported published."""
    scanned: int | None = None
    configuration: dict[str, str] | None = None
    state: MaintenanceState | None = None
    running: _Run | None = None
    requested: deque[tuple[JobKind, threading.Event, dict[str, Any]]] = field(default_factory=deque)
    history: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=HISTORY_KEPT))


@ray.remote(num_cpus=0, max_concurrency=8)  # type: ignore[call-overload]
class MaintenanceActor:
    """See the module docstring. Started by :class:`MaintenanceHook`."""

    def __init__(
        self,
        catalog: Any,
        token: str | None,
        defaults: MaintenanceDefaults,
        storage_options: dict[str, Any] | None = None,
        compactor: Compactor | None = None,
    ) -> None:
        self._catalog = catalog
        self._token = token
        self._defaults = defaults
        self._storage_options = storage_options
        self._compactor = compactor
        self._tables: dict[str, _Table] = {}
        self._wake = threading.Condition()
        self._thread = threading.Thread(target=self._loop, name="maintenance", daemon=True)
        self._thread.start()

    def ping(self) -> bool:
        return True

    # --- the hook's message, and requests ---------------------------------------------

    def published(self, table_id: str, name: str, location: str, version: int) -> None:
        """Version ``version`` of the table is published (the catalog's hook)."""
        with self._wake:
            table = self._table(table_id, name, location)
            table.target = max(table.target, version)
            self._wake.notify_all()

    def run_now(
        self,
        table_id: str,
        name: str,
        location: str,
        kind: JobKind,
        published: int,
        timeout_s: float = 600.0,
    ) -> dict[str, Any]:
        """Run ``kind`` on the table now, covering ``published`` (the catalog's
        newest published version), after the job running, if any: what a client
        asking the catalog gets. Returns ``{"kind", "version", "report"}`` or
        ``{"kind", "error"}``."""
        done = threading.Event()
        outcome: dict[str, Any] = {}
        with self._wake:
            table = self._table(table_id, name, location)
            table.target = max(table.target, published)
            table.requested.append((kind, done, outcome))
            self._wake.notify_all()
        if not done.wait(timeout_s):
            return {"kind": kind, "error": f"not run within {timeout_s} s"}
        return dict(outcome)

    def settled(self, table_id: str, version: int, timeout_s: float = 60.0) -> bool:
        """Wait until the table's commits through ``version`` were read and no
        job runs or is due (tests, benchmarks)."""
        deadline = time.monotonic() + timeout_s
        with self._wake:
            while time.monotonic() < deadline:
                table = self._tables.get(table_id)
                if table is not None and self._is_settled(table, version):
                    return True
                self._wake.wait(0.05)
        return False

    def status(self) -> list[dict[str, Any]]:
        """Per table: published version, the running job, the last runs (newest first)."""
        with self._wake:
            return [self._status_of(t) for t in sorted(self._tables.values(), key=lambda t: t.name)]

    # --- the loop ---------------------------------------------------------------------

    def _table(self, table_id: str, name: str, location: str) -> _Table:
        table = self._tables.get(table_id)
        if table is None or table.location != location:
            store = log_store_for(location, self._storage_options)
            table = self._tables[table_id] = _Table(table_id, name, location, store)
        table.name = name
        return table

    def _is_settled(self, table: _Table, version: int) -> bool:
        if table.running is not None or table.requested or table.scanned is None:
            return False
        if table.scanned < max(version, table.target) or table.state is None:
            return False
        job, _ = next_job(self._policy(table), table.state, now_ms=_now_ms())
        return job is None

    def _loop(self) -> None:
        while True:
            try:
                self._step()
            except Exception:  # the loop must survive any one table's trouble
                logger.warning("maintenance step failed", exc_info=True)
                time.sleep(IDLE_WAIT_S)

    def _step(self) -> None:
        with self._wake:
            tables = list(self._tables.values())
        for table in tables:
            # under the lock: settled() and status() never see half a step
            with self._wake:
                if table.running is None:
                    self._advance(table)
        running = [t.running.ref for t in tables if t.running is not None]
        if running:
            ray.wait(running, num_returns=1, timeout=IDLE_WAIT_S)
            for table in tables:
                if table.running is not None and ray.wait([table.running.ref], timeout=0)[0]:
                    self._finish(table)
        else:
            with self._wake:
                if not any(self._has_work(t) for t in self._tables.values()):
                    self._wake.wait(IDLE_WAIT_S)

    def _has_work(self, table: _Table) -> bool:
        return bool(table.requested) or (table.scanned or -1) < table.target

    def _advance(self, table: _Table) -> None:
        """Read what was published since last time, then start the next job
        (the caller holds the lock)."""
        if table.scanned is None or table.scanned < table.target:
            self._scan(table)
        if table.state is None:
            return
        request = table.requested.popleft() if table.requested else None
        if request is not None:
            kind, done, outcome = request
            self._start(table, self._requested_job(table, kind), requested=(done, outcome))
            return
        due, decided = next_job(self._policy(table), table.state, now_ms=_now_ms())
        if decided is not None:
            table.state = table.state.model_copy(update={"checkpoint_decided": decided})
        if due is not None:
            self._start(table, due)

    def _policy(self, table: _Table) -> MaintenancePolicy:
        return MaintenancePolicy.for_table(table.configuration or {}, self._defaults)

    def _scan(self, table: _Table) -> None:
        target = table.target
        if target < 0:
            return
        if table.scanned is None or table.state is None:
            table.configuration = initial_configuration(table.store, target)
            last = read_last_checkpoint(table.store)
            newest = None if last is None else last.version
            table.state = MaintenanceState(
                published_version=target,
                newest_checkpoint=newest,
                last_vacuum_ms=_now_ms(),
            )
            # first sight (a new table, or a restarted catalog): the recent commits
            # since the newest checkpoint count towards compaction
            table.scanned = max(0, newest or 0, target - INITIAL_SCAN_COMMITS)
        policy = self._policy(table)
        configuration = table.configuration

        def interval_of(changed: Mapping[str, str] | None) -> int:
            merged = configuration if changed is None else changed
            return MaintenancePolicy.for_table(merged or {}, self._defaults).checkpoint_interval

        scan = scan_commits(
            table.store, table.scanned, target, policy=policy, interval_of=interval_of
        )
        if scan.configuration is not None:
            table.configuration = scan.configuration
        state = table.state
        table.state = state.model_copy(
            update={
                "published_version": target,
                "small_files": state.small_files + scan.small_files,
                "data_changed_since_vacuum": state.data_changed_since_vacuum or scan.data_changed,
                "engine_infos": {
                    v: e
                    for v, e in {**state.engine_infos, **scan.engine_infos}.items()
                    if v > state.checkpoint_decided
                },
            }
        )
        table.scanned = target

    def _requested_job(self, table: _Table, kind: JobKind) -> MaintenanceJob:
        assert table.state is not None  # _advance checked it
        policy = self._policy(table)
        published = table.state.published_version
        retention = {
            "cleanup": policy.log_retention_ms,
            "vacuum": policy.deleted_file_retention_ms,
        }.get(kind)
        return MaintenanceJob(
            kind=kind, version=published, reason="requested", retention_ms=retention
        )

    def _client(self, table: _Table) -> CatalogTableClient:
        return CatalogTableClient(
            table.location,
            self._catalog,
            self._storage_options,
            table_name=table.name,
            token=self._token,
        )

    def _start(
        self,
        table: _Table,
        job: MaintenanceJob,
        *,
        requested: tuple[threading.Event, dict[str, Any]] | None = None,
    ) -> None:
        assert table.state is not None
        update: dict[str, Any] = {}
        if job.kind == "optimize":
            update["small_files"] = 0
        elif job.kind == "vacuum":
            update = {"data_changed_since_vacuum": False, "last_vacuum_ms": _now_ms()}
        table.state = table.state.model_copy(update=update)
        ref = run_job.remote(job, self._client(table), self._compactor, self._policy(table))
        table.running = _Run(job, ref, _now_ms(), *(requested or (None, {})))

    def _finish(self, table: _Table) -> None:
        run = table.running
        assert run is not None and table.state is not None
        record: dict[str, Any] = {
            "kind": run.job.kind,
            "version": run.job.version,
            "reason": run.job.reason,
            "started_ms": run.started_ms,
            "finished_ms": _now_ms(),
        }
        try:
            record["report"] = ray.get(run.ref)
            if run.job.kind == "checkpoint":
                version = int(record["report"].get("version", run.job.version))
                newest = max(table.state.newest_checkpoint or -1, version)
                table.state = table.state.model_copy(update={"newest_checkpoint": newest})
            elif run.job.kind == "cleanup":
                table.state = table.state.model_copy(
                    update={"cleaned_after": table.state.newest_checkpoint}
                )
        except Exception as exc:
            logger.warning("maintenance %s of %s failed", run.job.kind, table.name, exc_info=True)
            record["error"] = f"{type(exc).__name__}: {exc}"
            if run.job.kind == "vacuum":  # tried again after the interval, not at once
                table.state = table.state.model_copy(update={"data_changed_since_vacuum": True})
        with self._wake:
            table.history.appendleft(record)
            table.running = None
            if run.requested is not None:
                run.outcome.update(record)
                run.requested.set()
            self._wake.notify_all()

    def _status_of(self, table: _Table) -> dict[str, Any]:
        running = table.running
        state = table.state
        return {
            "table": table.name,
            "table_id": table.table_id,
            "location": table.location,
            "published_version": table.target,
            "newest_checkpoint": None if state is None else state.newest_checkpoint,
            "small_files": None if state is None else state.small_files,
            "running": None
            if running is None
            else {
                "kind": running.job.kind,
                "version": running.job.version,
                "since_ms": running.started_ms,
            },
            "history": list(table.history),
        }


class MaintenanceHook:
    """The catalog's side: "version ``v`` of table ``T`` is published" (from the
    publisher's thread). Starts the :class:`MaintenanceActor` on first use;
    ``describe(table_id)`` gives ``(name, location)`` (None: not a table now);
    ``start()`` returns the actor handle (the catalog supplies its own handle
    and the maintenance principal's token)."""

    def __init__(
        self,
        *,
        enabled: bool,
        describe: Callable[[str], tuple[str, str] | None],
        start: Callable[[], Any],
    ) -> None:
        self.enabled = enabled
        self._describe = describe
        self._start = start
        self._actor: Any = None
        self._lock = threading.Lock()

    def actor(self) -> Any:
        """The maintenance actor (started now if it is not running)."""
        with self._lock:
            if self._actor is None:
                self._actor = self._start()
            return self._actor

    def started(self) -> Any | None:
        return self._actor

    def restart(self) -> None:
        """Stop a running maintenance actor; the next publish starts a fresh one
        (after authorization was turned on: it needs its principal's token)."""
        with self._lock:
            actor, self._actor = self._actor, None
        if actor is not None:
            import ray

            ray.kill(actor, no_restart=True)

    def published(self, table_id: str, version: int) -> None:
        """Tell the maintenance actor; never waits for it, never raises."""
        if not self.enabled:
            return
        try:
            described = self._describe(table_id)
            if described is not None:
                self.actor().published.remote(table_id, described[0], described[1], version)
        except Exception:
            logger.warning("telling maintenance of %s v%d failed", table_id, version, exc_info=True)


def _now_ms() -> int:
    return int(time.time() * 1000)


__all__ = [
    "MAINTENANCE_PRINCIPAL",
    "MaintenanceActor",
    "MaintenanceHook",
    "maintenance_actor_name",
]
