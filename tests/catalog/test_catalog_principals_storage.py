"""Principals persisted under the catalog's root on any storage the log stores
take (``principals.json`` through fsspec with the catalog's storage options):
a local root, ``memory://``, and S3 (moto's server), reloaded by a new
:class:`Authorizer` exactly as a restarted catalog reloads them."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import fsspec
import pytest

import raydelta
from raydelta.actors.catalog.auth import PRINCIPALS_FILE, Authorizer
from raydelta.protocol.privileges import Privilege
from raydelta.protocol.securables import Securable


def _round_trip(root: str, storage_options: dict[str, Any] | None = None) -> None:
    first = Authorizer.load(enabled=True, root=root, storage_options=storage_options)
    token = first.issue_token("ana")
    first.grant("ana", "t", [Privilege.READ, Privilege.WRITE])
    schema, landing = Securable.schema("main.s"), Securable.external_location("landing")
    # a schema is reachable with its catalog's USE_CATALOG only (Unity Catalog's rule)
    first.grant_on("ana", Securable.catalog("main"), [Privilege.USE_CATALOG])
    first.grant_on("ana", schema, [Privilege.USE_SCHEMA, Privilege.CREATE_TABLE])
    first.grant_on("ana", landing, [Privilege.READ_FILES])

    again = Authorizer.load(enabled=True, root=root, storage_options=storage_options)
    assert again.authenticate(token) == "ana"
    assert again.privileges("ana", "t") >= {Privilege.READ, Privilege.WRITE}
    again.require("ana", "t", [Privilege.WRITE])
    again.require_on("ana", schema, [Privilege.USE_SCHEMA, Privilege.CREATE_TABLE])
    again.require_on("ana", landing, [Privilege.READ_FILES])
    with pytest.raises(raydelta.PermissionDeniedError, match="WRITE_FILES on external location"):
        again.require_on("ana", landing, [Privilege.WRITE_FILES])
    with pytest.raises(raydelta.PermissionDeniedError):
        again.require("ana", "t", [Privilege.ALTER])
    with pytest.raises(raydelta.UnauthenticatedError):
        again.authenticate(token[:-1] + ("A" if token[-1] != "A" else "B"))

    again.revoke("ana", "t", [Privilege.WRITE])
    third = Authorizer.load(enabled=True, root=root, storage_options=storage_options)
    with pytest.raises(raydelta.PermissionDeniedError):
        third.require("ana", "t", [Privilege.WRITE])
    secret = token.split(".", 1)[1]
    fs, path = fsspec.core.url_to_fs(
        f"{root.rstrip('/')}/{PRINCIPALS_FILE}", **(storage_options or {})
    )
    saved = fs.cat_file(path)
    assert secret.encode() not in saved  # only the hash is stored
    assert "ana" in json.loads(saved)["principals"]


def test_principals_on_a_local_root(tmp_path: Path) -> None:
    _round_trip((tmp_path / "catalog").as_uri())


def test_principals_on_a_memory_root() -> None:
    _round_trip(f"memory://principals-{uuid.uuid4().hex}/catalog")


def test_principals_on_s3(s3_server: Any) -> None:
    bucket = s3_server.new_bucket()
    _round_trip(f"s3://{bucket}/catalog", s3_server.storage_options)
