"""A client half whose ``prepare`` picks a start other than the one it was sent (IFCA-style, from its context), in a
method that does not report it (``ChoosesStart.client_start``), is refused on ``algorithm.name`` where an ``[attack]``
or a ``[privacy]`` clip reads the clients' updates from their starts: before, every such update was read from the sent
start, silently (the attacker's sign-flipped upload was 18 from its start where its honest one was 1)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest
import torch

import chillfl
from chillfl.errors import ConfigError
from plugin_modules import plugin_module

MODULE = '''
from dataclasses import dataclass
from chillfl.extend import Capabilities, FedAvg, Stateless, Downlink, load_params, params_state, check_state_keys


@dataclass(frozen=True)
class PickHalf(Stateless):
    def prepare(self, state, start, context):  # the client picks its start from its context
        mine = context.get("cluster0")
        return ({**start, **mine} if isinstance(mine, dict) else start), {k: v for k, v in context.items() if k != "cluster0"}


@dataclass(frozen=True)
class CopyHalf(Stateless):
    def prepare(self, state, start, context):  # an exact copy of the start it was sent: the same update
        return {k: v.clone() for k, v in start.items()}, dict(context)


class PickCluster(FedAvg):
    capabilities = Capabilities(takes_weights=True)  # a weighted mean: what [privacy]'s dp-fedavg wraps

    def __init__(self):
        super().__init__("samples")
        self.cluster = {}

    def client_half(self):
        return PickHalf()

    def downlink(self, cid, rnd, g):
        return Downlink(context={"cluster0": self.cluster} if self.cluster else {})

    def aggregate(self, g, results, rnd, weights=None):
        new = super().aggregate(g, results, rnd, weights)
        self.cluster = {k: v + 0.5 for k, v in new.items() if v.is_floating_point()}
        return new

    def state_dict(self):
        return {"cluster": params_state(self.cluster)}

    def load_state_dict(self, s):
        check_state_keys(s, ("cluster",), "PickCluster")
        self.cluster = load_params(s["cluster"])


class PickClusterWithStart(PickCluster):
    capabilities = Capabilities(takes_weights=True)  # not inherited

    def client_start(self, result, g):
        return {**g, **self.cluster} if self.cluster else None


class Copies(FedAvg):
    def client_half(self):
        return CopyHalf()
'''

BASE: dict[str, Any] = {"seed": 0, "dataset": {"name": "digits"}, "model": {"name": "mlp", "hidden": [8]}, "device": "cpu", "executor": "sequential",
                        "partition": {"name": "iid"}, "federation": {"num_clients": 3, "clients_per_round": 3, "rounds": 2},
                        "client": {"batch_size": 64, "lr": 0.1}, "eval": {"clients": "none"}}
ATTACK: dict[str, Any] = {"attack": {"kind": "sign_flip", "clients": [0]}}
PRIVACY: dict[str, Any] = {"privacy": {"mechanism": "dp-fedavg", "clip_norm": 1.0, "noise_multiplier": 0.5, "delta": 1e-3}}


@pytest.fixture()
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with plugin_module(tmp_path, monkeypatch, "plugfix3_pick", MODULE):
        yield tmp_path


@pytest.mark.parametrize("executor,extra", [("sequential", ATTACK), ("processes", ATTACK), ("sequential", PRIVACY)])
def test_a_start_picked_in_prepare_without_client_start_is_refused_under_an_attack_or_a_clip(plugin: Path, executor: str, extra: dict[str, Any]) -> None:
    config = {**BASE, **extra, "executor": executor, "algorithm": {"name": "plugfix3_pick:PickCluster"}}
    err = pytest.raises(ConfigError, chillfl.run, config=config, write=False, progress=False)
    assert err.value.field == "algorithm.name"
    assert "PickHalf.prepare() gave client" in err.value.message and "client_start" in err.value.message and "\n" not in err.value.message


@pytest.mark.parametrize("name,extra", [("PickCluster", {}), ("PickClusterWithStart", ATTACK), ("PickClusterWithStart", PRIVACY), ("Copies", ATTACK)])
def test_no_refusal_without_a_reader_with_client_start_or_with_an_equal_start(plugin: Path, name: str, extra: dict[str, Any]) -> None:
    out = chillfl.run(config={**BASE, **extra, "algorithm": {"name": f"plugfix3_pick:{name}"}}, write=False, progress=False)
    assert len(out.records) == 2


def test_built_in_ifca_under_an_attack_runs() -> None:
    out = chillfl.run(config={**BASE, **ATTACK, "algorithm": {"name": "ifca"}}, write=False, progress=False)
    assert len(out.records) == 2


def test_moved_entries_compares_by_identity_then_exact_value() -> None:
    from chillfl.aggregation.base import moved_entries

    a, b = torch.zeros(2), torch.ones(2)
    sent = {"a": a, "b": b}
    assert moved_entries(sent, sent) == ()
    assert moved_entries(sent, {"a": a.clone(), "b": b}) == ()  # an exact copy: the same update
    assert moved_entries(sent, {"a": a + 1e-7, "b": b}) == ("a",)
    assert moved_entries(sent, {"a": a.double(), "b": b}) == ("a",)  # another dtype is another start
    assert moved_entries(sent, {"b": b, "c": a}) == ("a", "c")  # dropped, then added
