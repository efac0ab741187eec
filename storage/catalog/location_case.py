"""Whether a local file system compares path names without case.

The catalog compares locations with :func:`raydelta.protocol.locations.parse_location`,
which folds case only when told the store is case-insensitive; for local
disks that is a property of the file system (macOS and Windows defaults
fold case, Linux's do not), found here by trying it.

Invariant: the probe creates one uniquely named file in an existing
directory, looks it up under another case, and deletes it; a directory that
is missing or not writable reads as case-sensitive (nothing folded: the
stricter comparison for names, never a false "same place").
"""

from __future__ import annotations

import contextlib
import os
import uuid


def local_paths_case_insensitive(directory: str) -> bool:
    """Whether the file system holding ``directory`` folds case (module docstring)."""
    probe = os.path.join(directory, f".raydelta-case-probe-{uuid.uuid4().hex}")
    try:
        with open(probe, "x"):
            pass
    except OSError:
        return False
    try:
        head, tail = os.path.split(probe)
        return os.path.exists(os.path.join(head, tail.upper()))
    finally:
        with contextlib.suppress(OSError):
            os.remove(probe)


__all__ = ["local_paths_case_insensitive"]
