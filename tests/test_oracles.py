"""Independent oracles (issue 17): each result is recomputed by code that shares nothing with chillfl's own path.

* ``evaluate`` against a plain eval-mode forward of an ``nn.Module`` whose
  batch-norm running statistics are far from the data's batch statistics;
* local training (``train_client``, the sequential and vectorised executors)
  against a plain ``torch.optim.SGD`` loop over a hand-built batch order, with
  fresh momentum on every call;
* SCAFFOLD against FedAvg on two clients with opposing quadratic objectives:
  the client drift vanishes and the global model reaches the minimiser of the
  average objective, which FedAvg misses;
* FedChill's round-1 temperatures of a real run against Eq. 6/7 computed by
  hand with numpy from the clients' class counts.

Each test is written so that a plausible one-line bug in the code under test
makes it fail (the mutations are listed in the tests' docstrings).
"""

from __future__ import annotations

import copy
import math
from typing import Any, Callable

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from chillfl.aggregation.base import ClientResult, FedAvg
from chillfl.aggregation.scaffold import LinearCorrectionTerm, Scaffold
from chillfl.config import load_config
from chillfl.executors.sequential import ClientJob, SequentialExecutor
from chillfl.executors.vectorized import VectorizedExecutor
from chillfl.experiment import build_data
from chillfl.runner import run_experiment
from chillfl.training.local import LocalSpec, batch_order, evaluate, model_state, train_client
from method_round import Clients

State = dict[str, torch.Tensor]


def seeded(seed: int, make: Callable[[], nn.Module]) -> nn.Module:
    """Build a module from its own seed, leaving the global RNG as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return make()


def mlp(seed: int, d_in: int = 6, hidden: int = 12, classes: int = 3) -> nn.Module:
    return seeded(seed, lambda: nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, classes)))


def blobs(seed: int, n: int, d_in: int = 6, classes: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d_in, generator=g) * 2.0, torch.randint(0, classes, (n,), generator=g)


def hand_batch_order(n: int, batch_size: int, epochs: int, seed: int) -> list[torch.Tensor]:
    """The documented order, written out independently: one randperm per epoch from the job's seeded
    generator, consecutive slices, a trailing single-sample batch merged into the one before it."""
    g = torch.Generator().manual_seed(seed)
    order: list[torch.Tensor] = []
    for _ in range(epochs):
        perm = torch.randperm(n, generator=g)
        batches = [perm[i : i + batch_size] for i in range(0, n, batch_size)]
        if len(batches) > 1 and batches[-1].numel() == 1:
            batches = batches[:-2] + [torch.cat(batches[-2:])]
        order += batches
    return order


def sgd_oracle(
    model: nn.Module,
    start: State,
    x: torch.Tensor,
    y: torch.Tensor,
    order: list[torch.Tensor],
    *,
    lr: float,
    temperature: float,
    momentum: float,
    weight_decay: float,
) -> tuple[State, float]:
    """A brand-new plain nn.Module + torch.optim.SGD loop: (final state, mean loss over the steps)."""
    net = copy.deepcopy(model)
    net.load_state_dict(start)
    net.train()
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=momentum, weight_decay=weight_decay)
    losses = []
    for idx in order:
        opt.zero_grad()
        loss = F.cross_entropy(net(x[idx]) / temperature, y[idx])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return {k: v.detach().clone() for k, v in net.state_dict().items()}, sum(losses) / len(losses)


def assert_state_close(got: State, want: State, tol: float) -> None:
    assert set(got) == set(want)
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=tol, atol=tol, msg=lambda m: f"{k}: {m}")


# --------------------------------------------------------------------------- 1. evaluate


def test_evaluate_runs_in_eval_mode_with_running_statistics() -> None:
    """Catches: ``evaluate`` in train mode (batch statistics, and the caller's running stats
    overwritten in place), a mean-of-batch-means loss, a temperature other than 1, a batch
    slice off by one. Running statistics far from the data's make train and eval mode differ
    by a wide margin, which the test asserts so that it cannot pass vacuously."""
    model = seeded(0, lambda: nn.Sequential(nn.Linear(5, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 4)))
    g = torch.Generator().manual_seed(1)
    x = torch.randn(50, 5, generator=g)
    state = model_state(model)
    state["1.running_mean"] = torch.randn(16, generator=g) * 3.0  # batch means of x's features are ~0
    state["1.running_var"] = torch.rand(16, generator=g) * 20.0 + 0.05  # batch variances are ~0.3
    state["1.weight"] = torch.rand(16, generator=g) + 0.5
    state["1.bias"] = torch.randn(16, generator=g) * 0.5

    # the hand computation: plain module, eval mode, one forward over all of x
    ref = copy.deepcopy(model)
    ref.load_state_dict(state)
    ref.eval()
    with torch.no_grad():
        logits = ref(x)
    y = logits.argmax(1)
    y[::5] = (y[::5] + 1) % 4  # eval-mode accuracy exactly 0.8, not a trivial 1.0
    want_acc = float((logits.argmax(1) == y).double().mean())
    want_loss = float(F.cross_entropy(logits.double(), y))
    assert want_acc == 0.8

    before = {k: v.clone() for k, v in state.items()}
    acc, loss = evaluate(model, state, x, y, batch_size=16)  # batches 16, 16, 16, 2
    assert acc == want_acc
    assert loss == pytest.approx(want_loss, rel=1e-6)
    for k, v in before.items():  # the caller's state, running statistics included, is read only
        assert torch.equal(state[k], v), k

    # what a train-mode evaluate would return: batch statistics of each batch of 16
    trained = copy.deepcopy(ref).train()
    with torch.no_grad():
        train_logits = torch.cat([trained(x[i : i + 16]) for i in range(0, 50, 16)])
    train_acc = float((train_logits.argmax(1) == y).double().mean())
    train_loss = float(F.cross_entropy(train_logits.double(), y))
    assert abs(acc - train_acc) >= 0.3  # 0.8 against 0.3
    assert abs(loss - train_loss) >= 0.1  # 1.17 against 1.36


# --------------------------------------------------------------------------- 2. fresh momentum


def test_momentum_is_fresh_on_every_train_client_call() -> None:
    """Catches: momentum buffers kept between calls (a cache on the module, the spec or the
    loss function), dampening (``b <- m b + (1 - m) g``), Nesterov, weight decay added after
    the momentum or with the wrong sign. Two consecutive calls (the second from the first's
    result, on other data, as the next client or round would) must each equal a brand-new
    ``torch.optim.SGD``; repeating the first call must give it again bit for bit."""
    model = mlp(3)
    start = model_state(model)
    spec = LocalSpec(epochs=2, batch_size=8, momentum=0.9, weight_decay=1e-2)
    T, lr = 0.5, 0.05

    def call(begin: State, x: torch.Tensor, y: torch.Tensor, seed: int) -> Any:
        return train_client(model, begin, x, y, spec=spec, lr=lr, temperature=T, context={}, generator=torch.Generator().manual_seed(seed))

    def oracle(begin: State, x: torch.Tensor, y: torch.Tensor, seed: int) -> tuple[State, float]:
        order = batch_order(len(y), spec.batch_size, spec.epochs, torch.Generator().manual_seed(seed))
        return sgd_oracle(model, begin, x, y, order, lr=lr, temperature=T, momentum=0.9, weight_decay=1e-2)

    x1, y1 = blobs(10, 40)
    x2, y2 = blobs(11, 29)
    first = call(start, x1, y1, seed=5)
    second = call(first.params, x2, y2, seed=6)
    again = call(start, x1, y1, seed=5)

    want1, loss1 = oracle(start, x1, y1, seed=5)
    want2, loss2 = oracle(first.params, x2, y2, seed=6)
    assert_state_close(first.params, want1, 1e-5)
    assert_state_close(second.params, want2, 1e-5)
    assert first.mean_loss == pytest.approx(loss1, rel=1e-5) and second.mean_loss == pytest.approx(loss2, rel=1e-5)
    assert (first.num_steps, second.num_steps) == (10, 8)  # 40/8 * 2; 29 = 8+8+8+5 per epoch
    for k in start:
        assert torch.equal(again.params[k], first.params[k]), k
    # not vacuous: one optimiser carried on from the first call's end (momentum kept) lands far from the second call
    net = copy.deepcopy(model)
    net.load_state_dict(start)
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9, weight_decay=1e-2)
    for x, y, seed in ((x1, y1, 5), (x2, y2, 6)):
        for idx in batch_order(len(y), spec.batch_size, spec.epochs, torch.Generator().manual_seed(seed)):
            opt.zero_grad()
            F.cross_entropy(net(x[idx]) / T, y[idx]).backward()
            opt.step()
    carried = dict(net.state_dict())
    assert max((carried[k] - second.params[k]).abs().max().item() for k in carried) > 1e-2


# --------------------------------------------------------------------------- 3. the local step, every executor

N_A, N_B, BATCH, EPOCHS = 33, 20, 8, 2  # client A: 8, 8, 8, 9 per epoch (a trailing single sample merged)


@pytest.mark.parametrize("momentum", [0.0, 0.9])
@pytest.mark.parametrize("weight_decay", [0.0, 5e-3])
@pytest.mark.parametrize("temperature", [1.0, 0.1])
def test_local_training_matches_plain_sgd_oracle(temperature: float, weight_decay: float, momentum: float) -> None:
    """Catches, in train_client and in both executors: T applied as a product or not at all,
    learning rate or weight decay scaled or dropped, a wrong batch order (one permutation for
    all epochs, the trailing single sample dropped or kept alone), factored linear-layer
    updates that miss a term, the vectorised executor mixing its clients' learning rates,
    temperatures, data or schedules (client B has a different n, lr, T and seed), or keeping
    momentum from one run to the next."""
    model = mlp(7)
    spec = LocalSpec(epochs=EPOCHS, batch_size=BATCH, momentum=momentum, weight_decay=weight_decay)
    start = model_state(model)
    xa, ya = blobs(20, N_A)
    xb, yb = blobs(21, N_B)
    lr_a, lr_b = 0.05 * temperature, 0.02 * temperature  # gradients scale as 1/T: keep the steps in a non-chaotic range
    job_a = ClientJob(client_id=0, start=start, x=xa, y=ya, lr=lr_a, temperature=temperature, context={}, seed=101)
    job_b = ClientJob(client_id=1, start=start, x=xb, y=yb, lr=lr_b, temperature=2.0 * temperature, context={}, seed=202)

    def oracle(job: ClientJob) -> tuple[State, float]:
        order = hand_batch_order(len(job.y), BATCH, EPOCHS, job.seed)
        return sgd_oracle(model, dict(job.start), job.x, job.y, order, lr=job.lr, temperature=job.temperature, momentum=momentum, weight_decay=weight_decay)

    want_a, loss_a = oracle(job_a)
    want_b, loss_b = oracle(job_b)
    assert [len(b) for b in hand_batch_order(N_A, BATCH, 1, 101)] == [8, 8, 8, 9]

    direct = train_client(model, start, xa, ya, spec=spec, lr=job_a.lr, temperature=temperature, context={}, generator=torch.Generator().manual_seed(job_a.seed))
    assert_state_close(direct.params, want_a, 1e-5)
    assert direct.num_steps == 8 and direct.mean_loss == pytest.approx(loss_a, rel=1e-5)

    (seq,) = SequentialExecutor(model, spec).run([job_a])
    assert_state_close(seq.params, want_a, 1e-5)
    assert seq.num_steps == 8 and seq.mean_loss == pytest.approx(loss_a, rel=1e-5)

    vec = VectorizedExecutor(model, spec)
    out_a, out_b = vec.run([job_a, job_b])
    assert vec.fallback_reason is None  # the vmapped path ran, not the sequential fallback
    assert_state_close(out_a.params, want_a, 1e-5)
    assert_state_close(out_b.params, want_b, 1e-5)
    assert (out_a.num_steps, out_b.num_steps) == (8, 6)
    assert out_a.mean_loss == pytest.approx(loss_a, rel=1e-5) and out_b.mean_loss == pytest.approx(loss_b, rel=1e-5)

    # a second round on the same executor starts from fresh momentum buffers too
    next_a = ClientJob(client_id=0, start=out_a.params, x=xa, y=ya, lr=lr_a, temperature=temperature, context={}, seed=303)
    next_b = ClientJob(client_id=1, start=out_b.params, x=xb, y=yb, lr=lr_b, temperature=2.0 * temperature, context={}, seed=404)
    again_a, again_b = vec.run([next_a, next_b])
    assert vec.fallback_reason is None
    assert_state_close(again_a.params, oracle(next_a)[0], 1e-5)
    assert_state_close(again_b.params, oracle(next_b)[0], 1e-5)
    vec.close()


# --------------------------------------------------------------------------- 4. SCAFFOLD removes client drift

CURVATURES, TARGETS = (1.0, 4.0), (1.0, -1.0)  # f_i(w) = a_i / 2 * (w - b_i)^2
W_STAR = sum(a * b for a, b in zip(CURVATURES, TARGETS)) / sum(CURVATURES)  # minimiser of the average: -0.6
LOCAL_STEPS, LOCAL_LR, ROUNDS = 40, 0.05, 25


def half_mse(logits: torch.Tensor, targets: torch.Tensor, temperature: Any) -> torch.Tensor:
    return 0.5 * ((logits.squeeze(-1) - targets) ** 2).mean()


def quadratic_rounds(aggregator: Any, spec: LocalSpec) -> tuple[list[float], list[list[float]]]:
    """Rounds of the real local training on f_i: a bias-free nn.Linear(1, 1) on the constant input
    sqrt(a_i) with target sqrt(a_i) b_i, so that the loss is exactly a_i / 2 (w - b_i)^2.
    Returns the server model before each round and every client's model after it."""
    model = nn.Linear(1, 1, bias=False)
    data = [(torch.full((2 * LOCAL_STEPS, 1), math.sqrt(a)), torch.full((2 * LOCAL_STEPS,), math.sqrt(a) * b)) for a, b in zip(CURVATURES, TARGETS)]
    state = {"weight": torch.zeros(1, 1)}
    servers, clients = [], []
    halves = Clients(aggregator, model)  # the clients' own states (SCAFFOLD's c_i)
    for rnd in range(ROUNDS):
        results = []
        for cid, (x, y) in enumerate(data):
            start, context = halves.start(cid, rnd, state)
            out = train_client(model, start, x, y, spec=spec, lr=LOCAL_LR, temperature=1.0, context=context, generator=torch.Generator().manual_seed(rnd))
            assert out.num_steps == LOCAL_STEPS
            results.append(ClientResult(cid, out.params, len(y), out.num_steps, LOCAL_LR, 1.0, out.mean_loss))
        servers.append(state["weight"].item())
        clients.append([r.params["weight"].item() for r in results])
        state = aggregator.aggregate(state, halves.results(rnd, state, results), rnd)
    servers.append(state["weight"].item())
    return servers, clients


def test_scaffold_removes_client_drift_on_opposing_quadratics() -> None:
    """Two clients pull towards +1 and -1 with curvatures 1 and 4; the average objective's
    minimiser is -0.6. With 40 local steps each client nearly reaches its own optimum, so
    FedAvg settles near their plain average (-0.07) with each client drifting ~0.93 away from
    the server model every round. SCAFFOLD's corrections must cancel that drift and bring the
    server to -0.6. Catches: a flipped correction sign (``LinearCorrectionTerm`` returning
    ``-<w, c>``, or ``downlink`` sending c_i - c): it diverges; a flipped
    ``(x - y_i)`` in the control update, or ``c`` never updated, or ``c_i`` not stored: no convergence."""
    fedavg_servers, fedavg_clients = quadratic_rounds(FedAvg(), LocalSpec(epochs=1, batch_size=2, base_loss=half_mse))
    scaffold_servers, scaffold_clients = quadratic_rounds(Scaffold(num_clients=2), LocalSpec(epochs=1, batch_size=2, base_loss=half_mse, terms=(LinearCorrectionTerm(),)))
    assert all(math.isfinite(w) for w in scaffold_servers + sum(scaffold_clients, []))

    # round 0: every control variate is zero, so SCAFFOLD's clients train exactly like FedAvg's
    assert scaffold_clients[0] == fedavg_clients[0]

    def drift(servers: list[float], clients: list[list[float]]) -> list[float]:  # max_i |y_i - x| per round
        return [max(abs(y - x) for y in ys) for x, ys in zip(servers, clients)]

    fedavg_drift = drift(fedavg_servers, fedavg_clients)
    scaffold_drift = drift(scaffold_servers, scaffold_clients)
    assert fedavg_drift[-1] > 0.9
    assert all(later < earlier for earlier, later in zip(scaffold_drift[1:], scaffold_drift[2:]))  # shrinks every round
    assert scaffold_drift[-1] < 1e-3 * fedavg_drift[-1]
    # each client's local model ends at the global optimum too, not at its own optimum
    assert max(abs(y - W_STAR) for y in scaffold_clients[-1]) < 1e-3
    assert max(abs(y - W_STAR) for y in fedavg_clients[-1]) > 1.4  # client 0 sits near +1

    # the server model: SCAFFOLD reaches the minimiser of the average objective, FedAvg does not
    assert scaffold_servers[-1] == pytest.approx(W_STAR, abs=1e-3)
    assert abs(fedavg_servers[-1] - W_STAR) > 0.5


# --------------------------------------------------------------------------- 5. FedChill start temperatures end to end

P_G = [1.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 3.0]  # non-uniform priors: h_max = 1/p_min + C - 2 = 14 + 8
T_MAX, T_MIN, S = 0.9, 0.14, 3.0


def test_fedchill_round_one_temperatures_equal_eq6_eq7_by_hand() -> None:
    """Catches: the ratio score's maximum taken as 2(C - 1) (right only for uniform p_g),
    p_g ignored or not normalised, s or T_max not applied, the [T_min, T_max] clip missing,
    temperatures assigned to the wrong clients, or the runner reporting anything but the
    temperature each client trained with in round 1."""
    config = load_config(
        None,
        {
            "name": "oracle-fedchill",
            "dataset.name": "digits",
            "partition.name": "dirichlet",
            "partition.alpha": 0.3,
            "model.name": "mlp",
            "federation.num_clients": 6,
            "federation.rounds": 2,
            "client.epochs": 1,
            "client.batch_size": 64,
            "temperature.policy": "fedchill",
            "temperature.t_max": T_MAX,
            "temperature.t_min": T_MIN,
            "temperature.s": S,
            "temperature.p_g": P_G,
            "temperature.decay": False,
        },
    )
    out = run_experiment(config, write=False, progress=False)
    assert out.folder is None and [r["round"] for r in out.records] == [1, 2]

    counts = build_data(config).class_counts().astype(np.float64)  # [clients, classes]
    assert counts.shape == (6, 10)
    p = counts / counts.sum(axis=1, keepdims=True)
    p_g = np.array(P_G) / sum(P_G)
    raw = np.abs(p / p_g - 1.0).sum(axis=1)  # Eq. 6
    h = np.clip(raw / (1.0 / p_g.min() + p_g.size - 2.0), 0.0, 1.0)
    want = np.clip(T_MAX * np.exp(-S * h), T_MIN, T_MAX)  # Eq. 7, clipped
    # the setting exercises every part of the formula: some clients clipped to T_min, others not, all inside (0, 1)
    assert np.any(want == T_MIN) and np.sum(want > T_MIN) >= 3 and np.all((h > 0) & (h < 1))

    for record in out.records:  # decay is off: both rounds train at Eq. 7's temperatures
        got = record["temperatures"]
        assert sorted(got, key=int) == [str(c) for c in range(6)]
        assert [got[str(c)] for c in range(6)] == pytest.approx(want.tolist(), rel=1e-12)
        assert record["temperature_mean"] == pytest.approx(want.mean(), rel=1e-12)


def test_fedchill_minmax_server_offers_each_client_its_own_eq7_temperature() -> None:
    """With ``normalisation = "minmax"`` the server computes T_{n,0} (it needs every client's counts) and offers it
    in each client's downlink. Catches: an offer computed for the wrong client (e.g. every client given client 0's)."""
    config = load_config(
        None,
        {
            "name": "oracle-fedchill-minmax",
            "dataset.name": "digits",
            "partition.name": "dirichlet",
            "partition.alpha": 0.3,
            "model.name": "mlp",
            "federation.num_clients": 4,
            "federation.rounds": 1,
            "client.epochs": 1,
            "client.batch_size": 64,
            "temperature.policy": "fedchill",
            "temperature.normalisation": "minmax",
            "temperature.decay": False,
        },
    )
    out = run_experiment(config, write=False, progress=False)
    counts = build_data(config).class_counts().astype(np.float64)
    p = counts / counts.sum(axis=1, keepdims=True)
    raw = np.abs(p * 10 - 1.0).sum(axis=1)  # Eq. 6 with uniform p_g = 1/10
    h = (raw - raw.min()) / (raw.max() - raw.min())  # "minmax": the least heterogeneous client 0, the most 1
    want = np.clip(np.exp(-2.0 * h), 0.05, 1.0)  # Eq. 7, T_max = 1, s = 2
    assert len(set(want.round(6).tolist())) == 4  # four different temperatures, so a mix-up shows
    got = out.records[0]["temperatures"]
    assert [got[str(c)] for c in range(4)] == pytest.approx(want.tolist(), rel=1e-12)
