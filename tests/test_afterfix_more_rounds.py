"""docs/usage.md: a finished run cannot be resumed; a stopped one with ``rounds`` raised in its config.toml and resumed
with force gives the metrics of a run made with those rounds from the start."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import chillfl
from chillfl.errors import ConfigError

pytestmark = pytest.mark.usefixtures("one_thread")

CONFIG = {"dataset": {"name": "digits"}, "model": {"name": "mlp"}, "partition": {"name": "dirichlet", "alpha": 0.3},
          "federation": {"num_clients": 4, "clients_per_round": 4, "rounds": 3}, "checkpoint": {"every": 1}}
TIMES = ("wall_time_s", "round_time_s", "time")


def _records(folder: Path) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    return [{k: v for k, v in r.items() if k not in TIMES} for r in rows]


def test_a_stopped_run_resumed_with_more_rounds_is_the_longer_run(tmp_path: Path) -> None:
    def stop(record: dict[str, Any], run: Any) -> None:
        if record["round"] == 2:
            run.stop("enough for now")

    stopped = chillfl.run(config=CONFIG, name="short", out_dir=tmp_path, callbacks=[stop], progress=False)
    assert stopped.folder is not None
    config = stopped.folder / "config.toml"
    config.write_text(config.read_text(encoding="utf-8").replace("\nrounds = 3\n", "\nrounds = 5\n"), encoding="utf-8")
    with pytest.raises(ConfigError, match="federation.rounds: 3 -> 5"):
        chillfl.resume(stopped.folder, progress=False)
    chillfl.resume(stopped.folder, progress=False, force=True)
    longer = chillfl.run(config=CONFIG, name="long", out_dir=tmp_path, progress=False, **{"federation.rounds": 5})
    assert longer.folder is not None
    assert _records(stopped.folder) == _records(longer.folder) and len(_records(longer.folder)) == 5
    with pytest.raises(ConfigError, match="finished run .* nothing to resume"):
        chillfl.resume(longer.folder, progress=False)
