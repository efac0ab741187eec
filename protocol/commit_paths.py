"""Where a commit's file actions may point: containment of paths in the table root.

PROTOCOL.md, "Add File and Remove File": ``path`` is "a relative path to a
data file from the root of the table or an absolute path", an RFC 2396 URI
"which needs to be decoded to get the data file path"; a ``p``-type deletion
vector's ``pathOrInlineDv`` has "the same format" ("Deletion Vectors").

Invariants (what :func:`check_file_paths` and :func:`check_path` enforce; a
refusal is :class:`~raydelta.protocol.errors.UnsafePathError` naming the
field, the path and the reason):

- Percent-encoding is decoded exactly once (``%2e%2e`` is ``..``;
  ``%252e`` is the literal ``%2e``), as every reader decodes it.
- A path is never empty, and no segment of the decoded path is ``..``
  (``/`` and ``\\`` both separate segments: a Windows reader splits on both).
- No decoded path holds an ASCII control character (U+0000 to U+001F, and
  U+007F), written raw or percent-encoded (``%00``). NUL ends a name in
  every operating system's file API, so no file system can hold a file by
  that name, and Java's file API refuses any path holding it as invalid
  (delta-spark cannot read such a table). The other characters are legal
  on a POSIX file system but not portable: Windows refuses U+0001 to
  U+001F in file names (local NTFS, SMB, Azure Files), Google Cloud
  Storage refuses CR and LF in object names, XML 1.0 (S3's listings)
  cannot carry most of them, and no writer names a data file with one. A
  table is read by many engines on many stores, and a file action stays in
  the log for good: refused here, at the commit, like ``..``.
- An absolute path without a scheme (``/etc/x``) is refused: it names a
  file on whatever default filesystem the reader has; spell it as a URI.
- An absolute URI (``scheme:...``) is accepted when, canonicalised with
  :func:`raydelta.protocol.file_actions.canonical_path` (``file:/x``,
  ``file:///x`` are one file), it lies strictly under the table root; any
  other is refused unless ``allow_external`` (the table property
  ``raydelta.allowExternalFiles``) is set.
- The key of a path (:func:`check_file_paths`' result) is its decoded form
  relative to the root (an absolute URI under the root is relativised; an
  external one stays absolute), so two spellings of one file have one key.
- Cost: paths without ``%``, ``..``, ``\\``, a leading ``/``, a scheme or a
  control character (the paths writers produce) are checked by one Arrow
  regex over all of them; only the others are looked at one by one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc

from raydelta.protocol.errors import UnsafePathError
from raydelta.protocol.file_actions import canonical_path

_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):")
_CONTROL = r"[\x00-\x1f\x7f]"
"""The ASCII control characters no path may hold (module doc)."""
_CONTROL_RE = re.compile(_CONTROL)
_NEEDS_LOOK = r"%|\.\.|\\|^/|^[A-Za-z][A-Za-z0-9+.\-]*:|" + _CONTROL
_NEEDS_LOOK_RE = re.compile(_NEEDS_LOOK)
_SEGMENT_SPLIT = re.compile(r"[/\\]")
_ARROW_FROM = 64
"""From this many paths on, one Arrow regex pass; below it, Python's ``re``."""


def _canonical_uri(uri: str) -> str:
    """``canonical_path`` with the scheme lowercased (schemes are case-insensitive)."""
    match = _SCHEME_RE.match(uri)
    if match is not None:
        uri = match.group(1).lower() + uri[match.end(1) :]
    return canonical_path(uri)


def canonical_root(table_root: str) -> str:
    """The table root as :func:`check_path` compares against it: canonical, no
    trailing ``/``; a plain local path stands for its ``file:`` URI."""
    root = table_root if _SCHEME_RE.match(table_root) else "file://" + table_root
    return _canonical_uri(root).rstrip("/")


def _escapes(decoded: str) -> bool:
    return ".." in _SEGMENT_SPLIT.split(decoded)


def check_path(
    path: str,
    *,
    field: str,
    table_root: str,
    allow_external: bool,
    root: str | None = None,
) -> str:
    """The key of one path (module invariants), or :class:`UnsafePathError`.

    ``field`` names the path's field (``add.path``...) in the error; ``root``
    is ``canonical_root(table_root)`` when the caller has it already.
    """

    def refuse(reason: str) -> UnsafePathError:
        return UnsafePathError(f"{field} {path!r} {reason}", field=field, path=path)

    if not path:
        raise refuse("is empty: every file action names a file")
    decoded = unquote(path)
    if not decoded:
        raise refuse("is empty once decoded")
    control = _CONTROL_RE.search(decoded)
    if control is not None:
        raise refuse(
            f"holds the control character U+{ord(control.group()):04X} (after decoding "
            "percent-encoding once): no file system or object store can hold that name"
        )
    if _escapes(decoded):
        raise refuse(
            "has a '..' segment (after decoding percent-encoding once): a path may not "
            "escape the table root"
        )
    if _SCHEME_RE.match(decoded) is None:
        if decoded.startswith("/"):
            raise refuse(
                "is an absolute path without a scheme (a file on whatever filesystem the "
                "reader defaults to): use a path relative to the table root"
            )
        return decoded
    root = canonical_root(table_root) if root is None else root
    canonical = _canonical_uri(path)  # canonical_path decodes (once) where it decodes
    if canonical.startswith(root + "/") and canonical[len(root) + 1 :].strip("/"):
        return canonical[len(root) + 1 :]
    if allow_external:
        return canonical
    raise refuse(
        f"is outside the table root {table_root!r}; only tables with "
        "raydelta.allowExternalFiles=true may reference files elsewhere"
    )


def check_file_paths(
    paths: Sequence[str],
    *,
    field: str,
    table_root: str,
    allow_external: bool,
) -> list[str]:
    """Check many paths of one field at once; their keys, in order.

    One Arrow pass finds the paths that need a closer look (module doc);
    plain relative paths are their own key.
    """
    keys = list(paths)
    if not keys:
        return keys
    if len(keys) < _ARROW_FROM:  # a few paths: Arrow's call overhead would dominate
        suspects = [i for i, p in enumerate(keys) if not p or _NEEDS_LOOK_RE.search(p)]
        if suspects:
            root = canonical_root(table_root)
            for index in suspects:
                keys[index] = check_path(
                    keys[index],
                    field=field,
                    table_root=table_root,
                    allow_external=allow_external,
                    root=root,
                )
        return keys
    array = pa.array(keys, type=pa.string())
    suspicious = pc.or_(
        pc.match_substring_regex(array, _NEEDS_LOOK),
        pc.equal(pc.utf8_length(array), 0),
    )
    if not pc.any(suspicious).as_py():
        return keys
    root = canonical_root(table_root)
    for index in pc.indices_nonzero(suspicious).to_pylist():
        keys[index] = check_path(
            keys[index],
            field=field,
            table_root=table_root,
            allow_external=allow_external,
            root=root,
        )
    return keys
