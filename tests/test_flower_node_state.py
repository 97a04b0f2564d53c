"""Per-client state on Flower's nodes, checked against chillfl's server-held state without starting Flower.

Each node-side step (chillfl.flower.temperature, chillfl.flower.aggregators) runs on a plain
``flwr.app.RecordDict`` (what a SuperNode's ``Context.state`` is) next to the server-held
reference object of chillfl's runtime, over several rounds with partial participation; every
value the client trains with and every aggregate must be bit-identical, and the server stand-ins
must hold no client entry. The simulation-level equality is in tests/private_net/test_flower.py.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("flwr")

from flwr.app import RecordDict  # noqa: E402

from chillfl.aggregation.base import ClientResult, FedAvg  # noqa: E402
from chillfl.aggregation.fedbn import FedBN  # noqa: E402
from chillfl.aggregation.moon import Moon, MoonOptions  # noqa: E402
from chillfl.aggregation.pa3fed import PA3Fed, PA3FedOptions  # noqa: E402
from chillfl.config import config_from_dict  # noqa: E402
from chillfl.engine.protocol import ClientData, ClientReply, ClientTask  # noqa: E402
from chillfl.errors import ConfigError  # noqa: E402
from chillfl.flower import aggregators as agg  # noqa: E402
from chillfl.flower.apps import build_server, check_supported  # noqa: E402
from chillfl.flower.temperature import NodeHeldTemperature, NodeTemperature, load_state  # noqa: E402
from chillfl.protocols.parameters import ParamDownlink, ParamUplink  # noqa: E402
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


def _task(cid: int, rnd: int, data: ClientData, temperature: float = math.nan, **context: Any) -> ClientTask[Any, Any]:
    return ClientTask(cid, rnd, ParamDownlink({"w": torch.zeros(2)}, 0.1, temperature, context, 7), data)


def test_node_fedchill_state_equals_the_server_policy() -> None:
    """Eq. 7 start from the node's own labels, then Algorithm 1 (patience 1) in Context.state: T, history, counter bit for bit."""
    counts = np.array([[20, 1, 0, 3], [5, 5, 5, 5], [0, 0, 12, 1], [2, 9, 9, 0]])
    options = FedChillOptions(patience=1, gamma=0.8, p_g=[0.1, 0.2, 0.3, 0.4])
    policy = FedChillPolicy(options, counts)  # chillfl's runtime: the server holds every client's state
    node = NodeTemperature(options, num_classes=4)
    nodes = {0: RecordDict(), 1: RecordDict()}
    data = _labels(counts)
    rng = np.random.default_rng(0)
    starts = [policy.temperature(c, 0) for c in range(4)]
    assert len(set(starts)) == 4  # the clients really start apart (Eq. 7 from their own h_n)
    for rnd, sampled in enumerate(SAMPLED):
        for cid in sampled:
            expected = policy.temperature(cid, rnd)
            task = node.prepare_task(_task(cid, rnd, data[cid]), nodes[cid % 2], data[cid])
            assert task.downlink.temperature == expected
            acc = float(rng.choice([0.5, 0.55, 1 / 3]))  # repeats: stagnation, so T decays
            reply = node.finish_task(task, ClientReply(cid, None, None, acc), nodes[cid % 2], data[cid])
            assert reply.temperature == expected  # what the server records
            policy.observe(cid, rnd, acc)
    for cid in range(4):
        assert load_state(nodes[cid % 2], cid) == policy.state(cid)  # floats, history and counter exact
    assert any(policy.state(c).temperature < starts[c] for c in range(4))  # the decay really ran
    assert load_state(nodes[1], 0) is None  # client 0 lives on node 0 only


def test_node_fedchill_without_init_or_decay() -> None:
    counts = np.array([[3, 1], [1, 3]])
    options = FedChillOptions(init=False, t_start=0.5, decay=False, normalisation="minmax")  # h_n unused: minmax is fine
    check_supported(config_from_dict({"temperature": {"policy": "fedchill", "init": False, "t_start": 0.5, "decay": False, "normalisation": "minmax"}}))
    node, records, data = NodeTemperature(options, 2), RecordDict(), _labels(counts)
    reply = node.finish_task(node.prepare_task(_task(1, 0, data[1]), records, data[1]), ClientReply(1, None, None, 0.5), records, data[1])
    assert reply.temperature == 0.5 == FedChillPolicy(options, counts).temperature(1, 0)
    assert load_state(records, 1) is None  # no decay: nothing to keep


def test_server_stand_in_holds_nothing_per_client() -> None:
    held = NodeHeldTemperature(FedChillOptions(), num_classes=3)
    assert math.isnan(held.temperature(2, 0))  # a placeholder the node overwrites
    held.observe(2, 0, 0.5)
    assert vars(held) == {"options": FedChillOptions()} and held.snapshot() == {} and held.state_dict() == {}
    with pytest.raises(ConfigError, match="^temperature.decay: "):  # FedChillPolicy's error, from the server
        held.observe(2, 0, None)
    with pytest.raises(ConfigError, match="^temperature.p_g: "):
        NodeHeldTemperature(FedChillOptions(p_g=[0.5, 0.5]), num_classes=3)


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
    assert isinstance(protocol.policy, NodeHeldTemperature) and exp.config.temperature == {"policy": "fedchill", "patience": 1}
    protocol.close()


def _trained(start: dict[str, torch.Tensor], g: torch.Generator) -> dict[str, torch.Tensor]:
    return {k: v + torch.randn(v.shape, generator=g, dtype=v.dtype) for k, v in start.items()}


def test_fedbn_entries_held_by_nodes_equal_the_server_held_ones() -> None:
    g = torch.Generator().manual_seed(5)
    x = {"conv.weight": torch.randn(3, 2, generator=g), "bn.weight": torch.randn(3, generator=g), "bn.running_mean": torch.randn(3, generator=g)}
    bn = ["bn.weight", "bn.running_mean"]
    reference, held = FedBN(bn), agg.server_side(FedBN(bn))
    assert isinstance(held, agg.NodeHeldFedBN)
    (step,) = agg.node_side(FedBN(bn))
    nodes = {0: RecordDict(), 1: RecordDict()}
    x_held = dict(x)
    for rnd, sampled in enumerate(SAMPLED[:4]):
        ref_results, results = [], []
        for cid in sampled:
            down = reference.downlink(cid, rnd, x)
            expected = x if down.params is None else {**x, **down.params}
            assert held.downlink(cid, rnd, x_held).params is None  # the server sends the global model only
            task = step.prepare_task(ClientTask(cid, rnd, ParamDownlink(x_held, 0.1, 1.0), None), nodes[cid % 2], None)  # type: ignore[arg-type]
            assert list(task.downlink.start) == list(expected) and all(torch.equal(task.downlink.start[k], expected[k]) for k in x)
            y = _trained(expected, g)
            step.finish_task(task, ClientReply(cid, ParamUplink(y, 10, 3, 0.5)), nodes[cid % 2], None)  # type: ignore[arg-type]
            ref_results.append(ClientResult(cid, y, 10 + cid, 3, 0.1, 1.0, 0.5))
            results.append(ClientResult(cid, y, 10 + cid, 3, 0.1, 1.0, 0.5))
        x, x_held = reference.aggregate(x, ref_results, rnd), held.aggregate(x_held, results, rnd)
        assert all(torch.equal(x[k], x_held[k]) for k in x)
    assert len(held.local_bn) == 0 and len(reference.local_bn) == 4  # the nodes hold them


def test_moon_previous_models_held_by_nodes_equal_the_server_held_ones() -> None:
    g = torch.Generator().manual_seed(6)
    x = {"w": torch.randn(3, 2, generator=g), "b": torch.randn(2, generator=g)}
    reference, held = Moon(MoonOptions(mu=2.5)), agg.server_side(Moon(MoonOptions(mu=2.5)))
    (step,) = agg.node_side(Moon(MoonOptions(mu=2.5)))
    nodes = {0: RecordDict(), 1: RecordDict()}
    for rnd, sampled in enumerate(SAMPLED[:4]):
        results = []
        for cid in sampled:
            want = reference.downlink(cid, rnd, x).context
            sent = held.downlink(cid, rnd, x).context
            assert "moon_prev" not in sent  # the server has no previous model to send
            got = step.prepare_task(ClientTask(cid, rnd, ParamDownlink(x, 0.1, 1.0, sent), None), nodes[cid % 2], None).downlink.context  # type: ignore[arg-type]
            assert got["moon_weight"] == want["moon_weight"] and got["moon_tau"] == want["moon_tau"]
            assert all(torch.equal(got["moon_prev"][k], want["moon_prev"][k]) for k in x)
            y = _trained(x, g)
            step.finish_task(ClientTask(cid, rnd, None, None), ClientReply(cid, ParamUplink(y, 10, 3, 0.5)), nodes[cid % 2], None)  # type: ignore[arg-type]
            results.append(ClientResult(cid, y, 10, 3, 0.1, 1.0, 0.5))
        x_ref, x_held = reference.aggregate(x, results, rnd), held.aggregate(x, results, rnd)
        assert all(torch.equal(x_ref[k], x_held[k]) for k in x)
        x = x_ref
    assert len(held.previous) == 0 and len(reference.previous) == 4
    assert reference.downlink(0, 9, x).context["moon_weight"] == 2.5  # and a client seen before trains with mu


def test_pa3fed_scores_held_by_nodes_give_the_server_held_alphas() -> None:
    g = torch.Generator().manual_seed(7)
    options = PA3FedOptions(mode="always", beta=0.7)
    reference, held = PA3Fed(FedAvg(), options), agg.server_side(PA3Fed(FedAvg(), options))
    (step,) = agg.node_side(PA3Fed(FedAvg(), options))
    nodes = {0: RecordDict(), 1: RecordDict()}
    x = {"w": torch.randn(4, generator=g)}
    for rnd, sampled in enumerate(SAMPLED[:4]):
        ref_results, results = [], []
        for cid in sampled:
            y = _trained(x, g)
            report = {"score": float(torch.rand(1, generator=g)), "grad_norm": 1.0 + rnd}
            reply = step.finish_task(ClientTask(cid, rnd, None, None), ClientReply(cid, ParamUplink(y, 10 + cid, 3, 0.5, report)), nodes[cid % 2], None)  # type: ignore[arg-type]
            ref_results.append(ClientResult(cid, y, 10 + cid, 3, 0.1, 1.0, 0.5, report))
            results.append(ClientResult(cid, y, 10 + cid, 3, 0.1, 1.0, 0.5, reply.uplink.report))
        x_ref, x_held = reference.aggregate(x, ref_results, rnd), held.aggregate(x, results, rnd)
        assert torch.equal(x_ref["w"], x_held["w"])
        assert reference.round_metrics()["alphas"] == held.round_metrics()["alphas"]
        x = x_ref
    assert any(a != 1.0 for a in reference.round_metrics()["alphas"].values())  # returning clients: Eq. 10 really used
    assert held.last_score == {} and len(reference.last_score) == 4


def test_pa3fed_bases_keep_their_state_on_the_nodes_too() -> None:
    """PA3Fed wraps a base: the base's client state moves as well (build_server once checked only a plain SCAFFOLD)."""
    from chillfl.aggregation.scaffold import Scaffold, ScaffoldOptions
    from chillfl.flower.scaffold import NodeHeldScaffold

    for base, held_type, node_types in [
        (Scaffold(4, ScaffoldOptions(momentum=0.0)), NodeHeldScaffold, [agg.NodePA3Fed]),  # c_i: chillfl.flower.scaffold's steps
        (FedBN(["bn.weight"]), agg.NodeHeldFedBN, [agg.NodeFedBN, agg.NodePA3Fed]),
        (Moon(), agg.NodeHeldMoon, [agg.NodeMoon, agg.NodePA3Fed]),
        (FedAvg(), FedAvg, [agg.NodePA3Fed]),
    ]:
        held = agg.server_side(PA3Fed(base))
        assert isinstance(held, agg.NodeHeldPA3Fed) and type(held.base) is held_type
        assert [type(s) for s in agg.node_side(PA3Fed(base))] == node_types
        assert (agg.control_receiver(held) is not None) == (held_type is NodeHeldScaffold)


def test_reply_temperature_travels_exactly() -> None:
    from chillfl.flower.wire import decode, encode

    up = ParamUplink({"w": torch.ones(2)}, 3, 1, 0.5, {"score": 0.25, "alpha": 1 / 3})
    got = decode(encode(ClientReply(2, up, None, 0.75, None, 0.1 + 0.2)))
    assert got.temperature == 0.1 + 0.2 and got.uplink.report["alpha"] == 1 / 3
    assert decode(encode(ClientReply(2, up))).temperature is None  # chillfl's runtime: the downlink's
