"""Which DML jobs stay in the caller's process (raydelta.dml.execution):
few small files do; many files, even tiny ones, use the cluster."""

from __future__ import annotations

import pyarrow as pa

from raydelta.dml.execution import SMALL_JOB_BYTES, SMALL_JOB_FILES, is_small_job


def _files(count: int, size: int) -> pa.Table:
    return pa.table({"path": [f"f{i}.parquet" for i in range(count)], "size": [size] * count})


def test_few_small_files_run_in_process() -> None:
    assert is_small_job(_files(10, 1_000))
    assert is_small_job(_files(1, SMALL_JOB_BYTES * 4))  # one file: nothing to spread


def test_a_thousand_tiny_files_use_the_cluster() -> None:
    assert not is_small_job(_files(1_000, 1_000))
    assert not is_small_job(_files(SMALL_JOB_FILES, 10))


def test_many_bytes_use_the_cluster() -> None:
    assert not is_small_job(_files(4, SMALL_JOB_BYTES // 2))
