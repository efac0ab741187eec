"""Progress bars for long work: shown in terminals and notebooks, never under CI
or when stderr is not a terminal.

Invariants:
- Progress is best effort: a failure to read progress never fails the work.
- No bar is drawn when ``CI`` is set, when ``RAYDELTA_PROGRESS=0``, or when
  neither stderr is a TTY nor a notebook kernel is running.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from raydelta.actors.cluster import get_unwrapped

POLL_SECONDS = 0.2
ProgressReading = tuple[str, int, int]
"""``(stage, done, total)``; total 0 when unknown."""


def progress_enabled() -> bool:
    """Whether bars are drawn here (see the module docstring)."""
    if os.environ.get("CI") or os.environ.get("RAYDELTA_PROGRESS") == "0":
        return False
    if "ipykernel" in sys.modules:
        return True
    return bool(getattr(sys.stderr, "isatty", lambda: False)())


class Bar:
    """A tqdm bar when enabled, else nothing; ``update``/``close`` always work."""

    def __init__(self, *, desc: str, total: int | None = None, unit: str = "it") -> None:
        self._bar: Any = None
        if progress_enabled():
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total, desc=desc, unit=unit, leave=False)

    def update(self, count: int = 1) -> None:
        if self._bar is not None:
            self._bar.update(count)

    def show(self, stage: str, done: int, total: int) -> None:
        """Move the bar to ``done`` of ``total`` in ``stage``."""
        if self._bar is None:
            return
        self._bar.set_description(stage, refresh=False)
        if total and self._bar.total != total:
            self._bar.reset(total=total)
        self._bar.n = done
        self._bar.refresh()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()

    def __enter__(self) -> Bar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def wait_with_progress(ref: Any, read: Callable[[], ProgressReading | None], *, desc: str) -> Any:
    """``ray.get(ref)``, drawing what ``read`` reports while it runs; an error
    raised in the actor is re-raised as itself (not wrapped by Ray)."""
    import ray

    with Bar(desc=desc) as bar:
        while not ray.wait([ref], timeout=POLL_SECONDS)[0]:
            if bar._bar is None:
                continue
            try:
                reading = read()
            except Exception:  # best effort: the actor may be busy or restarting
                continue
            if reading is not None:
                bar.show(*reading)
    return get_unwrapped(ref)
