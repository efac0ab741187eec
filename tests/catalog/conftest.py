"""Fixtures for the catalog tests: a fresh ``Catalog`` actor per test.

``new_catalog(**options)`` starts a catalog named after the test (its store
and tables under the test's ``tmp_path``); every catalog and table actor the
test started is killed at teardown.
"""

from __future__ import annotations

import contextlib
import itertools
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from raydelta.actors.catalog.actor import catalog_actor_name
from raydelta.actors.cluster import NAMESPACE
from raydelta.catalog import Catalog
from tests.actor_teardown import kill_actors_under

SCHEMA = pa.schema([("date", pa.string()), ("value", pa.int64())])

NewCatalog = Callable[..., Catalog]


def kill_actor(name: str) -> None:
    import ray

    with contextlib.suppress(ValueError):
        ray.kill(ray.get_actor(name, namespace=NAMESPACE), no_restart=True)


@pytest.fixture
def new_catalog(ray_cluster: Any, tmp_path: Path) -> Iterator[NewCatalog]:
    names: list[str] = []
    counter = itertools.count()

    def make(**options: Any) -> Catalog:
        name = options.pop("name", f"test-{uuid.uuid4().hex[:12]}")
        root = options.pop("root", str(tmp_path / f"catalog-{next(counter)}"))
        names.append(name)
        return Catalog(name=name, root=root, **options)

    yield make
    for name in names:
        kill_actor(catalog_actor_name(name))
    kill_actors_under(tmp_path)
