"""What ``run_simulation`` said on bad input and on a late stop (report-flowermsg 1-5).

1. A ConfigError raised on a node (a loss term returning a vector) came back as Flower's error reply, whose reason is the
   node's whole traceback, raised as a WorkerError: ~60 lines, the field lost, exit 1. It comes back as a reply now and
   is raised as the same ConfigError (one line naming the field), as the Ray executor raises its actors'.
2. ``num_supernodes`` < 1 and ``num_cpus_per_client`` above the local Ray's CPUs started Ray and Flower, then failed
   with tracebacks; refused now before anything starts, naming the argument.
3. A signal after the last round said the partial result folder was removed, while the run finished and kept it.
4. ``checkpoint.every`` and the ``[ray]`` table were ignored under Flower without a word.
5. Flower's "Manually terminating ClientAppActor" line followed chillfl's last line.

The runs use the in-process simulation of tests/test_flowerfix_server_runs.py (no Ray), with a grid that turns a
ClientApp's exception into an error reply, as Flower's simulation engine does.
"""

from __future__ import annotations

import logging
import signal
import traceback
from pathlib import Path
from typing import Any, Sequence

import pytest
import torch

pytest.importorskip("flwr", reason="the Flower backend needs the [flower] extra (flwr)")

import flwr.simulation  # noqa: E402
from flwr.app import Context, Error, Message, RecordDict  # noqa: E402
from test_flower_privacy_attacks import BASE, NODES, server_identity  # noqa: E402,F401  (a fixture)
from test_flowerfix_server_runs import SimulationGrid, _config, in_process  # noqa: E402,F401  (a fixture)

from chillfl.config import config_from_dict  # noqa: E402
from chillfl.errors import ConfigError  # noqa: E402
from chillfl.flower import client_app, run_simulation  # noqa: E402
from chillfl.flower.apps import SimulationStop, build_server  # noqa: E402


class TermVector:
    """A loss term returning a vector: bad input only a client sees, as it trains."""

    reads = ()

    def __call__(self, params: Any, context: Any) -> torch.Tensor:
        return torch.zeros(3, requires_grad=True)


@pytest.fixture
def grid(request: pytest.FixtureRequest) -> list[type[SimulationGrid]]:
    """tests/test_flowerfix_server_runs.py's in-process simulation: the list's grid class is the one used."""
    used: list[type[SimulationGrid]] = request.getfixturevalue("in_process")
    return used


class FlowerLikeGrid(SimulationGrid):
    """A ClientApp's exception as Flower's engine sends it back: an error reply whose reason is the traceback."""

    def send_and_receive(self, messages: Sequence[Message], timeout: float | None = None) -> list[Message]:
        out = []
        for m in messages:
            try:
                out.append(self.app(m, self.contexts[m.metadata.dst_node_id]))
            except Exception:  # noqa: BLE001 - what Flower's engine does with it
                out.append(Message(Error(code=1, reason=traceback.format_exc()), reply_to=m))
        return out


def test_a_nodes_config_error_is_raised_as_it_is(tmp_path: Path, grid: list[type[SimulationGrid]], capsys: pytest.CaptureFixture[str]) -> None:
    grid[0] = FlowerLikeGrid
    with pytest.raises(ConfigError) as err:
        run_simulation(_config(tmp_path, objective={"terms": [f"{__name__}:TermVector"]}), num_supernodes=NODES)
    assert err.value.field == "objective.terms[0]"
    assert err.value.message.startswith("TermVector returned a tensor of shape (3,)") and "\n" not in str(err.value)
    assert not list(tmp_path.iterdir())
    assert "chillfl:" not in capsys.readouterr().err  # the refusal alone, as chillfl run's (its unstarted folder removed unsaid)


def test_a_failed_node_still_fails_the_round(tmp_path: Path, grid: list[type[SimulationGrid]]) -> None:
    """Any other exception on a node stays the WorkerError it was."""
    from chillfl.executors.processes import WorkerError

    class Broken(FlowerLikeGrid):
        def send_and_receive(self, messages: Sequence[Message], timeout: float | None = None) -> list[Message]:
            if any(m.metadata.message_type == "train" for m in messages):
                return [Message(Error(code=1, reason="RuntimeError: boom"), reply_to=m) for m in messages]
            return super().send_and_receive(messages, timeout)

    grid[0] = Broken
    with pytest.raises(WorkerError, match="failed a client update: RuntimeError: boom"):
        run_simulation(_config(tmp_path), num_supernodes=NODES)


@pytest.mark.parametrize(("argument", "value"), [("num_supernodes", -2), ("num_supernodes", 0), ("num_cpus_per_client", 10**6),
                                                 ("num_cpus_per_client", 0.0), ("num_cpus_per_client", float("nan"))])
def test_bad_simulation_arguments_are_refused_before_anything_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, argument: str,
                                                                    value: float) -> None:
    monkeypatch.setattr(flwr.simulation, "run_simulation", lambda **kwargs: pytest.fail("Flower started"))
    with pytest.raises(ConfigError) as err:
        run_simulation(_config(tmp_path), **{argument: value})
    assert err.value.field == argument and f"got {value!r}" in err.value.message
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


@pytest.mark.parametrize(("done", "says"), [
    (0, "stopping the Flower run after this round (a second one stops at once); a Flower run is not checkpointed: nothing to resume, "
        "its partial result folder was removed"),
    (1, "the Flower run is in its last round: it finishes and keeps its result folder, then the signal is passed on"),
    (2, "the Flower run's rounds were all done: it finishes and keeps its result folder, then the signal is passed on"),
])
def test_the_first_signals_line_says_whether_the_run_finishes(done: int, says: str, capsys: pytest.CaptureFixture[str]) -> None:
    stop = SimulationStop(rounds=2)
    stop.done = done
    stop.handle(signal.SIGINT, None)
    line = capsys.readouterr().err.strip()
    assert line.startswith(f"chillfl: SIGINT: {says}")
    assert ("removed" in line) == (done < 2)  # round 2 under way: a second signal would still cut it short
    assert stop.round_done(done + 1, 2) == (signal.SIGINT if done + 1 < 2 else None)  # what the loop then does


def test_options_a_flower_run_ignores_are_noted(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = _config(tmp_path, executor="ray", checkpoint={"every": 1}, ray={"workers": 2})
    with caplog.at_level(logging.WARNING, logger="chillfl"):
        build_server(config)[1].close()
    said = [r.getMessage() for r in caplog.records]
    assert ("note: checkpoint.every = 1 is ignored: a Flower run is not checkpointed (nothing to resume; chillfl run writes checkpoints)") in said
    assert ("note: executor = 'ray', ray.workers = 2 are ignored: under Flower the SuperNodes run the client updates "
            "(run_simulation's num_supernodes, num_cpus_per_client; docs/flower.md)") in said
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="chillfl"):
        build_server(config_from_dict({**BASE, "out_dir": str(tmp_path)}))[1].close()  # its defaults, but checkpoint.every = 0
    assert [m for m in (r.getMessage() for r in caplog.records) if "ignored" in m] == []  # checkpoint.every = 0: what a Flower run does


@pytest.mark.usefixtures("server_identity")
def test_a_simulated_client_app_drops_flowers_actor_exit_line(tmp_path: Path) -> None:
    from flwr.common.logger import log

    flwr_log = logging.getLogger("flwr")
    before = list(flwr_log.filters)
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    keep = Keep()
    flwr_log.addHandler(keep)
    try:
        app = client_app(_config(tmp_path), simulated=True)
        ask = Message(content=RecordDict({}), dst_node_id=10, message_type="query.chillfl")
        app(ask, Context(run_id=1, node_id=10, node_config={"partition-id": 0, "num-partitions": 1}, state=RecordDict(), run_config={}))
        log(logging.WARNING, "Manually terminating %s", "ClientAppActor")  # as Flower's actor logs it when Flower ends it
        log(logging.WARNING, "another Flower line")
    finally:
        flwr_log.removeHandler(keep)
        for added in [f for f in flwr_log.filters if f not in before]:
            flwr_log.removeFilter(added)
    assert seen == ["another Flower line"]
