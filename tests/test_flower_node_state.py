"""Per-client state on Flower's nodes, checked against chillfl's own client store without starting Flower.

A client's state (FedChill's temperature entries included) is kept in a plain
``flwr.app.RecordDict`` (what a SuperNode's ``Context.state`` is) next to chillfl's own
client store, over several rounds with partial participation; every value the client trains
with must be bit-identical, and the server must hold no client entry. The simulation-level
equality is in tests/private_net/test_flower.py.
"""

from __future__ import annotations

import dataclasses
import math
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("flwr")

from flwr.app import RecordDict  # noqa: E402
from plugin_modules import plugin_module  # noqa: E402

from chillfl.config import config_from_dict  # noqa: E402
from chillfl.engine.protocol import ClientData, ClientReply  # noqa: E402
from chillfl.errors import ConfigError  # noqa: E402
from chillfl.flower.apps import build_server, check_supported  # noqa: E402
from chillfl.protocols.parameters import ParamUplink  # noqa: E402
from chillfl.temperature.fedchill import FedChillOptions, FedChillPolicy  # noqa: E402
from chillfl.temperature.heterogeneity import MEASURES, client_heterogeneity, heterogeneity  # noqa: E402

SAMPLED = [[0, 1, 2], [1, 2, 3], [0, 2, 3], [0, 1, 2, 3], [0, 1, 3], [0, 1, 2, 3]]
"""Six rounds of partial participation; client c's state lives on node c % 2."""


def _labels(counts: np.ndarray) -> list[ClientData]:
    """Per client, training labels with exactly ``counts[c]`` of each class (what the node counts)."""
    out = []
    for row in counts:
        y = torch.cat([torch.full((int(n),), k, dtype=torch.long) for k, n in enumerate(row)])
        out.append(ClientData(torch.zeros(len(y), 1), y))
    return out


@pytest.mark.parametrize("measure", sorted(m for m in MEASURES if m != "size"))
def test_client_heterogeneity_equals_the_federation_row(measure: str) -> None:
    """Every measure but size, 'max' normalisation: h_n from client n's counts alone is the same float as row n."""
    rng = np.random.default_rng(4)
    counts = rng.integers(0, 30, size=(7, 5)).astype(np.float64)
    counts[:, 0] += 1  # every client has a sample
    counts[3] = [0, 0, 9, 0, 0]  # a one-class client (h = 1 for most measures)
    counts[4] = [6, 6, 6, 6, 6]  # a uniform client (h = 0)
    for p_g in (None, [0.1, 0.2, 0.3, 0.25, 0.15]):
        federation = heterogeneity(counts, measure, p_g, "max")
        assert [client_heterogeneity(row, measure, p_g) for row in counts] == federation.tolist()


def test_size_measure_cannot_be_computed_by_one_client() -> None:
    # size's "max" reference is the largest client of the federation: h = 1 - n / max n
    counts = np.array([[3.0, 1.0], [10.0, 10.0]])
    assert heterogeneity(counts, "size").tolist() == [1 - 4 / 20, 0.0]
    with pytest.raises(ConfigError) as info:
        client_heterogeneity(counts[0], "size")
    assert str(info.value).startswith("temperature.measure: ")


def test_fedchill_state_on_a_node_equals_chillfls_client_store() -> None:
    """Eq. 7 start from the client's own labels, then Algorithm 1 (patience 1): the same half, its state kept in
    Context.state on node c % 2 or in chillfl's ParamStore, gives the same T, history and counter bit for bit."""
    from chillfl.flower.state import load_client_state, save_client_state
    from chillfl.protocols.parameters import ParamStore

    counts = np.array([[20, 1, 0, 3], [5, 5, 5, 5], [0, 0, 12, 1], [2, 9, 9, 0]])
    half = FedChillPolicy(FedChillOptions(patience=1, gamma=0.8, p_g=[0.1, 0.2, 0.3, 0.4])).client_half(4)
    nodes, store = {0: RecordDict(), 1: RecordDict()}, ParamStore()
    data = _labels(counts)
    rng = np.random.default_rng(0)
    starts = [half.temperature({}, math.nan, d.y) for d in data]
    assert len(set(starts)) == 4  # the clients really start apart (Eq. 7 from their own h_n)
    for sampled in SAMPLED:
        for cid in sampled:
            on_node = load_client_state(nodes[cid % 2], cid) or {}
            kept = store.load(cid) or {}
            assert isinstance(on_node, dict)
            t = half.temperature(on_node, math.nan, data[cid].y)
            assert t == half.temperature(kept, math.nan, data[cid].y)
            acc = float(rng.choice([0.5, 0.55, 1 / 3]))  # repeats: stagnation, so T decays
            save_client_state(nodes[cid % 2], cid, half.finish(on_node, t, acc))
            store.save(cid, half.finish(kept, t, acc))
    for cid in range(4):
        got, want = load_client_state(nodes[cid % 2], cid), store.load(cid)
        assert isinstance(got, dict) and want is not None and list(got) == list(want)
        assert all(got[k].numpy().tobytes() == want[k].numpy().tobytes() for k in want)  # floats, history and counter exact
    assert any(float(store.load(c)["fedchill.temperature"]) < starts[c] for c in range(4))  # the decay really ran
    assert load_client_state(nodes[1], 0) is None  # client 0 lives on node 0 only


def test_a_soft_label_clients_temperature_entries_round_trip_on_a_node() -> None:
    from chillfl.flower.state import load_client_state, save_client_state
    from chillfl.protocols.softlabels import ClientState

    own = {"fedchill.temperature": torch.tensor(0.1 + 0.2, dtype=torch.float64), "fedchill.history": torch.tensor([1 / 3, math.nan], dtype=torch.float64),
           "fedchill.counter": torch.tensor(2)}
    records = RecordDict()
    save_client_state(records, 3, ClientState({"w": torch.ones(2)}, None, None, own))
    got = load_client_state(records, 3)
    assert isinstance(got, ClientState) and list(got.own) == list(own)
    assert all(got.own[k].numpy().tobytes() == v.numpy().tobytes() for k, v in own.items())
    save_client_state(records, 4, ClientState({"w": torch.ones(2)}))
    got = load_client_state(records, 4)
    assert isinstance(got, ClientState) and got.own == {}


def test_fedchill_without_init_or_decay_runs_on_a_node() -> None:
    options = FedChillOptions(init=False, t_start=0.5, decay=False, normalisation="minmax")  # h_n unused: minmax is fine
    check_supported(config_from_dict({"temperature": {"policy": "fedchill", "init": False, "t_start": 0.5, "decay": False, "normalisation": "minmax"}}))
    half = FedChillPolicy(options).client_half(2)
    y = torch.tensor([0, 0, 0, 1])
    assert half.temperature({}, math.nan, y) == 0.5 and half.finish({}, 0.5, 0.75) == {}  # no decay: nothing to keep


def _cfg(tmp_path: Path, **parts: Any) -> Any:
    base = {"dataset": {"name": "digits"}, "model": {"name": "mlp"}, "federation": {"num_clients": 4, "clients_per_round": 2, "rounds": 1}}
    return config_from_dict({**base, "out_dir": str(tmp_path), **parts})


@pytest.mark.parametrize(
    ("parts", "field"),
    [
        ({"temperature": {"policy": "fedchill", "normalisation": "minmax"}}, "temperature.normalisation"),
        ({"temperature": {"policy": "fedchill", "measure": "size"}}, "temperature.measure"),
        ({"algorithm": {"name": "vrl_sgd"}}, "algorithm.name"),
        ({"algorithm": {"name": "pa3fed", "base": "vrl_sgd"}}, "algorithm.base"),
        ({"algorithm": {"name": "fedper", "local_eval": "averaged"}}, "algorithm.local_eval"),
        # it named algorithm.name and the client half "Halves": the option is the base's
        ({"algorithm": {"name": "pa3fed", "base": "fedper", "base_options": {"local_eval": "averaged"}}}, "algorithm.base_options.local_eval"),
    ],
)
def test_what_a_node_cannot_hold_is_a_one_line_config_error(parts: dict[str, Any], field: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        build_server(_cfg(tmp_path, **parts))
    assert str(info.value).startswith(f"{field}: ") and "\n" not in str(info.value)


def test_fedchill_server_reads_no_class_counts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from chillfl.data.federated import FederatedData

    def refuse(self: Any) -> Any:
        raise AssertionError("the Flower server read the federation's class counts")

    monkeypatch.setattr(FederatedData, "class_counts", refuse)
    exp, protocol = build_server(_cfg(tmp_path, temperature={"policy": "fedchill", "patience": 1}))
    try:
        assert isinstance(protocol.policy, FedChillPolicy) and protocol.policy.state_dict() == {}
        assert protocol.client.temperature is not None  # the policy's client half ships to the nodes
        assert all(math.isnan(t.downlink.temperature) and t.state is None for t in protocol.configure(0, [0, 1]))  # each node picks its client's T
    finally:
        protocol.close()


def _trained(start: dict[str, torch.Tensor], g: torch.Generator) -> dict[str, torch.Tensor]:
    return {k: v + torch.randn(v.shape, generator=g, dtype=v.dtype) for k, v in start.items()}


def test_a_parameter_sharing_clients_state_round_trips_exactly_on_a_node() -> None:
    """SCAFFOLD's c_i, FedBN's BN entries, MOON's model, PA3Fed's score: one table, stored and read back bit for bit, in order."""
    from chillfl.flower.state import held_clients, load_client_state, save_client_state

    records = RecordDict()
    table = {
        "scaffold.c.w": torch.randn(3, 2, dtype=torch.float32).t(),  # a transposed layout comes back as values
        "fedbn.bn.num_batches_tracked": torch.tensor(7),
        "pa3fed.score": torch.tensor(1 / 3, dtype=torch.float64),
        "moon.prev.w": torch.tensor([float("inf"), -0.0, 1e-40]),
    }
    save_client_state(records, 5, table)
    got = load_client_state(records, 5)
    assert isinstance(got, dict) and list(got) == list(table) and held_clients(records) == [5]
    for k, v in table.items():
        assert got[k].dtype == v.dtype and got[k].shape == v.shape
        assert got[k].contiguous().numpy().tobytes() == v.contiguous().numpy().tobytes()  # -0.0 and inf included


def _algorithm_cases() -> list[tuple[str, dict[str, Any]]]:
    """(id, config overrides) of every registered algorithm, PA3Fed over every base it may wrap, and every registered
    loss term of ``[objective] terms`` (over FedAvg), on ``registry_cases``' tiny run (with the settings a method
    needs there): generated from the registries, so a new method is covered without editing this test."""
    from chillfl.aggregation.registry import weighted_bases
    from chillfl.training.terms import term_names
    from registry_cases import registry_cases

    tiny = dict(registry_cases())
    cases = [(case, over) for case, over in tiny.items() if case.startswith("algorithm-")]
    cases += [(f"algorithm-pa3fed-base-{b}", {**tiny[f"algorithm-{b}"], "algorithm.name": "pa3fed", "algorithm.base": b}) for b in weighted_bases()]
    cases += [(f"objective-terms-{t}", {**tiny["algorithm-fedavg"], "objective.terms": [t]}) for t in term_names()]
    return cases


def _refused_by(over: dict[str, Any]) -> tuple[str, str] | None:
    """The field and reason of the first part of the case's algorithm (itself, the base it wraps) that declares ``on_flower``."""
    from chillfl.aggregation.registry import algorithm_parts

    table = {k.removeprefix("algorithm."): v for k, v in over.items() if k.startswith("algorithm.")}
    for field_name, _, spec in algorithm_parts(table):
        if spec.capabilities.on_flower is not None:
            return field_name, spec.capabilities.on_flower
    return None


CASES = _algorithm_cases()
ON_FLOWER = [pytest.param(over, id=case) for case, over in CASES if _refused_by(over) is None]
REFUSED = [pytest.param(over, id=case) for case, over in CASES if _refused_by(over) is not None]
# No exclusion list: every case either runs below or is refused by what its method declares (``on_flower``), which
# test_what_a_method_declares_it_cannot_do_on_flower_is_refused checks.


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.detach().cpu().contiguous().reshape(-1).view(torch.uint8)


def _same(a: Any, b: Any) -> bool:
    """A message tree equal to another exactly: tensors by dtype, shape and bytes, floats by their bits, containers in order."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and (a.dtype, a.shape) == (b.dtype, b.shape) and torch.equal(_bytes(a), _bytes(b))
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        return type(a) is type(b) and all(_same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float):
        return isinstance(b, float) and struct.pack("<d", a) == struct.pack("<d", b)
    return type(a) is type(b) and bool(a == b)


def _built(over: dict[str, Any], tmp_path: Path) -> Any:
    from chillfl.config import load_config

    return build_server(load_config(None, {**over, "out_dir": str(tmp_path)}))


@pytest.mark.parametrize("over", ON_FLOWER)
def test_the_flower_server_keeps_no_client_state(over: dict[str, Any], tmp_path: Path) -> None:
    """The server's protocol is chillfl's own with its client store swapped for a record of where states are; its
    client tasks go out without data or state and through the wire unchanged."""
    from chillfl.flower.apps import NodeStore, OnNode
    from chillfl.flower.wire import decode, encode
    from chillfl.protocols.parameters import ParameterSharing

    _, protocol = _built(over, tmp_path)
    try:
        assert isinstance(protocol, ParameterSharing) and isinstance(protocol.store, NodeStore)
        tasks = protocol.configure(0, [0, 1, 2])
        assert all(t.state is None for t in tasks)  # nothing to send: the nodes hold it
        light = [dataclasses.replace(t, data=None) for t in tasks]  # what FlowerExecutor.map sends
        assert _same(decode(encode(light)), light)  # the method's downlink travels the wire, exactly (its types registered)
        protocol.store.save(0, OnNode(3))
        with pytest.raises(TypeError, match="must stay on its node"):
            protocol.store.save(1, {"scaffold.c.w": torch.zeros(1)})
        assert protocol.store.state_dict() == {} and protocol.store.ids() == []
    finally:
        protocol.close()


@pytest.mark.parametrize("over", REFUSED)
def test_what_a_method_declares_it_cannot_do_on_flower_is_refused(over: dict[str, Any], tmp_path: Path) -> None:
    refusal = _refused_by(over)
    assert refusal is not None
    field_name, reason = refusal
    with pytest.raises(ConfigError) as info:
        _built(over, tmp_path)
    assert str(info.value).startswith(f"{field_name}: {reason}") and "\n" not in str(info.value)


def test_every_registered_algorithm_and_loss_term_is_a_flower_case() -> None:
    from chillfl.aggregation.registry import algorithm_names
    from chillfl.training.terms import term_names

    ids = {case for case, _ in CASES}
    assert {f"algorithm-{n}" for n in algorithm_names()} <= ids and {f"objective-terms-{t}" for t in term_names()} <= ids
    assert {"algorithm-fedrs", "algorithm-fedlc", "algorithm-bulyan", "algorithm-geomed", "algorithm-centered_clip", "objective-terms-ntd"} <= ids
    assert "algorithm-vrl_sgd" in {p.id for p in REFUSED}  # VRL-SGD declares on_flower


def test_reply_temperature_travels_exactly() -> None:
    from chillfl.flower.wire import decode, encode

    up = ParamUplink({"w": torch.ones(2)}, 3, 1, 0.5, {"score": 0.25, "alpha": 1 / 3})
    got = decode(encode(ClientReply(2, up, None, 0.75, None, 0.1 + 0.2)))
    assert got.temperature == 0.1 + 0.2 and got.uplink.report["alpha"] == 1 / 3
    assert decode(encode(ClientReply(2, up))).temperature is None  # chillfl's runtime: the downlink's


def test_a_plugin_policy_off_flower_is_refused_with_its_own_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A policy's on_flower is its whole reason; the refusal used to append FedChill's own (", which no Flower node sees
    (a node's labels stay on it)") to every policy's text (found by the qaplugins helper)."""
    source = (
        "from dataclasses import dataclass\n"
        "from chillfl.extend import Capabilities, ConstantTemperature, PolicySpec\n\n\n"
        "@dataclass(frozen=True)\nclass Options:\n    pass\n\n\n"
        "SPEC = PolicySpec(Options, lambda o, counts: ConstantTemperature(1.0), 'x',\n"
        "                  capabilities=lambda o: Capabilities(on_flower='its server keeps a clock the nodes lack'))\n")
    with plugin_module(tmp_path, monkeypatch, "qa_flower_policy", source):
        with pytest.raises(ConfigError) as info:
            check_supported(_cfg(tmp_path, temperature={"policy": "qa_flower_policy:SPEC"}))
        assert str(info.value).startswith("temperature.policy: its server keeps a clock the nodes lack; run it with chillfl's own runtime")
    with pytest.raises(ConfigError) as info:
        check_supported(_cfg(tmp_path, temperature={"policy": "fedchill", "normalisation": "minmax"}))
    assert "label counts, which no Flower node sees (a node's labels stay on it); run it" in str(info.value)


def test_a_policy_class_declares_its_capabilities_in_its_own_attribute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As an aggregator class does; a policy class's `capabilities` was ignored, so one that said on_flower ran on Flower
    (found by the qaplugins helper)."""
    source = (
        "from chillfl.extend import Capabilities, ConstantTemperature\n\n\n"
        "class OffFlower(ConstantTemperature):\n"
        "    capabilities = Capabilities(on_flower='its T follows the server clock')\n\n"
        "    def __init__(self):\n        super().__init__(1.0)\n")
    with plugin_module(tmp_path, monkeypatch, "qa_flower_class", source), pytest.raises(ConfigError) as info:
        check_supported(_cfg(tmp_path, temperature={"policy": "qa_flower_class:OffFlower"}))
    assert str(info.value).startswith("temperature.policy: its T follows the server clock")


def test_the_clients_states_come_back_from_their_node_exactly_after_the_last_round(tmp_path: Path) -> None:
    """``checkpoint.client_models`` under Flower: the server's ``StatesRequest`` and the node's records of those clients,
    read back bit for bit; the server's store holds them only then (the simulation's files: tests/private_net/test_flower.py)."""
    from chillfl.config import load_config
    from chillfl.flower.apps import NodeStore, OnNode
    from chillfl.flower.state import client_states_record, load_client_state, save_client_state
    from chillfl.flower.wire import StatesRequest, decode, encode

    check_supported(load_config(None, {"algorithm.name": "fedper", "checkpoint.client_models": True, "out_dir": str(tmp_path)}))  # refused before
    g = torch.Generator().manual_seed(3)
    tables = {c: {"fedper.head.w": torch.randn(2, 3, generator=g), "fedper.head.b": torch.randn(2, generator=g, dtype=torch.float64)} for c in (0, 2)}
    records = RecordDict()
    for cid, table in tables.items():
        save_client_state(records, cid, table)
    asked = decode(encode(StatesRequest([0, 2, 4])))
    assert isinstance(asked, StatesRequest) and asked.client_ids == [0, 2, 4]
    reply = client_states_record(records, asked.client_ids)
    assert load_client_state(reply, 4) is None  # no state on this node: left out
    back = {cid: load_client_state(reply, cid) for cid in tables}
    assert all(_same(back[cid], table) for cid, table in tables.items())
    store = NodeStore()
    store.save(2, OnNode(9))
    store.save(0, OnNode(9))
    assert store.ids() == [] and store.load(0) is None  # during the rounds the server holds none
    store.hold_final({cid: back[cid] for cid in store.where})
    assert store.ids() == [2, 0] and store.load(0) is back[0]
