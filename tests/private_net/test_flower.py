"""chillfl.flower: a config as Flower ServerApp + ClientApp gives chillfl's own metrics, bit for bit.

* the wire format round-trips typed messages exactly (tensors' bytes, floats' bits);
* under Flower's simulation engine (Ray backend, 2 SuperNodes serving 4 clients) FedChill temperatures +
  SCAFFOLD + a FedProx term, PA3Fed with FLex&Chill's fixed temperature, FedBN, MOON + FedChill, and FedChill
  with its decay (PA3Fed over SCAFFOLD, 5 rounds, T decays on the nodes) give the same records as
  ``chillfl``'s runtime (every float compared exactly), with every client state on the nodes;
* a deployment: SuperLink + two SuperNodes as processes on 127.0.0.1 with TLS certificates made here, a
  FedChill run and then a SCARLET run started with ``flwr run`` give chillfl's metrics (SCARLET's client
  caches persist in the SuperNodes' ``Context.state``); SuperNodes without the CA certificate or without
  TLS are refused; every process exits on SIGTERM;
* the soft-label protocol with SCARLET's cache (4 clients, 3 of them a round, on 2 SuperNodes; 3 rounds): the
  same records as chillfl's runtime, bit for bit, including the cache's hit ratio, the bytes it saves and the
  server's digest check of every client's rebuilt soft-labels, which passes only if each client's cache C_k
  persisted on its node between rounds (the server holds no client state);
* a client's state round-trips exactly through its node's ``Context.state``;
* ``checkpoint.client_models`` (FedPer, FedBN, SCARLET): the nodes send their clients' states back after the last round and the
  server writes ``client_models.safetensors`` byte for byte as chillfl's runtime does;
* bad combinations (soft-label + FedProx's term, prototypes) and a missing ``flwr``
  are one-line ConfigErrors.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import torch

pytest.importorskip("flwr")

from chillfl.config import config_from_dict  # noqa: E402
from chillfl.protocols.softlabels import CacheSyncDelta, ClientCache, ClientState, StoredState  # noqa: E402
from chillfl.flower.apps import NodeStore, OnNode  # noqa: E402
from chillfl.flower.state import held_clients, load_client_state, save_client_state  # noqa: E402
from chillfl.errors import ConfigError  # noqa: E402
from chillfl.flower import run_simulation, server_app  # noqa: E402
from chillfl.flower.wire import decode, encode  # noqa: E402
from chillfl.engine.protocol import ClientReply, ClientTask  # noqa: E402
from chillfl.protocols.parameters import ParamDownlink, ParamUplink  # noqa: E402
from chillfl.runner import run_experiment  # noqa: E402
from sessions import session_pids  # noqa: E402
from shared_flower import SharedActors, shared_actors_fixture  # noqa: E402,F401  (the fixture shared_actors)

BASE: dict[str, Any] = {
    "name": "flower",
    "seed": 5,
    "threads": 1,
    "device": "cpu",
    "dataset": {"name": "digits"},
    "partition": {"name": "dirichlet", "alpha": 0.3},
    "model": {"name": "mlp"},
    "federation": {"num_clients": 4, "clients_per_round": 3, "rounds": 2},
    "client": {"epochs": 1, "batch_size": 32, "lr": 0.05},
    "eval": {"clients": "sampled", "client_split": "proportional", "client_split_size": 20},
}


def _config(tmp_path: Path, **parts: Any) -> Any:
    return config_from_dict({**BASE, "out_dir": str(tmp_path / "out"), **parts})


def test_wire_round_trip_is_exact() -> None:
    g = torch.Generator().manual_seed(0)
    start = {"w": torch.randn(3, 2, generator=g), "steps": torch.tensor(7), "h": torch.randn(2, generator=g, dtype=torch.float64)}
    down = ParamDownlink(start, 0.1 + 0.2, 1 / 3, {"c": {"w": torch.randn(3, 2, generator=g)}, "mu": 1e-300, "flag": True}, 2**62 + 1)
    task = ClientTask(3, 4, down, None, None, 0.625)  # type: ignore[arg-type]
    back = decode(encode(task))
    assert isinstance(back, ClientTask) and isinstance(back.downlink, ParamDownlink)
    assert (back.client_id, back.round, back.work, back.data, back.state) == (3, 4, 0.625, None, None)
    d = back.downlink
    assert d.lr == 0.1 + 0.2 and d.temperature == 1 / 3 and d.seed == 2**62 + 1 and d.context["mu"] == 1e-300 and d.context["flag"] is True
    for k, v in start.items():  # same dtype, shape and bytes
        assert d.start[k].dtype == v.dtype and torch.equal(d.start[k], v)
    assert torch.equal(d.context["c"]["w"], down.context["c"]["w"])
    up = ClientReply(3, ParamUplink(start, 120, 4, float("nan"), {"score": 0.5, "grad_norm": 2.0}), None, 0.75, None)
    got = decode(encode(up))
    assert got.uplink.num_samples == 120 and got.uplink.train_loss != got.uplink.train_loss and got.uplink.report == {"score": 0.5, "grad_norm": 2.0}
    assert got.local_acc == 0.75 and got.local_loss is None


def test_wire_round_trips_soft_label_messages() -> None:
    from chillfl.protocols.softlabels.messages import SoftLabelDownlink, SoftLabelReport, SoftLabelRoundDownlink, SoftLabelUplink

    g = torch.Generator().manual_seed(2)
    prev = SoftLabelDownlink(2, torch.tensor([4, 0, 9]), torch.tensor([1, 2, 0], dtype=torch.uint8), torch.rand(2, 3, generator=g), 8)
    sync = CacheSyncDelta(1, 2, torch.tensor([7]), torch.rand(1, 3, generator=g), torch.tensor([3, 5]))
    down = SoftLabelRoundDownlink(3, torch.tensor([1, 2]), 0.05, 0.5, 11, 12, prev, torch.tensor([4, 0, 9]), sync, 2, {"indices": 20, "sync": 16})
    back = decode(encode([ClientTask(1, 2, down, None, None)]))[0].downlink  # type: ignore[arg-type]
    assert isinstance(back, SoftLabelRoundDownlink) and isinstance(back.previous, SoftLabelDownlink) and isinstance(back.sync, CacheSyncDelta)
    assert (back.round, back.lr, back.temperature, back.train_seed, back.distill_seed, back.hint, back.sizes) == (3, 0.05, 0.5, 11, 12, 2, {"indices": 20, "sync": 16})
    assert back.previous.bits == 8 and back.previous.signals.dtype == torch.uint8 and torch.equal(back.previous.soft_labels, prev.soft_labels)
    assert torch.equal(back.sync.store_soft_labels, sync.store_soft_labels) and back.sync.delete_indices.tolist() == [3, 5]
    report = SoftLabelReport(SoftLabelUplink(1, 3, torch.tensor([1, 2]), torch.rand(2, 3, generator=g), None, True), 0.25, 30, None, "ab12")
    got = decode(encode(ClientReply(1, report, None, 0.5, 1.5))).uplink
    assert isinstance(got.soft, SoftLabelUplink) and got.soft.send_indices is True and torch.equal(got.soft.soft_labels, report.soft.soft_labels)
    assert (got.train_loss, got.num_samples, got.distill_loss, got.rebuilt_digest) == (0.25, 30, None, "ab12")


def test_wire_refuses_unregistered_classes() -> None:
    class Evil:
        pass

    with pytest.raises(TypeError, match="cannot send a Evil"):
        encode({"x": Evil()})


METHODS = {
    "fedchill-scaffold-fedprox": {"temperature": {"policy": "fedchill"}, "algorithm": {"name": "scaffold"}, "objective": {"proximal_mu": 0.01}},
    "pa3fed-flexchill": {"temperature": {"policy": "fixed", "value": 0.5}, "algorithm": {"name": "pa3fed", "mode": "always"}},
    # PA3Fed over SCAFFOLD on the nodes: test_fedchill_decay_on_the_nodes_equals_chillfl_runtime (5 rounds, FedChill's T too)
    # SCAFFOLD's c_i, PA3Fed's scores, FedBN's own BN entries and MOON's previous models live on the nodes (chillfl.flower.state)
    "fedbn-flexchill": {"temperature": {"policy": "fixed", "value": 0.5}, "algorithm": {"name": "fedbn"}, "model": {"name": "flexchill_cnn", "batch_norm": True}},
    "moon-fedchill": {"temperature": {"policy": "fedchill"}, "algorithm": {"name": "moon", "mu": 1.0}},
    # personalising client halves on the nodes: Ditto's v_k, FedRep's head (head then body jobs, frozen keys)
    "ditto": {"algorithm": {"name": "ditto"}},
    "fedrep": {"algorithm": {"name": "fedrep", "head_epochs": 2}},
}


CLIENT_MODELS = {"fedbn-flexchill"}
"""Methods whose simulation here also checks ``checkpoint.client_models`` (as
:func:`TestOnSharedRay.test_client_models_come_back_from_the_nodes_as_the_sequential_executor_writes_them` does for FedPer):
one simulation checks both, where two each started Flower and Ray (a FedBN run with and one without client models)."""

SCARLET = {"method": "scarlet", "public_size": 60, "subset_size": 40, "cache_duration": 3, "server_epochs": 1, "distill_batch_size": 32}


PERSONAL = {"fedper": {"algorithm": {"name": "fedper"}}}
"""FedPer's clients' models; FedBN's are checked in its simulation (:data:`CLIENT_MODELS`, :data:`OWN_RAY`), the soft-label
protocol's (SCARLET) in :meth:`TestOnSharedRay.test_scarlet_simulation_equals_chillfl_runtime_and_uses_the_cache`: one
simulation each, not two."""


OWN_RAY = "fedbn-flexchill"
"""The method whose simulation starts and stops a Ray of its own, as a user's ``run_simulation`` does: that Ray's sessions
go with it and ``PYTHONPATH`` is given back. The other simulations run on :class:`TestOnSharedRay`'s one Ray and actors (``shared_actors``)."""


def _simulation_equals_runtime(method: str, tmp_path: Path) -> None:
    """``METHODS[method]`` under Flower's simulation (2 SuperNodes) gives chillfl's records, every float exactly."""
    parts = {**METHODS[method], **({"checkpoint": {"client_models": True}} if method in CLIENT_MODELS else {})}
    config = _config(tmp_path, **parts)
    own = run_experiment(_config(tmp_path / "own", **parts), progress=False) if method in CLIENT_MODELS else None
    expected = own.records if own is not None else run_experiment(config, write=False, progress=False).records
    out = run_simulation(config, num_supernodes=2)  # 2 SuperNodes: clients 0, 2 on one, 1, 3 on the other
    assert [r["round"] for r in out.records] == [1, 2]
    assert out.records == expected  # every metric, floats compared exactly
    assert Path(out.folder).name == "flower" and (Path(out.folder) / "metrics.jsonl").is_file()
    if own is not None:  # the nodes sent their clients' states back: the file is the sequential executor's, byte for byte
        _assert_client_models_as_written(own, Path(out.folder))


def test_simulation_starts_and_stops_its_own_ray_and_equals_chillfl_runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With no Ray up, ``run_simulation`` starts a local one and stops it: its sessions (logs, sockets) go with it and
    the driver's ``PYTHONPATH``, which Flower's Ray backend overwrites, is given back."""
    from chillfl.executors.ray_executor import import_ray

    ray = import_ray()
    assert not ray.is_initialized()  # not inside TestOnSharedRay's Ray
    ray_tmp = Path(tempfile.mkdtemp(prefix="f8t", dir="/tmp"))  # short: Ray's socket paths
    monkeypatch.setenv("RAY_TMPDIR", str(ray_tmp))
    monkeypatch.setenv("PYTHONPATH", "/kept")
    try:
        _simulation_equals_runtime(OWN_RAY, tmp_path)
        assert os.environ["PYTHONPATH"] == "/kept"  # Flower's Ray backend wrote the driver's sys.path there: given back
        assert [p.name for p in ray_tmp.iterdir()] == []  # the simulation's Ray sessions (logs, sockets) went with it
        assert not ray.is_initialized()
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)


class TestOnSharedRay:
    """Simulations on one Ray and one pool of Flower's actors (``shared_actors``, tests/private_net/shared_flower.py): each
    still starts Flower's own simulation (SuperNodes, the ServerApp, every node's ``Context.state``), and its clients run
    on those actors."""

    @pytest.fixture(autouse=True)
    def on_the_shared_actors(self, shared_actors: SharedActors) -> Iterator[None]:
        """Each test's simulations took the shared pool, and its actors ran their clients; no actor was added or lost."""
        lent, jobs = shared_actors.lent, shared_actors.jobs
        yield
        assert shared_actors.lent > lent and shared_actors.jobs > jobs  # the pool served this test's simulation
        assert shared_actors.pool.num_actors == shared_actors.actors and len(shared_actors.pool.pool) == shared_actors.actors  # every actor back, idle

    @pytest.mark.parametrize("method", sorted(set(METHODS) - {OWN_RAY}))
    def test_simulation_equals_chillfl_runtime(self, method: str, tmp_path: Path) -> None:
        _simulation_equals_runtime(method, tmp_path)

    def test_fedchill_decay_on_the_nodes_equals_chillfl_runtime(self, tmp_path: Path) -> None:
        """FedChill's whole state on the nodes (Eq. 7 from each client's own labels, Algorithm 1 with patience 1), with
        PA3Fed over SCAFFOLD (s_i and c_i on the nodes too): 4 clients on 2 SuperNodes, 5 rounds; T decays, records equal."""
        config = _config(
            tmp_path, temperature={"policy": "fedchill", "patience": 1, "gamma": 0.8}, algorithm={"name": "pa3fed", "base": "scaffold", "mode": "always"},
            federation={"num_clients": 4, "clients_per_round": 4, "rounds": 5},
        )
        expected = run_experiment(config, write=False, progress=False).records
        out = run_simulation(config, num_supernodes=2)
        assert out.records == expected  # every metric, floats compared exactly: temperatures, alphas, models
        first, last = out.records[0]["temperatures"], out.records[-1]["temperatures"]
        assert sorted(first) == ["0", "1", "2", "3"] and len(set(first.values())) == 4  # per-client Eq. 7 starts
        assert any(last[c] < first[c] for c in first)  # Algorithm 1 decayed some client's T on its node

    @pytest.mark.parametrize("method", sorted(PERSONAL))
    def test_client_models_come_back_from_the_nodes_as_the_sequential_executor_writes_them(self, method: str, tmp_path: Path) -> None:
        """``checkpoint.client_models`` under Flower: after the last round each node sends its clients' states to the server
        (a ``query.states`` message), which writes ``client_models.safetensors`` byte for byte as chillfl's runtime does."""
        parts = {**PERSONAL[method], "checkpoint": {"client_models": True}, "executor": "sequential"}
        expected = run_experiment(_config(tmp_path / "own", **parts), progress=False)
        out = run_simulation(_config(tmp_path / "flower", **parts), num_supernodes=2)  # clients 0, 2 on one node, 1, 3 on the other
        assert out.records == expected.records
        _assert_client_models_as_written(expected, Path(out.folder))

    def test_scarlet_simulation_equals_chillfl_runtime_and_uses_the_cache(self, tmp_path: Path) -> None:
        federation = {"num_clients": 4, "clients_per_round": 3, "rounds": 3}
        # FedChill's state on the nodes too: the soft-label records hold the temperature each round's client trained at;
        # the clients' models come back from the nodes after the last round (checkpoint.client_models, the soft-label protocol's)
        parts = {"distillation": SCARLET, "federation": federation, "name": "scarlet", "temperature": {"policy": "fedchill"}, "checkpoint": {"client_models": True}}
        config = _config(tmp_path, **parts)
        own = run_experiment(_config(tmp_path / "own", **parts), progress=False)
        expected = own.records
        out = run_simulation(config, num_supernodes=2)  # clients 0, 2 share one node's Context.state, 1, 3 the other's
        _assert_client_models_as_written(own, Path(out.folder))
        assert [r["round"] for r in out.records] == [1, 2, 3]
        assert out.records == expected  # every metric, floats compared exactly (server model, local_acc, bytes, cache)
        assert all(sorted(r["temperatures"]) == sorted(str(c) for c in r["clients"]) for r in out.records)  # the round's clients
        # the cache is really used: 40 of 60 public indices a round overlap, so rounds 2 and 3 request fewer rows than drawn
        assert [r["public_drawn"] for r in out.records] == [40, 40, 40]
        assert all(r["public_requested"] < 40 and r["cache_hit_ratio"] > 0 for r in out.records[1:])
        assert all(r["bytes_detail"].get("down.cache_signals", 0) > 0 for r in out.records[1:])
        # every sampled client rebuilt round t-1's soft-labels from the cache kept on its node, checked by digest
        assert [r["sync_verified"] for r in out.records] == [0, 3, 3]
        # 3 of 4 sampled a round: some client missed a round and caught up with a non-empty sync delta
        assert sum(r["bytes_detail"].get("down.sync", 0) for r in out.records) > 0


def _assert_client_models_as_written(own: Any, folder: Path) -> None:
    """``client_models.safetensors`` of the Flower run in ``folder`` is the one chillfl's runtime wrote (``own``), byte for byte."""
    assert own.folder is not None and len(own.client_states) == 4
    assert (folder / "client_models.safetensors").read_bytes() == (own.folder / "client_models.safetensors").read_bytes()


def test_client_state_round_trips_through_context_state() -> None:
    from flwr.app import RecordDict

    g = torch.Generator().manual_seed(1)
    cache = ClientCache(3)
    cache.apply_sync(CacheSyncDelta(3, 2, torch.tensor([5, 1]), torch.rand(2, 4, generator=g), torch.zeros(0, dtype=torch.long)))
    model = {"fc.weight": torch.randn(4, 3, generator=g), "fc.bias": torch.randn(4, generator=g, dtype=torch.float64), "steps": torch.tensor(9)}
    records = RecordDict()
    save_client_state(records, 3, ClientState(model, cache, StoredState({"in_distribution": torch.tensor([True, False, True])})))
    save_client_state(records, 10, ClientState({"w": torch.ones(2)}))  # no cache, no method state
    assert held_clients(records) == [3, 10] and load_client_state(records, 4) is None
    back = load_client_state(records, 3)
    assert back is not None and back.cache is not None and back.method is not None
    assert list(back.model) == list(model)  # key order kept
    assert all(back.model[k].dtype == v.dtype and torch.equal(back.model[k], v) for k, v in model.items())
    assert back.cache.synced_round == 2 and sorted(back.cache.entries()) == [1, 5]
    assert all(torch.equal(back.cache.entries()[i], cache.entries()[i]) for i in (1, 5))
    assert back.method.to_tensors()["in_distribution"].tolist() == [True, False, True]
    plain = load_client_state(records, 10)
    assert plain is not None and plain.cache is None and plain.method is None and torch.equal(plain.model["w"], torch.ones(2))


def test_server_store_keeps_no_client_state() -> None:
    store = NodeStore()
    store.save(2, OnNode(7))
    assert store.load(2) is None and store.ids() == [] and store.where == {2: OnNode(7)}
    with pytest.raises(TypeError, match="must stay on its node"):
        store.save(1, ClientState({"w": torch.ones(1)}))


def test_bad_soft_label_combinations_are_one_line_config_errors(tmp_path: Path) -> None:
    config = _config(tmp_path, distillation=SCARLET, algorithm={"name": "fedprox", "mu": 0.01})
    with pytest.raises(ConfigError) as info:
        run_simulation(config, num_supernodes=1)  # the protocol's own check, raised before Flower starts
    assert str(info.value).startswith("algorithm.name: ") and "\n" not in str(info.value)
    config = _config(tmp_path, prototypes={"method": "fedproto"})
    with pytest.raises(ConfigError) as info:
        run_simulation(config)
    assert str(info.value).startswith("prototypes: ") and "\n" not in str(info.value)


def test_without_flwr_one_line_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "flwr", None)
    with pytest.raises(ConfigError, match=r"^flower: chillfl.flower needs Flower, which is not installed here: pip install 'chillfl\[flower\]'$"):
        server_app()


# --- deployment: a SuperLink and two SuperNodes on 127.0.0.1 with TLS, `flwr run` ---------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _certificates(folder: Path) -> None:
    """A CA and a server certificate for 127.0.0.1 signed by it (openssl CLI)."""
    def ssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)

    ssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "1", "-subj", "/CN=chillfl-test-ca")
    ssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1")
    (folder / "san.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    ssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-out", "server.pem", "-days", "1", "-extfile", "san.cnf")


def _wait_log(log: Path, text: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while text not in (log.read_text(errors="replace") if log.exists() else ""):
        assert time.monotonic() < deadline, f"no {text!r} in {log.name}: {log.read_text(errors='replace')[-2000:] if log.exists() else ''}"
        time.sleep(0.2)


def _bin(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def _app(tmp_path: Path, config: Any) -> Path:
    """A Flower app folder whose run config names ``config`` (written as TOML next to it)."""
    import tomli_w

    def plain(d: dict[str, Any]) -> dict[str, Any]:
        return {k: plain(v) if isinstance(v, dict) else v for k, v in d.items() if v is not None and v != {}}

    toml = tmp_path / f"{config.name}.toml"
    toml.write_text(tomli_w.dumps(plain(config.to_dict())))
    app = tmp_path / f"app-{config.name}"
    app.mkdir()
    (app / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n\n'
        f'[project]\nname = "chillfl-{config.name}"\nversion = "1.0.0"\ndescription = "chillfl on Flower"\nlicense = "Apache-2.0"\ndependencies = []\n\n'
        '[tool.hatch.build.targets.wheel]\npackages = ["."]\n\n'
        '[tool.flwr.app]\npublisher = "chillfl"\n\n'
        '[tool.flwr.app.components]\nserverapp = "chillfl.flower.deploy:server"\nclientapp = "chillfl.flower.deploy:client"\n\n'
        f'[tool.flwr.app.config]\nconfig = "{toml}"\noverrides = ""\nmin-nodes = 2\n'
    )
    return app




@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI to make the test certificates")
def test_deployment_with_tls_two_supernodes_and_flwr_run(tmp_path: Path) -> None:
    """FedChill, then SCARLET with its cache, each started with ``flwr run`` on the same SuperLink and SuperNodes."""
    _certificates(tmp_path)
    fedchill = _config(tmp_path, temperature={"policy": "fedchill"}, federation={"num_clients": 4, "clients_per_round": 2, "rounds": 2}, name="deployed")
    # SCARLET needs 3 rounds: round 3 is the first to rebuild soft-labels from entries a client cached in an earlier message
    scarlet = _config(tmp_path, distillation=SCARLET, federation={"num_clients": 4, "clients_per_round": 3, "rounds": 3}, name="deployed-scarlet")
    apps = {c.name: _app(tmp_path, c) for c in (fedchill, scarlet)}
    port = _free_port()
    home = tmp_path / "flwr-home"
    (home).mkdir()
    (home / "config.toml").write_text(f'[superlink]\ndefault = "test"\n\n[superlink.test]\naddress = "127.0.0.1:{port}"\nroot-certificates = "{tmp_path / "ca.crt"}"\n')
    env = {**os.environ, "FLWR_HOME": str(home), "RAY_USAGE_STATS_ENABLED": "0"}
    procs: list[subprocess.Popen[bytes]] = []

    def start(name: str, *args: str) -> subprocess.Popen[bytes]:
        log = (tmp_path / f"{name}.log").open("wb")
        proc = subprocess.Popen([_bin(args[0]), *args[1:]], stdout=log, stderr=subprocess.STDOUT, env=env, cwd=tmp_path, start_new_session=True)
        procs.append(proc)
        return proc

    try:
        start("superlink", "flower-superlink", "--ssl-ca-certfile", "ca.crt", "--ssl-certfile", "server.pem", "--ssl-keyfile", "server.key",
              "--host", "127.0.0.1", "--port", str(port), "--disable-runtime-dependency-installation")
        _wait_log(tmp_path / "superlink.log", f"Uvicorn running on https://127.0.0.1:{port}")
        for i in range(2):
            start(f"node{i}", "flower-supernode", "--root-certificates", "ca.crt", "--superlink", f"127.0.0.1:{port}", "--port", str(_free_port()),
                  "--node-config", f"partition-id={i} num-partitions=2")
        # a SuperNode without the CA certificate cannot verify the SuperLink: the TLS handshake fails and it exits
        refused = start("refused", "flower-supernode", "--superlink", f"127.0.0.1:{port}", "--port", str(_free_port()), "--max-retries", "1", "--max-wait-time", "5")
        # one speaking plain HTTP is refused by the TLS SuperLink (both checked after the runs, while these two give up)
        plain_http = start("plain", "flower-supernode", "--insecure", "--superlink", f"127.0.0.1:{port}", "--port", str(_free_port()), "--max-retries", "1", "--max-wait-time", "5")
        for i in range(2):
            _wait_log(tmp_path / f"node{i}.log", "SuperNode ID")
        for config in (fedchill, scarlet):
            run = subprocess.run([_bin("flwr"), "run", str(apps[config.name]), "test"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
            assert run.returncode == 0 and "Successfully started run" in run.stdout, run.stdout + run.stderr
            folder = tmp_path / "out" / config.name
            deadline = time.monotonic() + 240
            while not (folder / "summary.json").exists():
                assert time.monotonic() < deadline, (tmp_path / "superlink.log").read_text(errors="replace")[-3000:]
                assert all(p.poll() is None for p in procs[:3]), "a Flower process died"
                time.sleep(0.5)
            expected = run_experiment(config, write=False, progress=False).records
            got = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
            assert got == json.loads(json.dumps(expected))  # through JSON, as written: every metric bit for bit
        assert [r["sync_verified"] for r in got] == [0, 3, 3] and got[2]["cache_hit_ratio"] > 0  # SCARLET's caches persisted on the nodes
        assert refused.wait(timeout=120) != 0 and "CERTIFICATE_VERIFY_FAILED" in (tmp_path / "refused.log").read_text(errors="replace")
        assert plain_http.wait(timeout=120) != 0
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(session_pids(p.pid) for p in procs):
            time.sleep(0.2)
        left = {p.args[0] if isinstance(p.args, list) else p.args: session_pids(p.pid) for p in procs if session_pids(p.pid)}
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert not left, f"Flower processes outlived SIGTERM by 20 s: {left}"
