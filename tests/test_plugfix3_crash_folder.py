"""A run whose plugin code raises before its first checkpoint (an aggregator in round 1, in the driver; a client half under
``executor = "processes"``, a ClientCodeError) leaves no run folder: before, an empty ``NAME.partial`` that
``chillfl resume`` refused stayed, and the next run of the config was written as ``NAME-2``. A folder with a round in it
stays."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

import chillfl
from chillfl.executors.processes import ClientCodeError
from plugin_modules import plugin_module

MODULE = '''
from dataclasses import dataclass
from chillfl.extend import FedAvg, Stateless


class BadAgg(FedAvg):
    def aggregate(self, global_params, results, round, weights=None):
        if round == 0:
            raise KeyError("boom")
        return super().aggregate(global_params, results, round, weights)


class LateBadAgg(FedAvg):
    def aggregate(self, global_params, results, round, weights=None):
        if round == 1:
            raise KeyError("late boom")
        return super().aggregate(global_params, results, round, weights)


@dataclass(frozen=True)
class BadHalf(Stateless):
    def finish(self, model, state, trained):
        raise RuntimeError("half boom")


class BadClient(FedAvg):
    def client_half(self):
        return BadHalf()
'''

BASE: dict[str, Any] = {"seed": 0, "dataset": {"name": "digits"}, "model": {"name": "mlp", "hidden": [8]}, "device": "cpu", "executor": "sequential",
                        "partition": {"name": "iid"}, "federation": {"num_clients": 3, "clients_per_round": 3, "rounds": 2},
                        "client": {"batch_size": 64, "lr": 0.1}, "eval": {"clients": "none"}, "name": "x"}


@pytest.fixture()
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with plugin_module(tmp_path, monkeypatch, "plugfix3_crash", MODULE):
        yield tmp_path


def folders(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir()) if out.is_dir() else []


@pytest.mark.parametrize("name,executor,error", [("BadAgg", "sequential", KeyError), ("BadClient", "processes", ClientCodeError)])
def test_a_plugin_raising_before_the_first_checkpoint_leaves_no_folder(plugin: Path, name: str, executor: str, error: type[BaseException]) -> None:
    out = plugin / "results"
    config = {**BASE, "out_dir": str(out), "executor": executor, "algorithm": {"name": f"plugfix3_crash:{name}"}}
    with pytest.raises(error):
        chillfl.run(config=config, progress=False)
    assert folders(out) == []  # before: ['x.partial'], holding config.toml, partition.json and an empty metrics.jsonl
    done = chillfl.run(config={**config, "executor": "sequential", "algorithm": {"name": "fedavg"}}, progress=False)
    assert done.folder is not None and done.folder.name == "x"  # before: x-2


def test_a_folder_with_a_round_in_it_stays(plugin: Path) -> None:
    out = plugin / "results"
    with pytest.raises(KeyError):
        chillfl.run(config={**BASE, "out_dir": str(out), "algorithm": {"name": "plugfix3_crash:LateBadAgg"}}, progress=False)
    assert folders(out) == ["x.partial"]
    assert (out / "x.partial" / "metrics.jsonl").read_text().count("\n") == 1  # round 1's line
