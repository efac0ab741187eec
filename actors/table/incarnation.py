"""Incarnations of a restartable actor, and the fence that keeps old ones from answering.

When a node goes, Ray restarts its actors elsewhere, but the old process
may live on: its raylet frozen or cut off (a network partition), it keeps
answering the calls that reach it, over Ray's direct worker-to-worker
connections and over the commit channel. Its answers would be correct (the
log is the ultimate fence: every commit is a put-if-absent of the next
version, and a lost race makes the writer read the winners, where it finds a
retried ``txnId``), but an incarnation that is no longer the actor's must
not serve commits at all. This module makes sure of it.

How: each incarnation takes the next number in the GCS key-value store
under the actor's id (stable across Ray's restarts). Before a commit, an
incarnation confirms that the number is still its own, at most every
:data:`LEASE_S` seconds (one small GCS read; a lease of that length). A new
incarnation waits :data:`LEASE_S` after taking its number before it serves
anything, so every lease an older one confirmed has run out by then.

Invariants:
- Once a newer incarnation exists, an older one serves no commit: either its
  lease has run out and it reads the newer number (then it exits at once,
  so the calls it held are re-sent by their clients to the actor, exactly
  once by ``txnId``), or it cannot read the store (then it refuses with
  :class:`IncarnationUnconfirmed`; the channel sends such calls through Ray).
- The first incarnation of an actor does not wait (there is no older one).
- Assumes clocks whose rates agree within a few percent (leases are measured
  with each process's monotonic clock), as every lease does.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)

LEASE_S = 0.25
"""How long a confirmation stays valid, and how long a new incarnation waits."""


class IncarnationUnconfirmed(ConnectionError):
    """This process could not confirm it is still the actor's incarnation
    (the store did not answer): it refuses to commit; the call goes through Ray."""


class IncarnationFence:
    """The incarnation number of this process and its lease (see the module docstring).

    ``read`` returns the latest number in the store (None when absent),
    ``write`` stores one; both may raise when the store cannot be reached.
    ``exit`` ends the process (``os._exit`` in an actor).
    """

    def __init__(
        self,
        *,
        read: Callable[[], int | None],
        write: Callable[[int], None],
        lease_s: float = LEASE_S,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        exit: Callable[[], None] = lambda: os._exit(1),
    ) -> None:
        self._read = read
        self._lease_s = lease_s
        self._clock = clock
        self._exit = exit
        previous = read()
        self.number = 1 if previous is None else previous + 1
        write(self.number)
        if self.number > 1:
            sleep(lease_s)  # every lease an older incarnation holds runs out
        self._valid_until = clock() + lease_s

    def check(self) -> None:
        """Return if this incarnation may commit now; exit if a newer one exists;
        raise :class:`IncarnationUnconfirmed` if the store cannot tell."""
        now = self._clock()
        if now < self._valid_until:
            return
        try:
            current = self._read()
        except Exception as exc:
            raise IncarnationUnconfirmed(f"cannot confirm incarnation {self.number}") from exc
        if current != self.number:
            logger.error(
                "incarnation %s superseded by %s: exiting before serving", self.number, current
            )
            self._exit()
            raise IncarnationUnconfirmed(f"incarnation {self.number} was superseded")
        self._valid_until = now + self._lease_s


def gcs_fence(actor_id: str, namespace: str) -> IncarnationFence:
    """The fence of the Ray actor ``actor_id`` (call from inside the actor)."""
    from ray.experimental import internal_kv

    key = f"incarnations:{actor_id}".encode()

    def read() -> int | None:
        value = internal_kv._internal_kv_get(key, namespace=namespace)
        return int(value) if value else None

    def write(number: int) -> None:
        internal_kv._internal_kv_put(key, str(number).encode(), namespace=namespace)

    return IncarnationFence(read=read, write=write)
