"""PA3Fed (period-aware adaptive aggregation), as a wrapper over any base aggregator.

Checked against papers/pa3fed.txt Algorithm 1, Eq. 4-10 and the Experiments setup (beta = 0.3, delta = 0.01), 2026-12-02; no authors' code found (search, find_repos "pa3fed").

Per round t (PA3Fed, Algorithm 1):

* client i, after local training, reports its score on its whole local
  training set (Eq. 8) ``s_i^t = E_{(x,y) in D_i}[-log softmax(f(x))_y]``
  (:func:`client_score`, ``report["score"]``) and its local gradient norm
  ``||g_i||`` (:func:`gradient_norm`, ``report["grad_norm"]``);
* stability coefficient (Eq. 10), with ``t - sigma`` the client's previous
  participation: ``alpha_i = exp(-beta * |s_i^{t-sigma} - s_i^t|)``; 1 on a
  client's first participation;
* FGN(t) = sum_i m_i eta_i ||g_i||^2 (Eqs. 4-5) and the period check
  (FGN(t) - FGN(t-1)) / FGN(t-1) > delta (Eq. 6), see :mod:`chillfl.metrics.fgn`;
* inside a CLP the base aggregator averages with weights ``m_i * alpha_i``
  renormalised (Alg. 1, line 20), outside with its own weights ``m_i``.

The base decides how weights enter (FedAvg/FedProx/FedMut/VRL-SGD average
models, FedNova weights normalised updates, SCAFFOLD/FedOpt weight updates):
any aggregator with ``default_weights(results)`` and
``aggregate(..., weights=...)`` works, and a registered base must say so by
declaring ``takes_weights`` (and no ``not_a_base``) in its capabilities
(:func:`base_spec`; a plugin that declares nothing is refused with one line).
PA3Fed multiplies the base's own weights by ``alpha_i``. Its effective
capabilities are its base's: the base's plain-SGD limit, Flower refusal and
personal model hold for the wrapped method too.

Each client runs :class:`PA3FedClient` (``PA3Fed.client_half()``, options
only) after its local training; it computes ``score`` and ``grad_norm`` from
the trained local model on the client's training data and ``alpha`` from its
own previous score, i.e. the client side of Algorithm 1, lines 7-10 (these
three floats are the only extra upload, plus Eq. 10's exponent ``log_alpha``
in a round where the client's alpha underflows to 0 or overflows to inf; a
client half written by hand that reports such an alpha must send it too, or
the server refuses the report in one line, see :func:`_exponent`).

Choices
-------
* Eq. 10's sign is garbled in the paper. Default (``signed = False``):
  ``exp(-beta * |s^{t-sigma} - s^t|)``, the reading under which "clients with
  greater stability are given more weight" (alpha <= 1, equal to 1 for an
  unchanged score). ``signed = True``: ``exp(-beta * (s^{t-sigma} - s^t))``,
  as printed (no absolute value), which is > 1 when the score rises and < 1 when it falls.
* The paper says the score "should show a gradual increase", yet Eq. 8 is a
  cross-entropy (lower is better); Eq. 8 is implemented as written.
* Score model: Algorithm 1 computes ``s_i^t`` after local training, so the
  caller evaluates the trained local model; Eq. 8 has a plain softmax, so the
  score is taken at T = 1 even when training uses logit chilling.
* Gradient: ``||g_i||`` is the norm of the gradient of the mean loss over the
  client's whole local training set at its model after local training
  (Alg. 1 line 9 follows local training), model in eval mode (no dropout, BN
  running statistics). ``grad_norm = "per_sample"`` gives instead
  sqrt(mean_n ||g(x_n, y_n)||^2), the per-sample form of Eqs. 2 and 4 whose
  square is the empirical FIM trace.
* Loss of the gradient: Eq. 4 is the change of the *training* loss after a
  step, so by default (``grad_temperature = "train"``) it is the temperature
  cross-entropy at the client's training temperature T (logit chilling /
  FedChill); ``"one"`` takes it at T = 1, the log-likelihood of the FIM
  (Eqs. 2-3). Method terms (FedProx's proximal term, SCAFFOLD's correction)
  are not data losses and are left out.
* FGN weights (Eq. 5): the paper defines m_i = n_i / sum_j n_j, "the
  proportion of the total data held by client C_i". Default
  (``fgn_weights = "sampled"``): the sum runs over the round's reporting
  clients, so the weights of FGN(t) sum to 1 every round. ``"total"``: over
  all clients' training rows (the literal reading), so a round's weights sum
  to its clients' share of the data and FGN(t) also moves with which clients
  were sampled (recomputed from a pa3fed/table2-h0.1 run's gradient norms,
  12 of its 30 CLP verdicts flip). The aggregation weights inside a CLP are
  renormalised either way (Alg. 1, line 20).
* Scores and gradient norms are computed in every mode, so ``mode = "never"``
  is the base method with FGN / CLP measured (Fig. 5's FedAvg side).
* The score history is updated every round the client participates, inside
  or outside a CLP. ``mode`` is the ablation of Fig. 7: ``clp`` (adapt in
  CLP only, default), ``always`` (every round), ``never`` (base method).
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Literal, Mapping, Protocol, Sequence, runtime_checkable

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

from chillfl.aggregation.base import (
    AroundAggregator,
    half_parts,
    with_run_model,
    Json,
    Aggregator,
    ClientHalf,
    ClientResult,
    ClientState,
    Context,
    Downlink,
    AggregatesNobody,
    MakesClientModels,
    Params,
    Personalising,
    Report,
    Trained,
    Wire,
    check_state_keys,
    combine,
    report_number,
)
from chillfl.aggregation.registry import (
    AlgorithmSpec, BuildContext, Built, algorithm_names, algorithm_options, algorithm_spec, build_base, register_algorithm, registered_algorithms,
    UNDECLARED_WEIGHTS, require_client_sizes, undeclared_weights, weighted_bases,
)
from chillfl.capabilities import Capabilities, TakesName
from chillfl.errors import LOSS_HINT, ConfigError, Diverged, choice_error
from chillfl.metrics.fgn import federated_gradient_norm, is_clp
from chillfl.options import require
from chillfl.plugins import is_import_path, resolve
from chillfl.training.local import split_state

if TYPE_CHECKING:  # annotations only
    from chillfl.config import RunConfig

PA3Mode = Literal["clp", "always", "never"]


@dataclass(frozen=True)
class PA3FedOptions:
    """PA3Fed options; paper defaults beta = 0.3, delta = 0.01 (Experiments setup).

    ``base`` / ``base_options`` name the wrapped algorithm when PA3Fed is built
    through the registry (``algorithm.name = "pa3fed"``).
    """

    beta: float = 0.3
    delta: float = 0.01
    mode: PA3Mode = "clp"
    signed: bool = False
    fgn_scale_by_lr: bool = True
    fgn_weights: Literal["sampled", "total"] = "sampled"
    first_round_clp: bool = False
    grad_norm: Literal["full", "per_sample"] = "full"
    grad_temperature: Literal["train", "one"] = "train"
    eval_batch_size: int = 1024
    base: str = "fedavg"
    base_options: dict[str, Any] = field(default_factory=dict)

    def validate(self, section: str) -> None:
        require(self.beta >= 0, f"{section}.beta", f"must be >= 0, got {self.beta}")
        require(math.isfinite(self.delta), f"{section}.delta", f"must be a finite number, got {self.delta}")
        # Eq. 6's left side, (FGN(t) - FGN(t-1)) / FGN(t-1), is >= -1 (an FGN is >= 0): a delta <= -1 was accepted and
        # flagged every round with a rising or falling FGN, mode = "always" under another name
        require(self.delta > -1, f"{section}.delta", f"must be > -1, got {self.delta}: Eq. 6's relative change of the FGN, "
                                                     "(FGN(t) - FGN(t-1)) / FGN(t-1), is never below -1, so this delta would flag "
                                                     "(almost) every round as a CLP; mode = \"always\" does that")
        require(1 <= self.eval_batch_size <= 2**31 - 1, f"{section}.eval_batch_size", f"must be in [1, 2147483647] (a C int in torch), got {self.eval_batch_size}")


def stability_exponent(previous_score: float | None, score: float, beta: float, *, signed: bool = False) -> float:
    """Eq. 10's exponent, log alpha = -beta * |s^{t-sigma} - s^t| (or the signed difference); 0 without a previous score."""
    if previous_score is None:
        return 0.0
    diff = previous_score - score
    return -beta * (diff if signed else abs(diff))


def stability_coefficient(previous_score: float | None, score: float, beta: float, *, signed: bool = False) -> float:
    """Eq. 10: exp(-beta * |s^{t-sigma} - s^t|) (or the signed difference); 1 without a previous score.

    inf where the signed exponent passes 709 (math.exp raised OverflowError there): the weights then come from
    the exponent itself (:func:`alpha_weights`)."""
    try:
        return math.exp(stability_exponent(previous_score, score, beta, signed=signed))
    except OverflowError:
        return math.inf


def exponent_lost(alpha: float) -> bool:
    """Whether ``alpha`` is 0, subnormal or inf: its exponent cannot be read back from it (``log`` of a subnormal
    keeps a few bits), so the client sends it as ``log_alpha``. Exactly the alphas :func:`alpha_weights` may need
    the exponent of: its log-space route reads ``log(alpha)`` for every other one."""
    return not sys.float_info.min <= alpha < math.inf


def alpha_weights(base_weights: torch.Tensor, alphas: torch.Tensor, exponents: torch.Tensor) -> torch.Tensor:
    """Alg. 1 line 20's m_i alpha_i / sum_j m_j alpha_j, defined whatever the alphas' magnitudes.

    The plain product where every non-zero m_i alpha_i is a normal float and their sum is positive and finite
    (bitwise the paper's formula); else a softmax of log m_i + log alpha_i over ``exponents`` (Eq. 10's,
    :func:`stability_exponent`). Why: a large beta or score change underflowed every alpha to 0 (or overflowed one
    to inf), and 0/0 made a NaN global model reported as "diverged"; subnormal products keep only a few bits (or
    round to 0), and their sum, still positive, gave up to the whole weight to one client. ConfigError on
    ``algorithm.beta`` when even the exponents overflow (beta * change past float64's range).
    """
    if bool(alphas.isnan().any() | exponents.isnan().any()):  # a NaN score's: no beta makes it a weight (not beta's range)
        raise ValueError(f"PA3Fed's weights are not defined: client {int((alphas.isnan() | exponents.isnan()).nonzero()[0])} (in the round's order) has "
                         "a nan alpha or Eq. 10 exponent, from a score (its model's loss on its own data) that was not finite")
    w = base_weights * alphas
    total = w.sum()
    normal = bool(((w == 0) | (w >= torch.finfo(w.dtype).tiny)).all())
    if normal and bool(total > 0) and bool(torch.isfinite(total)):
        return w / total
    logits = base_weights.log() + exponents
    top = logits.max()
    if not bool(torch.isfinite(top)):
        raise ConfigError("algorithm.beta", f"PA3Fed's weights are not defined (the largest log m_i + Eq. 10's exponent -beta * score change is {float(top)}: "
                                            "beta * score change is past float64's range); lower algorithm.beta")
    return torch.softmax(logits, 0)


def weight_shift(base_weights: torch.Tensor, weights: torch.Tensor) -> float:
    """Total-variation distance 0.5 * sum_i |w_i - p_i| between two weight vectors summing to 1.

    How far the alpha-reweighted aggregation weights m_i alpha_i / sum_j m_j alpha_j
    depart from the base's own p_i: 0 for uniform alphas, at most 1.
    """
    return 0.5 * float((weights.to(torch.float64) - base_weights.to(torch.float64)).abs().sum())


@torch.no_grad()
def client_score(forward: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, y: torch.Tensor, *, batch_size: int = 1024) -> float:
    """Eq. 8: mean of -log softmax(f(x))_y over the client's whole local data (T = 1)."""
    if len(y) == 0:
        raise ValueError("client_score needs at least one sample")
    total = 0.0
    for i in range(0, len(y), batch_size):
        total += float(F.cross_entropy(forward(x[i : i + batch_size]), y[i : i + batch_size], reduction="sum"))
    return total / len(y)


LossOnBatch = Callable[[Mapping[str, torch.Tensor], torch.Tensor, torch.Tensor], torch.Tensor]
"""loss_fn(params, x, y) -> mean loss of the batch (e.g. temperature CE via functional_call)."""


def gradient_norm(
    loss_fn: LossOnBatch,
    params: Mapping[str, torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    per_sample: bool = False,
    batch_size: int = 1024,
) -> float:
    """||grad_w mean_n loss(w; x_n, y_n)|| over all of (x, y), or the RMS per-sample norm if ``per_sample``.

    Full-data mode accumulates chunk gradients weighted by chunk size, so the
    result is the exact full-batch gradient whatever ``batch_size`` is.
    ``loss_fn`` must be a pure function of ``params`` (use the model in eval
    mode so BN statistics are not updated).

    Full-data mode takes its gradients from plain ``torch.autograd.grad`` (as
    ``torch.func.grad`` does inside: grad mode on in the backward, unreached
    weights zero), not from ``torch.func.grad``, whose first call imports
    ``torch._dynamo`` and sympy: about 1.3 s of CPU in every PA3Fed process,
    a quarter of a 3-round digits run. The per-sample mode needs ``vmap`` of
    ``grad`` and keeps it.
    """
    n = len(y)
    if n == 0:
        raise ValueError("gradient_norm needs at least one sample")
    p = {k: v.detach() for k, v in params.items()}
    if per_sample:
        def one(q: Mapping[str, torch.Tensor], xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
            return loss_fn(q, xi.unsqueeze(0), yi.unsqueeze(0))

        per = vmap(grad(one), in_dims=(None, 0, 0))
        sq = 0.0
        for i in range(0, n, batch_size):
            g = per(p, x[i : i + batch_size], y[i : i + batch_size])
            sq += float(sum((v.double().reshape(v.shape[0], -1) ** 2).sum() for v in g.values()))
        return math.sqrt(sq / n)
    total = {k: torch.zeros_like(v, dtype=torch.float64) for k, v in p.items()}
    leaves = {k: v.detach().requires_grad_(True) for k, v in p.items()}
    for i in range(0, n, batch_size):
        xb, yb = x[i : i + batch_size], y[i : i + batch_size]
        with torch.enable_grad():  # torch.func.grad differentiates under no_grad too
            loss = loss_fn(leaves, xb, yb)
            g = torch.autograd.grad(loss, list(leaves.values()), create_graph=True, allow_unused=True) if loss.requires_grad else [None] * len(leaves)
        with torch.no_grad():
            for (k, v), gk in zip(leaves.items(), g):
                total[k] += (torch.zeros_like(v) if gk is None else gk).double() * (len(yb) / n)
    return math.sqrt(sum(float((v**2).sum()) for v in total.values()))


@runtime_checkable
class WeightedAggregator(Protocol):
    """An aggregator whose client weights can be replaced (what PA3Fed needs from its base)."""

    def client_half(self) -> ClientHalf | None:
        ...

    def default_weights(self, results: Sequence[ClientResult]) -> torch.Tensor:
        """The weights the aggregator uses on its own (m_i for the FedAvg family)."""
        ...

    def downlink(self, client_id: int, round: int, global_params: Params) -> Downlink:
        ...

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int, weights: torch.Tensor | None = None) -> Params:
        """``weights`` (summing to 1) replace ``default_weights(results)`` when given."""
        ...

    def round_metrics(self) -> Mapping[str, Json]:
        ...

    def begin_round(self, round: int, client_ids: Sequence[int]) -> None:
        ...

    def state_dict(self) -> dict[str, Any]:
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        ...


def _with_weights(base: Aggregator) -> WeightedAggregator:
    if isinstance(base, WeightedAggregator):
        return base
    raise TypeError(f"PA3Fed needs a base aggregator with default_weights(), aggregate(..., weights=...), begin_round() and state_dict(), got {type(base).__name__}")


SCORE = "pa3fed.score"
"""Where the client's score at its previous participation, s_i^{t-sigma}, lives in its state."""

LOG_ALPHA = "log_alpha"
"""The report key of Eq. 10's exponent, sent only when the client's alpha is 0, subnormal or inf (4th extra float)."""


@dataclass(frozen=True)
class PA3FedClient:
    """PA3Fed's client half (Alg. 1, lines 7-10): ``score`` (Eq. 8), ``grad_norm`` and ``alpha`` (Eq. 10) after training.

    The client keeps its previous score in its own state, as in Algorithm 1, so
    alpha_i is computed where the scores are; FGN and the period check stay on
    the server (:class:`PA3Fed`). It travels with the options only.
    """

    options: PA3FedOptions

    def prepare(self, state: ClientState, start: Params, context: Context) -> tuple[Params, dict[str, Wire]]:
        return start, dict(context)

    def finish(self, model: nn.Module, state: ClientState, trained: Trained) -> tuple[ClientState, Report]:
        o = self.options
        params, buffers = split_state(model, trained.params)
        params = {k: v.detach() for k, v in params.items()}
        model.eval()  # no dropout; BN uses its running statistics, so neither value updates them
        temperature = float(trained.temperature) if o.grad_temperature == "train" else 1.0

        def forward(x: torch.Tensor) -> torch.Tensor:
            return functional_call(model, (params, buffers), (x,))

        def loss_fn(p: Mapping[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return F.cross_entropy(functional_call(model, (dict(p), buffers), (x,)) / temperature, y)

        score = client_score(forward, trained.x, trained.y, batch_size=o.eval_batch_size)
        norm = gradient_norm(loss_fn, params, trained.x, trained.y, per_sample=o.grad_norm == "per_sample", batch_size=o.eval_batch_size)
        new_state, alpha = self.remember(state, score)
        report: dict[str, Wire] = {"score": score, "grad_norm": norm, "alpha": alpha}
        if exponent_lost(alpha):  # 0, subnormal or inf: sent as well, for alpha_weights' log-space route
            previous = float(state[SCORE]) if SCORE in state else None
            report[LOG_ALPHA] = stability_exponent(previous, score, self.options.beta, signed=self.options.signed)
        return new_state, report

    def remember(self, state: ClientState, score: float) -> tuple[ClientState, float]:
        """Eq. 10 against the score the client kept from its previous participation; the new score replaces it."""
        previous = float(state[SCORE]) if SCORE in state else None
        alpha = stability_coefficient(previous, score, self.options.beta, signed=self.options.signed)
        return {SCORE: torch.tensor(score, dtype=torch.float64)}, alpha


class PA3Fed(AroundAggregator):
    """Period-aware adaptive aggregation around ``base``; keeps FGN(t-1) and each client's last score.

    An :class:`~chillfl.aggregation.base.AroundAggregator` (public in :mod:`chillfl.extend`, as a plugin wrapper's):
    the downlink, the round's announcement, the aggregated keys and the clients' start are the base's."""

    base: WeightedAggregator

    def __init__(self, base: Aggregator, options: PA3FedOptions = PA3FedOptions(), total_samples: int | None = None) -> None:
        """``total_samples``: all clients' training rows, the denominator of m_i under ``fgn_weights = "total"`` (needed then)."""
        if options.fgn_weights == "total" and total_samples is None:
            raise ValueError("PA3Fed fgn_weights = 'total' needs total_samples, every client's training rows summed")
        weighted = _with_weights(base)
        refuse_base(weighted, type(base).__name__, "aggregator.base")  # an instance built in Python: as its config is refused
        super().__init__(weighted)
        self.options = options
        self.total_samples = total_samples if options.fgn_weights == "total" else None
        self.previous_fgn: float | None = None
        self._metrics: dict[str, Json] = {}

    def learn_parameters(self, model: nn.Module) -> None:
        """Tells the base the run's model (:class:`~chillfl.aggregation.base.LearnsParameters`): built in Python,
        ``PA3Fed(FedOpt("adam"))``'s base would otherwise step batch-norm statistics with the server's Adam."""
        with_run_model(self.base, model)

    def client_half(self) -> ClientHalf:
        """The base's client half, then Alg. 1's lines 7-10 (:class:`PA3FedClient`): options only, no server state."""
        half = combine(self.base.client_half(), PA3FedClient(self.options))
        assert half is not None
        return half

    def _fgn(self, results: Sequence[ClientResult]) -> float | None:
        if not all("grad_norm" in r.report for r in results):
            if self.options.mode == "clp":
                raise ValueError("PA3Fed mode 'clp' needs report['grad_norm'] from every client")
            return None
        return federated_gradient_norm(
            [report_number(r, "grad_norm", "PA3Fed") for r in results],
            [r.num_samples for r in results],
            [r.lr for r in results],
            scale_by_lr=self.options.fgn_scale_by_lr,
            total=self.total_samples,
        )

    def _alphas(self, results: Sequence[ClientResult]) -> dict[int, float]:
        o = self.options
        alphas: dict[int, float] = {}
        for r in results:
            alpha = r.report.get("alpha")
            if alpha is None:
                if o.mode != "never":
                    raise ValueError(f"PA3Fed needs report['alpha'] from every client (client {r.client_id})")
                continue
            alphas[r.client_id] = report_number(r, "alpha", "PA3Fed")
        return alphas

    def aggregates_nobody(self) -> bool:
        """The base's (:class:`~chillfl.aggregation.base.AggregatesNobody`): PA3Fed reweights the clients who reported,
        so a round with none is the base's alone; without this a base that releases such a round was skipped silently."""
        return isinstance(self.base, AggregatesNobody) and self.base.aggregates_nobody()

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int) -> Params:
        o = self.options
        if not results:  # only asked when the base releases a round nobody reported: no FGN, no alphas, state left as it was
            out = self.base.aggregate(global_params, results, round)
            self._metrics = {**self.base.round_metrics(), "fgn": None, "clp": False, "adapted": False, "alphas": {},
                             "weight_shift": None, "scores": {}, "grad_norms": {}}
            return out
        for r in results:  # a NaN score was refused as algorithm.beta's range, an inf one got weight 0 silently
            if "score" in r.report and not math.isfinite(score := report_number(r, "score", "PA3Fed")):
                raise Diverged(round + 1, f"its PA3Fed score (Eq. 8: its trained model's loss on its own data) is {score} ({LOSS_HINT})", r.client_id)
        fgn = self._fgn(results)
        clp = fgn is not None and is_clp(self.previous_fgn, fgn, o.delta, first=o.first_round_clp)
        if fgn is not None:
            self.previous_fgn = fgn
        alphas = self._alphas(results)
        adapt = o.mode == "always" or (o.mode == "clp" and clp)
        shift: float | None = None
        if len(alphas) == len(results):
            base_w = self.base.default_weights(results).to(torch.float64)
            a = torch.tensor([alphas[r.client_id] for r in results], dtype=torch.float64)
            w = alpha_weights(base_w, a, torch.tensor([_exponent(r, alphas[r.client_id]) for r in results], dtype=torch.float64))
            shift = weight_shift(base_w / base_w.sum(), w)
        if adapt:
            out = self.base.aggregate(global_params, results, round, weights=w)
        else:
            out = self.base.aggregate(global_params, results, round)
        base_metrics = dict(self.base.round_metrics())
        scores = {r.client_id: report_number(r, "score", "PA3Fed") for r in results if "score" in r.report}
        norms = {r.client_id: report_number(r, "grad_norm", "PA3Fed") for r in results if "grad_norm" in r.report}
        self._metrics = {**base_metrics, "fgn": fgn, "clp": clp, "adapted": adapt, "alphas": alphas, "weight_shift": shift, "scores": scores, "grad_norms": norms}
        return out

    def round_metrics(self) -> Mapping[str, Json]:
        return self._metrics

    def state_dict(self) -> dict[str, Any]:
        """FGN(t-1) and the base's own state under ``"base"`` (each s_i^{t-sigma} is in its client's state).

        The last round's metrics are not saved: ``aggregate`` rebuilds them
        from scratch every round.
        """
        return {"base": self.base.state_dict(), "previous_fgn": self.previous_fgn}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        check_state_keys(state, ("base", "previous_fgn"), "PA3Fed")
        self.base.load_state_dict(state["base"])
        fgn = state["previous_fgn"]
        self.previous_fgn = None if fgn is None else float(fgn)
        self._metrics = {}


def _exponent(r: ClientResult, alpha: float) -> float:
    """log alpha_i: the client's own exponent where it sent one (:func:`exponent_lost`: its alpha was 0, subnormal or
    inf), else log(alpha), exact enough for a normal alpha.

    An alpha that lost its exponent, sent without ``log_alpha`` (a client half written by hand: a plugin's, a Flower
    node's), is refused in one line naming the field. Why not derived: 0 and inf keep no exponent at all, a subnormal
    only a few bits of it, and the server cannot recompute it (s_i^{t-sigma} lives in the client's state): read as
    log(0) = -inf it gave the client weight 0 silently, and a round of such clients blamed ``algorithm.beta``."""
    if LOG_ALPHA in r.report:
        return report_number(r, LOG_ALPHA, "PA3Fed")
    if not alpha >= 0:  # NaN or negative: no exp() of any exponent
        raise ValueError(f"PA3Fed needs report['alpha'] to be Eq. 10's exp(-beta * |s^(t-sigma) - s^t|), a number >= 0 "
                         f"(client {r.client_id}), got {alpha!r}")
    if exponent_lost(alpha):
        raise ValueError(f"PA3Fed needs report[{LOG_ALPHA!r}] from client {r.client_id}: its alpha is {alpha!r} (0, subnormal or "
                         f"inf), from which Eq. 10's exponent cannot be read back; a client half that reports alpha sends "
                         f"{LOG_ALPHA} = -beta * |s^(t-sigma) - s^t| with it then (PA3FedClient.finish does)")
    return math.log(alpha)


def base_spec(options: PA3FedOptions, section: str = "algorithm") -> AlgorithmSpec:
    """The spec of the algorithm PA3Fed wraps, or a ConfigError on ``<section>.base`` when it cannot be a base.

    Read from what the base declares under its ``base_options`` (:meth:`AlgorithmSpec.declared`), whatever its name: it
    must take per-client weights (PA3Fed's coefficients are weights) and must not declare ``not_a_base`` (clients with
    trainings of their own, a server step of its own), for the options given (a variant's ``capabilities_of`` may say
    so for some options only). A plugin that declares nothing is refused here, not in round 1.
    """
    field = f"{section}.base"
    if options.base not in algorithm_names() and not is_import_path(options.base):
        raise choice_error(field, options.base, weighted_bases())
    spec = algorithm_spec(options.base, section, field)
    caps = spec.declared(algorithm_options(spec, options.base, options.base_options, f"{section}.base_options", field))
    allowed = ", ".join(weighted_bases())
    if caps.not_a_base is not None:
        raise ConfigError(field, f"{options.base} cannot be PA3Fed's base: {caps.not_a_base}; use another base, allowed: {allowed}")
    if not caps.takes_weights:
        found = resolve(options.base, field) if options.base not in registered_algorithms() else None  # a plugin's class: its aggregate() read
        if isinstance(found, type) and undeclared_weights(found):
            fix = UNDECLARED_WEIGHTS
        else:
            fix = (" (a rule of yours whose aggregate(..., weights=None) and default_weights() take them declares "
                   "capabilities = Capabilities(takes_weights=True))")
        raise ConfigError(field, f"{options.base} declares no takes_weights, and PA3Fed's coefficients are weights; allowed: {allowed}{fix}")
    return spec


def refuse_base(base: Aggregator, named: str, field: str) -> None:
    """A base PA3Fed's maths is not checked over, refused on ``field``: one whose client half runs the clients' own
    trainings, or whose server makes part of each client's model. Asked by the spec's builder and by the constructor,
    so that ``PA3Fed(Ditto())`` passed from Python is refused as ``base = "ditto"`` is."""
    trainer = next((part for part in half_parts(base.client_half()) if isinstance(part, Personalising)), None)
    if trainer is not None:  # PA3Fed's maths is not checked over a base's own trainings
        raise ConfigError(field, f"{named} cannot be PA3Fed's base: its client half {type(trainer).__name__} runs the clients' "
                                 "own trainings (objectives and train), which PA3Fed's client half does not compose with; "
                                 f"use another base, allowed: {', '.join(weighted_bases())}")
    if isinstance(base, MakesClientModels):  # PA3Fed's weights are over one shared model's updates
        raise ConfigError(field, f"{named} cannot be PA3Fed's base: its server makes part of each client's model "
                              "(client_model), and PA3Fed's period-aware weights are defined over the updates of one shared model, "
                              f"not checked over server-made client models; use another base, allowed: {', '.join(weighted_bases())}")


def _build(options: PA3FedOptions, ctx: BuildContext) -> Built:
    """PA3Fed around the ``base`` entry, which keeps its own local objective terms."""
    base_spec(options, ctx.section)
    base, terms = build_base(options, ctx)
    refuse_base(base, options.base, f"{ctx.section}.base")
    total = None
    if options.fgn_weights == "total":
        total = sum(require_client_sizes(ctx, f"{ctx.section}.fgn_weights", "'total' divides each m_i by all clients' training rows"))
    return PA3Fed(base, options, total), terms


def _check(options: PA3FedOptions, config: RunConfig, section: str) -> None:
    """The base's refusal as a base; its own limits (plain SGD, its ``check``) are checked after this by
    :func:`~chillfl.aggregation.registry.check_algorithm`, which follows :attr:`AlgorithmSpec.wraps`."""
    base_spec(options, section)


SPEC = register_algorithm(
    "pa3fed",
    AlgorithmSpec(
        PA3FedOptions,
        _build,
        "period-aware adaptive aggregation over a base (PA3Fed)",
        figures=("clp",),
        capabilities=Capabilities(reports="each client's score and gradient norm on its training data, which set the weights and the critical periods"),
        check=_check,
        wraps="base",
        makes=(PA3Fed,),  # an instance passed from Python meets this spec's checks (check_instance)
        takes_names={"base": TakesName(weighted_bases, "algorithm", weighted_bases)},  # the algorithms it can wrap, a listed plugin's too
    ),
)
