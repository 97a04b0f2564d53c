"""A caller's term stands for a needed one when it reads the same context keys, in any order (bindfix #6): the keys in
the other order ran FedProx's proximal pull twice."""

from __future__ import annotations

from typing import Any

from chillfl.aggregation.base import with_needed_terms
from chillfl.aggregation.fedprox import FedProx


class MyProx:
    def __init__(self, reads: tuple[str, ...]) -> None:
        self.reads = reads

    def __call__(self, params: Any, context: Any) -> Any:
        return None


def test_reads_in_another_order_are_the_same_term() -> None:
    needed = with_needed_terms(FedProx(), [])
    keys = tuple(needed[0].reads)
    assert len(keys) > 1
    for reads in (keys, keys[::-1]):
        assert [type(t) for t in with_needed_terms(FedProx(), [MyProx(reads)])] == [MyProx]  # type: ignore[list-item]
