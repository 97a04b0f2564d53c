"""What the Flower ServerApp did otherwise than ``chillfl run`` (docs/flower.md): it wrote no ``[log] sinks`` (no
``metrics.csv``, no ``tensorboard/``) and checked no sink's package; under ``torch.set_default_dtype(torch.float64)``
FedGen failed in round 1 (its generator in float64 against float32 features); each note was said several times a run
(by ``run_simulation`` as it built the server, by the ServerApp's thread, and by every ClientApp); a run that failed left
a ``NAME.partial`` folder without a checkpoint, which ``chillfl resume`` could not resume.

``run_simulation`` runs here as written, with Flower's ``flwr.simulation.run_simulation`` replaced by one that calls the
ServerApp in its thread over the in-process grid of tests/test_flower_privacy_attacks.py (chillfl's real ClientApp on two
nodes), so no Ray starts.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Sequence

import pytest
import torch

pytest.importorskip("flwr", reason="the Flower backend needs the [flower] extra (flwr)")

import flwr.simulation  # noqa: E402
from flwr.app import Context, Message, RecordDict  # noqa: E402
from test_flower_privacy_attacks import BASE, NODES, InProcessGrid, server_identity  # noqa: E402,F401  (a fixture)

import chillfl.runner  # noqa: E402
from chillfl.config import config_from_dict  # noqa: E402
from chillfl.errors import MissingExtra  # noqa: E402
from chillfl.flower import run_simulation  # noqa: E402
from chillfl.runner import run_experiment  # noqa: E402

NOTE = "temperature.t_start = 0.5 is not read with temperature.init = true"


def _config(out: Path, **parts: Any) -> Any:
    return config_from_dict({**BASE, "out_dir": str(out), "name": "run", "federation": {**BASE["federation"], "rounds": 2}, **parts})


class SimulationGrid(InProcessGrid):
    """The in-process grid with the push/pull calls a simulation's ServerApp waits with (``FlowerExecutor._send_and_receive``
    under ``run_simulation``'s stop signals): the replies are made as the messages are pushed."""

    fails = False
    """Every client update fails (a lost SuperNode, a client's own error)."""

    def push_messages(self, messages: Sequence[Message]) -> list[str]:
        if self.fails and any(m.metadata.message_type == "train" for m in messages):
            raise RuntimeError("a node failed")
        self.pending = self.send_and_receive(messages)
        return [m.metadata.message_id for m in messages]

    def pull_messages(self, ids: Any) -> list[Message]:
        got, self.pending = self.pending, []
        return got


class FailingGrid(SimulationGrid):
    fails = True


@pytest.fixture
def in_process(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> list[type[SimulationGrid]]:
    """Flower's simulation as the ServerApp called in the simulation's thread over an in-process grid; the list's
    grid class is the one used (replace it to fail the nodes)."""
    request.getfixturevalue("server_identity")
    grid: list[type[SimulationGrid]] = [SimulationGrid]

    def simulation(server_app: Any, client_app: Any, num_supernodes: int, **kwargs: Any) -> None:
        server_app(grid[0](client_app, num_supernodes), Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config={}))

    monkeypatch.setattr(flwr.simulation, "run_simulation", simulation)
    return grid


def test_the_server_writes_the_log_sinks_chillfl_run_writes(tmp_path: Path, in_process: Any) -> None:
    sinks = {"log": {"sinks": ["csv", "tensorboard"]}}
    flower = Path(run_simulation(_config(tmp_path / "flower", **sinks), num_supernodes=NODES).folder)
    own = run_experiment(_config(tmp_path / "own", **sinks), progress=False).folder
    assert own is not None
    assert (flower / "metrics.csv").read_bytes() == (Path(own) / "metrics.csv").read_bytes()
    assert len((flower / "metrics.csv").read_text().splitlines()) == 1 + 2
    assert any((flower / "tensorboard").iterdir())


def test_a_missing_sink_package_stops_the_run_before_flower_starts(tmp_path: Path, in_process: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(module: str, extra: str, what: str) -> Any:
        raise MissingExtra(what, module, extra)

    monkeypatch.setattr(chillfl.runner, "need", missing)
    monkeypatch.setattr(flwr.simulation, "run_simulation", lambda **kwargs: pytest.fail("Flower started"))
    with pytest.raises(MissingExtra) as err:
        run_simulation(_config(tmp_path, log={"sinks": ["csv", "tensorboard"]}), num_supernodes=NODES)
    assert "tensorboard is needed for TensorBoard logs" in str(err.value)
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


def test_fedgen_runs_in_float32_under_a_float64_default(tmp_path: Path, in_process: Any) -> None:
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        out = run_simulation(_config(tmp_path, algorithm={"name": "fedgen"}), num_supernodes=NODES)
        assert torch.get_default_dtype() == torch.float64  # the caller's default, given back
    finally:
        torch.set_default_dtype(previous)
    assert len(out.records) == 2 and all(torch.isfinite(torch.tensor(r["global_acc"])) for r in out.records)


def test_a_note_is_said_once_a_flower_run(tmp_path: Path, in_process: Any, caplog: pytest.LogCaptureFixture) -> None:
    config = _config(tmp_path, temperature={"policy": "fedchill", "init": True, "decay": False, "t_start": 0.5})
    with caplog.at_level(logging.WARNING, logger="chillfl"):
        run_simulation(config, num_supernodes=NODES)
    notes = [r.getMessage() for r in caplog.records if NOTE in r.getMessage()]
    assert len(notes) == 1, notes


def test_a_failed_run_leaves_no_partial_folder(tmp_path: Path, in_process: list[type[SimulationGrid]], capsys: pytest.CaptureFixture[str]) -> None:
    in_process[0] = FailingGrid
    with pytest.raises(RuntimeError, match="a node failed"):
        run_simulation(_config(tmp_path), num_supernodes=NODES)
    assert not list(tmp_path.iterdir())  # no NAME.partial that `chillfl resume` would find no checkpoint in
    assert "chillfl: the Flower run failed; a Flower run is not checkpointed: nothing to resume, its partial result folder was removed" in capsys.readouterr().err


def test_a_client_app_builds_its_parts_without_the_servers_notes(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A ClientApp actor is a process of its own (no scope shared with the server): each one said the server's notes
    again ("[repeated 10x across cluster]"). It builds quietly now; what it cannot build still raises."""
    from chillfl.errors import ConfigError
    from chillfl.flower.apps import ClientRuntime

    config = _config(tmp_path, temperature={"policy": "fedchill", "init": True, "decay": False, "t_start": 0.5})
    with caplog.at_level(logging.WARNING, logger="chillfl"):
        ClientRuntime(config).ready()
        assert logging.getLogger("chillfl").level == logging.WARNING  # the caller's level, given back
    assert not [r for r in caplog.records if NOTE in r.getMessage()]
    with pytest.raises(ConfigError):
        ClientRuntime(_config(tmp_path, algorithm={"name": "no-such-method"})).ready()


def test_a_diverged_flower_run_is_kept_as_failed_as_chillfl_runs_is(tmp_path: Path, in_process: Any) -> None:
    """A run that diverges ends ``NAME.failed`` with its ``failure.json`` (reports and comparisons read it), not removed."""
    from chillfl.errors import Diverged

    with pytest.raises(Diverged):
        run_simulation(_config(tmp_path / "fl", client={**BASE["client"], "lr": 1e12}), num_supernodes=NODES)
    with pytest.raises(Diverged):
        run_experiment(_config(tmp_path / "own", client={**BASE["client"], "lr": 1e12}))
    assert sorted(p.name for p in (tmp_path / "fl").iterdir()) == ["run.failed"]
    assert sorted(p.name for p in (tmp_path / "fl" / "run.failed").iterdir()) == sorted(p.name for p in (tmp_path / "own" / "run.failed").iterdir())


def test_a_failure_after_every_round_ran_keeps_the_results(tmp_path: Path, in_process: Any, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """A sink that cannot close (a tracking server gone) after the last round: the rounds' results stay in ``.partial``."""
    from chillfl.sinks import CsvSink

    def close(self: Any, *failure: Any) -> None:
        raise ConnectionError("tracking server unreachable")

    monkeypatch.setattr(CsvSink, "close", close)
    with pytest.raises(ConnectionError):
        run_simulation(_config(tmp_path, log={"sinks": ["csv"]}), num_supernodes=NODES)
    kept = tmp_path / "run.partial"
    assert len((kept / "metrics.jsonl").read_text().splitlines()) == 2
    assert "its results are kept in" in capsys.readouterr().err


def test_a_client_app_still_says_what_only_its_own_data_gives(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The node's own data lines (a download without a published checksum, a cache it cannot write) are not the server's."""
    import chillfl.flower.apps as apps

    real = apps.build_experiment

    def build(*args: Any, **kwargs: Any) -> Any:
        logging.getLogger("chillfl.data.download").warning("x.tar.gz has no published checksum; not verified")
        return real(*args, **kwargs)

    monkeypatch.setattr(apps, "build_experiment", build)
    with caplog.at_level(logging.WARNING, logger="chillfl"):
        apps.ClientRuntime(_config(tmp_path)).ready()
    assert [r for r in caplog.records if "no published checksum" in r.getMessage()]
    assert logging.getLogger("chillfl.data").level == logging.NOTSET


def test_the_servers_run_notes_are_said_and_the_executors_are_not(tmp_path: Path, in_process: Any, caplog: pytest.LogCaptureFixture) -> None:
    """chillfl run says its run notes (experiment.run_notes) once the run is built; the Flower server built the same parts
    and said none (a client_fraction the count overrides, Krum's f below the attackers, an idle local_dp: backends). The
    notes on the executor (threads, [ray]) do not apply where the nodes train, and are not said: the [ray] options are
    noted as a Flower run's, once (test_flowerfix_messages)."""
    config = _config(tmp_path, federation={**BASE["federation"], "rounds": 2, "client_fraction": 0.25}, ray={"workers": 8})
    with caplog.at_level(logging.WARNING, logger="chillfl"):
        run_simulation(config, num_supernodes=NODES)
    said = [r.getMessage() for r in caplog.records]
    assert sum("federation.client_fraction = 0.25 is ignored" in m for m in said) == 1, said
    assert [m for m in said if "ray.workers" in m] == ["note: ray.workers = 8 is ignored: under Flower the SuperNodes run the client updates "
                                                      "(run_simulation's num_supernodes, num_cpus_per_client; docs/flower.md)"]
