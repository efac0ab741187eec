"""Test teardown for tables a test leaves behind: their coordinators stay
active in the table hosts, and maintenance actors (a process of ~100 MB
each) and dedicated hosts would otherwise live until the session's cluster
stops."""

from __future__ import annotations

import os
from pathlib import Path


def kill_actors_under(root: Path | str) -> list[str]:
    """Deactivate every table under ``root`` in the pooled table hosts, and kill
    (without waiting) every raydelta actor of such a table: its dedicated host,
    ``CheckpointActor`` and ``CleanupActor``; their names (and the URIs deactivated).
    ``root`` is a path or URI, matched as given and with symlinks resolved.
    One listing of the named actors; ``ray.kill`` only asks, so a test's
    teardown does not wait for the processes to exit (no later test uses
    their paths). Their saved subscriptions are dropped, as
    ``raydelta.release_table`` does."""
    import ray

    if not ray.is_initialized():
        return []
    from raydelta.actors.cluster import NAMESPACE
    from raydelta.actors.table.placement import DEDICATED_PREFIX, HOST_PREFIX
    from raydelta.actors.table.subscriptions import forget_subscribers
    from raydelta.storage.table_location import normalize_uri

    prefixes = {normalize_uri(str(root))}
    if "://" not in str(root):
        prefixes.add(normalize_uri(os.path.realpath(root)))
    killed, tables = [], set()
    entries = ray.util.list_named_actors(all_namespaces=True)
    pooled = [
        entry["name"]
        for entry in entries
        if entry["namespace"] == NAMESPACE
        and entry["name"].startswith(HOST_PREFIX)
        and not entry["name"].startswith(DEDICATED_PREFIX)
    ]
    refs = []
    for name in pooled:
        try:
            refs.append(
                ray.get_actor(name, namespace=NAMESPACE).release_under.remote(sorted(prefixes))
            )
        except ValueError:  # died in between
            continue
    for ref in refs:
        try:
            released = ray.get(ref, timeout=60)
        except Exception:  # a host killed by the test itself: nothing to release there
            continue
        killed.extend(released)
        tables.update(released)
    for entry in entries:
        name = entry["name"]
        if name.startswith(DEDICATED_PREFIX):
            name = name[len(HOST_PREFIX) :]
        _, _, uri = name.partition(":")
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
