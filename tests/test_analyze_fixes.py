"""`chillfl analyze` on tiny runs: grad-norms' random subset, personalised methods refused, what a missing or diverged
folder is called, short soft-label errors, --bins above the samples, and the small flag and JSON fixes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from chillfl.capabilities import Capabilities
from chillfl.cli import main
from chillfl.config import load_config
from chillfl.errors import ConfigError

TINY = ["dataset.name=digits", "federation.num_clients=4", "federation.rounds=2", "federation.clients_per_round=2", "model.name=mlp",
        "eval.client_split_size=20", "partition.name=dirichlet", "partition.alpha=0.1"]


def _run(root: Path, name: str, *overrides: str) -> Path:
    config = root / f"{name}.toml"
    config.write_text(f'name = "{name}"\nout_dir = "{root / "out"}"\n')
    main(["run", str(config), "-q", *TINY, *overrides])
    return root / "out" / name


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = _run(tmp_path_factory.mktemp("fixes"), "tiny")
    assert (path / "summary.json").is_file()
    return path


def _one_line(capsys: pytest.CaptureFixture[str], field: str) -> str:
    err = capsys.readouterr().err
    assert err.startswith(f"chillfl: error: {field}: ") and len(err.strip().splitlines()) == 1, err
    return err.strip()


def test_grad_norms_caps_with_a_seeded_random_subset(run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--samples N`` took the first N rows of the clients' data in client order: under label skew, the first clients'
    classes only. It is now a uniform random subset seeded from the run's seed, recorded in the JSON."""
    import chillfl.analysis.grad_norms as grad_norms

    seen: list[torch.Tensor] = []
    real = grad_norms.input_gradient_norms

    def spy(model: torch.nn.Module, state: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor, *a: object, **k: object) -> tuple[np.ndarray, np.ndarray]:
        seen.append(y.clone())
        return real(model, state, x, y, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(grad_norms, "input_gradient_norms", spy)
    result, _ = grad_norms.analyze([str(run_dir)], samples=60)
    exp = grad_norms.build_run(run_dir)
    everything = torch.cat([exp.data.client_train(c)[1] for c in range(exp.data.num_clients)])
    first = set(everything[:60].tolist())
    assert len(set(seen[0].tolist())) > len(first)  # the first 60 rows are one or two clients' few classes
    run = result["runs"]["tiny"]
    assert (run["samples"], run["available"], run["random_subset"]) == (60, len(everything), True)
    again, _ = grad_norms.analyze([str(run_dir)], samples=60)
    assert torch.equal(seen[0], seen[1]) and again == result  # seeded: the same command, the same numbers
    whole, _ = grad_norms.analyze([str(run_dir)], samples=10**6)
    assert torch.equal(seen[2], everything) and whole["runs"]["tiny"]["random_subset"] is False


def test_methods_with_personal_models_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """local_only's global model is never trained: aggregation-accuracy printed "-41.60 points" (the "after" being that
    model) and cka 1.0000 at every layer. A method declaring ``personal_model`` is refused, by its capability."""
    run = _run(tmp_path, "lo", "federation.rounds=1", "algorithm.name=local_only")
    for analysis in ("aggregation-accuracy", "aggregation-entropy", "cka"):
        assert main(["analyze", analysis, str(run), "-o", str(tmp_path / "x")]) == 2
        line = _one_line(capsys, "run_dir")
        assert "local_only" in line and "personal_model" in line
    assert not (tmp_path / "x").exists()
    tiny = _run(tmp_path, "fa", "federation.rounds=1")
    assert main(["analyze", "cka", str(tiny), "--reference", str(run), "-o", str(tmp_path / "x")]) == 2  # its global model is no reference
    line = _one_line(capsys, "--reference")
    assert "local_only" in line and "personal_model" in line
    assert not (tmp_path / "x").exists()


def test_the_refusal_asks_the_capability(tmp_path: Path) -> None:
    """FedRep (its head stays home) declares personal_model through its spec's capabilities and is refused; Ditto declares
    a personal model too, but also trains_global_model (its clients upload FedAvg's w), so it is let in; FedAvg declares neither."""
    from chillfl.analysis.replay import method_capabilities, refuse_personal_models

    for name, personal, refused in (("fedrep", True, True), ("ditto", True, False), ("fedavg", False, False)):
        (tmp_path / "c.toml").write_text(f'[algorithm]\nname = "{name}"\n')
        config = load_config(tmp_path / "c.toml")
        assert method_capabilities(config).personal_model is personal
        if refused:
            with pytest.raises(ConfigError, match="fedrep, whose clients each keep a model of their own"):
                refuse_personal_models(config, "r")
        else:
            refuse_personal_models(config, "r")
    wrapped = Capabilities().wrapping(Capabilities(personal_model=True, trains_global_model=True))  # a wrapper runs its base's clients
    assert wrapped.personal_model and wrapped.trains_global_model


@pytest.mark.parametrize("method", ["ditto", "apfl"])
def test_a_method_that_trains_the_global_model_is_analysed_as_fedavg(method: str, tmp_path: Path) -> None:
    """Ditto's and APFL's clients train and upload w as FedAvg's do (v_k stays home), so the analyses of the global model
    and its aggregate read the run (both were refused with every personal-model method), and read FedAvg's numbers:
    Ditto's bit for bit (w's training is FedAvg's), APFL's to float rounding (its one training steps w within the loss
    over (w, v, alpha), whose sums round otherwise)."""
    ours, fedavg = _run(tmp_path, method, f"algorithm.name={method}"), _run(tmp_path, "fedavg")
    for analysis in ("aggregation-accuracy", "aggregation-entropy", "cka"):
        results = []
        for run in (ours, fedavg):
            out = tmp_path / f"{run.name}-{analysis}"
            assert main(["analyze", analysis, str(run), "-o", str(out)]) == 0
            results.append(json.loads(next(out.glob("*.json")).read_text().replace(run.name, "RUN")))
        if method == "ditto":
            assert results[0] == results[1], analysis
        elif analysis != "aggregation-accuracy":  # a count of right answers may flip on a rounding
            assert _numbers(results[0]) == pytest.approx(_numbers(results[1]), rel=1e-6, abs=1e-9), analysis


def _numbers(tree: object) -> list[float]:
    """Every number in a JSON tree, in order."""
    if isinstance(tree, dict):
        return [x for v in tree.values() for x in _numbers(v)]
    if isinstance(tree, list):
        return [x for v in tree for x in _numbers(v)]
    return [float(tree)] if isinstance(tree, (int, float)) and not isinstance(tree, bool) else []


def test_a_missing_folder_and_a_diverged_run_say_so(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Both were "has no model.safetensors (the run is not finished: its model is written when it ends)"."""
    missing = tmp_path / "bad" / "nonexist"
    assert main(["analyze", "cka", str(run_dir), "--reference", str(missing), "-o", str(tmp_path / "x")]) == 2
    assert _one_line(capsys, "--reference") == f"chillfl: error: --reference: {missing} does not exist"
    assert main(["analyze", "calibration", str(missing), "-o", str(tmp_path / "x")]) == 2
    assert _one_line(capsys, "run_dir") == f"chillfl: error: run_dir: {missing} does not exist"
    _run(tmp_path, "div", "client.lr=1e6")
    failed = tmp_path / "out" / "div.failed"
    assert (failed / "failure.json").is_file()
    capsys.readouterr()
    for analysis in ("calibration", "cka", "aggregation-accuracy"):
        assert main(["analyze", analysis, str(failed), "-o", str(tmp_path / "x")]) == 2
        assert _one_line(capsys, "run_dir") == f"chillfl: error: run_dir: {failed} diverged (at round 1; see its failure.json): it has no final model"
    assert not (tmp_path / "x").exists()


def test_an_unreadable_soft_label_file_is_one_short_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A TOML file given as soft-labels printed torch's 704-character weights-only message, with literal \\n in it."""
    (tmp_path / "base.toml").write_text('name = "x"\n')
    assert main(["analyze", "soft-label-entropy", "--soft-labels", str(tmp_path / "base.toml"), "--out-dir", str(tmp_path / "x")]) == 2
    line = _one_line(capsys, "--soft-labels")
    assert f"{tmp_path / 'base.toml'} is not a soft-label file (.pt tensor / .npy array): " in line
    assert len(line) < 200 + len(str(tmp_path)) and "\\n" not in line and "http" not in line


def test_more_bins_than_samples_is_refused(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """1000 equal-mass bins on 359 samples gave ECE 0.47 against 0.28 at 15 bins, without a word."""
    n = len(load_test_labels(run_dir))
    for binning in ("mass", "width"):
        assert main(["analyze", "calibration", str(run_dir), "--binning", binning, "--bins", str(n + 1), "-o", str(tmp_path / "x")]) == 2
        assert f"use at most {n}" in _one_line(capsys, "--bins")
    assert not (tmp_path / "x").exists()
    assert main(["analyze", "calibration", str(run_dir), "--binning", "mass", "--bins", str(n), "-o", str(tmp_path / "x")]) == 0


def load_test_labels(run_dir: Path) -> torch.Tensor:
    from chillfl.analysis.replay import build_evaluation

    return build_evaluation(run_dir).data.test()[1]


def test_small_flag_fixes(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--temperatures -1,1`` was argparse's "expected one argument"; cka's ``--start`` without ``--clients`` and
    ``--layers ''`` were ignored; scarlet-deficit said "got None" of a config without [distillation]."""
    (tmp_path / "base.toml").write_text('[dataset]\nname = "digits"\n')
    assert main(["analyze", "temperature-sweep", str(tmp_path / "base.toml"), "--temperatures", "-1,1"]) == 2
    assert "got -1.0" in _one_line(capsys, "--temperatures")  # the run's own T check (require_temperature)
    assert main(["analyze", "cka", str(run_dir), "--start", "initial", "-o", str(tmp_path / "x")]) == 2
    assert "--clients" in _one_line(capsys, "--start")
    assert main(["analyze", "cka", str(run_dir), "--layers", "", "-o", str(tmp_path / "x")]) == 2
    _one_line(capsys, "--layers")
    assert not (tmp_path / "x").exists()
    assert main(["analyze", "scarlet-deficit", "--config", str(tmp_path / "base.toml")]) == 2
    assert _one_line(capsys, "config").endswith("must be DS-FL's (the baseline), got a run with no [distillation] table")


def test_aggregation_jsons_name_the_start_alike(run_dir: Path, tmp_path: Path) -> None:
    """aggregation-entropy.json's "start" was the start model's entropy, aggregation-accuracy.json's the replay's start."""
    for which in ("accuracy", "entropy"):
        assert main(["analyze", f"aggregation-{which}", str(run_dir), "--start", "initial", "-o", str(tmp_path)]) == 0
        run = json.loads((tmp_path / f"aggregation-{which}.json").read_text())["runs"]["tiny"]
        assert run["start"] == "initial" and run["round"] == 1
    assert 0 <= run["start_entropy"] <= run["max_entropy"]


@pytest.mark.parametrize(("flag", "value"), [("--temps", "1e-5"), ("--temps", "nan"), ("--betas", "1e5"), ("--betas", "0")])
def test_era_bounds_are_checked_on_the_flags(flag: str, value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A T or beta past ERA's own bounds ([1e-4, 1e4]; (0, 1e4]) is refused on its flag before anything runs, not midway
    on era.temperature / enhanced_era.beta."""
    assert main(["analyze", "soft-label-entropy", flag, value, "--out-dir", str(tmp_path / "x")]) == 2
    assert _one_line(capsys, flag).startswith(f"chillfl: error: {flag}: must be in ")
    assert not (tmp_path / "x").exists()
