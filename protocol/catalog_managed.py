"""The ``catalogManaged`` table feature as pure values (CATALOG_MANAGED.md).

A catalog-managed table's catalog is the source of truth for which commits
won. What a catalog hands a Delta client is modelled here:

- :class:`RatifiedCommit`: version ``v`` won, and its content is either a
  *staged* commit file (``path``, relative to the table root:
  ``_delta_log/_staged_commits/<v>.<uuid>.json``) or *inline* (``actions``
  the catalog stores itself). ``timestamp`` is its in-commit timestamp
  when the catalog knows it.
- :class:`RatifiedCommits`: the answer to "get ratified commits": the
  contiguous commits the catalog still holds and its latest ratified
  version (authoritative even when no commit is held).

And the feature's rules, as checks that raise typed errors:

- :func:`is_catalog_managed`: the spec's enablement (reader 3, writer 7,
  ``catalogManaged`` in both feature lists).
- :func:`requires_catalog`: the protocol names the feature anywhere (either
  list, the ``catalogOwned-preview`` spelling too). A client without the
  catalog must refuse such a table (:func:`ensure_catalog_access`):
  reading it by listing alone could miss ratified, unpublished commits.
- :func:`check_managed_requirements`: a commit to a managed table keeps the
  feature in both lists, keeps in-commit timestamps supported and active,
  and its ``commitInfo`` carries a non-empty ``txnId`` and an
  ``inCommitTimestamp``. (That the ``txnId`` is *unique* is the durable
  store's to check: it remembers every txnId it ratified.)
- :func:`check_no_downgrade`: a managed table stays managed.

Invariants:
- A :class:`RatifiedCommit` has exactly one of ``path`` and ``actions``; a
  ``path`` is a staged commit name whose version is the commit's version
  (the name is authoritative: a staged file is never reused for another
  version). Models are frozen and round-trip through JSON (actions as log
  wrappers ``{"add": {...}}``).
- :class:`RatifiedCommits` holds commits in ascending, contiguous version
  order, none past ``latest_version``.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_serializer,
    field_validator,
    model_validator,
)

from raydelta.protocol.actions import Action, CommitInfo, Metadata, Protocol, action_to_wrapper
from raydelta.protocol.errors import (
    CatalogManagedRequirementError,
    CatalogManagedTableError,
    InvalidCommitInfoError,
    ProtocolDowngradeError,
)
from raydelta.protocol.events import actions_in
from raydelta.protocol.file_names import (
    DELTA_LOG_DIR,
    STAGED_COMMITS_DIR,
    LogFile,
    LogFileKind,
    parse_log_file_name,
    staged_commit_name,
)
from raydelta.protocol.table_configuration import TableConfiguration
from raydelta.protocol.table_features import (
    CATALOG_MANAGED,
    CATALOG_OWNED_PREVIEW,
    IN_COMMIT_TIMESTAMP,
    TABLE_FEATURES_READER_VERSION,
    TABLE_FEATURES_WRITER_VERSION,
    same_feature_names,
)

__all__ = [
    "RatifiedCommit",
    "RatifiedCommits",
    "check_commit_actions",
    "check_managed_requirements",
    "check_no_downgrade",
    "ensure_catalog_access",
    "is_catalog_managed",
    "parse_staged_commit_path",
    "requires_catalog",
    "staged_commit_name",
    "staged_commit_path",
]

STAGED_PREFIX = f"{DELTA_LOG_DIR}/"


def staged_commit_path(version: int, uuid: str) -> str:
    """``_delta_log/_staged_commits/<v>.<uuid>.json``: relative to the table root."""
    return STAGED_PREFIX + staged_commit_name(version, uuid)


def parse_staged_commit_path(path: str) -> LogFile | None:
    """The staged commit a root-relative ``path`` names, or None if it names none.

    The result's ``name`` is relative to ``_delta_log`` (what a log store reads).
    """
    if not path.startswith(STAGED_PREFIX):
        return None
    parsed = parse_log_file_name(path[len(STAGED_PREFIX) :])
    if parsed is None or parsed.kind is not LogFileKind.STAGED_COMMIT:
        return None
    return parsed


class RatifiedCommit(BaseModel):
    """Version ``version`` as its catalog ratified it: staged (``path``) or inline (``actions``)."""

    model_config = ConfigDict(frozen=True)

    version: int = Field(ge=0)
    path: str | None = None
    """A staged commit file relative to the table root (``_delta_log/_staged_commits/...``)."""
    actions: tuple[Action, ...] | None = None
    """The inline commit's actions, in log order."""
    timestamp: int | None = None
    """The commit's in-commit timestamp (ms), when the catalog knows it."""

    _normalize_actions = field_validator("actions", mode="before")(actions_in)

    @field_serializer("actions")
    def _serialize_actions(self, actions: tuple[Action, ...] | None) -> list[Any] | None:
        return None if actions is None else [action_to_wrapper(a) for a in actions]

    @model_validator(mode="after")
    def _one_content(self) -> RatifiedCommit:
        if (self.path is None) == (self.actions is None):
            raise ValueError("a ratified commit has exactly one of path (staged) and actions")
        if self.path is not None:
            staged = parse_staged_commit_path(self.path)
            if staged is None:
                raise ValueError(
                    f"not a staged commit path: {self.path!r} (expected "
                    f"{DELTA_LOG_DIR}/{STAGED_COMMITS_DIR}/<20-digit version>.<uuid>.json)"
                )
            if staged.version != self.version:
                raise ValueError(
                    f"staged commit {self.path!r} was written for version {staged.version}, "
                    f"not {self.version}"
                )
        return self

    @classmethod
    def staged(cls, version: int, path: str, *, timestamp: int | None = None) -> RatifiedCommit:
        return cls(version=version, path=path, timestamp=timestamp)

    @classmethod
    def inline(
        cls, version: int, actions: Sequence[Action], *, timestamp: int | None = None
    ) -> RatifiedCommit:
        return cls(version=version, actions=tuple(actions), timestamp=timestamp)

    @property
    def is_inline(self) -> bool:
        return self.actions is not None

    @property
    def staged_name(self) -> str | None:
        """The staged file's name relative to ``_delta_log`` (None when inline)."""
        return None if self.path is None else self.path[len(STAGED_PREFIX) :]

    @property
    def txn_id(self) -> str | None:
        """``commitInfo.txnId`` of an inline commit (None when staged or absent)."""
        info = _commit_info(self.actions or ())
        return None if info is None else info.txn_id


class RatifiedCommits(BaseModel):
    """A catalog's answer to "get ratified commits" (module doc)."""

    model_config = ConfigDict(frozen=True)

    commits: tuple[RatifiedCommit, ...] = ()
    latest_version: int | None = None
    """The table's latest ratified version; None only for a table with no commit yet."""

    @model_validator(mode="after")
    def _contiguous(self) -> RatifiedCommits:
        versions = [c.version for c in self.commits]
        if any(b != a + 1 for a, b in pairwise(versions)):
            raise ValueError(f"ratified commits must be ascending and contiguous, got {versions}")
        if versions and (self.latest_version is None or versions[-1] > self.latest_version):
            raise ValueError(
                f"ratified commit {versions[-1]} is past the latest version {self.latest_version}"
            )
        return self


# --- rules ---------------------------------------------------------------------------------


def _listed(names: Sequence[str] | None, feature_name: str) -> bool:
    aliases = same_feature_names(feature_name)
    return any(n in aliases for n in names or ())


def is_catalog_managed(protocol: Protocol) -> bool:
    """The spec's enablement: reader 3, writer 7, ``catalogManaged`` in both lists."""
    return (
        protocol.min_reader_version >= TABLE_FEATURES_READER_VERSION
        and protocol.min_writer_version >= TABLE_FEATURES_WRITER_VERSION
        and _listed(protocol.reader_features, CATALOG_MANAGED)
        and _listed(protocol.writer_features, CATALOG_MANAGED)
    )


def requires_catalog(protocol: Protocol) -> bool:
    """The protocol names ``catalogManaged`` (or ``catalogOwned-preview``) in
    either list: only its catalog can say what the latest version is."""
    lists = [*(protocol.reader_features or ()), *(protocol.writer_features or ())]
    return _listed(lists, CATALOG_MANAGED) or _listed(lists, CATALOG_OWNED_PREVIEW)


def ensure_catalog_access(protocol: Protocol, *, table_uri: str, through_catalog: bool) -> None:
    """Refuse path-only access to a catalog-managed table (:class:`CatalogManagedTableError`)."""
    if through_catalog or not requires_catalog(protocol):
        return
    raise CatalogManagedTableError(
        f"{table_uri} is a catalog-managed table (table feature {CATALOG_MANAGED!r}): its "
        "latest commits may exist only in its catalog, so reading or maintaining it by path "
        "would be stale. Open it through its catalog (raydelta.Catalog.open_table), or pass "
        "what the catalog returned: ratified_commits=... and latest_ratified_version=...",
        table_uri,
    )


def _commit_info(actions: Sequence[Action]) -> CommitInfo | None:
    return next((a for a in actions if isinstance(a, CommitInfo)), None)


def check_managed_requirements(
    protocol: Protocol, metadata: Metadata, commit_info: CommitInfo | None
) -> None:
    """The writer requirements of a catalog-managed table, for one commit.

    ``protocol`` and ``metadata`` are the table's after the commit;
    ``commit_info`` is the commit's. Raises
    :class:`CatalogManagedRequirementError` (feature lists, in-commit
    timestamps) or :class:`InvalidCommitInfoError` (``txnId``,
    ``inCommitTimestamp``).
    """
    if not is_catalog_managed(protocol):
        raise CatalogManagedRequirementError(
            f"a catalog-managed table needs reader version 3, writer version 7 and "
            f"{CATALOG_MANAGED!r} in both readerFeatures and writerFeatures; got reader "
            f"{protocol.min_reader_version} {protocol.reader_features}, writer "
            f"{protocol.min_writer_version} {protocol.writer_features}"
        )
    if not _listed(protocol.writer_features, IN_COMMIT_TIMESTAMP):
        raise CatalogManagedRequirementError(
            f"a catalog-managed table must support {IN_COMMIT_TIMESTAMP!r} (writerFeatures)"
        )
    if not TableConfiguration(protocol, metadata).in_commit_timestamps_enabled:
        raise CatalogManagedRequirementError(
            "a catalog-managed table must keep in-commit timestamps active "
            "(delta.enableInCommitTimestamps=true)"
        )
    if commit_info is None:
        raise InvalidCommitInfoError("a commit to a catalog-managed table needs a commitInfo")
    if not isinstance(commit_info.txn_id, str) or not commit_info.txn_id:
        raise InvalidCommitInfoError(
            "a catalog-managed table's commitInfo needs a txnId (a unique transaction id)"
        )
    if commit_info.in_commit_timestamp is None:
        raise InvalidCommitInfoError(
            "a catalog-managed table's commitInfo needs an inCommitTimestamp"
        )


def check_commit_actions(
    actions: Sequence[Action], *, protocol: Protocol, metadata: Metadata
) -> None:
    """:func:`check_managed_requirements` for a commit given as actions, against
    the table before it (``protocol``/``metadata``; the commit's own win)."""
    new_protocol = next((a for a in actions if isinstance(a, Protocol)), protocol)
    new_metadata = next((a for a in actions if isinstance(a, Metadata)), metadata)
    check_no_downgrade(protocol, new_protocol)
    check_managed_requirements(new_protocol, new_metadata, _commit_info(actions))


def check_no_downgrade(before: Protocol | None, after: Protocol) -> None:
    """A catalog-managed table stays catalog-managed (:class:`ProtocolDowngradeError`)."""
    if before is not None and is_catalog_managed(before) and not is_catalog_managed(after):
        raise ProtocolDowngradeError(
            f"cannot remove the {CATALOG_MANAGED!r} table feature: a catalog-managed table "
            "cannot be turned back into a filesystem table"
        )
