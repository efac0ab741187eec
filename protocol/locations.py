"""Storage locations: the one spelling of a table's location, and which
location holds which.

**Spelling** (:func:`table_uri`, the key raydelta files a table under:
actor names, the catalog's registry, log stores, snapshots). Local tables
are ``file:///abs/path``, whichever way they were given (a plain path, ``~``,
a relative path, Hadoop's ``file:/p``, ``file:///p``, ``file://localhost/p``),
with ``.``, ``..``, doubled and trailing slashes resolved and nothing
percent-decoded (a local file name may hold ``%``). Every other store's URI
is kept as given without trailing slashes: object-store keys are literal.
The other spellings are views of that one: :func:`hadoop_location`
(``file:/p``, what delta-spark and Unity Catalog write) and :func:`file_url`
(``file:///p``, what Spark and Hadoop read). The working directory and the
home directory are passed in (this module reads nothing):
:func:`raydelta.storage.table_location.normalize_uri` supplies them.

**Comparison** (the rest of the module): which location holds which.

A catalog hands out storage by location (a table's, an external location's,
the managed root), so it must know when two spellings name one place and
when one place lies inside another. :func:`parse_location` turns a URI into
a :class:`StorageLocation` (scheme, authority, path segments);
:meth:`StorageLocation.contains` and :meth:`StorageLocation.overlaps` compare
them; :func:`overlapping_pairs` finds every overlap among many.

Invariants (the one comparison every caller uses; pure, no I/O):

- Schemes compare case-insensitively, and aliases of one store are one
  scheme: ``s3a``/``s3n`` are ``s3``, ``gcs`` is ``gs``, ``abfss`` is
  ``abfs``, ``wasbs`` is ``wasb``. A plain absolute path is ``file``;
  ``file:/x``, ``file:///x`` and ``file://localhost/x`` are one place.
- The authority (an object store's bucket or container) compares
  case-insensitively (bucket names are DNS names).
- The path is percent-decoded exactly once, split on ``/`` (a decoded
  ``%2F`` separates too), empty and ``.`` segments dropped, and ``..``
  resolved against the segment before it (never above the root). So a
  trailing slash, a doubled slash, ``a/../b`` or ``%62`` never hide that
  two locations meet. When the store is case-insensitive
  (``case_insensitive=True``), segments compare case-folded.
- ``a.contains(b)``: same scheme and authority, and ``a``'s segments are a
  prefix of ``b``'s (segment-wise: ``/a/b`` does not contain ``/a/bc``).
  Equal locations contain each other; ``s3://bucket`` and ``file:///``
  contain everything in their store. ``overlaps`` is ``contains`` either
  way: the relation the catalog refuses between two tables.
- Relative paths are refused (:class:`~raydelta.protocol.errors.InvalidArgumentError`):
  only the layers above know the working directory.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote

from raydelta.protocol.errors import InvalidArgumentError

SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3", "gcs": "gs", "abfss": "abfs", "wasbs": "wasb"}
"""Schemes that name the same store as another one."""

LOCAL_SCHEMES = frozenset({"file", "local"})
"""Schemes of the local file system (no authority but ``localhost``)."""

PATH_ONLY_SCHEMES = frozenset({"memory"})
"""Schemes whose ``//`` part is the first path segment (fsspec's ``memory://a/b`` is ``/a/b``)."""

_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):(.*)$", re.DOTALL)


@dataclass(frozen=True, order=True)
class StorageLocation:
    """One place in one store (module docstring); build with :func:`parse_location`."""

    scheme: str
    authority: str
    segments: tuple[str, ...]

    def contains(self, other: StorageLocation) -> bool:
        """Whether ``other`` is this location or lies inside it."""
        return (
            self.scheme == other.scheme
            and self.authority == other.authority
            and other.segments[: len(self.segments)] == self.segments
        )

    def overlaps(self, other: StorageLocation) -> bool:
        """Whether one of the two contains the other (equal included)."""
        return self.contains(other) or other.contains(self)

    def relation_to(self, other: StorageLocation) -> str | None:
        """``"equals"``, ``"lies inside"``, ``"contains"`` or None (no overlap):
        how this location stands to ``other``, for messages."""
        if self == other:
            return "equals"
        if other.contains(self):
            return "lies inside"
        if self.contains(other):
            return "contains"
        return None

    @property
    def key_prefix(self) -> str:
        """The path as an object store's key prefix: segments joined by ``/``,
        no leading or trailing slash (empty for a bucket's root)."""
        return "/".join(self.segments)

    def uri(self) -> str:
        """The canonical spelling (``file:///a/b``, ``s3://bucket/a/b``)."""
        path = "/" + self.key_prefix if self.segments else "/"
        if self.scheme in LOCAL_SCHEMES or self.scheme in PATH_ONLY_SCHEMES:
            return f"{self.scheme}://{path}"
        if not self.segments:
            return f"{self.scheme}://{self.authority}"
        return f"{self.scheme}://{self.authority}{path}"


def _segments(path: str, *, case_insensitive: bool) -> tuple[str, ...]:
    out: list[str] = []
    for segment in unquote(path).split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            if out:
                out.pop()
            continue
        out.append(segment.casefold() if case_insensitive else segment)
    return tuple(out)


def parse_location(uri: str, *, case_insensitive: bool = False) -> StorageLocation:
    """``uri`` as a :class:`StorageLocation` (module docstring). ``case_insensitive``:
    the store compares paths without case (its segments are case-folded)."""
    if not isinstance(uri, str) or not uri.strip():
        raise InvalidArgumentError(f"a storage location must be a non-empty string, got {uri!r}")
    match = _SCHEME_RE.match(uri)
    if match is None or len(match.group(1)) == 1:  # no scheme (a Windows drive is no scheme)
        if not uri.startswith("/"):
            raise InvalidArgumentError(
                f"storage location {uri!r} is relative: give an absolute path or a URI"
            )
        scheme, rest = "file", "//" + uri
    else:
        scheme, rest = match.group(1).lower(), match.group(2)
    scheme = SCHEME_ALIASES.get(scheme, scheme)
    authority = ""
    if rest.startswith("//"):
        authority, slash, path = rest[2:].partition("/")
        path = slash + path
    else:
        path = rest
    if scheme in PATH_ONLY_SCHEMES:
        path, authority = f"/{authority}{path}", ""
    elif scheme in LOCAL_SCHEMES:
        if authority.lower() == "localhost":
            authority = ""
        scheme = "file"
    authority = unquote(authority).lower()
    if scheme not in LOCAL_SCHEMES and not authority and scheme not in PATH_ONLY_SCHEMES:
        raise InvalidArgumentError(f"storage location {uri!r} names no bucket or container")
    return StorageLocation(scheme, authority, _segments(path, case_insensitive=case_insensitive))


def table_uri(uri: str, *, cwd: str, home: str) -> str:
    """The one spelling of the table at ``uri`` (module docstring, "Spelling");
    ``cwd`` and ``home`` are absolute directories. Idempotent."""
    if "://" not in uri and not uri.startswith("file:"):
        if uri == "~" or uri.startswith("~/"):
            uri = home + uri[1:]
        return "file://" + posixpath.normpath(posixpath.join(cwd, uri))
    if uri.startswith("file:"):
        path = uri[len("file:") :]
        if path.startswith("//"):
            path = path[2:]
            if path == "localhost" or path.startswith("localhost/"):
                path = path[len("localhost") :] or "/"
        return "file://" + posixpath.normpath(posixpath.join(cwd, path))
    return uri.rstrip("/")


def hadoop_location(uri: str) -> str:
    """``uri`` as delta-spark and Unity Catalog spell locations: without a
    trailing slash, a local one as ``file:/path``."""
    uri = uri.rstrip("/")
    if uri.startswith("file:///"):
        return "file:" + uri[len("file://") :]
    if uri.startswith("/"):
        return "file:" + uri
    return uri


def file_url(uri: str) -> str:
    """``uri`` as Spark and Hadoop read a local location: ``file:///path``
    (``file:/path`` rewritten); any other spelling as it is."""
    if uri.startswith("file:/") and not uri.startswith("file:///"):
        return "file://" + uri[len("file:") :]
    return uri


def overlapping_pairs(
    locations: Mapping[str, StorageLocation],
) -> list[tuple[str, str]]:
    """Every pair of names (in sorted order within the pair, pairs sorted)
    whose locations overlap. Sorting puts a location right before everything
    inside it, so one pass with a stack of open ancestors finds them all."""
    ordered = sorted(locations.items(), key=lambda item: (item[1], item[0]))
    pairs: set[tuple[str, str]] = set()
    open_: list[tuple[str, StorageLocation]] = []
    for name, location in ordered:
        while open_ and not open_[-1][1].contains(location):
            open_.pop()
        for other, _ in open_:
            pairs.add((min(name, other), max(name, other)))
        open_.append((name, location))
    return sorted(pairs)


POLICY_WILDCARDS = frozenset("*?$")
"""Characters access policies read as patterns (``*``, ``?``) or variables (``${..}``)."""


def object_store_spelling_problem(uri: str) -> str | None:
    """Why ``uri`` cannot be an object store's table or external location, or
    None. Object stores take keys literally (``a/../b`` is a key of its own
    there, ``a%2Fb`` may be read as ``a/b`` by one client and not by
    another) and vended credentials name key prefixes in access policies,
    so the path must hold no percent-escape, no empty, ``.`` or ``..``
    segment and none of :data:`POLICY_WILDCARDS`; a trailing slash is fine."""
    match = _SCHEME_RE.match(uri)
    rest = match.group(2) if match is not None and len(match.group(1)) > 1 else uri
    path = rest[2:].partition("/")[2] if rest.startswith("//") else rest.lstrip("/")
    path = path.rstrip("/")
    if "%" in path:
        return "it holds a percent-escape (write the characters themselves)"
    if path and any(p in ("", ".", "..") for p in path.split("/")):
        return "it holds an empty, '.' or '..' segment (object stores do not resolve them)"
    if any(c in POLICY_WILDCARDS for c in path):
        return "it holds '*', '?' or '$', which access policies read as patterns"
    return None


__all__ = [
    "LOCAL_SCHEMES",
    "POLICY_WILDCARDS",
    "SCHEME_ALIASES",
    "StorageLocation",
    "file_url",
    "hadoop_location",
    "object_store_spelling_problem",
    "overlapping_pairs",
    "parse_location",
    "table_uri",
]
