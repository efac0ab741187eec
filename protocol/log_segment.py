"""Choose the files that make up one version of a table: a log segment.

A :class:`LogSegment` for version ``v`` is the newest complete checkpoint at
or before ``v`` plus every commit after it up to ``v`` (optionally with log
compaction files standing in for runs of those commits).
:func:`build_log_segment` takes a listing of ``_delta_log`` (already parsed
into :class:`~raydelta.protocol.file_names.LogFile`) and never touches storage.

Invariants of a built segment:
- ``commits`` are exactly the versions ``start_version .. version`` in
  ascending order, where ``start_version`` is ``checkpoint.version + 1``, or
  ``0`` without a checkpoint. Any hole raises
  :class:`~raydelta.protocol.errors.VersionsNotContiguousError`.
- The checkpoint is complete: a multi-part checkpoint has every part of one
  part count; files known to be empty (``size == 0``) are never used as
  checkpoint parts or compactions. Commits of size 0 are kept (an empty
  commit file is an empty action set; dropping it would silently move the
  latest version back).
- At one version the preference is UUID-named (V2) > multi-part > classic.
  Within a kind, the ``_last_checkpoint`` hint breaks ties when it names a
  file (``v2Checkpoint.path``) or a part count (``parts``) that is present;
  otherwise the choice is deterministic (smallest name, fewest parts). The
  hint never makes a checkpoint usable that the listing does not show.
- A checkpoint at ``v`` is usable even when ``v.json`` is gone (metadata
  cleanup leaves logs like that).
- ``compactions`` lie inside ``(checkpoint.version, version]``, never overlap
  each other, never cover a version supplied by the catalog, and are chosen
  greedily, widest range first.
- Staged commits found in the listing are ignored: only the catalog knows
  which are ratified. Ratified commits passed in by the catalog replace
  published commits of the same version, and published files past the
  catalog's latest version are ignored (CATALOG_MANAGED.md, "Reading
  Catalog-managed Tables"). Inline commits are the caller's business: it
  must give each one a :class:`LogFile` it can resolve.

Which checkpoint is valid (PROTOCOL.md, "Checkpoint Specs", "Checkpoint
Naming Scheme"): a listing cannot tell, the checkpoint's own actions can.
:func:`check_checkpoint_spec` judges them once a reader has them: a
UUID-named checkpoint follows the V2 spec and must hold exactly one
``checkpointMetadata``; a classic-named one is V1 (none, and no sidecar)
or V2 (exactly one); a multi-part one is always V1; a ``checkpointMetadata``
names the checkpoint's own version. A reader that finds a checkpoint
invalid builds the segment again with its files in ``unusable`` (treated
as absent from the listing): an older checkpoint or the commits rebuild
the version, and when nothing does, the checkpoint's
:class:`~raydelta.protocol.errors.InvalidCheckpointError` is the answer,
never a snapshot read from it.

Errors:
- no commit and no checkpoint: :class:`~raydelta.protocol.errors.TableNotFoundError`;
- requested version past the newest one, or older than anything the log can
  still rebuild (no checkpoint at or before it and no ``0.json``):
  :class:`~raydelta.protocol.errors.VersionNotFoundError`;
- latest version requested, no checkpoint at all, and the log does not start
  at ``0.json``: :class:`~raydelta.protocol.errors.InvalidTableError` (as delta-spark,
  which refuses such a log). A caller that listed only from the
  ``_last_checkpoint`` version and hits this should list from the start and
  build again.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import NoReturn

from raydelta.protocol.actions import Action, CheckpointMetadata, Sidecar
from raydelta.protocol.errors import (
    InvalidCheckpointError,
    InvalidTableError,
    TableNotFoundError,
    VersionNotFoundError,
    VersionsNotContiguousError,
)
from raydelta.protocol.file_names import LogFile, LogFileKind
from raydelta.protocol.last_checkpoint import LastCheckpointInfo

_KIND_PREFERENCE = {
    LogFileKind.CHECKPOINT_UUID: 3,
    LogFileKind.CHECKPOINT_MULTIPART: 2,
    LogFileKind.CHECKPOINT_CLASSIC: 1,
}
_MAX_VERSIONS_IN_MESSAGE = 50


@dataclass(frozen=True, slots=True)
class CheckpointRef:
    """A complete checkpoint: one file, or every part of a multi-part one in order."""

    version: int
    kind: LogFileKind
    files: tuple[LogFile, ...]

    @property
    def num_parts(self) -> int:
        return len(self.files)


@dataclass(frozen=True, slots=True)
class LogSegment:
    """The checkpoint and commits that rebuild ``version`` (see module doc)."""

    version: int
    checkpoint: CheckpointRef | None
    commits: tuple[LogFile, ...]
    compactions: tuple[LogFile, ...] = ()
    checksum: LogFile | None = None
    """The ``<version>.crc`` file when the listing has one."""

    @property
    def checkpoint_version(self) -> int | None:
        return None if self.checkpoint is None else self.checkpoint.version

    @property
    def start_version(self) -> int:
        """First version replayed from commits (``checkpoint_version + 1`` or 0)."""
        return 0 if self.checkpoint is None else self.checkpoint.version + 1

    @property
    def commit_versions(self) -> list[int]:
        return [c.require_version() for c in self.commits]

    def replay_units(self) -> list[LogFile]:
        """Commits in ascending version, with each chosen compaction in place
        of the commits it covers (``[compaction.version, compaction.end_version]``)."""
        by_start = {c.require_version(): c for c in self.compactions}
        units: list[LogFile] = []
        skip_through = -1
        for commit in self.commits:
            version = commit.require_version()
            if version <= skip_through:
                continue
            compaction = by_start.get(version)
            if compaction is not None and compaction.end_version is not None:
                units.append(compaction)
                skip_through = compaction.end_version
            else:
                units.append(commit)
        return units


def latest_commit_version(listing: Iterable[LogFile]) -> int | None:
    """Newest published commit version in ``listing`` (``None`` without any)."""
    versions = [f.version for f in listing if f.kind is LogFileKind.COMMIT]
    return max((v for v in versions if v is not None), default=None)


def check_checkpoint_spec(
    checkpoint: CheckpointRef, actions: Iterable[Action], *, names_sidecars: bool = False
) -> None:
    """Raise :class:`InvalidCheckpointError` unless ``checkpoint``, holding
    ``actions`` (its non-file actions at least; ``names_sidecars`` when it
    references sidecar files the actions do not list), follows the spec of
    its naming scheme (module doc)."""
    found = list(actions)
    metadata = [a for a in found if isinstance(a, CheckpointMetadata)]
    sidecars = names_sidecars or any(isinstance(a, Sidecar) for a in found)
    names = ", ".join(f.name for f in checkpoint.files)
    kind = checkpoint.kind
    if kind is LogFileKind.CHECKPOINT_MULTIPART:
        if metadata or sidecars:
            raise InvalidCheckpointError(
                f"multi-part checkpoint {names} holds V2 actions (checkpointMetadata or "
                "sidecar): multi-part checkpoints always follow the V1 spec"
            )
        return
    v2 = kind is LogFileKind.CHECKPOINT_UUID or bool(metadata) or sidecars
    if not v2:
        return
    if not metadata:
        why = "is UUID-named" if kind is LogFileKind.CHECKPOINT_UUID else "names sidecars"
        raise InvalidCheckpointError(
            f"checkpoint {names} {why}, so it follows the V2 spec, but has no "
            "checkpointMetadata action: the spec requires exactly one"
        )
    if len(metadata) > 1:
        raise InvalidCheckpointError(
            f"V2 checkpoint {names} holds {len(metadata)} checkpointMetadata actions: "
            "the spec requires exactly one"
        )
    if metadata[0].version != checkpoint.version:
        raise InvalidCheckpointError(
            f"V2 checkpoint {names} is of version {checkpoint.version} but its "
            f"checkpointMetadata says version {metadata[0].version}"
        )


def complete_checkpoint_at(listing: Iterable[LogFile], version: int) -> CheckpointRef | None:
    """The complete checkpoint of exactly ``version`` in ``listing`` (by the
    preference and completeness rules above: empty files and multi-part
    checkpoints missing a part do not count), or ``None``."""
    files = [f for f in listing if f.kind.is_checkpoint and f.version == version and not f.is_empty]
    return _complete_checkpoints(files, None).get(version)


def build_log_segment(
    listing: Iterable[LogFile],
    *,
    target_version: int | None = None,
    last_checkpoint_hint: LastCheckpointInfo | None = None,
    ratified_commits: Sequence[LogFile] = (),
    catalog_latest_version: int | None = None,
    unusable: Collection[str] = (),
) -> LogSegment:
    """Build the segment for ``target_version`` (latest when ``None``).

    ``ratified_commits`` and ``catalog_latest_version`` come from a managing
    catalog (catalog-managed tables); when ``catalog_latest_version`` is not
    given, the newest ratified commit is taken as the catalog's latest version.
    ``unusable`` names checkpoint files a reader found invalid
    (:func:`check_checkpoint_spec`): they are as absent from the listing.
    """
    if unusable:
        listing = [f for f in listing if f.name not in unusable]
    if target_version is not None and target_version < 0:
        raise VersionNotFoundError(f"cannot load version {target_version}: versions start at 0")

    ratified = _index_ratified(ratified_commits)
    cap = _catalog_cap(ratified, catalog_latest_version)
    commits, checkpoint_files, compaction_files, checksums = _files_by_kind(listing, cap)
    commits.update(ratified)

    checkpoints = _complete_checkpoints(checkpoint_files, last_checkpoint_hint)
    if not commits and not checkpoints:
        raise TableNotFoundError("no commits and no checkpoint found in _delta_log")

    latest = max(max(commits, default=-1), max(checkpoints, default=-1))
    target = latest if target_version is None else target_version
    if target > latest:
        raise VersionNotFoundError(
            f"cannot load version {target}: the latest available version is {latest}"
        )

    checkpoint_version = max((v for v in checkpoints if v <= target), default=None)
    checkpoint = None if checkpoint_version is None else checkpoints[checkpoint_version]
    start = 0 if checkpoint_version is None else checkpoint_version + 1

    if checkpoint is None and 0 not in commits:
        _refuse_without_start(commits, checkpoints, target, asked=target_version is not None)

    segment_versions = [v for v in sorted(commits) if start <= v <= target]
    _check_contiguous(
        segment_versions,
        checkpoint_version=checkpoint_version,
        target=target,
        next_available=_next_available(commits, checkpoints, target),
    )
    segment_commits = tuple(commits[v] for v in segment_versions)
    compactions = _choose_compactions(
        compaction_files, start=start, target=target, catalog_versions=set(ratified)
    )
    return LogSegment(
        version=target,
        checkpoint=checkpoint,
        commits=segment_commits,
        compactions=compactions,
        checksum=checksums.get(target),
    )


def _catalog_cap(ratified: dict[int, LogFile], catalog_latest_version: int | None) -> int | None:
    """The newest version a catalog-managed table may read (None: no catalog):
    the catalog's latest version, else its newest ratified commit."""
    cap = catalog_latest_version
    if cap is None and ratified:
        cap = max(ratified)
    if cap is not None and ratified and max(ratified) > cap:
        raise InvalidTableError(
            f"the catalog ratified version {max(ratified)} beyond its latest version {cap}"
        )
    return cap


def _files_by_kind(
    listing: Iterable[LogFile], cap: int | None
) -> tuple[dict[int, LogFile], list[LogFile], list[LogFile], dict[int, LogFile]]:
    """The listing's commits (by version), non-empty checkpoint and compaction
    files, and checksums (by version), none past ``cap``."""
    commits: dict[int, LogFile] = {}
    checkpoint_files: list[LogFile] = []
    compaction_files: list[LogFile] = []
    checksums: dict[int, LogFile] = {}
    for f in listing:
        version = f.version
        if version is None or (cap is not None and version > cap):
            continue
        if f.kind is LogFileKind.COMMIT:
            commits[version] = f
        elif f.kind.is_checkpoint:
            if not f.is_empty:
                checkpoint_files.append(f)
        elif f.kind is LogFileKind.COMPACTION:
            end = f.end_version
            if not f.is_empty and end is not None and (cap is None or end <= cap):
                compaction_files.append(f)
        elif f.kind is LogFileKind.CHECKSUM and not f.is_empty:
            checksums[version] = f
    return commits, checkpoint_files, compaction_files, checksums


def _refuse_without_start(
    commits: dict[int, LogFile], checkpoints: dict[int, CheckpointRef], target: int, *, asked: bool
) -> NoReturn:
    """No checkpoint at or before ``target`` and no commit 0: the version
    cannot be rebuilt (``asked``: a version was asked for, else the latest)."""
    if not commits:  # only checkpoints, all newer than the target
        raise VersionNotFoundError(
            f"cannot reconstruct version {target}: the earliest checkpoint is version "
            f"{min(checkpoints)} and no commits are left before it"
        )
    earliest = min(commits)
    earliest_checkpoint = min(checkpoints, default=None)
    if asked:
        raise VersionNotFoundError(
            f"cannot reconstruct version {target}: there is no checkpoint at or before it "
            f"and the earliest available commit is version {earliest}"
            + (
                f" (earliest checkpoint: version {earliest_checkpoint})"
                if earliest_checkpoint is not None
                else ""
            )
        )
    raise InvalidTableError(
        f"the log has no checkpoint and its first commit is version {earliest}, not 0: "
        "earlier commits are missing"
    )


def _index_ratified(ratified_commits: Sequence[LogFile]) -> dict[int, LogFile]:
    ratified: dict[int, LogFile] = {}
    for f in ratified_commits:
        if not f.is_commit or f.version is None:
            raise ValueError(f"a ratified commit must be a (staged) commit file, got {f.name!r}")
        existing = ratified.get(f.version)
        if existing is not None and existing.name != f.name:
            raise InvalidTableError(
                f"the catalog returned two ratified commits for version {f.version}: "
                f"{existing.name!r} and {f.name!r}"
            )
        ratified[f.version] = f
    return ratified


def _complete_checkpoints(
    files: Iterable[LogFile], hint: LastCheckpointInfo | None
) -> dict[int, CheckpointRef]:
    """Best complete checkpoint of each version that has one."""
    by_version: dict[int, list[LogFile]] = defaultdict(list)
    for f in files:
        by_version[f.require_version()].append(f)
    best: dict[int, CheckpointRef] = {}
    for version, candidates in by_version.items():
        hint_here = hint if hint is not None and hint.version == version else None
        choices = [
            ref
            for ref in (
                _choose_uuid(version, candidates, hint_here),
                _choose_multipart(version, candidates, hint_here),
                _choose_single(version, candidates, LogFileKind.CHECKPOINT_CLASSIC),
            )
            if ref is not None
        ]
        if choices:
            best[version] = max(choices, key=lambda ref: _KIND_PREFERENCE[ref.kind])
    return best


def _choose_single(
    version: int, candidates: Iterable[LogFile], kind: LogFileKind, preferred: str | None = None
) -> CheckpointRef | None:
    files = sorted((f for f in candidates if f.kind is kind), key=lambda f: f.name)
    if not files:
        return None
    chosen = next((f for f in files if f.name == preferred), files[0])
    return CheckpointRef(version, kind, (chosen,))


def _choose_uuid(
    version: int, candidates: Iterable[LogFile], hint: LastCheckpointInfo | None
) -> CheckpointRef | None:
    preferred = None if hint is None else hint.v2_checkpoint_path
    return _choose_single(version, candidates, LogFileKind.CHECKPOINT_UUID, preferred)


def _choose_multipart(
    version: int, candidates: Iterable[LogFile], hint: LastCheckpointInfo | None
) -> CheckpointRef | None:
    by_count: dict[int, dict[int, LogFile]] = defaultdict(dict)
    for f in candidates:
        if f.kind is LogFileKind.CHECKPOINT_MULTIPART and f.part and f.num_parts:
            by_count[f.num_parts].setdefault(f.part, f)
    complete = sorted(n for n, parts in by_count.items() if len(parts) == n)
    if not complete:
        return None
    count = complete[0]
    if hint is not None and hint.parts is not None and hint.parts in complete:
        count = hint.parts
    parts = by_count[count]
    return CheckpointRef(
        version, LogFileKind.CHECKPOINT_MULTIPART, tuple(parts[i] for i in range(1, count + 1))
    )


def _next_available(
    commits: dict[int, LogFile], checkpoints: dict[int, CheckpointRef], target: int
) -> int | None:
    later = [v for v in commits if v > target] + [v for v in checkpoints if v > target]
    return min(later, default=None)


def _check_contiguous(
    versions: list[int], *, checkpoint_version: int | None, target: int, next_available: int | None
) -> None:
    seen = ([] if checkpoint_version is None else [checkpoint_version]) + versions
    expected_first = 0 if checkpoint_version is None else checkpoint_version
    if (
        seen
        and seen[0] == expected_first
        and seen[-1] == target
        and all(b == a + 1 for a, b in pairwise(seen))
    ):
        return
    if seen and seen[-1] < target and next_available is not None:
        seen = [*seen, next_available]
    missing = _first_gap(seen, expected_first)
    shown = _format_versions(seen)
    raise VersionsNotContiguousError(
        f"versions are not contiguous: {shown} (missing version {missing})", list(seen)
    )


def _first_gap(versions: list[int], expected_first: int) -> int:
    expected = expected_first
    for v in versions:
        if v != expected:
            return expected
        expected += 1
    return expected


def _format_versions(versions: list[int]) -> str:
    if len(versions) <= _MAX_VERSIONS_IN_MESSAGE:
        return str(versions)
    gap_at = next(
        (i for i, (a, b) in enumerate(pairwise(versions)) if b != a + 1),
        0,
    )
    head = versions[max(0, gap_at - 2) : gap_at + 3]
    return f"[{versions[0]}, ..., {', '.join(map(str, head))}, ..., {versions[-1]}]"


def _choose_compactions(
    files: Iterable[LogFile], *, start: int, target: int, catalog_versions: set[int]
) -> tuple[LogFile, ...]:
    ranges = [
        (f.version, f.end_version, f)
        for f in files
        if f.version is not None and f.end_version is not None
    ]
    usable = [
        (lo, hi, f)
        for lo, hi, f in ranges
        if start <= lo <= hi <= target and not any(lo <= v <= hi for v in catalog_versions)
    ]
    usable.sort(key=lambda r: (r[0] - r[1], r[0], r[2].name))  # widest first
    chosen: list[tuple[int, int, LogFile]] = []
    for lo, hi, f in usable:
        if all(hi < c_lo or lo > c_hi for c_lo, c_hi, _ in chosen):
            chosen.append((lo, hi, f))
    return tuple(f for _, _, f in sorted(chosen, key=lambda r: r[0]))
