"""A dry run without the dataset's files checks the model against the dataset's known shape; resnet18's ``norm_groups``
is noted, not refused, where no group norm reads it; FedBN names a projection-headed model's own batch-norm option."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from chillfl.cli import main

SRC = str(Path(__file__).resolve().parents[1] / "src")


def _config(tmp_path: Path, dataset: str, model: str, extra: str = "") -> Path:
    path = tmp_path / "c.toml"
    path.write_text(f'data_dir = "{tmp_path / "nodata"}"\nout_dir = "{tmp_path / "out"}"\n[dataset]\nname = "{dataset}"\n'
                    f'[model]\nname = "{model}"\n{extra}[federation]\nnum_clients = 4\nrounds = 1\n', encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("dataset", "model", "overrides", "line"),
    [
        ("cifar10", "har_cnn1d", [], "model.name: har_cnn1d needs inputs of shape (C, L) or (L,), dataset gives (3, 32, 32)"),
        ("cifar10", "vit", ["model.patch=5"], "model.patch: must divide the 32x32 image"),
        ("femnist", "har_cnn1d", [], "model.name: har_cnn1d needs inputs of shape (C, L) or (L,), dataset gives (1, 28, 28)"),  # its spec's numbers
    ],
)
def test_a_model_that_does_not_fit_a_known_dataset_is_refused_without_its_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], dataset: str, model: str, overrides: list[str], line: str,
) -> None:
    """The dataset's files are absent, its inputs are known: the mismatch is one line, exit 2 (was exit 0)."""
    assert main(["run", str(_config(tmp_path, dataset, model)), "--dry-run", *overrides]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"chillfl: error: {line}"), err
    assert not (tmp_path / "out").exists() and not (tmp_path / "nodata").exists()


def test_a_group_architecture_is_checked_on_its_own_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each ``[[model.groups]]`` architecture too, named by its own section."""
    extra = '[[model.groups]]\nclients = "0-1"\nname = "har_cnn1d"\n[prototypes]\nmethod = "fedproto"\n'
    assert main(["run", str(_config(tmp_path, "cifar10", "mcmahan_cnn", extra)), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "model.groups[0].name: har_cnn1d needs inputs" in err, err


def test_a_fitting_model_says_what_was_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(_config(tmp_path, "mnist", "resnet20")), "--dry-run", "model.projection_dim=8"]) == 0
    err = capsys.readouterr().err
    assert "the files of dataset 'mnist' are not in" in err
    assert "names and options checked, and the model on the dataset's known inputs (1, 28, 28) and 10 classes" in err


def test_a_dataset_of_unknown_size_keeps_the_note(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """emnist's numbers depend on its files: nothing to build the model on, and the note says so."""
    assert main(["run", str(_config(tmp_path, "emnist", "har_cnn1d")), "--dry-run"]) == 0
    assert "names and options checked, not the shapes that need the data" in capsys.readouterr().err


def test_the_check_imports_no_lazy_torch_internals(tmp_path: Path) -> None:
    """The check builds on the meta device and runs no meta forward (that imports torch._dynamo and sympy, seconds)."""
    config = _config(tmp_path, "cifar10", "resnet18", "projection_dim = 16\n")
    code = f"""
        import sys
        import torch
        from chillfl.config import load_config
        from chillfl.experiment import check_config
        had_sympy = "sympy" in sys.modules
        assert check_config(load_config({str(config)!r}, {{}})) is False
        assert "torch._dynamo" not in sys.modules
        assert had_sympy or "sympy" not in sys.modules
        print("ok")
        """
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


def test_norm_groups_is_noted_not_refused_without_group_norm(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``norm_groups`` is read by group norm only: with batch norm a value that would not divide 64 is unread, so it is
    noted (as the project's other unread options are), not refused; with group norm it is still refused."""
    config = _config(tmp_path, "digits", "resnet18")
    assert main(["run", str(config), "--dry-run", "model.norm_groups=3"]) == 0
    assert 'model.norm_groups = 3 is not read with model.norm = "batch"' in capsys.readouterr().err
    assert main(["run", str(config), "--dry-run", "model.norm_groups=3", "model.norm=group"]) == 2
    assert "model.norm_groups: must divide 64" in capsys.readouterr().err


def test_fedbn_names_the_option_of_a_projection_headed_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """MOON's projection head replaces the model's head in place, so the model keeps its class and its batch-norm option:
    FedBN's refusal names that option, not its general "choose a model with batch norm"."""
    config = _config(tmp_path, "digits", "resnet18", '[algorithm]\nname = "fedbn"\n')
    assert main(["run", str(config), "--dry-run", "model.norm=group", "model.projection_dim=8"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith('chillfl: error: model.norm: FedBN keeps each client\'s batch-norm layers local') and 'set model.norm = "batch"' in err
    assert main(["run", str(config), "--dry-run", "model.name=flexchill_cnn", "model.projection_dim=8"]) == 2
    assert "chillfl: error: model.batch_norm: " in capsys.readouterr().err
