"""Winning commits: what conflict checking and rebasing know of a commit that
took a version after a transaction's read version.

Invariants:
- Pure: :meth:`WinningCommit.from_actions` reads only the actions it is
  given (and the file time, when the caller knows it).
- ``is_blind_append`` is the commit's own ``commitInfo.isBlindAppend`` when
  it says, else derived from the actions, the same way for every caller.
- ``row_id_high_water_mark`` is the high-water mark of the commit's
  ``delta.rowTracking`` domain (None without one); a malformed domain is
  refused, as :func:`raydelta.protocol.row_tracking.high_water_mark_of` does.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from raydelta.protocol.actions import (
    Action,
    AddFile,
    CommitInfo,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    Txn,
)
from raydelta.protocol.row_tracking import ROW_TRACKING_DOMAIN, high_water_mark_of

IDENTITY_SCHEMA_UPDATE_TAG = "delta.identity.schemaUpdate"


def _derive_blind_append(actions: Sequence[Action]) -> bool:
    for action in actions:
        if isinstance(action, (RemoveFile, Metadata, Protocol)):
            return False
        if isinstance(action, AddFile) and not action.data_change:
            return False
    return True


@dataclass(frozen=True)
class WinningCommit:
    """What the conflict checker needs to know about one winning commit.

    ``is_blind_append`` is ``commitInfo.isBlindAppend`` when the commit says,
    else derived: no removes, no metadata or protocol change, and every add
    changes data. ``file_timestamp`` is the commit file's modification time
    when known (the previous timestamp for a commit that enables ICT).
    """

    version: int
    protocol: Protocol | None = None
    metadata: Metadata | None = None
    added_files: tuple[AddFile, ...] = ()
    removed_files: tuple[RemoveFile, ...] = ()
    app_ids: frozenset[str] = frozenset()
    domains: tuple[DomainMetadata, ...] = ()
    commit_info: CommitInfo | None = None
    is_blind_append: bool = False
    in_commit_timestamp: int | None = None
    row_id_high_water_mark: int | None = None
    file_timestamp: int | None = None
    actions: tuple[Action, ...] = field(default=(), repr=False, compare=False)

    @classmethod
    def from_actions(
        cls, version: int, actions: Iterable[Action], *, file_timestamp: int | None = None
    ) -> WinningCommit:
        actions = tuple(actions)
        info = next((a for a in actions if isinstance(a, CommitInfo)), None)
        domains = tuple(a for a in actions if isinstance(a, DomainMetadata))
        hwm = None
        for domain in domains:
            if domain.domain == ROW_TRACKING_DOMAIN and not domain.removed:
                hwm = high_water_mark_of(domain)
        blind = (
            info.is_blind_append
            if info is not None and info.is_blind_append is not None
            else _derive_blind_append(actions)
        )
        return cls(
            version=version,
            protocol=next((a for a in actions if isinstance(a, Protocol)), None),
            metadata=next((a for a in actions if isinstance(a, Metadata)), None),
            added_files=tuple(a for a in actions if isinstance(a, AddFile)),
            removed_files=tuple(a for a in actions if isinstance(a, RemoveFile)),
            app_ids=frozenset(a.app_id for a in actions if isinstance(a, Txn)),
            domains=domains,
            commit_info=info,
            is_blind_append=blind,
            in_commit_timestamp=info.in_commit_timestamp if info is not None else None,
            row_id_high_water_mark=hwm,
            file_timestamp=file_timestamp,
            actions=actions,
        )

    @property
    def identity_only_metadata_update(self) -> bool:
        tags = commit_tags(self.commit_info)
        return str(tags.get(IDENTITY_SCHEMA_UPDATE_TAG, "")).lower() == "true"


def commit_tags(info: CommitInfo | None) -> dict[str, Any]:
    """A copy of ``commitInfo.tags`` (empty when absent or not a map)."""
    if info is None or not info.model_extra:
        return {}
    tags = info.model_extra.get("tags")
    return dict(tags) if isinstance(tags, dict) else {}
