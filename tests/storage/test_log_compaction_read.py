"""Snapshots read through log compaction files equal snapshots read from the
commits those files cover, for every shape real writers produce.

- deltalake's own ``DeltaTable.compact_logs`` (reconciled, newest first);
- raydelta's writer (``write_log_compaction``, reconciled);
- unreconciled files holding every action of the range, oldest first, newest
  first, and newest commit first, over delta-spark's golden table that
  deletes and re-adds the same file (where the order decides the outcome).

The expected snapshot is the same table with the compaction file deleted
(pure commit replay), at every version, and deltalake's read where it reads
the table.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from raydelta.protocol.actions import parse_actions
from raydelta.protocol.file_actions import canonical_path
from raydelta.protocol.file_names import commit_name, compaction_name
from raydelta.protocol.log_compaction import compaction_replacement
from raydelta.storage.checkpoint.sources import read_log_delta
from raydelta.storage.compaction import write_log_compaction
from raydelta.storage.snapshot import Snapshot, load_snapshot


def fingerprint(snap: Snapshot) -> dict[str, Any]:
    return {
        "version": snap.version,
        "protocol": snap.protocol,
        "metadata": snap.metadata,
        "adds": sorted(map(str, snap.files.to_pylist())),
        "removes": sorted(map(str, snap.all_tombstones.to_pylist())),
        "txns": snap.txns,
        "domains": snap.domains,
    }


def _every_version(root: Path) -> list[dict[str, Any]]:
    latest = load_snapshot(str(root)).version
    return [fingerprint(load_snapshot(str(root), version=v)) for v in range(latest + 1)]


def _compare_with_commits(root: Path, compaction: Path) -> None:
    """Every version read with ``compaction`` present equals the commits' replay."""
    with_file = _every_version(root)
    segment = load_snapshot(str(root)).log_segment
    assert segment is not None and compaction.name in [c.name for c in segment.compactions]
    body = compaction.read_bytes()
    compaction.unlink()
    try:
        assert with_file == _every_version(root)
    finally:
        compaction.write_bytes(body)


def _lines(root: Path, version: int) -> list[str]:
    text = (root / "_delta_log" / commit_name(version)).read_text()
    return [line for line in text.split("\n") if line.strip() and '"commitInfo"' not in line]


def test_deltalake_compaction_files_read_like_their_commits(tmp_path: Path) -> None:
    root = tmp_path / "t"
    for i in range(5):
        write_deltalake(
            str(root), pa.table({"x": [i], "p": [f"v {i % 2}"]}), partition_by=["p"], mode="append"
        )
    dt = DeltaTable(str(root))
    dt.delete("x = 1")
    dt = DeltaTable(str(root))
    dt.update({"x": "x + 10"}, predicate="x = 3")
    dt = DeltaTable(str(root))
    latest = dt.version()
    dt.compact_logs(1, latest)
    compaction = root / "_delta_log" / compaction_name(1, latest)
    assert compaction.is_file()
    actions = parse_actions(compaction.read_bytes())
    assert compaction_replacement(actions) is not None  # deltalake reconciles
    _compare_with_commits(root, compaction)
    ours = load_snapshot(str(root))
    theirs = [u.split(f"{root}/", 1)[1] for u in DeltaTable(str(root)).file_uris()]
    mine = [canonical_path(p) for p in ours.files.column("path").to_pylist()]
    assert sorted(mine) == sorted(theirs)


def test_raydelta_compaction_files_read_like_their_commits(
    golden_copy: Callable[[str], Path],
) -> None:
    root = golden_copy("delete-re-add-same-file-different-transactions")
    assert write_log_compaction(_store(root), 1, 3) is not None
    _compare_with_commits(root, root / "_delta_log" / compaction_name(1, 3))


def _store(root: Path) -> Any:
    from raydelta.storage.log.store import log_store_for

    return log_store_for(str(root))


SPANS = [(1, 3), (0, 1)]  # re-add after a remove; a remove after an add (foo at v1: gone)


def _unreconciled(root: Path, span: tuple[int, int], order: str) -> Path:
    commits = [_lines(root, v) for v in range(span[0], span[1] + 1)]
    if order == "oldest-first":
        lines = [line for commit in commits for line in commit]
    elif order == "newest-first":
        lines = [line for commit in reversed(commits) for line in reversed(commit)]
    else:
        lines = [line for commit in reversed(commits) for line in commit]
    compaction = root / "_delta_log" / compaction_name(*span)
    compaction.write_text("\n".join(lines) + "\n")
    return compaction


@pytest.mark.parametrize("span", SPANS)
@pytest.mark.parametrize("order", ["oldest-first", "newest-first", "newest-commit-first"])
def test_unreconciled_compaction_files_read_like_their_commits(
    golden_copy: Callable[[str], Path], order: str, span: tuple[int, int]
) -> None:
    root = golden_copy("delete-re-add-same-file-different-transactions")
    compaction = _unreconciled(root, span, order)
    # 'foo' has two different actions in the range: the commits decide
    assert compaction_replacement(parse_actions(compaction.read_bytes())) is None
    _compare_with_commits(root, compaction)
    assert sorted(load_snapshot(str(root)).files.column("path").to_pylist()) == ["bar", "foo"]


def test_an_unreconciled_file_without_conflicts_is_used(
    golden_copy: Callable[[str], Path],
) -> None:
    """Duplicates that are the very same action are order-free: the file is
    read (its commits are gone to prove it) and gives the commits' state."""
    root = golden_copy("delete-re-add-same-file-different-transactions")
    expected = fingerprint(load_snapshot(str(root)))
    line = _lines(root, 3)[0]
    compaction = root / "_delta_log" / compaction_name(3, 3)
    compaction.write_text(f"{line}\n{json.dumps({'commitInfo': {}})}\n{line}\n")
    # a placeholder commit 3 that would give another state if it were read
    (root / "_delta_log" / commit_name(3)).write_text(json.dumps({"commitInfo": {}}) + "\n")
    assert fingerprint(load_snapshot(str(root))) == expected


@pytest.mark.parametrize("span", SPANS)
@pytest.mark.parametrize("order", ["oldest-first", "newest-first"])
def test_the_checkpoint_driver_reads_compactions_like_snapshots(
    golden_copy: Callable[[str], Path], order: str, span: tuple[int, int]
) -> None:
    """The checkpoint driver (read_log_delta) replays the log the same way:
    an unreconciled compaction file gives way to its commits there too."""
    root = golden_copy("delete-re-add-same-file-different-transactions")
    replayed = {v: load_snapshot(str(root), version=v) for v in range(span[1], 4)}
    _unreconciled(root, span, order)
    for version, snap in replayed.items():
        delta = read_log_delta(_store(root), version)
        assert sorted(map(str, delta.adds.to_pylist())) == sorted(map(str, snap.files.to_pylist()))
        assert sorted(map(str, delta.removes.to_pylist())) == sorted(
            map(str, snap.all_tombstones.to_pylist())
        )
