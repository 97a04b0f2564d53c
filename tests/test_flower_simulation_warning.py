"""``chillfl.flower.run_simulation`` calls ``flwr.simulation.run_simulation``, which flwr 1.42 logs as deprecated in favour
of ``flwr run`` (an app folder run by a SuperLink in other processes: no in-process replacement that hands back the
run's output). That one warning is filtered, while the simulation runs only; every other Flower log line still shows."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("flwr", reason="the Flower backend needs the [flower] extra (flwr)")

import flwr.simulation  # noqa: E402
from flwr.supercore.logger import warn_deprecated_feature  # noqa: E402

from chillfl.config import config_from_dict  # noqa: E402
from chillfl.executors.processes import WorkerError  # noqa: E402
from chillfl.flower import run_simulation  # noqa: E402

FLWR_TEXT = ("The `run_simulation` function is deprecated and will be removed in a future version of Flower. Please use `flwr run` in the CLI "
             "instead to run your simulation.")
"""The start of what flwr 1.42's ``run_simulation`` logs first (flwr/simulation/run_simulation.py)."""


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_only_the_run_simulation_deprecation_is_filtered_and_only_while_it_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def simulation(**kwargs: Any) -> None:  # what flwr's run_simulation logs, without starting Ray: no run output comes back
        warn_deprecated_feature(FLWR_TEXT)
        warn_deprecated_feature("Passing `something_else` is deprecated.")
        logging.getLogger("flwr").warning("another Flower warning")

    monkeypatch.setattr(flwr.simulation, "run_simulation", simulation)
    config = config_from_dict({"dataset": {"name": "digits"}, "model": {"name": "mlp"}, "federation": {"num_clients": 4, "rounds": 1},
                               "out_dir": str(tmp_path)})
    lines = Lines()
    flower = logging.getLogger("flwr")
    flower.addHandler(lines)
    try:
        with pytest.raises(WorkerError):
            run_simulation(config, num_supernodes=2)
        warn_deprecated_feature(FLWR_TEXT)  # after it: shown again (the filter was the simulation's only)
    finally:
        flower.removeHandler(lines)
    assert [line.split("\n")[0] for line in lines.lines] == [
        "DEPRECATED FEATURE: Passing `something_else` is deprecated.",
        "another Flower warning",
        f"DEPRECATED FEATURE: {FLWR_TEXT}",
    ]
    assert not flower.filters
