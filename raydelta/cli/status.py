"""``raydelta status [--address A] [--json]``: the table hosts and the tables
each holds, and the catalogs' tables whose locations overlap.

Registered by :mod:`raydelta.cli` (an extension module). Attaches to the
Ray cluster at ``--address`` (default ``auto``: the cluster this machine
runs, or ``RAY_ADDRESS``), lists the named table hosts of raydelta's
namespace and asks each for :meth:`~raydelta.actors.table.host.TableHost.status`
(answered from memory, outside every table's lock). First one line per
host: node, pid, memory, tables active and deactivated, restarts; then one
line per active table: version, queue depth, commits/s over the last
minute, conflicts, idle time, its host. ``--json`` prints one JSON list: an entry
per active table (its status merged with its host's fields) and an entry per
host (``"table": "-"``, with ``active``, ``deactivated``, ``inactive``).

Every running ``Catalog`` actor is asked for its
:meth:`~raydelta.actors.catalog.locations.CatalogLocations.location_report`:
tables registered under older rules whose locations overlap another one's
(no credentials are vended for them until an admin drops one). They follow
the table rows as a second table (catalog, table, location, relation, the
other); in ``--json`` they are entries of the same list with a ``catalog``
key (``table``, ``location``, ``relation``, ``overlaps``,
``other_location``), so every entry keeps its ``table`` key.

Every running ``Catalog`` is also asked for its automatic maintenance
(:meth:`~raydelta.actors.catalog.actor.CatalogActor.maintenance_status`):
one row per managed table it maintains (catalog, table, published version,
newest checkpoint, the job running, the last run and its outcome); in
``--json`` entries with ``catalog``, ``table`` and ``maintenance`` (running
job and the recent runs with their reports, newest first).

Invariants: read-only (it never starts an actor or activates a table: a host
that does not answer within :data:`STATUS_TIMEOUT_S` is listed with its error), and it
never starts a cluster (no cluster at the address is an error).
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
from collections.abc import Callable
from typing import Any

Handler = Callable[[argparse.Namespace], int]

STATUS_TIMEOUT_S = 10.0
"""How long one actor may take to answer ``status()``."""

CONNECT_TIMEOUT_S = 5.0
"""How long the GCS port of ``--address host:port`` may take to accept."""

HOST_PREFIX = "table-host:"
CATALOG_PREFIX = "catalog:"


def host_statuses(*, timeout_s: float = STATUS_TIMEOUT_S) -> list[dict[str, Any]]:
    """``status()`` of every running table host in the cluster this process is
    attached to, sorted by host name; a host that does not answer gives
    ``{"host": ..., "error": ...}``."""
    import ray

    from raydelta.actors.cluster import NAMESPACE

    names = _named_actors(HOST_PREFIX)
    pending: list[tuple[str, Any]] = []
    statuses: list[dict[str, Any]] = []
    for name in names:
        try:
            handle = ray.get_actor(name, namespace=NAMESPACE)
        except ValueError:  # stopped since it was listed
            continue
        pending.append((name, handle.status.remote()))
    for name, ref in pending:
        try:
            statuses.append(ray.get(ref, timeout=timeout_s))
        except Exception as exc:  # a dead, restarting or hung host: say so, go on
            ray.cancel(ref)
            statuses.append({"host": name, "error": f"{type(exc).__name__}: {exc}"})
    return statuses


def table_statuses(hosts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per active table of ``hosts``: its status with its host's fields."""
    entries: list[dict[str, Any]] = []
    for host in hosts:
        fields = {k: v for k, v in host.items() if k not in ("tables", "inactive")}
        entries.extend({**fields, **table} for table in host.get("tables", ()))
    return sorted(entries, key=lambda entry: str(entry["table"]))


def _named_actors(prefix: str) -> list[str]:
    """The names of raydelta's running actors that start with ``prefix``, sorted."""
    import ray

    from raydelta.actors.cluster import NAMESPACE

    return sorted(
        entry["name"]
        for entry in ray.util.list_named_actors(all_namespaces=True)
        if entry.get("namespace") == NAMESPACE and entry["name"].startswith(prefix)
    )


def _ask_catalogs(method: str, timeout_s: float) -> list[tuple[str, Any]]:
    """``(catalog, answer)`` of ``method()`` on every running ``Catalog`` actor; an
    answer is ``{"catalog": ..., "table": "-", "error": ...}`` for one that does not
    answer (a dead or hung catalog: said, then the others are asked)."""
    import ray

    from raydelta.actors.cluster import NAMESPACE

    answers: list[tuple[str, Any]] = []
    for name in _named_actors(CATALOG_PREFIX):
        catalog = name[len(CATALOG_PREFIX) :]
        try:
            ref: Any = getattr(ray.get_actor(name, namespace=NAMESPACE), method).remote()
            answers.append((catalog, ray.get(ref, timeout=timeout_s)))
        except ValueError:  # stopped since it was listed
            continue
        except Exception as exc:
            error = {"catalog": catalog, "table": "-", "error": f"{type(exc).__name__}: {exc}"}
            answers.append((catalog, error))
    return answers


def catalog_overlaps(*, timeout_s: float = STATUS_TIMEOUT_S) -> list[dict[str, Any]]:
    """The location report of every running ``Catalog`` actor (module docstring),
    each entry with its ``catalog``; a catalog that does not answer gives
    ``{"catalog": ..., "table": "-", "error": ...}``."""
    found: list[dict[str, Any]] = []
    for catalog, report in _ask_catalogs("location_report", timeout_s):
        if isinstance(report, dict):  # its error
            found.append(report)
        else:
            found.extend({"catalog": catalog, **entry} for entry in report)
    return found


def catalog_maintenance(*, timeout_s: float = STATUS_TIMEOUT_S) -> list[dict[str, Any]]:
    """Per running ``Catalog`` and managed table: what its automatic maintenance
    ran and runs (module docstring); a catalog that does not answer gives
    ``{"catalog": ..., "table": "-", "error": ...}``."""
    found: list[dict[str, Any]] = []
    for catalog, tables in _ask_catalogs("maintenance_status", timeout_s):
        if isinstance(tables, dict):  # its error
            found.append(tables)
            continue
        for table in tables:
            maintenance = {k: v for k, v in table.items() if k != "table"}
            found.append({"catalog": catalog, "table": table["table"], "maintenance": maintenance})
    return found


def _maintenance_row(entry: dict[str, Any]) -> list[str]:
    if "error" in entry:
        return [entry["catalog"], "-", "-", "-", "-", entry["error"][:60]]
    state = entry["maintenance"]
    running = state["running"]
    now = "-" if running is None else f"{running['kind']} v{running['version']}"
    history = state["history"]
    if history:
        last = history[0]
        outcome = "failed: " + last["error"][:40] if "error" in last else "ok"
        done = f"{last['kind']} v{last['version']} {outcome}"
    else:
        done = "-"
    checkpoint = state["newest_checkpoint"]
    return [
        entry["catalog"],
        entry["table"],
        str(state["published_version"]),
        "-" if checkpoint is None else str(checkpoint),
        now,
        done,
    ]


def _overlap_row(entry: dict[str, Any]) -> list[str]:
    if "error" in entry:
        return [entry["catalog"], "-", "-", "-", entry["error"][:60]]
    other = f"{entry['overlaps']} ({entry['other_location']})"
    return [entry["catalog"], entry["table"], entry["location"], entry["relation"], other]


def _host_row(host: dict[str, Any]) -> list[str]:
    if "error" in host:
        return [host["host"], "-", "-", "-", "-", "-", host["error"][:60]]
    return [
        host["host"][len(HOST_PREFIX) :][:40],
        f"{host['node_ip']} {host['node_id'][:12]}",
        str(host["pid"]),
        f"{host['rss_bytes'] / 2**20:.0f} MB",
        str(host["active"]),
        str(host["deactivated"]),
        str(host["host_restarts"]),
    ]


def _row(status: dict[str, Any]) -> list[str]:
    return [
        status["table"],
        str(status["version"]),
        str(status["queue_depth"]),
        f"{status['commits_per_second']:.1f}",
        str(status["conflicts"]),
        f"{status['idle_s']:.0f}s",
        status["host"][len(HOST_PREFIX) :][:24],
    ]


def _unreachable(address: str) -> str | None:
    """Why nothing listens at a ``host:port`` address (Ray would retry for
    minutes), or None (reachable, or not of that form)."""
    host, sep, port = address.rpartition(":")
    if not sep or "://" in address or not port.isdigit():
        return None
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def _status(args: argparse.Namespace) -> int:
    import ray

    from raydelta.actors.cluster import NAMESPACE
    from raydelta.cli.app import _print_rows

    unreachable = _unreachable(args.address)
    if unreachable:
        sys.stderr.write(f"no Ray cluster at {args.address}: {unreachable}\n")
        return 2
    try:
        ray.init(
            address=args.address,
            namespace=NAMESPACE,
            log_to_driver=False,
            configure_logging=False,
        )
    except ConnectionError as exc:
        sys.stderr.write(f"no Ray cluster at {args.address}: {exc}\n")
        return 2
    try:
        hosts = host_statuses()
        overlaps = catalog_overlaps()
        maintained = catalog_maintenance()
    finally:
        ray.shutdown()
    statuses = table_statuses(hosts)
    if args.json:
        host_entries = [
            {**{k: v for k, v in h.items() if k != "tables"}, "table": "-"} for h in hosts
        ]
        everything = statuses + host_entries + overlaps + maintained
        sys.stdout.write(json.dumps(everything, indent=2, sort_keys=True) + "\n")
        return 0
    if not hosts:
        sys.stdout.write("no table hosts are running\n")
    else:
        _print_rows(
            ["host", "node", "pid", "memory", "active", "deactivated", "restarts"],
            [_host_row(host) for host in hosts],
        )
    if statuses:
        sys.stdout.write("\n")
        _print_rows(
            ["table", "version", "queue", "commits/s", "conflicts", "idle", "host"],
            [_row(status) for status in statuses],
        )
    if overlaps:
        sys.stdout.write(
            "\ntables whose locations overlap (no credentials until an admin drops one):\n"
        )
        _print_rows(
            ["catalog", "table", "location", "relation", "overlaps"],
            [_overlap_row(entry) for entry in overlaps],
        )
    if maintained:
        sys.stdout.write("\ncatalog maintenance of managed tables:\n")
        _print_rows(
            ["catalog", "table", "published", "checkpoint", "running", "last run"],
            [_maintenance_row(entry) for entry in maintained],
        )
    return 0


def register(subparsers: Any, command: Callable[[str], Callable[[Handler], Handler]]) -> None:
    """Add the ``status`` subcommand (see :data:`raydelta.cli.EXTENSION_MODULES`)."""
    parser = subparsers.add_parser("status", help="the table hosts and the tables they hold")
    parser.add_argument(
        "--address", default="auto", help="Ray cluster address (default: auto / RAY_ADDRESS)"
    )
    parser.add_argument("--json", action="store_true")
    command("status")(_status)
