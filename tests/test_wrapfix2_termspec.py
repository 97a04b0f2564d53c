"""``TermSpec``'s fields added after 045e15a4 come after the old ones, so a plugin's positional spec keeps its meaning.

Before, ``anchor_buffers`` sat between ``anchor`` and ``cost``: ``TermSpec(O, build, "teacher term", sends,
"global_params", Cost(...))`` put the Cost into ``anchor_buffers`` and left ``cost`` at its default.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from chillfl.capabilities import Cost
from chillfl.training.terms import TermSpec


@dataclass(frozen=True)
class NoOptions:
    pass


def test_a_termspec_written_positionally_before_the_new_fields_keeps_its_cost() -> None:
    """045e15a4's order: options, build, summary, sends, anchor, cost."""
    cost = Cost(step_passes=2.0)
    spec = TermSpec(NoOptions, lambda o: None, "teacher term", lambda o: {}, "global_params", cost)  # type: ignore[arg-type, return-value]
    assert spec.cost is cost and spec.anchor == "global_params" and spec.anchor_buffers is True
    assert [f.name for f in fields(TermSpec)][:6] == ["options", "build", "summary", "sends", "anchor", "cost"]
