"""Rebase: rewrite a commit that does not conflict for the version it will take.

After :func:`raydelta.protocol.conflicts.check_conflicts` found no conflict
with the winners, :func:`rebase` rewrites the transaction's actions for its
new version: in-commit timestamp (``max(now, previous ICT + 1)``,
``commitInfo`` first), fresh row ids above the high-water mark and a new
``delta.rowTracking`` domain, ``defaultRowCommitVersion``, ICT enablement
provenance. :func:`raydelta.protocol.row_tracking.assign_row_tracking` is
the row-id part alone.

Invariants:
- Pure: values in, values out; the clock is the ``now_ms`` argument.
- After :func:`rebase`, the fresh row-id ranges of the commit are disjoint
  from each other and lie above every high-water mark seen (the state's and
  every winner's), and the emitted high-water mark covers them.
- The in-commit timestamp of the rebased commit is strictly greater than
  the previous commit's (the last winner's, or the one given).
"""

from __future__ import annotations

from collections.abc import Sequence

from raydelta.protocol.actions import Action, CommitInfo, Metadata
from raydelta.protocol.row_tracking import ROW_TRACKING_PRESERVED_TAG, assign_row_tracking
from raydelta.protocol.table_properties import (
    ENABLE_IN_COMMIT_TIMESTAMPS,
    ENABLE_ROW_TRACKING,
    ICT_ENABLEMENT_TIMESTAMP,
    ICT_ENABLEMENT_VERSION,
    is_true,
)
from raydelta.protocol.winning_commits import WinningCommit, commit_tags


def in_commit_timestamp(now_ms: int, previous_timestamp: int | None) -> int:
    """``max(now, previous + 1)``: the spec's in-commit timestamp of a new commit."""
    return now_ms if previous_timestamp is None else max(now_ms, previous_timestamp + 1)


def with_in_commit_timestamp(actions: Sequence[Action], timestamp: int) -> list[Action]:
    """``actions`` with ``commitInfo`` first, carrying ``inCommitTimestamp`` (and
    ``timestamp``) = ``timestamp``; a ``commitInfo`` is created if missing."""
    info = next((a for a in actions if isinstance(a, CommitInfo)), None)
    rest = [a for a in actions if a is not info]
    if info is None:
        stamped = CommitInfo(timestamp=timestamp, inCommitTimestamp=timestamp)
    else:
        stamped = info.model_copy(update={"timestamp": timestamp, "in_commit_timestamp": timestamp})
    return [stamped, *rest]


def _mark_row_tracking_not_preserved(actions: list[Action]) -> list[Action]:
    out: list[Action] = []
    for action in actions:
        if isinstance(action, CommitInfo):
            tags = commit_tags(action)
            if ROW_TRACKING_PRESERVED_TAG in tags:
                tags[ROW_TRACKING_PRESERVED_TAG] = "false"
                action = action.model_copy(update={"tags": tags})
        out.append(action)
    return out


def _restamp_ict_enablement(
    actions: list[Action], *, version: int, timestamp: int, read_version: int
) -> list[Action]:
    """Move this commit's own ICT enablement provenance to its new version."""
    out: list[Action] = []
    for action in actions:
        if isinstance(action, Metadata):
            conf = action.configuration
            raw = conf.get(ICT_ENABLEMENT_VERSION)
            try:
                set_by_this_commit = raw is not None and int(raw) > read_version
            except ValueError:
                set_by_this_commit = False
            if is_true(conf.get(ENABLE_IN_COMMIT_TIMESTAMPS)) and set_by_this_commit:
                new_conf = dict(conf)
                new_conf[ICT_ENABLEMENT_VERSION] = str(version)
                new_conf[ICT_ENABLEMENT_TIMESTAMP] = str(timestamp)
                action = action.model_copy(update={"configuration": new_conf})
        out.append(action)
    return out


def rebase(
    own_actions: Sequence[Action],
    winners: Sequence[WinningCommit],
    *,
    new_version: int,
    state_high_water_mark: int | None,
    in_commit_timestamps_enabled: bool,
    row_tracking_supported: bool,
    now_ms: int,
    read_high_water_mark: int | None = None,
    previous_commit_timestamp: int | None = None,
) -> list[Action]:
    """Rewrite a non-conflicting commit for ``new_version`` after ``winners``.

    Call it with the flags of the table *after* the winners (the latest
    state). With no winners it prepares a first attempt the same way.

    - Row tracking (when supported): fresh adds get new id ranges above
      ``max(state_high_water_mark, every winner's high-water mark)`` and
      ``defaultRowCommitVersion = new_version``; the ``delta.rowTracking``
      domain is recomputed (:func:`assign_row_tracking`). Pass
      ``read_high_water_mark`` when the actions carry ids assigned at an
      earlier attempt (ids above it are reassigned); without it only adds
      lacking a ``baseRowId`` or above the state's mark are fresh. When a
      winner turned row tracking on, ``delta.rowTracking.preserved`` in the
      commit's tags becomes ``false``.
    - In-commit timestamp (when enabled): ``max(now_ms, previous + 1)`` where
      previous is the last winner's ICT (or its file time when it had none,
      e.g. when this commit enables ICT), else ``previous_commit_timestamp``;
      ``commitInfo`` first. A metadata action of this commit enabling ICT has
      its enablement version/timestamp moved to ``new_version`` and the new ICT.
    """
    ordered = sorted(winners, key=lambda w: w.version)
    read_version = ordered[0].version - 1 if ordered else new_version - 1
    actions = list(own_actions)

    if row_tracking_supported:
        marks = [state_high_water_mark] + [w.row_id_high_water_mark for w in ordered]
        known = [m for m in marks if m is not None]
        hwm = max(known) if known else None
        actions = assign_row_tracking(
            actions,
            hwm,
            new_version,
            read_high_water_mark=read_high_water_mark,
            read_version=read_version,
        )
    if any(
        w.metadata is not None and is_true(w.metadata.configuration.get(ENABLE_ROW_TRACKING))
        for w in ordered
    ):
        actions = _mark_row_tracking_not_preserved(actions)

    if in_commit_timestamps_enabled:
        previous = previous_commit_timestamp
        if ordered:
            last = ordered[-1]
            previous = (
                last.in_commit_timestamp
                if last.in_commit_timestamp is not None
                else last.file_timestamp
                if last.file_timestamp is not None
                else previous
            )
        timestamp = in_commit_timestamp(now_ms, previous)
        actions = with_in_commit_timestamp(actions, timestamp)
        actions = _restamp_ict_enablement(
            actions, version=new_version, timestamp=timestamp, read_version=read_version
        )
    return actions
