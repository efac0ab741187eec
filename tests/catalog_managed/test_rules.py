"""The catalogManaged feature's pure rules (protocol/catalog_managed.py)."""

from __future__ import annotations

import uuid

import pytest
from pydantic import ValidationError

from raydelta.protocol.actions import Action, CommitInfo, Protocol
from raydelta.protocol.catalog_managed import (
    RatifiedCommit,
    RatifiedCommits,
    check_commit_actions,
    check_managed_requirements,
    check_no_downgrade,
    ensure_catalog_access,
    is_catalog_managed,
    parse_staged_commit_path,
    requires_catalog,
    staged_commit_name,
    staged_commit_path,
)
from raydelta.protocol.errors import (
    CatalogManagedRequirementError,
    CatalogManagedTableError,
    InvalidCommitInfoError,
    ProtocolDowngradeError,
)
from raydelta.protocol.file_names import LogFileKind
from tests.catalog_managed.managed_tables import (
    MANAGED_PROTOCOL,
    commit_info,
    data_commit,
    metadata,
)

U = "016ae953-37a9-438e-8683-9a9a4a79a395"
FILESYSTEM = Protocol(minReaderVersion=1, minWriterVersion=2)


def test_staged_names_round_trip() -> None:
    path = staged_commit_path(7, U)
    assert path == f"_delta_log/{staged_commit_name(7, U)}"
    assert path == f"_delta_log/_staged_commits/{7:020d}.{U}.json"
    parsed = parse_staged_commit_path(path)
    assert parsed is not None and parsed.kind is LogFileKind.STAGED_COMMIT
    assert (parsed.version, parsed.uuid, parsed.name) == (7, U, staged_commit_name(7, U))
    for bad in (staged_commit_name(7, U), f"_delta_log/{7:020d}.json", "_delta_log/x/1.json"):
        assert parse_staged_commit_path(bad) is None


def test_ratified_commit_has_exactly_one_content() -> None:
    with pytest.raises(ValidationError, match="exactly one"):
        RatifiedCommit(version=1)
    with pytest.raises(ValidationError, match="exactly one"):
        RatifiedCommit(version=1, path=staged_commit_path(1, U), actions=())
    with pytest.raises(ValidationError, match="written for version 2"):
        RatifiedCommit.staged(1, staged_commit_path(2, U))
    with pytest.raises(ValidationError, match="not a staged commit path"):
        RatifiedCommit.staged(1, f"_delta_log/{1:020d}.json")
    with pytest.raises(ValidationError):
        RatifiedCommit.inline(-1, [])


def test_ratified_commit_json_round_trip() -> None:
    inline = RatifiedCommit.inline(3, data_commit(3), timestamp=5)
    assert RatifiedCommit.model_validate_json(inline.model_dump_json()) == inline
    assert inline.txn_id == "txn-3" and inline.is_inline and inline.staged_name is None
    wire = inline.model_dump(mode="json")
    assert wire["actions"][0] == {"commitInfo": commit_info(3).to_json_dict()}
    staged = RatifiedCommit.staged(3, staged_commit_path(3, str(uuid.uuid4())))
    assert RatifiedCommit.model_validate_json(staged.model_dump_json()) == staged
    assert staged.txn_id is None and not staged.is_inline


def test_ratified_commits_are_contiguous_and_capped() -> None:
    one, two = RatifiedCommit.inline(1, []), RatifiedCommit.inline(2, [])
    assert RatifiedCommits(commits=(one, two), latest_version=2).latest_version == 2
    assert RatifiedCommits(latest_version=5).commits == ()
    with pytest.raises(ValidationError, match="contiguous"):
        RatifiedCommits(commits=(two, one), latest_version=2)
    with pytest.raises(ValidationError, match="past the latest"):
        RatifiedCommits(commits=(one, two), latest_version=1)


def test_enablement_and_detection() -> None:
    assert is_catalog_managed(MANAGED_PROTOCOL) and requires_catalog(MANAGED_PROTOCOL)
    writer_only = MANAGED_PROTOCOL.model_copy(update={"reader_features": []})
    assert not is_catalog_managed(writer_only) and requires_catalog(writer_only)
    preview = Protocol(
        minReaderVersion=3,
        minWriterVersion=7,
        readerFeatures=["catalogOwned-preview"],
        writerFeatures=["catalogOwned-preview", "inCommitTimestamp"],
    )
    assert requires_catalog(preview) and not is_catalog_managed(preview)
    assert not requires_catalog(FILESYSTEM)
    ensure_catalog_access(FILESYSTEM, table_uri="t", through_catalog=False)
    ensure_catalog_access(MANAGED_PROTOCOL, table_uri="t", through_catalog=True)
    with pytest.raises(CatalogManagedTableError, match="catalog"):
        ensure_catalog_access(writer_only, table_uri="t", through_catalog=False)


def test_managed_requirements() -> None:
    check_managed_requirements(MANAGED_PROTOCOL, metadata(), commit_info(1))
    no_ict_feature = MANAGED_PROTOCOL.model_copy(update={"writer_features": ["catalogManaged"]})
    with pytest.raises(CatalogManagedRequirementError, match="inCommitTimestamp"):
        check_managed_requirements(no_ict_feature, metadata(), commit_info(1))
    ict_off = metadata(**{"delta.enableInCommitTimestamps": "false"})
    with pytest.raises(CatalogManagedRequirementError, match="active"):
        check_managed_requirements(MANAGED_PROTOCOL, ict_off, commit_info(1))
    with pytest.raises(CatalogManagedRequirementError, match="both"):
        check_managed_requirements(FILESYSTEM, metadata(), commit_info(1))
    with pytest.raises(InvalidCommitInfoError, match="needs a commitInfo"):
        check_managed_requirements(MANAGED_PROTOCOL, metadata(), None)
    no_txn = CommitInfo(inCommitTimestamp=1)
    with pytest.raises(InvalidCommitInfoError, match="txnId"):
        check_managed_requirements(MANAGED_PROTOCOL, metadata(), no_txn)
    with pytest.raises(InvalidCommitInfoError, match="txnId"):
        check_managed_requirements(MANAGED_PROTOCOL, metadata(), CommitInfo(txnId=""))
    with pytest.raises(InvalidCommitInfoError, match="inCommitTimestamp"):
        check_managed_requirements(MANAGED_PROTOCOL, metadata(), CommitInfo(txnId="x"))


def test_downgrade_is_refused() -> None:
    check_no_downgrade(None, FILESYSTEM)
    check_no_downgrade(FILESYSTEM, MANAGED_PROTOCOL)  # the upgrade is the catalog's to allow
    check_no_downgrade(MANAGED_PROTOCOL, MANAGED_PROTOCOL)
    dropped = Protocol(
        minReaderVersion=3,
        minWriterVersion=7,
        readerFeatures=[],
        writerFeatures=["inCommitTimestamp"],
    )
    with pytest.raises(ProtocolDowngradeError, match="catalogManaged"):
        check_no_downgrade(MANAGED_PROTOCOL, dropped)
    with pytest.raises(ProtocolDowngradeError):
        check_commit_actions(
            [commit_info(4), dropped], protocol=MANAGED_PROTOCOL, metadata=metadata()
        )
    check_commit_actions(data_commit(4), protocol=MANAGED_PROTOCOL, metadata=metadata())
    turn_ict_off: list[Action] = [
        commit_info(4),
        metadata(**{"delta.enableInCommitTimestamps": "false"}),
    ]
    with pytest.raises(CatalogManagedRequirementError):
        check_commit_actions(turn_ict_off, protocol=MANAGED_PROTOCOL, metadata=metadata())
