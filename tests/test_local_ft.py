"""The two sanity baselines of personalised FL: Local-only (``local``) and FedAvg-FT (``fedavg_ft``).

Local-only: each client's model is its own training, round after round, from the initial model (replayed job by
job on the sequential training path); the global model stays bitwise the initial one; no model byte goes up; the
clients' models are what ``checkpoint.client_models`` writes. FedAvg-FT: FedAvg's run bit for bit but for the
local accuracy, which is the sent global model's, fine-tuned (recomputed directly), or not fine-tuned at
``finetune_epochs = 0``. Both: executors agree, resume is bitwise, misfits are one-line ConfigErrors.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

import pytest
import torch

from chillfl.aggregation.base import Personalising, own_entries
from chillfl.aggregation.fedavg_ft import FedAvgFTOptions, FineTuning
from chillfl.aggregation.fedbabu import FedBABU, FedBABUOptions
from chillfl.aggregation.local_only import PREFIX, LocalOnlyOptions
from chillfl.aggregation.registry import check_algorithm
from chillfl.config import RunConfig
from chillfl.engine.loop import run_rounds
from chillfl.engine.protocol import ClientData, ClientJob, ClientTask, drive
from chillfl.errors import ConfigError
from chillfl.executors.sequential import SequentialExecutor, train_job
from chillfl.experiment import build_experiment, build_protocol, make_executor
from chillfl.models import build_model
from chillfl.models.parts import head_name
from chillfl.options import parse_options
from chillfl.protocols.common import mean_or_none
from chillfl.protocols.parameters import ParamDownlink, ParameterClient, ParameterSharing
from chillfl.runner import CLIENT_MODELS, run_experiment
from chillfl.seeds import derive_seed
from chillfl.storage.model_file import read_client_models
from chillfl.training.local import LocalSpec, evaluate
from chillfl.training.schedule import Optimizer
from methods_e2e import assert_executors_agree, config, records, resumed_records

BASE: dict[str, Any] = {"model.name": "mlp", "temperature.policy": "none"}
"""methods_e2e's tiny run (4 clients, 3 a round, 3 rounds), on the MLP at T = 1."""


def cfg_of(algorithm: dict[str, Any], **over: Any) -> RunConfig:
    return config(**BASE, **over).with_overrides({"algorithm": algorithm})


def clone(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in state.items()}


def rounds_with_states(cfg: RunConfig) -> tuple[Any, ParameterSharing, list[dict[str, Any]], list[dict[str, torch.Tensor]]]:
    """Run ``cfg`` round by round: the experiment, its protocol, the records and the global model each round started from."""
    exp = build_experiment(cfg)
    protocol = build_protocol(exp)
    assert isinstance(protocol, ParameterSharing)
    executor = make_executor(exp, protocol)
    starts = [clone(protocol.global_state())]
    out = []
    try:
        for record in run_rounds(protocol, executor, seed=cfg.seed, num_clients=exp.data.num_clients,
                                 clients_per_round=cfg.federation.sample_size(), rounds=cfg.federation.rounds):
            out.append(record)
            starts.append(clone(protocol.global_state()))
    finally:
        executor.close()
    return exp, protocol, out, starts


def trained(exp: Any, job: ClientJob) -> dict[str, torch.Tensor]:
    """One job on the sequential training path (the reference every executor matches)."""
    return SequentialExecutor(exp.model, exp.spec).run([job])[0].params


# ---------------------------------------------------------------- Local-only


@pytest.fixture(scope="module")
def local_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunConfig, Any]]:
    folder = tmp_path_factory.mktemp("local")
    cfg = cfg_of({"name": "local_only"}, **{"checkpoint.client_models": True, "out_dir": str(folder), "name": "local"})
    yield cfg, run_experiment(cfg, progress=False)


def test_a_local_clients_model_is_its_own_trainings_from_the_initial_model(local_run: tuple[RunConfig, Any]) -> None:
    """Replayed on the sequential path: from the initial model, each of its rounds' training with that round's seed and lr."""
    cfg, out = local_run
    exp = build_experiment(cfg)
    protocol = build_protocol(exp)
    assert isinstance(protocol, ParameterSharing)
    assert set(out.client_states) == {c for r in out.records for c in r["clients"]}
    twice = 0
    for cid, model in out.client_states.items():
        rows = protocol.evaluation.client_data(cid)  # its training rows, as the round sends them
        own = exp.initial_state
        rounds = [r["round"] - 1 for r in out.records if cid in r["clients"]]
        twice += len(rounds) >= 2
        for rnd in rounds:
            own = trained(exp, ClientJob(cid, own, rows.x, rows.y, cfg.lr_at(rnd), 1.0, {}, derive_seed(cfg.seed, "train", cid, rnd)))
        assert set(model) == set(exp.initial_state)
        assert all(torch.equal(model[k], own[k].to(model[k].device)) for k in model), cid
    assert twice  # a client trained its own model twice or more


def test_local_keeps_the_global_model_uploads_nothing_and_is_sent_it_once(local_run: tuple[RunConfig, Any]) -> None:
    cfg, out = local_run
    initial = build_experiment(cfg).initial_state
    assert out.model_state is not None
    assert all(torch.equal(out.model_state[k], initial[k]) for k in initial)  # bitwise the initial model
    assert [r["bytes_up"] for r in out.records] == [0] * len(out.records)  # the server reads nothing
    whole = sum(v.numel() * v.element_size() for v in initial.values())
    seen: set[int] = set()
    for r in out.records:  # a client is sent the initial model once, at its first round: nothing changes after it
        first = [c for c in r["clients"] if c not in seen]
        assert r["bytes_down"] == whole * len(first), r["round"]
        seen.update(r["clients"])
    assert any(r["bytes_down"] == 0 for r in out.records[1:])  # a round of returning clients only sends nothing
    assert len({r["global_acc"] for r in out.records}) == 1  # the initial model's, every round
    fedavg = records(cfg_of({"name": "fedavg"}))
    assert all(r["bytes_up"] > 0 for r in fedavg)
    assert [r["local_acc"] for r in out.records] != [r["local_acc"] for r in fedavg]


def test_local_writes_each_clients_model(local_run: tuple[RunConfig, Any]) -> None:
    cfg, out = local_run
    assert out.folder is not None
    saved = read_client_models(out.folder / CLIENT_MODELS)
    assert set(saved) == set(out.client_states)
    for cid, model in out.client_states.items():
        assert set(saved[cid]) == set(model) and all(torch.equal(saved[cid][k], v) for k, v in model.items())
        assert any(not torch.equal(v, out.model_state[k]) for k, v in model.items())  # its own, not the global model


def test_local_keeps_the_whole_model_in_the_clients_state() -> None:
    model = build_model("mlp", (6,), 3, {"hidden": [5]}, seed=0)
    from chillfl.aggregation.local_only import LocalOnly

    rule = LocalOnly(model)
    glob = {k: v.detach().clone() for k, v in model.state_dict().items()}
    assert rule.aggregated_keys(glob) == ()
    half = rule.client_half()
    mine = {k: torch.full_like(v, 7.0) for k, v in glob.items()}
    start, _ = half.prepare({PREFIX + k: v for k, v in mine.items()}, glob, {})
    assert all(torch.equal(start[k], mine[k]) for k in glob)  # a returning client starts from its own model
    first, _ = half.prepare({}, glob, {})
    assert all(torch.equal(first[k], glob[k]) for k in glob)  # a first-time one from the global model
    assert parse_options(LocalOnlyOptions, None, "algorithm") == LocalOnlyOptions()


# ---------------------------------------------------------------- FedAvg-FT


def without_local(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if not k.startswith("local_")} for r in rows]


def test_fedavg_ft_is_fedavg_but_for_the_local_accuracy_of_the_fine_tuned_global_model() -> None:
    """Global records bitwise FedAvg's; local_acc is the sent w^t fine-tuned (epochs, lr of its own) on the client's data."""
    ft = {"name": "fedavg_ft", "finetune_epochs": 2, "finetune_lr": 0.02}
    exp, protocol, got, starts = rounds_with_states(cfg_of(ft))
    _, _, fedavg, fedavg_starts = rounds_with_states(cfg_of({"name": "fedavg"}))
    assert without_local(got) == without_local(fedavg)
    assert all(torch.equal(a[k], b[k]) for a, b in zip(starts, fedavg_starts) for k in a)
    assert [r["local_acc"] for r in got] != [r["local_acc"] for r in fedavg]
    cfg = exp.config
    tune = replace(exp.spec, epochs=2)
    for rnd, record in enumerate(got):
        accs, losses = [], []
        for cid in record["clients"]:
            rows = protocol.evaluation.client_data(cid)
            seed = derive_seed(derive_seed(cfg.seed, "train", cid, rnd), "personal", 1)  # the client's second job this round
            tuned = trained(exp, ClientJob(cid, starts[rnd], rows.x, rows.y, 0.02, 1.0, {}, seed, tune))
            acc, loss = evaluate(exp.model, tuned, rows.x_eval, rows.y_eval, cfg.eval.batch_size)
            accs.append(acc)
            losses.append(loss)
        assert (record["local_acc"], record["local_loss"]) == (mean_or_none(accs), mean_or_none(losses)), rnd


def test_fedavg_ft_with_no_fine_tuning_measures_the_global_model_as_sent() -> None:
    exp, protocol, got, starts = rounds_with_states(cfg_of({"name": "fedavg_ft", "finetune_epochs": 0}))
    assert without_local(got) == without_local(records(cfg_of({"name": "fedavg"})))
    for rnd, record in enumerate(got):
        accs = []
        for cid in record["clients"]:
            rows = protocol.evaluation.client_data(cid)
            accs.append(evaluate(exp.model, starts[rnd], rows.x_eval, rows.y_eval, exp.config.eval.batch_size)[0])
        assert record["local_acc"] == mean_or_none(accs), rnd


def test_fedavg_ft_keeps_nothing_and_fedbabu_is_it_with_a_frozen_head() -> None:
    model = build_model("mlp", (6,), 3, {"hidden": [5]}, seed=0)
    cfg = cfg_of({"name": "fedavg_ft"})
    half = build_experiment(cfg).aggregator.client_half()
    assert half == FineTuning(5, None)  # the default: FedBABU's 5 epochs, at the round's lr
    babu = FedBABU(model, FedBABUOptions(finetune="head")).client_half()
    head = frozenset(k for k in model.state_dict() if k.startswith(head_name(model) + "."))
    assert babu == FineTuning(5, None, train_frozen=head, tune_frozen=frozenset(model.state_dict()) - head, untuned="trained")


@pytest.mark.parametrize(("options", "field"), [
    ({"finetune_epochs": -1}, "finetune_epochs"), ({"finetune_lr": 0.0}, "finetune_lr"), ({"finetune_lr": -0.1}, "finetune_lr"),
    ({"weighting": "equal"}, "weighting"), ({"finetune_epoch": 1}, "finetune_epoch"),
])
def test_fedavg_ft_bad_options_are_one_line_naming_the_field(options: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        build_experiment(cfg_of({"name": "fedavg_ft", **options}))
    assert err.value.field == f"algorithm.{field}" and "\n" not in str(err.value)
    assert parse_options(FedAvgFTOptions, {"finetune_epochs": 0, "finetune_lr": 0.5}, "algorithm") == FedAvgFTOptions(0, 0.5)


def test_local_takes_only_keep_optimizer_state() -> None:
    with pytest.raises(ConfigError) as err:
        build_experiment(cfg_of({"name": "local_only", "lam": 1.0}))
    assert err.value.field == "algorithm.lam" and "\n" not in str(err.value)
    with pytest.raises(ConfigError) as err:
        build_experiment(cfg_of({"name": "local_only", "keep_optimizer_state": "yes"}))
    assert err.value.field == "algorithm.keep_optimizer_state" and "\n" not in str(err.value)
    assert parse_options(LocalOnlyOptions, {"keep_optimizer_state": True}, "algorithm") == LocalOnlyOptions(True)


def half_mse(logits: torch.Tensor, y: torch.Tensor, temperature: Any) -> torch.Tensor:
    """1/2 (z - 1)^2 averaged over the batch (labels unused): the gradient of a one-weight model at x = 1 is w - 1."""
    return 0.5 * ((logits - 1.0) ** 2).sum(-1).mean()


def participations(options: LocalOnlyOptions, spec: LocalSpec, times: int) -> list[dict[str, torch.Tensor]]:
    """A one-weight Local-only client (w = 2, x = 1) through ``times`` client updates (ParameterClient, sequential path): its states."""
    from chillfl.aggregation.local_only import LocalOnly

    model = torch.nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(2.0)
    half = LocalOnly(model, options).client_half()
    trainer = half if isinstance(half, Personalising) else None
    client = ParameterClient(model, 64, half, trainer=trainer, spec=spec, objectives=() if trainer is None else trainer.objectives(spec))
    data = ClientData(torch.ones(1, 1), torch.zeros(1, dtype=torch.long))
    glob = {"weight": torch.tensor([[2.0]])}
    state: dict[str, torch.Tensor] | None = None
    states = []
    for r in range(times):
        task = ClientTask(0, r, ParamDownlink(glob, 0.1, 1.0, {}, seed=r), data, state)
        state = drive([client.update(task)], lambda _spec, jobs: [train_job(model, spec, j) for j in jobs])[0].state
        assert state is not None
        states.append(state)
    return states


def test_keep_optimizer_state_carries_momentum_and_adams_step_count_by_hand() -> None:
    # f(w) = 1/2 (w - 1)^2, one step a participation, lr 0.1, w = 2.
    # SGD, momentum 0.9: first participation g = 1, b = 1, w = 1.9 (either way).
    #   second: g = 0.9; afresh b = 0.9, w = 1.81; kept b = 0.9 * 1 + 0.9 = 1.8, w = 1.9 - 0.18 = 1.72 (PFLlib's optimiser object).
    momentum = LocalSpec(epochs=1, batch_size=8, momentum=0.9, base_loss=half_mse)
    afresh, keep = participations(LocalOnlyOptions(), momentum, 2), participations(LocalOnlyOptions(True), momentum, 2)
    assert set(afresh[1]) == {"local.weight"}  # the default keeps the model only
    torch.testing.assert_close(afresh[1]["local.weight"], torch.tensor([[1.81]]))
    torch.testing.assert_close(keep[0]["local.weight"], torch.tensor([[1.9]]))
    torch.testing.assert_close(keep[0]["local_opt.momentum.weight"], torch.tensor([[1.0]]))
    torch.testing.assert_close(keep[1]["local.weight"], torch.tensor([[1.72]]))
    torch.testing.assert_close(keep[1]["local_opt.momentum.weight"], torch.tensor([[1.8]]))
    assert int(keep[1]["local_opt.steps"]) == 2
    # Adam (0.9, 0.999): the first step is lr g / (|g| + eps) ~ 0.1 -> w = 1.9 either way; the second, g = 0.9:
    #   afresh (t = 1 again): w = 1.9 - 0.1 = 1.8.
    #   kept (t = 2): m = 0.9 * 0.1 + 0.1 * 0.9 = 0.18, m_hat = 0.18 / 0.19; v = 0.999 * 0.001 + 0.001 * 0.81 = 0.001809,
    #   v_hat = 0.001809 / (1 - 0.999^2); w = 1.9 - 0.1 * m_hat / sqrt(v_hat) = 1.800412...
    adam = LocalSpec(epochs=1, batch_size=8, base_loss=half_mse, optim=Optimizer(name="adam"))
    m_hat, v_hat = 0.18 / 0.19, 0.001809 / (1 - 0.999**2)
    torch.testing.assert_close(participations(LocalOnlyOptions(), adam, 2)[1]["local.weight"], torch.tensor([[1.8]]))
    kept = participations(LocalOnlyOptions(True), adam, 2)[1]
    torch.testing.assert_close(kept["local.weight"], torch.tensor([[1.9 - 0.1 * m_hat / v_hat**0.5]]))
    torch.testing.assert_close(kept["local_opt.exp_avg.weight"], torch.tensor([[0.18]]))
    torch.testing.assert_close(kept["local_opt.exp_avg_sq.weight"], torch.tensor([[0.001809]]))
    # Two participations of one step with the state kept are one training of two steps, bit for bit.
    for spec in (momentum, adam):
        two = train_job(torch.nn.Linear(1, 1, bias=False), spec, ClientJob(0, {"weight": torch.tensor([[2.0]])}, torch.ones(1, 1),
                                                                          torch.zeros(1, dtype=torch.long), 0.1, 1.0, {}, 0, replace(spec, epochs=2)))
        assert torch.equal(participations(LocalOnlyOptions(True), spec, 2)[1]["local.weight"], two.params["weight"])


def test_keep_optimizer_state_without_momentum_is_the_default_run() -> None:
    """Plain SGD has no optimiser state: keeping it changes nothing (PFLlib's clients and chillfl's default agree)."""
    assert records(cfg_of({"name": "local_only", "keep_optimizer_state": True})) == records(cfg_of({"name": "local_only"}))


# ---------------------------------------------------------------- misfits


def test_pa3fed_wraps_neither() -> None:
    cfg = cfg_of({"name": "pa3fed", "base": "local_only"})
    with pytest.raises(ConfigError) as err:
        check_algorithm("pa3fed", {"base": "local_only"}, cfg)
    assert err.value.field == "algorithm.base" and err.value.message.startswith("local_only declares no takes_weights")
    with pytest.raises(ConfigError) as err:
        check_algorithm("pa3fed", {"base": "fedavg_ft"}, cfg)
    assert err.value.field == "algorithm.base" and "FedAvg-FT's clients run their own local trainings" in err.value.message


def test_privacy_refuses_what_does_not_fit() -> None:
    pytest.importorskip("opacus")
    private = {"privacy.clip_norm": 1.0, "privacy.noise_multiplier": 1.5, "privacy.delta": 1e-3}
    with pytest.raises(ConfigError) as err:  # its clients fine-tune outside the accounted training
        build_experiment(cfg_of({"name": "fedavg_ft"}, **private, **{"privacy.mechanism": "dp-sgd"}))
    assert err.value.field == "privacy.mechanism" and "fine-tunes the global model" in err.value.message
    with pytest.raises(ConfigError) as err:  # nothing to average, so nothing to clip and noise
        build_experiment(cfg_of({"name": "local_only"}, **private, **{"privacy.mechanism": "dp-fedavg"}))
    assert err.value.field == "privacy.mechanism" and "takes no external per-client weights" in err.value.message


# ---------------------------------------------------------------- executors and resume


@pytest.mark.slow  # the process pool's start: seconds
@pytest.mark.parametrize("algorithm", [{"name": "local_only"}, {"name": "fedavg_ft", "finetune_epochs": 1}], ids=["local_only", "fedavg_ft"])
def test_under_every_executor(algorithm: dict[str, Any]) -> None:
    """sequential == processes bitwise, vectorized within the repo's rounding tolerance."""
    seq = assert_executors_agree(cfg_of(algorithm, **{"federation.rounds": 2}))
    assert all(r["local_acc"] is not None for r in seq)


@pytest.mark.parametrize("algorithm", [{"name": "local_only"}, {"name": "fedavg_ft", "finetune_epochs": 1}], ids=["local_only", "fedavg_ft"])
def test_resume_is_bitwise(algorithm: dict[str, Any], tmp_path: Path) -> None:
    cfg = cfg_of(algorithm)
    assert resumed_records(cfg, 2, tmp_path) == records(cfg)


def test_keep_optimizer_state_resumes_bitwise(tmp_path: Path) -> None:
    """With momentum: the kept state is checkpointed client state (client 3 first trains after the checkpoint, clients
    1 and 2 carry theirs over it); the run differs from the default one from the second participation on."""
    cfg = cfg_of({"name": "local_only", "keep_optimizer_state": True}, **{"client.momentum": 0.9})
    seq = records(cfg)
    assert resumed_records(cfg, 2, tmp_path) == seq
    afresh = records(cfg_of({"name": "local_only"}, **{"client.momentum": 0.9}))
    assert afresh[0] == seq[0]  # every client's first participation starts from the zero state either way
    assert afresh[1]["train_loss"] != seq[1]["train_loss"]


@pytest.mark.slow  # the process pool's start: seconds
@pytest.mark.parametrize("client", [{"client.momentum": 0.9}, {"client.optimizer": "adam"}], ids=["momentum", "adam"])
def test_keep_optimizer_state_under_every_executor(client: dict[str, Any]) -> None:
    """The kept state travels to the process pool's workers and back; the vectorised executor trains such jobs one by one."""
    assert_executors_agree(cfg_of({"name": "local_only", "keep_optimizer_state": True}, **client))


def test_local_resumes_each_clients_own_model(tmp_path: Path) -> None:
    """The client's model is checkpointed state: after a resume it trains on from it, not from the initial model."""
    cfg = cfg_of({"name": "local_only"}, **{"federation.rounds": 4, "federation.clients_per_round": 4})
    exp = build_experiment(cfg)
    protocol = build_protocol(exp)
    assert isinstance(protocol, ParameterSharing)
    executor = make_executor(exp, protocol)
    try:
        list(run_rounds(protocol, executor, seed=cfg.seed, num_clients=4, clients_per_round=4, rounds=2))
    finally:
        executor.close()
    state = protocol.store.load(0)
    assert state is not None and set(own_entries(state, PREFIX)) == set(exp.initial_state)
    assert resumed_records(cfg, 2, tmp_path) == records(cfg)


def test_fedavg_ft_trains_the_whole_model_and_fine_tunes_the_sent_one_by_hand() -> None:
    """x -> b (a x), f = 1/2 (b a - 1)^2, x = 1, lr 0.1, sent (a, b) = (1, 2): grad_a = r b, grad_b = r a, r = b a - 1.

    Uploaded (one epoch, nothing frozen, unlike FedBABU): r = 1 -> (1 - 0.2, 2 - 0.1) = (0.8, 1.9).
    Measured: the sent (1, 2) fine-tuned 2 epochs: (0.8, 1.9), then r = 0.52 -> (0.8 - 0.0988, 1.9 - 0.0416) = (0.7012, 1.8584);
    at finetune_lr 0.2, 1 epoch: (0.6, 1.8).
    """
    from test_lg_fedavg_fedbabu import SPEC, state, two_layers
    from test_perfedavg import close, one_sample, program

    model = two_layers(1.0, 2.0)
    x, y = one_sample()
    out = program(FineTuning(2, None), model, SPEC, state(1.0, 2.0), lr=0.1, x=x, y=y)
    close(out.params["0.weight"], 0.8)
    close(out.params["1.weight"], 1.9)
    assert out.personal is not None and out.num_steps == 1
    close(out.personal["0.weight"], 0.7012)
    close(out.personal["1.weight"], 1.8584)
    fast = program(FineTuning(1, 0.2), model, SPEC, state(1.0, 2.0), lr=0.1, x=x, y=y)
    assert fast.personal is not None
    close(fast.personal["0.weight"], 0.6)
    close(fast.personal["1.weight"], 1.8)
