"""Compositions of orthogonal parts that must be refused in one line rather than run as something else."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import main

TINY = ["dataset.name=digits", "federation.num_clients=4", "federation.rounds=1", "eval.client_split_size=20"]


@pytest.mark.parametrize("algorithm", ['algorithm.name=fedbn', 'algorithm={name = "pa3fed", base = "fedbn"}'], ids=["fedbn", "pa3fed-over-fedbn"])
def test_fedbn_on_a_model_without_batch_norm_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], algorithm: str) -> None:
    # FedBN keeps the batch-norm entries local; with none it silently ran as FedAvg.
    config = tmp_path / "exp.toml"
    config.write_text(f'out_dir = "{tmp_path / "out"}"\n')
    assert main(["run", str(config), "-q", "--dry-run", *TINY, "model.name=mlp", algorithm]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("chillfl: error: model.name:") and "batch-norm layers" in err
    assert not (tmp_path / "out").exists()
    assert main(["run", str(config), "-q", "--dry-run", *TINY, "model.name=flexchill_cnn", "model.batch_norm=true", algorithm]) == 0


SOFT_LABELS = ["distillation.method=dsfl", "distillation.public_size=100", "distillation.subset_size=20"]


@pytest.mark.parametrize(
    ("protocol", "refused"),
    [(SOFT_LABELS, True), (["prototypes.method=fedproto"], True), (["prototypes.method=fedhkd", "prototypes.share_model=false"], True),
     (["prototypes.method=fedhkd", "prototypes.share_model=true"], False)],
    ids=["dsfl", "fedproto", "fedhkd-no-model", "fedhkd-shares-model"],
)
def test_an_algorithm_option_no_aggregator_reads_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], protocol: list[str], refused: bool) -> None:
    # Where no model is averaged, algorithm.weighting = "uniform" was recorded in config.toml and silently ignored.
    config = tmp_path / "exp.toml"
    config.write_text(f'out_dir = "{tmp_path / "out"}"\n')
    base = ["run", str(config), "-q", "--dry-run", *TINY, "model.name=mlp", *protocol]
    assert main([*base, "algorithm.weighting=uniform"]) == (2 if refused else 0)
    err = capsys.readouterr().err.strip()
    assert not refused or (len(err.splitlines()) == 1 and err.startswith("chillfl: error: algorithm.weighting:") and "ignored" in err)
    assert main([*base, "algorithm.weighting=samples"]) == 0  # the default, as every resolved config.toml writes it
    assert not (tmp_path / "out").exists()
