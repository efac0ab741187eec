"""When the ``CheckpointActor`` checkpoints a version on its own (pure).

The actor hears of every version its ``TableActor`` learns of, raydelta's
commits and other engines' alike, and checkpoints by the table's
``delta.checkpointInterval``, the property delta-spark's own post-commit
checkpoints follow too. :func:`policy_skip_reason` decides from values
alone; the actor then also looks for a checkpoint already in the log.

Invariants:
- A version is checkpointed by policy only when it is published, positive,
  a multiple of the interval, and newer than the newest checkpoint the
  caller knows of.
- A version delta-spark committed is left to delta-spark. delta-spark
  checkpoints every version it commits that is a multiple of the same
  interval, right after the commit, so a second writer of that checkpoint
  adds nothing but a race with it: on a local disk, over the same classic
  file name, for a file whose Hadoop checksum file Hadoop then verifies
  (issue 31). delta-spark's commits are the ones whose ``commitInfo``
  names it in ``engineInfo`` (``Apache-Spark/<v> Delta-Lake/<v>``).
- A version that already has a complete checkpoint (written by anyone) is
  never checkpointed again by policy (the actor checks the log: the caller
  of :func:`policy_skip_reason` passes what it found).
"""

from __future__ import annotations

DELTA_SPARK_ENGINE_MARK = "Delta-Lake/"
"""What delta-spark writes into ``commitInfo.engineInfo`` (after ``Apache-Spark/<version>``)."""


def checkpoints_its_own_commits(engine_info: str | None) -> bool:
    """Whether the engine that wrote a commit checkpoints it by itself when its
    version is a multiple of ``delta.checkpointInterval`` (delta-spark does)."""
    return engine_info is not None and DELTA_SPARK_ENGINE_MARK in engine_info


def policy_skip_reason(
    version: int,
    *,
    interval: int,
    published: bool = True,
    newest_checkpoint: int | None = None,
    engine_info: str | None = None,
    checkpointed: bool = False,
) -> str | None:
    """Why the policy does not checkpoint ``version``, or ``None`` when it does.

    ``newest_checkpoint`` is the newest checkpointed version the caller knows
    of; ``engine_info`` the commit's ``commitInfo.engineInfo``;
    ``checkpointed`` whether the log already holds a complete checkpoint of
    ``version``.
    """
    if not published:
        return "not published yet"
    if interval < 1:
        raise ValueError(f"the checkpoint interval must be positive, got {interval}")
    if version <= 0 or version % interval:
        return f"not a multiple of the checkpoint interval {interval}"
    if newest_checkpoint is not None and newest_checkpoint >= version:
        return f"already checkpointed at version {newest_checkpoint}"
    if checkpoints_its_own_commits(engine_info):
        return f"committed by {engine_info}, which checkpoints its own commits"
    if checkpointed:
        return "a checkpoint of this version is already in the log"
    return None
