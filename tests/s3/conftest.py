"""Fixtures of the S3 suite: tables on the session's moto server (``s3_server``,
``tests/s3_server.py``), one fresh bucket per table, and their actors killed
when the test ends (they are detached and named after the table's URI)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest


def kill_actors_of(bucket: str) -> list[str]:
    """Deactivate every table in ``bucket`` on the table hosts and kill its other
    raydelta actors (dedicated host, checkpoint, cleanup)."""
    from tests.actor_teardown import kill_actors_under

    return kill_actors_under(f"s3://{bucket}")


@pytest.fixture
def s3_table_uri(ray_cluster: Any, s3_server: Any) -> Iterator[Callable[[], str]]:
    """``s3_table_uri()`` -> ``s3://<fresh bucket>/table``; actors reaped at teardown."""
    buckets: list[str] = []

    def make() -> str:
        uri: str = s3_server.new_table_uri()
        buckets.append(uri.split("/")[2])
        return uri

    yield make
    for bucket in buckets:
        kill_actors_of(bucket)
