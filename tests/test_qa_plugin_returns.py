"""What a plugin's aggregator and client half return is checked where the core first reads it (found by the qaplug
helper): a wrong type is one ConfigError on ``algorithm.name`` naming the method, not a traceback or a silent run."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest
import torch

from plugin_modules import plugin_module

import chillfl
from chillfl.errors import ConfigError

MODULE = '''
from dataclasses import dataclass, replace

import numpy as np
import torch

from chillfl.extend import AggregatorBase, Capabilities, Downlink, FedAvg, Personal, Stateless, Train


class ListRule(AggregatorBase):
    def aggregate(self, global_params, results, round):
        return list(global_params.values())


class NumpyRule(AggregatorBase):
    def aggregate(self, global_params, results, round):
        return {k: v.numpy() for k, v in global_params.items()}


class StateOnly(Stateless):
    def finish(self, model, state, trained):
        return {}


class StartOnly(Stateless):
    def prepare(self, state, start, context):
        return start


class StrReport(Stateless):
    def finish(self, model, state, trained):
        return {}, {"loss": "high"}


class NumpyReport(Stateless):
    def finish(self, model, state, trained):
        return {}, {"loss": np.array([1.0])}


class TensorReport(Stateless):
    def finish(self, model, state, trained):
        return {}, {"n": torch.tensor(1.0), "x": 2.0, "t": {"a": torch.zeros(2)}}


@dataclass(frozen=True)
class ParamsNotPersonal(Stateless):
    def objectives(self, spec):
        return (replace(spec, epochs=1),)

    def train(self, local):
        shared = yield Train(local.start, local.context)
        return shared.params


@dataclass(frozen=True)
class NoSuchObjective(ParamsNotPersonal):
    def train(self, local):
        shared = yield Train(local.start, local.context, objective=3)
        return Personal(shared.params, shared.num_steps, shared.mean_loss)


class DictDownlink(FedAvg):
    def downlink(self, client_id, round, global_params):
        return {"mu": 0.1}


class TextContext(FedAvg):
    def downlink(self, client_id, round, global_params):
        return Downlink(context={"mu": "0.1"})


@dataclass(frozen=True)
class TextPersonalReport(ParamsNotPersonal):
    def train(self, local):
        shared = yield Train(local.start, local.context)
        return Personal(shared.params, shared.num_steps, shared.mean_loss, report={"note": "fine"})


def rule(half):
    class Rule(FedAvg):
        def client_half(self):
            return half()
    Rule.__name__ = Rule.__qualname__ = f"Rule{half.__name__}"
    return Rule


FinishOne, PrepareOne, ReportStr, ReportNumpy, ReportOk, TrainParams, TrainThird, TrainReport = (rule(h) for h in (
    StateOnly, StartOnly, StrReport, NumpyReport, TensorReport, ParamsNotPersonal, NoSuchObjective, TextPersonalReport))


@dataclass(frozen=True)
class FineTune(Stateless):
    def objectives(self, spec):
        return (replace(spec, epochs=1),)

    def train(self, local):
        shared = yield Train(local.start, local.context)
        mine = yield Train(shared.params, local.context, objective=0)
        return Personal(shared.params, shared.num_steps + mine.num_steps, shared.mean_loss, personal=mine.params)


class WeightedFineTune(FedAvg):
    """Takes weights, forgets not_a_base: its clients run their own trainings all the same."""

    capabilities = Capabilities(takes_weights=True)

    def client_half(self):
        return FineTune()


class WeightedMaker(FedAvg):
    """Takes weights, and its server makes part of each client's model (MakesClientModels), as pFedHN's does."""

    capabilities = Capabilities(takes_weights=True)

    def client_model(self, client_id, global_params):
        return {}


class WeightedReleaser(FedAvg):
    """Takes weights, and releases a round nobody reported (AggregatesNobody): the global model plus one."""

    capabilities = Capabilities(takes_weights=True)

    def aggregates_nobody(self):
        return True

    def aggregate(self, global_params, results, round, weights=None):
        if not results:
            return {k: v + 1 for k, v in global_params.items()}
        return super().aggregate(global_params, results, round, weights)
'''

BASE: dict[str, Any] = {"dataset": {"name": "digits"}, "model": {"name": "mlp", "hidden": [16]}, "device": "cpu", "executor": "sequential",
                        "federation": {"num_clients": 2, "clients_per_round": 2, "rounds": 1}, "client": {"batch_size": 32}}


@pytest.fixture()
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with plugin_module(tmp_path, monkeypatch, "qa_returns", MODULE):
        yield tmp_path


@pytest.mark.parametrize("name,words", [
    ("ListRule", "ListRule.aggregate() returned list, not the global model"),
    ("NumpyRule", "NumpyRule.aggregate() returned 'hidden.0.weight' as ndarray, not a tensor"),
    ("FinishOne", "StateOnly.finish() returned dict, not the pair (state, report)"),
    ("PrepareOne", "StartOnly.prepare() returned dict, not the pair (start, context)"),
    ("ReportStr", "StrReport.finish() returned a report whose 'loss' is str"),
    ("ReportNumpy", "NumpyReport.finish() returned a report whose 'loss' is ndarray"),
    ("DictDownlink", "DictDownlink.downlink() returned a dict, not a chillfl.extend.Downlink"),
    ("TextContext", "TextContext.downlink() returned a context whose 'mu' is str"),
    ("TrainParams", "ParamsNotPersonal.train() returned dict, not a Personal"),
    ("TrainReport", "TextPersonalReport.train()'s Personal returned a report whose 'note' is str"),
    ("TrainThird", "NoSuchObjective.train() asked Train(objective=3), but its objectives() returned 1"),
])
@pytest.mark.parametrize("executor", ["sequential", "processes"])
def test_a_wrong_return_is_one_error_naming_the_method(plugin: Path, name: str, words: str, executor: str) -> None:
    """They were an AttributeError/ValueError traceback from the protocol (the list, the bare state), or ran on silently
    (the str and numpy reports, which FedAvg ignores and a Flower node cannot send); a personalising half's ``train`` that
    returned its params, or asked an objective it never declared, was an AttributeError / IndexError traceback; a dict for
    a Downlink was an AttributeError, a str in its context passed silently."""
    err = pytest.raises(ConfigError, chillfl.run, config={**BASE, "executor": executor, "algorithm": {"name": f"qa_returns:{name}"}},
                        write=False, progress=False)
    assert err.value.field == "algorithm.name" and words in err.value.message


def test_a_report_of_numbers_tensors_and_tables_runs(plugin: Path) -> None:
    result = chillfl.run(config={**BASE, "algorithm": {"name": "qa_returns:ReportOk"}}, write=False, progress=False)
    assert len(result.records) == 1


def test_a_base_whose_clients_run_their_own_trainings_is_refused_by_pa3fed_though_it_declares_nothing(plugin: Path) -> None:
    """PA3Fed combines its half with the base's, running only prepare and finish: the base's fine-tuning was dropped and
    the run went on as PA3Fed over plain FedAvg, with no word."""
    config = {**BASE, "algorithm": {"name": "pa3fed", "base": "qa_returns:WeightedFineTune"}}
    err = pytest.raises(ConfigError, chillfl.run, config=config, write=False, progress=False)
    assert err.value.field == "algorithm.base" and "FineTune runs the clients' own trainings" in err.value.message


def test_a_base_whose_server_makes_the_clients_models_is_refused_by_pa3fed(plugin: Path) -> None:
    """PA3Fed passes on the base's downlink but is no MakesClientModels itself: the clients' models it saved
    (checkpoint.client_models) and measured after the average lacked the entries the base's server makes, with no word."""
    config = {**BASE, "algorithm": {"name": "pa3fed", "base": "qa_returns:WeightedMaker"}}
    err = pytest.raises(ConfigError, chillfl.run, config=config, write=False, progress=False)
    assert err.value.field == "algorithm.base" and "makes part of each client's model" in err.value.message


def test_a_base_that_releases_a_round_nobody_reported_releases_it_under_pa3fed(plugin: Path) -> None:
    """PA3Fed did not pass AggregatesNobody on: the base's release of an empty round was skipped, with no word."""
    # seed 1, 6 clients, Poisson at q = 1/6: nobody in either round (tests/test_poisson_sampling.py)
    config = {**BASE, "seed": 1, "federation": {"num_clients": 6, "clients_per_round": 1, "sampling": "poisson", "rounds": 2}}
    skipped = chillfl.run(config={**config, "algorithm": {"name": "pa3fed"}}, write=False, progress=False)  # FedAvg: the initial model
    released = chillfl.run(config={**config, "algorithm": {"name": "pa3fed", "base": "qa_returns:WeightedReleaser"}}, write=False, progress=False)
    assert all(r["skipped"] for r in skipped.records)
    assert all(r["nobody_reported"] and "skipped" not in r for r in released.records)
    assert [(r["agg_fgn"], r["agg_adapted"]) for r in released.records] == [(None, False), (None, False)]
    assert skipped.state is not None and released.state is not None
    for k, v in skipped.state.items():
        assert torch.equal(released.state[k], v + 1 + 1), k  # one step a round, rounded as the run does


ATTACKS = '''
from dataclasses import dataclass

from chillfl.extend import AttackSpec


@dataclass(frozen=True)
class Options:
    keep: float = 0.0


def honest(options, round):
    return {}


LIST = AttackSpec("as_list", Options, forge_models=lambda o, r: [x.params for x in r.bad])
STRANGER = AttackSpec("stranger", Options, forge_models=lambda o, r: {99: dict(r.global_params)})
NUMPY = AttackSpec("as_numpy", Options, forge_models=lambda o, r: {x.client_id: {k: v.numpy() for k, v in x.params.items()} for x in r.bad})
FLOAT_LABELS = AttackSpec("float_labels", Options, forge_models=honest,
                          probe=lambda o, data: (data.dataset.x_test[:10], data.dataset.y_test[:10].float()))
DICT_OPTIONS = AttackSpec("dict_options", Options, forge_models=honest, resolve=lambda o, attackers: {"keep": 0.0})
'''


@pytest.mark.parametrize("kind,words", [
    ("LIST", "forge_models returned a list, not a mapping of attacker id"),
    ("STRANGER", "forge_models returned a model for 99, which is not an attacker (attacker ids: [0, 1])"),
    ("NUMPY", "forge_models returned for client 0 'hidden.0.weight' as ndarray"),
    ("FLOAT_LABELS", "probe must return labels as a 1-d tensor of class ids (torch.long), got (10,) torch.float32"),
    ("DICT_OPTIONS", "resolve hook must return its options (Options), got dict"),
])
def test_an_attack_hooks_wrong_return_is_one_error_on_attack_kind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, words: str) -> None:
    """The list and the stranger's model were dropped silently (every attacker sent its honest model: a clean run reported
    as attacked); the numpy model named a dtype as if only the dtype differed; float probe labels were a RuntimeError
    traceback from the first evaluation."""
    with plugin_module(tmp_path, monkeypatch, "qa_attacks", ATTACKS):
        config = {**BASE, "attack": {"kind": f"qa_attacks:{kind}", "clients": [0, 1]}}
        err = pytest.raises(ConfigError, chillfl.run, config=config, write=False, progress=False)
    assert err.value.field == "attack.kind" and words in err.value.message


MECHANISMS = '''
from dataclasses import dataclass

from chillfl.extend import Accounting, Charge, MechanismSpec, PrivateAggregation


@dataclass(frozen=True)
class Options:
    k: int = 1


def accounts(options, sizes):
    return Accounting(((1.0, sizes.rounds),))


def charges(options, sizes, participants):
    return [Charge(f"client {p.client_id}", 1.0) for p in participants]


def aggregator(options, noise, base):
    return PrivateAggregation(base, client_noise=True, clip_norm=noise.clip_norm, noise_multiplier=noise.noise_multiplier,
                              expected=noise.sizes.per_round, seed=noise.seed, exempt=noise.exempt)


SHAPE = dict(adjacency="replace", subsampled=False)
RATE_TWO = MechanismSpec("rate_two", Options, lambda o, sizes: Accounting(((2.0, sizes.rounds),)), charges=charges, aggregator=aggregator, **SHAPE)
CHARGE_THREE = MechanismSpec("charge_three", Options, accounts, charges=lambda o, s, ps: [Charge(f"client {p.client_id}", 3.0) for p in ps],
                             aggregator=aggregator, **SHAPE)
UNCHANGED = MechanismSpec("unchanged", Options, accounts, charges=charges, aggregator=lambda o, noise, base: base, **SHAPE)
'''


@pytest.mark.parametrize("kind,words", [
    ("RATE_TWO", "its accounts hook's Accounting.steps must be (sampling rate q in (0, 1], compositions >= 0) pairs, one at least, got (2.0, 1)"),
    ("CHARGE_THREE", "its charges hook returned Charge(unit='client 0', rate=3.0, steps=1): a Charge's rate is a sampling rate in (0, 1]"),
    ("UNCHANGED", "its aggregator hook returned the run's aggregator itself, which clips and noises nothing"),
])
def test_a_mechanism_that_would_report_a_wrong_epsilon_is_one_error_on_privacy_mechanism(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                                         kind: str, words: str) -> None:
    """Each ran to the end and reported an epsilon: for a sampling rate above 1 (a release that cannot happen), or for
    releases nobody clipped or noised (the hook handed back the run's own aggregator)."""
    pytest.importorskip("opacus")
    with plugin_module(tmp_path, monkeypatch, "qa_mechanisms", MECHANISMS):
        config = {**BASE, "privacy": {"mechanism": f"qa_mechanisms:{kind}", "clip_norm": 0.5, "noise_multiplier": 1.5, "delta": 1e-3}}
        err = pytest.raises(ConfigError, chillfl.run, config=config, write=False, progress=False)
    assert err.value.field == "privacy.mechanism" and words in err.value.message


KNOWLEDGE = '''
from dataclasses import dataclass

import torch

from chillfl.extend import PrototypeHooks, PrototypeSpec, SoftLabelClientHalf, SoftLabelClientHooks, SoftLabelMethod, SoftLabelSpec, class_means


@dataclass(frozen=True)
class Options:
    k: int = 1


class TensorUpload(SoftLabelClientHooks):
    def upload(self, cid, round, indices, probs, state):
        return probs


class DictState(SoftLabelClientHalf):
    def new_state(self, cid, x_private, x_public):
        return {"average": torch.zeros(len(x_public), self.num_classes)}


class MeansOnly(PrototypeHooks):
    def release(self, cid, round, features, logits, y):
        return class_means(features, y, self.num_classes)[0]


UPLOAD = SoftLabelSpec("tensor_upload", Options, SoftLabelMethod, TensorUpload)
STATE = SoftLabelSpec("dict_state", Options, SoftLabelMethod, DictState)
RELEASE = PrototypeSpec("means_only", Options, MeansOnly)
'''

SOFT = {"public_size": 60, "subset_size": 20}


@pytest.mark.parametrize("part,field,words", [
    ({"distillation": {"method": "qa_knowledge:UPLOAD", **SOFT}}, "distillation.method", "TensorUpload.upload() returned a Tensor, not a chillfl.extend.SoftLabelUplink"),
    ({"distillation": {"method": "qa_knowledge:STATE", **SOFT}}, "distillation.method", "DictState.new_state() returned a dict, which has no to_tensors()"),
    ({"prototypes": {"method": "qa_knowledge:RELEASE"}}, "prototypes.method", "MeansOnly.release() returned a Tensor, not a chillfl.extend.ClassRows"),
])
def test_a_knowledge_hooks_wrong_return_is_one_error_on_its_method(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, part: dict[str, Any], field: str,
                                                                   words: str) -> None:
    """They were a TypeError where the uplink is priced, an AttributeError from the half's own upload (or the disk store),
    and an AttributeError from the client's evaluation: tracebacks that named no part."""
    with plugin_module(tmp_path, monkeypatch, "qa_knowledge", KNOWLEDGE):
        err = pytest.raises(ConfigError, chillfl.run, config={**BASE, **part}, write=False, progress=False)
    assert err.value.field == field and words in err.value.message


POLICIES = '''
from chillfl.extend import ConstantTemperature


class NoTemperature(ConstantTemperature):
    def temperature(self, client_id, round):
        return None


class TextTemperature(ConstantTemperature):
    def temperature(self, client_id, round):
        return "0.5"
'''


@pytest.mark.parametrize("policy,said", [("NoTemperature", "None"), ("TextTemperature", "'0.5'")])
def test_a_temperature_that_is_no_number_is_one_error_on_the_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, policy: str, said: str) -> None:
    """None was a TypeError from float(); "0.5" passed float() and reached the loss, a TypeError there."""
    with plugin_module(tmp_path, monkeypatch, "qa_policies", POLICIES):
        err = pytest.raises(ConfigError, chillfl.run, config={**BASE, "temperature": {"policy": f"qa_policies:{policy}"}}, write=False, progress=False)
    assert err.value.field == "temperature.policy" and f"the temperature {said}; a temperature must be a finite number > 0" in err.value.message


def test_scaffold_option_i_is_refused_by_dp_sgd_as_option_ii_is_not() -> None:
    """Option I's c_i+ = g_i(x) is a full-batch gradient over the client's rows after its private training, uploaded as
    control_delta without noise: dp-sgd ran it and reported an epsilon that did not bound it (found when a runtime check
    of undeclared reports flagged SCAFFOLD). Option II's (x - y_i) / (K lr) is post-processing of the private model."""
    pytest.importorskip("opacus")
    privacy = {"mechanism": "dp-sgd", "clip_norm": 1.0, "noise_multiplier": 1.0, "delta": 1e-3}
    err = pytest.raises(ConfigError, chillfl.run, config={**BASE, "algorithm": {"name": "scaffold", "option": "I"}, "privacy": privacy},
                        write=False, progress=False)
    assert err.value.field == "privacy.mechanism" and "option I's c_i+ = g_i(x)" in err.value.message
    assert len(chillfl.run(config={**BASE, "algorithm": {"name": "scaffold"}, "privacy": privacy}, write=False, progress=False).records) == 1
