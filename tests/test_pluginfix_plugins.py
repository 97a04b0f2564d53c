"""A plugin's mistakes are one line on the config field that chose it: a partitioner whose split is not a partition
of the training rows, a part whose constructor or builder raises (every family, as a model's did), two entries of one
objective term told apart by index; and a plugin figure that raises costs a warning, not the finished run."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

from plugin_modules import plugin_module

from chillfl.config import load_config
from chillfl.data.partition import partition
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment

MODULE = '''
from dataclasses import dataclass

import numpy as np

from chillfl.data.partition import Partition
from chillfl.plots.registry import registered_figures
from chillfl.extend import (AlgorithmSpec, ClassRows, FedAvg, FigureSpec, PrototypeHooks, PrototypeSpec, SoftLabelClientHooks,
                            SoftLabelMethod, SoftLabelSpec, SoftLabelUplink, TermSpec, register_figure, require)


@dataclass(frozen=True)
class NoOptions:
    pass


def overlap(labels, num_clients, rng, options, section, dataset):
    return Partition([np.arange(10)] * num_clients)


def plain_list(labels, num_clients, rng, options, section, dataset):
    return [np.arange(i * 10, i * 10 + 10) for i in range(num_clients)]


def short(labels, num_clients, rng, options, section, dataset):
    return Partition([np.arange(i * 10, i * 10 + 10) for i in range(num_clients - 1)])


def out_of_range(labels, num_clients, rng, options, section, dataset):
    return Partition([np.arange(i * 10, i * 10 + 10) + (10**6 if i == 0 else 0) for i in range(num_clients)])


def fine(labels, num_clients, rng, options, section, dataset):
    return Partition([np.arange(i * 10, i * 10 + 10)[::-1] for i in range(num_clients)])


def raising_partition(labels, num_clients, rng, options, section, dataset):
    raise RuntimeError("partition boom")


def raising_dataset(options, data_dir):
    raise RuntimeError("dataset boom")


class RaisingTerm:
    reads = ()

    def __init__(self):
        raise RuntimeError("term boom")

    def __call__(self, params, context):
        return 0.0


class L2:
    @dataclass(frozen=True)
    class Options:
        weight: float = 0.01

        def validate(self, section):
            require(self.weight >= 0, f"{section}.weight", f"must be >= 0, got {self.weight}")

    reads = ()

    def __init__(self, options=Options()):
        self.w = options.weight

    def __call__(self, params, context):
        return self.w * sum((p ** 2).sum() for p in params.values())


class RaisingPolicy:
    def __init__(self):
        raise RuntimeError("policy boom")

    def temperature(self, client_id, round): return 1.0
    def observe(self, client_id, round, local_accuracy): return None
    def client_half(self, num_classes): return None
    def state_dict(self): return {}
    def load_state_dict(self, state): pass


class RaisingHooks(PrototypeHooks):
    def __init__(self, *a, **k):
        raise RuntimeError("proto boom")


class RaisingSoft(SoftLabelMethod):
    def __init__(self, *a, **k):
        raise RuntimeError("soft boom")


PROTO = PrototypeSpec("pf_proto", NoOptions, RaisingHooks)
SOFT = SoftLabelSpec("pf_soft", NoOptions, RaisingSoft)


class NarrowRelease(PrototypeHooks):
    def release(self, cid, round, features, logits, y):
        rows = super().release(cid, round, features, logits, y)
        return ClassRows(rows.means[:, :3], rows.counts, rows.extra)


class NumberLoss(PrototypeHooks):
    def loss(self, head):
        return 3.0


class NarrowUpload(SoftLabelClientHooks):
    def upload(self, cid, round, indices, probs, state):
        return SoftLabelUplink(client_id=cid, round=round, indices=indices, soft_labels=probs[:, :3])


PROTO_NARROW = PrototypeSpec("pf_narrow", NoOptions, NarrowRelease)
PROTO_NUMBER = PrototypeSpec("pf_number", NoOptions, NumberLoss)
SOFT_NARROW = SoftLabelSpec("pf_soft_narrow", NoOptions, SoftLabelMethod, NarrowUpload)
TERM_NUMBER = TermSpec(NoOptions, lambda o: 5, "builds a number")


def bad_draw(records, path, title):
    raise RuntimeError("draw boom")


if "pf_bad_fig" not in registered_figures():  # figures are one table per process; each test imports this module anew
    register_figure("pf_bad_fig", FigureSpec("pf_bad.png", bad_draw, "raises"))
BADFIG = AlgorithmSpec(NoOptions, lambda o, ctx: (FedAvg("samples"), []), "fedavg with a figure that raises", figures=("pf_bad_fig",))
'''

BASE: dict[str, Any] = {"dataset": {"name": "digits"}, "model": {"name": "mlp"}, "device": "cpu",
                        "federation": {"num_clients": 4, "clients_per_round": 2, "rounds": 1}, "client": {"batch_size": 32}}


@pytest.fixture()
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with plugin_module(tmp_path, monkeypatch, "pf_plugins", MODULE):
        yield tmp_path


@pytest.mark.parametrize("split,words", [
    ("overlap", "gives some training row to two clients"),
    ("plain_list", "must return a chillfl Partition, got [array("),
    ("short", "one training index array per client (4, federation.num_clients) in Partition.client_indices, got 3"),
    ("out_of_range", "gave client 0 training row indices outside [0, 99]"),
    ("raising_partition", "fails to build for 100 rows over 4 clients: RuntimeError: partition boom"),
])
def test_a_plugin_partitioners_wrong_split_is_one_line_on_partition_name(plugin: Path, split: str, words: str) -> None:
    labels = np.arange(100) % 10
    with pytest.raises(ConfigError) as err:
        partition(f"pf_plugins:{split}", labels, 4, np.random.default_rng(0))
    assert err.value.field == "partition.name" and words in err.value.message


def test_a_plugin_partitioners_right_split_is_kept_sorted(plugin: Path) -> None:
    part = partition("pf_plugins:fine", np.arange(100) % 10, 4, np.random.default_rng(0))
    assert [ix.tolist() for ix in part.client_indices] == [list(range(i * 10, i * 10 + 10)) for i in range(4)]


@pytest.mark.parametrize("table,field,words", [
    ({"objective": {"terms": ["pf_plugins:RaisingTerm"]}}, "objective.terms[0]", "RuntimeError: term boom"),
    ({"dataset": {"name": "pf_plugins:raising_dataset"}}, "dataset.name", "RuntimeError: dataset boom"),
    ({"partition": {"name": "pf_plugins:raising_partition"}}, "partition.name", "RuntimeError: partition boom"),
    ({"temperature": {"policy": "pf_plugins:RaisingPolicy"}}, "temperature.policy", "RuntimeError: policy boom"),
    ({"prototypes": {"method": "pf_plugins:PROTO"}}, "prototypes.method", "RuntimeError: proto boom"),
    ({"distillation": {"method": "pf_plugins:SOFT", "public_size": 200, "subset_size": 100}}, "distillation.method", "RuntimeError: soft boom"),
])
def test_a_plugin_that_raises_as_it_is_built_is_one_line_on_its_field(plugin: Path, table: dict[str, Any], field: str, words: str) -> None:
    from chillfl.runner import run_experiment

    with pytest.raises(ConfigError) as err:
        config = load_config(None, {**BASE, **table})
        build_experiment(config) if "distillation" not in table else run_experiment(config, write=False, progress=False)
    assert err.value.field == field and "fails to build" in err.value.message and words in err.value.message


def test_a_built_in_models_slip_is_raised_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    from chillfl.models import registry

    def broken(*args: Any) -> Any:
        raise RuntimeError("our bug")

    monkeypatch.setitem(registry.MODELS, "mlp", registry.MODELS["mlp"]._replace(build=broken))
    with pytest.raises(RuntimeError, match="our bug"):
        registry.build_model("mlp", (1, 8, 8), 10)


def test_two_entries_of_one_term_are_told_apart_by_index(plugin: Path) -> None:
    terms = [{"name": "pf_plugins:L2", "weight": 0.1}, {"name": "pf_plugins:L2", "weight": -1.0}]
    with pytest.raises(ConfigError) as err:
        build_experiment(load_config(None, {**BASE, "objective": {"terms": terms}}))
    assert err.value.field == "objective.terms[1].weight"


def test_a_plugin_figure_that_raises_is_a_warning_and_the_run_finishes(plugin: Path, caplog: pytest.LogCaptureFixture) -> None:
    from chillfl.runner import run_experiment

    config = load_config(None, {**BASE, "algorithm": {"name": "pf_plugins:BADFIG"}, "out_dir": str(plugin / "out")})
    with caplog.at_level(logging.WARNING):
        out = run_experiment(config, progress=False)
    assert out.folder is not None and (out.folder / "summary.json").exists() and not out.folder.name.endswith(".partial")
    assert [r.getMessage() for r in caplog.records if "pf_bad_fig" in r.getMessage()] == [
        "figure 'pf_bad_fig' (pf_bad.png) failed and is skipped: RuntimeError: draw boom"]


SOFT_TABLE: dict[str, Any] = {"public_size": 200, "subset_size": 100}


@pytest.mark.parametrize("table,field,words", [
    ({"prototypes": {"method": "pf_plugins:PROTO_NARROW"}}, "prototypes.method", "NarrowRelease.release() returned means of shape (10, 3)"),
    ({"prototypes": {"method": "pf_plugins:PROTO_NUMBER"}}, "prototypes.method", "NumberLoss.loss() returned a float, not a loss"),
    ({"distillation": {"method": "pf_plugins:SOFT_NARROW", **SOFT_TABLE}}, "distillation.method", "sent soft-labels of shape (100, 3) for 100 rows"),
    ({"objective": {"terms": ["pf_plugins:TERM_NUMBER"]}}, "objective.terms[0]", "build must return a loss term"),
])
def test_a_plugins_wrong_shape_or_kind_is_one_line_on_its_field(plugin: Path, table: dict[str, Any], field: str, words: str) -> None:
    from chillfl.runner import run_experiment

    with pytest.raises(ConfigError) as err:
        run_experiment(load_config(None, {**BASE, **table}), write=False, progress=False)
    assert err.value.field == field and words in err.value.message
