"""``chillfl resume`` of a run made before 2026-12-06 with ``distillation.public_dataset`` set warned that
``public_dataset_options.train_split`` and the ``augment`` options were "added since this run started": they were not.
config.toml then wrote that table as typed; the public dataset took those defaults then as now (the resume is bitwise).
Since, the table is written complete, its ``augment`` sub-table always in it: a table without one is such an older
table, whose missing options are not warned about; an option missing from a complete table still is (rev105c 3)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import pytest

from chillfl import runner
from chillfl.cli import main
from chillfl.config import load_config
from chillfl.runner import run_experiment
from chillfl.storage.results import ResultWriter
from test_resume_added_options import TINY, Crash, CrashIn2

PUBLIC: dict[str, Any] = {
    **TINY, "dataset.name": "mnist1d", "dataset.num_samples": 400, "distillation.method": "scarlet", "distillation.public_size": 30,
    "distillation.subset_size": 10, "distillation.public_dataset": "mnist1d", "distillation.public_dataset_options": {"num_samples": 200},
}


def _stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edit: Any) -> Path:
    """A public-dataset run stopped after round 1, its config.toml's ``[distillation]`` as ``edit`` leaves it."""
    monkeypatch.setattr(runner, "_plots", lambda *args: None)
    write = ResultWriter.write_config

    def older(self: ResultWriter, config: Mapping[str, Any], header: str = "") -> None:
        data = {k: dict(v) if isinstance(v, Mapping) else v for k, v in config.items()}
        edit(data)
        write(self, data, header)

    with monkeypatch.context() as mp:
        mp.setattr(ResultWriter, "write_config", older)
        with pytest.raises(Crash):
            run_experiment(load_config(None, {**PUBLIC, "out_dir": str(tmp_path)}), progress=False, callbacks=[CrashIn2()])
    return tmp_path / "run.partial"


def _resume_warnings(partial: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    capsys.readouterr()
    assert main(["resume", str(partial), "-q"]) == 0
    return capsys.readouterr().err.strip().splitlines()


def test_an_older_public_dataset_table_written_as_typed_is_not_warned_about(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                             capsys: pytest.CaptureFixture[str]) -> None:
    def as_typed(data: dict[str, Any]) -> None:
        data["distillation"] = {**data["distillation"], "public_dataset_options": {"num_samples": 200}}

    assert _resume_warnings(_stopped(tmp_path, monkeypatch, as_typed), capsys) == []


def test_another_added_option_beside_it_is_still_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def as_typed_and_older(data: dict[str, Any]) -> None:
        data["distillation"] = {**data["distillation"], "public_dataset_options": {"num_samples": 200}}
        data["attack"] = {k: v for k, v in data["attack"].items() if k != "local_dp"}

    said = _resume_warnings(_stopped(tmp_path, monkeypatch, as_typed_and_older), capsys)
    assert said == ['chillfl: resume: options added since this run started take their defaults: attack.local_dp = "comply"'], said


def test_an_option_missing_from_a_complete_public_table_is_still_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """A table written complete (its augment sub-table in it) that lacks an option: one added since, as anywhere else."""
    def lacks_train_split(data: dict[str, Any]) -> None:
        table = {k: v for k, v in data["distillation"]["public_dataset_options"].items() if k != "train_split"}
        assert "augment" in table
        data["distillation"] = {**data["distillation"], "public_dataset_options": table}

    said = _resume_warnings(_stopped(tmp_path, monkeypatch, lacks_train_split), capsys)
    assert said == ["chillfl: resume: options added since this run started take their defaults: distillation.public_dataset_options.train_split = 0.8"], said


def test_an_older_table_with_part_of_augment_typed_is_still_as_typed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """Before 2026-12-06 a user could type part of ``augment`` in the table: that alone did not make it a complete one
    (rev106b 2: seed, train_split and three augment keys were named)."""
    def typed_with_augment(data: dict[str, Any]) -> None:
        data["distillation"] = {**data["distillation"], "public_dataset_options": {"num_samples": 200, "augment": {"normalize": "dataset"}}}

    assert _resume_warnings(_stopped(tmp_path, monkeypatch, typed_with_augment), capsys) == []


def test_a_partitioner_classs_own_defaults_are_no_news() -> None:
    """A flwr run's config.toml held only the options set before 2026-12-06; the class's defaults written since
    (min_partition_size, self_balancing, shuffle) are the ones the run took from the class then (rev106b 1)."""
    written = {"partition": {"name": "flwr", "partitioner": "DirichletPartitioner", "options": {"alpha": 0.5}}}
    assert runner._no_news(written, "partition.options.min_partition_size", 10)  # the class's default (test_clifix_no_news: the rest)
    assert not runner._no_news(written, "attack.local_dp", "comply")  # anything else is still named
