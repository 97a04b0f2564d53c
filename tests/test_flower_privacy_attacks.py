"""``[privacy]`` and ``[attack]`` on the Flower backend give the sequential executor's records, bit for bit.

The Flower run here is chillfl's own Flower code end to end, without Ray: :func:`chillfl.flower.apps.run_server`
(the ServerApp's body: the FlowerExecutor, the NodeStore, the wire format) drives the real ``ClientApp`` of
:func:`chillfl.flower.client_app`, which an in-process grid calls once per message with each SuperNode's own
``Context`` (its ``state`` kept between rounds, as a SuperNode keeps it). Two nodes serve four clients
(client c on node c % 2). What Flower's simulation engine adds on top (Ray, protobuf transport) is covered
for the same apps by tests/private_net/test_flower.py.

Each case compares every metric of every round with the same config on the sequential executor, floats exactly
(the project's promise: same config and seed, same machine, same metrics under every executor), and checks
that the mechanism really acted: epsilon is recorded and grows, noise changed the model, the attack moved the
result away from a clean run's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import pytest

pytest.importorskip("flwr", reason="the Flower backend needs the [flower] extra (flwr)")

from flwr.app import Context, Message, RecordDict  # noqa: E402
from flwr.supercore.task_identity import TaskIdentity  # noqa: E402

from chillfl.config import config_from_dict  # noqa: E402
from chillfl.errors import ConfigError  # noqa: E402
from chillfl.flower import client_app  # noqa: E402
from chillfl.flower.apps import build_server, run_server  # noqa: E402
from chillfl.flower.state import held_clients  # noqa: E402
from chillfl.runner import run_experiment  # noqa: E402
from chillfl.training.local import evaluate  # noqa: E402

BASE: dict[str, Any] = {
    "name": "flower-dp",
    "seed": 3,
    "threads": 1,
    "device": "cpu",
    "dataset": {"name": "digits"},
    "partition": {"name": "iid"},
    "model": {"name": "mlp", "hidden": [16]},
    "federation": {"num_clients": 4, "clients_per_round": 3, "rounds": 3},
    "client": {"epochs": 1, "batch_size": 32, "lr": 0.1},
    "eval": {"clients": "none"},
    "checkpoint": {"every": 0},
}

NODES = 2


class InProcessGrid:
    """Flower's ``Grid`` as the ServerApp sees it, in this process: node ``n`` is the ClientApp called with node n's Context.

    Each node's ``Context.state`` is one RecordDict for the whole run, as on a SuperNode; the ClientApp
    object is one for all nodes, as in one simulation worker process serving several nodes.
    """

    def __init__(self, app: Any, nodes: int) -> None:
        self.app = app
        self.contexts = {
            10 + p: Context(run_id=1, node_id=10 + p, node_config={"partition-id": p, "num-partitions": nodes}, state=RecordDict(), run_config={})
            for p in range(nodes)
        }
        self.sent: list[str] = []

    def get_node_ids(self) -> list[int]:
        return list(self.contexts)

    def send_and_receive(self, messages: Sequence[Message], timeout: float | None = None) -> list[Message]:
        self.sent += [m.metadata.message_type for m in messages]
        return [self.app(m, self.contexts[m.metadata.dst_node_id]) for m in messages]


@pytest.fixture
def server_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a ServerApp process has set before it builds a message (Flower's ``TaskIdentity``); restored after the test."""
    monkeypatch.setattr(TaskIdentity, "_run_id", 1)
    monkeypatch.setattr(TaskIdentity, "_node_id", 0)
    monkeypatch.setattr(TaskIdentity, "_task_id", 0)


def _config(tmp_path: Path, name: str, **parts: Any) -> Any:
    return config_from_dict({**BASE, "out_dir": str(tmp_path / name), "name": name, **parts})


def on_flower(config: Any) -> tuple[list[dict[str, Any]], InProcessGrid]:
    """The run's records through chillfl's Flower server and client apps (2 nodes), and the grid (what was sent)."""
    grid = InProcessGrid(client_app(config), NODES)
    out = run_server(config, grid, min_nodes=NODES)
    return out.records, grid


def sequential(config: Any) -> list[dict[str, Any]]:
    return run_experiment(config, write=False, progress=False).records


def both(tmp_path: Path, name: str, **parts: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(Flower's records, the sequential executor's) for one config; every round trained on both nodes."""
    config = _config(tmp_path, name, **parts)
    flower, grid = on_flower(config)
    assert grid.sent.count("train") >= BASE["federation"]["rounds"]  # the clients trained on the nodes
    return flower, sequential(config)


DP_FEDAVG = {"mechanism": "dp-fedavg", "clip_norm": 0.5, "noise_multiplier": 0.8, "delta": 1e-3}


@pytest.mark.usefixtures("server_identity")
def test_dp_fedavg_on_flower_equals_sequential(tmp_path: Path) -> None:
    flower, seq = both(tmp_path, "dp-fedavg", privacy=DP_FEDAVG)
    assert flower == seq  # every metric, floats compared exactly: the server's noise, clipping, epsilon
    eps = [r["epsilon"] for r in flower]
    assert 0 < eps[0] < eps[1] < eps[2]  # the accountant spent one subsampled step a round
    assert all(r["agg_clipped"] > 0 for r in flower)  # C = 0.5 clipped some update (lr 0.1 moves the MLP further)
    clean = sequential(_config(tmp_path, "clean"))
    assert [r["global_acc"] for r in flower] != [r["global_acc"] for r in clean]  # the noise really changed the model
    assert "epsilon" not in clean[0]


@pytest.mark.usefixtures("server_identity")
def test_dp_fedavg_noise_only_round_on_flower_equals_sequential(tmp_path: Path) -> None:
    """seed 3, Poisson at q = 1/4: rounds draw [1], [1], nobody; the server releases round 3's noise alone, as sequentially."""
    config = _config(tmp_path, "noise-only", privacy=DP_FEDAVG, federation={**BASE["federation"], "clients_per_round": 1, "sampling": "poisson"})
    flower, _ = on_flower(config)
    assert flower == sequential(config)
    assert [r["clients"] for r in flower] == [[1], [1], []] and flower[2]["nobody_reported"] and flower[2]["global_loss"] != flower[1]["global_loss"]


@pytest.mark.usefixtures("server_identity")
def test_dp_fedavg_adaptive_clipping_on_flower_equals_sequential(tmp_path: Path) -> None:
    """C_t is server state (chillfl.privacy.aggregate): the nodes never need it, and it moves the same way."""
    flower, seq = both(tmp_path, "adaptive", privacy={**DP_FEDAVG, "target_quantile": 0.5, "clip_lr": 0.2})
    assert flower == seq
    norms = [r["agg_clip_norm"] for r in flower]
    assert norms[0] == 0.5 and len(set(norms)) == 3  # C_1 = clip_norm, then the geometric update moved it every round
    fixed = sequential(_config(tmp_path, "fixed", privacy=DP_FEDAVG))
    assert [r["epsilon"] for r in flower] == [r["epsilon"] for r in fixed]  # the count's noise comes out of the same budget


@pytest.mark.usefixtures("server_identity")
def test_dp_sgd_on_flower_equals_sequential(tmp_path: Path) -> None:
    """The per-sample clipping and noise run on the nodes (the spec the ClientApp builds); the server accounts them."""
    privacy = {"mechanism": "dp-sgd", "clip_norm": 1.0, "noise_multiplier": 1.1, "delta": 1e-3}
    flower, seq = both(tmp_path, "dp-sgd", privacy=privacy)
    assert flower == seq  # the nodes drew the same noise, from (job seed, "dp-sgd", step)
    eps = [r["epsilon"] for r in flower]
    assert 0 < eps[0] < eps[-1]
    clean = sequential(_config(tmp_path, "clean"))
    assert [r["train_loss"] for r in flower] != [r["train_loss"] for r in clean]  # the clients' steps really were privatised


@pytest.mark.usefixtures("server_identity")
def test_model_poisoning_on_flower_equals_sequential(tmp_path: Path) -> None:
    attack = {"kind": "scaling", "clients": [1], "factor": 30.0}  # client 1 (node 1) boosts its update 30 times
    flower, seq = both(tmp_path, "scaling", attack=attack, federation={**BASE["federation"], "clients_per_round": 4})
    assert flower == seq
    assert all(r["attackers"] == [1] for r in flower)
    clean = sequential(_config(tmp_path, "clean", federation={**BASE["federation"], "clients_per_round": 4}))
    assert flower[-1]["global_acc"] < clean[-1]["global_acc"] - 0.2  # the boosted update swamps the mean


@pytest.mark.usefixtures("server_identity")
def test_backdoor_on_flower_equals_sequential(tmp_path: Path) -> None:
    """The attackers' poisoned rows are built on their node from the config (the data never travel)."""
    attack = {"kind": "backdoor", "clients": [0, 3], "target": 0, "poison_fraction": 0.8}
    federation = {**BASE["federation"], "clients_per_round": 4, "rounds": 4}
    flower, seq = both(tmp_path, "backdoor", attack=attack, federation=federation)
    assert flower == seq
    assert all(r["attackers"] == [0, 3] for r in flower)
    # the same trigger on the clean run's final model: about 0.0 (it learnt no trigger), against about 1.0 backdoored
    clean = run_experiment(_config(tmp_path, "clean", federation=federation), write=False, progress=False)
    _, protocol = build_server(_config(tmp_path, "probe", attack=attack, federation=federation))
    try:
        assert clean.model_state is not None and protocol.probe is not None
        x, y = protocol.probe  # the record's probe: triggered test inputs whose label is not the target, labelled target
        clean_rate = evaluate(protocol.model, clean.model_state, x, y)[0]
    finally:
        protocol.close()
    assert clean.records[-1]["global_acc"] > 0.6  # the clean model learnt the task (about 0.83), so a rate near 0 means something
    assert flower[-1]["attack_success_rate"] > clean_rate + 0.5


@pytest.mark.usefixtures("server_identity")
def test_local_dp_on_flower_equals_sequential(tmp_path: Path) -> None:
    """``local``: each client's noise from (seed, round, client), added where the server receives its update."""
    flower, seq = both(tmp_path, "local", privacy={**DP_FEDAVG, "mechanism": "local"})
    assert flower == seq
    clean = sequential(_config(tmp_path, "clean"))
    assert 0 < flower[0]["epsilon"] < flower[-1]["epsilon"]
    assert [r["global_loss"] for r in flower] != [r["global_loss"] for r in clean]


SOFT = {"method": "dsfl", "public_size": 60, "subset_size": 20, "server_epochs": 1, "distill_batch_size": 32}


@pytest.mark.usefixtures("server_identity")
@pytest.mark.parametrize(
    ("name", "parts", "acted"),
    [
        ("rows", {"privacy": {"mechanism": "local", "noise_multiplier": 2.0, "delta": 1e-3}}, "epsilon_upload"),  # the nodes noise their rows (RowNoise)
        ("forged", {"attack": {"kind": "gaussian", "clients": [1, 2], "sigma": 0.3}}, "attackers"),  # attackers forge their rows (ForgedRows)
    ],
)
def test_soft_label_rows_on_flower_equal_sequential(name: str, parts: dict[str, Any], acted: str, tmp_path: Path) -> None:
    """The soft-label protocol's client side is swapped by the wrappers (rows noised or forged on the client): the nodes run the swapped one."""
    flower, seq = both(tmp_path, name, distillation=SOFT, **parts)
    assert flower == seq
    assert all(r[acted] for r in flower)
    clean = sequential(_config(tmp_path, "clean", distillation=SOFT))
    assert [r["global_loss"] for r in flower] != [r["global_loss"] for r in clean]  # the released rows really changed


@pytest.mark.usefixtures("server_identity")
@pytest.mark.parametrize(
    ("name", "parts"),
    [
        # MOON's previous model on the nodes; the server clips and noises, an attacker flips its update before that
        ("moon", {"algorithm": {"name": "moon", "mu": 1.0}, "privacy": DP_FEDAVG, "attack": {"kind": "sign_flip", "clients": [2]}}),
        # SCAFFOLD's c_i on the nodes, each step privatised there
        ("scaffold", {"algorithm": {"name": "scaffold"}, "privacy": {"mechanism": "dp-sgd", "noise_multiplier": 1.1, "delta": 1e-3}}),
    ],
)
def test_privacy_with_client_state_on_the_nodes(name: str, parts: dict[str, Any], tmp_path: Path) -> None:
    """The wrappers forward the client store (AroundProtocol): the server's is Flower's record of nodes, the states stay there."""
    from chillfl.flower.apps import NodeStore

    config = _config(tmp_path, name, **parts)
    _, protocol = build_server(config)
    try:
        assert isinstance(protocol.store, NodeStore)
    finally:
        protocol.close()
    flower, grid = on_flower(config)
    assert flower == sequential(config)
    assert flower[-1]["epsilon"] > 0
    held = [held_clients(context.state) for context in grid.contexts.values()]
    assert held[0] + held[1] and all(c % NODES == p for p, ids in enumerate(held) for c in ids)  # each state on its client's node


@pytest.mark.parametrize(
    ("parts", "field"),
    [
        ({"algorithm": {"name": "scaffold"}, "privacy": DP_FEDAVG}, "privacy.mechanism"),  # control variates: no weighted mean to noise
        ({"distillation": SOFT, "attack": {"kind": "sign_flip"}}, "attack.kind"),  # soft-label clients upload no model update
    ],
)
def test_what_privacy_or_attacks_refuse_is_refused_before_flower_starts(parts: dict[str, Any], field: str, tmp_path: Path) -> None:
    """build_server runs before the simulation starts Flower and Ray (run_simulation): chillfl's one-line ConfigError, as under `chillfl run`."""
    with pytest.raises(ConfigError) as info:
        build_server(_config(tmp_path, "refused", **parts))
    assert str(info.value).startswith(f"{field}: ") and "\n" not in str(info.value)


def test_a_server_that_cannot_write_its_config_closes_its_protocol_and_gives_its_folder_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                                          server_identity: None) -> None:
    """The ServerApp wrote ``config.toml`` outside the ``try`` that closes the protocol and releases the run folder: a full
    disk there left the protocol's pools open and the folder locked (a resume in that process: "in use"). Now the folder
    stays ``.partial`` with its lock given up, as ``chillfl run``'s does (runner ``write_folder_start``)."""
    from chillfl.errors import StorageError
    from chillfl.storage.results import ResultWriter, RunLock

    config = _config(tmp_path, "no-room")
    exp, protocol = build_server(config)
    closed: list[bool] = []
    close = protocol.close
    monkeypatch.setattr(protocol, "close", lambda: (closed.append(True), close())[1])

    def full(self: ResultWriter, *args: Any, **kwargs: Any) -> None:
        raise StorageError("could not write config.toml: No space left on device")

    monkeypatch.setattr(ResultWriter, "write_config", full)
    with pytest.raises(StorageError):
        run_server(config, InProcessGrid(client_app(config), NODES), min_nodes=NODES, built=(exp, protocol))
    assert closed == [True]
    (partial,) = (tmp_path / "no-room").iterdir()
    RunLock(partial).release()  # free: another process may take it
