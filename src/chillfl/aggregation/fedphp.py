"""FedPHP (Li, Zhan, Shao, Li & Song, ECML-PKDD 2021): personalisation with inherited private models.

Client k keeps an *inherited private model* (HPM) h_k, a temporal ensemble of
the models it trained. In a round it is sent the global model w^t and

* trains w from w^t with the run's local training on the objective
  ``(1 - lambda) CE(w; x, y) + lambda R(w, h_k; x)``, where the knowledge
  transfer R from the frozen h_k is either

  - ``transfer = "mmd"``: the maximum mean discrepancy between the batch's
    representations under w and under h_k, with the authors' multi-bandwidth
    Gaussian kernel: for the 2B representations u (w's B, then h_k's B),
    d_ij = ||u_i - u_j||^2, sigma = sum_ij d_ij / (4B^2 - 2B) (no gradient),
    k(u_i, u_j) = sum_{q=0..4} exp(-d_ij / (sigma 2^(q-2))), and
    MMD = mean over the B x B blocks of (K_ww + K_hh - K_wh - K_hw);
  - ``transfer = "kd"``: -mean_x sum_c softmax(h_k(x) / tau)_c log softmax(w(x))_c,
    the HPM's logits softened at ``kd_temperature`` tau (4), the student's at 1;

* uploads w, which the server averages as FedAvg (n_k / n);
* inherits it: ``h_k <- mu_k h_k + (1 - mu_k) w`` with
  ``mu_k = min(mu * c_k / H, mu)``, c_k the number of rounds the client has
  trained before this one and H = ``horizon``, by default max(floor(Q T), 1)
  (Q T = clients_per_round * rounds / num_clients: a client's expected
  participations over the run), so mu_k grows linearly from 0 at its first
  participation to ``mu`` (0.9).

Local accuracy measures h_k after the round's update: the model the paper
evaluates (and ``checkpoint.client_models`` saves).

The one training: the transfer is a batch term (:class:`TransferTerm`,
reading ``fedphp_lambda`` and the HPM ``fedphp_hpm`` from the context) of
the half's objective 0, the run's objective plus the term. The term returns
``lambda (R - base)``, ``base`` being the step's own base loss, so the step's
loss is ``(1 - lambda) base + lambda R`` (and the run's other terms, unweighted).

Choices (against the authors' ``FedRepo/algorithms/fedphp.py``)
---------------------------------------------------------------
* The mu schedule and defaults are the authors' code's: mu 0.9, H = max(int(Q T), 1),
  c_k counted before the round (so a first participation sets h_k to its
  trained model); built outside a run config (rounds or clients a round
  unknown) H is 1: a constant mu from the second participation; ``lam`` 0.1 and MMD (their grid: MMD at 0.1 and 0.05, KD at
  0.05; 0.1 and MMD also FLGo's defaults). ``horizon`` sets H directly.
* h_k starts, at the client's first participation, from the global model it
  was sent (the authors' code: every h_k from w^0, the same model at round 1
  under full participation; a late client would otherwise be taught by the
  untrained initial model). It is the teacher of that first training only:
  mu_k = 0 replaces it by the trained model.
* The HPM is run frozen in eval mode (batch norm on its own statistics), as
  the authors' code runs it; its floating entries (parameters, batch-norm
  statistics) are averaged, integer ones (``num_batches_tracked``) are the
  trained model's.
* The base loss weighted (1 - lambda) is the run's (temperature
  cross-entropy at the run's T; the authors' CE is T = 1); R is computed on
  the raw logits and representations. The authors' gradient clipping
  (``max_grad_norm``) is the run's optimiser setting, not FedPHP's.
* PFLlib's ``FedPHP`` (``system/flcore/clients/clientphp.py``, since its
  December 2024 rewrite) is close but not this: the client starts from w^t
  and keeps an HPM ``model_p``, but its mu_k is ``mu t / T`` in the *global*
  round t (not the client's participations; PFLlib's ``-mu`` defaults to 0),
  the HPM averages the parameters only, runs in train mode, and its MMD has
  fixed bandwidths (``exp(-d / (2 a))``, a in 10, 15, 20, 50) on the
  ``base`` features. Before it, PFLlib started its clients from
  ``(1 - mu t/T) w^t + (mu t/T) w_k`` and regularised towards the global
  model's features.

Checked against the authors' code (lxcnju/FedRepo ``algorithms/fedphp.py``:
``update_local``, ``generate_mu``, ``update_hpm``, ``update_global``;
``tools.py``: ``guassian_kernel``, ``mmd_rbf_noaccelerate``): the loss
(1 - lambda) CE + lambda R, the KD (teacher at tau = 4, student at 1, no
tau^2), the MMD's kernel and bandwidth, mu_k's schedule and the inheritance
after the training agree; the differences are the choices above.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal, Mapping

import torch
from torch import nn

from chillfl.aggregation.base import (
    ClientHalf,
    ClientState,
    Context,
    FedAvg,
    Local,
    LocalProgram,
    Params,
    Personal,
    Report,
    Train,
    Trained,
    Wire,
    own_entries,
    with_prefix,
)
from chillfl.aggregation.registry import AlgorithmSpec, BuildContext, Built, instance_field, register_algorithm, require_model_head
from chillfl.capabilities import FORWARD, Capabilities, Cost
from chillfl.errors import ConfigError
from chillfl.models.parts import forward_with_features
from chillfl.options import require
from chillfl.training.local import LocalSpec
from chillfl.training.objective import distillation_kl
from chillfl.training.terms import StepView, frozen_forward, read_number, read_table

Transfer = Literal["mmd", "kd"]


@dataclass(frozen=True)
class FedPHPOptions:
    """``lam``: weight of the transfer (authors' grid 0.05, 0.1); ``mu``: the HPM's largest inheritance weight (0.9);
    ``transfer``: ``mmd`` of the representations or ``kd`` of the logits; ``kd_temperature``: the HPM's softening (4);
    ``horizon``: participations over which mu_k grows to ``mu`` (unset: floor(clients_per_round * rounds / num_clients))."""

    lam: float = 0.1
    mu: float = 0.9
    transfer: Transfer = "mmd"
    kd_temperature: float = 4.0
    horizon: int | None = None

    def validate(self, section: str) -> None:
        require(0 <= self.lam <= 1, f"{section}.lam", f"must be in [0, 1] (the loss is (1 - lam) CE + lam R), got {self.lam}")
        require(0 <= self.mu <= 1, f"{section}.mu", f"must be in [0, 1], got {self.mu}")
        require(self.kd_temperature > 0, f"{section}.kd_temperature", f"must be > 0, got {self.kd_temperature}")
        if self.horizon is not None:
            require(self.horizon >= 1, f"{section}.horizon", f"must be >= 1, got {self.horizon}")


LAMBDA, HPM = "fedphp_lambda", "fedphp_hpm"
"""Context keys of the transfer term: lambda and the client's HPM (a full model state)."""
PREFIX, COUNT = "fedphp.hpm.", "fedphp.count"
"""Where h_k and c_k (the client's finished participations, a 0-d int64 tensor) live in its state."""


def mmd(a: torch.Tensor, b: torch.Tensor, kernel_mul: float = 2.0, kernel_num: int = 5) -> torch.Tensor:
    """The authors' multi-bandwidth Gaussian MMD of two [B, d] samples (module docstring); the bandwidth carries no gradient.

    Squared distances from the Gram matrix (||u||^2 + ||v||^2 - 2 u.v, clipped at 0): a [2B, 2B] matrix, where the
    authors' pairwise differences take [2B, 2B, d] memory (per client, under the vectorised executor).
    """
    n = a.shape[0]
    total = torch.cat([a, b], dim=0)
    sq = (total * total).sum(-1)
    dist = (sq.unsqueeze(-1) + sq.unsqueeze(-2) - 2.0 * total @ total.transpose(-1, -2)).clamp_min(0.0)
    m = 2 * n
    sigma = dist.detach().sum() / (m * m - m) + 1e-8
    base = sigma / kernel_mul ** (kernel_num // 2)
    kernel = sum(torch.exp(-dist / (base * kernel_mul**q)) for q in range(kernel_num))
    assert isinstance(kernel, torch.Tensor)
    return (kernel[:n, :n] + kernel[n:, n:] - kernel[:n, n:] - kernel[n:, :n]).mean()


def inheritance(count: int, mu: float, horizon: int) -> float:
    """mu_k = min(mu * c_k / H, mu), c_k the client's participations before this one."""
    return min(mu * count / horizon, mu)


def inherit(hpm: Mapping[str, torch.Tensor], trained: Mapping[str, torch.Tensor], mu_k: float) -> Params:
    """h_k <- mu_k h_k + (1 - mu_k) w on floating entries; integer ones (batch-norm counters) are w's."""
    return {k: mu_k * hpm[k].to(w.device) + (1.0 - mu_k) * w if w.is_floating_point() else w for k, w in trained.items()}


@dataclass(unsafe_hash=True)
class TransferTerm:
    """``lambda (R(w, h_k) - base)``: with the step's base loss, the objective (1 - lambda) base + lambda R."""

    transfer: Transfer = "mmd"
    kd_temperature: float = 4.0
    per_batch: bool = field(default=True, init=False)
    captures: tuple[str, ...] = field(default=(), init=False)
    reads: tuple[str, ...] = field(default=(LAMBDA, HPM), init=False)

    def __call__(self, params: Mapping[str, torch.Tensor], context: Context, step: StepView) -> torch.Tensor:
        features, logits = frozen_forward(step, read_table(context, HPM), lambda call: forward_with_features(step.model, step.x, call=call, head=step.head))
        if self.transfer == "mmd":
            reg = mmd(step.features, features.detach())
        else:
            # the authors' KD: -mean_x sum_c softmax(teacher / tau)_c log softmax(logits)_c (student at T = 1, no tau^2 factor)
            reg = distillation_kl(step.logits, logits.detach(), self.kd_temperature, cross_entropy=True)
        return read_number(context, LAMBDA) * (reg - step.base_loss)


@dataclass(frozen=True)
class FedPHPClient:
    """FedPHP's client half: the run's training from w^t with the transfer from h_k, then h_k's inheritance; keeps h_k and c_k."""

    lam: float
    mu: float
    horizon: int
    transfer: Transfer = "mmd"
    kd_temperature: float = 4.0

    def prepare(self, state: ClientState, start: Params, context: Context) -> tuple[Params, dict[str, Wire]]:
        return start, dict(context)

    def objectives(self, spec: LocalSpec) -> tuple[LocalSpec, ...]:
        """0: the run's objective with the transfer term (its epochs and optimiser)."""
        return (replace(spec, terms=(*spec.terms, TransferTerm(self.transfer, self.kd_temperature))),)

    def train(self, local: Local) -> LocalProgram:
        hpm = own_entries(local.state, PREFIX) or local.start
        count = int(local.state[COUNT]) if COUNT in local.state else 0
        out = yield Train(local.start, {**local.context, LAMBDA: self.lam, HPM: hpm}, objective=0)
        new = inherit(hpm, out.params, inheritance(count, self.mu, self.horizon))
        state = {**with_prefix(new, PREFIX), COUNT: torch.tensor(count + 1, dtype=torch.int64)}
        return Personal(out.params, out.num_steps, out.mean_loss, personal=new, state=state)

    def finish(self, model: nn.Module, state: ClientState, trained: Trained) -> tuple[ClientState, Report]:
        return {}, {}  # h_k and c_k are kept by the training (Personal.state)

    def personal_model(self, state: ClientState, global_model: Params) -> Params:
        """h_k, the model the paper evaluates (every entry of the model: no global part)."""
        return own_entries(state, PREFIX)


class FedPHP(FedAvg):
    """FedAvg on the trained models; each h_k is its client's own (:class:`FedPHPClient`)."""

    def __init__(self, horizon: int, options: FedPHPOptions = FedPHPOptions()) -> None:
        """``horizon``: H. Options that leave it unset are given it (``options.horizon``), so that a run's record of them
        (``[algorithm.options]``) says the H that ran, and a resume with another H is refused."""
        super().__init__()
        self.options = options if options.horizon is not None else replace(options, horizon=horizon)
        self.horizon = horizon

    def client_half(self) -> ClientHalf:
        o = self.options
        return FedPHPClient(o.lam, o.mu, self.horizon, o.transfer, o.kd_temperature)


def expected_participations(num_clients: int, clients_per_round: int, rounds: int) -> int:
    """max(floor(Q T), 1), Q = clients_per_round / num_clients: the authors' ``max(int(c_ratio * max_round), 1)``."""
    return max(clients_per_round * rounds // num_clients, 1)


def _check_model(options: FedPHPOptions, model: nn.Module) -> None:
    """FedPHP's transfer reads the representation before the classifier head: a model without one is refused, by config
    and for an instance passed from Python alike (:attr:`~chillfl.aggregation.registry.AlgorithmSpec.check_model`)."""
    require_model_head(model, "FedPHP")


def _horizon(options: FedPHPOptions, ctx: BuildContext) -> int:
    """H: ``options.horizon``, else the clients' expected participations in the run."""
    if options.horizon is not None:
        return options.horizon
    known = ctx.rounds is not None and ctx.clients_per_round is not None  # built outside a run config: H = 1, a constant mu after the first round
    return expected_participations(ctx.num_clients, ctx.clients_per_round or 0, ctx.rounds or 0) if known else 1


def _build(options: FedPHPOptions, ctx: BuildContext) -> Built:
    return FedPHP(_horizon(options, ctx), options), []


def _bind(aggregator: FedPHP, ctx: BuildContext) -> None:
    """An instance passed from Python runs its constructor's H, which the recorded options must say: unset there (options
    given after construction), they take it; a ``horizon`` other than ``options.horizon`` is refused on
    ``aggregator.horizon``, since the record would say another H. Why not the run's expected participations for unset
    options, as the config's builder takes: ``FedPHP(1)`` says H = 1, and was refused with nothing wrong in it."""
    if aggregator.options.horizon is None:
        aggregator.options = replace(aggregator.options, horizon=aggregator.horizon)
    if aggregator.horizon != aggregator.options.horizon:
        raise ConfigError(instance_field(ctx, "horizon"), f"must equal {ctx.section}.horizon = {aggregator.options.horizon}, got {aggregator.horizon}; "
                                                          f"pass FedPHP({aggregator.options.horizon}, options), or set FedPHPOptions(horizon={aggregator.horizon}) for that H")


SPEC = register_algorithm(
    "fedphp",
    AlgorithmSpec(
        FedPHPOptions,
        _build,
        "personal models inherited as moving averages of the local ones, which teach the next training (Li et al. 2021)",
        capabilities=Capabilities(
            private_steps="each client's training is taught by its inherited private model h_k, which it keeps and evaluates, "
            "and the MMD transfer couples a batch's samples (pairwise kernels, a batch-wide bandwidth), which per-sample clipping does not bound",
            takes_weights=True,
            not_a_base="FedPHP's clients run their own local trainings, which PA3Fed's client half does not compose with",
            personal_model=True,
            trains_global_model=True,  # w: each client trains the global model it was sent and uploads it (FedAvg); the HPM h_k stays home as a teacher
            cost=Cost(step_passes=1 + FORWARD),  # the frozen HPM h_k's forward on each step's batch (the transfer's teacher)
        ),
        makes=(FedPHP,),
        bind=_bind,
        check_model=_check_model,
    ),
)
