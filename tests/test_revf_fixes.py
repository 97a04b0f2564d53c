"""Review of the day's merges (revF): FinishedRun.evaluate on another architecture's state, load_run's class check,
privacy's server-made client models through a wrapper."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import chillfl
from chillfl.errors import ConfigError

from test_revd_fixes import Net  # a user's module: Linear(4, 2)

X = torch.randn(40, 4, generator=torch.Generator().manual_seed(0))
Y = (X[:, 0] > 0).long()


class Other(Net):
    """The same layout under another class."""


def _finished(tmp_path: Path) -> Path:
    config = {"federation": {"num_clients": 2, "rounds": 1}, "eval": {"clients": "none", "client_split": "none"}}
    folder = chillfl.run(model=Net(), data=chillfl.TensorData(X, Y, X, Y, num_classes=2), config=config, out_dir=tmp_path, name="r", progress=False).folder
    assert folder is not None
    return folder


def test_evaluate_refuses_a_state_of_other_entries(tmp_path: Path) -> None:
    """A client state in another architecture (FedCP's own template) crashed with an AttributeError deep in the forward."""
    saved = chillfl.load_run(_finished(tmp_path), model=Net(), data=chillfl.TensorData(X, Y, X, Y, num_classes=2))
    acc, _ = saved.evaluate(X, Y)
    assert 0.0 <= acc <= 1.0
    with pytest.raises(ConfigError) as refused:
        saved.evaluate(X, Y, {"net.weight": torch.zeros(2, 4), "net.bias": torch.zeros(2)})
    assert refused.value.field == "state" and "net.bias" in refused.value.message


def test_load_run_refuses_a_module_of_another_class(tmp_path: Path) -> None:
    """The docs say "the same class"; a module of the same layout under another class was taken silently."""
    with pytest.raises(ConfigError) as refused:
        chillfl.load_run(_finished(tmp_path), model=Other(), data=chillfl.TensorData(X, Y, X, Y, num_classes=2))
    assert refused.value.field == "model" and "Other" in refused.value.message


def test_privacy_sees_server_made_client_models_through_a_wrapper() -> None:
    """``isinstance(aggregator, MakesClientModels)`` on the outer aggregator only: a user's wrapper around pFedHN-like
    rule under a client-side mechanism skipped the reason a bare one is refused for."""
    from chillfl.capabilities import Capabilities
    from chillfl.extend import AroundAggregator, FedAvg
    from chillfl.privacy.build import _unweighted

    class MakesModels(FedAvg):
        def client_model(self, client_id: int, global_model: dict) -> dict:
            return {}

    assert _unweighted(Capabilities(), MakesModels(), True) is not None
    assert _unweighted(Capabilities(), AroundAggregator(MakesModels()), True) == _unweighted(Capabilities(), MakesModels(), True)
    assert _unweighted(Capabilities(), AroundAggregator(FedAvg()), True) is None
