"""Crash-once fault points, for the fault tests of the actors.

A test sets ``RAYDELTA_FAULT_FILE`` (e.g. through an actor's
``runtime_env``) to a JSON file holding a list of point names; when the
process reaches a listed point it removes that name from the file (so a
restarted actor does not crash again) and exits at once with
:data:`CRASH_EXIT_CODE`, as a killed process would: no cleanup, no reply.

Points: ``before_put`` (commit checked and rebased, nothing written),
``after_put`` (commit file written, state not updated, no reply sent),
``reload`` (an actor rebuilding its state from the log),
``after_sidecars`` (checkpoint sidecars written, top-level file not),
``before_last_checkpoint`` (checkpoint written, ``_last_checkpoint`` not),
``mid_vacuum`` / ``mid_cleanup`` (after the first deletion).

Without the variable the check is one dictionary lookup.
"""

from __future__ import annotations

import json
import os

FAULT_FILE_ENV = "RAYDELTA_FAULT_FILE"
CRASH_EXIT_CODE = 17


def crash_point(point: str) -> None:
    """Exit the process now if ``point`` is armed (see module docstring)."""
    path = os.environ.get(FAULT_FILE_ENV)
    if not path:
        return
    try:
        with open(path) as handle:
            armed = json.load(handle)
    except (FileNotFoundError, ValueError):
        return
    if point not in armed:
        return
    armed.remove(point)
    temp = f"{path}.{os.getpid()}.tmp"
    with open(temp, "w") as handle:
        json.dump(armed, handle)
    os.replace(temp, path)
    os._exit(CRASH_EXIT_CODE)


def arm(path: str, *points: str) -> None:
    """Arm ``points`` in the fault file at ``path`` (test helper)."""
    with open(path, "w") as handle:
        json.dump(list(points), handle)
