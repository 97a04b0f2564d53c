"""PA3Fed: score (Eq. 8), gradient norm and FGN (Eqs. 4-5), period check (Eq. 6), alphas (Eq. 10), wrapper."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Sequence

import pytest
import torch

from chillfl.aggregation.base import ClientResult, Downlink, FedAvg, Params
from chillfl.aggregation.fednova import FedNova
from chillfl.aggregation.pa3fed import PA3Fed, PA3FedClient, PA3FedOptions, client_score, gradient_norm, stability_coefficient, weight_shift
from chillfl.metrics.fgn import detect_clp, federated_gradient_norm, is_clp


def result(cid: int, n: int, w: float, score: float | None = None, grad_norm: float | None = None, lr: float = 0.1, steps: int = 1) -> ClientResult:
    report: dict[str, Any] = {}
    if score is not None:
        report["score"] = score
    if grad_norm is not None:
        report["grad_norm"] = grad_norm
    return ClientResult(cid, {"w": torch.tensor([w])}, n, steps, lr, 1.0, 0.0, report)


class Scored:
    """A PA3Fed server with its clients' side of Eq. 10: each client keeps its last score and reports alpha (PA3FedClient.remember)."""

    def __init__(self, agg: PA3Fed) -> None:
        self.agg, self.half = agg, PA3FedClient(agg.options)
        self.states: dict[int, dict[str, torch.Tensor]] = {}  # each client's kept score (its own state)

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int) -> Params:
        out = []
        for r in results:
            if "score" in r.report:
                self.states[r.client_id], alpha = self.half.remember(self.states.get(r.client_id, {}), float(r.report["score"]))  # type: ignore[arg-type]
                r = dataclasses.replace(r, report={**r.report, "alpha": alpha})
            out.append(r)
        return self.agg.aggregate(global_params, out, round)


_SCORED: dict[int, Scored] = {}


def scored(agg: PA3Fed) -> Scored:
    """The one :class:`Scored` of ``agg`` (its clients' states live as long as the test's aggregator)."""
    return _SCORED.setdefault(id(agg), Scored(agg))


# ---------------------------------------------------------------- Eq. 10


def test_defaults_follow_the_paper() -> None:
    # PA3Fed "Experiments Setup": beta = 0.3 ("fixed at 0.3"), CLP threshold delta = 0.01; adapt in the CLP only
    # (Alg. 1 l.15-19); Eq. 10 read with |.| and eta kept in FGN (Eqs. 4-5), the documented readings
    o = PA3FedOptions()
    assert (o.beta, o.delta, o.mode, o.signed, o.fgn_scale_by_lr, o.first_round_clp) == (0.3, 0.01, "clp", False, True, False)


def test_stability_coefficient_both_readings() -> None:
    assert stability_coefficient(None, 3.0, 0.3) == 1.0  # first participation
    # score rose 0.7 -> 1.2: |diff| = 0.5 -> exp(-0.15); signed: exp(-0.3 * (0.7 - 1.2)) = exp(+0.15)
    assert stability_coefficient(0.7, 1.2, 0.3) == pytest.approx(math.exp(-0.15))
    assert stability_coefficient(0.7, 1.2, 0.3, signed=True) == pytest.approx(math.exp(0.15))
    # score fell 1.2 -> 0.7: both readings give exp(-0.15)
    assert stability_coefficient(1.2, 0.7, 0.3) == pytest.approx(math.exp(-0.15))
    assert stability_coefficient(1.2, 0.7, 0.3, signed=True) == pytest.approx(math.exp(-0.15))
    assert stability_coefficient(1.2, 1.2, 0.3) == 1.0


def test_alphas_follow_each_clients_own_history() -> None:
    agg = PA3Fed(FedAvg(), PA3FedOptions(mode="never"))
    scored(agg).aggregate({"w": torch.zeros(1)}, [result(1, 1, 0.0, score=2.0)], 0)
    assert agg.round_metrics()["alphas"] == {1: 1.0}
    # round 1: client 1 was last seen with 2.0 -> |2.0 - 1.5| = 0.5 -> exp(-0.15); client 2 is new -> 1
    scored(agg).aggregate({"w": torch.zeros(1)}, [result(1, 1, 0.0, score=1.5), result(2, 1, 0.0, score=9.0)], 1)
    assert agg.round_metrics()["alphas"] == pytest.approx({1: math.exp(-0.15), 2: 1.0})
    # round 3 (client 1 skipped round 2, sigma = 2): 1.5 -> 2.5, signed reading irrelevant here
    scored(agg).aggregate({"w": torch.zeros(1)}, [result(1, 1, 0.0, score=2.5)], 3)
    assert agg.round_metrics()["alphas"] == pytest.approx({1: math.exp(-0.3)})


def test_signed_alphas_reward_a_rising_score() -> None:
    agg = PA3Fed(FedAvg(), PA3FedOptions(mode="never", signed=True, beta=0.5))
    scored(agg).aggregate({"w": torch.zeros(1)}, [result(1, 1, 0.0, score=1.0)], 0)
    scored(agg).aggregate({"w": torch.zeros(1)}, [result(1, 1, 0.0, score=3.0)], 1)
    # exp(-0.5 * (1.0 - 3.0)) = exp(1.0)
    assert agg.round_metrics()["alphas"][1] == pytest.approx(math.e)


# ---------------------------------------------------------------- Eq. 8 and the gradient norm


def test_client_score_is_mean_cross_entropy_at_temperature_one() -> None:
    logits = torch.tensor([[0.0, 0.0], [math.log(3.0), 0.0]])
    y = torch.tensor([0, 0])
    # sample 1: -log(1/2) = ln 2; sample 2: softmax = (3/4, 1/4) -> -log(3/4) = ln(4/3); mean = ln(8/3) / 2
    for bs in (1, 2):
        assert client_score(lambda x: x, logits, y, batch_size=bs) == pytest.approx(math.log(8 / 3) / 2)


def _squared_error(p: Mapping[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return 0.5 * ((x @ p["w"] - y) ** 2).mean()


def test_gradient_norm_full_data_and_per_sample() -> None:
    w = {"w": torch.tensor([1.0, 0.0])}
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    y = torch.tensor([0.0, 1.0])
    # residuals r = x w - y = (1, -1); per-sample gradients r_n x_n = (1, 0) and (0, -1)
    # full data: mean = (0.5, -0.5) -> norm sqrt(0.5); per sample: sqrt(mean(1, 1)) = 1
    for bs in (1, 2):
        assert gradient_norm(_squared_error, w, x, y, batch_size=bs) == pytest.approx(math.sqrt(0.5))
        assert gradient_norm(_squared_error, w, x, y, per_sample=True, batch_size=bs) == pytest.approx(1.0)


def _torch_func_gradient_norm(loss_fn: Any, params: Mapping[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor, batch_size: int) -> float:
    """The full-data norm as gradient_norm computed it with torch.func.grad (before it took plain autograd)."""
    from torch.func import grad

    p = {k: v.detach() for k, v in params.items()}
    total = {k: torch.zeros_like(v, dtype=torch.float64) for k, v in p.items()}
    for i in range(0, len(y), batch_size):
        g = grad(loss_fn)(p, x[i : i + batch_size], y[i : i + batch_size])
        for k in total:
            total[k] += g[k].double() * (len(y[i : i + batch_size]) / len(y))
    return math.sqrt(sum(float((v**2).sum()) for v in total.values()))


def test_gradient_norm_is_bitwise_torch_func_grads() -> None:
    """The full-data norm takes plain autograd (no torch._dynamo import): the same bits as torch.func.grad's, on
    PA3Fed's own loss (the client half's: CE of the model at T through functional_call) and a head the loss skips."""
    from torch.func import functional_call

    from chillfl.models.registry import build_model

    model = build_model("flexchill_cnn", (1, 8, 8), 10, seed=0)
    model.add_module("unused", torch.nn.Linear(3, 2))  # never reached by the loss: a zero gradient, as torch.func.grad gives
    model.eval()
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(37, 1, 8, 8, generator=g), torch.randint(0, 10, (37,), generator=g)
    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss_fn(p: Mapping[str, torch.Tensor], xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(functional_call(model, dict(p), (xb,)) / 0.7, yb)

    for bs in (8, 1024):
        assert gradient_norm(loss_fn, params, x, y, batch_size=bs) == _torch_func_gradient_norm(loss_fn, params, x, y, bs)
    with torch.no_grad():  # as torch.func.grad, it differentiates inside no_grad too
        assert gradient_norm(loss_fn, params, x, y, batch_size=8) == _torch_func_gradient_norm(loss_fn, params, x, y, 8)


def test_full_data_gradient_norm_imports_no_torch_dynamo() -> None:
    """torch.func.grad's first call imports torch._dynamo and sympy (about 1.3 s of CPU a process): PA3Fed's
    default (full-data) norm must not pay it. In a fresh interpreter, where nothing has imported them yet."""
    import os
    import subprocess
    import sys
    import textwrap
    from pathlib import Path

    code = textwrap.dedent(
        """
        import sys
        import torch
        from chillfl.aggregation.pa3fed import gradient_norm
        had = "torch._dynamo" in sys.modules
        w = {"w": torch.tensor([1.0, 0.0])}
        x, y = torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.tensor([0.0, 1.0])
        norm = gradient_norm(lambda p, xb, yb: 0.5 * ((xb @ p["w"] - yb) ** 2).mean(), w, x, y)
        print(round(norm ** 2, 6), had or "torch._dynamo" not in sys.modules)
        """
    )
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["0.5", "True"]


# ---------------------------------------------------------------- Eqs. 5-6


def test_federated_gradient_norm() -> None:
    # m = (1/4, 3/4): FGN = 0.25 * 0.1 * 1^2 + 0.75 * 0.1 * 2^2 = 0.025 + 0.3 = 0.325
    assert federated_gradient_norm([1.0, 2.0], [1, 3], [0.1, 0.1]) == pytest.approx(0.325)
    # without eta: 0.25 * 1 + 0.75 * 4 = 3.25
    assert federated_gradient_norm([1.0, 2.0], [1, 3], scale_by_lr=False) == pytest.approx(3.25)


def test_detect_clp_on_a_given_fgn_sequence() -> None:
    fgn = [1.0, 1.5, 1.509, 1.4, 0.0, 0.5]
    # rises: -, +0.5, +0.006, -0.072, -1.0, +inf (from 0)  -> only > 0.01 counts
    assert detect_clp(fgn, 0.01) == [False, True, False, False, False, True]
    assert detect_clp(fgn, 0.001) == [False, True, True, False, False, True]
    assert detect_clp(fgn, 0.01, first=True)[0] is True
    assert is_clp(0.0, 0.0, 0.01) is False


def test_period_check_is_a_strict_relative_rise() -> None:
    # Eq. 6: (FGN(t) - FGN(t-1)) / FGN(t-1) > delta
    # at the threshold: (3 - 2) / 2 = 0.5, not > 0.5 -> outside the CLP
    assert is_clp(2.0, 3.0, 0.5) is False
    assert is_clp(2.0, 3.0, 0.25) is True
    # relative, not absolute: 10 -> 10.05 rises by 0.05 > 0.01 but by 0.005 relative -> outside;
    # 0.001 -> 0.002 rises by 0.001 < 0.5 but by 1.0 relative -> inside
    assert is_clp(10.0, 10.05, 0.01) is False
    assert is_clp(0.001, 0.002, 0.5) is True
    assert detect_clp([2.0, 3.0, 3.0], 0.5) == [False, False, False]


# ---------------------------------------------------------------- the wrapper


def test_wrapper_weights_inside_and_outside_clp() -> None:
    agg = PA3Fed(FedAvg())  # beta 0.3, delta 0.01, mode clp
    g = {"w": torch.zeros(1)}
    # round 0: no FGN(t-1) -> outside CLP -> FedAvg: 0.25 * 0 + 0.75 * 1 = 0.75
    out = scored(agg).aggregate(g, [result(0, 1, 0.0, score=1.0, grad_norm=1.0), result(1, 3, 1.0, score=2.0, grad_norm=1.0)], 0)
    assert out["w"].item() == pytest.approx(0.75)
    assert agg.round_metrics()["clp"] is False
    assert agg.round_metrics()["fgn"] == pytest.approx(0.1)  # 0.1 * 1^2
    # round 1: FGN 0.1 -> 0.4 (rise 3 > 0.01) -> CLP; alphas 1 (score 1 -> 1) and exp(-0.6) (2 -> 0)
    # weights (1 * 1, 3 * exp(-0.6)) / sum -> w = 3 e^-0.6 / (1 + 3 e^-0.6)
    out = scored(agg).aggregate(g, [result(0, 1, 0.0, score=1.0, grad_norm=2.0), result(1, 3, 1.0, score=0.0, grad_norm=2.0)], 1)
    a = 3 * math.exp(-0.6)
    assert out["w"].item() == pytest.approx(a / (1 + a))
    m = agg.round_metrics()
    assert m["clp"] is True and m["fgn"] == pytest.approx(0.4) and m["alphas"] == pytest.approx({0: 1.0, 1: math.exp(-0.6)})
    # weight shift (TV distance to FedAvg's (0.25, 0.75)): 0.5 * (|1/(1+a) - 0.25| + |a/(1+a) - 0.75|)
    # = 1/(1+a) - 0.25 with a = 3 e^-0.6 = 1.64644 -> 1 / 2.64644 - 0.25 = 0.37787 - 0.25 = 0.12787
    assert m["weight_shift"] == pytest.approx(1 / (1 + a) - 0.25) and m["weight_shift"] == pytest.approx(0.12787, abs=1e-5)
    # round 2: FGN unchanged (rise 0) -> outside CLP -> FedAvg weights again, though alpha_1 = exp(-0.3) now
    out = scored(agg).aggregate(g, [result(0, 1, 0.0, score=1.0, grad_norm=2.0), result(1, 3, 1.0, score=1.0, grad_norm=2.0)], 2)
    assert out["w"].item() == pytest.approx(0.75)
    assert agg.round_metrics()["alphas"][1] == pytest.approx(math.exp(-0.3))
    # the shift is recorded though not applied: 1/(1 + 3 e^-0.3) - 0.25 = 1/3.2225 - 0.25 = 0.06032
    assert agg.round_metrics()["adapted"] is False
    assert agg.round_metrics()["weight_shift"] == pytest.approx(1 / (1 + 3 * math.exp(-0.3)) - 0.25)


def test_fgn_without_the_learning_rate_reaches_the_wrapper() -> None:
    # fgn_scale_by_lr = False drops eta from Eq. 4: FGN = sum_i m_i ||g_i||^2 = 0.25 * 2^2 + 0.75 * 2^2 = 4
    # (with eta = 0.1, the default reading, it is 0.4)
    g = {"w": torch.zeros(1)}
    results = [result(0, 1, 0.0, score=1.0, grad_norm=2.0), result(1, 3, 1.0, score=1.0, grad_norm=2.0)]
    plain = PA3Fed(FedAvg(), PA3FedOptions(fgn_scale_by_lr=False))
    scored(plain).aggregate(g, results, 0)
    assert plain.round_metrics()["fgn"] == pytest.approx(4.0, rel=1e-12)
    with_lr = PA3Fed(FedAvg())
    scored(with_lr).aggregate(g, results, 0)
    assert with_lr.round_metrics()["fgn"] == pytest.approx(0.4, rel=1e-12)


class _UnnormalisedFedAvg(FedAvg):
    """A base whose own weights are n_i, not n_i / n (the protocol asks only for its weights, not for a sum of 1)."""

    def default_weights(self, results: Sequence[ClientResult]) -> torch.Tensor:
        return torch.tensor([float(r.num_samples) for r in results], dtype=torch.float64)


def test_weight_shift_normalises_the_base_weights() -> None:
    # base weights (1, 3) -> shares (0.25, 0.75); first participations: alpha = 1, so the reweighted
    # m_i alpha_i / sum_j m_j alpha_j are (0.25, 0.75) too and the shift is 0 (not 0.5 * (0.75 + 2.25) = 1.5)
    agg = PA3Fed(_UnnormalisedFedAvg())
    scored(agg).aggregate({"w": torch.zeros(1)}, [result(0, 1, 0.0, score=1.0, grad_norm=1.0), result(1, 3, 1.0, score=2.0, grad_norm=1.0)], 0)
    assert agg.round_metrics()["weight_shift"] == 0.0


def test_weight_shift_is_total_variation() -> None:
    # 0.5 * (|0.5 - 0.2| + |0.3 - 0.3| + |0.2 - 0.5|) = 0.3; identical weights -> 0
    assert weight_shift(torch.tensor([0.2, 0.3, 0.5]), torch.tensor([0.5, 0.3, 0.2])) == pytest.approx(0.3)
    assert weight_shift(torch.tensor([0.25, 0.75]), torch.tensor([0.25, 0.75])) == 0.0


def test_mode_always_and_never() -> None:
    g = {"w": torch.zeros(1)}
    rounds = [
        [result(0, 1, 0.0, score=1.0), result(1, 1, 1.0, score=1.0)],
        [result(0, 1, 0.0, score=1.0), result(1, 1, 1.0, score=3.0)],
    ]
    always = PA3Fed(FedAvg(), PA3FedOptions(mode="always", beta=0.5))
    never = PA3Fed(FedAvg(), PA3FedOptions(mode="never", beta=0.5))
    for t, res in enumerate(rounds):
        out_a, out_n = scored(always).aggregate(g, res, t), scored(never).aggregate(g, res, t)
    # round 1: alphas (1, exp(-1)) -> w = e^-1 / (1 + e^-1) under "always"; plain mean 0.5 under "never"
    assert out_a["w"].item() == pytest.approx(math.exp(-1) / (1 + math.exp(-1)))
    assert out_n["w"].item() == pytest.approx(0.5)
    assert always.round_metrics()["fgn"] is None  # no gradient norms reported


def test_clp_mode_requires_gradient_norms_and_scores() -> None:
    agg = PA3Fed(FedAvg())
    with pytest.raises(ValueError, match="grad_norm"):
        scored(agg).aggregate({"w": torch.zeros(1)}, [result(0, 1, 0.0, score=1.0)], 0)
    with pytest.raises(ValueError, match="alpha"):  # no score, so no alpha from the client
        scored(agg).aggregate({"w": torch.zeros(1)}, [result(0, 1, 0.0, grad_norm=1.0)], 0)


class RecordingBase:
    """A base aggregator with uniform default weights that records what it was given."""

    def __init__(self) -> None:
        self.seen: list[list[float] | None] = []

    def default_weights(self, results: Sequence[ClientResult]) -> torch.Tensor:
        return torch.full((len(results),), 1.0 / len(results), dtype=torch.float64)

    def downlink(self, client_id: int, round: int, global_params: Params) -> Downlink:
        return Downlink(context={"from": 1.0})

    def client_half(self) -> None:
        return None

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int, weights: torch.Tensor | None = None) -> Params:
        self.seen.append(None if weights is None else weights.tolist())
        return global_params

    def round_metrics(self) -> Mapping[str, Any]:
        return {"base_metric": 1}

    def begin_round(self, round: int, client_ids: Sequence[int]) -> None:
        return None

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        return None


def test_wrapper_multiplies_the_base_weights_and_forwards_the_rest() -> None:
    base = RecordingBase()
    agg = PA3Fed(base, PA3FedOptions(mode="always", beta=1.0))
    g = {"w": torch.zeros(1)}
    scored(agg).aggregate(g, [result(0, 1, 0.0, score=0.0), result(1, 5, 0.0, score=0.0)], 0)
    scored(agg).aggregate(g, [result(0, 1, 0.0, score=0.0), result(1, 5, 0.0, score=math.log(3.0))], 1)
    # round 1: base weights (1/2, 1/2) (its own, not n_i) * alphas (1, exp(-ln 3) = 1/3) -> (3/4, 1/4)
    assert base.seen[1] == pytest.approx([0.75, 0.25])
    assert agg.downlink(0, 2, g).context == {"from": 1.0}
    assert agg.round_metrics()["base_metric"] == 1


def test_wrapper_over_fednova_passes_adjusted_weights() -> None:
    agg = PA3Fed(FedNova(), PA3FedOptions(mode="always", beta=1.0))
    x = {"w": torch.zeros(1)}
    scored(agg).aggregate(x, [result(0, 1, -1.0, score=0.0), result(1, 1, -2.0, score=0.0, steps=4)], 0)
    out = scored(agg).aggregate(x, [result(0, 1, -1.0, score=0.0), result(1, 1, -2.0, score=math.log(3.0), steps=4)], 1)
    # p = (1/2 * 1, 1/2 * 1/3) renormalised = (3/4, 1/4); d = (1, 2/4); tau_eff = 3/4 * 1 + 1/4 * 4 = 1.75
    # x <- 0 - 1.75 * (0.75 * 1 + 0.25 * 0.5) = -1.53125
    assert out["w"].item() == pytest.approx(-1.53125)


def test_wrapper_rejects_a_base_without_weights_hook() -> None:
    class NoHook:
        def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int) -> Params:
            return global_params

    with pytest.raises(TypeError, match="default_weights"):
        PA3Fed(NoHook())  # type: ignore[arg-type]
