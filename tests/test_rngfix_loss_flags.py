"""A base loss's own attributes that begin with "use" are not flags: only a flag's shape (use_/uses_, a bool or a
property, within one edit of context/features) is refused as a misspelt flag."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from chillfl.errors import ConfigError
from chillfl.training.local import check_base_loss


class Counting:
    """A loss with state of its own whose names begin with "use"."""

    def __init__(self) -> None:
        self.used_features = 0
        self.user_context = {"lang": "en"}
        self.use_cache = True

    def __call__(self, logits: Any, y: Any, temperature: Any) -> Any:
        return logits


def test_a_losss_own_state_named_use_is_not_a_flag() -> None:
    check_base_loss(Counting(), "client.loss")  # the old check: "sets used_features ... declare uses_features"


class Misspelt:
    uses_contxt: ClassVar[bool] = True

    def __call__(self, logits: Any, y: Any, temperature: Any) -> Any:
        return logits


class MisspeltProperty:
    @property
    def use_feature(self) -> bool:
        return True

    def __call__(self, logits: Any, y: Any, temperature: Any) -> Any:
        return logits


@pytest.mark.parametrize(("loss", "attr", "flag"), [(Misspelt(), "uses_contxt", "uses_context"), (MisspeltProperty(), "use_feature", "uses_features")])
def test_a_misspelt_flag_is_still_refused(loss: Any, attr: str, flag: str) -> None:
    with pytest.raises(ConfigError, match=f"sets {attr}, which the training step never reads; declare {flag}"):
        check_base_loss(loss, "client.loss")


def test_a_flags_shape() -> None:
    from chillfl.training.local import misspelt_flag  # new with the fix

    assert misspelt_flag("use_context", True) == "uses_context"
    assert misspelt_flag("Uses_Features", False) == "uses_features"
    assert misspelt_flag("uses_cnotext", True) == "uses_context"  # two neighbours swapped
    assert misspelt_flag("uses_context", True) is None
    for name, value in (("used_features", 0), ("user_context", True), ("use_context", "yes"), ("uses_features_cache", True), ("use_ctx", True)):
        assert misspelt_flag(name, value) is None, name
