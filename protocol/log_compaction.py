"""Reading a log compaction file (``<x>.<y>.compacted.json``) as real writers
produce it: when its actions may stand for the commits ``[x, y]`` it covers.

The spec says a compaction file holds the *reconciled* actions of its range
(PROTOCOL.md, "Log Compaction Files"), and then its order does not matter.
Not every writer reconciles: some write the same logical file (or the same
``txn`` app id, domain, protocol or metadata) several times, newest action
first, others oldest first, and the file does not say which. Replaying such
a file as one commit could resurrect a removed file or drop a re-added one.

Invariants of :func:`compaction_replacement`:
- It returns actions only when folding them gives the same state as folding
  the covered commits, whatever order the writer used: every logical file
  key (path in canonical spelling, relative to the table root when known,
  plus the deletion vector's unique id) and every protocol, metadata,
  ``txn`` app id and metadata domain appears once, or several times as the
  very same action (then one is kept: order cannot matter).
- Otherwise (two different actions for one key, whose order decides the
  outcome) it returns None, and the reader replays the covered commits
  instead; they are always in the log segment. A file holding no action at
  all is not trusted either: commits that changed nothing replay just as fast.
- ``commitInfo`` and ``cdc`` lines carry no state; they are dropped. Unknown
  actions are kept (they are ignored by reconciliation).
- Pure: values in, values out.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from raydelta.protocol.actions import (
    Action,
    AddCDCFile,
    AddFile,
    CommitInfo,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    Txn,
    UnknownAction,
    action_to_wrapper,
)
from raydelta.protocol.file_actions import action_key


def _identity(action: Action) -> str:
    return json.dumps(action_to_wrapper(action), sort_keys=True, separators=(",", ":"))


def _slot(action: Action, table_root: str | None) -> tuple[object, ...] | None:
    """What reconciliation keys ``action`` by (None: carries no state)."""
    if isinstance(action, (AddFile, RemoveFile)):
        return ("file", *action_key(action, table_root))
    if isinstance(action, Protocol):
        return ("protocol",)
    if isinstance(action, Metadata):
        return ("metaData",)
    if isinstance(action, Txn):
        return ("txn", action.app_id)
    if isinstance(action, DomainMetadata):
        return ("domain", action.domain)
    return None


def compaction_replacement(
    actions: Sequence[Action], table_root: str | None = None
) -> list[Action] | None:
    """The actions to replay for a compaction file, or None to replay the
    commits it covers instead (module docstring)."""
    seen: dict[tuple[object, ...], str] = {}
    out: list[Action] = []
    for action in actions:
        if isinstance(action, (CommitInfo, AddCDCFile)):
            continue
        slot = _slot(action, table_root)
        if slot is None:
            if isinstance(action, UnknownAction):
                out.append(action)
            continue
        identity = _identity(action)
        previous = seen.get(slot)
        if previous is None:
            seen[slot] = identity
            out.append(action)
        elif previous != identity:
            return None
    if not seen:
        return None
    return out


def is_reconciled(actions: Sequence[Action], table_root: str | None = None) -> bool:
    """Whether ``actions`` hold each reconciliation key at most once."""
    slots = [s for s in (_slot(a, table_root) for a in actions) if s is not None]
    return len(slots) == len(set(slots))
