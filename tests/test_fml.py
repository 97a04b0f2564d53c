"""FML: both mutual-learning losses and their gradients by hand, one client step, the server average, runs.

The hand-worked cases use a bias-free 2-class linear model (logits z = W x, W 2x1), x = 1, y = 0:
the meme model W_m = (ln 3, 0) (z_m = (ln 3, 0), p_m = (3/4, 1/4)) and the local model W_l = (0, 0) (p_l = (1/2, 1/2)).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping

import pytest
import torch
from torch import nn
from torch.func import functional_call

from chillfl.aggregation.base import ClientHalf, ClientResult, ClientState, Local, first_state, own_entries, personal_model
from chillfl.aggregation.fml import FML, PREFIX, FMLClient, FMLOptions, Mutual, MutualLoss, OnMeme, mutual_state, split_mutual
from chillfl.engine.protocol import ClientData, ClientJob, ClientTask
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment
from chillfl.models.registry import build_model
from chillfl.protocols.parameters import ParamDownlink, ParameterClient
from chillfl.seeds import derive_seed
from chillfl.training.local import LocalSpec, evaluate
from chillfl.training.objective import ProximalTerm, distillation_kl, temperature_cross_entropy
from float_paths import ABS, REL
from methods_e2e import assert_executors_agree, cli_option_error, config, records, resumed_records
from test_personalised import close, linear, run_client

LN3 = math.log(3.0)
SPEC = LocalSpec(epochs=1, batch_size=8)
X, Y = torch.ones(1, 1), torch.zeros(1, dtype=torch.long)


def w(*values: float) -> torch.Tensor:
    return torch.tensor(values).view(-1, 1)


def test_kl_divergence_by_hand() -> None:
    # p = (3/4, 1/4), q = (1/2, 1/2): KL(p || q) = 3/4 ln(3/2) + 1/4 ln(1/2) = 0.304099 - 0.173287 = 0.130812
    #                                 KL(q || p) = 1/2 ln(2/3) + 1/2 ln 2     = -0.202733 + 0.346574 = 0.143841
    # ``mean`` also divides by the 2 classes: 0.065406
    zp, zq = torch.tensor([[LN3, 0.0]]), torch.zeros(1, 2)
    assert float(distillation_kl(zq, zp)) == pytest.approx(0.130812, abs=1e-6)  # (student, teacher): KL(teacher || student)
    assert float(distillation_kl(zp, zq)) == pytest.approx(0.143841, abs=1e-6)
    assert float(distillation_kl(zq, zp, reduction="mean")) == pytest.approx(0.065406, abs=1e-6)
    assert float(distillation_kl(zp, zp)) == pytest.approx(0.0, abs=1e-7)


# alpha = 0.25, beta = 0.75; CE_meme = -ln(3/4) = 0.287682, CE_local = -ln(1/2) = 0.693147
# L_local = 0.25 * 0.693147 + 0.75 * KL(p_m || p_l) = 0.173287 + 0.75 * 0.130812 = 0.271396
# L_meme  = 0.75 * 0.287682 + 0.25 * KL(p_l || p_m) = 0.215762 + 0.25 * 0.143841 = 0.251722;  L = 0.523118
# Detached targets: dCE/dz = p - e_y, dKL(t || softmax(z))/dz = softmax(z) - t
#   dL/dz_l = 0.25 (p_l - e_0) + 0.75 (p_l - p_m) = 0.25 (-1/2, 1/2) + 0.75 (-1/4, 1/4) = (-0.3125, 0.3125)
#   dL/dz_m = 0.75 (p_m - e_0) + 0.25 (p_m - p_l) = 0.75 (-1/4, 1/4) + 0.25 (1/4, -1/4) = (-0.125, 0.125)
# Not detached (PFLlib): each KL also reaches its target's model: dKL(softmax(z) || q)/dz = p (ln p - ln q - KL(p || q))
#   into z_m from 0.75 KL(p_m || p_l): 0.75 * (3/4 (ln 3/2 - 0.130812), 1/4 (ln 1/2 - 0.130812)) = (0.154492, -0.154492)
#   into z_l from 0.25 KL(p_l || p_m): 0.25 * (1/2 (ln 2/3 - 0.143841), 1/2 (ln 2 - 0.143841)) = (-0.068663, 0.068663)
#   dL/dz_l = (-0.381163, 0.381163), dL/dz_m = (0.029492, -0.029492); dW = dz x with x = 1
@pytest.mark.parametrize(("detach", "grad_meme", "grad_local"), [
    (True, (-0.125, 0.125), (-0.3125, 0.3125)),
    (False, (0.029492, -0.029492), (-0.381163, 0.381163)),
])
def test_both_losses_and_their_gradients_by_hand(detach: bool, grad_meme: tuple[float, float], grad_local: tuple[float, float]) -> None:
    pair = Mutual(linear(0.0, 0.0))
    state = {k: v.clone().requires_grad_(True) for k, v in mutual_state({"weight": w(LN3, 0.0)}, {"weight": w(0.0, 0.0)}).items()}
    logits = functional_call(pair, state, (X,))
    assert logits.shape == (2, 1, 2)
    loss = MutualLoss(temperature_cross_entropy, 0.25, 0.75, detach)(logits, Y, 1.0)
    assert float(loss.detach()) == pytest.approx(0.523118, abs=1e-6)
    loss.backward()
    torch.testing.assert_close(state["meme.weight"].grad.flatten(), torch.tensor(grad_meme), atol=1e-6, rtol=0)  # type: ignore[union-attr]
    torch.testing.assert_close(state["local.weight"].grad.flatten(), torch.tensor(grad_local), atol=1e-6, rtol=0)  # type: ignore[union-attr]


def test_the_cross_entropies_are_at_the_runs_temperature_and_the_kl_terms_at_one() -> None:
    # T = 2, alpha = beta = 1 (no KL): CE of z / 2: meme (ln 3 / 2, 0): -ln(sqrt 3 / (sqrt 3 + 1)) = 0.455746; local ln 2
    # alpha = beta = 0 (KL only, at T = 1 whatever the run's T): 0.130812 + 0.143841 = 0.274653
    logits = torch.tensor([[[LN3, 0.0]], [[0.0, 0.0]]])
    assert float(MutualLoss(temperature_cross_entropy, 1.0, 1.0)(logits, Y, 2.0)) == pytest.approx(0.455746 + 0.693147, abs=1e-6)
    assert float(MutualLoss(temperature_cross_entropy, 0.0, 0.0)(logits, Y, 2.0)) == pytest.approx(0.274653, abs=1e-6)


def test_one_client_step_by_hand() -> None:
    # the detached gradients above, lr 0.1: W_m = (ln 3 + 0.0125, -0.0125) (uploaded), W_l = (0.03125, -0.03125) (kept)
    model = linear(0.0, 0.0)
    half = FML(model, FMLOptions(alpha=0.25, beta=0.75)).client_half()
    x_eval, y_eval = torch.tensor([[1.0], [-2.0]]), torch.tensor([0, 0])
    reply = run_client(half, model, SPEC, {"weight": w(LN3, 0.0)}, lr=0.1, state={f"{PREFIX}weight": w(0.0, 0.0)}, x=X,
                       x_eval=x_eval, y_eval=y_eval)
    close(reply.uplink.params["weight"], LN3 + 0.0125, -0.0125)
    assert set(reply.state) == {f"{PREFIX}weight"}
    close(reply.state[f"{PREFIX}weight"], 0.03125, -0.03125)
    assert reply.uplink.train_loss == pytest.approx(0.523118, rel=1e-5)
    own = {"weight": w(0.03125, -0.03125)}  # local accuracy and loss are the local model's
    assert (reply.local_acc, reply.local_loss) == pytest.approx(evaluate(model, own, x_eval, y_eval), rel=1e-5)
    assert reply.local_loss != pytest.approx(evaluate(model, reply.uplink.params, x_eval, y_eval)[1], rel=1e-3)
    saved = personal_model(half, reply.state, reply.uplink.params)
    assert saved is not None
    close(saved["weight"], 0.03125, -0.03125)
    before = personal_model(half, {}, {"weight": w(1.0, 2.0)})  # before its first round: the global model
    assert before is not None
    close(before["weight"], 1.0, 2.0)


def test_first_participation_starts_the_local_model_from_the_meme() -> None:
    # no local model yet: W_l = W_m = (ln 3, 0), p_l = p_m, both KL terms and their gradients vanish:
    # dz_l = 0.25 (p - e_0) = (-0.0625, 0.0625), dz_m = 0.75 (p - e_0) = (-0.1875, 0.1875); lr 0.1
    model = linear(0.0, 0.0)
    reply = run_client(FML(model, FMLOptions(alpha=0.25, beta=0.75)).client_half(), model, SPEC, {"weight": w(LN3, 0.0)}, lr=0.1, x=X)
    close(reply.uplink.params["weight"], LN3 + 0.01875, -0.01875)
    close(reply.state[f"{PREFIX}weight"], LN3 + 0.00625, -0.00625)


def test_without_kl_the_meme_takes_plain_local_steps() -> None:
    # alpha = beta = 1: L_meme is the run's CE alone, so the uploaded meme is FedAvg's client model, bit for bit
    model = linear(0.0, 0.0)
    start = {"weight": w(LN3, 0.0)}
    xs = torch.tensor([[1.0], [-0.5], [2.0]])
    plain = run_client(None, model, LocalSpec(epochs=2, batch_size=2), start, lr=0.3, x=xs)
    mutual = run_client(FML(model, FMLOptions(alpha=1.0)).client_half(), model, LocalSpec(epochs=2, batch_size=2), start, lr=0.3,
                        state={f"{PREFIX}weight": w(3.0, -1.0)}, x=xs)
    assert torch.equal(mutual.uplink.params["weight"], plain.uplink.params["weight"])


def test_the_runs_parameter_terms_apply_to_the_meme_only_and_batch_terms_are_refused() -> None:
    # proximal mu = 2 on meme (1, 2) vs anchor (0, 0): 2/2 * (1 + 4) = 5; the local model's (5, 5) do not count
    params = {"meme.weight": w(1.0, 2.0), "local.weight": w(5.0, 5.0)}
    term = OnMeme(ProximalTerm())
    assert float(term(params, {"mu": 2.0, "global_params": {"weight": w(0.0, 0.0)}})) == pytest.approx(5.0)
    half = FML(linear(0.0, 0.0)).client_half()
    spec = LocalSpec(epochs=1, batch_size=8, terms=(ProximalTerm(),), frozen=frozenset({"weight"}))
    (objective,) = half.objectives(spec)  # type: ignore[attr-defined]
    assert isinstance(objective.terms[0], OnMeme) and objective.frozen == {"meme.weight", "local.weight"}

    class Batchy:
        per_batch, captures, reads = True, (), ()

        def __call__(self, params: Mapping[str, torch.Tensor], context: Any, step: Any) -> torch.Tensor:
            return torch.zeros(())

    with pytest.raises(ValueError, match="batch term"):
        half.objectives(LocalSpec(epochs=1, batch_size=8, terms=(Batchy(),)))  # type: ignore[attr-defined]


def test_split_and_join_the_pair_state() -> None:
    meme, local = {"a": w(1.0), "b": w(2.0)}, {"a": w(3.0), "b": w(4.0)}
    state = mutual_state(meme, local)
    assert set(state) == {"meme.a", "meme.b", "local.a", "local.b"}
    back = split_mutual(state)
    assert [{k: float(v) for k, v in part.items()} for part in back] == [{"a": 1.0, "b": 2.0}, {"a": 3.0, "b": 4.0}]
    assert set(Mutual(nn.Linear(1, 2)).state_dict()) == {"meme.weight", "meme.bias", "local.weight", "local.bias"}


def test_the_server_averages_the_memes_by_hand() -> None:
    # n = (10, 30), memes 1 and 3: samples 0.25 * 1 + 0.75 * 3 = 2.5; uniform (the authors' merge) (1 + 3) / 2 = 2
    glob = {"weight": w(0.0, 0.0)}
    results = [ClientResult(c, {"weight": w(v, v)}, n, 1, 0.1, 1.0, 0.0) for c, n, v in ((0, 10, 1.0), (1, 30, 3.0))]
    close(FML(linear(0.0, 0.0)).aggregate(glob, results, 0)["weight"], 2.5, 2.5)
    close(FML(linear(0.0, 0.0), FMLOptions(weighting="uniform")).aggregate(glob, results, 0)["weight"], 2.0, 2.0)


def test_a_run_replays_the_average_of_the_memes_and_keeps_the_local_models(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two rounds, every client sampled: each global model is the n_i / n average of the uploaded memes (plain float64 sums),
    each client keeps a whole local model, and local_acc is the mean of those local models' accuracies."""
    from chillfl.engine.loop import run_rounds
    from chillfl.experiment import build_protocol, make_executor
    from chillfl.protocols.common import mean_or_none
    from chillfl.protocols.parameters import ParameterSharing

    cfg = config(**{"algorithm.name": "fml", "model.name": "mlp", "federation.clients_per_round": 4, "federation.rounds": 2})
    exp = build_experiment(cfg)
    protocol = build_protocol(exp)
    assert isinstance(protocol, ParameterSharing)
    agg = exp.aggregator
    assert isinstance(agg, FML)
    seen: list[tuple[list[ClientResult], dict[str, torch.Tensor]]] = []
    plain = agg.aggregate

    def recorded(global_params, results, round, weights=None):  # type: ignore[no-untyped-def]
        out = plain(global_params, results, round, weights)
        seen.append((list(results), out))
        return out

    monkeypatch.setattr(agg, "aggregate", recorded)
    executor = make_executor(exp, protocol)
    try:
        recs = list(run_rounds(protocol, executor, seed=cfg.seed, num_clients=4, clients_per_round=4, rounds=2))
    finally:
        executor.close()
    for results, out in seen:
        total = sum(r.num_samples for r in results)
        assert set(out) == set(exp.model.state_dict())
        for k, v in out.items():
            expect = sum(r.num_samples / total * r.params[k].double() for r in results)
            torch.testing.assert_close(v.double(), expect, rtol=1e-6, atol=1e-7)
    accs = []
    for cid in recs[-1]["clients"]:
        state = protocol.store.load(cid) or {}
        assert {k[len(PREFIX):] for k in state} == set(exp.model.state_dict())
        own = {k[len(PREFIX):]: v for k, v in state.items()}
        data = protocol.evaluation.client_data(cid)
        assert data.x_eval is not None and data.y_eval is not None
        accs.append(evaluate(exp.model, own, data.x_eval, data.y_eval, cfg.eval.batch_size)[0])
    assert recs[-1]["local_acc"] == mean_or_none(accs)


def test_without_kl_a_run_is_fedavgs_global_model_beside_local_only_clients() -> None:
    """alpha = beta = 1: the meme trains on CE alone (FedAvg's client step) and the local model too, from its own start
    (Local-only's): the records' global losses are FedAvg's and the local ones Local-only's. Within float rounding: the
    pair's template is not the run's factored one, so its weight gradients are summed in another order."""
    cfg = config(**{"algorithm.name": "fml", "algorithm.alpha": 1.0, "model.name": "mlp", "federation.rounds": 2})
    fml = records(cfg)
    fedavg = records(cfg.with_overrides({"algorithm": {"name": "fedavg"}}))
    alone = records(cfg.with_overrides({"algorithm": {"name": "local_only"}}))
    assert [r["global_loss"] for r in fml] == pytest.approx([r["global_loss"] for r in fedavg], rel=REL, abs=ABS)
    assert [r["local_loss"] for r in fml] == pytest.approx([r["local_loss"] for r in alone], rel=REL, abs=ABS)
    assert [r["local_loss"] for r in fml] != pytest.approx([r["local_loss"] for r in fedavg], rel=1e-2)


@pytest.mark.slow  # three runs, one of them in a process pool, a FedAvg run and a resumed one
def test_run_agrees_across_executors_and_resumes_bitwise(tmp_path: Path) -> None:
    cfg = config(**{"algorithm.name": "fml", "model.name": "mlp", "algorithm.alpha": 0.3, "algorithm.beta": 0.6})
    seq = assert_executors_agree(cfg)
    assert all(r["local_acc"] is not None for r in seq)
    fedavg = records(cfg.with_overrides({"algorithm": {"name": "fedavg"}}))
    assert seq[-1]["local_loss"] != fedavg[-1]["local_loss"]
    assert resumed_records(cfg, 1, tmp_path) == seq  # the local models come back from the checkpoint


@pytest.mark.parametrize(("field", "value", "message"), [
    ("alpha", "-1.0", "must be in [0, 1], got -1.0"),
    ("beta", "2.0", "must be in [0, 1], got 2.0"),
    ("local_init", "random", "unknown value 'random'; allowed: meme, independent"),
])
def test_a_bad_option_on_the_command_line_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str, value: str, message: str
) -> None:
    assert cli_option_error(tmp_path, capsys, "fml", f"algorithm.{field}={value}") == (2, [f"chillfl: error: algorithm.{field}: {message}"], False)


@pytest.mark.parametrize("field", ["kl_reduction", "weighting", "local_init"])
def test_choices_are_checked(field: str) -> None:
    with pytest.raises(ConfigError, match=f"algorithm.{field}"):
        build_experiment(config(**{"algorithm.name": "fml", f"algorithm.{field}": "other"}))


# ---------------------------------------------------------------- local_init = "independent"

INDEPENDENT = FMLOptions(alpha=0.25, beta=0.75, local_init="independent")


def seeded_linear(seed: int, client_id: int) -> torch.Tensor:
    """The documented draw, recomputed: a new bias-free Linear(1, 2) built under torch's seed derive_seed(seed, "fml-local", id)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(seed, "fml-local", client_id))
        return nn.Linear(1, 2, bias=False).weight.detach().clone()


def first_job(half: ClientHalf, model: nn.Module, client_id: int, start: dict[str, torch.Tensor]) -> ClientJob:
    """The first training a client with no state yet asks for, through the parameter-sharing client (the runtime's path)."""
    assert isinstance(half, FMLClient)
    client = ParameterClient(model, 64, half, trainer=half, spec=SPEC, objectives=half.objectives(SPEC))
    task: ClientTask[ParamDownlink, ClientState] = ClientTask(client_id, 0, ParamDownlink(start, 0.1, 1.0, {}, seed=0), ClientData(X, Y), None)
    job = next(client.update(task))
    assert isinstance(job, ClientJob)
    return job


def test_an_independent_local_model_is_the_clients_own_seeded_draw() -> None:
    model = linear(0.0, 0.0)
    half = FML(model, INDEPENDENT, seed=11).client_half()
    meme = {"weight": w(LN3, 0.0)}
    rng = torch.get_rng_state()
    starts = {cid: split_mutual(first_job(half, model, cid, meme).start) for cid in (0, 1)}
    assert torch.equal(torch.get_rng_state(), rng)  # torch's global generator untouched
    for cid, (sent, local) in starts.items():
        assert torch.equal(sent["weight"], meme["weight"])  # the meme is the model sent
        assert torch.equal(local["weight"], seeded_linear(11, cid))  # the local model is the client's own draw
        assert not torch.equal(local["weight"], meme["weight"])
    assert not torch.equal(starts[0][1]["weight"], starts[1][1]["weight"])  # two clients, two draws
    again = split_mutual(first_job(FML(linear(5.0, 5.0), INDEPENDENT, seed=11).client_half(), model, 1, meme).start)[1]
    assert torch.equal(again["weight"], starts[1][1]["weight"])  # a pure function of (seed, client): not of the template's values
    other = split_mutual(first_job(FML(model, INDEPENDENT, seed=12).client_half(), model, 1, meme).start)[1]
    assert not torch.equal(other["weight"], starts[1][1]["weight"])  # nor the same in another run's seed
    # "meme" (the default) starts no state: its first training pairs the meme with a copy of it
    plain = FML(model, FMLOptions(alpha=0.25, beta=0.75), seed=11).client_half()
    assert first_state(plain, 0, meme) == {}
    assert torch.equal(split_mutual(first_job(plain, model, 0, meme).start)[1]["weight"], meme["weight"])


def test_an_independent_local_model_is_the_personal_model_before_the_first_round_and_what_trains() -> None:
    # W_l = the draw d = (d0, d1), W_m = (ln 3, 0), x = 1, y = 0, alpha = 0.25, beta = 0.75, lr 0.1, detached targets:
    #   dz_l = 0.25 (p_l - e_0) + 0.75 (p_l - p_m), p_l = softmax(d); the kept local model is d - 0.1 dz_l
    #   dz_m = 0.75 (p_m - e_0) + 0.25 (p_m - p_l), p_m = (3/4, 1/4);   the uploaded meme is (ln 3, 0) - 0.1 dz_m
    model = linear(0.0, 0.0)
    half = FML(model, INDEPENDENT, seed=11).client_half()
    glob = {"weight": w(LN3, 0.0)}
    draw = seeded_linear(11, 0)
    state = first_state(half, 0, glob)
    assert set(state) == {f"{PREFIX}weight"}
    before = personal_model(half, state, glob)  # before its first round: the model it will train, not the global one
    assert before is not None and torch.equal(before["weight"], draw)
    reply = run_client(half, model, SPEC, glob, lr=0.1, x=X)  # no state yet: the runtime starts it with the draw
    assert reply.state is not None
    d = draw.flatten().double()
    p_l, p_m, e_0 = torch.softmax(d, 0), torch.tensor([0.75, 0.25], dtype=torch.float64), torch.tensor([1.0, 0.0], dtype=torch.float64)
    dz_l = 0.25 * (p_l - e_0) + 0.75 * (p_l - p_m)
    dz_m = 0.75 * (p_m - e_0) + 0.25 * (p_m - p_l)
    close(reply.state[f"{PREFIX}weight"], *(d - 0.1 * dz_l).tolist())
    close(reply.uplink.params["weight"], *(torch.tensor([LN3, 0.0], dtype=torch.float64) - 0.1 * dz_m).tolist())


def independent_run_starts(cfg: Any, monkeypatch: pytest.MonkeyPatch) -> dict[int, dict[str, torch.Tensor]]:
    """Each client's local model as its first training received it, in a sequential run of ``cfg``."""
    starts: dict[int, dict[str, torch.Tensor]] = {}
    plain = FMLClient.train

    def spy(self: FMLClient, local: Local):  # type: ignore[no-untyped-def]
        starts.setdefault(local.client_id, own_entries(local.state, PREFIX))
        return plain(self, local)

    monkeypatch.setattr(FMLClient, "train", spy)
    records(cfg)
    return starts


def test_in_a_run_each_clients_first_local_model_is_the_documented_draw(monkeypatch: pytest.MonkeyPatch) -> None:
    """The run's own architecture (an MLP), redrawn per client: equal to a model built by the model registry from
    derive_seed(run seed, "fml-local", client id), unlike the meme and the other clients', the same in a second run."""
    cfg = config(**{"algorithm.name": "fml", "algorithm.local_init": "independent", "model.name": "mlp", "federation.rounds": 2})
    exp = build_experiment(cfg)
    first = independent_run_starts(cfg, monkeypatch)
    assert len(first) >= 3
    for cid, local in first.items():
        built = build_model("mlp", exp.data.dataset.input_shape, exp.data.num_classes, seed=derive_seed(cfg.seed, "fml-local", cid)).state_dict()
        assert set(local) == set(built) == set(exp.initial_state)
        assert all(torch.equal(local[k], built[k]) for k in built)
        assert not any(torch.equal(local[k], exp.initial_state[k]) for k in built if k.endswith("weight"))
    a, b = sorted(first)[:2]
    assert not torch.equal(first[a]["head.weight"], first[b]["head.weight"])
    second = independent_run_starts(cfg, monkeypatch)
    assert set(second) == set(first) and all(torch.equal(second[c][k], first[c][k]) for c in first for k in first[c])


@pytest.mark.slow  # three runs, one of them in a process pool, and a resumed one
def test_an_independent_start_agrees_across_executors_and_resumes_bitwise(tmp_path: Path) -> None:
    cfg = config(**{"algorithm.name": "fml", "model.name": "mlp", "algorithm.local_init": "independent"})
    seq = assert_executors_agree(cfg)
    assert seq != records(cfg.with_overrides({"algorithm": {"name": "fml", "local_init": "meme"}}))  # the start shows in the records
    assert resumed_records(cfg, 1, tmp_path) == seq  # client 3, first sampled in round 3 (after the checkpoint), draws the same model


def test_math_of_the_docstring_numbers() -> None:
    """The hand values above rest on these logarithms and softmax values."""
    assert 0.75 * math.log(1.5) + 0.25 * math.log(0.5) == pytest.approx(0.130812, abs=1e-6)
    assert 0.5 * math.log(2 / 3) + 0.5 * math.log(2) == pytest.approx(0.143841, abs=1e-6)
    assert 0.25 * math.log(2) + 0.75 * 0.130812 + 0.75 * -math.log(0.75) + 0.25 * 0.143841 == pytest.approx(0.523118, abs=1e-6)
    assert 0.75 * 0.75 * (math.log(1.5) - 0.130812) == pytest.approx(0.154492, abs=1e-6)
    assert 0.25 * 0.5 * (math.log(2 / 3) - 0.143841) == pytest.approx(-0.068663, abs=1e-6)
    s = math.sqrt(3)
    assert -math.log(s / (s + 1)) == pytest.approx(0.455746, abs=1e-6)
