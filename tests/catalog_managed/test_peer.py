"""A filesystem-only peer (deltalake = delta-rs 1.6.6) and a catalog-managed table.

The table is the spec's example: published 0-7, the catalog holding 8 and 9.
A peer that only lists the filesystem would read version 7 (stale); the
right behaviour is to refuse, as raydelta does without the catalog's commits.
delta-rs refuses both reading (any version) and appending: its kernel asks for
the catalog's latest version ("max catalog version") and the Python API has no
way to give it, so it never reads the table wrong and never commits to it
behind the catalog's back.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from raydelta.protocol.errors import CatalogManagedTableError
from raydelta.storage.snapshot import load_snapshot
from tests.catalog_managed.managed_tables import SpecExample

deltalake = pytest.importorskip("deltalake")


@pytest.fixture
def example(tmp_path: Path) -> SpecExample:
    return SpecExample(tmp_path / "table")


def _log_names(root: Path) -> set[str]:
    return {p.name for p in (root / "_delta_log").iterdir()}


def test_deltalake_refuses_to_read_a_catalog_managed_table(example: SpecExample) -> None:
    with pytest.raises(deltalake.exceptions.DeltaError, match=r"(?i)catalog"):
        deltalake.DeltaTable(str(example.root))
    with pytest.raises(deltalake.exceptions.DeltaError, match=r"(?i)catalog"):
        deltalake.DeltaTable(str(example.root), version=3)
    with pytest.raises(CatalogManagedTableError):  # raydelta without the catalog: the same
        load_snapshot(example.uri)


def test_deltalake_refuses_to_commit_behind_the_catalog(example: SpecExample) -> None:
    before = _log_names(example.root)
    with pytest.raises(deltalake.exceptions.DeltaError, match=r"(?i)catalog"):
        deltalake.write_deltalake(
            str(example.root), pa.table({"id": pa.array([1], pa.int64())}), mode="append"
        )
    assert _log_names(example.root) == before
