"""The public dataset's table (``[distillation] public_dataset_options``): written complete with its defaults, as
``[dataset]`` is, and a bad key in it named by its own field (pubfix, findings 2 and 3)."""

from __future__ import annotations

from pathlib import Path

import pytest

import chillfl
from chillfl.cli import main
from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.runner import run_experiment

pytestmark = pytest.mark.usefixtures("one_thread")

SYNTHETIC_PUBLIC = {
    "seed": 0,
    "dataset": {"name": "mnist1d", "num_samples": 400},
    "model": {"name": "mlp", "hidden": [8]},
    "federation": {"num_clients": 2, "rounds": 1},
    "client": {"epochs": 1, "batch_size": 32},
    "distillation": {"method": "scarlet", "public_size": 30, "subset_size": 10, "public_dataset": "synthetic",
                     "public_dataset_options": {"dim": 40, "num_clients": 3, "min_samples": 20}},
}


def test_the_public_datasets_defaults_are_written() -> None:
    """``public_dataset_options`` was written as typed: synthetic's ``alpha`` / ``beta`` / ``seed`` and the ``augment``
    sub-table, which decide the pool's rows, were not in config.toml. Resolved as ``[dataset]`` is, less its name."""
    c = chillfl.make_config(SYNTHETIC_PUBLIC)
    written = c.distillation["public_dataset_options"]
    assert written["dim"] == 40 and written["num_clients"] == 3
    assert {"alpha", "beta", "seed", "test_fraction", "augment"} <= set(written), written
    assert set(written["augment"]) >= {"flip", "crop_padding", "normalize"}
    assert "name" not in written
    assert written == chillfl.make_config(c).distillation["public_dataset_options"]  # idempotent


def test_rerunning_the_written_config_is_the_same_run(tmp_path: Path) -> None:
    """The file a run writes, with the public dataset's defaults now in it, reruns to the very same records."""
    public = {"public_dataset": "mnist1d", "public_dataset_options": {"seed": 7, "num_samples": 200}}
    config = {**SYNTHETIC_PUBLIC, "out_dir": str(tmp_path / "a"), "name": "p", "distillation": {**SYNTHETIC_PUBLIC["distillation"], **public}}
    first = run_experiment(chillfl.make_config(config), progress=False)
    written = next((tmp_path / "a").rglob("config.toml"))
    assert "train_split" in written.read_text(encoding="utf-8")  # mnist1d's default, not typed above
    again = run_experiment(load_config(written, {"out_dir": str(tmp_path / "b")}), write=False, progress=False)
    assert again.records == first.records


@pytest.mark.parametrize(("options", "field"), [
    ({"num_samples": 500, "tst": 1}, "distillation.public_dataset_options.tst"),
    ({"num_samples": 500, "augment": {"flipp": True}}, "distillation.public_dataset_options.augment.flipp"),
    ({"name": "digits"}, "distillation.public_dataset_options.name"),
])
def test_an_unknown_public_dataset_option_is_named(options: dict, field: str) -> None:
    """The refusal named only the table (``distillation.public_dataset_options: unknown option``), which reads as if
    the valid keys beside the bad one were wrong."""
    with pytest.raises(ConfigError) as info:
        chillfl.make_config({"distillation": {"method": "scarlet", "public_size": 60, "subset_size": 20,
                                              "public_dataset": "mnist1d", "public_dataset_options": options}})
    assert info.value.field == field


def test_the_cli_names_the_unknown_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "u.toml"
    path.write_text('[distillation]\nmethod = "scarlet"\npublic_size = 60\nsubset_size = 20\npublic_dataset = "mnist1d"\n'
                    "public_dataset_options = {num_samples = 500, tst = 1}\n", encoding="utf-8")
    assert main(["run", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("chillfl: error: distillation.public_dataset_options.tst: unknown option"), err
