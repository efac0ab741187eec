"""The S3 log store on moto's server: conditional puts, 409 retries, fresh listings,
and backends without an atomic create (refused unless single-writer)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from raydelta.protocol.errors import (
    CommitFailedError,
    FileAlreadyExistsError,
    UnsupportedStorageError,
)
from raydelta.protocol.file_names import commit_name
from raydelta.storage.backends.s3 import CONFLICT_RETRIES, S3LogStore
from raydelta.storage.backends.single_writer import SingleWriterLogStore
from raydelta.storage.log.store import log_store_for


def test_the_server_honours_if_none_match(s3_server: Any) -> None:
    """What S3LogStore relies on, checked on the raw API: the second conditional
    create of a key gets 412, which s3fs raises as FileExistsError."""
    fs = s3_server.filesystem()
    path = f"{s3_server.new_bucket()}/key.json"
    fs.pipe_file(path, b"first", mode="create")
    with pytest.raises(FileExistsError):
        fs.pipe_file(path, b"second", mode="create")
    with pytest.raises(FileExistsError), fs.open(path, "xb") as handle:
        handle.write(b"third")
    assert fs.cat_file(path) == b"first"


def test_a_409_conditional_conflict_is_retried_not_failed(s3_server: Any) -> None:
    uri = s3_server.new_table_uri()
    bucket = uri.split("/")[2]
    store = log_store_for(uri, s3_server.storage_options)
    assert isinstance(store, S3LogStore)
    s3_server.inject_conflicts(bucket, 2)
    store.put_if_absent(commit_name(0), b"v0\n")  # 409, 409, then created
    assert store.read(commit_name(0)) == b"v0\n"
    s3_server.inject_conflicts(bucket, 2)
    with pytest.raises(FileAlreadyExistsError):  # 409, 409, then 412: it exists
        store.put_if_absent(commit_name(0), b"again\n")
    assert store.read(commit_name(0)) == b"v0\n"


def test_endless_409s_fail_the_put_with_a_typed_error_and_create_nothing(
    s3_server: Any,
) -> None:
    uri = s3_server.new_table_uri()
    bucket = uri.split("/")[2]
    store = log_store_for(uri, s3_server.storage_options)
    s3_server.inject_conflicts(bucket, CONFLICT_RETRIES + 1)
    with pytest.raises(CommitFailedError, match=commit_name(1)) as caught:
        store.put_if_absent(commit_name(1), b"v1\n")
    assert s3_server.storage_options["secret"] not in str(caught.value)
    assert store.list_from(0) == []
    store.put_if_absent(commit_name(1), b"v1\n")  # the faults are used up
    assert [f.version for f in store.list_from(0)] == [1]


_OTHER_PROCESS = """
import sys
from raydelta.storage.log.store import log_store_for
from raydelta.protocol.file_names import commit_name
log_store_for(sys.argv[1]).put_if_absent(commit_name(int(sys.argv[2])), b"other\\n")
"""


def test_listing_sees_another_process_commit_at_once(s3_server: Any) -> None:
    """s3fs caches listings in the process; a long-lived store must not serve a
    version from that cache (even when the user turns the cache on)."""
    uri = s3_server.new_table_uri()
    options = {**s3_server.storage_options, "use_listings_cache": True}
    store = log_store_for(uri, options)
    store.put_if_absent(commit_name(0), b"mine\n")
    assert [f.version for f in store.list_from(0)] == [0]
    assert store.log_exists()
    env = {  # the other process gets its credentials from the environment, as botocore reads it
        "AWS_ENDPOINT_URL": s3_server.endpoint,
        "AWS_ACCESS_KEY_ID": s3_server.storage_options["key"],
        "AWS_SECRET_ACCESS_KEY": s3_server.storage_options["secret"],
        "AWS_DEFAULT_REGION": s3_server.storage_options["client_kwargs"]["region_name"],
        "PATH": "/usr/bin:/bin",
    }
    subprocess.run(
        [sys.executable, "-c", _OTHER_PROCESS, uri, "1"], env=env, check=True, timeout=120
    )
    assert [f.version for f in store.list_from(0)] == [0, 1]
    assert store.read(commit_name(1)) == b"other\n"


def test_s3_without_conditional_puts_refuses_writes_unless_single_writer(
    s3_server: Any,
) -> None:
    uri = s3_server.new_table_uri()
    writer = log_store_for(uri, s3_server.storage_options)
    writer.put_if_absent(commit_name(0), b"v0\n")
    options = {**s3_server.storage_options, "conditional_put": "disabled"}
    refused = log_store_for(uri, options)
    assert isinstance(refused, SingleWriterLogStore)
    for write in (
        lambda: refused.put_if_absent(commit_name(1), b"v1\n"),
        lambda: refused.write("_last_checkpoint", b"{}"),
        lambda: refused.delete(commit_name(0)),
    ):
        with pytest.raises(UnsupportedStorageError, match="single_writer") as caught:
            write()
        assert options["secret"] not in str(caught.value)
    assert [f.name for f in refused.list_dir()] == [commit_name(0)]  # reads work
    assert refused.read(commit_name(0)) == b"v0\n"
    single = log_store_for(uri, {**options, "single_writer": "true"})
    single.put_if_absent(commit_name(1), b"v1\n")
    with pytest.raises(FileAlreadyExistsError):
        single.put_if_absent(commit_name(1), b"again\n")
    assert [f.version for f in single.list_from(0)] == [0, 1]


def test_a_filesystem_without_a_known_atomic_create_refuses_writes() -> None:
    store = log_store_for("simplecache::memory://raydelta-no-atomic/table")
    assert isinstance(store, SingleWriterLogStore)
    with pytest.raises(UnsupportedStorageError, match="simplecache"):
        store.put_if_absent(commit_name(0), b"v0\n")
    assert store.list_from(0) == []
