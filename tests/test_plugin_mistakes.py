"""A plugin's mistakes end in one line naming what to fix (exit 2), not a traceback deep in chillfl: a model named in the
config that does not fit the data, a builder that builds nothing, a ``round_metrics()`` that is no JSON, a declared
``takes_weights`` that ``aggregate()`` does not take, a ``validate()`` raising ValueError, a term reading a context key it
does not declare. Each was found by writing plugins from the docs alone (2026-12-04)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import main
from plugin_modules import plugin_module

SOURCE = '''
from dataclasses import dataclass

import torch
from torch import nn

from chillfl.extend import AlgorithmSpec, Capabilities, FedAvg


class FewOut(nn.Module):
    def __init__(self, input_shape, num_classes, options, section):
        super().__init__()
        self.fc = nn.Linear(64, num_classes - 2)

    def forward(self, x):
        return self.fc(x.flatten(1))


class TupleOut(FewOut):
    def forward(self, x):
        return super().forward(x), x


def builds_none(input_shape, num_classes, options, section):
    return None


class MetricsTensor(FedAvg):
    def round_metrics(self):
        return {"t": torch.tensor(1.0)}


class MetricsFloat(FedAvg):
    def round_metrics(self):
        return 3.0


class NoWeights(FedAvg):
    def aggregate(self, global_params, results, round):
        return super().aggregate(global_params, results, round)


@dataclass(frozen=True)
class NoOptions:
    pass


CLAIMS_WEIGHTS = AlgorithmSpec(NoOptions, lambda o, ctx: (NoWeights(), []), "claims takes_weights", capabilities=Capabilities(takes_weights=True))


class Checked(FedAvg):
    @dataclass(frozen=True)
    class Options:
        beta: float = 0.1

        def validate(self, section):
            if self.beta < 0:
                raise ValueError("beta must be >= 0")

    def __init__(self, options):
        super().__init__()


@dataclass(frozen=True)
class NormReporter:
    def prepare(self, state, start, context):
        return start, context

    def finish(self, model, state, trained):
        drift = sum(float(((trained.params[k] - trained.start[k]) ** 2).sum()) for k in trained.params)
        return {}, {"drift": drift}  # computed from the raw update: declared nowhere


class ReportsDrift(FedAvg):
    capabilities = Capabilities(takes_weights=True)  # a weighted mean, as dp-fedavg needs; its report declared nowhere

    def client_half(self):
        return NormReporter()


class ReadsUndeclared:
    reads = ()

    def __call__(self, params, context):
        return 0.0 * context["global_params"][next(iter(params))].sum()
'''

TINY = ["dataset.name=digits", "model.name=mlp", "federation.num_clients=4", "federation.clients_per_round=2", "federation.rounds=1",
        "client.batch_size=32", "executor=sequential"]


@pytest.mark.parametrize(("overrides", "line"), [
    (["model.name=mine:FewOut"], "model.name: outputs 8 logits per sample; the data has 10 classes"),
    (["model.name=mine:TupleOut"], "model.name: must return logits of shape [batch, num_classes] = [2, 10], got tuple"),
    (["model.name=mine:builds_none"], "model.name: the builder of 'mine:builds_none' must return a torch.nn.Module, got NoneType"),
    (["algorithm.name=mine:MetricsTensor"], "algorithm.name: MetricsTensor.round_metrics() returned 't' as Tensor: a metric is a number, str, bool, None, "
                                            "or a list or dict of them (float(t) or t.tolist() makes it one)"),
    (["algorithm.name=mine:MetricsFloat"], "algorithm.name: MetricsFloat.round_metrics() returned float: it returns a dict of str names to numbers "
                                           "(or str, bools, lists of them)"),
    (["algorithm.name=mine:CLAIMS_WEIGHTS"], "algorithm.name: 'mine:CLAIMS_WEIGHTS' declares takes_weights = True, but its aggregate() takes no "
                                             "weights= argument; add weights: torch.Tensor | None = None to it (the clients' weights, as the built-in averaging rule takes them), "
                                             "or drop takes_weights"),
    (["algorithm.name=mine:Checked", "algorithm.beta=-1"], "algorithm: Checked.Options.validate(): beta must be >= 0"),
    (["algorithm.name=mine:ReportsDrift", "privacy.mechanism=dp-fedavg", "privacy.delta=1e-3"],
     "algorithm.name: client 0 sent, besides its model, a report ('drift') that its method does not declare (Capabilities.reports): under "
     "[privacy] it reaches the server without noise, outside epsilon; declare it (every mechanism then refuses the method), or send the model alone"),
    (['objective.terms=["mine:ReadsUndeclared"]'], "objective.terms[0]: ReadsUndeclared read the context key 'global_params', which it does not declare in its "
                                                   "reads and the method does not send: declare it in reads (a key the method's context carries)"),
])
def test_a_plugin_mistake_is_one_line_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                             overrides: list[str], line: str) -> None:
    (tmp_path / "c.toml").write_text(f'name = "p"\nout_dir = "{(tmp_path / "out").as_posix()}"\n')
    with plugin_module(tmp_path, monkeypatch, "mine", SOURCE):
        assert main(["run", str(tmp_path / "c.toml"), "-q", *TINY, *overrides]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"chillfl: error: {line}"]
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())  # nothing half-written
