"""Malformed plugins (found by the qaplugins helper): a spec whose capabilities or builder is the wrong kind of
object is one ConfigError naming the field that chose it, before anything is built or written, never an
AttributeError or TypeError from deep inside the run."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from plugin_modules import plugin_module

from chillfl.cli import main
from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment

MODULE = '''
from dataclasses import dataclass

from chillfl.extend import (AggregatorBase, AlgorithmSpec, Capabilities, ConstantTemperature, FedAvg, PolicySpec, PrototypeHooks,
                            PrototypeSpec, SoftLabelMethod, SoftLabelSpec)


@dataclass(frozen=True)
class NoOptions:
    pass


class Rule(FedAvg):
    def __init__(self):
        super().__init__("uniform")


class Policy(ConstantTemperature):  # T = 1
    pass


class StrCaps(AggregatorBase):
    capabilities = "takes_weights"

    def aggregate(self, global_params, results, round):
        return dict(global_params)


ALGO_CAPS = AlgorithmSpec(NoOptions, lambda o, ctx: (Rule(), []), "caps a string", capabilities="takes_weights")
ALGO_BUILD = AlgorithmSpec(NoOptions, lambda o, ctx: Rule(), "build returns the aggregator alone")
POLICY_CAPS = PolicySpec(NoOptions, lambda o, counts: Policy(), "caps not a function", capabilities=Capabilities())
POLICY_CAPS_RESULT = PolicySpec(NoOptions, lambda o, counts: Policy(), "caps returns a string", capabilities=lambda o: "none")
POLICY_BUILD = PolicySpec(NoOptions, lambda o, counts: 1.0, "build returns a number")
SOFT_CAPS = SoftLabelSpec("soft_caps", NoOptions, SoftLabelMethod, summary="caps a dict", capabilities={"reports": "x"})
PROTO_CAPS = PrototypeSpec("proto_caps", NoOptions, PrototypeHooks, summary="caps a string", capabilities="none")
'''

BASE: dict[str, Any] = {"dataset": {"name": "digits"}, "model": {"name": "mlp"}, "device": "cpu",
                        "federation": {"num_clients": 4, "clients_per_round": 2, "rounds": 1}, "client": {"batch_size": 32}}


def refused(*, run: bool, table: dict[str, Any]) -> pytest.ExceptionInfo[ConfigError]:
    """The ConfigError that reading ``table`` and building (``run=False``) or running it raises; anything else fails the test."""
    from chillfl.runner import run_experiment

    with pytest.raises(ConfigError) as err:
        config = load_config(None, table)
        run_experiment(config, write=False, progress=False) if run else build_experiment(config)
    return err


@pytest.fixture()
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with plugin_module(tmp_path, monkeypatch, "qa_bad_plugins", MODULE):
        yield tmp_path


@pytest.mark.parametrize("table,field,words", [
    ({"algorithm": {"name": "qa_bad_plugins:ALGO_CAPS"}}, "algorithm.name", "capabilities must be a chillfl.extend.Capabilities, got str"),
    ({"algorithm": {"name": "qa_bad_plugins:StrCaps"}}, "algorithm.name", "capabilities must be a chillfl.extend.Capabilities, got str"),
    ({"algorithm": {"name": "qa_bad_plugins:ALGO_BUILD"}}, "algorithm.name", "build must return (aggregator, [loss terms]), got Rule"),
    ({"temperature": {"policy": "qa_bad_plugins:POLICY_CAPS"}}, "temperature.policy", "capabilities must be a function of its options"),
    ({"temperature": {"policy": "qa_bad_plugins:POLICY_BUILD"}}, "temperature.policy", "build must return a temperature policy"),
    ({"distillation": {"method": "qa_bad_plugins:SOFT_CAPS", "public_size": 200, "subset_size": 100}}, "distillation.method",
     "capabilities must be a chillfl.extend.Capabilities, got dict"),
    ({"prototypes": {"method": "qa_bad_plugins:PROTO_CAPS"}}, "prototypes.method", "capabilities must be a chillfl.extend.Capabilities, got str"),
])
def test_a_malformed_spec_is_one_config_error_on_its_field(plugin: Path, table: dict[str, Any], field: str, words: str) -> None:
    err = refused(run=False, table={**BASE, **table})
    assert err.value.field == field and words in str(err.value)


def test_a_policy_whose_capabilities_return_no_capabilities_is_refused_where_they_are_asked(plugin: Path) -> None:
    from chillfl.temperature import policy_capabilities

    with pytest.raises(ConfigError) as err:
        policy_capabilities({"policy": "qa_bad_plugins:POLICY_CAPS_RESULT"})
    assert err.value.field == "temperature.policy" and "got str" in str(err.value)


def test_cli_malformed_spec_is_one_line_exit_2_nothing_written(plugin: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = plugin / "out"
    code = main(["run", "src/chillfl/experiments/demo.toml", "algorithm.name=qa_bad_plugins:ALGO_BUILD", "federation.rounds=1", f"out_dir={out}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("chillfl: error: algorithm.name:")
    assert not out.exists() or not any(out.iterdir())


ARITY_MODULE = '''
from dataclasses import dataclass

from chillfl.extend import (AlgorithmSpec, AttackSpec, ConstantTemperature, FedAvg, MechanismSpec, PolicySpec, PrototypeHooks, PrototypeSpec,
                            SoftLabelMethod, SoftLabelSpec, TermSpec)


@dataclass(frozen=True)
class NoOptions:
    pass


def three(options, config, section):
    pass


def two(options, config):
    pass


ALGO = AlgorithmSpec(NoOptions, lambda o, ctx: (FedAvg(), []), "two-argument check", check=two)
POLICY = PolicySpec(NoOptions, lambda o, counts: ConstantTemperature(1.0), "two-argument check", check=two)
ATTACK = AttackSpec("a", NoOptions, forge_models=lambda o, r: {}, check=three)
PROTO = PrototypeSpec("p", NoOptions, PrototypeHooks, check=three)
SOFT = SoftLabelSpec("s", NoOptions, SoftLabelMethod, check=three)
MECH = MechanismSpec("m", NoOptions, accounts=lambda options: None, rows=lambda o, n, p: None)
TERM = TermSpec(NoOptions, lambda: None, "build without its options")
'''


@pytest.mark.parametrize("table,field,words", [
    ({"algorithm": {"name": "qa_arity:ALGO"}}, "algorithm.name", "'qa_arity:ALGO': its spec's check is called as check(options, config, section), which two(options, config) does not take"),
    ({"temperature": {"policy": "qa_arity:POLICY"}}, "temperature.policy", "its spec's check is called as check(options, config, section), which two(options, config)"),
    ({"attack": {"kind": "qa_arity:ATTACK", "fraction": 0.5}}, "attack.kind", "its spec's check is called as check(options, config), which three(options, config, section)"),
    ({"prototypes": {"method": "qa_arity:PROTO"}}, "prototypes.method", "its spec's check is called as check(options, config), which three("),
    ({"distillation": {"method": "qa_arity:SOFT", "public_size": 200, "subset_size": 100}}, "distillation.method", "its spec's check is called as check(options, config), "),
    ({"privacy": {"mechanism": "qa_arity:MECH"}}, "privacy.mechanism", "its spec's accounts is called as accounts(options, sizes), which <lambda>(options) does not take"),
    ({"objective": {"terms": ["qa_arity:TERM"]}}, "objective.terms[0]", "its spec's build is called as build(options), which <lambda>() does not take"),
])
def test_a_hook_that_cannot_take_its_call_is_one_config_error_on_the_field(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, table: dict[str, Any],
                                                                          field: str, words: str) -> None:
    """The families' ``check`` hooks take (options, config, section) or (options, config): the other one was a TypeError
    traceback from the run's first call (found for an attack's check; every hook of every spec is checked the same way)."""
    with plugin_module(tmp_path, monkeypatch, "qa_arity", ARITY_MODULE):
        err = refused(run=False, table={**BASE, **table})
    assert err.value.field == field and words in str(err.value), err.value


def test_a_registered_spec_with_a_misfit_hook_is_refused_when_registered() -> None:
    """A plugin module that registers its spec by name: checked there (named by import path it is checked when read)."""
    from chillfl.aggregation.registry import AlgorithmSpec, register_algorithm
    from chillfl.options import NoOptions

    with pytest.raises(ConfigError) as err:
        register_algorithm("qa_misfit", AlgorithmSpec(NoOptions, lambda options: None, "build without its context"))  # type: ignore[arg-type,misc]
    assert err.value.field == "algorithm.name" and "its spec's build is called as build(options, context)" in err.value.message


TERM_MODULE = '''
from dataclasses import dataclass


class Decay:
    """weight * ||theta||^2"""

    @dataclass(frozen=True)
    class Options:
        weight: float = 0.01

    reads = ()

    def __init__(self, options):
        self.weight = options.weight

    def __call__(self, params, context):
        return self.weight * sum((p ** 2).sum() for p in params.values())
'''


def test_list_options_documents_a_plugin_loss_term_like_a_built_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """`chillfl list` shows an entry-point term under "loss terms"; `list --options` used to leave its options out, and
    refused a term's import path ("is no algorithm, ..."), though the built-in terms' options are there."""
    import chillfl.once
    import chillfl.plugins

    monkeypatch.setattr(chillfl.plugins, "entry_points", lambda: {"qa_decay": "qa_terms:Decay"})
    with plugin_module(tmp_path, monkeypatch, "qa_terms", TERM_MODULE):
        assert main(["list", "--options", "qa_terms:Decay", "qa_decay", "proximal"]) == 0  # a built-in term's name too
        out = capsys.readouterr().out
        terms = out[out.index("## [objective] terms"):]
        for name in ("qa_decay", "qa_terms:Decay", "proximal"):
            assert f"### `{name}`" in terms
        assert "| `weight` | `float` | `0.01` |" in terms
        assert main(["list", "--options"]) == 0  # the whole listing: the entry point's term beside the built-ins
        terms = capsys.readouterr().out.split("## [objective] terms", 1)[1]
        assert "### `qa_decay`" in terms and "### `proximal`" in terms


PARTS_MODULE = '''
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from chillfl import ArrayDataset
from chillfl.data.partition import Partition


@dataclass(frozen=True)
class BlobOptions:
    """Options of the blobs dataset."""

    spread: float = 0.5


def blobs(options, data_dir):
    x = torch.randn(40, 4) * options.spread
    return ArrayDataset(x[:30], torch.arange(30) % 3, x[30:], torch.arange(10) % 3, 3)


blobs.Options = BlobOptions


@dataclass(frozen=True)
class HalfOptions:
    """Options of the halves partitioner."""

    shuffle: bool = True


def halves(labels, num_clients, rng, options, section, dataset):
    return Partition([np.sort(p) for p in np.array_split(rng.permutation(len(labels)), num_clients)])


halves.Options = HalfOptions


class Net(nn.Module):
    @dataclass(frozen=True)
    class Options:
        """Options of the two-layer net."""

        hidden: int = 12

    def __init__(self, input_shape, num_classes, options, section):
        super().__init__()
        self.fc = nn.Linear(4, num_classes)

    def forward(self, x):
        return self.fc(x.flatten(1))
'''


def test_list_options_documents_a_plugin_dataset_partitioner_and_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`chillfl list --options qa_parts:blobs` refused a dataset's import path ("is no algorithm, temperature policy, ..."),
    and so a partitioner's and a model's, though a config takes each by import path and entry point and their specs carry
    the options; the entry points of those parts were left out too. Each is shown under its part, with its options."""
    import chillfl.plugins

    monkeypatch.setattr(chillfl.plugins, "entry_points", lambda: {"qa_blobs": "qa_parts:blobs"})
    with plugin_module(tmp_path, monkeypatch, "qa_parts", PARTS_MODULE):
        assert main(["list", "--options", "qa_parts:blobs", "qa_parts:halves", "qa_parts:Net", "qa_blobs"]) == 0
        out = capsys.readouterr().out
    sections = {chunk.split("\n", 1)[0]: chunk for chunk in ("\n" + out).split("\n## ")}
    for section, name, row in (
        ("[dataset] name = ...", "qa_parts:blobs", "| `spread` | `float` | `0.5` |  |"),
        ("[dataset] name = ...", "qa_blobs", "| `spread` | `float` | `0.5` |  |"),
        ("[partition] name = ...", "qa_parts:halves", "| `shuffle` | `bool` | `true` | `true`, `false` |"),
        ("[model] name = ...", "qa_parts:Net", "| `hidden` | `int` | `12` |  |"),
    ):
        shown = sections[section].split(f"### `{name}`", 1)[1].split("\n### ", 1)[0]
        assert row in shown, (name, shown)
    assert [out.count(f"### `{name}`") for name in ("qa_parts:blobs", "qa_parts:halves", "qa_parts:Net")] == [1, 1, 1]  # each under its part alone


def test_list_options_shows_no_generated_docstring_as_a_plugins_summary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A plugin whose Options dataclass has no docstring was summarised by the one the dataclass decorator makes
    (``### `qa_bare:blobs` — BlobOptions(spread: float = 0.5)``): its heading now carries no summary."""
    bare = PARTS_MODULE.replace('        """Options of the two-layer net."""\n\n', "")
    bare = "\n".join(line for line in bare.splitlines() if '"""Options of the' not in line)
    assert '"""' not in bare
    with plugin_module(tmp_path, monkeypatch, "qa_bare", bare):
        assert main(["list", "--options", "qa_bare:blobs", "qa_bare:halves", "qa_bare:Net"]) == 0
        out = capsys.readouterr().out
    headings = [line for line in out.splitlines() if line.startswith("### `qa_bare:")]
    assert headings == ["### `qa_bare:blobs`", "### `qa_bare:halves`", "### `qa_bare:Net`"], headings
    assert "Options(" not in out and "| `spread` | `float` | `0.5` |  |" in out


CTOR_MODULE = '''
from dataclasses import dataclass

from chillfl.extend import AggregatorBase, ConstantTemperature


class TermWantsOptions:
    """No Options dataclass, so chillfl builds it as TermWantsOptions(); its __init__ wants one argument."""

    reads = ()

    def __init__(self, options):
        self.options = options

    def __call__(self, params, context):
        return 0.0


class RuleTakesNothing(AggregatorBase):
    """An Options dataclass, so chillfl builds it as RuleTakesNothing(options); its __init__ takes none."""

    @dataclass(frozen=True)
    class Options:
        x: int = 1

    def __init__(self):
        pass

    def aggregate(self, global_params, results, round):
        return dict(global_params)


class PolicyWantsTwo(ConstantTemperature):
    def __init__(self, a, b):
        super().__init__(1.0)
'''


@pytest.mark.parametrize("table,field,words", [
    ({"objective": {"terms": ["qa_ctor:TermWantsOptions"]}}, "objective.terms[0]", "built as TermWantsOptions(), as it declares no Options"),
    ({"algorithm": {"name": "qa_ctor:RuleTakesNothing"}}, "algorithm.name", "built as RuleTakesNothing(options), as it declares an Options"),
    ({"temperature": {"policy": "qa_ctor:PolicyWantsTwo"}}, "temperature.policy", "built as PolicyWantsTwo()"),
])
def test_a_plugin_class_whose_init_does_not_take_what_it_is_built_with_is_a_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                                        table: dict[str, Any], field: str, words: str) -> None:
    """It was a TypeError traceback (exit 1) once the run was being built."""
    with plugin_module(tmp_path, monkeypatch, "qa_ctor", CTOR_MODULE):
        err = refused(run=False, table={**BASE, **table})
        assert err.value.field == field and words in str(err.value) and "__init__ does not take" in str(err.value)


ATTACK_MODULE = '''
from dataclasses import dataclass

from chillfl.extend import AttackSpec


@dataclass(frozen=True)
class NoOptions:
    pass


def drop_first_entry(options, round):
    return {r.client_id: dict(list(r.params.items())[1:]) for r in round.bad}


def three_columns(options, upload):
    return upload.rows[:, :3]


def not_rows(options, upload):
    return "rows"


DROPS = AttackSpec("drops", NoOptions, forge_models=drop_first_entry)
NARROW = AttackSpec("narrow", NoOptions, forge_rows=three_columns)
STRING = AttackSpec("string", NoOptions, forge_prototypes=not_rows)
'''


@pytest.mark.parametrize("table,words", [
    ({"attack": {"kind": "qa_attacks:DROPS", "clients": [0]}}, "forge_models returned for client 0 no 'hidden.0.weight'"),
    ({"attack": {"kind": "qa_attacks:NARROW", "clients": [0]}, "distillation": {"method": "dsfl", "public_size": 200, "subset_size": 100}},
     "forge_rows returned for client 0 'rows' as (100, 3)"),
    ({"attack": {"kind": "qa_attacks:STRING", "clients": [0]}, "prototypes": {"method": "fedproto"}}, "forge_prototypes returned for client 0 a str, not a ClassRows"),
])
def test_a_forging_hook_that_returns_the_wrong_shape_is_one_error_on_attack_kind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                                table: dict[str, Any], words: str) -> None:
    """Was a RuntimeError / AttributeError traceback, or (a dropped entry) an error blaming algorithm.name."""

    with plugin_module(tmp_path, monkeypatch, "qa_attacks", ATTACK_MODULE):
        err = refused(run=True, table={**BASE, **table})
        assert err.value.field == "attack.kind" and words in str(err.value)


POLICY_MODULE = '''
class Negative:
    """A policy slip: T = -1 trains on flipped logits (it ran to the end, silently)."""

    def temperature(self, client_id, round):
        return -1.0

    def observe(self, client_id, round, local_accuracy):
        return None

    def client_half(self, num_classes):
        return None

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        return None


class NanHalf:
    def temperature(self, state, offered, labels):
        return float("nan")

    def finish(self, state, temperature, local_accuracy):
        return {}


class NanOnTheClient(Negative):
    def temperature(self, client_id, round):
        return 1.0

    def client_half(self, num_classes):
        return NanHalf()
'''


@pytest.mark.parametrize("policy,words", [("Negative", "temperature -1.0"), ("NanOnTheClient", "temperature nan")])
@pytest.mark.parametrize("protocol", [{}, {"prototypes": {"method": "fedproto"}}, {"distillation": {"method": "dsfl", "public_size": 200, "subset_size": 100}}])
def test_a_policy_temperature_that_is_not_positive_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, policy: str, words: str,
                                                               protocol: dict[str, Any]) -> None:

    with plugin_module(tmp_path, monkeypatch, "qa_policies", POLICY_MODULE):
        err = refused(run=True, table={**BASE, **protocol, "temperature": {"policy": f"qa_policies:{policy}"}})
        assert err.value.field == "temperature.policy" and words in str(err.value)


HOOKS_MODULE = '''
from dataclasses import dataclass

from chillfl.extend import Accounting, AttackSpec, Charge, MechanismSpec, PrivateAggregation


@dataclass(frozen=True)
class NoOptions:
    pass


def accounts(options, sizes):
    return Accounting(((1.0, sizes.rounds),))


def charges(options, sizes, participants):
    return [Charge(f"client {p.client_id}", 1.0) for p in participants]


def aggregator(options, noise, base):
    return PrivateAggregation(base, client_noise=True, clip_norm=noise.clip_norm, noise_multiplier=noise.noise_multiplier,
                              expected=noise.sizes.per_round, seed=noise.seed)


def mechanism(**hooks):
    return MechanismSpec("m", NoOptions, **{"accounts": accounts, "charges": charges, "aggregator": aggregator, **hooks}, adjacency="replace",
                         subsampled=False)


ACCOUNTS_A_NUMBER = mechanism(accounts=lambda o, sizes: 1.0)
CHARGES_A_NUMBER = mechanism(charges=lambda o, sizes, participants: 3)
AGGREGATOR_NONE = mechanism(aggregator=lambda o, noise, base: None)
CHARGES_A_GENERATOR = mechanism(charges=lambda o, sizes, participants: (Charge(f"client {p.client_id}", 1.0) for p in participants))
POISON_NONE = AttackSpec("p", NoOptions, poison=lambda o, data, ids, seed: None)
PROBE_UNEVEN = AttackSpec("q", NoOptions, poison=lambda o, data, ids, seed: data, probe=lambda o, data: (data.dataset.x_test[:5], data.dataset.y_test[:4]))
'''

PRIVACY = {"clip_norm": 1.0, "noise_multiplier": 1.0, "delta": 1e-3}


@pytest.mark.parametrize("table,field,words", [
    ({"privacy": {"mechanism": "qa_hooks:ACCOUNTS_A_NUMBER", **PRIVACY}}, "privacy.mechanism", "accounts hook must return a chillfl.extend.Accounting, got float"),
    ({"privacy": {"mechanism": "qa_hooks:CHARGES_A_NUMBER", **PRIVACY}}, "privacy.mechanism", "charges hook must return chillfl.extend.Charge s, got 3"),
    ({"privacy": {"mechanism": "qa_hooks:AGGREGATOR_NONE", **PRIVACY}}, "privacy.mechanism", "aggregator hook must return an aggregator"),
    ({"attack": {"kind": "qa_hooks:POISON_NONE", "clients": [0]}}, "attack.kind", "poison hook must return the run's FederatedData (4 clients) rewritten, got NoneType"),
    ({"attack": {"kind": "qa_hooks:PROBE_UNEVEN", "clients": [0]}}, "attack.kind", "probe must return (inputs, labels), two tensors of one length, got 5 inputs and 4 labels"),
])
def test_a_hook_that_returns_the_wrong_thing_is_one_error_on_its_field(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                        table: dict[str, Any], field: str, words: str) -> None:
    """Each was an AttributeError / TypeError / AssertionError / ValueError traceback."""
    from chillfl.runner import run_experiment

    with plugin_module(tmp_path, monkeypatch, "qa_hooks", HOOKS_MODULE):
        err = refused(run=True, table={**BASE, **table})
        assert err.value.field == field and words in str(err.value)
        generator = run_experiment(load_config(None, {**BASE, "privacy": {"mechanism": "qa_hooks:CHARGES_A_GENERATOR", **PRIVACY}}), write=False, progress=False)
        assert generator.records[-1]["epsilon"] > 0  # any iterable of Charges is fine


SERVER_MODULE = '''
from dataclasses import dataclass

import torch

from chillfl.extend import Aggregate, PrototypeHooks, PrototypeSpec, SoftLabelMethod, SoftLabelSpec


@dataclass(frozen=True)
class NoOptions:
    pass


class ThreeClasses(SoftLabelMethod[NoOptions]):
    def aggregate(self, round, indices, uplinks):
        rows = torch.full((len(indices), 3), 1 / 3)
        return Aggregate(torch.ones(len(indices), dtype=torch.bool), rows, rows)


class Words(PrototypeHooks[NoOptions]):
    def combine(self, releases):
        return "prototypes"


SOFT = SoftLabelSpec("three", NoOptions, ThreeClasses)
PROTOS = PrototypeSpec("words", NoOptions, Words)
'''


@pytest.mark.parametrize("table,field,words", [
    ({"distillation": {"method": "qa_server:SOFT", "public_size": 200, "subset_size": 100}}, "distillation.method",
     "aggregate() returned rows as (100, 3); it must be [100, 10]"),
    ({"prototypes": {"method": "qa_server:PROTOS"}}, "prototypes.method", "combine/update returned a str, not a chillfl.extend.Knowledge"),
])
def test_a_server_half_that_returns_the_wrong_shape_is_one_error_on_its_method(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                               table: dict[str, Any], field: str, words: str) -> None:
    """Were a RuntimeError (size mismatch in the cache) and an AttributeError traceback."""

    with plugin_module(tmp_path, monkeypatch, "qa_server", SERVER_MODULE):
        err = refused(run=True, table={**BASE, **table})
        assert err.value.field == field and words in str(err.value)


def test_a_broken_entry_point_is_warned_about_once_not_once_per_part(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """plugin_names promises "one warning naming it"; `chillfl list` asks every part, and printed it seven times."""
    import logging

    import chillfl.once
    import chillfl.plugins
    from chillfl.aggregation.registry import algorithm_names
    from chillfl.temperature import policy_names
    from chillfl.training.terms import term_names

    monkeypatch.setattr(chillfl.plugins, "entry_points", lambda: {"qa_gone": "qa_no_such_module_xyz:Rule"})
    with caplog.at_level(logging.WARNING, logger="chillfl.plugins"), chillfl.once.said_once():  # one command's scope, as `chillfl list`
        for names in (algorithm_names, policy_names, term_names):
            assert "qa_gone" not in names()
    warned = [r for r in caplog.records if "qa_gone" in r.getMessage()]
    assert len(warned) == 1 and "cannot import module 'qa_no_such_module_xyz'" in warned[0].getMessage()


def test_an_option_without_a_default_left_unset_is_one_error_on_it() -> None:
    """A plugin's Options may have a field without a default; unset, it was a TypeError from the dataclass's constructor."""
    import dataclasses

    from chillfl.options import parse_options

    @dataclasses.dataclass(frozen=True)
    class Options:
        needed: float
        other: int = 1

    with pytest.raises(ConfigError) as err:
        parse_options(Options, {"other": 2}, "algorithm")
    assert err.value.field == "algorithm.needed" and "required option" in str(err.value)
    assert parse_options(Options, {"needed": 0.5}, "algorithm") == Options(0.5, 1)


def test_an_instance_that_is_no_aggregator_or_policy_is_named_in_a_sentence() -> None:
    """The line read "...Aggregator instance; object is it lacks downlink, ..."."""
    from chillfl.api import as_plugged

    with pytest.raises(ConfigError) as err:
        as_plugged(object(), [], None)
    assert err.value.field == "aggregator" and "Aggregator instance; object lacks downlink, aggregate" in str(err.value)
    with pytest.raises(ConfigError) as err:
        as_plugged(None, [], dict)
    assert err.value.field == "policy" and "TemperaturePolicy instance; dict is a class, not an instance: call it" in str(err.value)


def test_list_options_of_a_name_no_part_knows_says_what_it_takes(capsys: pytest.CaptureFixture[str]) -> None:
    """``chillfl list --options foo`` said "'foo' is no algorithm, ... (unknown value 'foo'; allowed: fedchill, fixed, none)":
    the first part's names, as if they were all it takes. A plain name that no part knows says what PLUGIN is instead."""
    assert main(["list", "--options", "foo"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    said = "or loss term (give a plugin's import path 'pkg.module:Name' or a chillfl.plugins entry point's name; `chillfl list` names every part's)"
    assert len(err) == 1 and err[0].endswith(said), err


KINDS = "dataset, partitioner, model, algorithm, temperature policy, soft-label or prototype method, attack, privacy mechanism or loss term"
REFUSED_MODULE = '''
import torch


class Net(torch.nn.Module):
    """A model whose constructor takes none of the arguments a model's build is called with."""

    def __init__(self, width):
        super().__init__()
'''


def test_list_options_of_a_class_no_part_takes_says_why_each_refused_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``chillfl list --options qa_refused:Net`` said only the first part's reason ("must name a dataset ..."), not the
    model's ("... which Net(width) does not take"), the one its author needs: every part's reason, by its field, one line."""
    with plugin_module(tmp_path, monkeypatch, "qa_refused", REFUSED_MODULE):
        assert main(["list", "--options", "qa_refused:Net"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert main(["list", "--options", "qa_refused:Gone"]) == 2
        gone = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"chillfl: error: list.options: 'qa_refused:Net' is no {KINDS} ("), err
    why = err[0].split(f"{KINDS} (", 1)[1].removesuffix(")").split("; ")
    fields = ["dataset.name", "partition.name", "model.name", "temperature.policy", "algorithm.name", "distillation.method", "prototypes.method", "attack.kind", "privacy.mechanism", "objective.terms"]
    assert [w.split(": ", 1)[0] for w in why] == fields, why
    model = why[2].split(": ", 1)[1]
    assert model == "its spec's build is called as build(input_shape, num_classes, options, section), which Net(width) does not take", model
    assert why[3].startswith("temperature.policy: is not a temperature policy: it lacks temperature, ")  # without the path again
    # one reason every part gives (no such attribute) is said once
    assert gone == [f"chillfl: error: list.options: 'qa_refused:Gone' is no {KINDS} (module 'qa_refused' has no attribute 'Gone')"], gone


def test_list_options_of_an_entry_point_no_part_takes_says_why_each_refused_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """An entry point's name that resolves to an object no part takes was answered "give a plugin's import path ..."
    (what a name that resolves to nothing gets), as if it named nothing; its import path said why each part refused it."""
    from chillfl import plugins

    monkeypatch.setattr(plugins, "entry_points", lambda: {"qa_ep_thing": "qa_ep:Thing"})
    with plugin_module(tmp_path, monkeypatch, "qa_ep", "class Thing:\n    pass\n"):
        assert main(["list", "--options", "qa_ep_thing"]) == 2
        (err,) = capsys.readouterr().err.strip().splitlines()
        assert main(["list", "--options", "qa_ep:Thing"]) == 2
        (by_path,) = capsys.readouterr().err.strip().splitlines()
    assert "import path" not in err and err.startswith(f"chillfl: error: list.options: 'qa_ep_thing' is no {KINDS} (dataset.name: "), err
    assert err.split(f"{KINDS} (", 1)[1] == by_path.split(f"{KINDS} (", 1)[1]  # the same reasons, by part, as its path's


def test_a_class_no_dataset_partitioner_or_model_takes_is_named_as_the_other_parts_name_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The dataset, partitioner and model lookups said "got type" (the class's own type's name) where every other
    part says "got <class 'qa_plain.Thing'>"."""
    with plugin_module(tmp_path, monkeypatch, "qa_plain", "class Thing:\n    pass\n"):
        assert main(["list", "--options", "qa_plain:Thing"]) == 2
    (err,) = capsys.readouterr().err.strip().splitlines()
    why = dict(w.split(": ", 1) for w in err.split(f"{KINDS} (", 1)[1].removesuffix(")").split("; "))
    got = "got <class 'qa_plain.Thing'>"
    assert why["dataset.name"] == f"must name a dataset: a DatasetEntry or a builder function, {got}", why
    assert why["partition.name"] == f"must name a partitioner: a PartitionerEntry or a split function, {got}", why
    assert why["model.name"] == f"must name a model: a ModelSpec, an nn.Module class or a builder function, {got}", why
    assert why["attack.kind"] == f"must name a chillfl.extend.AttackSpec, {got}", why  # as the others read


@pytest.mark.parametrize(("name", "closest"), [("fedprx", "fedprox"), ("proximl", "proximal"), ("Dirichlet", "dirichlet")])
def test_list_options_of_a_misspelt_name_says_the_closest(capsys: pytest.CaptureFixture[str], name: str, closest: str) -> None:
    """``chillfl list --options fedprx`` named no part's name, where every other unknown name says the closest one."""
    assert main(["list", "--options", name]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"chillfl: error: list.options: {name!r} (did you mean {closest!r}?) is no dataset, "), err


BAD_RULE = '''
from chillfl.extend import AggregatorBase


class Rule(AggregatorBase):
    def __init__(self, a, b, c):  # no Options: built as Rule(), which this __init__ does not take
        pass

    def aggregate(self, global_params, results, round):
        return global_params
'''


def test_list_options_leaves_out_an_entry_point_its_part_takes_but_cannot_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """An entry point naming an aggregator class (so ``[algorithm]`` lists it) that cannot be built (its ``__init__``
    takes three arguments) stopped ``chillfl list --options`` with that one error line: nothing else was listed."""
    import chillfl.once
    from chillfl import plugins

    monkeypatch.setattr(plugins, "entry_points", lambda: {"qa_bad_rule": "qa_bad_rule:Rule"})
    chillfl.once.forget()
    with plugin_module(tmp_path, monkeypatch, "qa_bad_rule", BAD_RULE):
        assert main(["list", "--options"]) == 0
        out, err = capsys.readouterr()
        assert main(["list", "--options", "qa_bad_rule"]) == 2  # asked by name: why each part refused it, as before
        (asked,) = capsys.readouterr().err.strip().splitlines()
    assert "## [algorithm] name = ..." in out and "### `krum`" in out and "qa_bad_rule" not in out, out[:400]  # the others, listed
    said = [line for line in err.strip().splitlines() if "qa_bad_rule" in line]
    assert said == ["chillfl: plugin 'qa_bad_rule' (qa_bad_rule:Rule) is left out of [algorithm]: 'qa_bad_rule' is built as Rule(), as it declares no "
                    "Options dataclass, which its __init__ does not take (missing a required argument: 'a')"], err
    assert asked.startswith(f"chillfl: error: list.options: 'qa_bad_rule' is no {KINDS} (") and "algorithm.name: is built as Rule()" in asked, asked


def test_list_options_leaves_out_a_loss_term_entry_point_it_cannot_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The same for ``[objective] terms``, listed apart from the parts: a term class whose ``__init__`` needs an argument."""
    import chillfl.once
    from chillfl import plugins

    source = "class Decay:\n    reads = ()\n\n    def __init__(self, rate):\n        self.rate = rate\n\n    def __call__(self, ctx):\n        return 0.0\n"
    monkeypatch.setattr(plugins, "entry_points", lambda: {"qa_bad_term": "qa_bad_term:Decay"})
    chillfl.once.forget()
    with plugin_module(tmp_path, monkeypatch, "qa_bad_term", source):
        assert main(["list", "--options"]) == 0
        out, err = capsys.readouterr()
    assert "## [objective] terms = [...]" in out and "### `proximal`" in out and "qa_bad_term" not in out
    said = [line for line in err.strip().splitlines() if "qa_bad_term" in line]
    assert len(said) == 1 and said[0].startswith("chillfl: plugin 'qa_bad_term' (qa_bad_term:Decay) is left out of [objective] terms: 'qa_bad_term' is built as Decay()"), err


def test_a_bare_list_option_is_still_checked_as_a_list() -> None:
    """A plugin's ``layers: list`` (no element type) took any value: ``algorithm.layers = 5`` reached the method as 5,
    which failed inside its round as a TypeError. It is a list of anything now, and anything else one line on it."""
    import dataclasses

    from chillfl.options import parse_options

    @dataclasses.dataclass(frozen=True)
    class Options:
        layers: list = dataclasses.field(default_factory=list)
        pair: tuple = ()

    for key, value in (("layers", 5), ("layers", "fc"), ("pair", 1.5)):
        with pytest.raises(ConfigError) as err:
            parse_options(Options, {key: value}, "algorithm")
        assert err.value.field == f"algorithm.{key}" and "expected a list" in str(err.value)
    assert parse_options(Options, {"layers": ["fc", 2], "pair": [1, "a"]}, "algorithm") == Options(["fc", 2], (1, "a"))
