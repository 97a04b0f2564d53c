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

import numpy as np
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


CPUS = 4
"""The local Ray's CPUs in these tests, whatever this machine has: the bound and the message are exact."""

SUPERNODES = "must be a whole number >= 1 (None: one SuperNode per client), got "
CPUS_PER_CLIENT = f"must be > 0 and at most the CPUs the simulation's local Ray has ({CPUS}), got "


class FlowerStarted(Exception):
    """The stubbed Flower simulation was reached: run_simulation accepted its arguments."""


@pytest.mark.parametrize(("argument", "value"), [("num_supernodes", -2), ("num_supernodes", 0), ("num_supernodes", True), ("num_supernodes", 2.0),
                                                 ("num_cpus_per_client", CPUS + 0.5), ("num_cpus_per_client", 10**6),
                                                 ("num_cpus_per_client", 0.0), ("num_cpus_per_client", float("nan")),
                                                 ("num_cpus_per_client", True)])
def test_bad_simulation_arguments_are_refused_before_anything_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, argument: str,
                                                                    value: float) -> None:
    from chillfl.executors import processes

    monkeypatch.setattr(processes, "default_workers", lambda: CPUS)
    monkeypatch.setattr(flwr.simulation, "run_simulation", lambda **kwargs: pytest.fail("Flower started"))
    with pytest.raises(ConfigError) as err:
        run_simulation(_config(tmp_path), **{argument: value})
    start = SUPERNODES if argument == "num_supernodes" else CPUS_PER_CLIENT
    assert (err.value.field, err.value.message) == (argument, f"{start}{value!r}")
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


def _started(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, num_supernodes: Any, num_cpus_per_client: Any) -> list[tuple[Any, Any]]:
    """What run_simulation hands Flower (num_supernodes, the client's CPUs) on a faked 4-CPU local Ray, Flower stubbed
    out at its start."""
    from chillfl.executors import processes

    monkeypatch.setattr(processes, "default_workers", lambda: CPUS)
    started: list[tuple[Any, Any]] = []

    def flower(num_supernodes: int, backend_config: dict[str, Any], **kwargs: Any) -> None:
        started.append((num_supernodes, backend_config["client_resources"]["num_cpus"]))
        raise FlowerStarted

    monkeypatch.setattr(flwr.simulation, "run_simulation", flower)
    with pytest.raises(FlowerStarted):
        run_simulation(_config(tmp_path), num_supernodes=num_supernodes, num_cpus_per_client=num_cpus_per_client)
    return started


@pytest.mark.parametrize(("num_supernodes", "num_cpus_per_client"), [(np.int64(1), np.float32(1.0)), (None, np.float64(4.0))])
def test_numpy_numbers_are_taken_as_flower_s_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, num_supernodes: Any,
                                                num_cpus_per_client: Any) -> None:
    """rev110c 5: np.int64(1) and np.float32(1.0) were refused ("must be > 0 and at most the CPUs ...", which 1.0 is);
    they reach Flower as int and float."""
    started = _started(tmp_path, monkeypatch, num_supernodes, num_cpus_per_client)
    nodes = BASE["federation"]["num_clients"] if num_supernodes is None else 1
    assert [(type(n), n, type(c), c) for n, c in started] == [(int, nodes, float, float(num_cpus_per_client))]


@pytest.mark.parametrize(("num_supernodes", "num_cpus_per_client"), [(1, CPUS), (None, float(CPUS)), (1, 0.5)])
def test_simulation_arguments_at_their_bounds_start_flower(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, num_supernodes: int | None,
                                                           num_cpus_per_client: float) -> None:
    """All the local Ray's CPUs for one client is a simulation that runs (the check's edge), as is one SuperNode."""
    started = _started(tmp_path, monkeypatch, num_supernodes, num_cpus_per_client)
    assert started == [(BASE["federation"]["num_clients"] if num_supernodes is None else num_supernodes, num_cpus_per_client)]


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
    assert ("was removed" in line) == (done == 0)  # said as done only where the run is cut short: in its last round it finishes
    assert stop.round_done(done + 1, 2) == (signal.SIGINT if done + 1 < 2 else None)  # what the loop then does


class SignalInLastRound(SimulationGrid):
    """A SIGINT while the run's last round trains: the handler run_simulation installed is called as the signal would call
    it, from the ServerApp's thread, so the round it lands in is known (a raised signal reaches the main thread later)."""

    trains = 0

    def push_messages(self, messages: Sequence[Message]) -> list[str]:
        if any(m.metadata.message_type == "train" for m in messages):
            type(self).trains += 1
            if type(self).trains == 2:  # _config's 2 rounds: the last one's updates
                handler = signal.getsignal(signal.SIGINT)
                assert callable(handler)
                handler(signal.SIGINT, None)
        return super().push_messages(messages)


def test_a_signal_in_the_last_round_is_said_to_let_the_run_finish(tmp_path: Path, grid: list[type[SimulationGrid]],
                                                                 monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """run_simulation gives its stop the run's rounds: without them the line said "its partial result folder was removed"
    of a run that finished and kept it (report-flowermsg 3; the test above builds the stop itself)."""
    passed_on: list[int] = []
    monkeypatch.setattr(signal, "raise_signal", passed_on.append)  # the signal run_simulation passes on once the run is done
    grid[0] = type("Grid", (SignalInLastRound,), {"trains": 0})
    out = run_simulation(_config(tmp_path), num_supernodes=NODES)
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("chillfl: SIGINT")]
    assert said == ["chillfl: SIGINT: the Flower run is in its last round: it finishes and keeps its result folder, then the signal is "
                    "passed on (a second one stops it at once, and a Flower run is not checkpointed: its partial result folder is then "
                    "removed)"]
    assert passed_on == [signal.SIGINT]
    assert len(out.records) == 2 and Path(out.folder).is_dir() and not Path(out.folder).name.endswith(".partial")


def test_options_a_flower_run_ignores_are_noted(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = _config(tmp_path, executor="ray", checkpoint={"every": 1}, ray={"workers": 2})
    with caplog.at_level(logging.WARNING, logger="chillfl"):
        build_server(config)[1].close()
    said = [r.getMessage() for r in caplog.records]
    assert [m for m in said if "ignored" in m] == [  # each once
        "note: checkpoint.every = 1 is ignored: a Flower run is not checkpointed (nothing to resume; chillfl run writes checkpoints)",
        "note: executor = 'ray', ray.workers = 2 are ignored: under Flower the SuperNodes run the client updates "
        "(run_simulation's num_supernodes, num_cpus_per_client; docs/flower.md)"]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="chillfl"):
        build_server(config_from_dict({**BASE, "out_dir": str(tmp_path)}))[1].close()  # its defaults, but checkpoint.every = 0
    assert [m for m in (r.getMessage() for r in caplog.records) if "ignored" in m] == []  # checkpoint.every = 0: what a Flower run does


@pytest.mark.usefixtures("server_identity")
def test_a_simulated_client_app_drops_flowers_actor_exit_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flwr.common.logger import log

    flwr_log = logging.getLogger("flwr")
    exit_line = logging.makeLogRecord({"name": "flwr", "levelno": logging.WARNING, "msg": "Manually terminating ClientAppActor"})
    # an in-process run_simulation earlier in this process added its filter for good: the test starts without it, and
    # monkeypatch gives the logger its own list back after
    monkeypatch.setattr(flwr_log, "filters", [f for f in flwr_log.filters if not isinstance(f, logging.Filter) or f.filter(exit_line)])
    before = list(flwr_log.filters)
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    def ask(app: Any) -> None:
        query = Message(content=RecordDict({}), dst_node_id=10, message_type="query.chillfl")
        app(query, Context(run_id=1, node_id=10, node_config={"partition-id": 0, "num-partitions": 1}, state=RecordDict(), run_config={}))
        log(logging.WARNING, "Manually terminating %s", "ClientAppActor")  # as Flower's actor logs it when Flower ends it
        log(logging.WARNING, "another Flower line")

    keep = Keep()
    flwr_log.addHandler(keep)
    try:
        ask(client_app(_config(tmp_path)))  # a deployment's SuperNode: its process is the user's, whose Flower log stays whole
        assert flwr_log.filters == before
        assert seen == ["Manually terminating ClientAppActor", "another Flower line"]
        seen.clear()
        ask(client_app(_config(tmp_path), simulated=True))
    finally:
        flwr_log.removeHandler(keep)
    assert seen == ["another Flower line"]


def test_a_signal_during_the_first_handlers_hold_does_not_block_it() -> None:
    """The stop's lock is re-entrant: the thread holding it can take it again, so the first signal's handler, in the main
    thread, never waits on a hold of that thread's own. A nested handler does not reach the lock at all (it is the second
    signal and sets at_once: tests/test_revmend_signals.py drives the handler nested)."""
    stop = SimulationStop(rounds=2)
    assert stop._lock.acquire(blocking=False)  # the first handler's hold
    try:
        assert stop._lock.acquire(blocking=False)  # the nested handler's, in the same thread
        stop._lock.release()
    finally:
        stop._lock.release()
