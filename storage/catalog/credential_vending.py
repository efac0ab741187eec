"""Vending temporary credentials for one location (Unity Catalog's
``TemporaryCredentials``), scoped down and short-lived.

:func:`vend_credentials` answers what a client needs to reach a location
the catalog has already authorised it for:

- local paths (``file:``, ``memory:``) and stores other than S3: no cloud
  credential at all, only the URL and an expiration (the client uses its
  own access, as before);
- ``s3://`` / ``s3a://``: credentials from STS ``AssumeRole`` on the role
  the catalog is configured with (``credential_role_arn``), with the
  session policy of :func:`~raydelta.protocol.credential_scope.s3_session_policy`
  (the location's prefix only; read-only for ``READ``) and
  ``DurationSeconds`` = the lifetime; the answer's ``expiration_time`` is the
  one STS states.

Invariants:
- The catalog's own keys are never handed out: without a role the call
  raises :class:`~raydelta.protocol.errors.CredentialsUnavailableError`
  saying how to configure one, and an answer whose key is the catalog's own
  is refused the same way.
- STS is called with the catalog's own credentials (its storage options,
  else botocore's chain: environment, profile, instance role), at
  ``sts_endpoint_url`` or, when unset, at the S3 endpoint the storage
  options name (S3-compatible stores serve STS there), else AWS's default.
- No secret appears in an error message: failures name the role and
  STS's error code only.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from typing import Any

from raydelta.protocol.credential_scope import AccessLevel, s3_session_policy, session_name
from raydelta.protocol.errors import CredentialsUnavailableError
from raydelta.protocol.locations import StorageLocation
from raydelta.storage.storage_options import fsspec_options

DEFAULT_LIFETIME_S = 3600
"""How long vended credentials last unless the catalog says otherwise."""

MIN_LIFETIME_S, MAX_LIFETIME_S = 900, 43_200
"""STS ``AssumeRole``'s bounds on ``DurationSeconds``."""


@dataclass(frozen=True)
class VendingSettings:
    """How a catalog vends S3 credentials: the role it assumes, for how long,
    where STS is, and the external id the role's trust policy may ask for."""

    role_arn: str | None = None
    lifetime_s: int = DEFAULT_LIFETIME_S
    sts_endpoint_url: str | None = None
    external_id: str | None = None


def vend_credentials(
    url: str,
    location: StorageLocation,
    access: AccessLevel,
    *,
    principal: str,
    settings: VendingSettings,
    storage_options: dict[str, Any] | None,
    now_ms: int,
) -> dict[str, Any]:
    """Unity Catalog's ``TemporaryCredentials`` for ``location`` (spelled ``url``
    in the answer), for ``principal``, at ``access`` (module docstring)."""
    answer: dict[str, Any] = {"url": url, "expiration_time": now_ms + settings.lifetime_s * 1000}
    if location.scheme != "s3":
        return answer
    if not settings.role_arn:
        raise CredentialsUnavailableError(
            f"the catalog vends no credentials for {url}: S3 credentials are vended by "
            "assuming a role with a session policy scoped to the location, and no role is "
            "configured (start the catalog with credential_role_arn='arn:aws:iam::<account>:"
            "role/<name>', a role the catalog's own credentials may assume and that may "
            "reach the tables' buckets)"
        )
    options = fsspec_options(url, storage_options)
    client = _sts_client(
        settings.sts_endpoint_url or options.get("endpoint_url"),
        _region(options),
        options.get("key"),
        options.get("secret"),
        options.get("token"),
        options.get("profile"),
    )
    request: dict[str, Any] = {
        "RoleArn": settings.role_arn,
        "RoleSessionName": session_name(principal),
        "Policy": json.dumps(s3_session_policy(location, access), separators=(",", ":")),
        "DurationSeconds": settings.lifetime_s,
    }
    if settings.external_id:
        request["ExternalId"] = settings.external_id
    try:
        issued = client.assume_role(**request)["Credentials"]
    except Exception as error:  # botocore's ClientError, NoCredentialsError, connection errors
        code = getattr(error, "response", {}).get("Error", {}).get("Code") or type(error).__name__
        raise CredentialsUnavailableError(
            f"STS refused to assume {settings.role_arn} for {url} ({code}): check that the "
            "catalog's credentials may assume the role and that the role allows "
            f"DurationSeconds={settings.lifetime_s}"
        ) from None
    own = options.get("key") or os.environ.get("AWS_ACCESS_KEY_ID")
    if own and issued["AccessKeyId"] == own:
        raise CredentialsUnavailableError(
            f"STS answered with the catalog's own access key for {url}; refusing to hand it out"
        )
    answer["expiration_time"] = int(issued["Expiration"].timestamp() * 1000)
    answer["aws_temp_credentials"] = {
        "access_key_id": issued["AccessKeyId"],
        "secret_access_key": issued["SecretAccessKey"],
        "session_token": issued["SessionToken"],
    }
    return answer


def _region(options: dict[str, Any]) -> str:
    region = (options.get("client_kwargs") or {}).get("region_name")
    return str(
        region
        or os.environ.get("AWS_REGION")
        or os.environ.get("AWS_DEFAULT_REGION")
        or "us-east-1"
    )


@functools.lru_cache(maxsize=16)
def _sts_client(
    endpoint_url: str | None,
    region: str,
    key: str | None,
    secret: str | None,
    token: str | None,
    profile: str | None,
) -> Any:
    """A botocore STS client (cached: clients are thread-safe and slow to build)."""
    import botocore.session

    session = botocore.session.Session(profile=profile)
    return session.create_client(
        "sts",
        region_name=region,
        endpoint_url=endpoint_url,
        aws_access_key_id=key,
        aws_secret_access_key=secret,
        aws_session_token=token,
    )


__all__ = [
    "DEFAULT_LIFETIME_S",
    "MAX_LIFETIME_S",
    "MIN_LIFETIME_S",
    "VendingSettings",
    "vend_credentials",
]
