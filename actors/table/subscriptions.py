"""A table's subscribers: who hears of each version, kept where a new owner finds them.

Subscriptions (and the version each started after) live in the cluster's
GCS key-value store under the table's URI, so a table reactivated on
another host, or after its host restarted, still has them.

Invariants:
- Saved on every change, loaded on every activation; a subscriber whose
  class cannot be unpickled any more is dropped with a warning.
- :func:`last_seen_version` never blocks an activation for long: a
  subscriber that does not answer in :data:`LAST_SEEN_TIMEOUT_S` counts as
  one without the method.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import ray

from raydelta.actors.cluster import NAMESPACE

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Subscription:
    """A subscriber's handle and the version its subscription started after."""

    handle: Any
    since: int


LAST_SEEN_TIMEOUT_S = 5.0


def last_seen_version(handle: Any) -> int | None:
    """The subscriber's ``last_seen_version()``, or None if it has none or does
    not answer in time."""
    try:
        method = handle.last_seen_version
    except AttributeError:
        return None
    try:
        return int(ray.get(method.remote(), timeout=LAST_SEEN_TIMEOUT_S))
    except Exception:
        logger.warning("no last_seen_version from a subscriber", exc_info=True)
        return None


def _subscribers_key(table_uri: str) -> bytes:
    return f"subscribers:{table_uri}".encode()


def load_subscribers(table_uri: str) -> dict[str, Subscription]:
    """Subscriptions a previous incarnation of this table's actor saved."""
    from ray import cloudpickle
    from ray.experimental import internal_kv

    data = internal_kv._internal_kv_get(_subscribers_key(table_uri), namespace=NAMESPACE)
    if not data:
        return {}
    try:
        loaded: dict[str, Subscription] = cloudpickle.loads(data)
    except Exception:  # a subscriber's class is gone: start without it
        logger.warning("could not restore subscribers of %s", table_uri, exc_info=True)
        return {}
    return {k: v for k, v in loaded.items() if isinstance(v, Subscription)}


def forget_subscribers(table_uri: str) -> None:
    """Drop the saved subscriptions of a table (its actors were stopped)."""
    from ray.experimental import internal_kv

    internal_kv._internal_kv_del(_subscribers_key(table_uri), namespace=NAMESPACE)


def save_subscribers(table_uri: str, subscribers: dict[str, Subscription]) -> None:
    from ray import cloudpickle
    from ray.experimental import internal_kv

    data: bytes = cloudpickle.dumps(subscribers)  # type: ignore[no-untyped-call]
    internal_kv._internal_kv_put(_subscribers_key(table_uri), data, namespace=NAMESPACE)
