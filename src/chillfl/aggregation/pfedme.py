"""pFedMe (Dinh, Tran & Nguyen, NeurIPS 2020): personalisation with Moreau envelopes, Algorithm 1.

Client i, sent w^t, sets its local model w_{i,0} = w^t and, for each of its
R local steps r (one per batch D of the run's ``client.epochs`` over its data):

* solves the inner problem on the batch approximately, with K steps of the
  run's local optimiser at ``personal_lr``:
  theta_i = argmin_theta f_i(theta; D) + lambda/2 ||theta - w_{i,r}||^2
  (one job of the one training path: the run's objective plus a
  :class:`~chillfl.training.objective.ProximalTerm` reading ``pfedme_lambda``
  and ``pfedme_anchor = w_{i,r}``, K epochs over the one batch);
* moves its local model: w_{i,r+1} = w_{i,r} - eta lambda (w_{i,r} - theta_i)
  (eta: the round's learning rate).

It sends w_{i,R}; the server sets w^{t+1} = (1 - beta) w^t + beta * mean_i w_{i,R}.
The personalised model, which local accuracy measures, is the last theta_i.

Checked against the authors' CharlieDinh/pFedMe (``FLAlgorithms/users/userpFedMe.py``: K steps of
``pFedMeOptimizer``, p <- p - personal_lr (grad + lambda (p - w)), on one batch, then
w <- w - lambda lr (w - theta); ``FLAlgorithms/servers/serverbase.py``'s
``persionalized_aggregate_parameters``: (1 - beta) w^t + beta * the n_i-weighted mean) and PFLlib's
``clientpFedMe.py`` (the same client steps). The round differs under partial participation (Choices).

Choices
-------
* theta starts each inner problem from the previous one's solution (from
  w^t at the first), as the authors' code does; starting each from
  w_{i,r} is the other reading of Algorithm 1.
* The mean over the round's clients is uniform (Algorithm 1);
  ``weighting = "samples"`` uses n_i / n, as the authors' code does
  (``persionalized_aggregate_parameters``). beta applies to every float entry;
  integer buffers take the clients' max.
* w's buffers (batch-norm statistics) are theta's after each inner problem.
* The inner steps use the run's local optimiser (the paper: plain gradient
  steps); its state (momentum, Adam moments) starts afresh with each inner problem.
* A straggler (``work`` < 1) runs fewer inner steps per batch, not fewer batches.
* ``train = "sampled"`` (the default): only the round's sampled clients train, as every method here (PFLlib's
  ``serverpFedMe.train`` too). ``train = "all"``: Algorithm 1 and the authors' ``serverpFedMe.train``, w^t sent to all
  N clients (every client with training rows), all N trained, the sampled S averaged. Under a temperature policy that
  does not observe local accuracy (fixed T) the global w is the same either way, bit for bit (only S upload, and theirs
  do not depend on the others'); under one that does (FedChill's decay) it is not: each client trains, and is observed,
  every round (the paper's setting), so its T moves on rounds it does not report and it uploads another model when next
  sampled. Either way, under partial participation (``client_fraction``
  < 1, or ``clients_per_round`` < ``num_clients``) the default's ``local_acc``, the personalised accuracy (the
  paper's "pFedMe (PM)"), is the mean over the round's S clients (``eval.clients = "sampled"``) or each client's value
  from its last participation (``"all"``), and ``bytes_down`` counts S models a round; under ``"all"`` it is the mean
  over the N trained clients (under either ``eval.clients``) and ``bytes_down`` counts N models (``bytes_up`` S). The
  clients outside the sample are outside the availability draw (dropout, stragglers: reporting only): they train
  every step, and a sampled client that drops out trains as one of them; a round the loop skips trains nobody. Their
  uploads reach no ``aggregate``, ``[privacy]`` or ``[attack]`` layer (:class:`~chillfl.aggregation.base.TrainsEveryClient`).
  Refused on Flower (``algorithm.train``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, Sequence

import torch
from torch import nn

from chillfl.aggregation.base import (
    ClientHalf,
    ClientResult,
    ClientState,
    Context,
    FedAvg,
    Local,
    LocalProgram,
    Params,
    Personal,
    PlannedStage,
    Report,
    Train,
    Trained,
    Wire,
)
from chillfl.options import Scale, require
from chillfl.seeds import derive_seed
from chillfl.training.local import LocalSpec, batch_order
from chillfl.training.objective import ProximalTerm
from chillfl.aggregation.registry import AlgorithmSpec, register_algorithm
from chillfl.capabilities import ONE_BATCH_JOB, PARAMETER_TERM, Capabilities, Cost


@dataclass(frozen=True)
class PFedMeOptions:
    """``lam`` (lambda, paper 15), ``inner_steps`` (K, paper 5), ``personal_lr`` (the inner steps' rate), ``beta`` (server mixing, 1 = average);
    ``train``: who trains a round, the sampled clients (``sampled``) or every client with rows, the sampled ones averaged (``all``, Algorithm 1)."""

    lam: Scale = 15.0
    inner_steps: int = 5
    personal_lr: float = 0.01
    beta: Scale = 1.0
    weighting: Literal["uniform", "samples"] = "uniform"
    train: Literal["sampled", "all"] = "sampled"

    def validate(self, section: str) -> None:
        require(self.lam > 0, f"{section}.lam", f"must be > 0, got {self.lam}")
        require(self.inner_steps >= 1, f"{section}.inner_steps", f"must be >= 1, got {self.inner_steps}")
        require(self.personal_lr > 0, f"{section}.personal_lr", f"must be > 0, got {self.personal_lr}")
        require(self.beta > 0, f"{section}.beta", f"must be > 0, got {self.beta}")


LAMBDA, ANCHOR = "pfedme_lambda", "pfedme_anchor"
"""Context keys of the inner problem's proximal term."""


def outer_step(w: Params, theta: Params, lr: float, lam: float, param_keys: frozenset[str]) -> Params:
    """w - eta lambda (w - theta) on the parameters; the buffers are theta's."""
    return {k: w[k] - lr * lam * (w[k] - theta[k]) if k in param_keys else theta[k] for k in w}


@dataclass(frozen=True)
class PFedMeClient:
    """pFedMe's client half: R outer steps, each an inner K-step job on one batch; it keeps no state between rounds."""

    param_keys: frozenset[str]
    lam: float
    inner_steps: int
    personal_lr: float

    def prepare(self, state: ClientState, start: Params, context: Context) -> tuple[Params, dict[str, Wire]]:
        return start, dict(context)

    def objectives(self, spec: LocalSpec) -> tuple[LocalSpec, ...]:
        """0: the inner problem, K epochs over one batch (the batch size stays the run's, so one step an epoch)."""
        return (replace(spec, epochs=self.inner_steps, terms=(*spec.terms, ProximalTerm(LAMBDA, ANCHOR))),)

    def planned_stages(self, spec: LocalSpec) -> tuple[PlannedStage, ...]:
        """The inner problem: ``inner_steps`` epochs over one batch (one step each) at ``personal_lr``, anew for every batch."""
        return (PlannedStage(0, "inner_steps", self.personal_lr, spec.batch_size),)

    def runs_own_training(self) -> bool:
        """False: every training is an inner problem (the stage above); the outer steps are not the run's training of
        ``client.epochs`` at the round's lr, so the check before the run does not count that one
        (:class:`~chillfl.aggregation.base.SkipsOwnTraining`)."""
        return False

    def train(self, local: Local) -> LocalProgram:
        order = batch_order(len(local.y), local.spec.batch_size, local.spec.epochs, torch.Generator().manual_seed(derive_seed(local.seed, "pfedme")))
        w, theta = local.start, local.start
        losses: list[float] = []
        for rows in order:
            inner = yield Train(theta, {**local.context, LAMBDA: self.lam, ANCHOR: w}, objective=0, lr=self.personal_lr, rows=rows.to(local.y.device))
            theta = inner.params
            w = outer_step(w, theta, local.lr, self.lam, self.param_keys)
            losses.append(inner.mean_loss)
        return Personal(w, len(order), sum(losses) / max(len(losses), 1), theta)

    def finish(self, model: nn.Module, state: ClientState, trained: Trained) -> tuple[ClientState, Report]:
        return {}, {}


class PFedMe(FedAvg):
    """w^{t+1} = (1 - beta) w^t + beta * mean of the clients' w_{i,R}; the clients run :class:`PFedMeClient`."""

    def __init__(self, model: nn.Module, options: PFedMeOptions = PFedMeOptions()) -> None:
        super().__init__(options.weighting)
        self.options = options
        self.param_keys = frozenset(n for n, _ in model.named_parameters())

    def trains_every_client(self) -> bool:
        """``train = "all"``: every client with rows trains each round, the sampled ones averaged (:class:`~chillfl.aggregation.base.TrainsEveryClient`)."""
        return self.options.train == "all"

    def client_half(self) -> ClientHalf:
        o = self.options
        return PFedMeClient(self.param_keys, o.lam, o.inner_steps, o.personal_lr)

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int, weights: torch.Tensor | None = None) -> Params:
        mean = super().aggregate(global_params, results, round, weights)
        beta = self.options.beta
        if beta == 1.0:
            return mean
        return {k: ((1 - beta) * g.double() + beta * mean[k].double()).to(g.dtype) if g.is_floating_point() else mean[k] for k, g in global_params.items()}


def cost(inner_steps: int) -> Cost:
    """Each batch of the run's epochs is the inner problem's K = ``inner_steps`` steps, a one-batch job: K forward + backward
    passes, each with the proximal term's overhead (:data:`~chillfl.capabilities.PARAMETER_TERM`), and the job's set-up
    (:data:`~chillfl.capabilities.ONE_BATCH_JOB`) shared by its K passes; the outer step works on the parameters alone."""
    return Cost(step_passes=float(inner_steps), pass_overhead=PARAMETER_TERM + ONE_BATCH_JOB / inner_steps)


CAPABILITIES = Capabilities(
    private_steps="each batch is used for inner_steps steps of theta_i before w_i moves, gradients that the accountant counts as one step",
    takes_weights=True,
    not_a_base="pFedMe's clients run their own local trainings, which PA3Fed's client half does not compose with",
    cost=cost(PFedMeOptions.inner_steps),
)
"""Its limits; its cost under the default ``inner_steps`` (:func:`cost`)."""


def capabilities(options: PFedMeOptions) -> Capabilities:
    """Its limits and cost under ``options``: ``train = "all"`` keeps it off Flower (refused on ``algorithm.train``): a Flower
    run goes through the same round loop, but no test checks it training the clients that do not report."""
    caps = replace(CAPABILITIES, cost=cost(options.inner_steps))
    if options.train == "all":
        return replace(caps, on_flower="train = 'all' trains the clients that do not report, which no test checks a Flower run to do",
                       limited_by="train")
    return caps


SPEC = register_algorithm(
    "pfedme",
    AlgorithmSpec(
        PFedMeOptions,
        lambda o, ctx: (PFedMe(ctx.model, o), []),
        "Moreau-envelope personalisation (Dinh et al. 2020)",
        capabilities=CAPABILITIES,
        capabilities_of=capabilities,
        makes=(PFedMe,),
    ),
)
