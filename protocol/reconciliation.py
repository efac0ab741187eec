"""Action reconciliation: the fold of log actions into a table state.

The spec's rules (section "Action Reconciliation"):
- the latest ``protocol`` and the latest ``metaData`` win;
- per ``appId`` the latest ``txn`` wins;
- per ``domain`` the latest ``domainMetadata`` wins; ``removed=true`` is a
  tombstone that hides the domain from readers (kept here so a checkpoint can
  carry it);
- logical files are keyed by ``(path, deletionVector.uniqueId)``, the path
  in its canonical spelling (:func:`raydelta.protocol.file_actions.canonical_path`:
  decoded once, and relative to ``TableState.table_root`` when the state
  knows its root, so ``a.parquet``, ``%61.parquet`` and
  ``file:///root/a.parquet`` are one file); the newest
  reference wins; surviving ``add``s are the live files, surviving
  ``remove``s the tombstones.

Invariants of :class:`TableState`:
- ``adds`` and ``removes`` are in the canonical layout of
  :mod:`raydelta.protocol.file_actions`, each with unique keys, and no key is in both.
- A state is immutable; :func:`apply_commits` returns a new one.
- Folding commits one at a time equals folding them all at once.

Speed: a base state (a checkpoint, or the previous state) is kept as Arrow
tables and only the rows whose *path* a newer commit touches are looked at
one by one; everything else is a vectorized filter, so the cost of applying
a few commits to a million-file state is one hash probe per row, in C.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import pyarrow as pa
import pyarrow.compute as pc

from raydelta.protocol import path_index
from raydelta.protocol.actions import (
    Action,
    AddFile,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    Txn,
)
from raydelta.protocol.errors import MissingMetadataError, MissingProtocolError
from raydelta.protocol.file_actions import (
    ADD_SCHEMA,
    REMOVE_SCHEMA,
    FileKey,
    action_key,
    actions_to_table,
    canonical_path,
    drop_rows,
    path_spellings,
    row_to_add,
    row_to_remove,
    rows_with_canonical_paths,
    table_keys,
)
from raydelta.protocol.path_index import PathIndex
from raydelta.protocol.table_configuration import TableConfiguration


@dataclass(frozen=True)
class TableHead:
    """The non-file part of a state: small, cheap to ship between processes."""

    version: int
    protocol: Protocol | None
    metadata: Metadata | None
    txns: dict[str, Txn]
    domain_actions: dict[str, DomainMetadata]

    @property
    def domains(self) -> dict[str, DomainMetadata]:
        """Live metadata domains (tombstoned ones hidden)."""
        return {k: d for k, d in self.domain_actions.items() if not d.removed}

    @property
    def table_configuration(self) -> TableConfiguration:
        """The validated protocol + metadata (raises if either is missing)."""
        if self.protocol is None:
            raise MissingProtocolError(f"no protocol action at v{self.version}")
        if self.metadata is None:
            raise MissingMetadataError(f"no metadata action at v{self.version}")
        return TableConfiguration(self.protocol, self.metadata)


@dataclass(frozen=True)
class TableState:
    """A reconciled table state at ``version`` (-1 before any commit)."""

    version: int = -1
    protocol: Protocol | None = None
    metadata: Metadata | None = None
    txns: dict[str, Txn] = field(default_factory=dict)
    domain_actions: dict[str, DomainMetadata] = field(default_factory=dict)
    adds: pa.Table = field(default_factory=ADD_SCHEMA.empty_table)
    removes: pa.Table = field(default_factory=REMOVE_SCHEMA.empty_table)
    # Probe accelerators for ``adds``/``removes``; used only while they describe
    # exactly those tables, and never shipped to another process.
    adds_index: PathIndex | None = field(default=None, compare=False, repr=False)
    removes_index: PathIndex | None = field(default=None, compare=False, repr=False)
    table_root: str | None = field(default=None, compare=False)
    """The table root as :func:`raydelta.protocol.file_actions.table_root_key`
    spells it; None when unknown (absolute paths then stay distinct from
    relative ones). Carried to every state folded from this one."""

    def __getstate__(self) -> dict[str, object]:
        return {**self.__dict__, "adds_index": None, "removes_index": None}

    @property
    def domains(self) -> dict[str, DomainMetadata]:
        """Live metadata domains (tombstoned ones hidden)."""
        return {k: d for k, d in self.domain_actions.items() if not d.removed}

    @property
    def num_files(self) -> int:
        return int(self.adds.num_rows)

    def head(self) -> TableHead:
        return TableHead(
            self.version, self.protocol, self.metadata, dict(self.txns), dict(self.domain_actions)
        )

    def add_files(self) -> list[AddFile]:
        """Live files as models (materialises every row: small tables only)."""
        return [row_to_add(r) for r in self.adds.to_pylist()]

    def remove_files(self) -> list[RemoveFile]:
        return [row_to_remove(r) for r in self.removes.to_pylist()]

    def without_expired_tombstones(self, cutoff_ms: int) -> TableState:
        """Drop tombstones whose ``deletionTimestamp`` is older than ``cutoff_ms``.

        A missing ``deletionTimestamp`` counts as 0, i.e. expired.
        """
        stamps = pc.fill_null(self.removes.column("deletionTimestamp"), 0)
        keep = pc.greater_equal(stamps, pa.scalar(cutoff_ms, pa.int64()))
        return replace(self, removes=self.removes.filter(keep))


@dataclass
class FoldedActions:
    """What a run of commits leaves per reconciliation key (before any file table)."""

    protocol: Protocol | None
    metadata: Metadata | None
    txns: dict[str, Txn]
    domains: dict[str, DomainMetadata]
    newest: dict[FileKey, AddFile | RemoveFile]
    """The newest ``add``/``remove`` per logical file, in order of recency."""


def fold_actions(
    commits: Iterable[Sequence[Action]],
    *,
    protocol: Protocol | None = None,
    metadata: Metadata | None = None,
    txns: Mapping[str, Txn] | None = None,
    domains: Mapping[str, DomainMetadata] | None = None,
    table_root: str | None = None,
) -> FoldedActions:
    """The spec's reconciliation rules over ``commits`` (oldest first), starting
    from the given protocol, metadata, txns and domains.

    Within one commit, ``remove``s are applied before ``add``s, so an add and
    a remove of the same key in one commit (which the spec forbids) resolve to
    the file being present rather than lost.
    """
    folded = FoldedActions(protocol, metadata, dict(txns or {}), dict(domains or {}), {})
    newest = folded.newest
    for actions in commits:
        removes: list[RemoveFile] = []
        adds: list[AddFile] = []
        for action in actions:
            if isinstance(action, AddFile):
                adds.append(action)
            elif isinstance(action, RemoveFile):
                removes.append(action)
            elif isinstance(action, Protocol):
                folded.protocol = action
            elif isinstance(action, Metadata):
                folded.metadata = action
            elif isinstance(action, Txn):
                folded.txns[action.app_id] = action
            elif isinstance(action, DomainMetadata):
                folded.domains[action.domain] = action
        ordered: list[AddFile | RemoveFile] = [*removes, *adds]
        for file_action in ordered:
            key = action_key(file_action, table_root)
            newest.pop(key, None)  # keep insertion order = recency
            newest[key] = file_action
    return folded


def _drop_keys(
    table: pa.Table,
    keys: Mapping[FileKey, object],
    paths: set[str],
    index: PathIndex | None,
    table_root: str | None = None,
) -> tuple[pa.Table, list[int]]:
    """Rows of ``table`` whose key is not in ``keys`` (candidates found by
    canonical path, through ``index`` when it describes ``table``; ``paths``
    are the canonical paths of ``keys``), and the dropped row numbers."""
    if not paths or table.num_rows == 0:
        return table, []
    if index is not None and index.describes(table):
        spellings = {s for p in paths for s in path_spellings(p, table_root)}
        candidates = index.rows_with_paths(spellings, canonical=paths)
    else:
        candidates = rows_with_canonical_paths(table.column("path"), paths, table_root)
    if not candidates:
        return table, []
    candidate_keys = table_keys(table, candidates, table_root)
    drop = [index for index, key in zip(candidates, candidate_keys, strict=True) if key in keys]
    result: pa.Table = drop_rows(table, drop)
    return result, drop


def _usable_index(
    table: pa.Table, index: PathIndex | None, wanted: bool, table_root: str | None
) -> PathIndex | None:
    """``index`` if it still describes ``table`` and is worth keeping; a new one
    for a large table when ``wanted``; else None."""
    if not wanted or table.num_rows < path_index.INDEX_MIN_ROWS:
        return None
    if (
        index is not None
        and index.describes(table)
        and index.is_worth_keeping()
        and index.table_root == table_root
    ):
        return index
    return PathIndex.build(table, table_root)


def _fold_files(
    table: pa.Table,
    index: PathIndex | None,
    newest: Mapping[FileKey, AddFile | RemoveFile],
    touched_paths: set[str],
    new_rows: pa.Table | None,
    table_root: str | None,
) -> tuple[pa.Table, PathIndex | None]:
    kept, dropped = _drop_keys(table, newest, touched_paths, index, table_root)
    result = kept if new_rows is None else pa.concat_tables([kept, new_rows])
    if index is None or not index.describes(table):
        return result, None
    return result, index.after(dropped, result)


def apply_commits(
    base: TableState,
    commits: Iterable[tuple[int, Sequence[Action]]],
    *,
    keep_index: bool = False,
) -> TableState:
    """Fold ``commits`` (ascending ``(version, actions)``) onto ``base``
    (rules: :func:`fold_actions`).

    ``keep_index``: for a long-lived state that small commits are folded into
    again and again, build (once) and carry a :class:`PathIndex` of large
    tables, so each later fold costs a binary search per touched path instead
    of a probe of every row.
    """
    commits = list(commits)
    version = commits[-1][0] if commits else base.version
    root = base.table_root
    folded = fold_actions(
        [actions for _, actions in commits],
        protocol=base.protocol,
        metadata=base.metadata,
        txns=base.txns,
        domains=base.domain_actions,
        table_root=root,
    )
    protocol, metadata, txns, domains = (
        folded.protocol,
        folded.metadata,
        folded.txns,
        folded.domains,
    )
    newest = folded.newest
    if not newest:
        return TableState(
            version,
            protocol,
            metadata,
            txns,
            domains,
            base.adds,
            base.removes,
            base.adds_index,
            base.removes_index,
            root,
        )
    touched_paths = {key[0] for key in newest}
    new_adds = [a for a in newest.values() if isinstance(a, AddFile)]
    new_removes = [r for r in newest.values() if isinstance(r, RemoveFile)]
    adds_table, adds_index = _fold_files(
        base.adds,
        _usable_index(base.adds, base.adds_index, keep_index, root),
        newest,
        touched_paths,
        actions_to_table(new_adds, ADD_SCHEMA) if new_adds else None,
        root,
    )
    removes_table, removes_index = _fold_files(
        base.removes,
        _usable_index(base.removes, base.removes_index, keep_index, root),
        newest,
        touched_paths,
        actions_to_table(new_removes, REMOVE_SCHEMA) if new_removes else None,
        root,
    )
    return TableState(
        version,
        protocol,
        metadata,
        txns,
        domains,
        adds_table,
        removes_table,
        adds_index,
        removes_index,
        root,
    )


def state_from_checkpoint(
    version: int,
    non_file_actions: Iterable[Action],
    adds: pa.Table,
    removes: pa.Table,
    table_root: str | None = None,
) -> TableState:
    """The state a checkpoint describes: its file actions are already reconciled.

    ``adds``/``removes`` must be in the canonical layout. A checkpoint row that
    is an ``add`` and a ``remove`` of the same key would break the spec; the
    ``add`` is kept (see :func:`apply_commits`).
    """
    root = table_root
    base = TableState(version=version, adds=adds, removes=removes, table_root=root)
    state = apply_commits(base, [(version, list(non_file_actions))])
    if removes.num_rows and adds.num_rows:
        live_paths = {canonical_path(p, root) for p in pc.unique(adds.column("path")).to_pylist()}
        removed = {canonical_path(p, root) for p in pc.unique(removes.column("path")).to_pylist()}
        clash = live_paths & removed
        if clash:
            live_keys: dict[FileKey, object] = dict.fromkeys(table_keys(adds, None, root))
            state = replace(state, removes=_drop_keys(removes, live_keys, clash, None, root)[0])
    return state


def replay(
    commits: Iterable[tuple[int, Sequence[Action]]], *, base: TableState | None = None
) -> TableState:
    """Fold a whole log (optionally on top of a checkpoint state)."""
    return apply_commits(base or TableState(), commits)
