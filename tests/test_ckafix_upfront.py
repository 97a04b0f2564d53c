"""``chillfl analyze cka`` checks ``--layers`` and ``--reference`` against every run before the first is computed, and
names the run: over a CNN run and an MLP run, ``--layers fc1`` computed the CNN run (``[1/2]``) and then said
``--layers: unknown module(s) ['fc1'] ...`` without saying which run lacked it; ``--reference`` of another
architecture likewise. A personal-model run among the RUN_DIRs is refused up front too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from chillfl.analysis import cka
from chillfl.cli import main
from chillfl.config import load_config

TINY = ["dataset.name=digits", "federation.num_clients=2", "federation.clients_per_round=2", "federation.rounds=1", "client.epochs=1"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Three finished runs, each named ``q`` in its own folder: a CNN's, an MLP's and local_only's (a personal-model method)."""
    root = tmp_path_factory.mktemp("ckafix")
    out: dict[str, Path] = {}
    for key, extra in (("cnn", []), ("mlp", ["model.name=mlp"]), ("local", ["algorithm.name=local_only"])):
        (root / key).mkdir()
        config = root / key / "exp.toml"
        config.write_text(f'name = "q"\nout_dir = "{root / key}"\n')
        assert main(["run", str(config), "-q", *TINY, *extra]) == 0
        out[key] = root / key / "q"
    return out


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """The one stderr line of a refused command: no ``[k/N]`` progress line came before it (no run was computed)."""
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_a_layer_the_second_run_lacks_is_refused_before_the_first_is_computed(runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = _refused(capsys, ["analyze", "cka", str(runs["cnn"]), str(runs["mlp"]), "--layers", "fc1,features.0", "-o", str(tmp_path / "o")])
    assert line == (f"chillfl: error: --layers: {runs['mlp']}: unknown module(s) ['fc1', 'features.0']; "
                    "choose from ['hidden', 'hidden.0', 'head'] or 'representation'")
    line = _refused(capsys, ["analyze", "cka", str(runs["mlp"]), str(runs["cnn"]), "--layers", "hidden", "-o", str(tmp_path / "o")])
    assert line.startswith(f"chillfl: error: --layers: {runs['cnn']}: unknown module(s) ['hidden']; choose from ['features', "), line
    assert not (tmp_path / "o").exists()


def test_a_reference_of_another_architecture_is_refused_before_the_first_run_is_computed(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    line = _refused(capsys, ["analyze", "cka", str(runs["cnn"]), str(runs["mlp"]), "--reference", str(runs["cnn"]), "-o", str(tmp_path / "o")])
    assert line == f"chillfl: error: --reference: the reference model's architecture differs from {runs['mlp']}'s (first mismatch: 'head.bias')"
    assert not (tmp_path / "o").exists()


def test_a_personal_model_run_is_refused_before_the_first_run_is_computed(runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = _refused(capsys, ["analyze", "cka", str(runs["cnn"]), str(runs["local"]), "-o", str(tmp_path / "o")])
    assert line.startswith(f"chillfl: error: run_dir: {runs['local']} is a run of local_only, "), line


def test_nothing_is_computed_before_the_checks(runs: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """The analysis refuses before it rebuilds any run (the data, the experiment): nothing was spent on the first."""
    def built(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a run was rebuilt before every run was checked")

    monkeypatch.setattr(cka, "build_run", built)
    with pytest.raises(cka.ConfigError, match=f"^--layers: {runs['mlp']}: unknown module"):
        cka.analyze([str(runs["cnn"]), str(runs["mlp"])], None, layers=["fc1"])


def test_layers_every_run_has_pass(runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The up-front check refuses nothing the runs have: ``representation`` over a CNN and an MLP run, against the CNN."""
    assert main(["analyze", "cka", str(runs["cnn"]), str(runs["mlp"]), "--layers", "representation", "-o", str(tmp_path / "o"), "-q"]) == 0
    assert (tmp_path / "o" / "cka.json").is_file()


def test_a_dataset_is_read_once_for_the_runs_on_it(runs: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """The up-front check rebuilds each run's model on its data's shape: read once for the runs that share a ``[dataset]``."""
    read: list[str] = []
    real = cka.load_dataset
    monkeypatch.setattr(cka, "load_dataset", lambda name, *a, **k: read.append(name) or real(name, *a, **k))
    cka.check_models([str(runs["cnn"]), str(runs["mlp"]), str(runs["cnn"])], None, ["representation"])
    assert read == ["digits"]
    inputs: dict[str, tuple[tuple[int, ...], int]] = {}
    for key, names in (("cnn", {"fc1", "fc2", "features.0"}), ("mlp", {"hidden", "hidden.0", "head"})):
        model = cka.model_template(load_config(runs[key] / "config.toml"), inputs)
        assert names <= set(dict(model.named_modules())), key
        saved = cka.load_model_state(runs[key])
        assert {k: tuple(v.shape) for k, v in model.state_dict().items()} == {k: tuple(v.shape) for k, v in saved.items()}
    assert list(inputs.values()) == [((1, 8, 8), 10)]
