"""This process's memory, as checkpoint tasks and the runner report it.

Invariants:
- Best effort and Linux-first: values come from ``/proc/self/status``;
  where it is missing, :func:`memory_mb` is empty and :func:`peak_rss_mb`
  falls back to ``getrusage``. Never raises.
"""

from __future__ import annotations

import resource
import sys


def memory_mb() -> dict[str, float]:
    """This process's current resident memory by kind, MB: ``anon`` (private),
    ``shmem`` (shared memory it touched, e.g. Ray's object store), ``file``."""
    out: dict[str, float] = {}
    keys = {"RssAnon:": "anon", "RssShmem:": "shmem", "RssFile:": "file"}
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                name = keys.get(line.split(":", 1)[0] + ":")
                if name is not None:
                    out[name] = int(line.split()[1]) * 1024 / 1e6
    except (OSError, ValueError):
        pass
    return out


def peak_rss_mb() -> float:
    """This process's peak resident set size, MB (10**6 bytes).

    ``VmHWM`` of ``/proc/self/status`` where there is one: it belongs to this
    process' address space, whereas Linux carries ``ru_maxrss`` over
    ``execve`` from the process that started it.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024 / 1e6
    except (OSError, ValueError):
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 1e6 if sys.platform == "darwin" else peak * 1024 / 1e6
