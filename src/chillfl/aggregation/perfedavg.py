"""Per-FedAvg (Fallah, Mokhtari & Ozdaglar, NeurIPS 2020): FedAvg on the MAML objective F_i(w) = f_i(w - alpha grad f_i(w)).

Client i, sent w^t, runs R local steps; step r draws fresh batches D, D', D''
of its training data (the run's batch size) and, from w,

* w' = w - alpha grad f_i(w; D)                            (the inner step)
* FO (first order): w <- w - beta grad f_i(w'; D')
* HF (Hessian-free): w <- w - beta (g - alpha d), with g = grad f_i(w'; D') and
  d = [grad f_i(w + delta g; D'') - grad f_i(w - delta g; D'')] / (2 delta),
  the finite-difference Hessian-vector product H_i(w; D'') g.

The server averages the w_i (FedAvg, n_i / n). The personalised model, which
local accuracy measures, is the global model the client was sent adapted by
``adapt_steps`` steps ``w^t - alpha grad f_i(w^t; D)`` on its own training
batches (the paper's evaluation).

Every step above is a job of the one training path (a :class:`Train` request
of one batch, as pFedMe's inner problems): an inner step is one SGD step at
alpha; grad f_i(u; D) is read off one SGD step at lr 1, ``u - step(u)``; the
FO outer step is ``w + (w'' - w')`` with w'' one SGD step at beta from w'.

Checked against FL-bench (``src/client/perfedavg.py``: the inner step with the
local optimiser at its lr, the meta step with SGD at ``perfedavg.beta`` from the
restored w; HF's model_plus / model_minus at w +- delta g on a third batch,
g - lr / (2 delta) (grad_plus - grad_minus)) and PFLlib (``clientperavg.py``,
first order: its version at commit 20524d4 takes the beta step from w' without
restoring w, Reptile-like, and its ``train_one_step`` adapts on a test batch;
here the step is the paper's, from w, and the adaptation uses training batches).

Choices
-------
* ``variant = "fo"`` (default, as FL-bench's ``perfedavg.version`` and
  PFLlib's client); ``"hf"`` as FL-bench's, delta = ``delta`` (1e-3).
* alpha defaults to the round's learning rate (both references use the local
  optimiser's lr as alpha), beta to 1e-3 (FL-bench's default). FO needs alpha
  below 1 / the loss's sharpness: along a Hessian direction of curvature
  lambda its step scales the distance to the minimum by
  1 - beta lambda (1 - alpha lambda), above 1 once alpha lambda > 1 (HF's
  factor has (1 - alpha lambda)^2). SGD at lr 0.1 takes a small CNN's
  sharpness past 10, so FO at alpha = lr = 0.1 climbs (docs/personalised.md).
* A client's batches come from its batch order over ``client.epochs`` (one
  batch a request); a step takes 2 (FO) or 3 (HF) consecutive batches, so a
  round has R = max(1, batches // 2 or 3) steps, wrapping round to the first
  batches when a client has fewer (FL-bench: len(loader) // (2 or 3) per epoch).
* The steps are plain gradient steps: another client optimiser, momentum,
  Nesterov, clipping, SAM or an lr schedule over steps is refused (:func:`_check`);
  weight decay applies, as part of f_i, and a schedule over rounds sets alpha
  (unset: the round's lr). A straggler (``work`` < 1) still runs all R steps.
* Batch-norm statistics after a step are those of the D and D' forwards (the
  parameters are reset to w before the outer step, the buffers are not:
  PFLlib); the HF probes' statistics are dropped. ``train_loss`` is the mean of
  f_i(w; D) over the steps.
* The mean is n_i / n, PFLlib's (``weighting = "uniform"``: the plain mean over the sampled clients of the
  paper's Algorithm 1, and FL-bench's weight 1).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

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
)
from chillfl.aggregation.registry import AlgorithmSpec, register_algorithm
from chillfl.capabilities import ONE_BATCH_JOB, Capabilities, Cost
from chillfl.errors import ConfigError
from chillfl.options import Scale, require
from chillfl.seeds import derive_seed
from chillfl.training.local import LocalSpec, batch_order
from chillfl.training.schedule import SGD

if TYPE_CHECKING:
    from chillfl.config import RunConfig


@dataclass(frozen=True)
class PerFedAvgOptions:
    """``variant`` (fo/hf), ``alpha`` (inner step, unset = the round's lr), ``beta`` (outer step), ``delta`` (HF), ``adapt_steps``."""

    variant: Literal["fo", "hf"] = "fo"
    alpha: Scale | None = None
    beta: float = 1e-3
    delta: float = 1e-3
    adapt_steps: int = 1
    """Steps of w^t - alpha grad f_i(w^t) that make the personalised model local accuracy measures."""
    weighting: Literal["samples", "uniform"] = "samples"

    def validate(self, section: str) -> None:
        if self.alpha is not None:
            require(self.alpha > 0, f"{section}.alpha", f"must be > 0, got {self.alpha}")
        require(self.beta > 0, f"{section}.beta", f"must be > 0, got {self.beta}")
        require(self.delta > 0, f"{section}.delta", f"must be > 0, got {self.delta}")
        require(self.adapt_steps >= 0, f"{section}.adapt_steps", f"must be >= 0, got {self.adapt_steps}")


def plus(a: Params, b: Params, scale: float, keys: frozenset[str]) -> Params:
    """a + scale * b on ``keys``; a's other entries as they are."""
    return {k: a[k] + scale * b[k] if k in keys else a[k] for k in a}


def diff(a: Params, b: Params, keys: frozenset[str]) -> Params:
    """a - b on ``keys``."""
    return {k: a[k] - b[k] for k in a if k in keys}


@dataclass(frozen=True)
class PerFedAvgClient:
    """Per-FedAvg's client half: R meta steps, each 2 (FO) or 4 (HF) one-batch jobs; then the personalised adaptation."""

    param_keys: frozenset[str]
    variant: str
    alpha: float | None
    beta: float
    delta: float
    adapt_steps: int

    def prepare(self, state: ClientState, start: Params, context: Context) -> tuple[Params, dict[str, Wire]]:
        return start, dict(context)

    def objectives(self, spec: LocalSpec) -> tuple[LocalSpec, ...]:
        """0: one plain SGD step on the request's batch (its rows are one batch of the run's size)."""
        return (replace(spec, epochs=1, momentum=0.0, optim=SGD),)

    def train(self, local: Local) -> LocalProgram:
        alpha = local.lr if self.alpha is None else self.alpha
        keys = self.param_keys - local.spec.frozen
        hf = self.variant == "hf"
        per_step = 3 if hf else 2
        device = local.y.device
        order = batch_order(len(local.y), local.spec.batch_size, local.spec.epochs, torch.Generator().manual_seed(derive_seed(local.seed, "perfedavg")))
        steps = max(1, len(order) // per_step)
        w = local.start
        losses: list[float] = []
        for r in range(steps):
            d1, d2, d3 = (order[(per_step * r + j) % len(order)].to(device) for j in range(3))
            inner = yield Train(w, local.context, objective=0, lr=alpha, rows=d1)
            outer = yield Train(inner.params, local.context, objective=0, lr=self.beta, rows=d2)
            losses.append(inner.mean_loss)
            moved = diff(outer.params, inner.params, keys)  # -beta g, g = grad f(w'; D')
            if hf:
                g = {k: v / -self.beta for k, v in moved.items()}
                up = yield Train(plus(w, g, self.delta, keys), local.context, objective=0, lr=1.0, rows=d3)
                down = yield Train(plus(w, g, -self.delta, keys), local.context, objective=0, lr=1.0, rows=d3)
                # grad(w + delta g) - grad(w - delta g) = 2 delta g - (up - down)
                fd = {k: 2 * self.delta * g[k] - (up.params[k] - down.params[k]) for k in keys}
                moved = {k: moved[k] + self.beta * alpha / (2 * self.delta) * fd[k] for k in keys}
            w = {k: w[k] + moved[k] if k in keys else outer.params[k] for k in w}
        personal = local.start
        if self.adapt_steps:
            adapt = batch_order(len(local.y), local.spec.batch_size, self.adapt_steps, torch.Generator().manual_seed(derive_seed(local.seed, "perfedavg-adapt")))
            for rows in adapt[: self.adapt_steps]:
                personal = (yield Train(personal, local.context, objective=0, lr=alpha, rows=rows.to(device))).params
        return Personal(w, steps, sum(losses) / len(losses), personal)

    def finish(self, model: nn.Module, state: ClientState, trained: Trained) -> tuple[ClientState, Report]:
        return {}, {}


class PerFedAvg(FedAvg):
    """FedAvg on the clients' meta-trained w_i (:class:`PerFedAvgClient`)."""

    def __init__(self, model: nn.Module, options: PerFedAvgOptions = PerFedAvgOptions()) -> None:
        super().__init__(options.weighting)
        self.options = options
        self.param_keys = frozenset(n for n, _ in model.named_parameters())

    def client_half(self) -> ClientHalf:
        o = self.options
        return PerFedAvgClient(self.param_keys, o.variant, o.alpha, o.beta, o.delta, o.adapt_steps)


CAPABILITIES = Capabilities(
    private_steps="each of its steps takes two (HF: four) gradients on different batches, which the accountant counts as one step",
    takes_weights=True,
    not_a_base="Per-FedAvg's clients run their own local trainings, which PA3Fed's client half does not compose with",
)


def capabilities(options: PerFedAvgOptions) -> Capabilities:
    """Its limits, and its cost. FO: R = batches // 2 steps of 2 gradients, one a batch: the run's batches once, as FedAvg,
    but each gradient a one-batch job (:data:`~chillfl.capabilities.ONE_BATCH_JOB` a pass). HF: R = batches // 3 steps of 4
    gradients (D, D', and two probes on D''): 4/3 passes a batch, each a job. Then the ``adapt_steps`` one-batch steps of the
    personalised model, each a job too (``Cost.steps``, with the same job overhead)."""
    passes = 4 / 3 if options.variant == "hf" else 1.0
    return replace(CAPABILITIES, cost=Cost(step_passes=passes, pass_overhead=ONE_BATCH_JOB, steps=float(options.adapt_steps)))


def _check(options: PerFedAvgOptions, config: "RunConfig", section: str) -> None:
    """One line on a client-optimiser setting the meta steps never run. Why: they are plain gradient steps at alpha and
    beta, so Adam, momentum, Nesterov, clipping, SAM or a per-step schedule were accepted, saved in config.toml, and
    ignored (a comparison "every method with Adam" ran Per-FedAvg on SGD without a word). A schedule over rounds is
    read: alpha, unset, is the round's lr."""
    c = config.client
    why = "Per-FedAvg's meta steps are plain gradient steps (alpha, beta)"
    refused = [
        ("client.optimizer", c.optimizer != "sgd", f"{why}, so optimizer = {c.optimizer!r} would not run: use 'sgd'"),
        ("client.momentum", c.momentum != 0, f"{why}, so momentum {c.momentum} would not run: use 0"),
        ("client.nesterov", c.nesterov, f"{why}, so nesterov would not run: use false"),
        ("client.clip_norm", c.clip_norm != 0, f"{why}, so clip_norm {c.clip_norm} would not run: use 0"),
        ("client.sam_rho", c.sam_rho != 0, f"{why}, so sharpness-aware steps (sam_rho {c.sam_rho}) would not run: use 0"),
        ("client.lr_schedule_over", c.lr_schedule != "constant" and c.lr_schedule_over == "steps",
         f"{why}, so a schedule over local steps would not run: use lr_schedule_over = 'rounds' (alpha, unset, is the round's lr)"),
    ]
    for field, wrong, message in refused:
        if wrong:
            raise ConfigError(field, message)


SPEC = register_algorithm(
    "perfedavg",
    AlgorithmSpec(
        PerFedAvgOptions,
        lambda o, ctx: (PerFedAvg(ctx.model, o), []),
        "FedAvg on the MAML objective, personalised by one local step (Fallah et al. 2020)",
        capabilities=CAPABILITIES,
        capabilities_of=capabilities,
        check=_check,
        makes=(PerFedAvg,),  # an instance passed from Python meets this spec's checks (check_instance)
    ),
)
