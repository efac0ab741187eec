"""Committers: how a coordinator's versions become durable, and where its
history is read back from.

A :class:`~raydelta.actors.table.coordinator.CommitCoordinator` holds the
commit rules (validation, conflict checks, rebase, exactly once) and takes
a :class:`Committer` for everything that touches the table's durable
history; no subclass per kind of table (the seam is an object passed in, as
delta-kernel-rs's ``Committer``):

- :class:`FilesystemCommitter` (plain Delta tables): version ``v`` is won by
  put-if-absent of ``_delta_log/<v>.json`` on the table's log store, and the
  history is the log itself;
- the catalog's committer of a catalog-managed table
  (:class:`raydelta.actors.catalog.tables.CatalogCommitter`): version ``v``
  is won by ratifying it in the catalog's durable store, and the history is
  the catalog's view (ratified commits win over published files).

Contract every committer keeps:
- :meth:`Committer.put_commit` returns only once ``version`` is durable (or
  queued for a group commit the caller waits on before it answers), and
  raises :class:`~raydelta.protocol.errors.FileAlreadyExistsError` when
  another commit already holds ``version``; it never writes ``version``
  twice.
- :meth:`Committer.newer_commits` yields versions after ``after`` in order,
  contiguous, each once; it stops at the first version it cannot read.
- :meth:`Committer.read_commits` raises ``FileNotFoundError`` when a version
  of the range is gone; it never returns a partial range.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

from raydelta.protocol.actions import Action, parse_actions, serialize_actions
from raydelta.protocol.file_names import commit_name
from raydelta.protocol.table_configuration import TableConfiguration
from raydelta.storage.log.store import LogStore
from raydelta.storage.snapshot import Snapshot, load_snapshot_from_store


class Committer(Protocol):
    """What a coordinator needs of its table's durable history (module doc)."""

    @property
    def store(self) -> LogStore:
        """The table's log store (commits, staged files, checkpoints)."""
        ...

    @property
    def catalog_managed(self) -> bool:
        """Whether commits to a ``catalogManaged`` table may go through this
        committer (CATALOG_MANAGED.md, "Writer Requirements": only its catalog's)."""
        ...

    @property
    def batches_writes(self) -> bool:
        """Whether :meth:`put_commits` writes a batch of versions at once."""
        ...

    def load_snapshot(self, version: int | None = None) -> Snapshot:
        """The table at ``version`` (latest: None); ``TableNotFoundError`` if none."""
        ...

    def read_commits(self, versions: range) -> list[list[Action]]:
        """The actions of every version of ``versions``, in order."""
        ...

    def recent_commits(self, first: int, latest: int) -> list[tuple[int, list[Action]]]:
        """The versions of ``[first, latest]`` still readable, with their actions."""
        ...

    def newer_commits(self, after: int) -> Iterator[tuple[int, list[Action]]]:
        """Versions after ``after`` that others made durable, in order."""
        ...

    def latest_version(self) -> int | None:
        """The latest version the history holds, when known without a listing
        (None: unknown; :meth:`newer_commits` is then the only way forward)."""
        ...

    def put_commit(
        self,
        version: int,
        actions: Sequence[Action],
        *,
        configuration: TableConfiguration | None,
    ) -> None:
        """Make ``actions`` version ``version``; ``configuration`` is the table's
        before this commit (None when the commit creates the table)."""
        ...

    def put_commits(self, commits: Sequence[tuple[int, list[Action]]]) -> int:
        """Write consecutive versions together (:attr:`batches_writes` only);
        returns how many were created, a prefix of ``commits``."""
        ...


class FilesystemCommitter:
    """Versions won by put-if-absent of ``_delta_log/<v>.json`` (plain Delta).

    ``catalog_managed=True`` only for the one commit that makes a filesystem
    table catalog-managed (the catalog's upgrade, rebased over filesystem
    writers like any other commit)."""

    batches_writes = True

    def __init__(self, table_uri: str, store: LogStore, *, catalog_managed: bool = False) -> None:
        self.table_uri = table_uri
        self._store = store
        self._catalog_managed = catalog_managed

    @property
    def store(self) -> LogStore:
        return self._store

    @property
    def catalog_managed(self) -> bool:
        return self._catalog_managed

    def load_snapshot(self, version: int | None = None) -> Snapshot:
        return load_snapshot_from_store(self.table_uri, self._store, version=version)

    def read_commits(self, versions: range) -> list[list[Action]]:
        blobs = self._store.read_many([commit_name(v) for v in versions])
        return [parse_actions(b) for b in blobs]

    def recent_commits(self, first: int, latest: int) -> list[tuple[int, list[Action]]]:
        names = [commit_name(v) for v in range(first, latest + 1)]
        listing = {f.name for f in self._store.list_from(first)}
        present = [n for n in names if n in listing]
        return [
            (int(name.split(".", 1)[0]), parse_actions(data))
            for name, data in zip(present, self._store.read_many(present), strict=True)
        ]

    def newer_commits(self, after: int) -> Iterator[tuple[int, list[Action]]]:
        version = after + 1
        while True:  # by name, no listing: other engines' commits
            try:
                data = self._store.read(commit_name(version))
            except FileNotFoundError:
                return
            yield version, parse_actions(data)
            version += 1

    def latest_version(self) -> int | None:
        return None

    def put_commit(
        self,
        version: int,
        actions: Sequence[Action],
        *,
        configuration: TableConfiguration | None,
    ) -> None:
        self._store.put_if_absent(commit_name(version), serialize_actions(list(actions)))

    def put_commits(self, commits: Sequence[tuple[int, list[Action]]]) -> int:
        items = [(commit_name(v), serialize_actions(a)) for v, a in commits]
        return self._store.put_if_absent_many(items)


__all__ = ["Committer", "FilesystemCommitter"]
