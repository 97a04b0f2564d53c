"""A loss term's own exception is the user's error under every executor: the vectorized executor does not call it a
vmap failure (it said "cannot be vmapped; falling back" first), and the fallback is still taken for a step that vmap refuses."""

from __future__ import annotations

import logging
from typing import Any, Mapping

import pytest
import torch

from chillfl.executors.vectorized import VectorizedExecutor
from chillfl.training.local import LocalSpec
from test_executors import Branchy, _jobs, _mlp


class Boom:
    """A user's term that raises, vmapped or not."""

    reads = ()

    def __call__(self, params: Mapping[str, torch.Tensor], context: Mapping[str, Any]) -> torch.Tensor:
        raise RuntimeError("boom in a loss term")


@pytest.mark.usefixtures("no_strict_fallbacks")
def test_a_loss_terms_own_exception_is_raised_as_it_is(caplog: pytest.LogCaptureFixture) -> None:
    model = _mlp()
    ex = VectorizedExecutor(model, LocalSpec(epochs=1, batch_size=8, terms=(Boom(),)))
    with caplog.at_level(logging.WARNING, logger="chillfl.executors.vectorized"), pytest.raises(RuntimeError, match="boom in a loss term"):
        ex.run(_jobs(model, [9, 7], (3, 4)))
    assert not caplog.records
    assert ex.fallback_reason is None
    ex.close()


def test_a_loss_terms_own_exception_is_not_a_refused_fallback() -> None:
    """Strict fallbacks (the tests' default) refused "a fallback" for the user's own error."""
    model = _mlp()
    with pytest.raises(RuntimeError, match="boom in a loss term") as raised:
        VectorizedExecutor(model, LocalSpec(epochs=1, batch_size=8, terms=(Boom(),))).run(_jobs(model, [9, 7], (3, 4)))
    assert type(raised.value) is RuntimeError, raised.value  # the term's own, not FallbackRefused


@pytest.mark.usefixtures("no_strict_fallbacks")
def test_a_step_vmap_refuses_still_falls_back(caplog: pytest.LogCaptureFixture) -> None:
    model = _mlp()
    contexts = [{"mu": 0.1}, {"mu": 0.0}]
    ex = VectorizedExecutor(model, LocalSpec(epochs=1, batch_size=8, terms=(Branchy(),)))
    with caplog.at_level(logging.WARNING, logger="chillfl.executors.vectorized"):
        assert len(ex.run(_jobs(model, [9, 7], (3, 4), contexts))) == 2
    assert ex.fallback_reason is not None and "falling back to the sequential executor" in caplog.records[-1].getMessage()
