"""The CheckpointActor's policy (protocol/checkpoint_policy.py): which versions it
checkpoints on its own, and that it leaves delta-spark's commits to delta-spark."""

from __future__ import annotations

import pytest

from raydelta.protocol.actions import CommitInfo
from raydelta.protocol.checkpoint_policy import checkpoints_its_own_commits, policy_skip_reason
from raydelta.protocol.events import CommitPublished

SPARK = "Apache-Spark/4.2.0 Delta-Lake/4.4.0"


@pytest.mark.parametrize("interval", [1, 2, 10])
def test_every_positive_multiple_of_the_interval_and_nothing_else(interval: int) -> None:
    wanted = [v for v in range(31) if policy_skip_reason(v, interval=interval) is None]
    assert wanted == list(range(interval, 31, interval))


def test_known_checkpoints_unpublished_versions_and_found_checkpoints_are_skipped() -> None:
    assert policy_skip_reason(20, interval=10, newest_checkpoint=20) is not None
    assert policy_skip_reason(20, interval=10, newest_checkpoint=30) is not None
    assert policy_skip_reason(20, interval=10, newest_checkpoint=10) is None
    assert policy_skip_reason(20, interval=10, published=False) is not None
    assert policy_skip_reason(20, interval=10, checkpointed=True) is not None
    with pytest.raises(ValueError):
        policy_skip_reason(20, interval=0)


def test_delta_spark_commits_are_left_to_delta_spark() -> None:
    assert checkpoints_its_own_commits(SPARK)
    assert not checkpoints_its_own_commits("raydelta")
    assert not checkpoints_its_own_commits(None)
    reason = policy_skip_reason(10, interval=10, engine_info=SPARK)
    assert reason is not None and "Delta-Lake" in reason
    assert policy_skip_reason(10, interval=10, engine_info="raydelta") is None


def test_commit_events_carry_the_engine_that_wrote_the_commit() -> None:
    info = CommitInfo.model_validate({"operation": "WRITE", "engineInfo": SPARK})
    event = CommitPublished.from_actions("file:///t", 10, 0, [info])
    assert event.engine_info == SPARK
    assert CommitPublished.model_validate_json(event.model_dump_json()) == event
    assert CommitPublished.from_actions("file:///t", 11, 0, []).engine_info is None
