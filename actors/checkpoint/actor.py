"""``CheckpointActor``: checkpoints built in parallel Ray tasks, on policy and on demand.

One named, detached, restartable actor per table (``checkpoint:<uri>`` in
the ``raydelta`` namespace), subscribed to the table's ``TableActor``
(:func:`ensure_checkpointer`). It checkpoints every
``delta.checkpointInterval`` commits (default 10) when a
:class:`~raydelta.protocol.events.CommitPublished` says a version is durable
(``published``), on demand (:meth:`CheckpointActor.checkpoint`), and from a
Ray job (:mod:`raydelta.actors.checkpoint.job`). ``raydelta.compactionInterval = k``
(optional) also writes a log compaction file for every ``k`` commits.

How a checkpoint of version ``v`` is built (:class:`CheckpointRunner`):

- The actor reads only what is not a file action
  (:func:`raydelta.storage.checkpoint.sources.read_log_delta`): the previous
  checkpoint's non-file rows and the commits since it, i.e. the table's
  head plus the newest action of every file those commits touched.
- Tables without ``v2Checkpoint`` get a classic single-file V1 checkpoint
  (never multi-part), streamed by one task row group by row group.
- Tables with ``v2Checkpoint`` get a UUID-named V2 checkpoint whose file
  actions are in sidecars, ``target_actions_per_sidecar`` (50,000) per
  sidecar, hash-sharded by logical-file key. **Each sidecar is written by its
  own Ray task** once the table has ``fan_out_min_actions`` (1.5M) file
  actions; smaller tables' sidecars are all built by one task on a few threads
  (:mod:`raydelta.actors.checkpoint.one_task`: fanning out costs more than it
  saves there), from the same jobs. A shard task reads only its hash
  partition: the previous checkpoint's sidecar of that shard when the previous
  checkpoint was sharded the same way, else the rows that map tasks (one per
  row group range of the previous checkpoint) routed to it; plus the committed
  actions of its shard. A map task returns one object per node (its rows for
  the shards that node's tasks write, sorted by shard), so shard tasks slice
  their rows out of objects already on their node without copying.
- Incremental checkpoints (previous one sharded the same way): a shard is
  rewritten only if a committed action touches a key its sidecar holds,
  which the sidecar's footer index of key fingerprints tells without
  reading it. Actions on keys no sidecar holds (new files) go to one small
  overflow sidecar (at most ``target / 4`` actions, then folded into the
  shards). Every other sidecar is reused as it is
  (:func:`raydelta.storage.checkpoint.incremental.plan_aligned`).

Invariants:
- Order of publication: every sidecar exists before the top-level file is
  written (``after_sidecars`` crash point in between), the top-level file
  exists before ``_last_checkpoint`` names it (``before_last_checkpoint``).
  A crash anywhere leaves unreferenced files only; readers never see a
  partial checkpoint. A shard task that dies is retried by Ray and writes a
  fresh sidecar; the dead attempt's file is never referenced.
- Only published versions are checkpointed: policy checkpoints take the
  version of a ``published`` event; on-demand ones the newest commit file.
- Tombstones older than ``delta.deletedFileRetentionDuration`` are dropped,
  younger ones kept.
- Checkpoints run one at a time per actor; commit events are handled one at
  a time in commit order (those arriving during a checkpoint wait for it), a
  policy checkpoint for every version that is a multiple of the interval
  and newer than the last checkpoint
  (:func:`raydelta.protocol.checkpoint_policy.policy_skip_reason`).
- On a table delta-spark also writes, the policy never competes with
  delta-spark's own checkpoints: a version delta-spark committed is left to
  it (it checkpoints its commits at the same interval), and a version that
  already has a complete checkpoint in the log (anyone's) is skipped. A
  classic checkpoint is never written over one already there (on demand
  either: the summary's ``skipped`` says so), so a Hadoop checksum file
  beside it always matches it (issue 31).
- Progress: :meth:`CheckpointActor.progress` while running, a text progress
  line on stderr (the actor's log), Ray metrics
  ``raydelta_checkpoint_shards_done`` / ``raydelta_checkpoint_bytes_written``.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import ray

from raydelta.actors.checkpoint.one_task import DEFAULT_FAN_OUT_MIN_ACTIONS
from raydelta.actors.checkpoint.results import (
    CheckpointKind,
    CheckpointSummary,
    Progress,
    StderrProgress,
    TopLevel,
    Trigger,
)
from raydelta.actors.checkpoint.runner import CheckpointMetrics, CheckpointRunner
from raydelta.actors.cluster import checkpoint_actor_name, start_actor
from raydelta.protocol.checkpoint_plan import (
    DEFAULT_TARGET_ACTIONS_PER_SIDECAR,
    table_configuration,
)
from raydelta.protocol.checkpoint_policy import policy_skip_reason
from raydelta.protocol.errors import RaydeltaError
from raydelta.protocol.events import CommitPublished
from raydelta.protocol.log_segment import complete_checkpoint_at
from raydelta.protocol.table_configuration import TableConfiguration
from raydelta.protocol.table_properties import COMPACTION_INTERVAL
from raydelta.storage.checkpoint.sources import read_log_delta
from raydelta.storage.compaction import write_log_compaction
from raydelta.storage.log.reader import read_last_checkpoint
from raydelta.storage.log.store import log_store_for
from raydelta.storage.table_location import normalize_uri

logger = logging.getLogger(__name__)


actor_name = checkpoint_actor_name


# --- the actor ---------------------------------------------------------------------------------


def _compaction_interval(config: TableConfiguration) -> int | None:
    value = config.configuration.get(COMPACTION_INTERVAL)
    if value is None:
        return None
    try:
        interval = int(value)
    except ValueError:
        return None
    return interval if interval >= 2 else None


MAX_CONCURRENCY = 8
"""Threads for calls (``checkpoint``, ``progress``, ``status``): progress is served
while a checkpoint runs. Commit events have their own single thread (the
``events`` concurrency group), so they are handled one at a time, in order."""


@ray.remote(  # type: ignore[call-overload]
    num_cpus=0,
    max_restarts=-1,
    max_task_retries=-1,
    concurrency_groups={"events": 1, "status": 1},
)
class CheckpointActor:
    """See the module docstring. Create through :func:`checkpoint_actor` or
    :func:`ensure_checkpointer`."""

    def __init__(
        self,
        table_uri: str,
        storage_options: dict[str, Any] | None = None,
        target_actions_per_sidecar: int = DEFAULT_TARGET_ACTIONS_PER_SIDECAR,
        fan_out_min_actions: int = DEFAULT_FAN_OUT_MIN_ACTIONS,
    ) -> None:
        self._uri = table_uri
        self._storage_options = storage_options
        self._target = target_actions_per_sidecar
        self._fan_out_min = fan_out_min_actions
        self._run_lock = threading.Lock()
        self._progress: Progress | None = None
        self._last: CheckpointSummary | None = None
        self._last_version: int | None = None
        self._config: TableConfiguration | None = None
        self._errors: list[str] = []
        self._compactions: list[str] = []
        self._metrics = CheckpointMetrics()
        self._printer = StderrProgress(prefix=f"[{table_uri}] ")
        self._last_event = -1

    def ping(self) -> str:
        return self._uri

    @ray.method(concurrency_group="status")
    def last_seen_version(self) -> int:
        """The newest commit event received (-1: none since this process started);
        a restarted ``TableActor`` re-sends the events after it."""
        return self._last_event

    # --- on demand ----------------------------------------------------------------------

    def checkpoint(
        self,
        version: int | None = None,
        *,
        kind: CheckpointKind = "auto",
        top_level: TopLevel = "json",
        target_actions_per_sidecar: int | None = None,
        max_overflow_actions: int | None = None,
        fan_out_min_actions: int | None = None,
        trigger: Trigger = "demand",
        read_rows: int | None = None,
    ) -> CheckpointSummary:
        """Checkpoint ``version`` (the newest published commit when None) now.

        ``target_actions_per_sidecar`` / ``max_overflow_actions`` /
        ``fan_out_min_actions`` override the actor's settings for this checkpoint;
        ``read_rows`` is the read bound its tasks get (None: this actor
        process's, :mod:`raydelta.storage.log.read_bound`).
        """
        with self._run_lock:
            return self._run(
                version,
                kind=kind,
                top_level=top_level,
                trigger=trigger,
                target=target_actions_per_sidecar,
                max_overflow=max_overflow_actions,
                fan_out_min=fan_out_min_actions,
                read_rows=read_rows,
            )

    def progress(self) -> Progress | None:
        """The running checkpoint's progress (None when idle)."""
        return self._progress

    def status(self) -> dict[str, Any]:
        return {
            "tableUri": self._uri,
            "running": self._run_lock.locked(),
            "lastCheckpointVersion": self._last_version,
            "last": None if self._last is None else self._last.to_json_dict(),
            "compactions": list(self._compactions),
            "errors": list(self._errors),
        }

    def _run(
        self,
        version: int | None,
        *,
        kind: CheckpointKind,
        top_level: TopLevel,
        trigger: Trigger,
        target: int | None = None,
        max_overflow: int | None = None,
        fan_out_min: int | None = None,
        read_rows: int | None = None,
    ) -> CheckpointSummary:
        runner = CheckpointRunner(
            self._uri,
            self._storage_options,
            target_actions_per_sidecar=target or self._target,
            max_overflow_actions=max_overflow,
            fan_out_min_actions=self._fan_out_min if fan_out_min is None else fan_out_min,
            on_progress=self._on_progress,
            metrics=self._metrics,
            read_rows=read_rows,
        )
        try:
            summary = runner.run(version, kind=kind, top_level=top_level, trigger=trigger)
        finally:
            self._progress = None
        self._last = summary
        self._last_version = max(self._last_version or -1, summary.version)
        return summary

    def _on_progress(self, progress: Progress) -> None:
        self._progress = None if progress.phase == "done" else progress
        self._printer(progress)

    # --- policy ---------------------------------------------------------------------------

    @ray.method(concurrency_group="events")
    def on_commit(self, event: CommitPublished) -> None:
        """A commit is durable: checkpoint / compact when the table's policy says so.

        Runs in the ``events`` thread: events are handled in commit order, and
        those arriving during a policy checkpoint wait for it.
        """
        if event.table_uri != self._uri or not event.published:
            return
        self._last_event = max(self._last_event, event.version)
        try:
            config = self._configuration(event)
        except RaydeltaError:
            logger.warning("cannot read the configuration of %s", self._uri, exc_info=True)
            return
        compaction = _compaction_interval(config)
        if compaction and (event.version + 1) % compaction == 0:
            self._compact(event.version - compaction + 1, event.version)
        if event.version <= 0 or event.version % config.checkpoint_interval:
            return  # the common case, decided before anything is read
        reason = policy_skip_reason(
            event.version,
            interval=config.checkpoint_interval,
            newest_checkpoint=self._last_checkpoint_version(),
            engine_info=event.engine_info,
        )
        if reason is None and self._checkpointed(event.version):
            reason = "a checkpoint of this version is already in the log"
        if reason is not None:
            logger.debug("no policy checkpoint of v%d: %s", event.version, reason)
            return
        with self._run_lock:
            try:
                self._run(event.version, kind="auto", top_level="json", trigger="policy")
            except Exception as exc:  # the next interval tries again
                logger.warning("policy checkpoint of v%d failed", event.version, exc_info=True)
                self._errors.append(f"v{event.version}: {type(exc).__name__}: {exc}")

    def _compact(self, start: int, end: int) -> None:
        last = self._last_checkpoint_version()
        if start < 1 or (last is not None and start <= last):
            return
        try:
            name = write_log_compaction(log_store_for(self._uri, self._storage_options), start, end)
        except RaydeltaError as exc:
            self._errors.append(f"compaction [{start}, {end}]: {type(exc).__name__}: {exc}")
            return
        if name is not None:
            self._compactions.append(name)

    def _configuration(self, event: CommitPublished) -> TableConfiguration:
        if self._config is None or event.has_metadata_change or event.has_protocol_change:
            store = log_store_for(self._uri, self._storage_options)
            self._config = table_configuration(read_log_delta(store, event.version).head)
        return self._config

    def _checkpointed(self, version: int) -> bool:
        """Whether the log holds a complete checkpoint of ``version`` (anyone's)
        or ``_last_checkpoint`` names it or a newer one; remembered when so."""
        store = log_store_for(self._uri, self._storage_options)
        info = read_last_checkpoint(store)
        found = (info is not None and info.version >= version) or (
            complete_checkpoint_at(store.list_from(version), version) is not None
        )
        if found:
            self._last_version = max(self._last_version or -1, version)
        return found

    def _last_checkpoint_version(self) -> int | None:
        if self._last_version is None:
            store = log_store_for(self._uri, self._storage_options)
            info = read_last_checkpoint(store)
            listed = [f.require_version() for f in store.list_from(0) if f.is_checkpoint]
            versions = listed + ([info.version] if info is not None else [])
            self._last_version = max(versions) if versions else None
        return self._last_version


# --- handles -----------------------------------------------------------------------------------


def checkpoint_actor(
    table_uri: str,
    *,
    storage_options: dict[str, Any] | None = None,
    target_actions_per_sidecar: int = DEFAULT_TARGET_ACTIONS_PER_SIDECAR,
    fan_out_min_actions: int = DEFAULT_FAN_OUT_MIN_ACTIONS,
    runtime_env: dict[str, Any] | None = None,
) -> Any:
    """The table's ``CheckpointActor`` (created if none runs; ``table_uri`` normalized).

    ``fan_out_min_actions``: V2 checkpoints of tables with fewer file actions
    are built by one task, larger ones by map and shard tasks (0: always fan
    out)."""
    uri = normalize_uri(table_uri)
    options: dict[str, Any] = {"max_concurrency": MAX_CONCURRENCY}
    if runtime_env is not None:
        options["runtime_env"] = runtime_env
    return start_actor(
        CheckpointActor,
        actor_name(uri),
        uri,
        storage_options,
        target_actions_per_sidecar,
        fan_out_min_actions,
        options=options,
    )


def ensure_checkpointer(
    table: Any,
    *,
    target_actions_per_sidecar: int = DEFAULT_TARGET_ACTIONS_PER_SIDECAR,
    fan_out_min_actions: int = DEFAULT_FAN_OUT_MIN_ACTIONS,
    runtime_env: dict[str, Any] | None = None,
) -> Any:
    """Start (or find) ``table``'s ``CheckpointActor`` and subscribe it to its commits.

    ``table`` is a :class:`~raydelta.actors.table.client.TableClient` (``raydelta.Table``
    is one). Returns the actor handle.
    """
    handle = checkpoint_actor(
        table.uri,
        storage_options=table.storage_options,
        target_actions_per_sidecar=target_actions_per_sidecar,
        fan_out_min_actions=fan_out_min_actions,
        runtime_env=runtime_env,
    )
    ray.get(handle.ping.remote())
    ray.get(table.actor.subscribe.remote(actor_name(table.uri), handle))
    return handle
