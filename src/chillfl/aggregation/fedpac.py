"""FedPAC (Xu, Tong & Huang, ICLR 2023): feature alignment and classifier collaboration.

The model is a feature extractor (body) f and a linear classifier (head) g,
the head being the model's classifier head (:func:`~chillfl.aggregation.fedper.head_keys`)
and the representation its input (:mod:`chillfl.models.parts`). Client i,
sent the global body and its own personalised head:

1. computes, with the received body, its feature statistics (Sec. 4.2; the
   authors' ``statistics_extraction``): with p_k = n_k / n, mu_k the mean
   feature of class k and F_k its features,
   ``h_i[k] = p_k mu_k`` and
   ``V_i = (sum_k p_k tr(F_k^T F_k) / n_k - p_k^2 ||mu_k||^2) / n``;
2. trains its head for ``head_epochs`` (1) with the body frozen;
3. trains its body for the run's epochs with the head frozen, on the run's
   objective plus the alignment term ``lam * MSE(f(x), c_y)`` to the global
   prototypes c (Eq. 5); a class the client holds but the prototypes lack
   aligns to the client's own mean of it under the received body (the
   authors' ``local_protos1``); before the first aggregation there is no term;
4. uploads its model, its class means of the trained body's features (and
   counts), V_i and h_i.

The server averages the models (n_i / n; the global head so made only serves
the global evaluation), sets c_k to the class-k means of the clients that hold
class k weighted by their class-k counts (the authors' ``protos_aggregation``), and gives
each client i of the round the head ``sum_j alpha_ij g_j`` over the round's
trained heads, with (Eq. 9)::

    alpha_i = argmin_{alpha in simplex} alpha^T (diag(V) + D_i) alpha,
    D_i[j, l] = sum_k <h_i[k] - h_j[k], h_i[k] - h_l[k]>

which the server sends the client the next time it is sampled.

Choices
-------
* **The QP is solved by projected gradient descent** on the simplex
  (``qp_steps`` iterations, step 1 / (2 lambda_max), from the uniform
  weights), not by an interior-point solver (the authors use cvxpy): the
  problem is convex (diag(V) >= 0 plus a Gram matrix), so this converges to
  the same minimiser, but at a fixed step its speed falls with the problem's
  conditioning: in a digits run 2000 steps matched 400,000 to 1e-16, while a
  constructed ill-conditioned case (one client's statistics far from the
  others', small V; condition ~8e5) stayed near uniform ([0.50, 0.50] where
  the minimiser is [0.60, 0.40]); raise ``qp_steps`` there. As the authors' code, weights <= 1e-3 are set to 0 and the rest
  are renormalised to sum to 1 (their ``agg_classifier_weighted_p`` divides by the weights' sum).
* The statistics are computed in eval mode, with the body received this
  round (before training), as the authors' code does; they travel with the
  upload and the server uses them in that round's aggregation. The features,
  class means, V_i and h_i are in the model's dtype on the wire (V_i and h_i
  are summed in float64 on the client and rounded once; the QP widens them
  back and runs in float64 on the server), the counts as int32.
* The head and body phases train in train mode (dropout active, batch-norm
  statistics updated), as every training of the run and as the paper implies.
  The authors' ``local_training`` calls ``model.train()`` and then
  ``local_test``, whose ``model.eval()`` is never undone, so both their phases
  run in eval mode; their CNNs have neither dropout nor batch norm, where the
  two agree, but on a model with either they differ.
* Local accuracy measures the client's model at the end of its training
  (its trained body and head); the combined head is what it starts from next
  time. A client's first round starts from the global head. The server keeps
  the combined heads (its state), so the client keeps nothing; no model per
  client is saved by ``checkpoint.client_models``.
* The alignment term is the mean squared error over samples and feature
  dimensions (``nn.MSELoss``), ``lam`` = 1 by default (the authors' lambda).
* ``unseen = "own"`` (default): a class the global prototypes lack is aligned
  to the client's own class mean before training, as the authors' code
  (the paper's Eq. 5 does not say; with every client sampled every round the
  prototypes hold every class a client holds, so this only acts under partial
  participation); ``"skip"``: such a class adds nothing to the term.
* ``head_lr`` unset (default): the head trains at the round's learning rate,
  as the body does (the paper gives one local step size, 0.01 or 0.02 by
  dataset). The authors' code trains the head at a fixed 0.1 (``lr_g``) and
  the body at ``--lr`` (0.01), both with momentum 0.5 and weight decay 5e-4:
  ``head_lr = 0.1`` gives its head step (the optimiser stays ``[client]``'s;
  set, the head's lr is that number every round, outside the round's lr
  schedule, as the code's fixed ``lr_g``).
* A client's first round starts from the global (averaged) head by default
  (``first_head = "global"``). In the authors' code every client starts from
  a copy of the one initial model, whose body the server overwrites every
  round (``update_base_model``, every client) and whose head only the
  combination replaces (``update_local_classifier``, the round's clients), so
  a client first sampled in a later round trains the initial head on the
  current body: ``first_head = "initial"``. The server then keeps the initial
  model's head (its state, checkpointed) and sends it in place of the global
  head at a client's first round, at the same bytes (a head is sent either
  way). Under full participation the two agree (round 0's global head is the
  initial one).

Checked (2026-12) against Xu, Tong & Huang 2023 (Sec. 4, Eqs. 5 and 9, Algorithm 1) and the authors' code
(JianXu95/FedPAC ``methods/fedpac.py``: ``statistics_extraction``, ``local_training``, ``get_local_protos``;
``tools.py``: ``protos_aggregation``, ``get_head_agg_weight``, ``agg_classifier_weighted_p``; ``running.py``:
``train_round_fedpac``): V_i and h_i from the received body before training (sum_k p_k tr(F_k^T F_k) / n_k -
p_k^2 ||mu_k||^2, over n); D_i[j, l] = sum_k <h_i[k] - h_j[k], h_i[k] - h_l[k]> over the pairs j <= l, diagonal
included; weights <= 1e-3 zeroed and the head mix divided by the kept weights' sum; head 1 epoch then body E epochs
with the other part frozen; MSE alignment from the second round on, ``local_protos1`` for classes the prototypes lack;
prototypes weighted by the clients' class counts; ``--lam 1.0``. Not reproduced: the authors' eigenvalue clean-up of
a non-PSD P and their fallback to the client's own head when cvxpy finds no solution (P is PSD here by construction).
"""

from __future__ import annotations


import math
from dataclasses import dataclass, replace
from typing import Any, Literal, Mapping, Sequence

import numpy as np
import torch
from torch import nn

from chillfl.aggregation.base import (
    AggregatorBase,
    ClientHalf,
    ClientResult,
    ClientState,
    Context,
    Downlink,
    Local,
    LocalProgram,
    Params,
    Personal,
    PlannedStage,
    Report,
    Train,
    Trained,
    Wire,
    check_state_keys,
    client_params_state,
    client_weights,
    load_client_params,
    load_params,
    report_tensor,
    weighted_average,
)
from chillfl.aggregation.fedper import head_keys
from chillfl.models.parts import head_inputs, head_name, head_size
from chillfl.options import Scale, require
from chillfl.prototypes.maths import aggregate_means, class_means, prototype_distance
from chillfl.training.local import LocalSpec
from chillfl.training.objective import StepView, read_number, read_tensor
from chillfl.aggregation.registry import AlgorithmSpec, register_algorithm
from chillfl.capabilities import FORWARD, Capabilities, Cost


@dataclass(frozen=True)
class FedPACOptions:
    """``lam``: weight of the feature alignment (1); ``head_epochs``: the head's epochs before the body's (1); ``qp_steps``;
    ``protos``: the global prototype c_k weighted by the clients' class-k counts (``count``, the authors' code) or
    the plain mean over the clients holding class k (``uniform``, PFLlib's FedPAC); ``unseen``: a class the prototypes
    lack aligns to the client's own pre-training class mean (``own``, the authors' code) or adds nothing (``skip``);
    ``head_lr``: the head's learning rate (unset: the round's, the paper's one step size; 0.1: the authors' code);
    ``first_head``: the head a client's first round starts from, the global (averaged) one or the initial model's
    (``initial``, the authors' code)."""

    lam: Scale = 1.0
    head_epochs: int = 1
    qp_steps: int = 2000
    weighting: Literal["samples", "uniform"] = "samples"
    protos: Literal["count", "uniform"] = "count"
    unseen: Literal["own", "skip"] = "own"
    head_lr: float | None = None
    first_head: Literal["global", "initial"] = "global"

    def validate(self, section: str) -> None:
        require(self.lam >= 0, f"{section}.lam", f"must be >= 0, got {self.lam}")
        require(self.first_head in ("global", "initial"), f"{section}.first_head", f"must be global or initial, got {self.first_head!r}")
        if self.head_lr is not None:
            require(math.isfinite(self.head_lr) and self.head_lr > 0, f"{section}.head_lr", f"must be a finite number > 0, got {self.head_lr}")
        require(self.head_epochs >= 1, f"{section}.head_epochs", f"must be >= 1, got {self.head_epochs}")
        require(self.qp_steps >= 1, f"{section}.qp_steps", f"must be >= 1, got {self.qp_steps}")


LAM, PROTOS, MASK = "fedpac_lam", "fedpac_protos", "fedpac_mask"
"""Context keys of the alignment term."""
MEANS, COUNTS, VAR, STATS = "fedpac_means", "fedpac_counts", "fedpac_v", "fedpac_h"
"""Report keys: the class means and counts of the trained features, V_i and h_i."""
SMALL = 1e-3
"""Collaboration weights at or below this are dropped (the authors' ``eps``)."""


class AlignTerm:
    """``lam * MSE(f(x), c_y)``: FedPAC's feature alignment, a batch term on the step's representation."""

    per_batch = True
    captures: tuple[str, ...] = ()
    reads: tuple[str, ...] = (LAM, PROTOS, MASK)

    def __call__(self, params: Mapping[str, torch.Tensor], context: Context, step: StepView) -> torch.Tensor:
        return read_number(context, LAM) * prototype_distance(step.features, step.y, read_tensor(context, PROTOS), read_tensor(context, MASK))


def features(model: nn.Module, state: Mapping[str, torch.Tensor], x: torch.Tensor, batch_size: int = 1024) -> torch.Tensor:
    """The representation of ``x`` under ``state``, in eval mode, ``[n, d]`` in the model's dtype (its first floating entry's):
    the head's inputs as every method that reads them computes them (:func:`~chillfl.models.parts.head_inputs`)."""
    head = head_name(model, warn=False)  # FedPAC's build (head_keys) warned
    dtype = next((v.dtype for v in state.values() if v.is_floating_point()), torch.float32)
    return head_inputs(model, head, state, x, batch_size)[0].to(dtype)


def statistics(feats: torch.Tensor, y: torch.Tensor, num_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(V_i, h_i): ``sum_k p_k tr(F_k^T F_k) / n_k - p_k^2 ||mu_k||^2``, over n; and ``h_i[k] = p_k mu_k`` (float64)."""
    f = feats.double()
    means, counts = class_means(f, y, num_classes)
    n = len(y)
    p = counts.double() / n
    onehot = nn.functional.one_hot(y, num_classes).double()  # [n, C]
    second = (onehot.T @ (f * f).sum(1)) / counts.clamp(min=1).double()  # tr(F_k^T F_k) / n_k
    v = (p * second - p * p * (means * means).sum(1)).sum() / n
    return v, p.unsqueeze(1) * means


def distance_matrix(own: torch.Tensor, stats: Sequence[torch.Tensor]) -> torch.Tensor:
    """D[j, l] = sum_k <h_i[k] - h_j[k], h_i[k] - h_l[k]>: the Gram matrix of the flattened differences."""
    diffs = torch.stack([(own - h).flatten() for h in stats]).double()
    return diffs @ diffs.T


def project_simplex(v: torch.Tensor) -> torch.Tensor:
    """The Euclidean projection of ``v`` onto {a >= 0, sum a = 1} (sort-based; Duchi et al., 2008)."""
    values = v.detach().cpu().numpy()
    return torch.from_numpy(_project_simplex(values, np.arange(1, len(values) + 1, dtype=values.dtype))).to(v.device)


def _project_simplex(v: np.ndarray, ks: np.ndarray) -> np.ndarray:
    """:func:`project_simplex` on the host: sort, running sums left to right (``np.cumsum`` adds in order, as a loop
    would), the last k with u_k > (sum_{j<=k} u_j - 1) / k, then the shift. Elementwise IEEE operations only."""
    u = np.sort(v)[::-1]
    css = np.cumsum(u)
    rho = int(np.flatnonzero(u - (css - 1) / ks > 0)[-1]) + 1
    theta = (css[rho - 1] - 1) / rho
    return np.maximum(v - theta, 0)


def solve_qp(p: torch.Tensor, steps: int) -> torch.Tensor:
    """argmin a^T P a on the simplex, by projected gradient (step 1 / (2 lambda_max)); weights <= 1e-3 dropped, renormalised.

    Solved on the host in float64 whatever the run's device: the problem is a few clients wide. The iterations run
    in numpy around torch's own product ``P a`` (the one reduction, so its summation order is torch's): a step costs
    microseconds rather than a dozen torch dispatches. A step is a function of the iterate alone, so once an iterate
    repeats the last one (a fixed point) or the one before (a 2-cycle, the last bit flipping) the rest of the
    ``steps`` are known and not run: the result is the ``steps``-th iterate bit for bit (``tests/test_fedpac.py``)."""
    device = p.device
    p = p.detach().to("cpu", torch.float64)
    n = p.shape[0]
    a = np.full((n,), 1.0 / n, dtype=np.float64)
    top = float(torch.linalg.eigvalsh(p).max())
    if top > 0:
        step = 1.0 / (2 * top)
        ks = np.arange(1, n + 1, dtype=np.float64)
        before: np.ndarray | None = None
        for t in range(steps):
            after = _project_simplex(a - step * 2 * (p @ torch.from_numpy(a)).numpy(), ks)  # iterate t + 1
            if after.tobytes() == a.tobytes():  # a fixed point: every later iterate is this one
                break
            if before is not None and after.tobytes() == before.tobytes():  # a 2-cycle: iterate `steps` has t + 1's parity or t's
                a = after if (steps - t - 1) % 2 == 0 else a
                break
            before, a = a, after
    weights = torch.from_numpy(a)
    weights = torch.where(weights > SMALL, weights, torch.zeros_like(weights))
    return (weights / weights.sum()).to(device)


@dataclass(frozen=True)
class FedPACClient:
    """FedPAC's client half: its statistics, the head then the aligned body, its class means; keeps nothing."""

    model: nn.Module
    head: frozenset[str]
    body: frozenset[str]
    num_classes: int
    head_epochs: int
    eval_batch_size: int = 1024
    unseen_own: bool = True
    head_lr: float | None = None
    """The head's learning rate; None: the round's."""

    def prepare(self, state: ClientState, start: Params, context: Context) -> tuple[Params, dict[str, Wire]]:
        return start, dict(context)

    def objectives(self, spec: LocalSpec) -> tuple[LocalSpec, ...]:
        """0: the head, body frozen, ``head_epochs``; 1: the body, head frozen, with the alignment term."""
        return (
            replace(spec, epochs=self.head_epochs, frozen=spec.frozen | self.body),
            replace(spec, frozen=spec.frozen | self.head, terms=(*spec.terms, AlignTerm())),
        )

    def planned_stages(self, spec: LocalSpec) -> tuple[PlannedStage, ...]:
        """The head's training, ``head_epochs`` over all the client's rows at ``head_lr`` (unset: the round's)."""
        return (PlannedStage(0, "head_epochs", self.head_lr),)

    def train(self, local: Local) -> LocalProgram:
        received = features(self.model, local.start, local.x, self.eval_batch_size)
        v, h = statistics(received, local.y, self.num_classes)
        context = {k: val for k, val in local.context.items() if k not in (PROTOS, MASK)}
        head = yield Train(local.start, context, objective=0, lr=self.head_lr)
        protos, mask = local.context.get(PROTOS), local.context.get(MASK)
        if not isinstance(protos, torch.Tensor) or not isinstance(mask, torch.Tensor):  # no global prototypes yet: the term is 0
            protos = torch.zeros(self.num_classes, received.shape[1], device=received.device)
            mask = torch.zeros(self.num_classes, dtype=torch.bool, device=received.device)
        elif self.unseen_own:  # a class it holds that the prototypes lack: its own mean before training (``local_protos1``)
            own, held = class_means(received, local.y, self.num_classes)
            fill = ~mask & (held > 0).to(mask.device)
            protos = torch.where(fill.unsqueeze(1), own.to(protos.device, protos.dtype), protos)
            mask = mask | fill
        body = yield Train(head.params, {**context, PROTOS: protos, MASK: mask}, objective=1)
        means, counts = class_means(features(self.model, body.params, local.x, self.eval_batch_size), local.y, self.num_classes)
        # in the model's dtype, the counts as int32 (the ledger's 4-byte integers): V_i and h_i are computed in float64 and
        # rounded once here; the server's QP widens them back and solves in float64
        report: Report = {MEANS: means, COUNTS: counts.to(torch.int32), VAR: v.to(received.dtype), STATS: h.to(received.dtype)}
        return Personal(body.params, head.num_steps + body.num_steps, body.mean_loss, report=report)

    def finish(self, model: nn.Module, state: ClientState, trained: Trained) -> tuple[ClientState, Report]:
        return {}, {}


class FedPAC(AggregatorBase):
    """FedAvg of the models, the global prototypes, and each round client's combined head (kept until it is sampled again)."""

    def __init__(self, model: nn.Module, options: FedPACOptions = FedPACOptions(), eval_batch_size: int = 1024) -> None:
        self.model = model
        self.options = options
        self.eval_batch_size = eval_batch_size
        self.head = tuple(head_keys(model, 1))
        self.num_classes = head_size(model).classes
        self.protos: torch.Tensor | None = None
        self.mask: torch.Tensor | None = None
        self.heads: dict[int, Params] = {}
        """client id -> its combined head, sent with its next downlink."""
        self.initial: Params | None = None
        """The initial model's head (``first_head = "initial"``), taken from the first global model the server sends."""

    def client_half(self) -> ClientHalf:
        body = frozenset(n for n, _ in self.model.named_parameters()) - set(self.head)
        return FedPACClient(
            self.model, frozenset(self.head), body, self.num_classes, self.options.head_epochs, self.eval_batch_size,
            self.options.unseen == "own", self.options.head_lr,
        )

    def downlink(self, client_id: int, round: int, global_params: Params) -> Downlink:
        device = next(iter(global_params.values())).device  # a checkpoint may have brought the state back on another
        context: dict[str, Wire] = {LAM: self.options.lam}
        if self.protos is not None and self.mask is not None:
            context.update({PROTOS: self.protos.to(device), MASK: self.mask.to(device)})
        head = self.heads.get(client_id)
        if self.options.first_head == "initial":
            if self.initial is None:  # the run's first downlink: round 0's global model is the initial one
                self.initial = {k: global_params[k].detach().clone() for k in self.head}
            head = self.initial if head is None else head
        return Downlink(params=None if head is None else {k: v.to(device) for k, v in head.items()}, context=context)

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int) -> Params:
        means = [report_tensor(r, MEANS, "FedPAC") for r in results]
        counts = [report_tensor(r, COUNTS, "FedPAC") for r in results]
        protos, mask = aggregate_means(means, counts, self.options.protos)
        self.protos, self.mask = protos.to(means[0].dtype), mask
        v = torch.stack([report_tensor(r, VAR, "FedPAC").double().cpu() for r in results])
        hs = [report_tensor(r, STATS, "FedPAC").double().cpu() for r in results]
        heads = [{k: r.params[k] for k in self.head} for r in results]
        for r, h in zip(results, hs):
            alpha = solve_qp(torch.diag(v) + distance_matrix(h, hs), self.options.qp_steps)
            self.heads[r.client_id] = weighted_average(heads, alpha)
        return weighted_average([r.params for r in results], client_weights(results, self.options.weighting))

    def round_metrics(self) -> Mapping[str, Any]:
        return {} if self.mask is None else {"prototype_classes": int(self.mask.sum())}

    def state_dict(self) -> dict[str, Any]:
        """The global prototypes and every client's pending combined head; with ``first_head = "initial"`` the initial head."""
        protos = {} if self.protos is None or self.mask is None else {"protos": self.protos, "mask": self.mask}
        state: dict[str, Any] = {"protos": protos, "heads": client_params_state({cid: self.heads[cid] for cid in sorted(self.heads)})}
        if self.options.first_head == "initial":
            state["initial"] = {} if self.initial is None else dict(self.initial)
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        check_state_keys(state, ("protos", "heads", "initial") if self.options.first_head == "initial" else ("protos", "heads"), "FedPAC")
        protos = state["protos"]
        self.protos, self.mask = (protos["protos"], protos["mask"]) if protos else (None, None)
        self.heads = load_client_params(state["heads"])
        if self.options.first_head == "initial":
            self.initial = load_params(state["initial"]) or None


CAPABILITIES = Capabilities(
    private_steps="each client trains its head and then its body, two trainings a round, and computes the statistics it reports from its data",
    not_a_base="FedPAC's clients run their own local trainings and its server combines heads per client",
    reports="each client's class means and counts of its features and its statistics V_i and h_i",
    linear_head=(
        "FedPAC's classifier collaboration mixes the clients' head parameters, sum_j alpha_ij (W_j, b_j), with weights from"
        " an error bound (Eq. 9) that holds when that mix is the mix of the heads' logits: for an affine head"
    ),
)


QP_ITERATION = 0.01
"""One projected-gradient iteration of :func:`solve_qp`, in plain steps' overheads: a product ``P a`` and a projection on the
simplex, on the host. Measured 2026-12-02 on the 2-vCPU AVX2 machine (``benchmarks/estimates.py``, 10 clients a round, FLex&Chill
CNN on digits): ``qp_steps = 2000`` took 0.60 CPU seconds more than 500 over 50 client QPs, 8 us an iteration (0.76 ms a step's
overhead). An iterate that repeats ends the solve early; the estimate counts every one (an upper bound)."""


def capabilities(options: FedPACOptions) -> Capabilities:
    """Its limits, and its cost: two forwards over the client's rows (the received body's statistics, the trained body's class
    means) and ``head_epochs`` of head training, the body frozen (a forward through the model, a backward through the head:
    priced as a forward), ``(2 + head_epochs) FORWARD`` epochs; and the server's QP of Eq. 9 for each sampled client,
    ``qp_steps`` iterations of :data:`QP_ITERATION` steps' overheads."""
    return replace(CAPABILITIES, cost=Cost(epochs=(2 + options.head_epochs) * FORWARD, client_server_steps=options.qp_steps * QP_ITERATION))


SPEC = register_algorithm(
    "fedpac",
    AlgorithmSpec(
        FedPACOptions,
        lambda o, ctx: (FedPAC(ctx.model, o), []),
        "feature alignment to global prototypes and classifier collaboration (Xu et al. 2023)",
        capabilities=CAPABILITIES,
        capabilities_of=capabilities,
        makes=(FedPAC,),  # an instance passed from Python meets this spec's checks (check_instance)
    ),
)
