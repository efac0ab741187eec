"""read_last_checkpoint: the one reader of ``_last_checkpoint``."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from raydelta.protocol.file_names import LAST_CHECKPOINT_NAME
from raydelta.protocol.last_checkpoint import LastCheckpointInfo, serialize_last_checkpoint
from raydelta.storage.checkpoint.writer import write_last_checkpoint
from raydelta.storage.log.reader import read_last_checkpoint
from raydelta.storage.log.store import LogStore, log_store_for


@pytest.fixture(params=["local", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> LogStore:
    if request.param == "local":
        return log_store_for(f"file://{tmp_path}/table")
    return log_store_for(f"memory://raydelta-test-{uuid.uuid4().hex}/table")


def test_a_missing_file_is_no_hint(store: LogStore) -> None:
    assert read_last_checkpoint(store) is None


@pytest.mark.parametrize("body", [b"", b"not json", b'{"size":3}', b"[1, 2]"])
def test_a_corrupt_file_is_no_hint(store: LogStore, body: bytes) -> None:
    store.write(LAST_CHECKPOINT_NAME, body)
    assert read_last_checkpoint(store) is None


def _version_and_size(store: LogStore) -> tuple[int, int] | None:
    info = read_last_checkpoint(store)
    return None if info is None else (info.version, info.size)


def test_reads_what_the_writer_wrote_and_never_goes_back(store: LogStore) -> None:
    write_last_checkpoint(store, LastCheckpointInfo(version=20, size=7))
    assert _version_and_size(store) == (20, 7)
    write_last_checkpoint(store, LastCheckpointInfo(version=10, size=3))
    assert _version_and_size(store) == (20, 7)
    older = serialize_last_checkpoint(LastCheckpointInfo(version=5, size=1))
    store.write(LAST_CHECKPOINT_NAME, older)
    assert _version_and_size(store) == (5, 1)
