"""Two processes pools open at once, closed in either order, give the caller its own ``sys.excepthook`` back."""

import sys
from collections.abc import Iterator
from types import TracebackType

import pytest

from chillfl.executors.processes import _quiet_resource_sharer


def mine(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
    """The caller's hook."""


@pytest.fixture
def caller_hook() -> Iterator[None]:
    saved = sys.excepthook
    sys.excepthook = mine
    try:
        yield
    finally:
        sys.excepthook = saved


@pytest.mark.parametrize("close_first", ["a", "b"])
def test_overlapping_pools_closed_in_any_order_give_the_callers_hook_back(caller_hook: None, close_first: str) -> None:
    a = _quiet_resource_sharer()
    b = _quiet_resource_sharer()
    first, last = (a, b) if close_first == "a" else (b, a)
    first.remove()
    assert not first.active and last.active
    last.remove()
    assert sys.excepthook is mine


def test_three_pools_closed_from_the_middle_give_the_callers_hook_back(caller_hook: None) -> None:
    a, b, c = _quiet_resource_sharer(), _quiet_resource_sharer(), _quiet_resource_sharer()
    b.remove()
    assert c.printed is a  # the chain skips the closed one
    a.remove()
    assert c.printed is mine
    c.remove()
    assert sys.excepthook is mine


def test_a_hook_the_caller_set_since_stays(caller_hook: None) -> None:
    def later(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        """Set by the caller while a pool was open."""

    a = _quiet_resource_sharer()
    sys.excepthook = later
    b = _quiet_resource_sharer()
    a.remove()
    b.remove()
    assert sys.excepthook is later
