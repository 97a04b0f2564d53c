"""``chillfl status LINK`` of a link to a run folder (``latest -> results/fedavg-3``, as a job script keeps): the line
names the run (its folder's name, as ``status`` of the folder itself does) and the head says which link led there.
It named the link (``latest``), a name no run has, which ``chillfl resume`` and the comparison tables never show."""

from __future__ import annotations

from pathlib import Path

import chillfl
from chillfl.status import status_table
from test_stopround_figures import CONFIG


def test_status_of_a_link_to_a_run_names_the_run_and_the_link(tmp_path: Path) -> None:
    run = chillfl.run(config={**CONFIG, "federation": {"num_clients": 4, "rounds": 1}, "name": "fedavg", "out_dir": str(tmp_path / "results")}, progress=False)
    assert run.folder is not None and run.folder.name == "fedavg"
    link = tmp_path / "latest"
    link.symlink_to(run.folder, target_is_directory=True)
    direct, linked = status_table(run.folder).splitlines(), status_table(link).splitlines()
    assert linked[0] == f"{link} (a link to {run.folder}): one run"
    assert linked[1:] == direct[1:]  # the same line: the run's name, its state
    assert linked[3].startswith("| fedavg | finished |"), linked[3]

