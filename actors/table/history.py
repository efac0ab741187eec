"""A table's history in memory: its reconciled head, its file tables folded
lazily, and a window of its recent commits.

:class:`TableHistory` is what a
:class:`~raydelta.actors.table.coordinator.CommitCoordinator` knows of its
table between commits; the commit rules live in the coordinator, the
durable history behind a :class:`~raydelta.actors.table.committer.Committer`.

Invariants:
- ``head`` is the table at :attr:`TableHistory.version` without its file
  tables; ``files_base`` plus the ``pending`` commits (in version order) is
  its file state: :meth:`TableHistory.state` folds them.
- The window holds the last commits in version order, each with the
  protocol and metadata after it when known; ``txn_versions`` maps the
  ``txnId`` of every commit in the window to its version (exactly once).
- :meth:`TableHistory.save` / :meth:`TableHistory.restore` undo a group
  commit that could not be written whole.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

from raydelta.protocol.actions import Action, AddFile, CommitInfo, Metadata, Protocol, RemoveFile
from raydelta.protocol.reconciliation import TableState, apply_commits
from raydelta.protocol.winning_commits import WinningCommit

DEFAULT_WINDOW = 1000
"""Commits remembered in memory (their actions and ``txnId``)."""

PENDING_FOLD_COMMITS = 1024
"""Commits with file actions not yet folded into the file tables past which
:meth:`CommitCoordinator.fold_work` offers them for folding (a table actor
folds them off its lock)."""

PENDING_MAX_COMMITS = 4 * PENDING_FOLD_COMMITS
"""Past this many, a commit folds them itself: a table only ever appended to,
whose state nobody asks for, must not keep every commit's actions forever."""


@dataclass(frozen=True)
class PendingFold:
    """Commits to fold into a file state, taken under the caller's lock and
    folded outside it (pure: :func:`apply_commits` of immutable states)."""

    base: TableState
    commits: tuple[tuple[int, Sequence[Action]], ...]

    def run(self) -> TableState:
        return apply_commits(self.base, self.commits, keep_index=True)


@dataclass(frozen=True)
class CommittedVersion:  # cached_property needs a __dict__: no slots
    """One commit of the history as the coordinator remembers it."""

    version: int
    actions: tuple[Action, ...]
    txn_id: str | None
    in_commit_timestamp: int | None
    timestamp: int
    protocol: Protocol | None = None
    """The table's protocol after this version."""
    metadata: Metadata | None = None
    """The table's metadata after this version."""

    @cached_property
    def winning_commit(self) -> WinningCommit:
        return WinningCommit.from_actions(
            self.version, list(self.actions), file_timestamp=self.timestamp
        )


def commit_info_of(actions: Sequence[Action]) -> CommitInfo | None:
    for action in actions:
        if isinstance(action, CommitInfo):
            return action
    return None


def from_log(version: int, actions: Sequence[Action]) -> CommittedVersion:
    """A commit read back from the log, outside the window. Its ``txnId`` is kept:
    a retry of a commit older than the window must still find it (exactly once)."""
    info = commit_info_of(actions)
    ict = info.in_commit_timestamp if info else None
    stamp = ict if ict is not None else (info.timestamp if info and info.timestamp else 0)
    return CommittedVersion(version, tuple(actions), info.txn_id if info else None, ict, stamp)


class TableHistory:
    """One table's history in memory (module doc)."""

    def __init__(self, window: int = DEFAULT_WINDOW) -> None:
        self.window: deque[CommittedVersion] = deque(maxlen=window)
        self.txn_versions: dict[str, int] = {}
        self.files_base: TableState = TableState()
        self.pending: list[tuple[int, Sequence[Action]]] = []
        self.head: TableState = TableState()
        self.last_ict: int | None = None
        self.last_timestamp = 0

    @property
    def version(self) -> int:
        """Latest version known (-1 when the table does not exist yet)."""
        return self.head.version

    def reset(self, state: TableState, *, timestamp: int = 0, ict: int | None = None) -> None:
        """Forget everything: the history starts again at ``state``."""
        self.window.clear()
        self.txn_versions.clear()
        self.pending = []
        self.files_base = self.head = state
        self.last_timestamp = timestamp
        self.last_ict = ict

    def forget_configuration_of_last(self) -> None:
        """The last remembered commit's protocol and metadata are not known
        (a commit loaded from the log, not the latest)."""
        self.window[-1] = replace(self.window[-1], protocol=None, metadata=None)

    def remember(self, version: int, actions: Sequence[Action]) -> CommittedVersion:
        info = commit_info_of(actions)
        ict = info.in_commit_timestamp if info else None
        stamp = ict if ict is not None else (info.timestamp if info and info.timestamp else 0)
        entry = CommittedVersion(
            version,
            tuple(actions),
            info.txn_id if info else None,
            ict,
            stamp,
            self.head.protocol,
            self.head.metadata,
        )
        if len(self.window) == self.window.maxlen and self.window[0].txn_id:
            self.txn_versions.pop(self.window[0].txn_id, None)
        self.window.append(entry)
        if entry.txn_id:
            self.txn_versions[entry.txn_id] = version
        if ict is not None:
            self.last_ict = ict
        self.last_timestamp = stamp
        return entry

    def apply(self, version: int, actions: Sequence[Action]) -> CommittedVersion:
        non_file = [a for a in actions if not isinstance(a, (AddFile, RemoveFile))]
        self.head = replace(
            apply_commits(self.head, [(version, non_file)]),
            adds=self.files_base.adds,
            removes=self.files_base.removes,
        )
        if any(isinstance(a, (AddFile, RemoveFile)) for a in actions):
            self.pending.append((version, actions))
            if len(self.pending) >= PENDING_MAX_COMMITS:
                self.fold_pending()
        return self.remember(version, actions)

    def fold_pending(self) -> None:
        if self.pending:
            self.files_base = apply_commits(self.files_base, self.pending, keep_index=True)
            self.pending = []

    def fold_work(self) -> PendingFold | None:
        """The pending commits to fold, once there are
        :data:`PENDING_FOLD_COMMITS` of them; hand the result of its ``run``
        to :meth:`install_fold` (both calls under the same lock as commits)."""
        if len(self.pending) < PENDING_FOLD_COMMITS:
            return None
        return PendingFold(self.files_base, tuple(self.pending))

    def install_fold(self, work: PendingFold, folded: TableState) -> bool:
        """Make ``folded`` (``work.run()``) the file state, unless the state
        moved on another way since ``work`` was taken (a snapshot folded the
        same commits, a reload): then nothing changes and False is returned.

        The pending list is only ever appended to, or emptied together with a
        new file base; so while the base is ``work.base`` the list still starts
        with ``work.commits``."""
        if self.files_base is not work.base:
            return False
        self.files_base = folded
        self.pending = self.pending[len(work.commits) :]
        return True

    def state(self) -> TableState:
        """The full reconciled state at :attr:`version` (folds pending commits)."""
        self.fold_pending()
        self.files_base = replace(
            self.head, adds=self.files_base.adds, removes=self.files_base.removes
        )
        self.head = self.files_base
        return self.files_base

    def tail(self, since_version: int) -> list[tuple[int, list[Action]]] | None:
        """Commits after ``since_version`` from memory, or None if the window
        no longer reaches back that far (the caller then reloads)."""
        if since_version >= self.version:
            return []
        if not self.window or self.window[0].version > since_version + 1:
            return None
        return [(c.version, list(c.actions)) for c in self.window if c.version > since_version]

    def find_txn(self, txn_id: str) -> int | None:
        for entry in self.window:
            if entry.txn_id == txn_id:
                return entry.version
        return None

    def entry(self, version: int) -> CommittedVersion | None:
        if not self.window:
            return None
        index = version - self.window[0].version
        if 0 <= index < len(self.window):
            entry = self.window[index]
            if entry.version == version:  # the window is contiguous unless the log had gaps
                return entry
        return next((e for e in self.window if e.version == version), None)

    def save(self) -> tuple[Any, ...]:
        return (
            self.head,
            self.files_base,
            list(self.pending),
            deque(self.window, maxlen=self.window.maxlen),
            dict(self.txn_versions),
            self.last_ict,
            self.last_timestamp,
        )

    def restore(self, saved: tuple[Any, ...]) -> None:
        (
            self.head,
            self.files_base,
            self.pending,
            self.window,
            self.txn_versions,
            self.last_ict,
            self.last_timestamp,
        ) = saved
