"""storage/storage_options.py: deltalake's AWS_* keys become s3fs's, raydelta's own
keys never reach fsspec, bad options are typed errors that never show a value."""

from __future__ import annotations

from typing import Any

import pytest

from raydelta.protocol.errors import InvalidArgumentError
from raydelta.storage.storage_options import (
    fsspec_options,
    parse_storage_options,
    scheme_of,
)

SECRET = "s3cr3t-value-never-shown"


def test_deltalake_aws_keys_become_s3fs_keywords() -> None:
    options = fsspec_options(
        "s3://bucket/table",
        {
            "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
            "AWS_ACCESS_KEY_ID": "AKID",
            "AWS_SECRET_ACCESS_KEY": SECRET,
            "AWS_SESSION_TOKEN": "session",
            "AWS_REGION": "eu-west-1",
            "AWS_ALLOW_HTTP": "true",
            "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
            "AWS_S3_ALLOW_UNSAFE_RENAME": "true",
            "conditional_put": "etag",
        },
    )
    assert options == {
        "endpoint_url": "http://127.0.0.1:9000",
        "key": "AKID",
        "secret": SECRET,
        "token": "session",
        "client_kwargs": {"region_name": "eu-west-1"},
        "config_kwargs": {"s3": {"addressing_style": "path"}},
        "use_listings_cache": False,
    }


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("aws_access_key_id", {"key": "x"}),
        ("access_key_id", {"key": "x"}),
        ("AWS_ENDPOINT", {"endpoint_url": "x"}),
        ("endpoint", {"endpoint_url": "x"}),
        ("aws_default_region", {"client_kwargs": {"region_name": "x"}}),
        ("region", {"client_kwargs": {"region_name": "x"}}),
        ("AWS_TOKEN", {"token": "x"}),
        ("AWS_PROFILE", {"profile": "x"}),
    ],
)
def test_every_spelling_delta_rs_accepts(key: str, expected: dict[str, Any]) -> None:
    assert fsspec_options("s3a://bucket/t", {key: "x"}) == {**expected, "use_listings_cache": False}


def test_s3fs_keywords_pass_through_and_win_over_aws_keys() -> None:
    options = fsspec_options(
        "s3://bucket/t",
        {
            "client_kwargs": {"region_name": "us-west-2"},
            "AWS_REGION": "eu-west-1",
            "anon": True,
            "use_listings_cache": True,
        },
    )
    assert options == {
        "client_kwargs": {"region_name": "us-west-2"},
        "anon": True,
        "use_listings_cache": True,
    }


def test_own_keys_are_read_and_never_reach_fsspec() -> None:
    parsed = parse_storage_options("s3://b/t", {"fsync": "false", "single_writer": "TRUE"})
    assert parsed.fsspec == {"use_listings_cache": False}
    assert (parsed.fsync, parsed.single_writer, parsed.atomic_create) == (False, True, True)
    local = parse_storage_options("/tmp/t", {"fsync": False, "auto_mkdir": True})
    assert local.fsspec == {"auto_mkdir": True} and local.fsync is False
    assert not parse_storage_options("s3://b/t", {"conditional_put": "disabled"}).atomic_create


def test_other_schemes_pass_options_through_untranslated() -> None:
    assert fsspec_options("memory://x/t", {"AWS_REGION": "x"}) == {"AWS_REGION": "x"}
    assert [scheme_of(u) for u in ("/a/b", "S3://b/t", "simplecache::s3://b/t")] == [
        "file",
        "s3",
        "simplecache",
    ]


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"AWS_NOT_A_KEY": SECRET}, "AWS_NOT_A_KEY"),
        ({"not_an_s3fs_keyword": SECRET}, "not_an_s3fs_keyword"),
        ({"AWS_S3_LOCKING_PROVIDER": "dynamodb"}, "AWS_S3_LOCKING_PROVIDER"),
        ({"conditional_put": "sometimes"}, "conditional_put"),
        ({"single_writer": SECRET}, "single_writer"),
        ({"AWS_SECRET_ACCESS_KEY": [SECRET]}, "AWS_SECRET_ACCESS_KEY"),
    ],
)
def test_bad_options_name_the_key_never_the_value(options: dict[str, Any], named: str) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        fsspec_options("s3://bucket/t", options)
    assert named in str(caught.value)
    assert SECRET not in str(caught.value) and SECRET not in repr(caught.value)


def test_storage_options_must_be_a_mapping_of_strings() -> None:
    with pytest.raises(InvalidArgumentError, match="dict"):
        fsspec_options("s3://b/t", [("key", "x")])  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="strings"):
        fsspec_options("s3://b/t", {1: "x"})  # type: ignore[dict-item]


def test_the_parsed_options_repr_shows_keys_not_values() -> None:
    parsed = parse_storage_options("s3://b/t", {"AWS_SECRET_ACCESS_KEY": SECRET})
    assert SECRET not in repr(parsed) and "secret" in repr(parsed)
