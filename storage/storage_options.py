"""Storage options: the one place a table's options become fsspec keywords.

Users pass ``storage_options`` in two spellings, often mixed:

- fsspec's own keywords for the URI's filesystem (for S3, s3fs's ``key``,
  ``secret``, ``token``, ``endpoint_url``, ``client_kwargs``, ``profile``,
  ``anon``, ...), passed through unchanged;
- for ``s3://`` and ``s3a://`` tables, the ``AWS_*`` keys deltalake
  (delta-rs) users already have (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``,
  ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION``,
  ``AWS_ALLOW_HTTP``, ...), in any case and with or without the ``aws_``
  prefix, as delta-rs reads them (:data:`AWS_KEYS`).

Two keys are raydelta's own and never reach fsspec: ``fsync`` (local disks:
``"false"`` skips the fsync of each commit) and ``single_writer`` (backends
without an atomic create: ``"true"`` promises that every commit of the table
goes through its one ``TableActor`` and no other engine writes it; see
``storage/log/store.py``). ``conditional_put`` (delta-rs's key) set to
``"disabled"`` says the S3-compatible store does not honour
``If-None-Match: *``; raydelta then refuses to write unless ``single_writer``.

Credentials and endpoints also come from the environment exactly as botocore
reads it (``AWS_ACCESS_KEY_ID``, ``AWS_ENDPOINT_URL``, ``AWS_PROFILE``, ...),
when the options leave them out.

Invariants:
- :func:`fsspec_options` is the only function that turns user options into
  keyword arguments of an fsspec filesystem (the fsspec backends of
  :mod:`raydelta.storage.backends` call it), so every
  layer (actors, checkpoint tasks, cleanup, data writer, scan) reads a table
  with the same options.
- S3 listings that decide a version are never served from s3fs's in-process
  listing cache: ``use_listings_cache`` is off unless the user sets it (and the
  log store invalidates its directory before every listing anyway).
- Option values never appear in an error message, a repr or a log line:
  errors name the offending key only.
- Bad options raise :class:`~raydelta.protocol.errors.InvalidArgumentError`
  before any I/O.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from raydelta.protocol.errors import InvalidArgumentError

S3_SCHEMES = ("s3", "s3a")
"""URI schemes read through s3fs."""

FSYNC_KEY = "fsync"
SINGLE_WRITER_KEY = "single_writer"
OWN_KEYS = frozenset({FSYNC_KEY, SINGLE_WRITER_KEY})
"""raydelta's own options: read by :func:`parse_storage_options`, never passed to fsspec."""

# deltalake key (lower case, without the "aws_" prefix) -> what it becomes for s3fs.
_CREDENTIALS = {
    "access_key_id": "key",
    "secret_access_key": "secret",
    "session_token": "token",
    "token": "token",
    "profile": "profile",
}
_ENDPOINT_KEYS = frozenset({"endpoint_url", "endpoint"})
_REGION_KEYS = frozenset({"region", "default_region"})
_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})

# Keys delta-rs reads that raydelta accepts and does not need: the endpoint's
# scheme decides http vs https; S3 commits always use conditional writes.
_ACCEPTED_AND_UNUSED = frozenset(
    {
        "allow_http",
        "s3_allow_unsafe_rename",
        "copy_if_not_exists",
        "ec2_metadata_disabled",
        "imdsv1_fallback",
        "unsigned_payload",
        "checksum_algorithm",
    }
)
_LOCKING_KEYS = frozenset({"s3_locking_provider"})

AWS_KEYS = frozenset(
    {
        *_CREDENTIALS,
        *_ENDPOINT_KEYS,
        *_REGION_KEYS,
        *_ACCEPTED_AND_UNUSED,
        *_LOCKING_KEYS,
        "virtual_hosted_style_request",
        "skip_signature",
        "request_payer",
        "conditional_put",
    }
)
"""Every deltalake S3 key understood here (lower case, ``aws_`` prefix removed)."""
_AWS_KEY_NAMES = tuple(sorted("AWS_" + key.upper() for key in AWS_KEYS))


@dataclass(frozen=True)
class ParsedStorageOptions:
    """A table's options, split into fsspec's keywords and raydelta's own."""

    fsspec: dict[str, Any]
    """Keyword arguments for the URI's fsspec filesystem."""
    fsync: bool = True
    single_writer: bool = False
    atomic_create: bool = True
    """False when the user says the backend cannot create a file atomically
    (``conditional_put="disabled"`` on S3)."""

    def __repr__(self) -> str:  # never show values: they hold credentials
        return (
            f"ParsedStorageOptions(keys={sorted(self.fsspec)}, fsync={self.fsync}, "
            f"single_writer={self.single_writer}, atomic_create={self.atomic_create})"
        )


def scheme_of(uri: str) -> str:
    """The lower-case scheme of ``uri`` (``file`` for plain paths); for chained
    URLs (``simplecache::s3://...``) the outermost one."""
    head = uri.split("::", 1)[0]
    if "://" in head:
        return head.split("://", 1)[0].lower()
    return head.lower() if "::" in uri else "file"


def is_s3_uri(uri: str) -> bool:
    return scheme_of(uri) in S3_SCHEMES


def parse_storage_options(
    uri: str, storage_options: Mapping[str, Any] | None = None
) -> ParsedStorageOptions:
    """Split and translate ``storage_options`` for ``uri`` (see the module docstring)."""
    if storage_options is not None and not isinstance(storage_options, Mapping):
        raise InvalidArgumentError(
            f"storage_options must be a dict of option names to values, "
            f"not {type(storage_options).__name__}"
        )
    options = dict(storage_options or {})
    for key in options:
        if not isinstance(key, str):
            raise InvalidArgumentError(
                f"storage_options keys must be strings, not {type(key).__name__}"
            )
    fsync = _flag(options.pop(FSYNC_KEY, True), FSYNC_KEY)
    single_writer = _flag(options.pop(SINGLE_WRITER_KEY, False), SINGLE_WRITER_KEY)
    if not is_s3_uri(uri):
        return ParsedStorageOptions(options, fsync=fsync, single_writer=single_writer)
    fsspec_kwargs, atomic_create = _s3_options(options)
    return ParsedStorageOptions(
        fsspec_kwargs, fsync=fsync, single_writer=single_writer, atomic_create=atomic_create
    )


def fsspec_options(uri: str, storage_options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The keyword arguments of ``uri``'s fsspec filesystem for ``storage_options``."""
    return parse_storage_options(uri, storage_options).fsspec


# object_store's bare names (no "aws_" prefix) that are not s3fs keywords.
_BARE_AWS_NAMES = frozenset(
    {
        "access_key_id",
        "secret_access_key",
        "session_token",
        "endpoint",
        "region",
        "default_region",
        "virtual_hosted_style_request",
        "skip_signature",
        "conditional_put",
        *_ACCEPTED_AND_UNUSED,
        *_LOCKING_KEYS,
    }
)
# Keywords s3fs takes besides its signature's (fsspec's listing cache and instance cache).
_S3FS_EXTRA_KEYWORDS = frozenset(
    {"use_listings_cache", "listings_expiry_time", "max_paths", "skip_instance_cache", "profile"}
)


def _aws_name(key: str) -> str | None:
    """The deltalake key ``key`` stands for (lower case, no ``aws_`` prefix), or None
    when ``key`` is not one (an s3fs keyword, passed through)."""
    lower = key.lower()
    if lower.startswith("aws_"):
        return lower[len("aws_") :]
    if key.isupper() or lower in _BARE_AWS_NAMES:
        return lower
    return None


@functools.cache
def _s3fs_keywords() -> frozenset[str]:
    import inspect

    import s3fs

    parameters = inspect.signature(s3fs.S3FileSystem.__init__).parameters
    named = {n for n, p in parameters.items() if p.kind is not inspect.Parameter.VAR_KEYWORD}
    return frozenset(named - {"self"}) | _S3FS_EXTRA_KEYWORDS


def _s3_options(options: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    kwargs: dict[str, Any] = {}
    client_kwargs: dict[str, Any] = {}
    config_kwargs: dict[str, Any] = {}
    atomic_create = True
    for key, value in options.items():
        name = _aws_name(key)
        if name is None:  # s3fs's own keyword
            if key not in _s3fs_keywords():
                raise InvalidArgumentError(
                    f"storage option {key!r} is neither an s3fs keyword nor a deltalake AWS_* key"
                )
            kwargs[key] = value
            continue
        if name not in AWS_KEYS:
            raise InvalidArgumentError(
                f"storage option {key!r} is not an S3 option raydelta knows "
                f"(deltalake keys it reads: {', '.join(_AWS_KEY_NAMES)})"
            )
        if name in _CREDENTIALS:
            kwargs[_CREDENTIALS[name]] = _text(value, key)
        elif name in _ENDPOINT_KEYS:
            kwargs["endpoint_url"] = _text(value, key)
        elif name in _REGION_KEYS:
            client_kwargs.setdefault("region_name", _text(value, key))
        elif name == "virtual_hosted_style_request":
            style = "virtual" if _flag(value, key) else "path"
            config_kwargs.setdefault("s3", {})["addressing_style"] = style
        elif name == "skip_signature":
            kwargs["anon"] = _flag(value, key)
        elif name == "request_payer":
            kwargs["requester_pays"] = _flag(value, key)
        elif name == "conditional_put":
            atomic_create = _conditional_put(value, key)
        elif name in _LOCKING_KEYS:
            if str(value).strip().lower() not in ("", "none"):
                raise InvalidArgumentError(
                    f"storage option {key!r}: raydelta commits to S3 with conditional writes "
                    "(If-None-Match), which every writer of the table must use; a writer "
                    "locking through DynamoDB instead does not see them. Remove the option "
                    "(delta-rs uses conditional writes too when it is absent)"
                )
        elif name in _ACCEPTED_AND_UNUSED:
            _text(value, key)
    if client_kwargs:
        kwargs["client_kwargs"] = {**client_kwargs, **dict(kwargs.get("client_kwargs") or {})}
    if config_kwargs:
        merged = dict(kwargs.get("config_kwargs") or {})
        merged["s3"] = {**config_kwargs["s3"], **dict(merged.get("s3") or {})}
        kwargs["config_kwargs"] = merged
    kwargs.setdefault("use_listings_cache", False)
    return kwargs, atomic_create


def _conditional_put(value: Any, key: str) -> bool:
    text = _text(value, key).strip().lower()
    if text in ("etag", ""):
        return True
    if text == "disabled":
        return False
    raise InvalidArgumentError(
        f"storage option {key!r} must be 'etag' (the store honours If-None-Match) "
        "or 'disabled' (it does not)"
    )


def _flag(value: Any, key: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower() if isinstance(value, str | int) else None
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise InvalidArgumentError(f"storage option {key!r} must be true or false")


def _text(value: Any, key: str) -> str:
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    raise InvalidArgumentError(f"storage option {key!r} must be a string")
