"""When a catalog maintains one of its managed tables, and what it runs (pure).

The catalog decides from two values: the table's :class:`MaintenancePolicy`
(its properties over the catalog's :class:`MaintenanceDefaults`) and the
:class:`MaintenanceState` the catalog's maintenance service keeps of it
(published version, newest checkpoint, small files written since the last
compaction, ...). :func:`next_job` names the one job to run next, or None.

Policies, by table property (the catalog's default when a property is unset):

- checkpoint every ``delta.checkpointInterval`` commits (delta-spark's 10),
  decided by :func:`raydelta.protocol.checkpoint_policy.policy_skip_reason`,
  the same rule the ``CheckpointActor`` applies to filesystem tables;
- metadata cleanup after each new checkpoint, by ``delta.logRetentionDuration``
  (off with ``delta.enableExpiredLogCleanup=false``);
- VACUUM by ``delta.deletedFileRetentionDuration``, at most once per
  ``vacuum_interval_s`` and only after data changed since the last one;
- small-file compaction (auto-compact OPTIMIZE) once the table's commits
  since the last compaction added ``compaction_min_files`` files smaller than
  ``compaction_max_file_size`` (delta-spark's auto-compact defaults: 50 files,
  128 MiB); ``delta.autoOptimize.autoCompact=false`` turns it off;
- ``raydelta.maintenance.enabled=false`` turns all of it off for one table.

Invariants:
- Only published versions are checkpointed or cleaned up: a job's version is
  at most ``state.published_version``.
- Under load the checkpoint goes to the newest multiple of the interval that
  is published; an older multiple it overtook is not checkpointed any more
  (the newer checkpoint supersedes it). Each multiple is decided once.
- A job is never due because of the maintenance's own commits: OPTIMIZE and
  VACUUM commits count neither as small files nor as data changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from raydelta.protocol.checkpoint_policy import policy_skip_reason
from raydelta.protocol.errors import InvalidTableError
from raydelta.protocol.table_configuration import parse_interval_ms
from raydelta.protocol.table_properties import (
    CHECKPOINT_INTERVAL,
    DEFAULT_ENABLE_EXPIRED_LOG_CLEANUP,
    DELETED_FILE_RETENTION_DURATION,
    ENABLE_EXPIRED_LOG_CLEANUP,
    LOG_RETENTION_DURATION,
)

AUTO_COMPACT = "delta.autoOptimize.autoCompact"
"""delta-spark's table property: ``true``/``auto`` on, ``false`` off."""
MAINTENANCE_ENABLED = "raydelta.maintenance.enabled"
"""``false``: the catalog runs no automatic maintenance on this table."""
MAINTENANCE_OPERATIONS = frozenset({"OPTIMIZE", "VACUUM START", "VACUUM END"})
"""The operations the maintenance commits itself (never a trigger of more)."""

JobKind = Literal["checkpoint", "cleanup", "optimize", "vacuum"]


class MaintenanceDefaults(BaseModel):
    """The catalog-wide defaults (catalog settings); a table's properties win."""

    model_config = ConfigDict(frozen=True)

    enabled: bool = True
    checkpoint_interval: int = Field(default=10, ge=1)
    log_retention_ms: int | None = Field(default=None, ge=0)
    """None: Delta's default (30 days)."""
    deleted_file_retention_ms: int | None = Field(default=None, ge=0)
    """None: Delta's default (7 days)."""
    auto_compact: bool = True
    compaction_min_files: int = Field(default=50, ge=2)
    compaction_max_file_size: int = Field(default=128 * 1024 * 1024, ge=1)
    vacuum_interval_s: float = Field(default=24 * 3600.0, ge=0)


class MaintenancePolicy(BaseModel):
    """One table's policy: :meth:`for_table`."""

    model_config = ConfigDict(frozen=True)

    enabled: bool
    checkpoint_interval: int = Field(ge=1)
    log_retention_ms: int | None
    expired_log_cleanup: bool
    deleted_file_retention_ms: int | None
    auto_compact: bool
    compaction_min_files: int
    compaction_max_file_size: int
    vacuum_interval_ms: int

    @classmethod
    def for_table(
        cls, configuration: Mapping[str, str], defaults: MaintenanceDefaults
    ) -> MaintenancePolicy:
        """The policy of a table with ``configuration`` (its ``metaData``'s);
        an unparsable property falls back to the catalog's default."""
        interval = _int(configuration.get(CHECKPOINT_INTERVAL))
        return cls(
            enabled=_bool(configuration.get(MAINTENANCE_ENABLED), defaults.enabled),
            checkpoint_interval=interval
            if interval is not None and interval >= 1
            else defaults.checkpoint_interval,
            log_retention_ms=_interval(
                configuration.get(LOG_RETENTION_DURATION), defaults.log_retention_ms
            ),
            expired_log_cleanup=_bool(
                configuration.get(ENABLE_EXPIRED_LOG_CLEANUP), DEFAULT_ENABLE_EXPIRED_LOG_CLEANUP
            ),
            deleted_file_retention_ms=_interval(
                configuration.get(DELETED_FILE_RETENTION_DURATION),
                defaults.deleted_file_retention_ms,
            ),
            auto_compact=_auto_compact(configuration.get(AUTO_COMPACT), defaults.auto_compact),
            compaction_min_files=defaults.compaction_min_files,
            compaction_max_file_size=defaults.compaction_max_file_size,
            vacuum_interval_ms=int(defaults.vacuum_interval_s * 1000),
        )


class MaintenanceState(BaseModel):
    """What the maintenance service knows of one table (a value per decision)."""

    model_config = ConfigDict(frozen=True)

    published_version: int
    checkpoint_decided: int = 0
    """The newest multiple of the interval already decided (run or skipped)."""
    newest_checkpoint: int | None = None
    cleaned_after: int | None = None
    """The checkpoint version the last metadata cleanup ran after."""
    small_files: int = 0
    """Small files added by data commits since the last compaction started."""
    data_changed_since_vacuum: bool = False
    last_vacuum_ms: int = 0
    """When the last VACUUM ran (or when the service first saw the table)."""
    engine_infos: Mapping[int, str] = Field(default_factory=dict)
    """``commitInfo.engineInfo`` of the published versions that are multiples of the interval."""


class MaintenanceJob(BaseModel):
    """One job: ``kind``, at ``version`` (the published version it covers)."""

    model_config = ConfigDict(frozen=True)

    kind: JobKind
    version: int
    reason: str
    retention_ms: int | None = None


def checkpoint_candidate(policy: MaintenancePolicy, state: MaintenanceState) -> int | None:
    """The newest published multiple of the interval not decided yet (or None)."""
    interval = policy.checkpoint_interval
    candidate = state.published_version - state.published_version % interval
    return candidate if candidate > max(0, state.checkpoint_decided) else None


def next_job(
    policy: MaintenancePolicy, state: MaintenanceState, *, now_ms: int
) -> tuple[MaintenanceJob | None, int | None]:
    """The job to run next and the checkpoint candidate it decided (the caller
    records it as decided whether it runs or is skipped); ``(None, ...)`` when
    nothing is due. Priority: checkpoint, cleanup, compaction, VACUUM."""
    if not policy.enabled:
        return None, None
    candidate = checkpoint_candidate(policy, state)
    if candidate is not None:
        reason = policy_skip_reason(
            candidate,
            interval=policy.checkpoint_interval,
            newest_checkpoint=state.newest_checkpoint,
            engine_info=state.engine_infos.get(candidate),
        )
        if reason is None:
            why = f"version {candidate} is a multiple of {policy.checkpoint_interval}"
            return MaintenanceJob(kind="checkpoint", version=candidate, reason=why), candidate
    checkpoint = state.newest_checkpoint
    if (
        policy.expired_log_cleanup
        and checkpoint is not None
        and (state.cleaned_after is None or checkpoint > state.cleaned_after)
    ):
        why = f"new checkpoint at version {checkpoint}"
        job = MaintenanceJob(
            kind="cleanup",
            version=state.published_version,
            reason=why,
            retention_ms=policy.log_retention_ms,
        )
        return job, candidate
    if policy.auto_compact and state.small_files >= policy.compaction_min_files:
        why = f"{state.small_files} small files since the last compaction"
        return MaintenanceJob(kind="optimize", version=state.published_version, reason=why), (
            candidate
        )
    if state.data_changed_since_vacuum and now_ms - state.last_vacuum_ms >= (
        policy.vacuum_interval_ms
    ):
        job = MaintenanceJob(
            kind="vacuum",
            version=state.published_version,
            reason=f"data changed and {policy.vacuum_interval_ms} ms since the last VACUUM",
            retention_ms=policy.deleted_file_retention_ms,
        )
        return job, candidate
    return None, candidate


def is_small_data_file(size: int, *, data_change: bool, policy: MaintenancePolicy) -> bool:
    """Whether an added file counts towards compaction."""
    return data_change and size < policy.compaction_max_file_size


def _int(value: str | None) -> int | None:
    try:
        return None if value is None else int(value)
    except ValueError:
        return None


def _bool(value: str | None, default: bool) -> bool:
    if value is None or value.strip().lower() not in ("true", "false"):
        return default
    return value.strip().lower() == "true"


def _auto_compact(value: str | None, default: bool) -> bool:
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered in ("true", "auto", "legacy"):
        return True
    return default if lowered != "false" else False


def _interval(value: str | None, default: int | None) -> int | None:
    if value is None:
        return default
    try:
        return parse_interval_ms(value)
    except InvalidTableError:
        return default


__all__ = [
    "AUTO_COMPACT",
    "MAINTENANCE_ENABLED",
    "MAINTENANCE_OPERATIONS",
    "MaintenanceDefaults",
    "MaintenanceJob",
    "MaintenancePolicy",
    "MaintenanceState",
    "checkpoint_candidate",
    "is_small_data_file",
    "next_job",
]
