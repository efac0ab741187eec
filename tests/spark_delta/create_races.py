"""Two creators of the same log names released at once, round after round:
the harness both put-if-absent measurements (local paths, S3) share."""

from __future__ import annotations

import threading
from collections.abc import Callable


def race(
    first: Callable[[int], object], second: Callable[[int], object], rounds: int
) -> list[tuple[bool, bool]]:
    """``first(r)`` and ``second(r)`` at once for each round ``r``; per round,
    whether each call returned (acknowledged) rather than raised."""
    barrier = threading.Barrier(2)
    results: list[list[bool]] = [[], []]

    def run(index: int, create: Callable[[int], object]) -> None:
        for round_ in range(rounds):
            barrier.wait()
            try:
                create(round_)
                results[index].append(True)
            except Exception:
                results[index].append(False)

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate((first, second))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    return list(zip(results[0], results[1], strict=True))
