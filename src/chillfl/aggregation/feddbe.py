"""FedDBE (Zhang et al., NeurIPS 2023): FedAvg with the Domain Bias Eliminator.

The model is a feature extractor f (the body) and a linear head h, split at
the head's input (:mod:`chillfl.models.parts`). DBE adds two things to client
i's local training:

* the Personalized Representation Bias Memory (PRBM), a trainable vector
  \\bar z_i^p of the representation's width that the client adds to the
  body's output before the head and never uploads::

      logits = h(f(x) + \\bar z_i^p)

* Mean Regularization (MR), which pulls the mean of the body's output (not
  shifted by the PRBM) towards the clients' consensus \\bar z^g::

      L_i = CE(h(f(x) + \\bar z_i^p), y) + kappa * R(\\bar z_i, \\bar z^g)

  with \\bar z_i a running mean of the batch means over the round's steps
  (the authors' ``clientDBE``: reset to 0 at each local training; only the
  current batch's mean carries a gradient)::

      \\bar z_i <- (1 - beta) * \\bar z_i.detach() + beta * mean_batch f(x)

  and R the authors' ``torch.mean(0.5 * (m - g) ** 2)``: R(m, g) = ||m - g||^2 / (2 d).

The server averages the whole model (body and head) by FedAvg and sets
\\bar z^g = sum_i (n_i / n) \\bar z_i from the means the clients upload after a
first round trained without DBE (the paper's initialisation period), then
keeps it fixed. From then on each client trains with its PRBM and MR.

Local accuracy measures the client's own model, body + head with its PRBM:
h(z + p) = W z + (b + W p), so that is the trained model with head bias
b + W p (equal up to float rounding), which the run's template evaluates;
``checkpoint.client_models`` saves the final global model with the client's
PRBM folded in (:meth:`FedDBEClient.personal_model`). The global model is
body + head with no PRBM (a new client's PRBM is 0).

Checked against the authors' TsingZ0/DBE ``system/flcore/clients/clientDBE.py``,
``system/flcore/servers/serverDBE.py``, ``system/main.py`` (``-mo`` 0.1, ``-klw`` 0)
and ``system/run_me.sh`` (``-mo 1 -klw 50``), and PFLlib (TsingZ0/PFLlib)
``system/flcore/clients/clientdbe.py`` and ``system/flcore/servers/serverdbe.py``
(the same code): the running mean (reset each training, detached after each
step), R, MR on the body's output and the PRBM added before the head, neither
in the initialisation period, \\bar z^g weighted by n_i / n and made once, the
whole model (body + head, no PRBM) averaged.

The PRBM and the running mean live in a copy of the model with one more
submodule (:func:`with_bias_memory`) whose forward pre-hook on the head adds
the PRBM, so the one training path trains them as any parameter and buffer
(the running mean updates in place, as batch norm's statistics do).

Choices
-------
* **When \\bar z^g is made** (``consensus``): ``once`` (default, the paper)
  from the first round's uploads; ``every_round`` recomputes it from each
  round's uploads. The authors' initialisation period trains every client
  once before round 1 and throws the models away; here it is the first round
  of the run, with the round's sampled clients: its models are averaged
  (``warmup = "aggregate"``, default: a plain FedAvg round) or thrown away as
  the authors do (``warmup = "discard"``: the round leaves the global model
  unchanged). In that first round there is no PRBM and no MR (as the authors').
* The uploaded \\bar z_i is the running mean at the end of the client's
  training, in training mode (the authors' ``running_mean``), weighted by
  n_i / n into \\bar z^g (the authors' ``uploaded_weights``) whatever ``weighting``
  the model average uses.
* ``momentum`` beta = 1 (default) and ``kappa`` = 50 are the authors'
  published FMNIST command (``-mo 1 -klw 50``; their code's defaults are 0.1 and 0):
  with beta = 1 the MR reads each batch's own mean.
* ``distance = "mse"`` (default) is the authors' R; ``"norm"`` is the
  Euclidean distance ||\\bar z_i - \\bar z^g||_2 (MR read as a norm rather than a mean square).
* The PRBM starts at 0 at a client's first DBE round and trains under the
  run's local optimiser at the round's learning rate (the authors: a separate
  plain SGD at the same rate), without weight decay (theirs has none).
* ``local_eval = "trained"`` (default) measures the client's trained model
  with its PRBM. The authors test, at the start of each round, every client's
  PRBM on the global model just sent (``evaluate`` after ``send_models``);
  ``local_eval = "averaged"`` measures that: the PRBM folded into the model the
  server has just averaged, on the server after the round
  (:class:`~chillfl.aggregation.base.MeasuredAfterAverage`). Its first round
  leaves each client a PRBM of 0, so that the server holds a state to
  measure.
* The authors' PRBM optimiser keeps its initial learning rate when the
  model's decays (``-ld``); here it follows the round's.
* The model must have a head with a bias (to fold the PRBM into it);
  a parameter term of the run's objective (``proximal_mu``) applies to the
  model; batch terms and representation-based losses do not compose.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from typing import Any, Literal, Mapping, Sequence

import torch
from torch import nn

from chillfl.aggregation.base import (
    ClientHalf,
    ClientResult,
    ClientState,
    Context,
    Downlink,
    FedAvg,
    Local,
    LocalProgram,
    Params,
    Personal,
    Report,
    Train,
    Trained,
    Wire,
    check_state_keys,
    own_entries,
    report_tensor,
    sample_weights,
    weighted_average,
    with_prefix,
)
from chillfl.aggregation.registry import AlgorithmSpec, after_average, register_algorithm
from chillfl.capabilities import Capabilities
from chillfl.errors import ConfigError
from chillfl.models.parts import head_has_bias, head_name, head_size
from chillfl.options import require
from chillfl.training.local import LocalSpec, refuse_representation_readers
from chillfl.training.objective import StepView, read_number, read_tensor


@dataclass(frozen=True)
class FedDBEOptions:
    """``kappa``: MR's weight (50); ``momentum``: beta of the running mean (1: the batch mean); ``distance``: R;
    ``consensus``: \\bar z^g made ``once`` (after the first round) or ``every_round``; ``warmup``: the first round's
    models averaged (``aggregate``) or thrown away (``discard``, the authors'); ``local_eval``: local accuracy of the
    trained model with the PRBM (``trained``) or of the PRBM on the model the server has just averaged (``averaged``,
    the authors')."""

    kappa: float = 50.0
    momentum: float = 1.0
    distance: Literal["mse", "norm"] = "mse"
    consensus: Literal["once", "every_round"] = "once"
    warmup: Literal["aggregate", "discard"] = "aggregate"
    weighting: Literal["samples", "uniform"] = "samples"
    local_eval: Literal["trained", "averaged"] = "trained"

    def validate(self, section: str) -> None:
        require(0 <= self.kappa <= 1e6, f"{section}.kappa", f"must be in [0, 1e6], got {self.kappa}")
        require(0 < self.momentum <= 1, f"{section}.momentum", f"must be in (0, 1], got {self.momentum}")


MEMORY = "feddbe_memory"
"""The submodule :func:`with_bias_memory` adds to the model's copy."""
BIAS = f"{MEMORY}.bias"
"""The PRBM's key in the training state."""
RUNNING_MODULE = f"{MEMORY}.running"
RUNNING = f"{RUNNING_MODULE}.mean"
"""The running mean's key in the training state."""
PREFIX = "feddbe."
"""Where the PRBM lives in the client's state."""
KAPPA, CONSENSUS = "feddbe_kappa", "feddbe_consensus"
"""Context keys of MR: kappa and \\bar z^g (absent: the first round, no DBE)."""
MEAN = "feddbe_mean"
"""Report key: the client's running mean \\bar z_i at the end of its training."""


class RunningMean(nn.Module):
    """m <- (1 - beta) m.detach() + beta * mean of the batch's rows; returns m (its gradient through the batch only)."""

    mean: torch.Tensor

    def __init__(self, dim: int, momentum: float) -> None:
        super().__init__()
        self.momentum = momentum
        self.register_buffer("mean", torch.zeros(dim))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        rows = z.reshape(-1, z.shape[-1])
        m = (1 - self.momentum) * self.mean + self.momentum * rows.mean(0)
        if self.training:  # in place, as batch norm's statistics: the training state carries it from step to step
            self.mean.copy_(m.detach())
        return m


class BiasMemory(nn.Module):
    """The PRBM (``bias``) and the running mean; :meth:`shift` is the head's forward pre-hook."""

    def __init__(self, dim: int, momentum: float) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(dim))
        self.running = RunningMean(dim, momentum)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The identity: a container that runs all its children in order (``nn.Sequential``) passes through it."""
        return x

    def shift(self, _head: nn.Module, inputs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        """The head's input z -> z + PRBM, after the running mean has read z (a bound method: copies rebind it)."""
        self.running(inputs[0])
        return (inputs[0] + self.bias, *inputs[1:])


def with_bias_memory(model: nn.Module, momentum: float) -> nn.Module:
    """A copy of ``model`` whose head sees f(x) + PRBM; its state is the model's plus :data:`BIAS` and :data:`RUNNING`.

    The copy keeps the model's head (its declaration travels with it), so the representation a step reads is the head's input (z + PRBM).
    """
    twin = copy.deepcopy(model)
    head = twin.get_submodule(head_name(twin))
    memory = BiasMemory(head_size(twin).features, momentum)
    twin.add_module(MEMORY, memory)
    head.register_forward_pre_hook(memory.shift)
    return twin


def mr_distance(m: torch.Tensor, g: torch.Tensor, distance: str) -> torch.Tensor:
    """R(m, g): ``mse`` = mean_k (m_k - g_k)^2 / 2 (the authors'), ``norm`` = ||m - g||_2."""
    if distance == "norm":
        return torch.linalg.vector_norm(m - g)
    return 0.5 * ((m - g) ** 2).mean()


class MeanRegularisation:
    """``kappa * R(\\bar z_i, \\bar z^g)``: MR, a batch term on the running mean of this step's forward."""

    per_batch = True
    captures: tuple[str, ...] = (RUNNING_MODULE,)
    reads: tuple[str, ...] = (KAPPA, CONSENSUS)

    def __init__(self, distance: str = "mse") -> None:
        self.distance = distance

    def __call__(self, params: Mapping[str, torch.Tensor], context: Context, step: StepView) -> torch.Tensor:
        m = step.captured[RUNNING_MODULE][1]
        return read_number(context, KAPPA) * mr_distance(m, read_tensor(context, CONSENSUS).to(m.dtype), self.distance)


def folded(model: Params, bias: torch.Tensor, head: str) -> Params:
    """The model whose head computes h(z + PRBM): head bias b + W PRBM."""
    w = model[f"{head}.weight"]
    return {**model, f"{head}.bias": model[f"{head}.bias"] + w @ bias.to(w.device, w.dtype)}


@dataclass(frozen=True)
class FedDBEClient:
    """FedDBE's client half: trains the model with its PRBM (and MR once \\bar z^g is known); uploads the model and \\bar z_i."""

    template: nn.Module
    """The model with its bias memory (:func:`with_bias_memory`)."""
    head: str
    distance: str
    after_average: bool = False
    """Local accuracy of the PRBM on the *next* global model, measured by the server after the average
    (:class:`~chillfl.aggregation.base.MeasuredAfterAverage`; ``local_eval = "averaged"``)."""

    def prepare(self, state: ClientState, start: Params, context: Context) -> tuple[Params, dict[str, Wire]]:
        return start, dict(context)

    def objectives(self, spec: LocalSpec) -> tuple[LocalSpec, ...]:
        """0: the first round's, the PRBM frozen at 0 and no MR; 1: DBE's, the PRBM trained (no decay) and MR."""
        refuse_representation_readers(spec, "FedDBE's head reads the representation shifted by the PRBM")
        warm = replace(spec, model=self.template, frozen=spec.frozen | {BIAS})
        dbe = replace(spec, model=self.template, terms=(*spec.terms, MeanRegularisation(self.distance)), no_decay=spec.no_decay | {BIAS})
        return warm, dbe

    def train(self, local: Local) -> LocalProgram:
        w = local.start[f"{self.head}.weight"]
        dbe = CONSENSUS in local.context
        bias = own_entries(local.state, PREFIX).get("bias") if dbe else None
        zeros = torch.zeros(w.shape[1], dtype=w.dtype, device=w.device)
        start = {**local.start, BIAS: zeros if bias is None else bias.to(w.device), RUNNING: zeros.clone()}
        out = yield Train(start, local.context, objective=1 if dbe else 0)
        model = {k: v for k, v in out.params.items() if k not in (BIAS, RUNNING)}
        report: Report = {MEAN: out.params[RUNNING]}
        if not dbe:  # measured after the average, the client needs a state on the server: its PRBM, still 0
            state = with_prefix({"bias": zeros}, PREFIX) if self.after_average else {}
            return Personal(model, out.num_steps, out.mean_loss, state=state, report=report)
        p = out.params[BIAS]
        return Personal(model, out.num_steps, out.mean_loss, folded(model, p, self.head), with_prefix({"bias": p}, PREFIX), report)

    def finish(self, model: nn.Module, state: ClientState, trained: Trained) -> tuple[ClientState, Report]:
        return {}, {}  # the PRBM is kept by the training (Personal.state)

    def personal_model(self, state: ClientState, global_model: Params) -> Params:
        """The current global model with this client's PRBM folded into the head (the global model before its first DBE round)."""
        bias = own_entries(state, PREFIX).get("bias")
        return dict(global_model) if bias is None else folded(global_model, bias, self.head)


class FedDBE(FedAvg):
    """FedAvg of the models; \\bar z^g from the clients' uploaded means; every PRBM is its client's own."""

    def __init__(self, model: nn.Module, options: FedDBEOptions = FedDBEOptions()) -> None:
        super().__init__(options.weighting)
        self.options = options
        self.head = head_name(model)
        if not head_has_bias(model):
            raise ConfigError("algorithm.name", f"FedDBE folds the PRBM into the head's bias; {type(model).__name__}'s head {self.head!r} has none")
        self.client = FedDBEClient(with_bias_memory(model, options.momentum), self.head, options.distance, options.local_eval == "averaged")
        self.consensus: torch.Tensor | None = None
        """\\bar z^g; None until the first round's means arrive."""

    def client_half(self) -> ClientHalf:
        return self.client

    def downlink(self, client_id: int, round: int, global_params: Params) -> Downlink:
        if self.consensus is None:
            return Downlink()
        device = next(iter(global_params.values())).device  # a checkpoint may have brought the state back on another
        return Downlink(context={KAPPA: self.options.kappa, CONSENSUS: self.consensus.to(device)})

    def aggregate(
        self, global_params: Params, results: Sequence[ClientResult], round: int, weights: torch.Tensor | None = None
    ) -> Params:
        first = self.consensus is None
        if first or self.options.consensus == "every_round":
            means = [{MEAN: report_tensor(r, MEAN, "FedDBE")} for r in results]
            self.consensus = weighted_average(means, sample_weights(results))[MEAN]
        if first and self.options.warmup == "discard":
            return dict(global_params)
        return super().aggregate(global_params, results, round, weights)

    def round_metrics(self) -> Mapping[str, Any]:
        return {} if self.consensus is None else {"consensus_norm": float(torch.linalg.vector_norm(self.consensus.double()))}

    def state_dict(self) -> dict[str, Any]:
        return {"consensus": {} if self.consensus is None else {"mean": self.consensus}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        check_state_keys(state, ("consensus",), "FedDBE")
        self.consensus = state["consensus"].get("mean")


SPEC: AlgorithmSpec = register_algorithm(
    "feddbe",
    AlgorithmSpec(
        FedDBEOptions,
        lambda o, ctx: (FedDBE(ctx.model, o), []),
        "FedAvg with a personal representation bias and mean regularisation (Zhang et al. 2023)",
        capabilities=Capabilities(
            private_steps=(
                "MR regularises the batch's mean representation (and its running mean over the round): one sample changes every"
                " sample's gradient, which per-sample clipping does not bound; the uploaded mean is computed from the data too"
            ),
            takes_weights=True,
            not_a_base="FedDBE's clients run their own local trainings, which PA3Fed's client half does not compose with",
            personal_model=True,
            reports="each client's running mean of its representation",
            linear_head="FedDBE's client model folds the PRBM p into the head's bias, h(z + p) = W z + (b + W p)",
        ),
        capabilities_of=lambda o: after_average(SPEC.capabilities, "local_eval", "averaged", o.local_eval == "averaged"),
        makes=(FedDBE,),  # an instance passed from Python meets this spec's checks (check_instance)
    ),
)
