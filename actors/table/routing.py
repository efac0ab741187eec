"""An actor-like handle on one hosted table, for code that speaks Ray directly.

``TableClient.actor`` used to be the table's own Ray actor; tables now live
in shared hosts, so it is a :class:`TableActorHandle`: ``handle.m.remote(*a)``
returns the object ref of the host call that runs ``m(*a)`` on this table
(``status``, ``ping``, ``subscribe``, ``state``, ``commit``...), and
``handle.__ray_call__.remote(f, *a)`` runs ``f(hosted_table, *a)`` inside the
host. Subscriptions and maintenance actors use it; so do tests.

Invariants:
- Each ``.remote`` first finds the table's owner and activates the table
  there (a ``ping`` through :meth:`TableClient._call`, which follows moves),
  then sends the call to that host; a ref whose table moves after that does
  not follow (its ``ray.get`` raises
  :class:`~raydelta.protocol.errors.TableMovedError`).
- ``_actor_id`` is the host's, so two handles on one table compare equal
  while it stays on one host.
"""

from __future__ import annotations

from typing import Any


class TableActorHandle:
    """See the module docstring. ``client`` is a
    :class:`~raydelta.actors.table.client.TableClient`."""

    def __init__(self, client: Any) -> None:
        self._client = client

    @property
    def _actor_id(self) -> Any:
        return self._client.host._actor_id

    def __getattr__(self, method: str) -> _TableMethod:
        if method.startswith("__") and method != "__ray_call__":
            raise AttributeError(method)
        return _TableMethod(self._client, method)

    def __repr__(self) -> str:
        return f"TableActorHandle({self._client.uri!r})"


class _TableMethod:
    def __init__(self, client: Any, method: str) -> None:
        self._client = client
        self._method = method

    def remote(self, *args: Any) -> Any:
        client, method = self._client, self._method
        client._call("ping")  # route to the owner, and activate the table there
        host = client.host
        if method == "status":
            return host.table_status.remote(client.uri)
        if method == "channel_address":
            return host.channel_address.remote()
        if method == "__ray_call__":
            function, rest = args[0], args[1:]
            return host.with_table.remote(client.uri, lambda table: function(table, *rest))
        if method == "commit":
            return host.commit.remote(client.uri, client.storage_options, *args)
        return host.call.remote(client.uri, client.storage_options, method, *args)
