"""PA3Fed end to end: the client report (Eq. 8 score, gradient norm), the round loop's CLP / alpha
records checked against Eqs. 5, 6 and 10, the stability summary (Table 1, Fig. 5), plots, bundled configs."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from chillfl.aggregation.pa3fed import PA3Fed
from chillfl.cli import main as cli_main
from chillfl.config import RunConfig, load_config
from chillfl.data import FederatedData
from chillfl.aggregation.base import Trained
from chillfl.runner import run_experiment
from chillfl.experiment import build_algorithm, build_data, build_experiment, build_initial_model
from chillfl.experiments import bundled_experiments, resolve_config
from chillfl.metrics.stability import main as stability_main
from chillfl.metrics.stability import stability_summary
from chillfl.sweeps.plan import apply_variant, variants_from_config
from chillfl.plots.pa3fed import clp_spans, plot_clp
from chillfl.plots.pa3fed import main as plots_main
from chillfl.seeds import derive_seed
from chillfl.training.local import train_client

BASE: dict[str, Any] = {
    "seed": 2,
    "dataset.name": "digits",
    "partition.name": "dirichlet",
    "partition.alpha": 0.3,
    "federation.num_clients": 6,
    "federation.clients_per_round": 3,
    "federation.rounds": 5,
    "client.epochs": 1,
    "client.batch_size": 32,
    "client.lr": 0.05,
    "client.lr_decay": 0.8,
    "client.momentum": 0.9,
    "client.weight_decay": 1e-5,
    "eval.clients": "none",
    "model.name": "flexchill_cnn",
}


def tiny_config(algorithm: dict[str, Any], **extra: Any) -> RunConfig:
    overrides = {**BASE, **extra}
    return load_config(None, overrides).with_overrides({"algorithm": algorithm})


@pytest.fixture(scope="module")
def data() -> FederatedData:
    return build_data(tiny_config({"name": "fedavg"}))


# ---------------------------------------------------------------- the client report, against plain autograd


@pytest.mark.parametrize("grad_temperature", ["train", "one"])
def test_client_report_matches_a_plain_autograd_computation(grad_temperature: str, data: FederatedData) -> None:
    cfg = tiny_config({"name": "pa3fed", "grad_temperature": grad_temperature, "eval_batch_size": 7}, **{"model.batch_norm": True})
    exp = build_experiment(cfg, data=data)
    agg = exp.aggregator
    assert isinstance(agg, PA3Fed)
    x, y = data.client_train(1)
    temperature = 0.5
    context = agg.downlink(1, 0, exp.initial_state).context
    outcome = train_client(exp.model, exp.initial_state, x, y, spec=exp.spec, lr=0.05, temperature=temperature, context=context, generator=torch.Generator().manual_seed(derive_seed(0, "t")))
    before = {k: v.clone() for k, v in outcome.params.items()}
    trained = Trained(1, x, y, exp.initial_state, context, context, 0.05, temperature, outcome.params, outcome.num_steps)
    state, report = agg.client_half().finish(exp.model, {}, trained)
    assert report["alpha"] == 1.0 and set(state) == {"pa3fed.score"}  # first participation; the score is kept

    # Independent: a copy of the module holding the trained state, eval mode, ordinary backward.
    net = copy.deepcopy(exp.model)
    net.load_state_dict(outcome.params)
    net.eval()
    logits = net(x)
    score = F.cross_entropy(logits.detach(), y)  # Eq. 8: mean -log softmax(f(x))_y over all local data, T = 1
    t = temperature if grad_temperature == "train" else 1.0
    F.cross_entropy(logits / t, y).backward()
    norm = math.sqrt(sum(float((p.grad.double() ** 2).sum()) for p in net.parameters()))
    assert report["score"] == pytest.approx(score.item(), rel=1e-5)
    assert report["grad_norm"] == pytest.approx(norm, rel=1e-4)
    # neither value touched the state (eval mode: BN running statistics unchanged)
    assert all(torch.equal(before[k], outcome.params[k]) for k in before)


# ---------------------------------------------------------------- the round loop's records vs the equations


def test_records_follow_eqs_5_6_10(data: FederatedData, tmp_path: Path) -> None:
    cfg = tiny_config({"name": "pa3fed", "base": "fedprox", "base_options": {"mu": 0.01}, "beta": 0.3, "delta": 0.01})
    cfg = cfg.with_overrides({"out_dir": str(tmp_path), "name": "pa3"})
    out = run_experiment(cfg, data=data, progress=False)
    records = out.records
    sizes = {c: len(data.client_train(c)[1]) for c in range(data.num_clients)}
    previous_fgn = None
    last_score: dict[str, float] = {}
    records = json.loads(json.dumps(records))  # as read back from metrics.jsonl: client ids become strings
    for r in records:
        ids = [str(c) for c in r["clients"]]
        assert sorted(r["agg_scores"]) == sorted(ids) == sorted(r["agg_grad_norms"]) == sorted(r["agg_alphas"])
        # Eq. 5: FGN = sum_i m_i * eta * ||g_i||^2, m_i = n_i / sum_j n_j over the round's clients
        total = sum(sizes[int(c)] for c in ids)
        fgn = sum(sizes[int(c)] / total * r["lr"] * r["agg_grad_norms"][c] ** 2 for c in ids)
        assert r["agg_fgn"] == pytest.approx(fgn, rel=1e-9)
        # Eq. 6: CLP iff (FGN(t) - FGN(t-1)) / FGN(t-1) > delta; no FGN(t-1) in round 1 -> outside
        expected_clp = previous_fgn is not None and (fgn - previous_fgn) / previous_fgn > 0.01
        assert r["agg_clp"] is expected_clp and r["agg_adapted"] is expected_clp
        previous_fgn = fgn
        # Eq. 10: alpha_i = exp(-beta |s_i^{t-sigma} - s_i^t|), 1 at a client's first participation
        for c in ids:
            s = r["agg_scores"][c]
            expected = 1.0 if c not in last_score else math.exp(-0.3 * abs(last_score[c] - s))
            assert r["agg_alphas"][c] == pytest.approx(expected, rel=1e-12)
            last_score[c] = s
        # weight shift: 0.5 * sum_i |m_i alpha_i / sum_j m_j alpha_j - m_i|
        ma = {c: sizes[int(c)] / total * r["agg_alphas"][c] for c in ids}
        shift = 0.5 * sum(abs(ma[c] / sum(ma.values()) - sizes[int(c)] / total) for c in ids)
        assert r["agg_weight_shift"] == pytest.approx(shift, rel=1e-9, abs=1e-15)
    assert any(a < 1.0 for r in records for a in r["agg_alphas"].values())  # some client came back

    folder = out.folder
    assert folder is not None and (folder / "clp.png").stat().st_size > 0
    summary = json.loads((folder / "summary.json").read_text())
    stability = summary["stability"]
    assert stability["clp_rounds"] == [r["round"] for r in records if r["agg_clp"]]
    assert stability["clients"] == len({c for r in records for c in r["clients"]})
    assert set(stability["table1"]) == {"std", "moving_std", "mad", "range", "max_change_rate"}


def test_mode_never_is_the_base_method_bit_for_bit(data: FederatedData) -> None:
    plain = run_experiment(tiny_config({"name": "fedavg"}), data=data, write=False, progress=False).records
    never = run_experiment(tiny_config({"name": "pa3fed", "mode": "never"}), data=data, write=False, progress=False).records
    always = run_experiment(tiny_config({"name": "pa3fed", "mode": "always"}), data=data, write=False, progress=False).records
    keys = ("global_acc", "global_loss", "train_loss", "client_train_loss")
    assert [{k: r[k] for k in keys} for r in never] == [{k: r[k] for k in keys} for r in plain]
    assert all(r["agg_adapted"] is False and r["agg_fgn"] > 0 for r in never)  # FGN / CLP still measured
    assert all(r["agg_adapted"] is True for r in always)
    # once a returning client has alpha < 1, "always" aggregates differently from FedAvg
    first = next(i for i, r in enumerate(always) if any(a < 1.0 for a in r["agg_alphas"].values()))
    assert always[first]["global_loss"] != plain[first]["global_loss"]


def test_pa3fed_run_is_deterministic(data: FederatedData) -> None:
    cfg = tiny_config({"name": "pa3fed", "base": "scaffold", "mode": "always"}, **{"federation.rounds": 3})
    first = run_experiment(cfg, data=data, write=False, progress=False).records
    second = run_experiment(cfg, data=data, write=False, progress=False).records
    assert first == second


# ---------------------------------------------------------------- stability summary on hand-made records


RECORDS = [
    {"round": 1, "client_train_loss": {"0": 1.0, "1": 2.0}, "agg_clp": False},
    {"round": 2, "client_train_loss": {"0": 0.8}, "agg_clp": True},
    {"round": 3, "client_train_loss": {"0": 0.4, "1": 1.0}, "agg_clp": True},
    {"round": 4, "client_train_loss": {"0": 0.2}, "agg_clp": False},
]


def test_stability_summary_by_hand() -> None:
    s = stability_summary(RECORDS, window=2)
    assert s is not None
    # client 0: (1.0, 0.8, 0.4, 0.2): mean 0.6, deviations (.4, .2, -.2, -.4) -> std sqrt(0.4 / 4) = 0.31623,
    #   MAD 0.3, range 0.8, max change 0.4, moving std (window 2) (0.1 + 0.2 + 0.1) / 3
    # client 1: (2.0, 1.0): std 0.5, MAD 0.5, range 1.0, max change 1.0, moving std 0.5
    assert s["table1"] == pytest.approx(
        {
            "std": (math.sqrt(0.1) + 0.5) / 2,
            "mad": (0.3 + 0.5) / 2,
            "range": (0.8 + 1.0) / 2,
            "max_change_rate": (0.4 + 1.0) / 2,
            "moving_std": (0.4 / 3 + 0.5) / 2,
        }
    )
    assert s["clients"] == 2 and s["clp_rounds"] == [2, 3]
    # Fig. 5: client 0 inside CLP (rounds 2, 3) = (0.8, 0.4) -> std 0.2; outside (rounds 1, 4) = (1.0, 0.2) -> 0.4.
    # client 1 has one value on each side: left out of both means.
    assert s["loss_std_inside_clp"] == pytest.approx(0.2)
    assert s["loss_std_outside_clp"] == pytest.approx(0.4)
    # default window 5: no trajectory is long enough -> moving std undefined, written as None (strict JSON)
    assert stability_summary(RECORDS)["table1"]["moving_std"] is None  # type: ignore[index]
    json.dumps(stability_summary(RECORDS), allow_nan=False)


def test_stability_summary_without_clp_or_losses() -> None:
    plain = [{k: v for k, v in r.items() if k != "agg_clp"} for r in RECORDS]
    s = stability_summary(plain, window=2)
    assert s is not None and "clp_rounds" not in s and "loss_std_inside_clp" not in s
    assert stability_summary([{"round": 1, "global_acc": 0.5}]) is None
    scores = [{"round": 1, "agg_scores": {"3": 2.0}}, {"round": 2, "agg_scores": {"3": 1.0}}]
    assert stability_summary(scores, source="agg_scores", window=2)["table1"]["range"] == pytest.approx(1.0)  # type: ignore[index]
    with pytest.raises(ValueError, match="allowed"):
        stability_summary(RECORDS, source="global_loss")


# ---------------------------------------------------------------- plots


def test_clp_spans_and_plot(tmp_path: Path) -> None:
    records = [{"round": r, "agg_clp": r in (2, 3, 5), "agg_fgn": 0.1 * r, "global_acc": 0.1 * r} for r in range(1, 7)]
    assert clp_spans(records) == [(2, 3), (5, 5)]
    assert plot_clp(records, tmp_path / "clp.png") and (tmp_path / "clp.png").stat().st_size > 0
    assert not plot_clp([{"round": 1, "global_acc": 0.5}], tmp_path / "none.png")
    assert not (tmp_path / "none.png").exists()


# ---------------------------------------------------------------- bundled experiments and the CLI


def test_bundled_pa3fed_and_table7_configs_build_every_variant() -> None:
    names = [n for n in bundled_experiments() if n.startswith("pa3fed/") or n.startswith("flexchill/table7-")]
    assert {"pa3fed/table2-h0.1", "pa3fed/table2-h0.2", "pa3fed/table2-h0.3", "flexchill/table7-scaffold-digits"} <= set(names)
    shapes = {"mnist1d": (1, 40), "digits": (1, 8, 8), "cifar10": (3, 32, 32), "cifar100": (3, 32, 32), "fashion_mnist": (1, 28, 28)}
    classes = {"cifar100": 100}
    for name in names:
        config = load_config(resolve_config(name))
        variants = variants_from_config(config)
        assert variants, name
        for variant in variants:
            cfg = apply_variant(config, variant)
            if cfg.model["name"] in ("alexnet", "resnet18"):
                continue  # full-size models: building them here only costs time; their options are validated above
            model, _ = build_initial_model(cfg, shapes[cfg.dataset["name"]], classes.get(cfg.dataset["name"], 10))
            build_algorithm(cfg, model)
    row = variants_from_config(load_config(resolve_config("pa3fed/table2-h0.1")))
    assert [v.label for v in row] == ["FedAvg Normal", "FedAvg PA3Fed", "FedProx Normal", "FedProx PA3Fed"]


def test_compare_normal_vs_pa3fed_through_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "row.toml"
    config.write_text(
        """
seed = 0
[dataset]
name = "digits"
[partition]
name = "dirichlet"
alpha = 0.3
[model]
name = "flexchill_cnn"
[federation]
num_clients = 6
clients_per_round = 3
rounds = 3
[client]
epochs = 1
batch_size = 32
lr = 0.05
[eval]
clients = "none"
[variants."FedAvg Normal"]
algorithm = { name = "fedavg" }
[variants."FedAvg PA3Fed"]
algorithm = { name = "pa3fed", base = "fedavg" }
"""
    )
    assert cli_main(["compare", str(config), f"out_dir={tmp_path / 'out'}", "-q"]) == 0
    folder = tmp_path / "out" / "row-compare"
    table = (folder / "table.md").read_text()
    assert "| FedAvg Normal |" in table and "| FedAvg PA3Fed |" in table
    assert (folder / "FedAvg_PA3Fed" / "clp.png").is_file() and not (folder / "FedAvg_Normal" / "clp.png").exists()
    assert plots_main([str(folder)]) == 0 and (folder / "clp_curves.png").stat().st_size > 0
    capsys.readouterr()  # drop the compare table printed above
    assert stability_main([str(folder)]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {line.split(" | ")[0].strip("| "): line for line in lines if line.startswith("| FedAvg")}
    assert set(rows) == {"FedAvg_Normal", "FedAvg_PA3Fed"}
    assert rows["FedAvg_Normal"].endswith("| - | - | - |")  # no CLP flags without PA3Fed
    assert not rows["FedAvg_PA3Fed"].endswith("| - | - | - |")
    # a bad PA3Fed option is a user error (exit status 2)
    assert cli_main(["compare", str(config), f"out_dir={tmp_path / 'out'}", "variants.FedAvg PA3Fed.algorithm.mode=sometimes", "-q"]) == 2
    assert not (tmp_path / "out" / "row-compare-2").exists()  # nothing that looks like a finished result
