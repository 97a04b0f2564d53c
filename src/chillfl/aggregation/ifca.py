"""IFCA (Ghosh, Chung, Yin & Ramchandran, NeurIPS 2020): k cluster models, each client trains the one that fits it best.

Round t, cluster models theta_1..theta_k, sampled clients S. Every client i
is sent all k models, evaluates each on its training data, picks

    j_i = argmin_j F_i(theta_j)       (mean cross-entropy; ties: the lowest j)

and trains theta_{j_i} by the run's local training (the paper's "model
averaging" variant, Algorithm 2). The server then averages within each
cluster (Algorithm 1, plain mean over the members: s_{i,j} = 1 when j_i = j)::

    theta_j <- sum_{i in S, j_i = j} w_i theta_i~ / sum_{i in S, j_i = j} w_i

and a cluster that no sampled client chose keeps its model.

Choices
-------
* ``clusters = 2`` by default (the paper uses k = 2 to 4 by data set: set it
  to the number of groups you expect). ``weighting = "uniform"``, the
  paper's s_{i,j} mean; ``samples`` weights members by n_i.
* Initialisation: theta_1 is the run's initial model; theta_j for j >= 2 is
  a fresh initialisation of the same architecture (every module's
  ``reset_parameters``) from the seed derived from the run's seed and j, so
  the k models are seeded and distinct. A module without
  ``reset_parameters`` keeps the run's initial values.
* Downlink: the global model (the client's start) is one of the k cluster
  models and the other k - 1 travel in the objective's context
  (``ifca_model_<j>``), so the ledger counts k models a client, what IFCA
  sends. The client's choice comes back in its report (``ifca_cluster``).
* The global model chillfl evaluates and checkpoints is the cluster model
  the most of the round's clients chose (ties: the lowest j; before the
  first round theta_1): models of distinct initialisations are not averaged
  (their units need not correspond), and the most chosen one serves the
  most clients. Every cluster model is in the aggregator's state.
* Local accuracy measures the model the client chose, after its training
  (what the client deploys). IFCA keeps nothing on the client: it chooses
  anew every round, so it declares no personal model.

Checked against
---------------
The authors' code, jichan3751/ifca ``mnist/train_cluster_mnist.py``:
``get_inference_stats`` (every client's loss under each of the p models,
``np.argmin``: the lowest index on ties), ``train`` (each client trains a copy
of its chosen model for tau steps) and ``global_param_update`` (plain mean of
the members' parameters; a model no client chose is left as it is); its
models are p independent random initialisations (here theta_1 is the run's).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from typing import Any, Literal, Mapping, Protocol, Sequence, runtime_checkable

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
    Report,
    Train,
    Trained,
    Wire,
    check_state_keys,
    client_weights,
    load_params,
    report_number,
    weighted_average,
)
from chillfl.aggregation.registry import AlgorithmSpec, BuildContext, instance_field, register_algorithm, run_value
from chillfl.capabilities import FORWARD, Capabilities, Cost
from chillfl.engine.record import Json
from chillfl.global_rng import forked_rng
from chillfl.options import require
from chillfl.seeds import derive_seed, instance_seed
from chillfl.training.local import LocalSpec, evaluate

MODEL = "ifca_model_"
"""Context key prefix of the cluster models other than the start model."""
CHOSEN = "ifca_cluster"
"""The report key of the client's chosen cluster."""


@dataclass(frozen=True)
class IfcaOptions:
    """``clusters``: k (default 2); ``weighting``: within-cluster mean (``uniform``, the paper's, or ``samples``); ``eval_batch_size``: rows per pass of the choice."""

    clusters: int = 2
    weighting: Literal["uniform", "samples"] = "uniform"
    eval_batch_size: int = 1024

    def validate(self, section: str) -> None:
        require(self.clusters >= 1, f"{section}.clusters", f"must be >= 1, got {self.clusters}")
        require(self.eval_batch_size >= 1, f"{section}.eval_batch_size", f"must be >= 1, got {self.eval_batch_size}")


def choose(losses: Sequence[float]) -> int:
    """argmin_j losses[j], the lowest j on ties (a NaN loss is never chosen unless every loss is one)."""
    best = 0
    for j, loss in enumerate(losses):
        if loss < losses[best] or (losses[best] != losses[best] and loss == loss):
            best = j
    return best


@dataclass(frozen=True)
class IfcaClient:
    """Evaluates the k cluster models on the client's training data, trains the best one, reports which."""

    model: nn.Module
    """The run's model template (stateless: only its structure is used) for the choice's forward passes."""
    clusters: int
    eval_batch_size: int = 1024

    def prepare(self, state: ClientState, start: Params, context: Context) -> tuple[Params, dict[str, Wire]]:
        return start, dict(context)

    def objectives(self, spec: LocalSpec) -> tuple[LocalSpec, ...]:
        return ()

    def candidates(self, start: Params, context: Context) -> list[Params]:
        """The k cluster models: the start model where the context has none (the global one), else the context's."""
        out: list[Params] = []
        for j in range(self.clusters):
            sent = context.get(f"{MODEL}{j}")
            out.append({**start, **sent} if isinstance(sent, dict) else start)
        return out

    def train(self, local: Local) -> LocalProgram:
        models = self.candidates(local.start, local.context)
        losses = [evaluate(self.model, m, local.x, local.y, self.eval_batch_size)[1] for m in models] if len(models) > 1 else [0.0]
        j = choose(losses)
        context = {k: v for k, v in local.context.items() if not k.startswith(MODEL)}  # the training reads none of them
        out = yield Train(models[j], context)
        return Personal(out.params, out.num_steps, out.mean_loss, report={CHOSEN: float(j)})

    def finish(self, model: nn.Module, state: ClientState, trained: Trained) -> tuple[ClientState, Report]:
        return {}, {}


@runtime_checkable
class Resettable(Protocol):
    """A module that re-initialises its own parameters (torch's layers: ``nn.Linear``, ``nn.Conv2d``, norms, ...)."""

    def reset_parameters(self) -> None:
        ...


def fresh_model(model: nn.Module, seed: int, like: Mapping[str, torch.Tensor]) -> Params:
    """``model``'s architecture re-initialised from ``seed`` (every ``reset_parameters``), as ``like``'s devices and dtypes."""
    m = copy.deepcopy(model).to("cpu")
    with forked_rng(seed), torch.no_grad():  # not torch.manual_seed: it reseeds the caller's CUDA generators too, unrestored
        for module in m.modules():
            if isinstance(module, Resettable):
                module.reset_parameters()
    state = m.state_dict()
    return {k: state[k].detach().to(v.device, v.dtype).clone() if k in state else v.clone() for k, v in like.items()}


class Ifca(AggregatorBase):
    """Keeps the k cluster models; averages each over the clients that chose it."""

    def __init__(self, model: nn.Module, seed: int | None = None, options: IfcaOptions = IfcaOptions()) -> None:
        self.template = model
        self.seed = seed
        """The run's seed, which draws the cluster models j >= 1 (None: the run's, which a run fills, :func:`_bind`; 0
        outside a run)."""
        self.options = options
        self.models: list[Params] = []
        self.best = 0
        """The cluster whose model is the global one (the most chosen last round)."""
        self._chosen: list[int] = []

    def client_half(self) -> ClientHalf:
        return IfcaClient(self.template, self.options.clusters, self.options.eval_batch_size)

    def _ensure(self, global_params: Params) -> None:
        if not self.models:
            self.models = [dict(global_params)] + [fresh_model(self.template, derive_seed(instance_seed(self.seed), "ifca", j), global_params) for j in range(1, self.options.clusters)]

    def downlink(self, client_id: int, round: int, global_params: Params) -> Downlink:
        self._ensure(global_params)
        return Downlink(context={f"{MODEL}{j}": m for j, m in enumerate(self.models) if j != self.best})

    def client_start(self, result: ClientResult, global_params: Params) -> Params | None:
        """The cluster model the client chose and trained (its report), before this round's aggregate updates it
        (:class:`~chillfl.aggregation.base.ChoosesStart`): an attack or a clip reads the client's update from it."""
        self._ensure(global_params)
        return self.models[int(report_number(result, CHOSEN, "IFCA"))]

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int) -> Params:
        self._ensure(global_params)
        chosen = [int(report_number(r, CHOSEN, "IFCA")) for r in results]
        for j in range(len(self.models)):
            members = [r for r, c in zip(results, chosen) if c == j]
            if members:
                self.models[j] = weighted_average([r.params for r in members], client_weights(members, self.options.weighting))
        counts = [chosen.count(j) for j in range(len(self.models))]
        self.best = max(range(len(counts)), key=lambda j: (counts[j], -j))
        self._chosen = counts
        return dict(self.models[self.best])

    def round_metrics(self) -> Mapping[str, Json]:
        """How many of the round's clients chose each cluster, and which model is the global one."""
        if not self._chosen:
            return {}
        return {"ifca_global_cluster": self.best, "ifca_clusters_chosen": sum(1 for c in self._chosen if c), **{f"ifca_cluster_{j}": c for j, c in enumerate(self._chosen)}}

    def state_dict(self) -> dict[str, Any]:
        """The k cluster models (empty before the first round) and the global one's index."""
        return {"models": {str(j): dict(m) for j, m in enumerate(self.models)}, "best": self.best}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        check_state_keys(state, ("models", "best"), "IFCA")
        models = state["models"]
        self.models = [load_params(models[str(j)]) for j in range(len(models))]
        self.best = int(state["best"])


CAPABILITIES = Capabilities(
    private_steps="each client chooses its cluster by every cluster model's loss on its data, without noise", reports="each client's choice of cluster, the lowest loss on its training data"
)


def capabilities(options: IfcaOptions) -> Capabilities:
    """Its limits, and its cost: before training, a client runs each of the k cluster models forward over its training rows
    to choose one (none with k = 1: there is nothing to choose)."""
    return replace(CAPABILITIES, cost=Cost(epochs=options.clusters * FORWARD if options.clusters > 1 else 0.0))


def _bind(aggregator: Ifca, ctx: BuildContext) -> None:
    """An instance passed from Python draws its cluster models from the run's seed, as the builder's does: its ``seed``
    the run's (None: filled), another refused on ``aggregator.seed`` (``Ifca(model, 0)`` started every seed's alike)."""
    aggregator.seed = run_value(aggregator.seed, ctx.seed, instance_field(ctx, "seed"), "seed")


SPEC = register_algorithm(
    "ifca",
    AlgorithmSpec(
        IfcaOptions,
        lambda o, ctx: (Ifca(ctx.model, ctx.seed, o), []),
        "k cluster models, each client trains the best-fitting one (Ghosh et al. 2020)",
        capabilities=CAPABILITIES,
        capabilities_of=capabilities,
        makes=(Ifca,),
        bind=_bind,
    ),
)
