"""Fixtures for the public API tests: every actor a test starts for tables
under its ``tmp_path`` (table, checkpoint, cleanup) is stopped when it ends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raydelta.actors.cluster import NAMESPACE
from raydelta.storage.table_location import normalize_uri


@pytest.fixture
def workdir(ray_cluster: Any, tmp_path: Path) -> Iterator[Path]:
    """``tmp_path``, with the actors of its tables stopped at teardown."""
    yield tmp_path
    prefix = normalize_uri(str(tmp_path))
    for entry in ray_cluster.util.list_named_actors(all_namespaces=True):
        name = entry["name"]
        if entry["namespace"] != NAMESPACE or prefix not in name:
            continue
        try:
            ray_cluster.kill(ray_cluster.get_actor(name, namespace=NAMESPACE), no_restart=True)
        except ValueError:  # already gone
            continue
