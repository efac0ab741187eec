"""The catalog's maintenance policy (pure): table properties over catalog defaults,
and the one job due next."""

from __future__ import annotations

from raydelta.protocol.maintenance_policy import (
    MaintenanceDefaults,
    MaintenancePolicy,
    MaintenanceState,
    next_job,
)

DEFAULTS = MaintenanceDefaults()
DAY_MS = 24 * 3600 * 1000


def _policy(**configuration: str) -> MaintenancePolicy:
    return MaintenancePolicy.for_table(configuration, DEFAULTS)


def test_properties_override_the_catalog_defaults() -> None:
    default = _policy()
    assert default.checkpoint_interval == 10  # delta-spark's default
    assert default.compaction_min_files == 50
    assert default.compaction_max_file_size == 128 * 1024 * 1024
    assert default.log_retention_ms is None and default.deleted_file_retention_ms is None
    custom = _policy(
        **{
            "delta.checkpointInterval": "4",
            "delta.logRetentionDuration": "interval 2 days",
            "delta.deletedFileRetentionDuration": "interval 1 hour",
            "delta.autoOptimize.autoCompact": "false",
            "delta.enableExpiredLogCleanup": "false",
        }
    )
    assert custom.checkpoint_interval == 4
    assert custom.log_retention_ms == 2 * DAY_MS
    assert custom.deleted_file_retention_ms == 3600 * 1000
    assert not custom.auto_compact and not custom.expired_log_cleanup
    broken = _policy(**{"delta.checkpointInterval": "soon"})
    assert broken.checkpoint_interval == 10
    catalog = MaintenancePolicy.for_table({}, MaintenanceDefaults(checkpoint_interval=7))
    assert catalog.checkpoint_interval == 7


def test_checkpoint_at_the_newest_published_multiple_once() -> None:
    policy = _policy(**{"delta.checkpointInterval": "10"})
    assert next_job(policy, MaintenanceState(published_version=9), now_ms=0) == (None, None)
    job, decided = next_job(policy, MaintenanceState(published_version=27), now_ms=0)
    assert job is not None and job.kind == "checkpoint" and job.version == 20
    assert decided == 20
    later = MaintenanceState(published_version=29, checkpoint_decided=20, newest_checkpoint=20)
    job, _ = next_job(policy, later, now_ms=0)
    assert job is not None and job.kind == "cleanup"  # after the new checkpoint
    cleaned = later.model_copy(update={"cleaned_after": 20})
    assert next_job(policy, cleaned, now_ms=0) == (None, None)


def test_a_delta_spark_commit_is_left_to_delta_spark() -> None:
    policy = _policy()
    state = MaintenanceState(
        published_version=10, engine_infos={10: "Apache-Spark/4.2.0 Delta-Lake/4.4.0"}
    )
    job, decided = next_job(policy, state, now_ms=0)
    assert job is None and decided == 10  # decided (skipped), not asked again


def test_compaction_and_vacuum_triggers() -> None:
    policy = _policy()
    many = MaintenanceState(published_version=5, small_files=50)
    job, _ = next_job(policy, many, now_ms=0)
    assert job is not None and job.kind == "optimize"
    assert next_job(policy, many.model_copy(update={"small_files": 49}), now_ms=0)[0] is None
    changed = MaintenanceState(published_version=5, data_changed_since_vacuum=True)
    assert next_job(policy, changed, now_ms=DAY_MS - 1)[0] is None
    job, _ = next_job(policy, changed, now_ms=DAY_MS)
    assert job is not None and job.kind == "vacuum"
    idle = changed.model_copy(update={"data_changed_since_vacuum": False})
    assert next_job(policy, idle, now_ms=10 * DAY_MS)[0] is None


def test_maintenance_off_for_one_table() -> None:
    policy = _policy(**{"raydelta.maintenance.enabled": "false"})
    state = MaintenanceState(published_version=100, small_files=500)
    assert next_job(policy, state, now_ms=0) == (None, None)
