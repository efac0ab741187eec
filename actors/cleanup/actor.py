"""``CleanupActor``: metadata cleanup and VACUUM for one table, on policy and on demand.

One named (``cleanup:<uri>``), detached, restartable actor per table in the
``raydelta`` namespace, taking no CPU slot. :func:`ensure_cleaner` gets or
starts it and subscribes it to the table's ``TableActor``.

Invariants:
- Cleanup and vacuum runs are serial (the default concurrency group has one
  slot); only :meth:`CleanupActor.progress` and :meth:`CleanupActor.last_reports`
  answer while a run is under way (their own group).
- Policy: after a commit event, when ``_last_checkpoint`` names a newer
  version than the last one this actor cleaned up after, metadata cleanup
  runs (``delta.enableExpiredLogCleanup=false`` makes it a no-op). The first
  event after a (re)start always checks, so a run cut short by a crash is
  finished by the next one. A failing policy run is logged, never raised
  into the ``TableActor``.
- Crash safety comes from :mod:`raydelta.storage.cleanup.metadata` and
  :mod:`raydelta.storage.cleanup.vacuum` (every intermediate state is a valid table); the
  crash-once points ``mid_cleanup`` and ``mid_vacuum`` fire after the first
  deletion. ``max_task_retries=-1`` makes Ray rerun an interrupted call on the
  restarted actor, and the rerun completes the work.
- Large tables (50k+ files and tombstones, on a cluster of 4+ CPUs) are
  listed in parallel: one Ray task per batch of top-level directories
  (partition prefixes), the root's own files by the actor.
- The ``TableActor`` keeps subscribers in memory: after it restarts, call
  :func:`ensure_cleaner` again to resubscribe.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Sequence
from datetime import timedelta
from typing import Any

import pyarrow.compute as pc
import ray

from raydelta.actors.cluster import cleanup_actor_name, start_actor
from raydelta.actors.faults import crash_point
from raydelta.protocol.durations import duration_ms
from raydelta.protocol.errors import RaydeltaError
from raydelta.protocol.events import CommitPublished
from raydelta.storage.cleanup.listing import DirectoryListing, Lister, list_top_level, list_tree
from raydelta.storage.cleanup.metadata import MetadataCleanupReport, cleanup_metadata
from raydelta.storage.cleanup.vacuum import VacuumPlan, VacuumReport, vacuum
from raydelta.storage.log.reader import read_last_checkpoint
from raydelta.storage.log.store import LogStore, log_store_for

PARALLEL_LISTING_MIN_FILES = 50_000
"""Tables with at least this many files (live + tombstones) are listed by Ray tasks."""
PARALLEL_LISTING_MIN_CPUS = 4
"""Below this many cluster CPUs the tasks cost more than they save (measured: a
100k-file local table lists in 0.54-0.68 s in the actor, 0.66-0.89 s fanned out
on 2 CPUs)."""
TASKS_PER_CPU = 2
logger = logging.getLogger(__name__)


actor_name = cleanup_actor_name


@ray.remote
def _list_prefixes(
    uri: str,
    storage_options: dict[str, Any] | None,
    prefixes: Sequence[str],
    partition_columns: frozenset[str],
    protected: Collection[str],
) -> DirectoryListing:
    """One Ray task: list some top-level directories of the table recursively."""
    return list_tree(log_store_for(uri, storage_options), prefixes, partition_columns, protected)


def ray_lister(uri: str, storage_options: dict[str, Any] | None, *, tasks: int) -> Lister:
    """A :data:`raydelta.storage.cleanup.vacuum.Lister` fanning top-level directories
    out to Ray tasks."""

    def lister(
        store: LogStore, partition_columns: frozenset[str], protected: Collection[str]
    ) -> DirectoryListing:
        top, subdirs = list_top_level(store, partition_columns, protected)
        if not subdirs:
            return top
        batches = [subdirs[i :: max(1, tasks)] for i in range(min(len(subdirs), max(1, tasks)))]
        protected_ref: Any = ray.put(frozenset(protected))  # one copy shared by the tasks
        refs = [
            _list_prefixes.remote(uri, storage_options, batch, partition_columns, protected_ref)
            for batch in batches
        ]
        return DirectoryListing.merge([top, *ray.get(refs)])

    return lister


@ray.remote(  # type: ignore[call-overload]  # ray's stubs lack concurrency_groups
    num_cpus=0,
    max_restarts=-1,
    max_task_retries=-1,
    concurrency_groups={"status": 1},
)
class CleanupActor:
    """See the module docstring. Get one through :func:`ensure_cleaner`."""

    def __init__(
        self,
        table_uri: str,
        storage_options: dict[str, Any] | None = None,
        *,
        parallel_listing_min_files: int = PARALLEL_LISTING_MIN_FILES,
    ) -> None:
        self._uri = table_uri
        self._storage_options = storage_options
        self._store = log_store_for(table_uri, storage_options)
        self._parallel_min = parallel_listing_min_files
        self._cleaned_after: int | None = None  # None: check at the first event
        self._status: dict[str, Any] = {"state": "idle"}
        self._last_cleanup: MetadataCleanupReport | None = None
        self._last_vacuum: VacuumReport | None = None
        self._last_event = -1

    def ping(self) -> str:
        return self._uri

    @ray.method(concurrency_group="status")
    def last_seen_version(self) -> int:
        """The newest commit event received (-1: none since this process started)."""
        return self._last_event

    # --- status (answers while a run is under way) -------------------------------------

    @ray.method(concurrency_group="status")
    def progress(self) -> dict[str, Any]:
        """``{"state": "idle" | "cleanup" | "vacuum", "stage", "done", "total", "since"}``."""
        return dict(self._status)

    @ray.method(concurrency_group="status")
    def last_reports(self) -> dict[str, Any]:
        return {
            "cleanup": self._last_cleanup.to_json_dict() if self._last_cleanup else None,
            "vacuum": self._last_vacuum.to_json_dict() if self._last_vacuum else None,
        }

    def _set_stage(self, stage: str, done: int, total: int) -> None:
        self._status = {**self._status, "stage": stage, "done": done, "total": total}

    def _begin(self, state: str) -> None:
        since = int(time.time() * 1000)
        self._status = {"state": state, "stage": "starting", "done": 0, "total": 0, "since": since}

    def _record_vacuum_start(self, plan: VacuumPlan, default_retention_ms: int) -> None:
        from raydelta.actors.table.client import TableClient

        TableClient.open(self._uri, storage_options=self._storage_options).record_operation(
            "VACUUM START",
            parameters={
                "retentionCheckEnabled": plan.retention_ms >= default_retention_ms,
                "defaultRetentionMillis": default_retention_ms,
                "specifiedRetentionMillis": plan.retention_ms,
            },
            metrics={
                "numFilesToDelete": plan.files.num_rows,
                "sizeOfDataToDelete": pc.sum(plan.files.column("size")).as_py() or 0,
            },
        )

    def _record_vacuum_end(self, report: VacuumReport) -> None:
        from raydelta.actors.table.client import TableClient

        TableClient.open(self._uri, storage_options=self._storage_options).record_operation(
            "VACUUM END",
            parameters={"status": "COMPLETED"},
            metrics={
                "numDeletedFiles": report.num_files,
                "numVacuumedDirectories": len(report.dirs),
            },
        )

    # --- policy ---------------------------------------------------------------------------

    def _last_checkpoint_version(self) -> int | None:
        info = read_last_checkpoint(self._store)
        return None if info is None else info.version

    def on_commit(self, event: CommitPublished) -> None:
        """Subscriber hook of the ``TableActor``: clean up after a new checkpoint."""
        self._last_event = max(self._last_event, event.version)
        if event.published:
            self._maybe_cleanup()

    def checkpoint_written(self, version: int) -> None:
        """Direct hint from a checkpoint writer that ``version`` was checkpointed."""
        self._maybe_cleanup(hint=version)

    def _maybe_cleanup(self, hint: int | None = None) -> None:
        version = self._last_checkpoint_version()
        if hint is not None:
            version = max(hint, version if version is not None else hint)
        if version is None:
            return
        if self._cleaned_after is not None and version <= self._cleaned_after:
            return
        try:
            self.cleanup()
        except RaydeltaError:
            logger.warning(
                "metadata cleanup of %s after a checkpoint failed", self._uri, exc_info=True
            )
            return
        self._cleaned_after = version

    # --- on demand ------------------------------------------------------------------------

    def cleanup(
        self, retention: timedelta | str | None = None, dry_run: bool = False
    ) -> MetadataCleanupReport:
        """Metadata cleanup now; ``retention`` overrides ``delta.logRetentionDuration``
        (a :class:`~datetime.timedelta` or a duration such as ``"7 days"``)."""
        self._begin("cleanup")
        try:
            report = cleanup_metadata(
                self._uri,
                retention_ms=duration_ms(retention),
                dry_run=dry_run,
                store=self._store,
                after_delete=lambda _name: crash_point("mid_cleanup"),
                progress=self._set_stage,
            )
        finally:
            self._status = {"state": "idle"}
        self._last_cleanup = report
        return report

    def vacuum(
        self,
        retention: timedelta | str | None = None,
        lite: bool = False,
        dry_run: bool = False,
        force: bool = False,
        parallel: bool | None = None,
    ) -> VacuumReport:
        """VACUUM now (see :func:`raydelta.storage.cleanup.vacuum.vacuum`). ``parallel`` forces the
        Ray-task listing on (True) or off (False); by default large tables on
        clusters of 4+ CPUs use it (full mode only: lite mode lists nothing).
        ``retention`` overrides ``delta.deletedFileRetentionDuration`` (a
        :class:`~datetime.timedelta` or a duration such as ``"7 days"``)."""
        retention_ms = duration_ms(retention)
        retention_hours = None if retention_ms is None else retention_ms / 3_600_000
        self._begin("vacuum")
        try:
            from raydelta.storage.cleanup.log_references import load_vacuum_view

            self._set_stage("loading snapshot", 0, 0)
            # only the file columns VACUUM needs (a full snapshot where the log needs one)
            snapshot = load_vacuum_view(self._uri, self._store)
            lister = None
            size = snapshot.num_files + snapshot.all_tombstones.num_rows
            if not lite:
                resources: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]
                cpus = int(resources.get("CPU", 1))
                wanted = size >= self._parallel_min and cpus >= PARALLEL_LISTING_MIN_CPUS
                if wanted if parallel is None else parallel:
                    lister = ray_lister(
                        self._uri, self._storage_options, tasks=max(1, cpus * TASKS_PER_CPU)
                    )
            report = vacuum(
                self._uri,
                retention_hours=retention_hours,
                lite=lite,
                dry_run=dry_run,
                force=force,
                store=self._store,
                snapshot=snapshot,
                lister=lister,
                after_delete=lambda _path: crash_point("mid_vacuum"),
                progress=self._set_stage,
                on_start=lambda plan: self._record_vacuum_start(
                    plan, snapshot.table_configuration.deleted_file_retention_ms
                ),
                on_end=self._record_vacuum_end,
            )
        finally:
            self._status = {"state": "idle"}
        self._last_vacuum = report
        return report


def ensure_cleaner(
    table: Any,
    *,
    storage_options: dict[str, Any] | None = None,
    runtime_env: dict[str, Any] | None = None,
    subscribe: bool = True,
    parallel_listing_min_files: int = PARALLEL_LISTING_MIN_FILES,
) -> Any:
    """The table's ``CleanupActor`` (started if none runs), subscribed to its commits.

    ``table`` is a :class:`~raydelta.actors.table.client.TableClient` (``raydelta.Table``
    is one) or a URI. ``runtime_env`` and
    ``parallel_listing_min_files`` apply only when the actor is started here.

    >>> cleaner = ensure_cleaner(TableClient.open("/tmp/events"))          # doctest: +SKIP
    >>> ray.get(cleaner.vacuum.remote(dry_run=True)).files            # doctest: +SKIP
    """
    from raydelta.actors.table.client import TableClient

    handle_table: TableClient = (
        table
        if isinstance(table, TableClient)
        else TableClient.open(table, storage_options=storage_options)
    )
    options: dict[str, Any] = {}
    if runtime_env is not None:
        options["runtime_env"] = runtime_env
    cleaner = start_actor(
        CleanupActor,
        actor_name(handle_table.uri),
        handle_table.uri,
        storage_options or handle_table.storage_options,
        parallel_listing_min_files=parallel_listing_min_files,
        options=options,
    )
    if subscribe:
        ray.get(handle_table.actor.subscribe.remote(actor_name(handle_table.uri), cleaner))
    return cleaner
