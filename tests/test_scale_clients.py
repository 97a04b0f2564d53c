"""Scale: 100,000 registered clients cost what the round's sample costs (issue 12).

Memory is checked by counting (bytes of index arrays, clients with state,
``tracemalloc``'s traced Python/NumPy allocations), never by wall-clock time
or process RSS, so nothing here is flaky.
"""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

import numpy as np
import pytest
import torch

from chillfl.aggregation.client_states import ClientParams
from chillfl.config import load_config
from chillfl.data.client_rows import ClientRows
from chillfl.data.datasets import ArrayDataset
from chillfl.data.federated import FederatedData
from chillfl.engine.loop import run_rounds
from chillfl.executors.chunk_steps import gather, shared_pool
from chillfl.experiment import build_experiment, build_protocol, make_executor
from chillfl.models.assign import plan_models
from chillfl.runner import rounds_for
from chillfl.protocols.parameters import ParamStore
from chillfl.temperature.fedchill import FedChillOptions, FedChillPolicy, initial_temperature

POOL, PER_CLIENT, FEATURES, CLASSES = 2000, 20, 8, 4


def pool_dataset() -> ArrayDataset:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(POOL, FEATURES, generator=gen)
    y = torch.randint(0, CLASSES, (POOL,), generator=gen)
    return ArrayDataset("pool", x, y, x[:50].clone(), y[:50].clone(), CLASSES)


def federation(num_clients: int, rows: str = "tiled", dataset: ArrayDataset | None = None) -> FederatedData:
    dataset = dataset or pool_dataset()
    tiled = ClientRows.tiled(num_clients, PER_CLIENT, POOL)
    train: Any = tiled if rows == "tiled" else [tiled[c] for c in range(num_clients)]
    evals: Any = ClientRows.empty(num_clients) if rows == "tiled" else [np.zeros(0, dtype=np.int64)] * num_clients
    return FederatedData(dataset, train, evals, None, np.zeros(0, dtype=np.int64), seed=0)


def config(num_clients: int, **extra: Any) -> Any:
    overrides = {
        "seed": 3,
        "executor": "sequential",
        "federation.num_clients": num_clients,
        "federation.clients_per_round": 6,
        "federation.rounds": 2,
        "client.epochs": 1,
        "client.batch_size": 10,
        "client.lr": 0.1,
        "eval.clients": "none",
        "eval.client_split": "none",
        "model": {"name": "mlp", "hidden": [16]},
        **extra,
    }
    return load_config(None, overrides)


def run(num_clients: int, rows: str = "tiled", **extra: Any) -> list[dict[str, Any]]:
    exp = build_experiment(config(num_clients, **extra), data=federation(num_clients, rows))
    return list(rounds_for(exp)(exp))


# ---------------------------------------------------------------- ClientRows


def test_tiled_rows_by_hand() -> None:
    # pool 10 rows, 3 per client: usable span 9 = 10 - 10 % 3; starts (c * 3) mod 9 = 0, 3, 6, 0, 3
    rows = ClientRows.tiled(5, 3, 10)
    assert len(rows) == 5
    assert [r.tolist() for r in rows] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [0, 1, 2], [3, 4, 5]]
    assert rows.span(4) == slice(3, 6)
    assert rows.lengths().tolist() == [3] * 5
    assert rows.nbytes() == 5 * 16  # starts and lengths, 8 bytes each per client


def test_csr_rows_match_the_lists_they_came_from() -> None:
    lists = [np.array([4, 1, 7]), np.zeros(0, dtype=np.int64), np.array([2])]
    rows = ClientRows.from_lists(lists)
    assert [r.tolist() for r in rows] == [[4, 1, 7], [], [2]]
    assert rows.span(0) is None and rows[-1].tolist() == [2]
    assert [r.tolist() for r in rows[1:]] == [[], [2]]
    with pytest.raises(IndexError):
        rows[3]


def test_class_counts_without_a_loop_by_hand() -> None:
    labels = np.array([0, 1, 1, 2, 0, 2])
    # client 0: rows 0..2 -> labels 0, 1, 1; client 1: rows 3..5 -> 2, 0, 2; client 2: rows 1..2 -> 1, 1
    ranges = ClientRows.ranges(np.array([0, 3, 1]), np.array([3, 3, 2]))
    expected = [[1, 2, 0], [1, 0, 2], [0, 2, 0]]
    assert ranges.class_counts(labels, 3).tolist() == expected
    csr = ClientRows.from_lists([np.array([0, 1, 2]), np.array([3, 4, 5]), np.array([1, 2])])
    assert csr.class_counts(labels, 3).tolist() == expected
    assert ClientRows.empty(2).class_counts(labels, 3).tolist() == [[0, 0, 0], [0, 0, 0]]


def test_bad_rows_are_refused() -> None:
    with pytest.raises(ValueError):
        ClientRows(starts=np.array([0]), lengths=np.array([-1]))
    with pytest.raises(ValueError):
        ClientRows(flat=np.array([1, 2]), offsets=np.array([0, 3]))
    with pytest.raises(ValueError):
        ClientRows.tiled(3, 5, 4)


def test_federated_data_gives_views_and_the_same_counts() -> None:
    tiled, lists = federation(120), federation(120, "lists")
    x, y = tiled.client_train(101)  # rows (101 * 20) mod 2000 = 20 .. 39
    assert x.data_ptr() == tiled.dataset.x_train[20].data_ptr() and len(y) == PER_CLIENT
    assert torch.equal(x, lists.client_train(101)[0]) and torch.equal(y, lists.client_train(101)[1])
    assert np.array_equal(tiled.class_counts(), lists.class_counts())


# ---------------------------------------------------------------- 100,000 clients


def test_a_round_with_compact_rows_is_bitwise_the_round_with_lists() -> None:
    a, b = run(300, "tiled"), run(300, "lists")
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_100k_registered_clients_build_and_run_deterministically() -> None:
    first, second = run(100_000), run(100_000)
    assert json.dumps(first, sort_keys=True) == json.dumps(second, sort_keys=True)
    assert len(first) == 2 and all(len(r["clients"]) == 6 for r in first)
    assert max(max(r["clients"]) for r in first) >= 1000  # the sample really reaches beyond the first 1,000 ids


def test_building_100k_clients_allocates_a_few_bytes_per_client() -> None:
    # tracemalloc counts Python objects and NumPy buffers (deterministic, unlike RSS). A list of
    # 100,000 index arrays alone traces ~30 MB here; ClientRows.tiled is 16 B per client.
    dataset = pool_dataset()

    def traced_peak(num_clients: int, **extra: Any) -> int:
        tracemalloc.start()
        try:
            exp = build_experiment(config(num_clients, **extra), data=federation(num_clients, dataset=dataset))
            assert exp.data.num_clients == num_clients
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    more = 99_000
    # T = 1: train starts + lengths (16 B), empty eval rows (16 B), the model plan's tuple (8 B)
    assert traced_peak(100_000) - traced_peak(1000) < more * 64
    # FedChill reads every client's class counts ([clients, 4] int64) and derives h_n from them:
    # a handful of [clients, classes] float64 temporaries, still no Python object per client
    fedchill = {"temperature.policy": "fedchill", "temperature.decay": False}
    assert traced_peak(100_000, **fedchill) - traced_peak(1000, **fedchill) < more * (64 + 10 * 8 * CLASSES)


def test_homogeneous_model_plan_does_no_per_client_work() -> None:
    plan = plan_models({"name": "mlp"}, 100_000)
    assert plan.archs == ({"name": "mlp"},) and len(plan.arch_of) == 100_000 and set(plan.arch_of) == {0}
    groups = {"name": "mlp", "groups": [{"clients": "0-1", "name": "cnn"}]}
    assert plan_models(groups, 4).arch_of == (1, 1, 0, 0)


# ---------------------------------------------------------------- FedChill state: none on the server, O(clients seen) in the store

COUNTS = np.array([[10, 0], [5, 5], [8, 2]])


def test_fedchill_server_keeps_no_client_state_and_clients_keep_theirs() -> None:
    policy = FedChillPolicy(FedChillOptions(patience=1, gamma=0.5, normalisation="max"), COUNTS)
    half = policy.client_half(2)
    h = policy.initial_heterogeneity
    y1 = torch.tensor([0] * 5 + [1] * 5)
    # a client without state starts at Eq. 7 from its own h_n, the same float as the federation's row
    assert half.temperature({}, policy.temperature(1, 0), y1) == initial_temperature(float(h[1]))
    store = ParamStore()
    store.save(2, half.finish({}, 0.3, 0.5))
    store.save(0, half.finish({}, 1.0, None))  # no accuracy: nothing to keep (the server stops such a run)
    policy.observe(2, 0, 0.5)
    assert policy.state_dict() == {} and store.ids() == [2]  # a checkpoint grows with the clients that decayed, on their side


# ---------------------------------------------------------------- per-client tables: compact, off the device, O(clients with state)


def test_client_params_store_copies_flat_and_keeps_layouts() -> None:
    stacked = torch.arange(2 * 3 * 4, dtype=torch.float32).reshape(2, 4, 3).permute(0, 2, 1)  # rows: [3, 4], transposed layout
    row = stacked[1]
    store = ClientParams()
    store[7] = {"w": row, "b": torch.tensor([1.5, -2.0]), "n": torch.tensor(3)}
    back = store[7]
    assert torch.equal(back["w"], row) and back["w"].stride() == row.stride() == (1, 3)
    assert torch.equal(back["b"], torch.tensor([1.5, -2.0])) and back["n"].dtype == torch.int64 and int(back["n"]) == 3
    stacked.zero_()  # the store holds a copy, not a view of the executor's stacked chunk
    assert float(store[7]["w"].sum()) == float(sum(range(12, 24)))
    # one flat buffer per dtype: 12 + 2 float32 (56 B) and one int64 (8 B)
    assert {k: v.numel() for k, v in store.flat(7).items()} == {"float32": 14, "int64": 1}
    assert store.nbytes() == 14 * 4 + 8 and len(store) == 1 and 7 in store and 8 not in store
    del store[7]
    assert len(store) == 0 and store.get(7) is None


def test_scaffold_keeps_c_i_only_for_sampled_clients_of_100k() -> None:
    exp = build_experiment(config(100_000, **{"algorithm": {"name": "scaffold"}}), data=federation(100_000))
    protocol = build_protocol(exp)
    records = list(run_rounds(protocol, make_executor(exp, protocol), seed=3, num_clients=100_000, clients_per_round=6, rounds=2))
    seen = {c for r in records for c in r["clients"]}
    controls = protocol.store.states  # type: ignore[attr-defined]  # each c_i is its client's own state
    assert set(controls) == seen and len(seen) <= 12
    # mlp 8 -> 16 -> 4: 8*16 + 16 + 16*4 + 4 = 212 float32 per client, nothing else
    assert controls.nbytes() == len(seen) * 212 * 4
    assert all(v.device.type == "cpu" for bufs in controls._buffers.values() for v in bufs.values())
    state = protocol.state_dict()
    assert set(state["clients"]) == {str(c) for c in seen} and list(state["aggregator"]) == ["control"]
    assert len(state["ledger"]["clients"]) == len(seen)


def test_batches_of_clients_sharing_one_pool_are_gathered_in_one_call() -> None:
    pool = torch.arange(40 * 3, dtype=torch.float32).reshape(40, 3)
    labels = torch.arange(40)
    views = [pool[8:16], pool[0:8], pool[32:40]]  # three clients: row ranges of one pool
    rows = [torch.tensor([7, 0]), torch.tensor([1, 1]), torch.tensor([3, 5])]
    shared = shared_pool(views)
    assert shared is not None and shared[1] == [8, 0, 32]
    expected = torch.stack([v[r] for v, r in zip(views, rows)])
    assert torch.equal(gather(views, rows), expected)
    assert gather([labels[8:16], labels[0:8], labels[32:40]], rows).tolist() == [[15, 8], [1, 1], [35, 37]]
    copies = [v.clone() for v in views]  # own storages (noisy or gathered clients): one call per client
    assert shared_pool(copies) is None and torch.equal(gather(copies, rows), expected)
