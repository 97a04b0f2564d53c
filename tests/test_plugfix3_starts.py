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


HEAD = frozenset({"head.weight", "head.bias"})


@dataclass(frozen=True)
class OwnHeadHalf(Stateless):
    def prepare(self, state, start, context):  # the FedPer pattern: its own head in place of the sent one
        return {k: (v + 1.0 if k in HEAD else v) for k, v in start.items()}, dict(context)


@dataclass(frozen=True)
class KeptHeadHalf(OwnHeadHalf):
    def kept_entries(self):  # declared kept (KeepsEntries): the server knows the client does not start from its head
        return HEAD


class KeepsHead(FedAvg):
    capabilities = Capabilities(takes_weights=True)

    def client_half(self):
        return KeptHeadHalf()


class BodyOnly(FedAvg):
    capabilities = Capabilities(takes_weights=True)

    def client_half(self):
        return OwnHeadHalf()

    def aggregated_keys(self, g):  # the head is not aggregated (AggregatesPart): the server never reads its uploads
        return tuple(k for k in g if k not in HEAD)

    def aggregate(self, g, results, rnd, weights=None):
        new = super().aggregate(g, results, rnd, weights)
        return {k: (g[k] if k in HEAD else v) for k, v in new.items()}
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
def test_no_refusal_without_a_reader_with_client_start_or_with_an_equal_start(plugin: Path, monkeypatch: pytest.MonkeyPatch, name: str,
                                                                            extra: dict[str, Any]) -> None:
    config = {**BASE, **extra, "algorithm": {"name": f"plugfix3_pick:{name}"}}
    out = chillfl.run(config=config, write=False, progress=False)
    assert [r["round"] for r in out.records] == [1, 2]
    assert out.records == without_the_check(monkeypatch, config)


def without_the_check(monkeypatch: pytest.MonkeyPatch, config: dict[str, Any]) -> list[dict[str, Any]]:
    """The run's records with :meth:`ParameterSharing.refuse_moved_start` a no-op: what a start the check lets through
    must give, bit for bit (the check only refuses; it never changes what the run reads)."""
    from chillfl.protocols.parameters import ParameterSharing

    with monkeypatch.context() as m:
        m.setattr(ParameterSharing, "refuse_moved_start", lambda self, client_id, moved, read: None)
        return chillfl.run(config=config, write=False, progress=False).records


# KeepsHead under ATTACK: its kept head is averaged, refused before the run (test_leftatk_fedbn)
@pytest.mark.parametrize("name,extra", [("KeepsHead", PRIVACY), ("BodyOnly", ATTACK), ("BodyOnly", PRIVACY)])
def test_a_moved_start_on_a_kept_or_an_unaggregated_entry_is_not_refused(plugin: Path, monkeypatch: pytest.MonkeyPatch, name: str,
                                                                        extra: dict[str, Any]) -> None:
    """Both exemptions of the refusal: a head the half declares it keeps (``kept_entries``) and one the aggregator does
    not aggregate (outside ``aggregated_keys``) are moved by ``prepare`` in every round, and neither is what an attack
    forges from or a clip bounds; the run is the one the check would give if it were not there."""
    config = {**BASE, **extra, "algorithm": {"name": f"plugfix3_pick:{name}"}}
    out = chillfl.run(config=config, write=False, progress=False)
    assert [r["round"] for r in out.records] == [1, 2]
    assert out.records == without_the_check(monkeypatch, config)


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
