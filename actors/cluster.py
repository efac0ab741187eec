"""Where raydelta's actors live: the Ray namespace, Ray start-up and actor lookup.

Invariants:
- Every raydelta actor is named and detached in the one namespace
  :data:`NAMESPACE`, so any process attached to the cluster (a notebook, a
  Ray job, a Spark driver) finds the same actor for the same table.
- A table has one spelling (:func:`raydelta.storage.table_location.normalize_uri`, the rule of
  :func:`raydelta.protocol.locations.table_uri`): actor names are built
  from it, so two spellings of one table never start two actors.
- :func:`ensure_ray` starts a local cluster only when this process is not
  attached to one; :func:`connect` attaches explicitly.
- This module imports no actor class: the actor modules import it.
"""

from __future__ import annotations

import time
from typing import Any

NAMESPACE = "raydelta"
"""The Ray namespace of every raydelta actor."""


def checkpoint_actor_name(table_uri: str) -> str:
    return f"checkpoint:{table_uri}"


def cleanup_actor_name(table_uri: str) -> str:
    return f"cleanup:{table_uri}"


def ensure_ray() -> Any:
    """The ``ray`` module, attached to a cluster (a local one is started when
    this process is attached to none)."""
    import ray

    if not ray.is_initialized():
        ray.init(namespace=NAMESPACE, include_dashboard=False, log_to_driver=False)
    return ray


def connect(address: str | None = None, **init_options: Any) -> None:
    """Attach this process to the Ray cluster at ``address`` (``"auto"``, or
    ``"ray://host:10001"``...), or start a local one when ``address`` is None.

    Tables opened afterwards find (or start) their actors in that cluster.
    Does nothing when this process is already attached.
    """
    import ray

    if ray.is_initialized():
        return
    options: dict[str, Any] = {"namespace": NAMESPACE, "log_to_driver": False}
    if address is None:
        options["include_dashboard"] = False
    options.update(init_options)
    ray.init(address=address, **options)


def find_actor(name: str) -> Any | None:
    """The live actor called ``name`` in raydelta's namespace, or None."""
    ray = ensure_ray()
    try:
        return ray.get_actor(name, namespace=NAMESPACE)
    except ValueError:
        return None


def start_actor(
    actor_class: Any,
    name: str,
    *args: Any,
    options: dict[str, Any] | None = None,
    **kwargs: Any,
) -> Any:
    """Get the actor ``name`` or start it as ``actor_class(*args, **kwargs)``:
    named, detached, in raydelta's namespace; ``options`` are Ray actor options."""
    ensure_ray()
    return actor_class.options(
        name=name, namespace=NAMESPACE, lifetime="detached", get_if_exists=True, **(options or {})
    ).remote(*args, **kwargs)


def get_unwrapped(ref: Any) -> Any:
    """``ray.get(ref)``, re-raising an error the remote method raised as itself
    (typed, e.g. ``RetentionTooShortError``), not wrapped in ``RayTaskError``."""
    ray = ensure_ray()
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as exc:
        cause = getattr(exc, "cause", None)
        if isinstance(cause, Exception):
            raise cause from None
        raise


def stop_actor(handle: Any, *, timeout_s: float = 60.0) -> None:
    """Kill ``handle`` for good and wait until it is reported dead: ``ray.kill``
    only asks, and until the process is gone it may still answer."""
    ray = ensure_ray()
    ray.kill(handle, no_restart=True)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            ray.get(handle.ping.remote(), timeout=5)
        except ray.exceptions.RayActorError:
            return
        except ray.exceptions.GetTimeoutError:
            continue
        time.sleep(0.05)
