"""Test teardown for tables a test leaves behind: each raydelta table has
detached Ray actors (a process of ~100 MB each) that would otherwise live until
the session's cluster stops."""

from __future__ import annotations

import os
from pathlib import Path


def kill_actors_under(root: Path | str) -> list[str]:
    """Kill (without waiting) every raydelta actor of a table under ``root``:
    its ``TableActor``, ``CheckpointActor`` and ``CleanupActor``; their names.
    ``root`` is a path or URI, matched as given and with symlinks resolved.
    One listing of the named actors; ``ray.kill`` only asks, so a test's
    teardown does not wait for the processes to exit (no later test uses
    their paths). Their saved subscriptions are dropped, as
    ``raydelta.release_table`` does."""
    import ray

    if not ray.is_initialized():
        return []
    from raydelta.actors.cluster import NAMESPACE
    from raydelta.actors.table.actor import forget_subscribers
    from raydelta.storage.table_location import normalize_uri

    prefixes = {normalize_uri(str(root))}
    if "://" not in str(root):
        prefixes.add(normalize_uri(os.path.realpath(root)))
    killed, tables = [], set()
    for entry in ray.util.list_named_actors(all_namespaces=True):
        _, _, uri = entry["name"].partition(":")
        if entry["namespace"] != NAMESPACE or not any(
            uri == p or uri.startswith(p + "/") for p in prefixes
        ):
            continue
        try:
            ray.kill(ray.get_actor(entry["name"], namespace=NAMESPACE), no_restart=True)
        except ValueError:  # died in between
            continue
        killed.append(entry["name"])
        tables.add(uri)
    for uri in tables:
        forget_subscribers(uri)
    return killed
