"""protocol.unity_privileges: Unity Catalog's privilege names onto raydelta's."""

from __future__ import annotations

import pytest

from raydelta.protocol.errors import InvalidArgumentError
from raydelta.protocol.privileges import Privilege as P
from raydelta.protocol.securables import APPLICABLE, SecurableType
from raydelta.protocol.unity_privileges import (
    UNITY_NAMES,
    parse_unity_privilege,
    parse_unity_privileges,
    unity_names,
)

T = SecurableType


def test_names_and_spellings() -> None:
    assert parse_unity_privilege("SELECT", T.TABLE) == {P.READ}
    assert parse_unity_privilege("modify", T.TABLE) == {P.WRITE}
    assert parse_unity_privilege("USE CATALOG", T.CATALOG) == {P.USE_CATALOG}
    assert parse_unity_privilege("use_schema", T.SCHEMA) == {P.USE_SCHEMA}
    assert parse_unity_privilege(" Create  Schema ", T.CATALOG) == {P.CREATE_SCHEMA}
    assert parse_unity_privilege("MANAGE", T.TABLE) == {P.ALTER}
    assert parse_unity_privileges(["SELECT", "MODIFY"], T.SCHEMA) == {P.READ, P.WRITE}


@pytest.mark.parametrize("kind", list(SecurableType))
def test_all_privileges_is_everything_but_ownership(kind: SecurableType) -> None:
    for spelling in ("ALL PRIVILEGES", "ALL_PRIVILEGES", "all privileges"):
        assert parse_unity_privilege(spelling, kind) == APPLICABLE[kind] - {P.OWN}


@pytest.mark.parametrize("name", ["EXECUTE", "CREATE CATALOG", "READ VOLUME", "OWNER", "", "x"])
def test_unenforceable_names_are_refused(name: str) -> None:
    with pytest.raises(InvalidArgumentError):
        parse_unity_privilege(name, T.TABLE)


def test_replies_use_only_unity_catalogs_enum() -> None:
    assert unity_names([P.OWN, P.ALTER, P.WRITE, P.READ]) == ("SELECT", "MODIFY")
    assert unity_names([P.CREATE_TABLE, P.USE_CATALOG]) == ("USE CATALOG", "CREATE TABLE")
    from unitycatalog.client import Privilege as SdkPrivilege

    assert set(UNITY_NAMES.values()) <= {p.value for p in SdkPrivilege}
