"""protocol.credential_scope: the session policy confining a vended S3 credential.

Besides the document's shape, the policy is evaluated by an IAM evaluator
we did not write (moto's ``IAMPolicy``, the one its server applies to role
policies): table A's keys are allowed, table B's (same bucket, a name
sharing A's prefix), the bucket's root and other buckets are not, and READ
allows no write. moto's evaluator knows only ``StringEquals`` conditions
(it ignores ``StringLike``), so the listing condition is checked against
:func:`fnmatch.fnmatchcase`, which matches ``*`` and ``?`` as IAM's
``StringLike`` does.
"""

from __future__ import annotations

import fnmatch
import json

import pytest

from raydelta.protocol.credential_scope import AccessLevel, s3_session_policy, session_name
from raydelta.protocol.locations import parse_location

A = parse_location("s3://bucket/warehouse/a")


def _evaluate(policy: dict[str, object], action: str, resource: str, prefix: str | None) -> bool:
    from moto.iam.access_control import IAMPolicy, PermissionResult

    values = None if prefix is None else {"s3:prefix": prefix}
    result = IAMPolicy(json.dumps(policy)).is_action_permitted(
        action, resource, incoming_condition_values=values
    )
    return bool(result == PermissionResult.PERMITTED)


@pytest.mark.parametrize("access", list(AccessLevel))
def test_objects_of_the_location_only(access: AccessLevel) -> None:
    policy = s3_session_policy(A, access)
    allowed = _evaluate
    assert allowed(
        policy, "s3:GetObject", "arn:aws:s3:::bucket/warehouse/a/_delta_log/0.json", None
    )
    for elsewhere in (
        "arn:aws:s3:::bucket/warehouse/b/_delta_log/0.json",  # table B, same bucket
        "arn:aws:s3:::bucket/warehouse/ab/part-0.parquet",  # a name sharing A's prefix
        "arn:aws:s3:::bucket/warehouse/a",  # the prefix's own key, not inside it
        "arn:aws:s3:::bucket/root-file",  # the bucket's root
        "arn:aws:s3:::other/warehouse/a/x",  # another bucket
    ):
        assert not allowed(policy, "s3:GetObject", elsewhere, None), elsewhere
    writes = allowed(policy, "s3:PutObject", "arn:aws:s3:::bucket/warehouse/a/part-1.parquet", None)
    deletes = allowed(policy, "s3:DeleteObject", "arn:aws:s3:::bucket/warehouse/a/x", None)
    assert writes == deletes == (access is AccessLevel.READ_WRITE)
    assert not allowed(policy, "s3:PutObject", "arn:aws:s3:::bucket/warehouse/b/x", None)
    assert not allowed(policy, "s3:PutBucketPolicy", "arn:aws:s3:::bucket", None)


def _may_list(policy: dict[str, object], bucket: str, prefix: str) -> bool:
    for statement in policy["Statement"]:  # type: ignore[attr-defined]
        actions = statement["Action"]
        if "s3:ListBucket" not in (actions if isinstance(actions, list) else [actions]):
            continue
        if statement["Resource"] != f"arn:aws:s3:::{bucket}":
            continue
        condition = statement.get("Condition")
        if condition is None:
            return True
        assert list(condition) == ["StringLike"] and list(condition["StringLike"]) == ["s3:prefix"]
        patterns = condition["StringLike"]["s3:prefix"]
        return any(fnmatch.fnmatchcase(prefix, pattern) for pattern in patterns)
    return False


def test_listing_only_under_the_prefix() -> None:
    policy = s3_session_policy(A, AccessLevel.READ)
    assert _may_list(policy, "bucket", "warehouse/a/_delta_log/")
    assert _may_list(policy, "bucket", "warehouse/a")
    for prefix in ("warehouse/b/", "warehouse/", "", "warehouse/ab"):
        assert not _may_list(policy, "bucket", prefix), prefix
    assert not _may_list(policy, "other", "warehouse/a/")
    assert _may_list(
        s3_session_policy(parse_location("s3://bucket"), AccessLevel.READ), "bucket", ""
    )


def test_shape_and_bucket_root() -> None:
    policy = s3_session_policy(parse_location("s3://bucket"), AccessLevel.READ)
    statements = {s["Sid"]: s for s in policy["Statement"]}
    assert statements["ObjectsOfTheLocation"]["Resource"] == "arn:aws:s3:::bucket/*"
    assert "Condition" not in statements["ListTheLocation"]
    assert len(json.dumps(policy)) < 2048  # STS's packed limit has room to spare
    with pytest.raises(ValueError, match="wildcard"):
        s3_session_policy(parse_location("s3://bucket/t*"), AccessLevel.READ)
    with pytest.raises(ValueError, match="s3 location"):
        s3_session_policy(parse_location("/local/t"), AccessLevel.READ)


def test_session_names() -> None:
    assert session_name("etl") == "raydelta-etl"
    assert session_name("a b/c") == "raydelta-a-b-c"
    assert len(session_name("x" * 100)) == 64
