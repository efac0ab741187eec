"""Fixtures for the Ray Data tests: a quiet Ray Data context on the session's
Ray cluster, and the actors of every table under a test's ``tmp_path``
stopped when it ends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raydelta.actors.cluster import NAMESPACE
from raydelta.storage.table_location import normalize_uri


@pytest.fixture
def workdir(ray_cluster: Any, tmp_path: Path) -> Iterator[Path]:
    """``tmp_path`` on the session's cluster; its tables' actors stopped at teardown."""
    import ray.data

    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    context.print_on_execution_start = False
    yield tmp_path
    prefix = normalize_uri(str(tmp_path))
    for entry in ray_cluster.util.list_named_actors(all_namespaces=True):
        if entry["namespace"] != NAMESPACE or prefix not in entry["name"]:
            continue
        try:
            ray_cluster.kill(
                ray_cluster.get_actor(entry["name"], namespace=NAMESPACE), no_restart=True
            )
        except ValueError:  # already gone
            continue
