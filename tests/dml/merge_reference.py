"""A MERGE computed in plain Python over lists of dicts: the expected rows the
MERGE tests compare raydelta's results with (delta-spark's semantics: the
first clause whose condition holds acts; unmatched rows no clause takes stay)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Row = dict[str, Any]


@dataclass
class Clause:
    action: str  # "update" | "delete" | "insert"
    when: Callable[..., bool] = lambda *rows: True
    make: Callable[..., Row] | None = None


def reference_merge(
    target: list[Row],
    source: list[Row],
    on: Callable[[Row, Row], bool],
    *,
    matched: list[Clause] = (),  # type: ignore[assignment]
    not_matched: list[Clause] = (),  # type: ignore[assignment]
    by_source: list[Clause] = (),  # type: ignore[assignment]
) -> tuple[list[Row], dict[str, int]]:
    out: list[Row] = []
    counts = {"inserted": 0, "updated": 0, "deleted": 0, "copied": 0}
    matched_sources: set[int] = set()
    for t in target:
        hits = [(i, s) for i, s in enumerate(source) if on(t, s)]
        matched_sources.update(i for i, _ in hits)
        if hits:
            assert len(hits) == 1, "the reference handles single matches only"
            s = hits[0][1]
            clause = next((c for c in matched if c.when(t, s)), None)
            if clause is None:
                out.append(t)
                counts["copied"] += 1
            elif clause.action == "delete":
                counts["deleted"] += 1
            else:
                assert clause.make is not None
                out.append({**t, **clause.make(t, s)})
                counts["updated"] += 1
        else:
            clause = next((c for c in by_source if c.when(t)), None)
            if clause is None:
                out.append(t)
                counts["copied"] += 1
            elif clause.action == "delete":
                counts["deleted"] += 1
            else:
                assert clause.make is not None
                out.append({**t, **clause.make(t)})
                counts["updated"] += 1
    for i, s in enumerate(source):
        if i in matched_sources:
            continue
        clause = next((c for c in not_matched if c.when(s)), None)
        if clause is not None:
            assert clause.make is not None
            out.append(clause.make(s))
            counts["inserted"] += 1
    return out, counts
