"""Worker of the multi-process ratification race (run in spawned processes)."""

from __future__ import annotations

from typing import Any

from raydelta.protocol.catalog_managed import RatifiedCommit
from raydelta.protocol.errors import RatificationError
from raydelta.storage.catalog.ratified_store import RatifiedCommitStore


def race(
    store: RatifiedCommitStore, table_id: str, worker: int, txns: list[str], barrier: Any
) -> dict[str, int]:
    """Ratify each txn of ``txns`` at the next version; retry a lost version
    with the same txn id. Returns txn id -> version this worker was told."""
    told: dict[str, int] = {}
    barrier.wait()
    for txn in txns:
        while True:
            latest = store.latest_version(table_id)
            version = 0 if latest is None else latest + 1
            commit = RatifiedCommit.inline(version, [], timestamp=worker)
            try:
                told[txn] = store.ratify(table_id, commit, txn_id=txn).version
                break
            except RatificationError:
                continue
    return told
