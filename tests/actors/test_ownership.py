"""Table claims (``actors/table/ownership.py``) over a key-value store with
the GCS's semantics (get, put-if-absent, overwrite), kept in a dict here so
that the lease arithmetic runs on a clock the test moves. The real store is
exercised by every hosted table (``test_table_hosts.py``)."""

from __future__ import annotations

import pytest

from raydelta.actors.table.incarnation import LEASE_S, IncarnationUnconfirmed
from raydelta.actors.table.ownership import ClaimStore, claim_table
from raydelta.protocol.errors import TableMovedError

URI = "file:///warehouse/t"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def dict_store(data: dict[str, str], *, broken: list[bool] | None = None) -> ClaimStore:
    def check() -> None:
        if broken and broken[0]:
            raise ConnectionError("store unreachable")

    def get(key: str) -> str | None:
        check()
        return data.get(key)

    def put_if_absent(key: str, value: str) -> bool:
        check()
        if key in data:
            return False
        data[key] = value
        return True

    def put(key: str, value: str) -> None:
        check()
        data[key] = value

    return ClaimStore(get=get, put_if_absent=put_if_absent, put=put)


def test_the_first_claim_does_not_wait_and_a_takeover_waits_one_lease() -> None:
    clock, data = Clock(), {}
    store = dict_store(data)
    first = claim_table(URI, "host-a", store, clock=clock, sleep=clock.sleep)
    assert first.number == 1 and clock.slept == []
    second = claim_table(URI, "host-b", store, clock=clock, sleep=clock.sleep)
    assert second.number == 2 and clock.slept == [LEASE_S]
    assert data[f"owner:{URI}:2"] == "host-b"


def test_a_superseded_claim_serves_until_its_lease_ends_then_never() -> None:
    clock, data = Clock(), {}
    store = dict_store(data)
    old = claim_table(URI, "host-a", store, clock=clock, sleep=clock.sleep)
    old.check()  # confirmed: valid for one lease
    claim_table(URI, "host-b", store, clock=clock, sleep=lambda s: None)
    old.check()  # still inside the lease it confirmed (the new owner waits it out)
    clock.now += LEASE_S
    with pytest.raises(TableMovedError, match="host-b"):
        old.check()
    clock.now += 10 * LEASE_S
    with pytest.raises(TableMovedError):
        old.check()


def test_the_new_owner_serves_only_after_every_old_lease_ran_out() -> None:
    clock, data = Clock(), {}
    store = dict_store(data)
    old = claim_table(URI, "host-a", store, clock=clock, sleep=clock.sleep)
    clock.now += LEASE_S
    old.check()  # the latest confirmation the old owner can make before the takeover
    confirmed_until = clock.now + LEASE_S
    new = claim_table(URI, "host-b", store, clock=clock, sleep=clock.sleep)
    assert clock.now >= confirmed_until  # the takeover returned after the lease ended
    new.check()


def test_a_released_claim_lets_the_next_owner_start_at_once_and_never_serves_again() -> None:
    clock, data = Clock(), {}
    store = dict_store(data)
    old = claim_table(URI, "host-a", store, clock=clock, sleep=clock.sleep)
    old.release()
    new = claim_table(URI, "host-a", store, clock=clock, sleep=clock.sleep)
    assert new.number == 2 and clock.slept == []
    with pytest.raises(TableMovedError):
        old.check()  # released: it re-reads at once and finds the newer claim


def test_racing_claimers_take_different_numbers_even_with_a_lagging_hint() -> None:
    clock, data = Clock(), {}
    store = dict_store(data)
    claims = [
        claim_table(URI, f"host-{i}", store, clock=clock, sleep=clock.sleep) for i in range(3)
    ]
    data[f"owner-latest:{URI}"] = "1"  # the hint went backwards (two writers raced it)
    late = claim_table(URI, "host-late", store, clock=clock, sleep=clock.sleep)
    assert [c.number for c in claims] + [late.number] == [1, 2, 3, 4]


def test_an_unreachable_store_refuses_rather_than_guesses() -> None:
    clock, data, broken = Clock(), {}, [False]
    store = dict_store(data, broken=broken)
    claim = claim_table(URI, "host-a", store, clock=clock, sleep=clock.sleep)
    broken[0] = True
    claim.check()  # inside the lease: no read needed
    clock.now += LEASE_S
    with pytest.raises(IncarnationUnconfirmed):
        claim.check()
    broken[0] = False
    claim.check()  # reachable again, still the owner
