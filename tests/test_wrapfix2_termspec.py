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


def test_localspec_keeps_its_fields_of_before_in_their_order() -> None:
    """``deterministic`` and ``draw_free`` (after 045e15a4) sat between ``precision`` and ``batched_conv``: a spec built
    positionally up to ``batched_conv`` put its convolution choice into ``deterministic``. They come last now."""
    from chillfl.training.local import LocalSpec

    before = ["epochs", "batch_size", "momentum", "weight_decay", "base_loss", "terms", "term_fields", "method_field", "model", "augment",
              "memory_format", "precision", "batched_conv", "cuda_graphs", "compiled", "optim", "frozen", "no_decay", "plain_sgd", "plain_lr",
              "plain_momentum", "private"]
    names = [f.name for f in fields(LocalSpec)]
    assert names[: len(before)] == before
    spec = LocalSpec(1, 8, 0.0, 0.0, LocalSpec.base_loss, (), (), None, None, None, "contiguous", "fp32", "gemm")
    assert spec.batched_conv == "gemm" and spec.deterministic is True
