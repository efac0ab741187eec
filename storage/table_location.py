"""The one spelling of a table's location, with this process's working and
home directories filled in (:func:`raydelta.protocol.locations.table_uri`
is the rule; this module only reads the environment it needs)."""

from __future__ import annotations

import os

from raydelta.protocol.locations import table_uri


def normalize_uri(uri: str) -> str:
    """One spelling per table: local paths become absolute ``file:///`` URIs
    (relative ones against the working directory, ``~`` the home directory)."""
    if uri.startswith("~"):
        uri = os.path.expanduser(uri)  # ~user/... too
    return table_uri(uri, cwd=os.getcwd(), home=os.path.expanduser("~"))


__all__ = ["normalize_uri"]
