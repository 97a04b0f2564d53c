"""Checkpoint/resume: every stateful server-side part saves and restores bitwise.

Each part is driven a few rounds, saved with ``state_dict``, written and read
back through :mod:`chillfl.storage.checkpoint`, loaded into a fresh object with
the same constructor arguments, and then the original and the restored object
are driven through the same further calls: every output must be identical
bit for bit (a resumed run is the run that never stopped).
"""

from __future__ import annotations

import json
import math
import os
import struct
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import torch

from chillfl.aggregation.base import ClientResult, FedAvg
from chillfl.aggregation.fedbn import FedBN
from chillfl.aggregation.fedmut import FedMut, FedMutOptions
from chillfl.aggregation.fednova import FedNova, FedNovaOptions
from chillfl.aggregation.fedopt import FedOpt, FedOptOptions
from chillfl.aggregation.fedprox import FedProx, FedProxOptions
from chillfl.aggregation.moon import Moon, MoonOptions
from chillfl.aggregation.pa3fed import PA3Fed, PA3FedOptions
from chillfl.aggregation.scaffold import Scaffold, ScaffoldOptions
from chillfl.aggregation.vrl_sgd import VRLSGD, VRLSGDOptions
from chillfl.protocols.softlabels import CacheSignal, ClientCache, ServerCache
from chillfl.storage.checkpoint import read_state, write_state
from chillfl.engine.ledger import CommunicationLedger
from chillfl.errors import ConfigError
from chillfl.protocols.parameters import ParamStore
from chillfl.temperature.base import ConstantTemperature
from chillfl.temperature.fedchill import FedChillOptions, FedChillPolicy
from method_round import Clients

# ------------------------------------------------------------------ helpers


def bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bytes of a tensor, so NaN == NaN and -0.0 != 0.0 (torch.equal compares values)."""
    return t.detach().cpu().contiguous().reshape(-1).view(torch.uint8)


def assert_same(a: Any, b: Any, where: str = "") -> None:
    """Bitwise equality of nested states/outputs: same types, same keys in the same order, same bytes."""
    assert type(a) is type(b), f"{where}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape, f"{where}: {a.dtype}{tuple(a.shape)} != {b.dtype}{tuple(b.shape)}"
        assert torch.equal(bits(a), bits(b)), f"{where}: tensors differ"
    elif isinstance(a, dict):
        assert list(a) == list(b), f"{where}: keys {list(a)} != {list(b)}"
        for k in a:
            assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), f"{where}: lengths {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, float):
        assert struct.pack("<d", a) == struct.pack("<d", b), f"{where}: {a!r} != {b!r}"
    elif hasattr(a, "__dataclass_fields__"):
        for name in a.__dataclass_fields__:
            assert_same(getattr(a, name), getattr(b, name), f"{where}.{name}")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def assert_contract(node: Any, where: str = "") -> None:
    """The state contract: dicts with str keys, lists, tensors, int/float/str/bool/None leaves."""
    if isinstance(node, dict):
        for k, v in node.items():
            assert isinstance(k, str), f"{where}: key {k!r} is not a string"
            assert_contract(v, f"{where}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            assert_contract(v, f"{where}[{i}]")
    else:
        assert node is None or isinstance(node, (torch.Tensor, bool, int, float, str)), f"{where}: {type(node).__name__}"


def through_disk(state: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    assert_contract(state)
    path = tmp_path / "state.safetensors"
    write_state(path, {"part": state})
    return read_state(path)["part"]


def restore(make: Callable[[], Any], original: Any, tmp_path: Path) -> Any:
    """A fresh object with ``original``'s state, which must also save back to the same state."""
    saved = original.state_dict()
    fresh = make()
    fresh.load_state_dict(through_disk(saved, tmp_path))
    assert_same(fresh.state_dict(), saved, "reloaded state")
    return fresh


# ------------------------------------------------------------------ aggregators

NUM_CLIENTS = 6
KEYS = ["w", "b"]  # trainable; "bn.*" are buffers
BN_KEYS = ["bn.running_mean", "bn.num_batches_tracked"]


def initial_params() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "w": torch.randn(3, 2, generator=g),
        "b": torch.randn(2, generator=g),
        "bn.running_mean": torch.randn(2, generator=g),
        "bn.num_batches_tracked": torch.tensor(0, dtype=torch.long),
    }


def client_result(cid: int, rnd: int, start: dict[str, torch.Tensor]) -> ClientResult:
    """A deterministic 'local training' outcome from the downlinked start model."""
    g = torch.Generator().manual_seed(1000 * rnd + cid)
    params = {k: (v + 0.1 * torch.randn(v.shape, generator=g) if v.is_floating_point() else v + 3) for k, v in start.items()}
    score, norm = torch.rand(2, generator=g, dtype=torch.float64).tolist()
    return ClientResult(
        client_id=cid,
        params=params,
        num_samples=1 + (cid * 7 + rnd) % 5,
        num_steps=1 + (cid + rnd) % 3,
        lr=0.05 * (1 + cid % 2),
        temperature=1.0,
        train_loss=0.0,
        report={"score": score, "grad_norm": norm},
    )


class Federation:
    """An aggregator and its clients' own states (what the protocol checkpoints: ``aggregator`` and ``clients``)."""

    def __init__(self, aggregator: Any) -> None:
        self.aggregator = aggregator
        self.clients = Clients(aggregator)

    def state_dict(self) -> dict[str, Any]:
        return {"aggregator": self.aggregator.state_dict(), "clients": self.clients.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.aggregator.load_state_dict(state["aggregator"])
        self.clients.load_state_dict(state["clients"])


def drive(fed: Any, global_params: dict[str, torch.Tensor], rounds: range) -> tuple[dict[str, torch.Tensor], list[Any]]:
    """The engine's calls for ``rounds``, both halves; returns the final model and every output along the way."""
    agg = fed.aggregator
    outputs: list[Any] = []
    g = dict(global_params)
    for rnd in rounds:
        gen = torch.Generator().manual_seed(rnd)
        ids = sorted(torch.randperm(NUM_CLIENTS, generator=gen)[:3].tolist())
        agg.begin_round(rnd, ids)
        results = []
        for cid in ids:
            start, context = fed.clients.start(cid, rnd, g)
            outputs += [start, context]
            results.append(client_result(cid, rnd, start))
        results = fed.clients.results(rnd, g, results)
        outputs.append([r.report for r in results])
        g = agg.aggregate(g, results, rnd)
        outputs.append(g)
        outputs.append(dict(agg.round_metrics()))
    return g, outputs


AGGREGATORS: dict[str, Callable[[], Any]] = {
    "fedavg": lambda: Federation(FedAvg()),
    "fedprox": lambda: Federation(FedProx(FedProxOptions(mu=0.1))),
    "fednova": lambda: Federation(FedNova(FedNovaOptions(momentum=0.9), KEYS)),
    "fedadam": lambda: Federation(FedOpt("adam", FedOptOptions(server_lr=0.1), KEYS)),
    "fedyogi": lambda: Federation(FedOpt("yogi", FedOptOptions(server_lr=0.1), KEYS)),
    "fedadagrad": lambda: Federation(FedOpt("adagrad", FedOptOptions(server_lr=0.1), KEYS)),
    "scaffold": lambda: Federation(Scaffold(NUM_CLIENTS, ScaffoldOptions(momentum=0.5), KEYS)),
    "vrl_sgd": lambda: Federation(VRLSGD(VRLSGDOptions(momentum=0.5), KEYS)),
    "fedmut": lambda: Federation(FedMut(7, FedMutOptions(alpha=2.0), KEYS)),
    "fedbn": lambda: Federation(FedBN(BN_KEYS)),
    "moon": lambda: Federation(Moon(MoonOptions(mu=1.0))),
    "pa3fed_fedavg": lambda: Federation(PA3Fed(FedAvg(), PA3FedOptions(mode="always", beta=0.5))),
    "pa3fed_scaffold": lambda: Federation(PA3Fed(Scaffold(NUM_CLIENTS, ScaffoldOptions(), KEYS), PA3FedOptions(delta=0.0))),
    "pa3fed_fedmut": lambda: Federation(PA3Fed(FedMut(7, FedMutOptions(alpha=2.0), KEYS), PA3FedOptions(mode="always"))),
}


@pytest.mark.parametrize("name", list(AGGREGATORS))
def test_aggregator_resumes_bitwise(name: str, tmp_path: Path) -> None:
    make = AGGREGATORS[name]
    original = make()
    g, _ = drive(original, initial_params(), range(0, 4))
    restored = restore(make, original, tmp_path)
    _, out_a = drive(original, g, range(4, 8))
    _, out_b = drive(restored, g, range(4, 8))
    assert_same(out_b, out_a, name)
    assert_same(restored.state_dict(), original.state_dict(), f"{name} after resume")


@pytest.mark.parametrize("name", list(AGGREGATORS))
def test_loading_a_fresh_state_is_a_no_op(name: str, tmp_path: Path) -> None:
    make = AGGREGATORS[name]
    untouched, loaded = make(), make()
    loaded.load_state_dict(through_disk(make().state_dict(), tmp_path))
    assert_same(drive(loaded, initial_params(), range(3))[1], drive(untouched, initial_params(), range(3))[1], name)


def test_state_layouts() -> None:
    states = {name: make().aggregator.state_dict() for name, make in AGGREGATORS.items()}
    assert states["fedavg"] == states["fedprox"] == states["fedbn"] == states["moon"] == {}
    assert list(states["scaffold"]) == ["control"]  # c_i is each client's own
    assert list(states["fedadam"]) == ["m", "v"]
    assert list(states["pa3fed_scaffold"]) == ["base", "previous_fgn"]  # s_i^{t-sigma} too
    for name, prefix in [("scaffold", "scaffold.c."), ("fedbn", "fedbn."), ("moon", "moon.prev."), ("pa3fed_scaffold", "pa3fed.score")]:
        fed = AGGREGATORS[name]()
        drive(fed, initial_params(), range(2))
        clients = fed.state_dict()["clients"]
        assert clients and all(isinstance(k, str) for k in clients)
        assert all(any(key.startswith(prefix) for key in state) for state in clients.values()), name


def test_fedmut_keeps_the_announced_round_across_a_checkpoint(tmp_path: Path) -> None:
    make = AGGREGATORS["fedmut"]
    original = make()
    g, _ = drive(original, initial_params(), range(2))
    original.aggregator.begin_round(2, [5, 1, 3])  # saved between the announcement and the downlinks
    restored = restore(make, original, tmp_path)
    for cid in (1, 3, 5):
        assert_same(restored.aggregator.downlink(cid, 2, g), original.aggregator.downlink(cid, 2, g), f"client {cid}")


def test_wrong_layout_is_refused() -> None:
    scaffold = AGGREGATORS["scaffold"]()
    drive(scaffold, initial_params(), range(1))
    with pytest.raises(ValueError, match="keys"):
        FedAvg().load_state_dict(scaffold.aggregator.state_dict())
    with pytest.raises(ValueError, match="keys"):
        FedOpt("adam").load_state_dict({"m": {}})


# ------------------------------------------------------------------ temperature policies

COUNTS = np.array([[30, 0, 2, 1, 0], [5, 5, 5, 5, 5], [0, 0, 0, 9, 1], [3, 8, 0, 0, 4]])
LABELS = [torch.cat([torch.full((int(n),), k, dtype=torch.long) for k, n in enumerate(row)]) for row in COUNTS]


class TemperatureRun:
    """A temperature policy as a run holds it: the server half, and each client's own state in the runtime's client store.

    FedChill's per-client state (T, A_n, counter) is the client's, so a resumed run restores it
    from the client store's checkpoint, not from the policy's (which holds none).
    """

    def __init__(self, policy: Any) -> None:
        self.policy = policy
        self.half = policy.client_half(COUNTS.shape[1])
        self.store = ParamStore()

    def step(self, cid: int, rnd: int, acc: float) -> float:
        state = self.store.load(cid) or {}
        t = self.policy.temperature(cid, rnd) if self.half is None else self.half.temperature(state, self.policy.temperature(cid, rnd), LABELS[cid])
        if self.half is not None:
            self.store.save(cid, self.half.finish(state, t, acc))
        self.policy.observe(cid, rnd, acc)
        return t

    def state_dict(self) -> dict[str, Any]:
        return {"policy": self.policy.state_dict(), "clients": self.store.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.load_state_dict(state["policy"])
        self.store.load_state_dict(state["clients"])


def drive_policy(run: TemperatureRun, rounds: range) -> list[Any]:
    out: list[Any] = []
    for rnd in rounds:
        gen = torch.Generator().manual_seed(rnd)
        for cid in sorted(torch.randperm(len(COUNTS), generator=gen)[:2].tolist()):
            # coarse accuracies repeat often, so stagnation counters and decays happen
            acc = math.nan if rnd == 1 else float(torch.randint(0, 4, (), generator=gen)) / 4
            out.append(run.step(cid, rnd, acc))
        out.append({cid: run.store.load(cid) for cid in sorted(run.store.ids())})
    return out


@pytest.mark.parametrize(
    "make",
    [
        lambda: TemperatureRun(FedChillPolicy(FedChillOptions(patience=1, gamma=0.8), COUNTS)),
        lambda: TemperatureRun(FedChillPolicy(FedChillOptions(compare="two_back", init=False, t_max=0.7), COUNTS)),
        lambda: TemperatureRun(FedChillPolicy(FedChillOptions(patience=1, normalisation="minmax"), COUNTS)),  # the server offers the start
        lambda: TemperatureRun(ConstantTemperature(0.05)),
    ],
    ids=["fedchill", "fedchill_two_back", "fedchill_minmax", "constant"],
)
def test_temperature_policy_resumes_bitwise(make: Callable[[], Any], tmp_path: Path) -> None:
    original = make()
    drive_policy(original, range(6))  # round 1 observes NaN: a non-finite float in the history
    restored = restore(make, original, tmp_path)
    assert_same(drive_policy(restored, range(6, 14)), drive_policy(original, range(6, 14)))
    assert_same(restored.state_dict(), original.state_dict())


def test_fedchill_state_layout() -> None:
    run = TemperatureRun(FedChillPolicy(FedChillOptions(), COUNTS))
    t = run.step(2, 0, 0.5)
    state = run.state_dict()
    assert state["policy"] == {}  # the server holds no client's temperature
    assert list(state["clients"]) == ["2"]  # only clients that have run a decay step
    entries = state["clients"]["2"]
    assert list(entries) == ["fedchill.temperature", "fedchill.history", "fedchill.counter"]
    assert entries["fedchill.temperature"].item() == t and entries["fedchill.history"].tolist() == [0.5] and entries["fedchill.counter"].item() == 0


# ------------------------------------------------------------------ soft-label cache


def drive_cache(server: ServerCache, clients: dict[int, ClientCache], rounds: range, seed: int) -> list[Any]:
    """Random draws of P^t with partial participation (catch-up syncs) and expiring entries."""
    rng = np.random.default_rng(seed)
    out: list[Any] = []
    for t in rounds:
        idx = sorted(rng.choice(30, size=8, replace=False).tolist())
        req = server.request(t, idx)
        fresh = torch.as_tensor(rng.random((req.numel(), 3)), dtype=torch.float32)
        upd = server.update(t, idx, fresh)
        out += [req, upd.soft_labels, upd.downlink]
        for k in sorted(rng.choice(len(clients), size=2, replace=False).tolist()):
            out.append(server.pending_sync_entries(k, t))
            delta = server.sync(k, t)
            clients[k].apply_sync(delta)
            out += [delta, clients[k].rebuild(upd.downlink), clients[k].entries()]
        out += [server.entries(), {i: server.stored_round(i) for i in range(30)}]
    return out


@pytest.mark.parametrize("on_expire", ["drop", "refresh"])
def test_cache_resumes_bitwise(on_expire: str, tmp_path: Path) -> None:
    def make_all() -> tuple[ServerCache, dict[int, ClientCache]]:
        return ServerCache(duration=3, on_expire=on_expire), {k: ClientCache(k) for k in range(5)}  # type: ignore[arg-type]

    server, clients = make_all()
    before = drive_cache(server, clients, range(1, 16), seed=0)
    signals = torch.cat([o.signals for o in before if hasattr(o, "signals")])
    assert (signals == CacheSignal.EXPIRED).any() or on_expire == "refresh"
    assert any(getattr(o, "num_entries", 0) > 0 for o in before)  # some catch-up deltas were not empty

    server_b = restore(lambda: ServerCache(duration=3, on_expire=on_expire), server, tmp_path)  # type: ignore[arg-type]
    clients_b = {k: restore(lambda k=k: ClientCache(k), c, tmp_path) for k, c in clients.items()}
    after_a = drive_cache(server, clients, range(16, 35), seed=1)
    after_b = drive_cache(server_b, clients_b, range(16, 35), seed=1)
    assert_same(after_b, after_a)
    assert_same(server_b.state_dict(), server.state_dict())


def test_cache_state_with_mixed_row_dtypes(tmp_path: Path) -> None:
    server = ServerCache(duration=5)
    server.update(1, [0, 1], torch.rand(2, 3))
    server.update(2, [0, 2], torch.rand(1, 3, dtype=torch.float64))  # 0 cached; 2 stored in float64
    restored = restore(lambda: ServerCache(duration=5), server, tmp_path)
    assert_same(restored.entries(), server.entries())
    assert isinstance(server.state_dict()["entries"]["values"], list)  # rows cannot be stacked
    fresh = torch.rand(1, 3)  # only index 3 is requested at round 3
    assert_same(restored.update(3, [1, 2, 3], fresh), server.update(3, [1, 2, 3], fresh))


def test_client_cache_refuses_another_clients_state() -> None:
    with pytest.raises(ValueError, match="client 1"):
        ClientCache(2).load_state_dict(ClientCache(1).state_dict())


# ------------------------------------------------------------------ communication ledger


def drive_ledger(ledger: CommunicationLedger, rounds: range) -> list[Any]:
    gen = torch.Generator().manual_seed(rounds.start)
    kinds = ["params", "soft_labels", "sync", "custom.kind"]
    seen = []
    for rnd in rounds:
        for _ in range(5):
            direction = "up" if float(torch.rand((), generator=gen)) < 0.5 else "down"
            kind = kinds[int(torch.randint(0, len(kinds), (), generator=gen))]
            cid = int(torch.randint(-1, 4, (), generator=gen))
            nbytes = int(torch.randint(0, 2**40, (), generator=gen)) * 2**20  # beyond 2**53
            ledger.record(rnd, direction, kind, nbytes, client_id=None if cid < 0 else cid)
        seen.append((ledger.round_totals(rnd), ledger.cumulative()))
    return [seen, ledger.latest_round, [ledger.client_totals(c) for c in range(4)]]


def test_ledger_resumes_bitwise(tmp_path: Path) -> None:
    original = CommunicationLedger()
    drive_ledger(original, range(0, 5))
    restored = restore(CommunicationLedger, original, tmp_path)
    assert max(original.state_dict()["total"].values()) > 2**53
    assert_same(drive_ledger(restored, range(5, 9)), drive_ledger(original, range(5, 9)))
    assert_same(restored.state_dict(), original.state_dict())


# ------------------------------------------------------------------ checkpoint format


def awkward_tree() -> dict[str, Any]:
    base = torch.arange(12, dtype=torch.float32)
    return {
        "nan": math.nan,
        "negative_nan": struct.unpack("<d", struct.pack("<Q", 0xFFF8000000000001))[0],
        "inf": math.inf,
        "-inf": -math.inf,
        "neg_zero": -0.0,
        "tiny": 5e-324,
        "third": 1 / 3,
        "none": None,
        "flag": True,
        "zero": 0,
        "huge": 2**70 + 1,
        "text": "é \"quoted\" \n",
        "empty": torch.empty(0),
        "empty_2d": torch.empty(0, 3, dtype=torch.float64),
        "scalar": torch.tensor(2.5, dtype=torch.float64),
        "bools": torch.tensor([True, False, True]),
        "ints": torch.tensor([-(2**62), 0, 2**62], dtype=torch.int64),
        "nan_tensor": torch.tensor([math.nan, -math.inf, -0.0]),
        "transposed": base.reshape(3, 4).t(),  # not contiguous
        "view_a": base[2:5],  # two views of one storage
        "view_b": base[4:10],
        "nested": {"": [[], {}, [1, [2.5, "x", None]]], "fc.weight": {"__tensor__": 1, "other": 2}},
        "empty_dict": {},
        "empty_list": [],
    }


def test_checkpoint_round_trips_an_awkward_tree(tmp_path: Path) -> None:
    tree = awkward_tree()
    path = tmp_path / "c.safetensors"
    write_state(path, tree)
    back = read_state(path)
    expected = {k: (v.contiguous() if isinstance(v, torch.Tensor) else v) for k, v in tree.items()}
    assert_same(back, expected)
    assert back["transposed"].stride() == tree["transposed"].stride() == (1, 4)  # dense: its layout comes back
    assert back["view_b"].is_contiguous()
    back["view_a"][1] = 100.0  # read-back tensors own their memory
    assert back["view_b"][0] == 4.0 and tree["view_a"][1] == 3.0


def test_checkpoint_rejects_values_that_would_not_come_back(tmp_path: Path) -> None:
    path = tmp_path / "c.safetensors"
    for bad in ({"t": (1, 2)}, {"a": np.zeros(2)}, {"n": np.float64(1.0)}, {"d": {1: 2}}):
        with pytest.raises(TypeError):
            write_state(path, bad)
    with pytest.raises(ValueError, match="reserved"):
        write_state(path, {"x": {"__float__": "nan"}})
    assert not path.exists() and not list(tmp_path.iterdir())


def test_checkpoint_write_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "c.safetensors"
    tmp = tmp_path / "c.safetensors.tmp"
    write_state(path, {"v": torch.ones(3), "round": 1})
    tmp.write_bytes(b"half a checkpoint from a crash")  # leftover of an interrupted write
    assert read_state(path)["round"] == 1

    def crash(src: Any, dst: Any) -> None:
        raise OSError("killed before the rename")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        write_state(path, {"v": torch.zeros(3), "round": 2})
    monkeypatch.undo()
    assert_same(read_state(path), {"v": torch.ones(3), "round": 1})  # the old file, whole

    write_state(path, {"v": torch.zeros(3), "round": 2})
    assert_same(read_state(path), {"v": torch.zeros(3), "round": 2})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.safetensors"]


def test_corrupt_or_missing_checkpoint_is_a_config_error(tmp_path: Path) -> None:
    import safetensors.torch

    good = tmp_path / "good.safetensors"
    write_state(good, {"v": torch.arange(100.0), "k": "x"})
    data = good.read_bytes()
    cases = {
        "missing": None,
        "truncated": data[: len(data) // 2],
        "tiny": b"\x01\x02",
        "garbage": os.urandom(256),
        "huge_header": struct.pack("<Q", 2**60) + data[8:],
        "foreign": safetensors.torch.save({"w": torch.zeros(2)}),
        "bad_json": safetensors.torch.save({"w": torch.zeros(2)}, metadata={"chillfl": "{not json"}),
        "bad_version": safetensors.torch.save({}, metadata={"chillfl": json.dumps({"version": 99, "tree": {}})}),
        "dangling_tensor": safetensors.torch.save({}, metadata={"chillfl": json.dumps({"version": 1, "tree": {"a": {"__tensor__": "7"}}})}),
    }
    for name, content in cases.items():
        path = tmp_path / f"{name}.safetensors"
        if content is not None:
            path.write_bytes(content)
        with pytest.raises(ConfigError) as info:
            read_state(path)
        assert info.value.field == "checkpoint" and "\n" not in str(info.value), name


def test_a_checkpoint_file_has_the_same_bytes_every_time_it_is_written() -> None:
    """Resume is checked byte for byte: safetensors orders several metadata entries at random (a hash map), so the
    skeleton, the run metadata and the checksum must travel as one entry."""
    from chillfl.storage.checkpoint import encode_state

    tree = {"w": torch.arange(6.0).reshape(2, 3).t(), "round": 3, "nested": {"x": torch.ones(2), "lr": 0.1}}
    run = {"config_sha256": "ab" * 32, "metrics_bytes": 120, "metrics_sha256": "cd" * 32}
    assert len({encode_state(tree, run) for _ in range(20)}) == 1
