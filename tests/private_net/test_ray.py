"""executor = "ray": against a Ray cluster started here (a head and one worker node on this machine), and a local Ray.

* bitwise identical metrics to ``sequential`` (CPU, one intra-op thread), workers on both nodes;
* stopped and resumed, a run is bitwise the uninterrupted run (``tests/resume_cases.py``; the sequential executor's), on the
  cluster's two nodes: every registered method (:data:`RESUME_CASES`), on actors a :class:`WorkerPools` lends every run;
* a client's data reach a worker once, not once per round (bytes counted on both sides);
* a comparison stopped by SIGINT on the cluster resumes (``chillfl resume``) to the sequential sweep's tables;
* per-worker resources are real Ray requests (an unplaceable request stops with one line);
* a worker process killed mid-round is restarted and the round gives the same replies; when the
  retries are spent the round raises one line and nothing is aggregated;
* SIGTERM to a run that started its own local Ray leaves no Ray process behind after 5 s;
* SIGTERM or SIGINT to the run's whole process group (a scheduler's scancel) stops it after the round (exit 143/130), as the driver alone;
* without the ``ray`` package: one line naming the extra, exit 2, nothing written.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest
import torch

ray = pytest.importorskip("ray")

from ray._private.authentication_test_utils import reset_auth_token_state  # noqa: E402

from chillfl.config import RayConfig, config_from_dict  # noqa: E402
from chillfl.executors.sequential import SequentialExecutor  # noqa: E402
from chillfl.engine.loop import run_rounds  # noqa: E402
from chillfl.executors.processes import WorkerError  # noqa: E402
from chillfl.engine.protocol import ClientSide, ClientTask  # noqa: E402
from chillfl.executors.pools import WorkerPools  # noqa: E402
from chillfl.executors.ray_executor import RayExecutor  # noqa: E402
from chillfl.errors import ConfigError  # noqa: E402
from chillfl.stop_signals import REPEAT_WINDOW_S  # noqa: E402
from chillfl.experiment import build_experiment, build_protocol, make_executor  # noqa: E402
from resume_cases import COMBINED, check_resume, methods, registered  # noqa: E402
from sessions import session_pids  # noqa: E402

TINY: dict[str, Any] = {
    "seed": 5,
    "threads": 1,
    "device": "cpu",
    "dataset": {"name": "digits"},
    "partition": {"name": "dirichlet", "alpha": 0.3},
    "model": {"name": "mlp"},
    "federation": {"num_clients": 4, "clients_per_round": 4, "rounds": 3},
    "client": {"epochs": 1, "batch_size": 32, "lr": 0.05},
    "temperature": {"policy": "fedchill"},
    "eval": {"clients": "sampled", "client_split": "proportional", "client_split_size": 20},
}


AUTH = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32), "RAY_USAGE_STATS_ENABLED": "0"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop_session(sid: int) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(sid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and session_pids(sid):
            time.sleep(0.2)


def _ray_env() -> dict[str, str]:
    """This process's environment without RAY_ADDRESS, with the test's own token (nothing read from or written to ~/.ray)."""
    return {**{k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN_PATH")}, **AUTH}


def _ray_start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    """``ray start ... --block`` in a session of its own (killed as a group by the fixture)."""
    env = _ray_env()
    cmd = [str(Path(sys.executable).parent / "ray"), "start", "--block", "--disable-usage-stats", "--node-ip-address=127.0.0.1", *args]
    return subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env, start_new_session=True)


def _wait_for(pattern: str, log: Path, proc: subprocess.Popen[bytes], timeout: float = 120) -> re.Match[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = re.search(pattern, log.read_text(errors="replace"))
        if found:
            return found
        if proc.poll() is not None:
            raise AssertionError(f"ray start exited: {log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.2)
    raise AssertionError(f"no {pattern!r} in {log} within {timeout} s")


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A head (1 CPU) and a worker node (1 CPU), each with its own temp dir; the driver (this process) connected."""
    root = Path(tempfile.mkdtemp(prefix="r8", dir="/tmp"))  # short: Ray's socket paths must stay under 108 bytes
    procs = []
    saved = {k: os.environ.get(k) for k in AUTH}
    os.environ.update(AUTH)  # the driver (this process) authenticates with the cluster's token
    reset_auth_token_state()  # Ray caches the token it read at import
    try:
        head = _ray_start(["--head", "--port=0", "--num-cpus=1", "--include-dashboard=false", f"--dashboard-port={_free_port()}",
                           f"--dashboard-agent-listen-port={_free_port()}", f"--temp-dir={root / 'h'}"], root / "head.log")
        procs.append(head)
        address = _wait_for(r"ray start --address='([^']+)'", root / "head.log", head).group(1)
        node = _ray_start([f"--address={address}", "--num-cpus=1", f"--dashboard-agent-listen-port={_free_port()}", f"--temp-dir={root / 'w'}"], root / "node.log")
        procs.append(node)
        ray.init(address=address, logging_level="ERROR", configure_logging=False)
        deadline = time.monotonic() + 120
        while ray.cluster_resources().get("CPU", 0) < 2:
            assert time.monotonic() < deadline, f"the worker node never joined: {(root / 'node.log').read_text(errors='replace')[-2000:]}"
            time.sleep(0.5)
        yield address
    finally:
        if ray.is_initialized():
            ray.shutdown()
        for p in reversed(procs):
            _stop_session(p.pid)
        leftovers = [pid for p in procs for pid in session_pids(p.pid)]
        subprocess.run(["rm", "-rf", str(root)], check=False)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        reset_auth_token_state()
        assert not leftovers, f"Ray processes left behind: {leftovers}"


def _config(**overrides: Any) -> Any:
    table = json.loads(json.dumps(TINY))
    for key, value in overrides.items():
        table[key] = {**table.get(key, {}), **value} if isinstance(value, dict) else value
    return config_from_dict(table)


def _rounds(config: Any, executor: Any = None, pools: WorkerPools | None = None) -> tuple[list[dict[str, Any]], Any]:
    """``config``'s rounds on ``executor`` (None: the one ``config`` names, on ``pools``' workers where given)."""
    exp = build_experiment(config)
    protocol = build_protocol(exp)
    executor = executor or make_executor(exp, protocol, pools)
    try:
        records = list(run_rounds(protocol, executor, seed=config.seed, num_clients=exp.data.num_clients,
                                  clients_per_round=config.federation.sample_size(), rounds=config.federation.rounds, participation=config.federation))
        stats = executor.stats() if isinstance(executor, RayExecutor) else None
        return records, (executor, stats)
    finally:
        executor.close()


def test_bitwise_equal_to_sequential_on_two_nodes_and_data_sent_once(cluster: str) -> None:
    expected, _ = _rounds(_config(executor="sequential"))
    exp = build_experiment(_config(executor="ray", ray={"address": cluster}))
    protocol = build_protocol(exp)
    executor = make_executor(exp, protocol)
    assert isinstance(executor, RayExecutor) and executor.workers == 2 and not executor.connected_here
    try:
        records = []
        for record in run_rounds(protocol, executor, seed=exp.config.seed, num_clients=4, clients_per_round=4, rounds=3, participation=exp.config.federation):
            records.append(record)
            if record["round"] == 1:
                after_first = executor.sent_data_bytes
                first_stats = executor.stats()
        stats = executor.stats()
    finally:
        executor.close()
    assert records == expected  # every metric, bit for bit (floats compared exactly)
    assert len({s["node"] for s in stats}) == 2, stats  # one worker on each node
    # the clients' data: 4 clients' train + eval rows of digits' 64 float features (+ int64 labels), put once, fetched once
    assert after_first > 0 and executor.sent_data_bytes == after_first
    assert sum(s["received_data_bytes"] for s in stats) == sum(s["received_data_bytes"] for s in first_stats) == after_first
    assert sum(s["clients"] for s in stats) == 4


RESUME_CASES = [pytest.param(m, 1 + i % 2, id=m) for i, m in enumerate(methods())] + [pytest.param(m, 3, id=m) for m in COMBINED]
"""Every registered method (and FedChill in each protocol's client state), as under the other executors
(``tests/test_resume_every_method.py``), with the clients' own state (SCAFFOLD's c_i, SCARLET's caches,
FedProto's client models, ...) travelling to the actors."""


def test_every_registered_method_has_a_ray_resume_case() -> None:
    assert registered() <= {p.values[0] for p in RESUME_CASES}


@pytest.fixture(scope="class")
def pools(cluster: str) -> Iterator[WorkerPools]:
    """Ray actors lent to one run after another (as ``chillfl compare`` lends them), for the tests of one class: they
    hold both nodes' CPUs, so they are gone before the module's other tests ask for actors of their own."""
    with WorkerPools() as shared:
        yield shared


class TestSharedWorkers:
    """Every run builds its own :class:`RayExecutor`, as a run does, on the actors of one :class:`WorkerPools`: they
    import torch (about 20 s a run on a loaded 2-core machine), so they start once, not three times per case (nor
    once per personalised method). Actors a run starts for itself: the module's other tests."""

    @pytest.mark.parametrize("algorithm", [{"name": "ditto"}, {"name": "fedrep", "head_epochs": 2}, {"name": "fedper"}, {"name": "apfl"},
                                           {"name": "pfedme", "inner_steps": 2}, {"name": "feddyn"}], ids=lambda a: a["name"])
    def test_personalised_family_equals_sequential(self, pools: WorkerPools, cluster: str, algorithm: dict[str, Any]) -> None:
        """Each personalised method's further trainings (jobs its client half asks for) and client state on Ray workers."""
        expected, _ = _rounds(_config(executor="sequential", algorithm=algorithm))
        started = max(pools.started, 1)  # the class's first run on the pool starts its actors (also a case run alone, with -k)
        records, (_, stats) = _rounds(_config(executor="ray", ray={"address": cluster}, algorithm=algorithm), pools=pools)
        assert records == expected
        assert pools.started == started and sum(s["clients"] for s in stats) > 0  # on the shared actors, which served this run's clients

    def test_bare_training_jobs_equal_sequential(self, pools: WorkerPools, cluster: str) -> None:
        """``run(jobs)`` (the training primitive) on the actors: outcomes in job order, bit for bit."""
        from chillfl.engine.protocol import ClientJob

        exp = build_experiment(_config(executor="sequential"))
        protocol = build_protocol(exp)
        tasks = protocol.configure(0, [3, 0, 2])
        jobs = [ClientJob(t.client_id, t.downlink.start, t.data.x, t.data.y, 0.05, 0.5, {}, seed=11 + t.client_id) for t in tasks]
        expected = SequentialExecutor(exp.model, exp.spec).run(jobs)
        started = max(pools.started, 1)
        with RayExecutor(exp.model, exp.spec, protocol.client, RayConfig(address=cluster), pool=pools.ray(RayConfig(address=cluster), 1, 3)) as executor:
            got = executor.run(jobs)
        assert pools.started == started  # on the shared actors
        for g, e in zip(got, expected):
            assert g.num_steps == e.num_steps and g.mean_loss == e.mean_loss and all(torch.equal(g.params[k], e.params[k]) for k in e.params)

    def test_a_second_run_on_the_actors_gets_its_own_clients_data(self, pools: WorkerPools, cluster: str) -> None:
        """An actor keeps the data of the clients it served; a run after another, whose client 0 has other rows, must
        not train on the first run's rows (the actor drops them when it meets the new run's parts)."""
        runs = []
        for alpha in (0.3, 5.0):
            config = _config(executor="ray", ray={"address": cluster}, partition={"name": "dirichlet", "alpha": alpha})
            exp = build_experiment(config)
            protocol = build_protocol(exp)
            runs.append(_rounds(config, make_executor(exp, protocol, pools))[0])
        workers = pools.ray(RayConfig(address=cluster), 1, 4)
        assert pools.started == 1 and workers.usable and len({s["node"] for s in workers.stats()}) == 2  # one actor on each node, left up
        expected, _ = _rounds(_config(executor="sequential", partition={"name": "dirichlet", "alpha": 5.0}))
        assert runs[1] == expected and runs[0] != expected

    @pytest.mark.parametrize(("method", "stop"), RESUME_CASES)
    def test_stopped_and_resumed_is_bitwise_the_uninterrupted_run(
        self, pools: WorkerPools, cluster: str, method: str, stop: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """Crash and resume (``tests/resume_cases.py``) on the shared actors, compared with the sequential executor's
        uninterrupted run (in this process) rather than Ray's own: a Ray run is the sequential run bit for bit (the
        module's first point), so the cut run's rounds and the resumed run's must be its bits; a third fewer Ray runs."""
        started = max(pools.started, 1)  # the class's first run on the pool starts its actors (also a case run alone, with -k)
        check_resume(method, "ray", stop, tmp_path, monkeypatch, pools=pools, reference_executor="sequential", **{"ray.address": cluster})
        assert pools.started == started  # no run started actors of its own
        workers = pools.ray(RayConfig(address=cluster), 1, 2)
        assert sum(s["clients"] for s in workers.stats()) > 0  # the resumed run's clients were served there


@dataclass
class KillWorker:
    """Test client side: the update of client ``victim`` SIGKILLs its own worker process (only once unless ``always``)."""

    inner: ClientSide
    marker: str
    victim: int
    always: bool = False

    def update(self, task: ClientTask[Any, Any]) -> Any:
        if task.client_id == self.victim and (self.always or not os.path.exists(self.marker)):
            with open(self.marker, "a") as f:
                f.write(f"{os.getpid()}\n")
            os.kill(os.getpid(), signal.SIGKILL)
        return self.inner.update(task)


def _killer_setup(tmp_path: Path, always: bool) -> tuple[Any, Any, KillWorker, list[Any]]:
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import this test module
    exp = build_experiment(_config(executor="sequential"))
    protocol = build_protocol(exp)
    client = KillWorker(protocol.client, str(tmp_path / "killed"), victim=2, always=always)
    return exp, protocol, client, protocol.configure(0, [0, 1, 2, 3])


def test_a_killed_worker_is_restarted_and_the_round_recovers(cluster: str, tmp_path: Path) -> None:
    exp, protocol, client, tasks = _killer_setup(tmp_path, always=False)
    expected = SequentialExecutor(exp.model, exp.spec, client=protocol.client).map(tasks)
    with RayExecutor(exp.model, exp.spec, client, RayConfig(address=cluster, max_retries=2)) as executor:
        before = set(executor.pids)
        replies = executor.map(tasks)
        after = set(executor.pids)
    killed = [int(line) for line in (tmp_path / "killed").read_text().split()]
    assert len(killed) == 1 and killed[0] in before and killed[0] not in after  # one worker died mid-round and was replaced
    assert [r.client_id for r in replies] == [0, 1, 2, 3]
    for got, want in zip(replies, expected):
        assert all(torch.equal(got.uplink.params[k], want.uplink.params[k]) for k in want.uplink.params)
        assert got.local_acc == want.local_acc


def test_a_worker_that_keeps_dying_stops_the_round_with_one_line(cluster: str, tmp_path: Path) -> None:
    exp, protocol, client, tasks = _killer_setup(tmp_path, always=True)
    before = {k: v.clone() for k, v in protocol.global_state().items()}
    with RayExecutor(exp.model, exp.spec, client, RayConfig(address=cluster, max_retries=1)) as executor:
        with pytest.raises(WorkerError) as info:
            executor.map(tasks)
        with pytest.raises(WorkerError, match="unusable"):  # a broken executor never runs another round
            executor.map(tasks)
    message = str(info.value)
    assert "\n" not in message and "clients" in message and "2" in message and "not aggregated" in message
    assert len((tmp_path / "killed").read_text().split()) == 2  # the first try and one retry
    assert all(torch.equal(v, before[k]) for k, v in protocol.global_state().items())  # nothing was aggregated


def test_resources_are_real_requests(cluster: str) -> None:
    exp = build_experiment(_config(executor="sequential"))
    protocol = build_protocol(exp)
    with pytest.raises(WorkerError, match=r"could not place 1 worker\(s\) of num_cpus=2, num_gpus=0 within 3 s \(cluster: 2 CPUs, 0 GPUs\)"):
        RayExecutor(exp.model, exp.spec, protocol.client, RayConfig(address=cluster, num_cpus=2, workers=1, start_timeout=3))


def test_ray_options_are_checked() -> None:
    with pytest.raises(ConfigError, match="ray.num_cpus"):
        _config(ray={"num_cpus": -1})
    with pytest.raises(ConfigError, match="ray.max_retries"):
        _config(ray={"max_retries": -2})
    with pytest.raises(ConfigError, match="ray.colour: unknown option"):
        _config(ray={"colour": 1})


def _write_toml(path: Path, table: dict[str, Any]) -> None:
    """``table`` as a config file (TOML has no None: such keys are left out, their defaults apply)."""
    import tomli_w

    def plain(d: dict[str, Any]) -> dict[str, Any]:
        return {k: plain(v) if isinstance(v, dict) else v for k, v in d.items() if v is not None}

    path.write_text(tomli_w.dumps(plain(table)))


def _start_in_session(config: Path, prefix: str) -> tuple[subprocess.Popen[str], Path]:
    """``chillfl run CONFIG -q`` in a session of its own, its local Ray's sessions in a fresh short folder (Ray's socket paths)."""
    env = _ray_env()
    ray_tmp = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    env["RAY_TMPDIR"] = str(ray_tmp)
    proc = subprocess.Popen([sys.executable, "-m", "chillfl", "run", str(config), "-q"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, start_new_session=True)
    return proc, ray_tmp


@pytest.mark.parametrize("signals", [1, 2])
def test_sigterm_leaves_no_local_ray_behind(tmp_path: Path, signals: int) -> None:
    """A run that started its own local Ray: SIGTERM (or two, the second stopping it at once) -> exit 143, one
    ``chillfl: interrupted`` line, no Ray process of its session survives 5 s, and no Ray session folder is left. Two used to exit 1 with no
    line, and leave two Ray agents re-parented to PID 1 (issue 27)."""
    config = tmp_path / "run.toml"
    table = _config(executor="ray", federation={"rounds": 400}, out_dir=str(tmp_path / "out"), name="r", checkpoint={"every": 0}).to_dict()
    _write_toml(config, table)
    proc, ray_tmp = _start_in_session(config, "r8t")
    try:
        metrics = tmp_path / "out" / "r.partial" / "metrics.jsonl"
        deadline = time.monotonic() + 150
        while not (metrics.exists() and metrics.read_text().strip()):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no round within 150 s"
            time.sleep(0.2)
        names = {pid: _name(pid) for pid in session_pids(proc.pid)}
        assert "raylet" in names.values() and "gcs_server" in names.values(), names  # the run's own local Ray
        proc.send_signal(signal.SIGTERM)
        if signals == 2:
            time.sleep(REPEAT_WINDOW_S + 0.3)  # a second one, not the first repeated (stop_signals.Repeats)
            proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 143, ("OUT", out[-2000:], "ERR", err[-3000:])
        last = err.strip().splitlines()[-1]
        assert last.startswith("chillfl: interrupted by ") and "round -1" not in last and "Traceback" not in err, err
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and session_pids(proc.pid):
            time.sleep(0.1)
        left = {pid: _name(pid) for pid in session_pids(proc.pid)}
        assert not left, f"Ray processes outlived the run by 5 s: {left}"
        assert [p.name for p in ray_tmp.iterdir()] == []  # the local Ray's sessions (logs, sockets) went with it
    finally:
        _stop_session(proc.pid)
        subprocess.run(["rm", "-rf", str(ray_tmp)], check=False)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_signal_to_the_whole_process_group_stops_after_the_round(tmp_path: Path, sig: signal.Signals) -> None:
    """A stop signal sent to every process of the run (``kill -TERM -PGID``, a cluster scheduler's scancel): the driver alone
    handles it -> exit 128+signal and ``interrupted by ... after round N``, nothing of its session left after 5 s. SIGTERM used to
    reach the local Ray's actors (Ray's handler: sys.exit mid-update) and raylet (drain, its agent's death): exit 1, "worker failed:
    Ray worker 0 ... died and was restarted 3 time(s)". Scaffold, 3 of 4 clients, 3 epochs: more than one call per round."""
    config = tmp_path / "run.toml"
    table = _config(executor="ray", federation={"rounds": 20000, "clients_per_round": 3}, client={"epochs": 3}, algorithm={"name": "scaffold"},
                    out_dir=str(tmp_path / "out"), name="g", checkpoint={"every": 0}).to_dict()
    _write_toml(config, table)
    proc, ray_tmp = _start_in_session(config, "r8g")
    try:
        metrics = tmp_path / "out" / "g.partial" / "metrics.jsonl"
        deadline = time.monotonic() + 150
        while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 20):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no 20 rounds within 150 s"
            time.sleep(0.2)
        os.killpg(proc.pid, sig)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 128 + sig, ("OUT", out[-2000:], "ERR", err[-3000:])
        last = err.strip().splitlines()[-1]
        assert last.startswith(f"chillfl: interrupted by {sig.name} after round ") and "Traceback" not in err, err
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and session_pids(proc.pid):
            time.sleep(0.1)
        left = {pid: _name(pid) for pid in session_pids(proc.pid)}
        assert not left, f"processes outlived the run by 5 s: {left}"
    finally:
        _stop_session(proc.pid)
        subprocess.run(["rm", "-rf", str(ray_tmp)], check=False)


SIGTERM_AFTER_SHUTDOWN = """
import ctypes, signal
from chillfl.config import RayConfig
from chillfl.executors.ray_executor import RayWorkers

libc = ctypes.CDLL(None, use_errno=True)

def disposition():  # the C-level SIGTERM handler (struct sigaction's first field), not Python's cached one
    action = ctypes.create_string_buffer(256)
    assert libc.sigaction(signal.SIGTERM, None, action) == 0, ctypes.get_errno()
    return int.from_bytes(action.raw[:ctypes.sizeof(ctypes.c_void_p)], "little")

signal.signal(signal.SIGTERM, lambda *args: None)
python_handler = disposition()
workers = RayWorkers(RayConfig(workers=1))  # a local Ray
workers.ray.shutdown()  # as chillfl's clean-up does, minus its re-assertion of the handlers
print("kept" if disposition() == python_handler else "default" if disposition() == 0 else "other")
"""


@pytest.mark.parametrize("ray_handler", ["", "0"], ids=["chillfl", "with Ray's failure handler"])
def test_ray_shutdown_leaves_sigterm_alone(ray_handler: str) -> None:
    """The root of the double-SIGTERM exit -15: Ray's failure signal handler, which sets SIGTERM to SIG_DFL at shutdown.
    chillfl's driver starts Ray without it; asked for explicitly ("0"), the reset is real (so the test can fail)."""
    env = _ray_env()
    if ray_handler:
        env["RAY_DISABLE_FAILURE_SIGNAL_HANDLER"] = ray_handler
    else:
        env.pop("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", None)
    out = subprocess.run([sys.executable, "-c", SIGTERM_AFTER_SHUTDOWN], capture_output=True, text=True, env=env, timeout=240, start_new_session=True)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[-1] == ("default" if ray_handler else "kept"), out


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def test_without_ray_one_line_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from chillfl.cli import main

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError, as where it is not installed
    config = tmp_path / "run.toml"
    config.write_text('executor = "ray"\n[federation]\nrounds = 1\n')
    code = main(["run", str(config), "-q", "--out", str(tmp_path / "out")])
    err = [line for line in capsys.readouterr().err.strip().splitlines() if line.strip()]
    assert code == 2 and err == ["chillfl: error: executor: 'ray' needs the Ray package, which is not installed here: pip install 'chillfl[ray]'"]
    assert not (tmp_path / "out").exists()


def test_an_interrupted_sweep_on_the_cluster_resumes_to_the_sequential_tables(cluster: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``chillfl compare`` on the cluster, stopped by SIGINT in its second run, then ``chillfl resume`` on a fresh connection:
    the table and every run's metrics are the sequential sweep's, byte for byte (tests/test_sweep_resume.py)."""
    from test_sweep_resume import _compare, _files, _interrupt

    from chillfl.cli import main

    assert _compare(tmp_path / "seq") == 0
    _interrupt(monkeypatch, run=2, after_round=2)
    assert _compare(tmp_path / "ray", "executor=ray", f"ray.address={cluster}") == 130
    assert main(["resume", str(tmp_path / "ray" / "sw-compare.partial")]) == 0
    expected, got = _files(tmp_path / "seq" / "sw-compare"), _files(tmp_path / "ray" / "sw-compare")
    assert all('executor = "ray"' in p.read_text() for p in (tmp_path / "ray" / "sw-compare").glob("*/config.toml"))  # the runs ran on Ray
    assert {k: v for k, v in got.items() if not k.endswith("summary.json")} == {k: v for k, v in expected.items() if not k.endswith("summary.json")}
