"""``[ray]`` options set while ``executor`` is not ``"ray"``: one note line, since only the Ray executor reads them.

Before, ``ray.address = "HOST:6379"`` without ``executor = "ray"`` trained here, sequentially, with no word (and
``--dry-run`` said nothing either), while ``config.toml`` kept the address. A note, not a refusal: a stopped Ray run
moved to another executor (docs/reproducibility.md) keeps its ``[ray]`` table.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from chillfl.config import config_from_dict
from chillfl.experiment import check_config, run_notes
from chillfl.runner import run_experiment

TINY: dict[str, Any] = {
    "seed": 3, "threads": 1, "device": "cpu", "dataset": {"name": "digits"}, "partition": {"name": "iid"},
    "model": {"name": "mlp", "hidden": [16]}, "federation": {"num_clients": 4, "clients_per_round": 2, "rounds": 1},
    "eval": {"clients": "none"}, "checkpoint": {"every": 0},
}


def _ray_notes(**parts: Any) -> list[str]:
    return [note for note in run_notes(config_from_dict({**TINY, **parts}), None) if "ray." in note]


def test_ray_options_under_another_executor_are_noted_naming_each() -> None:
    (note,) = _ray_notes(ray={"address": "10.9.9.9:6379", "workers": 8})
    assert note == ("note: ray.address = '10.9.9.9:6379', ray.workers = 8 are ignored: executor = 'sequential' runs the client updates "
                    'without Ray; executor = "ray" runs them on it (docs/ray.md)')
    (one,) = _ray_notes(executor="processes", ray={"num_cpus": 2.0})
    assert one.startswith("note: ray.num_cpus = 2.0 is ignored: executor = 'processes'")


@pytest.mark.parametrize("parts", [{"executor": "ray", "ray": {"address": "10.9.9.9:6379"}}, {}, {"ray": {"workers": 0}}],
                         ids=["ray", "no-ray-table", "defaults"])
def test_no_note_where_ray_reads_them_or_none_is_set(parts: dict[str, Any]) -> None:
    assert _ray_notes(**parts) == []


def test_a_run_and_its_dry_run_say_it(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = config_from_dict({**TINY, "out_dir": str(tmp_path), "name": "local", "ray": {"address": "10.9.9.9:6379"}})
    for check in (check_config, lambda c: run_experiment(c, progress=False)):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="chillfl"):
            check(config)
        said = [r.getMessage() for r in caplog.records if "ray.address" in r.getMessage()]
        assert len(said) == 1 and said[0].startswith("note: ray.address = '10.9.9.9:6379' is ignored")
    assert (tmp_path / "local" / "summary.json").is_file()  # a note: the run ran
