"""The commit coordinator of one catalog-managed table, inside the ``Catalog`` actor.

:class:`ManagedTableCoordinator` holds a plain
:class:`~raydelta.actors.table.coordinator.CommitCoordinator` given a
:class:`CatalogCommitter`, so the history is the catalog's (CATALOG_MANAGED.md,
"Commit Protocol"): the same commit rules (the one validator, conflict checks
against the winners in memory, rebase), but a version is won by *ratifying* it
in the catalog's durable
:class:`~raydelta.storage.catalog.ratified_store.RatifiedCommitStore`, not by
writing ``_delta_log/<v>.json``. What only a catalog does (staged commits,
Unity Catalog's exact ratification, the conflict answer with the missed
commits) is :class:`ManagedTableCoordinator`'s own; nothing is overridden.
Publishing is someone else's job (:mod:`raydelta.actors.catalog.publisher`),
told through ``on_ratified``.

Invariants:
- Version ``v`` is ratified only right after ``v - 1`` and at most once (the
  store refuses anything else), and the store is written before the reply:
  an acknowledged commit survives any crash. With a ``ratifier`` (the
  catalog actor's group commit) the ratification is queued and the commit
  applied in memory at once; the caller answers only after
  :meth:`~raydelta.actors.catalog.group_commit.GroupRatifier.wait`.
- Exactly once: a request whose ``txn_id`` the store has ratified (in memory
  for the recent window, else :meth:`RatifiedCommitStore.find_txn`) is
  answered with its original version and nothing is written.
- Staged commits (``staged_commit_path``): the catalog reads the file (it
  judges what is really in it, never what the client says is in it). When
  the file can win as it is (staged for the next version, nothing won since
  the read version, a valid final commit with a fresh in-commit timestamp),
  its path is ratified. Otherwise it is rebased like an inline commit and
  the result is *re-staged* under its new version in a new file: a staged
  file is never reused for another version; the client's file, now
  garbage, is deleted after the new one is ratified.
- Every commit, staged or inline, meets the feature's writer requirements
  (:func:`~raydelta.protocol.catalog_managed.check_commit_actions`): the
  feature stays in both lists, in-commit timestamps stay active, ``commitInfo``
  has a ``txnId``. A commit that cannot be rebased is refused with the
  delta-spark exception and the inline content of every commit the client
  missed (:class:`CatalogCommitConflict`).
- Reads go through the catalog's view: ratified commits the store holds win
  over published files; nothing past the latest ratified version is read.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from raydelta.actors.catalog.group_commit import GroupRatifier
from raydelta.actors.faults import crash_point
from raydelta.actors.table.coordinator import CommitCoordinator
from raydelta.actors.table.history import DEFAULT_WINDOW
from raydelta.protocol.actions import (
    Action,
    CommitInfo,
    Metadata,
    Protocol,
    parse_actions,
    serialize_actions,
)
from raydelta.protocol.catalog_managed import (
    STAGED_PREFIX,
    RatifiedCommit,
    check_commit_actions,
    check_managed_requirements,
    parse_staged_commit_path,
)
from raydelta.protocol.commit_rules import validate_commit
from raydelta.protocol.errors import (
    DeltaConcurrentModificationException,
    FileAlreadyExistsError,
    InvalidCommitError,
    RatificationError,
    RaydeltaError,
    TableNotFoundError,
    VersionNotFoundError,
)
from raydelta.protocol.events import (
    CommitCommitted,
    CommitConflict,
    CommitRejected,
    CommitReply,
    CommitRequest,
)
from raydelta.protocol.file_names import commit_name, staged_commit_name
from raydelta.protocol.reconciliation import TableHead
from raydelta.protocol.table_configuration import TableConfiguration
from raydelta.protocol.table_features import ROW_TRACKING
from raydelta.storage.catalog.ratified_store import Ratification, RatifiedCommitStore
from raydelta.storage.log.store import LogStore, log_store_for
from raydelta.storage.snapshot import Snapshot, load_snapshot_from_store

logger = logging.getLogger(__name__)


class CatalogCommitConflict(CommitConflict):
    """A conflict answered by a catalog: also carries every commit the client
    missed since its read version (inline), so it can rebuild its view without
    waiting for them to be published. The raised exception has them as its
    ``missed_commits`` attribute."""

    missed_commits: tuple[RatifiedCommit, ...] = ()

    def error(self) -> RaydeltaError:
        error = super().error()
        error.missed_commits = self.missed_commits  # type: ignore[attr-defined]
        return error


@dataclass(frozen=True)
class Ratified:
    """What the catalog tells its publisher after ratifying a version."""

    table_id: str
    commit: RatifiedCommit
    data: bytes
    """The exact bytes ``_delta_log/<v>.json`` must hold."""


def _info(actions: Sequence[Action]) -> CommitInfo | None:
    return next((a for a in actions if isinstance(a, CommitInfo)), None)


class CatalogCommitter:
    """The :class:`~raydelta.actors.table.committer.Committer` of a
    catalog-managed table: versions are ratified into the catalog's durable
    store (inline, or as a staged file), and the history read back is the
    catalog's view: ratified commits it still holds win over published files,
    and nothing past the latest ratified version exists."""

    catalog_managed = True
    batches_writes = False

    def __init__(
        self,
        table_id: str,
        table_uri: str,
        store: LogStore,
        ratified_store: RatifiedCommitStore,
        *,
        on_ratified: Callable[[Ratified], None] | None = None,
        ratifier: GroupRatifier | None = None,
    ) -> None:
        self.table_id = table_id
        self.table_uri = table_uri
        self._store = store
        self.ratified_store = ratified_store
        self.on_ratified = on_ratified
        self.ratifier = ratifier
        """When set, ratifications are queued for its group commit: the caller
        must :meth:`GroupRatifier.wait` before answering (durable first)."""
        self.restage: str | None = None
        """While a staged commit is being committed: the client's file
        (root-relative); the next :meth:`put_commit` re-stages into a new file."""

    @property
    def store(self) -> LogStore:
        return self._store

    def held(self, start_version: int | None = None) -> list[RatifiedCommit]:
        return list(self.ratified_store.ratified(self.table_id, start_version=start_version))

    def actions_of(self, commit: RatifiedCommit) -> list[Action]:
        """The actions of a ratified commit (its inline content or its staged file)."""
        if commit.actions is not None:
            return list(commit.actions)
        assert commit.staged_name is not None
        return parse_actions(self._store.read(commit.staged_name))

    def load_snapshot(self, version: int | None = None) -> Snapshot:
        latest = self.ratified_store.latest_version(self.table_id)
        if latest is None:  # nothing ratified: the table does not exist yet
            raise TableNotFoundError(f"the catalog holds no version of {self.table_uri}")
        return load_snapshot_from_store(
            self.table_uri,
            self._store,
            version=version,
            ratified_commits=self.held(),
            latest_ratified_version=latest,
        )

    def read_commits(self, versions: range) -> list[list[Action]]:
        held = {c.version: c for c in self.held(versions.start) if c.version in versions}
        out = []
        for version in versions:
            commit = held.get(version)
            if commit is not None:
                out.append(self.actions_of(commit))
            else:
                out.append(parse_actions(self._store.read(commit_name(version))))
        return out

    def recent_commits(self, first: int, latest: int) -> list[tuple[int, list[Action]]]:
        """The contiguous run of readable versions (held or published) ending at ``latest``."""
        held = {c.version for c in self.held(first)}
        listing = {f.name for f in self._store.list_from(first)}
        start = latest + 1
        while start - 1 >= first and (start - 1 in held or commit_name(start - 1) in listing):
            start -= 1
        versions = range(start, latest + 1)
        return list(zip(versions, self.read_commits(versions), strict=True))

    def newer_commits(self, after: int) -> Iterator[tuple[int, list[Action]]]:
        """Versions the store ratified after ``after`` (another incarnation of
        the catalog), while it still holds them."""
        for commit in self.held(after + 1):
            yield commit.version, self.actions_of(commit)

    def latest_version(self) -> int | None:
        return self.ratified_store.latest_version(self.table_id)

    def put_commit(
        self,
        version: int,
        actions: Sequence[Action],
        *,
        configuration: TableConfiguration | None,
    ) -> None:
        info = _info(actions)
        if version == 0:
            protocol = next((a for a in actions if isinstance(a, Protocol)), None)
            metadata = next((a for a in actions if isinstance(a, Metadata)), None)
            if protocol is None or metadata is None:
                raise InvalidCommitError("a commit creating a table needs protocol and metaData")
            check_managed_requirements(protocol, metadata, info)
        elif (
            any(isinstance(a, (Protocol, Metadata)) for a in actions)
            or info is None
            or not info.txn_id
            or info.in_commit_timestamp is None
        ):  # else the table's protocol and metadata stay as checked when they were set
            assert configuration is not None  # a table exists past version 0
            check_commit_actions(
                actions, protocol=configuration.protocol, metadata=configuration.metadata
            )
        assert info is not None and info.txn_id  # checked above
        data = serialize_actions(list(actions))
        if self.restage is not None:  # re-stage: a staged file is never reused
            name = staged_commit_name(version, str(uuid.uuid4()))
            self._store.put_if_absent(name, data)
            crash_point("catalog_after_stage")
            commit = RatifiedCommit.staged(
                version, STAGED_PREFIX + name, timestamp=info.in_commit_timestamp
            )
        else:
            commit = RatifiedCommit.inline(version, actions, timestamp=info.in_commit_timestamp)
        self.ratify(commit, info.txn_id, data)

    def put_commits(self, commits: Sequence[tuple[int, list[Action]]]) -> int:
        raise NotImplementedError("a catalog ratifies one commit at a time (batches_writes)")

    def ratify(self, commit: RatifiedCommit, txn_id: str, data: bytes) -> None:
        if self.ratifier is not None:  # group commit: durable before the caller answers
            self.ratifier.submit(Ratification(self.table_id, commit, txn_id), data)
            return
        crash_point("catalog_before_ratify")
        try:
            self.ratified_store.ratify(self.table_id, commit, txn_id=txn_id)
        except RatificationError as error:
            if error.latest_version is not None and error.latest_version >= commit.version:
                raise FileAlreadyExistsError(
                    f"version {commit.version} of {self.table_id} is already ratified"
                ) from error
            raise
        crash_point("catalog_after_ratify")
        if self.on_ratified is not None:
            self.on_ratified(Ratified(self.table_id, commit, data))


class ManagedTableCoordinator:
    """One catalog-managed table's serial history (see the module docstring):
    a :class:`CommitCoordinator` with a :class:`CatalogCommitter`, plus what
    only a catalog does."""

    def __init__(
        self,
        table_id: str,
        table_uri: str,
        ratified_store: RatifiedCommitStore,
        *,
        storage_options: dict[str, Any] | None = None,
        window: int = DEFAULT_WINDOW,
        on_ratified: Callable[[Ratified], None] | None = None,
        ratifier: GroupRatifier | None = None,
    ) -> None:
        self.table_id = table_id
        self.committer = CatalogCommitter(
            table_id,
            table_uri,
            log_store_for(table_uri, storage_options),
            ratified_store,
            on_ratified=on_ratified,
            ratifier=ratifier,
        )
        self.coordinator = CommitCoordinator(table_uri, window=window, committer=self.committer)

    # --- the coordinator's state, as the catalog reads it ----------------------------

    @property
    def table_uri(self) -> str:
        return self.coordinator.table_uri

    @property
    def store(self) -> LogStore:
        return self.committer.store

    @property
    def ratified_store(self) -> RatifiedCommitStore:
        return self.committer.ratified_store

    @property
    def version(self) -> int:
        return self.coordinator.version

    @property
    def exists(self) -> bool:
        return self.coordinator.exists

    @property
    def table_configuration(self) -> TableConfiguration:
        return self.coordinator.table_configuration

    def reload(self) -> None:
        self.coordinator.reload()

    def catch_up(self) -> int:
        return self.coordinator.catch_up()

    def head(self) -> TableHead:
        return self.coordinator.head()

    def snapshot(self) -> Snapshot:
        return self.coordinator.snapshot()

    def tail(self, since_version: int) -> list[tuple[int, list[Action]]] | None:
        return self.coordinator.tail(since_version)

    def create(self, request: CommitRequest) -> CommitReply:
        return self.coordinator.create(request)

    def actions_of(self, commit: RatifiedCommit) -> list[Action]:
        return self.committer.actions_of(commit)

    def held_commits(
        self, start_version: int | None = None, end_version: int | None = None
    ) -> tuple[list[RatifiedCommit], int]:
        """Ratified commits still held in ``[start, end]`` and the latest version."""
        held = [
            c
            for c in self.committer.held(start_version)
            if end_version is None or c.version <= end_version
        ]
        return held, self.version

    # --- committing --------------------------------------------------------------------

    def find_committed(self, txn_id: str) -> int | None:
        """The version ``txn_id`` won, if it won one (memory, then the store)."""
        found = self.coordinator.txn_version(txn_id)
        if found is not None:
            return found
        return self.ratified_store.find_txn(self.table_id, txn_id)

    def proposed_actions(self, request: CommitRequest) -> list[Action]:
        """The actions ``request`` proposes: inline, or read from its staged file."""
        if request.staged_commit_path is None:
            return list(request.actions)
        staged = parse_staged_commit_path(request.staged_commit_path)
        if staged is None:
            raise InvalidCommitError(
                f"not a staged commit path: {request.staged_commit_path!r} (expected "
                "_delta_log/_staged_commits/<version>.<uuid>.json, relative to the table root)"
            )
        if request.expected_version is not None and staged.version != request.expected_version:
            raise InvalidCommitError(
                f"staged commit {request.staged_commit_path!r} names version {staged.version}, "
                f"the request expects {request.expected_version}"
            )
        try:
            data = self.store.read(staged.name)
        except FileNotFoundError:
            raise InvalidCommitError(
                f"staged commit {request.staged_commit_path!r} does not exist"
            ) from None
        return parse_actions(data)

    def commit_proposal(
        self,
        request: CommitRequest,
        actions: Sequence[Action],
        *,
        forget_staged: bool = True,
        txn_checked: bool = False,
    ) -> CommitReply:
        """Commit ``request`` whose proposed actions are ``actions`` (module doc).
        ``forget_staged=False``: the caller deletes a replaced staged file itself
        (:meth:`forget_staged`), once the new commit is durable.
        ``txn_checked``: the caller has just found that :meth:`find_committed`
        knows no version for the request's ``txnId`` (not asked again)."""
        won = None if txn_checked else self.find_committed(request.txn_id)
        if won is not None:
            return CommitCommitted(txn_id=request.txn_id, version=won, attempts=0, published=False)
        staged = request.staged_commit_path
        try:
            if staged is not None:
                as_staged = self._ratify_as_staged(request, actions, staged)
                if as_staged is not None:
                    return as_staged
            inline = request.model_copy(update={"actions": tuple(actions)})
            self.committer.restage = staged
            try:
                reply: CommitReply = self.coordinator.commit_inline(inline)
            finally:
                self.committer.restage = None
        except DeltaConcurrentModificationException as conflict:
            return self._conflict(request, conflict)
        except (TableNotFoundError, VersionNotFoundError):
            raise
        except RaydeltaError as error:
            return CommitRejected.from_exception(request.txn_id, error)
        if forget_staged and staged is not None and isinstance(reply, CommitCommitted):
            self.forget_staged(staged, reply.version)
        return reply.model_copy(update={"published": False})

    def commit(self, request: CommitRequest) -> CommitReply:
        return self.commit_proposal(request, self.proposed_actions(request))

    def _conflict(
        self, request: CommitRequest, conflict: DeltaConcurrentModificationException
    ) -> CatalogCommitConflict:
        read_version = request.read_set.read_version
        missed: list[RatifiedCommit] = []
        if read_version is not None:
            try:
                winners = self.coordinator.winners_since(read_version)
            except VersionNotFoundError:
                winners = []
            missed = [
                RatifiedCommit.inline(w.version, w.actions, timestamp=w.in_commit_timestamp)
                for w in winners
            ]
        return CatalogCommitConflict(
            txn_id=request.txn_id,
            exception=type(conflict).__name__,
            message=str(conflict),
            winning_version=conflict.winning_version,
            missed_commits=tuple(missed),
        )

    def _ratify_as_staged(
        self, request: CommitRequest, actions: Sequence[Action], path: str
    ) -> CommitCommitted | None:
        """Ratify the client's staged file as it is, when it can win as it is;
        None when it must be rebased (and re-staged) instead."""
        version = self.version + 1
        read_version = request.read_set.read_version
        if not self.exists or request.expected_version != version:
            return None
        if read_version is not None and read_version != self.version:
            return None
        config = self.table_configuration
        info = _info(actions)
        last_ict = self.coordinator.last_in_commit_timestamp
        if (
            info is None
            or actions[0] is not info
            or info.txn_id != request.txn_id
            or info.in_commit_timestamp is None
            or (last_ict is not None and info.in_commit_timestamp <= last_ict)
            or ROW_TRACKING in config.supported_features  # row ids are the catalog's to assign
            or any(isinstance(a, (Protocol, Metadata)) for a in actions)
        ):
            return None
        return self._ratify_staged_file(version, path, actions, request.txn_id, info)

    def ratify_exact(
        self, version: int, path: str, actions: Sequence[Action], txn_id: str
    ) -> CommitCommitted:
        """Ratify the client's staged file ``path`` as version ``version`` exactly
        as it is, or refuse: the Unity Catalog commit protocol, where the client
        chose the version, and backfills ``<v>.json`` from its own file (so the
        catalog must never rebase or re-stage it: both publishers copy the same
        bytes). Version ``version`` must be the next one; the file must be a
        valid final commit (the one validator), keep the feature's requirements
        and carry a fresh in-commit timestamp. Metadata and protocol changes
        are taken as written (the caller has checked ALTER)."""
        if not self.exists:
            raise TableNotFoundError(f"the catalog holds no version of {self.table_uri}")
        if version != self.version + 1:
            raise RatificationError(
                f"version {version} of {self.table_id} cannot be ratified: the next one is "
                f"{self.version + 1}",
                self.table_id,
                version,
                self.version,
            )
        info = _info(actions)
        if info is None or info.in_commit_timestamp is None:
            raise InvalidCommitError(
                f"staged commit {path!r} has no commitInfo with an inCommitTimestamp "
                "(a catalog-managed table needs in-commit timestamps)"
            )
        last_ict = self.coordinator.last_in_commit_timestamp
        if last_ict is not None and info.in_commit_timestamp <= last_ict:
            raise InvalidCommitError(
                f"staged commit {path!r}: inCommitTimestamp {info.in_commit_timestamp} is not "
                f"after the previous version's {last_ict}"
            )
        return self._ratify_staged_file(version, path, actions, txn_id, info)

    def _ratify_staged_file(
        self, version: int, path: str, actions: Sequence[Action], txn_id: str, info: CommitInfo
    ) -> CommitCommitted:
        """Validate the staged file's actions as a final commit of the current
        configuration, then ratify the file's bytes durably as ``version``."""
        config = self.table_configuration
        validate_commit(
            list(actions),
            is_create=False,
            table_configuration=config,
            final=True,
            table_root=self.table_uri,
        )
        check_commit_actions(actions, protocol=config.protocol, metadata=config.metadata)
        commit = RatifiedCommit.staged(version, path, timestamp=info.in_commit_timestamp)
        data = self.store.read(commit.staged_name or "")
        self.committer.ratify(commit, txn_id, data)
        entry = self.coordinator.apply_committed(version, list(actions))
        return CommitCommitted(
            txn_id=txn_id,
            version=version,
            in_commit_timestamp=entry.in_commit_timestamp,
            attempts=1,
            published=False,
        )

    def forget_staged(self, path: str, won: int) -> None:
        """Delete the client's staged file: another file was ratified for its commit."""
        staged = parse_staged_commit_path(path)
        if staged is None or any(
            c.path == path for c in self.committer.held(won) if c.version == won
        ):
            return
        try:
            self.store.delete(staged.name)
        except FileNotFoundError:
            pass
        except OSError:  # garbage left for collect_staged_garbage
            logger.warning("could not delete staged file %s", path, exc_info=True)
