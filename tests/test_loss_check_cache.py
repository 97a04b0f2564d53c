"""The base-loss check (:func:`chillfl.training.local.check_base_loss`) is remembered per function or per callable
class, never per bound method or ``functools.partial``: one good bound method or partial let every later one of another
function through, which then failed mid-run with a TypeError. A function given a near-miss flag later is checked again."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from chillfl.errors import ConfigError
from chillfl.training.local import check_base_loss


def good(logits: Any, y: Any, t: Any) -> Any:
    return logits


def needs_context(logits: Any, y: Any, t: Any, *, context: Any) -> Any:
    return logits


class Losses:
    def good(self, logits: Any, y: Any, t: Any) -> Any:
        return logits

    def needs_context(self, logits: Any, y: Any, t: Any, *, context: Any) -> Any:
        return logits


def test_a_passed_partial_or_bound_method_lets_no_other_through() -> None:
    losses = Losses()
    for first, bad in ((functools.partial(good), functools.partial(needs_context)), (losses.good, losses.needs_context)):
        check_base_loss(first, "algorithm.name")
        with pytest.raises(ConfigError, match="declare uses_context"):
            check_base_loss(bad, "algorithm.name")


def test_a_function_checked_once_is_checked_again_after_a_misspelt_flag() -> None:
    def loss(logits: Any, y: Any, t: Any) -> Any:
        return logits

    check_base_loss(loss, "algorithm.name")
    loss.use_context = True  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="sets use_context"):
        check_base_loss(loss, "algorithm.name")
