"""The incarnation fence (``raydelta.actors.table.incarnation``) with a fake store and clock."""

from __future__ import annotations

import pytest

from raydelta.actors.table.incarnation import IncarnationFence, IncarnationUnconfirmed


class Store:
    def __init__(self) -> None:
        self.value: int | None = None
        self.reads = 0
        self.down = False

    def read(self) -> int | None:
        self.reads += 1
        if self.down:
            raise ConnectionError("store down")
        return self.value

    def write(self, number: int) -> None:
        self.value = number


class World:
    """One clock for every incarnation, and who exited."""

    def __init__(self) -> None:
        self.now = 100.0
        self.exited: list[int] = []
        self.store = Store()

    def fence(self) -> IncarnationFence:
        box: list[IncarnationFence] = []

        def sleep(seconds: float) -> None:
            self.now += seconds

        fence = IncarnationFence(
            read=self.store.read,
            write=self.store.write,
            lease_s=0.25,
            clock=lambda: self.now,
            sleep=sleep,
            exit=lambda: self.exited.append(box[0].number),
        )
        box.append(fence)
        return fence


def test_first_incarnation_starts_at_once_and_confirms_once_per_lease() -> None:
    world = World()
    first = world.fence()
    assert first.number == 1 and world.now == 100.0
    reads = world.store.reads
    for _ in range(10):
        first.check()
    assert world.store.reads == reads  # inside the lease: no store read
    world.now += 0.3
    first.check()
    assert world.store.reads == reads + 1
    assert world.exited == []


def test_an_old_incarnation_never_serves_after_a_new_one_started() -> None:
    world = World()
    old = world.fence()
    old.check()
    confirmed_at = world.now
    new = world.fence()  # takes number 2, then waits out the lease
    assert new.number == 2
    assert world.now >= confirmed_at + 0.25
    # from the moment the new one may serve, the old one cannot
    with pytest.raises(IncarnationUnconfirmed):
        old.check()
    assert world.exited == [1]
    new.check()
    assert world.exited == [1]


def test_an_incarnation_that_cannot_reach_the_store_refuses_after_its_lease() -> None:
    world = World()
    fence = world.fence()
    world.store.down = True
    fence.check()  # still inside the lease
    world.now += 0.3
    with pytest.raises(IncarnationUnconfirmed):
        fence.check()
    assert world.exited == []  # it does not know it was superseded: it only refuses
    world.store.down = False
    fence.check()
