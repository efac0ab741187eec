"""What a vended credential may reach: the session policy of an S3 credential.

A catalog vends short-lived credentials by assuming a role with a *session
policy* (STS ``AssumeRole``'s ``Policy``): the credentials get the
intersection of the role's permissions and this policy, so they reach one
location and nothing else, whatever the role allows. This module builds that
policy as a value.

Invariants (:func:`s3_session_policy`):
- Objects: only keys under the location's prefix (``arn:aws:s3:::bucket/prefix/*``);
  a bucket's root location covers the bucket's keys, never another bucket.
- A location holding a policy wildcard (``*``, ``?``, ``$``) is refused
  (``ValueError``): it would widen the policy past the location.
- Listing: ``s3:ListBucket`` on the bucket, only for ``s3:prefix`` values
  equal to the prefix or under ``prefix/`` (a sibling ``prefix2/`` is not
  listable), plus ``s3:GetBucketLocation``, which clients ask before anything.
- :attr:`AccessLevel.READ`: reads only (``GetObject``, ``GetObjectVersion``);
  :attr:`AccessLevel.READ_WRITE` adds ``PutObject``, ``DeleteObject`` and
  the multipart-upload actions a large write needs. Nothing else (no ACL,
  policy, bucket-level or cross-bucket action) is ever allowed.
"""

from __future__ import annotations

import enum
import re
from typing import Any

from raydelta.protocol.locations import POLICY_WILDCARDS, StorageLocation

POLICY_VERSION = "2012-10-17"

READ_OBJECT_ACTIONS = ("s3:GetObject", "s3:GetObjectVersion")
WRITE_OBJECT_ACTIONS = (
    "s3:PutObject",
    "s3:DeleteObject",
    "s3:AbortMultipartUpload",
    "s3:ListMultipartUploadParts",
)


class AccessLevel(enum.StrEnum):
    """What a vended credential may do at its location."""

    READ = "read"
    READ_WRITE = "read_write"


def s3_session_policy(
    location: StorageLocation, access: AccessLevel, *, partition: str = "aws"
) -> dict[str, Any]:
    """The session policy confining a credential to ``location`` (module docstring)."""
    if location.scheme != "s3":
        raise ValueError(f"an S3 session policy needs an s3 location, got {location.uri()}")
    bucket, prefix = location.authority, location.key_prefix
    if any(c in POLICY_WILDCARDS for c in bucket + prefix):
        raise ValueError(f"{location.uri()} holds a policy wildcard ('*', '?' or '$')")
    objects = f"arn:{partition}:s3:::{bucket}/{prefix + '/' if prefix else ''}*"
    bucket_arn = f"arn:{partition}:s3:::{bucket}"
    object_actions = list(READ_OBJECT_ACTIONS)
    list_actions = ["s3:ListBucket"]
    if access is AccessLevel.READ_WRITE:
        object_actions += WRITE_OBJECT_ACTIONS
        list_actions.append("s3:ListBucketMultipartUploads")
    listing: dict[str, Any] = {
        "Sid": "ListTheLocation",
        "Effect": "Allow",
        "Action": list_actions,
        "Resource": bucket_arn,
    }
    if prefix:
        listing["Condition"] = {"StringLike": {"s3:prefix": [prefix, f"{prefix}/*"]}}
    return {
        "Version": POLICY_VERSION,
        "Statement": [
            {
                "Sid": "ObjectsOfTheLocation",
                "Effect": "Allow",
                "Action": object_actions,
                "Resource": objects,
            },
            listing,
            {
                "Sid": "FindTheBucket",
                "Effect": "Allow",
                "Action": "s3:GetBucketLocation",
                "Resource": bucket_arn,
            },
        ],
    }


_SESSION_NAME_CHARS = re.compile(r"[^\w+=,.@-]")


def session_name(principal: str) -> str:
    """An STS ``RoleSessionName`` naming ``principal`` (2-64 of ``[\\w+=,.@-]``),
    so the store's access logs say whom a credential was vended to."""
    name = "raydelta-" + _SESSION_NAME_CHARS.sub("-", principal)
    return name[:64]


__all__ = ["AccessLevel", "s3_session_policy", "session_name"]
