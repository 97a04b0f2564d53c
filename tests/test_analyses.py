"""The papers' analyses as commands on a tiny finished run: replay, Fig. 9/10, CKA, Fig. 2, calibration."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from chillfl.analysis.aggregation import accuracy_change, entropy_change
from chillfl.analysis.cka import REPRESENTATION, default_layers, layer_features
from chillfl.analysis.grad_norms import input_gradient_norms, sample_subset
from chillfl.analysis.replay import accuracy, entropy, load_model_state, predict, replay_round
from chillfl.cli import main
from chillfl.errors import ConfigError
from chillfl.metrics.cka import linear_cka
from chillfl.storage.results import read_metrics
from chillfl.models.parts import forward_with_features
from chillfl.seeds import derive_seed

TINY = ["dataset.name=digits", "federation.num_clients=4", "federation.rounds=2", "federation.clients_per_round=2", "model.name=mlp", "eval.client_split_size=20"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("analyses")
    config = root / "exp.toml"
    config.write_text(f'name = "tiny"\nout_dir = "{root / "out"}"\n[temperature]\npolicy = "fixed"\nvalue = 0.1\n')
    assert main(["run", str(config), "-q", *TINY]) == 0
    return root / "out" / "tiny"


def test_replay_from_the_initial_model_is_round_one_of_the_run(run_dir: Path) -> None:
    replay = replay_round(run_dir, "initial")
    first = read_metrics(run_dir)[0]
    assert replay.round == 1 and sorted(replay.clients) == first["clients"]
    # bitwise: the replay runs the run's own protocol and executor on the same seeds
    assert replay.record["global_acc"] == first["global_acc"]
    assert replay.record["global_loss"] == first["global_loss"]
    assert replay.record["global_ece"] == first["global_ece"]


@pytest.mark.parametrize("wrap", ["privacy.mechanism=dp-fedavg", "attack.kind=scaling"])
def test_replay_runs_through_privacy_and_attack_wrappers(tmp_path: Path, wrap: str) -> None:
    """A run with [privacy] or [attack] has its protocol wrapped: the replay was an AssertionError (exit 1);
    it is round 1 of the run, wrapper included."""
    config = tmp_path / "exp.toml"
    config.write_text(f'name = "w"\nout_dir = "{tmp_path / "out"}"\n')
    assert main(["run", str(config), "-q", *TINY, "federation.rounds=1", wrap]) == 0
    replay = replay_round(tmp_path / "out" / "w", "initial")
    first = read_metrics(tmp_path / "out" / "w")[0]
    assert replay.record["global_acc"] == first["global_acc"] and replay.record["global_loss"] == first["global_loss"]


def test_replay_draws_the_runs_poisson_sample(tmp_path: Path) -> None:
    """Under federation.sampling = "poisson" the replay draws as the run did: seed 0 puts client 3 alone in round 1 (a fixed
    draw would take two); seed 30 draws nobody, and the replay says so naming the field."""
    config = tmp_path / "exp.toml"
    config.write_text(f'name = "p"\nout_dir = "{tmp_path / "out"}"\n')
    assert main(["run", str(config), "-q", *TINY, "federation.rounds=1", "federation.sampling=poisson"]) == 0
    replay = replay_round(tmp_path / "out" / "p", "initial")
    first = read_metrics(tmp_path / "out" / "p")[0]
    assert replay.clients.keys() == {3} and first["clients"] == [3] and replay.record["global_loss"] == first["global_loss"]
    assert main(["run", str(config), "-q", *TINY, "federation.rounds=1", "federation.sampling=poisson", "--seed", "30", "--out", str(tmp_path / "empty")]) == 0
    with pytest.raises(ConfigError) as err:
        replay_round(tmp_path / "empty" / "p", "initial")
    assert err.value.field == "federation.sampling"
    # which round, and why: before, "too few reporting clients" (there were none to draw), and under --start final
    # "round N+1 of this run" for a run of N rounds
    assert "replayed round 1 of this run draws nobody (Poisson sampling)" in str(err.value) and "--start final" in str(err.value)


def test_replay_from_the_final_model_starts_from_model_safetensors(run_dir: Path) -> None:
    import safetensors.torch

    replay = replay_round(run_dir, "final")
    saved = safetensors.torch.load_file(str(run_dir / "model.safetensors"))
    assert replay.round == 3
    assert all(torch.equal(replay.start[k], saved[k]) for k in saved)
    assert any(not torch.equal(replay.aggregated[k], saved[k]) for k in saved)  # the replayed round trained


def test_accuracy_change_groups_and_differences(run_dir: Path) -> None:
    replay = replay_round(run_dir, "final")
    result = accuracy_change(replay)
    rows = result["clients"]
    assert {r["client"] for r in rows if r["participating"]} == set(replay.clients)
    assert {r["client"] for r in rows if not r["participating"]} == set(range(4)) - set(replay.clients)
    exp = replay.exp
    for r in rows:  # before: the client's own trained model, or the start model it holds; after: the aggregate
        x, y = exp.data.client_eval(r["client"])
        before_state = replay.clients[r["client"]] if r["participating"] else replay.start
        assert r["before"] == accuracy(predict(exp.model, before_state, x), y)
        assert r["after"] == accuracy(predict(exp.model, replay.aggregated, x), y)
        assert r["delta"] == r["after"] - r["before"]
    part = [r["delta"] for r in rows if r["participating"]]
    assert result["mean_delta_participating"] == pytest.approx(sum(part) / len(part))


def test_entropy_by_hand_and_before_after(run_dir: Path) -> None:
    # uniform over 2 classes: ln 2; one-hot (large margin): ~0; (ln 3, 0, 0) -> p = (3/5, 1/5, 1/5):
    # H = -(0.6 ln 0.6 + 2 * 0.2 ln 0.2) = 0.30650 + 0.64378 = 0.95027
    h = entropy(torch.tensor([[0.0, 0.0], [100.0, 0.0]]))
    assert h[0].item() == pytest.approx(math.log(2)) and h[1].item() == pytest.approx(0.0, abs=1e-12)
    assert entropy(torch.tensor([[math.log(3), 0.0, 0.0]]))[0].item() == pytest.approx(0.950271, abs=1e-6)
    result = entropy_change(replay_round(run_dir, "final"))
    assert result["before"] == pytest.approx(sum(result["per_client_before"].values()) / len(result["per_client_before"]))
    assert 0 <= result["after"] <= result["max_entropy"] == pytest.approx(math.log(10))


def test_input_gradient_norm_by_hand() -> None:
    # z = W x with W = I (2 x 2), x = 0, y = 0: p = (1/2, 1/2), dCE(z/T)/dz = (p - onehot) / T = (-1/2, 1/2) / T,
    # dL/dx = W^T dL/dz -> norm sqrt(1/2) / T: 0.70711 at T = 1 and 1.41421 at T = 0.5 (Eq. 2's 1/T).
    # The prediction argmax(0, 0) = class 0 is correct.
    model = nn.Linear(2, 2, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.eye(2))
    state = dict(model.state_dict())
    x, y = torch.zeros(1, 2), torch.tensor([0])
    for t, expected in ((1.0, math.sqrt(0.5)), (0.5, math.sqrt(2.0))):
        norms, correct = input_gradient_norms(model, state, x, y, t)
        assert norms[0] == pytest.approx(expected, abs=1e-7) and bool(correct[0])
    # per-sample gradients are independent of the batch they are computed in
    xs, ys = torch.randn(7, 2), torch.randint(0, 2, (7,))
    full, _ = input_gradient_norms(model, state, xs, ys, 0.3, batch_size=7)
    one, _ = input_gradient_norms(model, state, xs, ys, 0.3, batch_size=1)
    assert full == pytest.approx(one, abs=1e-6)


def test_layer_features_match_the_model_parts_representation(run_dir: Path) -> None:
    replay = replay_round(run_dir, "initial")
    model, x = replay.exp.model, replay.exp.data.test()[0][:50]
    layers = default_layers(model)
    assert layers[-2] == REPRESENTATION and len(layers) >= 3
    feats = layer_features(model, replay.start, x, layers)
    model.load_state_dict(replay.start)
    model.eval()
    rep, logits = forward_with_features(model, x)
    assert torch.equal(feats[REPRESENTATION], rep.reshape(50, -1))
    head = layers[-1]  # the last linear layer's output is the logits
    assert torch.allclose(feats[head], logits)


def _files(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


def test_cli_analyses_write_json_and_png(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "a"
    assert main(["analyze", "calibration", str(run_dir), "-o", str(out)]) == 0
    cal = json.loads((out / "calibration.json").read_text())["runs"]["tiny"]
    summary = json.loads((run_dir / "summary.json").read_text())
    # the offline reliability diagram and the one-pass per-round metric agree on the same model and bins
    assert cal["ece"] == pytest.approx(summary["final_global_ece"], abs=1e-9)
    assert cal["brier"] == pytest.approx(summary["final_global_brier"], abs=1e-9)
    assert cal["accuracy"] == pytest.approx(summary["final_global_acc"], abs=1e-12)
    assert sum(cal["reliability"]["count"]) == cal["n"]

    assert main(["analyze", "cka", str(run_dir), "--reference", str(run_dir), "--clients", "--samples", "64", "-o", str(out)]) == 0
    cka = json.loads((out / "cka.json").read_text())["runs"]["tiny"]
    assert all(v == pytest.approx(1.0) for v in cka["global_vs_reference"].values())  # the model against itself
    m = cka["matrix"]
    assert m["models"][:3] == ["INIT", "AGG", "REF"] and len(m["models"]) == 5  # + 2 participating clients
    assert all(m["cka"][i][i] == pytest.approx(1.0) for i in range(5))
    assert m["cka"][0][2] == pytest.approx(1.0)  # INIT (start = the saved model) = REF here
    assert all(0 < v < 1 + 1e-9 for row in m["cka"] for v in row)

    for name in ("aggregation-accuracy", "aggregation-entropy"):
        assert main(["analyze", name, str(run_dir), "-o", str(out)]) == 0
    assert main(["analyze", "grad-norms", str(run_dir), "--samples", "300", "-o", str(out)]) == 0
    grad = json.loads((out / "grad-norms.json").read_text())["runs"]["tiny"]
    assert grad["temperature"] == 0.1  # the run's own training temperature
    assert grad["correct"]["n"] + grad["incorrect"]["n"] == 300
    assert {"calibration.json", "reliability.png", "cka.json", "cka.png", "aggregation-accuracy.json", "aggregation-accuracy.png",
            "aggregation-entropy.json", "aggregation-entropy.png", "grad-norms.json", "grad-norms.png"} <= _files(out)
    assert "results:" in capsys.readouterr().out


def test_cka_without_a_reference_compares_with_the_runs_initial_model(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without ``--reference`` each run was compared with its own saved model: every layer printed 1.0000. The default
    reference is now the run's seeded initial model, bitwise the model round 1 started from (the replay of round 1
    reproduces the run's metrics from it, test above), and the output's first line says so."""
    out = tmp_path / "c"
    assert main(["analyze", "cka", str(run_dir), "--samples", "64", "-o", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("reference: each run's initial model") and "--reference" in printed[0]
    result = json.loads((out / "cka.json").read_text())
    assert result["reference"] == "initial"
    values = result["runs"]["tiny"]["global_vs_reference"]
    assert all(0 < v < 1 for v in values.values())  # two rounds of training moved every layer's features
    # the same numbers as against that model's features computed here, from the replay's round-1 start
    replay = replay_round(run_dir, "initial")
    x, layers = sample_subset(*replay.exp.data.test(), 64, derive_seed(replay.exp.config.seed, "cka"))[0], default_layers(replay.exp.model)
    trained = layer_features(replay.exp.model, load_model_state(run_dir), x, layers)
    initial = layer_features(replay.exp.model, replay.start, x, layers)
    assert values == {k: linear_cka(trained[k], initial[k]) for k in layers}


def test_cli_bad_input_is_one_line(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for args, field in (
        (["analyze", "cka", str(tmp_path)], "run_dir"),
        (["analyze", "calibration", str(run_dir), "--temperature", "0", "-o", str(tmp_path / "x")], "--temperature"),
        (["analyze", "cka", str(run_dir), "--layers", "nope", "-o", str(tmp_path / "x")], "--layers"),
        (["analyze", "cka", str(run_dir), "--layers", "fc,,fc", "-o", str(tmp_path / "x")], "--layers"),  # an empty item was dropped
        (["analyze", "cka", str(run_dir), "--samples", "1", "-o", str(tmp_path / "x")], "--samples"),
        (["analyze", "calibration", str(run_dir), "-o", str(run_dir / "config.toml" / "x")], "--out"),  # was NotADirectoryError
        (["analyze", "calibration", str(run_dir), "-o", ""], "--out"),  # was the default <RUN_DIR>/analysis, nothing said
    ):
        assert main(args) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"chillfl: error: {field}:") and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "x").exists()


def unfinished(partial: Path) -> str:
    """The line for a run folder that did not finish."""
    return f"chillfl: error: run_dir: {partial} is a run that did not finish (a .partial folder without summary.json); `chillfl resume {partial}` finishes it"


def test_a_run_without_a_global_model_says_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """It said "(soft-label runs and unfinished runs save none)" for a prototype run, while soft-label runs save one."""
    (tmp_path / "proto.toml").write_text(f'out_dir = "{tmp_path}"\n[prototypes]\nmethod = "fedproto"\n')
    assert main(["run", str(tmp_path / "proto.toml"), "-q", *TINY]) == 0
    (tmp_path / "cut.partial").mkdir()
    (tmp_path / "cut.partial" / "config.toml").write_text((tmp_path / "proto" / "config.toml").read_text())
    assert main(["analyze", "calibration", str(tmp_path / "proto"), "-o", str(tmp_path / "x")]) == 2
    why = "a prototype-sharing (fedproto) run has no global model: each client keeps its own"
    assert capsys.readouterr().err.strip() == f"chillfl: error: run_dir: {tmp_path / 'proto'} has no model.safetensors ({why})"
    assert main(["analyze", "calibration", str(tmp_path / "cut.partial"), "-o", str(tmp_path / "x")]) == 2  # unfinished: how to finish it
    assert capsys.readouterr().err.strip() == unfinished(tmp_path / "cut.partial")
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("analysis", ["calibration", "cka", "grad-norms", "aggregation-accuracy"])
def test_a_run_killed_while_it_wrote_its_results_is_refused_as_unfinished(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], analysis: str) -> None:
    """Killed after model.safetensors and before summary.json: the analysis ran and wrote its analysis/ into the .partial."""
    import shutil

    partial = tmp_path / "tiny.partial"
    shutil.copytree(run_dir, partial, ignore=shutil.ignore_patterns("analysis"))
    (partial / "summary.json").unlink()
    assert (partial / "model.safetensors").is_file()
    assert main(["analyze", analysis, str(partial)]) == 2
    assert capsys.readouterr().err.strip() == unfinished(partial)
    assert not (partial / "analysis").exists()
    inner = tmp_path / "c-compare.partial" / "tiny.partial"  # one run of a comparison: the comparison is what resumes
    inner.parent.mkdir()
    (inner.parent / "sweep.json").write_text("{}")
    partial.rename(inner)
    assert main(["analyze", analysis, str(inner)]) == 2
    assert capsys.readouterr().err.strip().endswith(f"`chillfl resume {inner.parent}` finishes it")


def test_the_fig9_legend_names_both_groups_when_the_first_run_has_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The legend took its labels from the first run only: a first run where every client took part left the
    other runs' open squares (non-participating) unnamed."""
    from matplotlib.figure import Figure

    from chillfl.analysis.aggregation import plot_accuracy_change

    legends: list[list[str]] = []
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: legends.extend([t.get_text() for t in ax.get_legend().get_texts()] for ax in self.axes))
    everyone = {"clients": [{"delta": 0.1, "participating": True}]}
    some = {"clients": [{"delta": 0.1, "participating": True}, {"delta": -0.1, "participating": False}]}
    plot_accuracy_change({"runs": {"all": everyone, "some": some}}, tmp_path / "a.png")
    assert legends == [["participating", "non-participating", "mean of the group"]]


def test_two_runs_of_one_folder_name_are_both_analysed(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Results were keyed by the folder name: ``a/tiny`` and ``b/tiny`` gave one line and one entry (the last run's)."""
    import shutil

    other = tmp_path / "b" / "tiny"
    shutil.copytree(run_dir, other)
    assert main(["analyze", "calibration", str(run_dir), str(other), "-o", str(tmp_path / "x")]) == 0
    runs = json.loads((tmp_path / "x" / "calibration.json").read_text())["runs"]
    assert sorted(runs) == sorted([f"{run_dir.parent.name}/tiny", "b/tiny"])
    assert len([line for line in capsys.readouterr().out.splitlines() if "/tiny: accuracy" in line]) == 2


def test_a_comparison_folder_is_named_as_one(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A comparison's folder holds a config.toml (the comparison's), so ``analyze calibration NAME-compare`` rebuilt it as
    a run and then said "has no model.safetensors (the run is not finished ...)": wrong, for a folder that finished.
    The analyses, and cka's --reference, now say what it is and name one of its runs."""
    import shutil

    compare = tmp_path / "exp-compare"
    compare.mkdir()
    (compare / "config.toml").write_text((run_dir / "config.toml").read_text())
    (compare / "sweep.json").write_text("{}\n")  # what makes a folder a comparison's (chillfl.storage.run_state.is_sweep)
    shutil.copytree(run_dir, compare / "tiny-s0")
    expected = f"{compare} is a comparison's folder, not a run's: name its run folders (e.g. {compare / 'tiny-s0'}); `chillfl report {compare}` shows them all"
    for args, field in (
        (["analyze", "calibration", str(compare)], "run_dir"),
        (["analyze", "aggregation-accuracy", str(compare)], "run_dir"),
        (["analyze", "cka", str(run_dir), "--reference", str(compare), "-o", str(tmp_path / "x")], "--reference"),
    ):
        assert main(args) == 2
        assert capsys.readouterr().err.strip() == f"chillfl: error: {field}: {expected}"
    assert not (compare / "analysis").exists() and not (tmp_path / "x").exists()


def test_an_analysis_stopped_while_it_draws_leaves_no_result(run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C while the figure was drawn left ``calibration.json`` complete-looking beside no PNG (the command said only
    "interrupted"): the JSON, the result, is now written last and atomically."""
    import chillfl.analysis.calibration as calibration

    def stopped(result: object, path: Path) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(calibration, "plot_reliability", stopped)
    try:
        code = main(["analyze", "calibration", str(run_dir), "-o", str(tmp_path / "x")])
    except KeyboardInterrupt:
        code = 130
    assert code == 130
    assert not (tmp_path / "x").exists()  # no result, and no empty folder either (its first write makes it)
