"""The report's partition heat map, where the run's data cannot be rebuilt from its config.toml (here its ``partition.from``
file is gone): the page still renders, and says in the map's place why it is not drawn (the rebuild's one-line error);
before, the ConfigError was swallowed and the map left out without a word."""

from __future__ import annotations

import html
from pathlib import Path

from chillfl.report.html import render
from test_reportfix_report import records, write_run


def test_a_partition_that_cannot_be_rebuilt_says_why_in_its_place(tmp_path: Path) -> None:
    gone = tmp_path / "gone" / "partition.json"
    run = write_run(tmp_path / "run", records(1.0, 0.9), dataset={"name": "digits"}, model={"name": "mlp", "hidden": [8]},
                    partition={"name": "file", "from": str(gone)}, federation={"num_clients": 4, "clients_per_round": 2, "rounds": 2})
    page = html.unescape(render([run], models=False, partitions=True))
    section = page.split("<h2>Partitions</h2>")[1]
    assert "partition not drawn: its data could not be rebuilt from its config.toml: partition.from: cannot read" in section, section[:600]
    assert "FileNotFoundError" in section and "<img" not in section.split("render-check")[0]
