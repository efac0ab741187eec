"""One owner per table: claims, and the fence that keeps a superseded owner from serving.

A table's coordinator lives in one table host at a time (see
:mod:`raydelta.actors.table.host`), but hosts come and go, pools are
rebalanced when nodes join, and a host frozen past the node timeout may
wake up after its tables were reactivated elsewhere. Whichever process
activates a table *claims* it: it takes the next claim number of the table
with a put-if-absent of ``owner:<uri>:<n>`` in the cluster's key-value
store (the GCS). Claim ``n`` is superseded exactly when claim ``n + 1``
exists; the claims are never deleted, so that stays true for as long as
anyone could ask.

Before serving a call, the owner confirms that its claim is not superseded,
at most every :data:`LEASE_S` seconds (one small read; a lease of that
length). A new claimer that supersedes another waits :data:`LEASE_S` after
its claim before it serves anything, so every lease the older owner
confirmed has run out by then.

Invariants:
- At most one claim number of a table is current at any time, and the
  put-if-absent makes two racing claimers take different numbers: the later
  one supersedes the earlier.
- A superseded owner serves nothing: it reads the newer claim once its lease
  runs out and raises :class:`~raydelta.protocol.errors.TableMovedError`; if
  it cannot read the store it raises
  :class:`~raydelta.actors.table.incarnation.IncarnationUnconfirmed`.
- An owner that deactivates a table *releases* its claim (a marker
  ``owner-released:<uri>:<n>``, written after the table stopped serving):
  the next claimer then need not wait, since no lease of a released claim is
  outstanding. Only a claim whose owner died or lost it without releasing
  costs the next owner the wait; the very first claim of a table does not
  wait either (there is no older owner). A released claim never serves
  again: reactivating takes a new claim.
- Assumes clocks whose rates agree within a few percent, as every lease does.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from raydelta.actors.table.incarnation import LEASE_S, IncarnationUnconfirmed
from raydelta.protocol.errors import TableMovedError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClaimStore:
    """The three key-value operations a claim needs.

    ``get(key)`` returns the value or None; ``put_if_absent(key, value)``
    returns whether it stored the value; ``put(key, value)`` overwrites.
    Each may raise when the store cannot be reached.
    """

    get: Callable[[str], str | None]
    put_if_absent: Callable[[str, str], bool]
    put: Callable[[str, str], None]


def gcs_claims(namespace: str) -> ClaimStore:
    """Claims in the Ray cluster's GCS key-value store (call from a Ray worker)."""
    from ray.experimental import internal_kv

    def get(key: str) -> str | None:
        value = internal_kv._internal_kv_get(key.encode(), namespace=namespace)
        return value.decode() if value else None

    def put_if_absent(key: str, value: str) -> bool:
        existed = internal_kv._internal_kv_put(
            key.encode(), value.encode(), overwrite=False, namespace=namespace
        )
        return not existed

    def put(key: str, value: str) -> None:
        internal_kv._internal_kv_put(key.encode(), value.encode(), namespace=namespace)

    return ClaimStore(get=get, put_if_absent=put_if_absent, put=put)


def _claim_key(table_uri: str, number: int) -> str:
    return f"owner:{table_uri}:{number}"


def _released_key(table_uri: str, number: int) -> str:
    return f"owner-released:{table_uri}:{number}"


def _latest_key(table_uri: str) -> str:
    return f"owner-latest:{table_uri}"


class TableClaim:
    """This process's claim on one table and its lease (see the module docstring).

    Create with :func:`claim_table`; call :meth:`check` before serving.
    """

    def __init__(
        self,
        table_uri: str,
        number: int,
        store: ClaimStore,
        *,
        lease_s: float = LEASE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.table_uri = table_uri
        self.number = number
        self._store = store
        self._lease_s = lease_s
        self._clock = clock
        self._valid_until = clock() + lease_s

    def check(self) -> None:
        """Return if this claim may serve now; raise
        :class:`~raydelta.protocol.errors.TableMovedError` if it was superseded,
        :class:`IncarnationUnconfirmed` if the store cannot tell."""
        now = self._clock()
        if now < self._valid_until:
            return
        try:
            newer = self._store.get(_claim_key(self.table_uri, self.number + 1))
        except Exception as exc:
            raise IncarnationUnconfirmed(
                f"cannot confirm the claim {self.number} on {self.table_uri}"
            ) from exc
        if newer is not None:
            raise TableMovedError(
                f"{self.table_uri} moved to {newer} (claim {self.number + 1}); "
                f"this host's claim {self.number} serves nothing"
            )
        self._valid_until = now + self._lease_s

    def release(self) -> None:
        """Say that this claim serves nothing any more (call once the table
        stopped serving): the next claimer need not wait for its lease."""
        self._valid_until = float("-inf")
        self._store.put(_released_key(self.table_uri, self.number), "1")


def claim_table(
    table_uri: str,
    owner: str,
    store: ClaimStore,
    *,
    lease_s: float = LEASE_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> TableClaim:
    """Claim ``table_uri`` for ``owner`` (a name saying who, for messages).

    Takes the next free claim number, waiting one lease when it supersedes
    a claim that was not released.
    """
    hint = store.get(_latest_key(table_uri))
    number = int(hint) + 1 if hint else 1
    while store.get(_claim_key(table_uri, number)) is not None:
        number += 1  # the hint lags behind claims that raced it
    while not store.put_if_absent(_claim_key(table_uri, number), owner):
        number += 1
    store.put(_latest_key(table_uri), str(number))
    if number > 1 and store.get(_released_key(table_uri, number - 1)) is None:
        sleep(lease_s)  # every lease an older owner confirmed runs out
    return TableClaim(table_uri, number, store, lease_s=lease_s, clock=clock)
