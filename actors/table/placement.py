"""Where a table lives: the pool of table hosts, and which host owns which table.

The pool follows the cluster: every alive node (or, with
:data:`HOST_RESOURCE_ENV`, every alive node with that resource) has
:func:`hosts_per_node` hosts, named ``table-host:<node id>:<i>``, started on that node the first
time a call needs one (so hosts join when nodes join). A table is placed by
rendezvous hashing of its URI over the pool's host names: when a node joins
or leaves, only the tables whose best host changed move. A table marked
dedicated (:func:`set_dedicated`, ``open_table(dedicated=True)`` or the
``raydelta.dedicatedHost`` table property) has a host of its own,
``table-host:dedicated:<uri>``, placed anywhere.

Invariants:
- Placement is advice; ownership is the claim
  (:mod:`raydelta.actors.table.ownership`). Two processes whose views of the
  pool differ for a moment may send a table's calls to two hosts; each host
  serves only under a current claim, so the worst outcome is a move and a
  redirect (:class:`~raydelta.protocol.errors.TableMovedError`), never two
  owners serving.
- A view of the pool is at most :data:`POOL_TTL_S` old unless refreshed on
  demand (after a redirect or a dead host), and always lists hosts in the
  same order for the same nodes.
- Hosts take no CPU slot and are pinned softly to their node: if the node is
  lost Ray may restart a host elsewhere, where it finds itself off its node
  and retires (:mod:`raydelta.actors.table.host`).
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

from raydelta.actors.cluster import NAMESPACE, ensure_ray, start_actor

HOSTS_PER_NODE_ENV = "RAYDELTA_HOSTS_PER_NODE"
"""How many pooled table hosts each node gets (default :data:`DEFAULT_HOSTS_PER_NODE`)."""

DEFAULT_HOSTS_PER_NODE = 2

HOST_RESOURCE_ENV = "RAYDELTA_HOST_RESOURCE"
"""When set, only the nodes that carry this custom resource join the pool (e.g.
keep table hosts off a cluster's head node); every process of the cluster
must see the same value (set it in the job's ``runtime_env``)."""

POOL_TTL_S = 2.0
"""A process re-reads the cluster's nodes at most this often, unless told to."""

HOST_PREFIX = "table-host:"
DEDICATED_PREFIX = f"{HOST_PREFIX}dedicated:"


def hosts_per_node() -> int:
    """The pool size per node, from :data:`HOSTS_PER_NODE_ENV` (at least 1)."""
    raw = os.environ.get(HOSTS_PER_NODE_ENV, "").strip()
    return max(1, int(raw)) if raw.isdigit() else DEFAULT_HOSTS_PER_NODE


@dataclass(frozen=True, order=True)
class HostSlot:
    """One table host of the pool (``node_id``) or a dedicated one (``dedicated``)."""

    name: str
    node_id: str | None = None
    dedicated: str | None = None


def pooled_slot(node_id: str, index: int) -> HostSlot:
    return HostSlot(name=f"{HOST_PREFIX}{node_id}:{index}", node_id=node_id)


def dedicated_slot(table_uri: str) -> HostSlot:
    return HostSlot(name=f"{DEDICATED_PREFIX}{table_uri}", dedicated=table_uri)


def rendezvous(table_uri: str, slots: tuple[HostSlot, ...]) -> HostSlot:
    """The slot with the highest hash of (slot name, table URI): stable while
    the slot stays, and only the tables of a slot that goes or comes move."""
    if not slots:
        raise RuntimeError("the cluster has no alive node to host tables")

    def score(slot: HostSlot) -> bytes:
        return hashlib.blake2b(f"{slot.name}\0{table_uri}".encode(), digest_size=8).digest()

    return max(slots, key=score)


class PoolView:
    """This process's view of the pool (thread-safe; see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._slots: tuple[HostSlot, ...] = ()
        self._read_at = float("-inf")
        self.generation = 0
        """Grows whenever the list of slots changes."""

    def slots(self, *, refresh: bool = False) -> tuple[HostSlot, ...]:
        with self._lock:
            now = time.monotonic()
            if refresh or now - self._read_at > POOL_TTL_S:
                ray = ensure_ray()
                resource = os.environ.get(HOST_RESOURCE_ENV, "").strip()
                alive = sorted(
                    node["NodeID"]
                    for node in ray.nodes()
                    if node.get("Alive") and (not resource or resource in node.get("Resources", {}))
                )
                per_node = hosts_per_node()
                slots = tuple(pooled_slot(node, i) for node in alive for i in range(per_node))
                if slots != self._slots:
                    self._slots = slots
                    self.generation += 1
                self._read_at = now
            return self._slots

    def owner(self, table_uri: str, *, dedicated: bool, refresh: bool = False) -> HostSlot:
        if dedicated:
            return dedicated_slot(table_uri)
        return rendezvous(table_uri, self.slots(refresh=refresh))


POOL = PoolView()
"""The one view of this process."""


def _dedicated_key(table_uri: str) -> bytes:
    return f"dedicated:{table_uri}".encode()


def is_dedicated(table_uri: str) -> bool:
    """Whether the table has a host of its own in this cluster (one GCS read)."""
    from ray.experimental import internal_kv

    ensure_ray()
    return bool(internal_kv._internal_kv_get(_dedicated_key(table_uri), namespace=NAMESPACE))


def set_dedicated(table_uri: str, dedicated: bool) -> None:
    """Give the table a host of its own (or send it back to the pool). The host
    that owns it now loses it at its next call (its claim is superseded)."""
    from ray.experimental import internal_kv

    ensure_ray()
    if dedicated:
        internal_kv._internal_kv_put(_dedicated_key(table_uri), b"1", namespace=NAMESPACE)
    else:
        internal_kv._internal_kv_del(_dedicated_key(table_uri), namespace=NAMESPACE)


HOST_THREADS = 32
"""Threads of a host's default concurrency group: calls to different tables run side by side."""

_handles: dict[str, Any] = {}
_handles_lock = threading.Lock()


def host_handle(slot: HostSlot, *, options: dict[str, Any] | None = None) -> Any:
    """The Ray handle of ``slot``'s host, started if none runs (cached per process)."""
    with _handles_lock:
        handle = _handles.get(slot.name)
    if handle is not None:
        return handle
    from raydelta.actors.table.host import TableHost

    actor_options: dict[str, Any] = {"max_concurrency": HOST_THREADS}
    if slot.node_id is not None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        actor_options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(
            slot.node_id, soft=True
        )
    settings = {
        k: os.environ[k] for k in (HOSTS_PER_NODE_ENV, HOST_RESOURCE_ENV) if k in os.environ
    }
    if settings:  # a host computes placement as the process that started it does
        actor_options["runtime_env"] = {"env_vars": settings}
    for key, value in (options or {}).items():
        if key == "runtime_env" and "runtime_env" in actor_options:
            env = {**actor_options["runtime_env"]["env_vars"], **value.get("env_vars", {})}
            value = {**value, "env_vars": env}
        actor_options[key] = value
    handle = start_actor(
        TableHost, slot.name, slot.name, slot.node_id, slot.dedicated, options=actor_options
    )
    with _handles_lock:
        _handles[slot.name] = handle
    return handle


def forget_handle(name: str) -> None:
    """Drop a cached handle (its host died or retired)."""
    with _handles_lock:
        _handles.pop(name, None)
