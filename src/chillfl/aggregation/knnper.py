"""kNN-Per (Marfoq, Neglia, Vidal, Kameni, ICML 2022): FedAvg, personalised at inference by a local kNN memory.

"Personalized Federated Learning through Local Memorization". Training and aggregation are FedAvg's, so the global
model is FedAvg's bit for bit. Personalisation happens at inference only: each client keeps a datastore of its
training rows' representations under the global model w (the classifier head's input, :mod:`chillfl.models.parts`)
with their labels, and predicts::

    p(y|x) = lam * p_kNN(y|x) + (1 - lam) * p_global(y|x)

    p_kNN(y|x) = sum_{j in N_k(x), y_j = y} exp(-d(x, x_j) / sigma) / sum_{j in N_k(x)} exp(-d(x, x_j) / sigma)

where N_k(x) are the k datastore entries nearest to x's representation, d the Euclidean distance between
representations and p_global = softmax of w's logits. The client's local accuracy (``local_acc``) measures this
interpolated prediction on its own split; the global accuracy stays the global model's.

How it fits chillfl's seams: the client half is :class:`~chillfl.aggregation.base.Personalising` (it runs FedAvg's one
training, then builds the datastore) and :class:`~chillfl.aggregation.base.OwnArchitecture`: the client's own model is a
:class:`KNNPerModel`, whose entries are the global model's (under ``model.``) plus the datastore (``store_x``,
``store_y``) and the client's ``lam`` as buffers, and whose forward returns the log of the interpolated p. Local
accuracy evaluates it as any model (argmax; its loss is the NLL of p, as cross-entropy of log-probabilities is).

Choices
-------
* **Which global model.** The model the client was sent this round (w^t), as every chillfl ``local_acc`` is measured
  in the round's own client update (FedAvg-FT's ``finetune_epochs = 0`` measures the same w^t): the datastore is made
  anew each round from w^t and kept nowhere between rounds (no client state, nothing uploaded). The paper applies it
  to the final global model: the last round's ``local_acc`` is kNN-Per on w^(R-1), the model of the round before.
* **lam** (``lam``): a fixed float in [0, 1], or unset (default): chosen per client from the grid
  :data:`LAM_GRID` (0.0, 0.1, ..., 1.0) as the value with the best accuracy, ties to the smallest (closest to the
  global model). **Deviation**: the paper tunes lam on each client's validation rows; a personalising client half is
  given its training rows only, so lam is chosen on the training rows, leave-one-out: each training row's p_kNN is
  computed from the datastore without that row's own entry (else its own representation, at distance 0, would make
  the kNN look perfect and lam = 1 always win). p_global on those rows is w^t's, which was trained on them.
  A client with a single row has no leave-one-out neighbour: its lam is 0.
* **k** (``k``, default 10) and **sigma** (``sigma``, default 1.0): this implementation's defaults; the paper's
  values were not at hand when this was written (its code takes the number of neighbours on the command line and
  scans lam and the datastore's capacity on grids of 0.01). k larger than the datastore uses all of it.
  The whole training set is the datastore (the paper's full capacity).
* **The kernel** (``kernel``): ``"distance"`` (default), exp(-d / sigma) with d the Euclidean distance, as the
  paper writes p_kNN with a distance d and a scale. ``"squared"`` is the authors' code (omarfoq/knn-per,
  ``client.py``, FAISS ``IndexFlatL2``): exp(-d^2 / (D sigma)), the squared distance over the representation's
  dimension D times its scale (1.0 there). Where the representations spread wide, as a CNN's 256 features, it
  weighs the k neighbours almost alike (a vote); the default keeps the nearest ones heavier.
* Representations are computed in eval mode, stored as the model's float32, and compared in float64 with the direct
  (not matrix-product) Euclidean distance; the k nearest are taken by a stable sort, so ties go to the lower
  datastore index. The kernel weights are computed as exp(-(d_j - d_min) / sigma), which normalises to the same
  p_kNN and does not underflow when every neighbour is far.
* The interpolation is computed as logaddexp(log lam + log p_kNN, log(1 - lam) + log_softmax(logits)): with
  lam = 0 it is log_softmax(logits) exactly, so predictions are the global model's. A label p(y|x) gives 0 (possible
  only with lam = 1) has log-probability log(float32 tiny) (about -87.3) rather than -inf, so the loss stays finite.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from chillfl.aggregation.base import (
    ClientHalf,
    FedAvg,
    Local,
    LocalProgram,
    Personal,
    Stateless,
    Train,
)
from chillfl.aggregation.registry import AlgorithmSpec, BuildContext, Built, register_algorithm, require_head, require_model_head
from chillfl.capabilities import FORWARD, Capabilities, Cost
from chillfl.models.parts import forward_with_features, head_inputs, head_size
from chillfl.options import require
from chillfl.training.local import LocalSpec

LAM_GRID: tuple[float, ...] = tuple(i / 10 for i in range(11))
"""The lam values a client chooses from when ``lam`` is unset: 0.0, 0.1, ..., 1.0."""
MODEL = "model."
"""Prefix of the global model's entries in a client's own model (:class:`KNNPerModel`)."""


Kernel = Literal["distance", "squared"]
"""How the k neighbours are weighed (:attr:`KNNPerOptions.kernel`)."""


MIN_SIGMA = 1e-200
"""The smallest ``sigma``: the distance between float32 representations (at most 2 x 3.4e38 a coordinate) over it,
d / sigma or d^2 / (D sigma), stays below float64's largest; ``sigma = 1e-320`` made the nearest neighbour's d / sigma
inf, inf - inf a NaN weight, and every local loss NaN (:func:`knn_probs`)."""


@dataclass(frozen=True)
class KNNPerOptions:
    """``k`` (neighbours), ``sigma`` (kernel scale), ``lam`` (unset: chosen per client on :data:`LAM_GRID`), ``weighting``
    (FedAvg's), ``kernel`` (``distance``: exp(-d / sigma), the paper's; ``squared``: exp(-d^2 / (D sigma)), its authors' code)."""

    k: int = 10
    sigma: float = 1.0
    lam: float | None = None
    weighting: Literal["samples", "uniform"] = "samples"
    """As FedAvg's: ``samples`` (m_i / m) or ``uniform`` (1/|S|)."""
    kernel: Kernel = "distance"
    """The neighbours' weights: ``distance``, exp(-d / sigma) (the paper's p_kNN); ``squared``, exp(-d^2 / (D sigma)) over
    the representation's dimension D (the authors' code)."""

    def validate(self, section: str) -> None:
        require(self.k >= 1, f"{section}.k", f"must be >= 1, got {self.k}")
        require(math.isfinite(self.sigma) and self.sigma >= MIN_SIGMA, f"{section}.sigma",
                f"must be a finite number >= {MIN_SIGMA:g} (smaller, d / sigma overflows float64 and p_kNN is NaN; a sigma this small "
                f"already weighs the nearest neighbour alone), got {self.sigma}")
        if self.lam is not None:
            require(math.isfinite(self.lam) and 0 <= self.lam <= 1, f"{section}.lam", f"must be a number in [0, 1] (or unset), got {self.lam}")


def knn_probs(query: torch.Tensor, store_x: torch.Tensor, store_y: torch.Tensor, classes: int, k: int, sigma: float,
              exclude: torch.Tensor | None = None, kernel: Kernel = "distance") -> torch.Tensor:
    """p_kNN(. | x) ``[b, classes]`` in float64 for each query representation ``[b, d]`` over the datastore (``store_x``
    ``[n, d]``, ``store_y`` ``[n]``): the k nearest entries (ties to the lower index), weighted exp(-d / sigma)
    (``kernel = "distance"``) or exp(-d^2 / (D sigma)), D the representation's size (``"squared"``).

    ``exclude`` ``[b]``: per query, the datastore index left out (leave-one-out on the datastore's own rows); the
    neighbours are then min(k, n - 1). ``n`` must leave at least one neighbour."""
    d = torch.cdist(query.double(), store_x.double(), compute_mode="donot_use_mm_for_euclid_dist")
    if exclude is not None:
        d[torch.arange(len(d), device=d.device), exclude] = math.inf
    near = min(k, store_x.shape[0] - (exclude is not None))
    dist, idx = torch.sort(d, dim=1, stable=True)
    dist, idx = dist[:, :near], idx[:, :near]
    energy = dist / sigma if kernel == "distance" else dist.square() / (store_x.shape[1] * sigma)
    w = torch.exp(-(energy - energy[:, :1]))  # the nearest weighs 1: same p_kNN, no underflow
    onehot = nn.functional.one_hot(store_y[idx], classes).to(w.dtype)  # [b, near, C]: a sum, not an atomic scatter
    p = (w.unsqueeze(2) * onehot).sum(1)
    return p / p.sum(1, keepdim=True)


def interpolate(p_knn: torch.Tensor, logits: torch.Tensor, lam: torch.Tensor | float) -> torch.Tensor:
    """log(lam * p_kNN + (1 - lam) * softmax(logits)) in ``logits``' dtype; lam = 0 gives log_softmax(logits) exactly."""
    lam = torch.as_tensor(lam, dtype=logits.dtype, device=logits.device)
    glob = torch.log_softmax(logits, 1)
    knn = torch.log(p_knn).to(logits.dtype)
    out = torch.logaddexp(torch.log(lam) + knn, torch.log1p(-lam) + glob)
    return torch.where(torch.isneginf(out), math.log(torch.finfo(logits.dtype).tiny), out)


class KNNPerModel(nn.Module):
    """A client's own model: the global model (``model``) with the client's datastore and lam as buffers; its forward
    is the log of kNN-Per's interpolated p(y|x). A stateless template: local accuracy runs it on the client's entries."""

    store_x: torch.Tensor
    """The datastore's representations ``[n, d]``."""
    store_y: torch.Tensor
    """Their labels ``[n]``."""
    lam: torch.Tensor
    """The client's interpolation weight (0-d)."""

    def __init__(self, model: nn.Module, head: str, k: int, sigma: float, kernel: Kernel = "distance") -> None:
        super().__init__()
        self.model = copy.deepcopy(model)
        self.head = head
        self.classes = head_size(model, head).classes
        self.k = k
        self.sigma = sigma
        self.kernel: Kernel = kernel
        self.register_buffer("store_x", torch.zeros(0, 0))
        self.register_buffer("store_y", torch.zeros(0, dtype=torch.int64))
        self.register_buffer("lam", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rep, logits = forward_with_features(self.model, x, head=self.head)
        if self.store_y.numel() == 0:  # no datastore: the global model's prediction
            return torch.log_softmax(logits, 1)
        p_knn = knn_probs(rep.reshape(len(rep), -1), self.store_x, self.store_y, self.classes, self.k, self.sigma, kernel=self.kernel)
        return interpolate(p_knn, logits, self.lam)


def choose_lam(store_x: torch.Tensor, store_y: torch.Tensor, logits: torch.Tensor, classes: int, k: int, sigma: float,
               batch_size: int, grid: tuple[float, ...] = LAM_GRID, kernel: Kernel = "distance") -> float:
    """The lam of ``grid`` whose interpolation is most accurate on the datastore's own rows, each with its kNN over the
    others (leave-one-out); ties to the smallest. A datastore of fewer than 2 rows: 0."""
    n = len(store_y)
    if n < 2:
        return 0.0
    correct = torch.zeros(len(grid), dtype=torch.int64)
    for i in range(0, n, batch_size):
        rows = torch.arange(i, min(i + batch_size, n), device=store_x.device)
        p = knn_probs(store_x[rows], store_x, store_y, classes, k, sigma, exclude=rows, kernel=kernel)
        for g, lam in enumerate(grid):
            correct[g] += int((interpolate(p, logits[rows], lam).argmax(1) == store_y[rows]).sum())
    return grid[int(torch.argmax(correct))]  # argmax: the first of the best, the smallest lam


@dataclass(frozen=True)
class KNNPerClient(Stateless):
    """kNN-Per's client half: FedAvg's training (uploaded); its own model is the sent global model with a datastore of
    its rows' representations under it and its lam (:class:`KNNPerModel`), made anew each round and kept nowhere."""

    template: KNNPerModel
    lam: float | None = None
    eval_batch_size: int = 1024

    def objectives(self, spec: LocalSpec) -> tuple[LocalSpec, ...]:
        return ()  # the run's own objective only

    def personal_template(self) -> nn.Module:
        """:class:`KNNPerModel` (:class:`~chillfl.aggregation.base.OwnArchitecture`)."""
        return self.template

    def train(self, local: Local) -> LocalProgram:
        trained = yield Train(local.start, local.context)  # FedAvg's very training: the run's objective, the round's seed
        t = self.template
        store_x, logits = head_inputs(t.model, t.head, local.start, local.x, self.eval_batch_size)
        store_y = local.y.to(store_x.device)
        lam = self.lam if self.lam is not None else choose_lam(store_x, store_y, logits, t.classes, t.k, t.sigma, self.eval_batch_size, kernel=t.kernel)
        own = {f"{MODEL}{k}": v for k, v in local.start.items()}
        own.update(store_x=store_x, store_y=store_y, lam=torch.tensor(lam, dtype=logits.dtype, device=store_x.device))
        return Personal(trained.params, trained.num_steps, trained.mean_loss, own)


class KNNPer(FedAvg):
    """FedAvg's server rule; the clients measure kNN-Per's interpolation with their datastore (:class:`KNNPerClient`)."""

    def __init__(self, model: nn.Module, head: str, options: KNNPerOptions = KNNPerOptions(), eval_batch_size: int = 1024) -> None:
        super().__init__(options.weighting)
        self.options = options
        self.half = KNNPerClient(KNNPerModel(model, head, options.k, options.sigma, options.kernel), options.lam, eval_batch_size)

    def client_half(self) -> ClientHalf:
        return self.half


CAPABILITIES = Capabilities(
    private_steps="each client also reads its rows for its kNN datastore and its lam (for local_acc, never uploaded), which the accountant does not count",
    takes_weights=True,
    not_a_base="kNN-Per's clients run their own local training and build a datastore, which PA3Fed's client half does not compose with",
    cost=Cost(epochs=FORWARD),  # the datastore: a forward pass over the client's rows a round
)


def build(options: KNNPerOptions, ctx: BuildContext) -> Built:
    """kNN-Per on the run's model; a model without a classifier head is a ConfigError on ``model.name``."""
    return KNNPer(ctx.model, require_head(ctx, "kNN-Per"), options), []


def _check_model(options: KNNPerOptions, model: nn.Module) -> None:
    """kNN-Per's kNN runs on the representation before the classifier head: a model without one is refused, by config and
    for an instance passed from Python alike (:attr:`~chillfl.aggregation.registry.AlgorithmSpec.check_model`)."""
    require_model_head(model, "kNN-Per")


SPEC = register_algorithm(
    "knnper",
    AlgorithmSpec(
        KNNPerOptions,
        build,
        "FedAvg, local accuracy of the global model interpolated with a kNN over each client's own representations (Marfoq et al. 2022)",
        capabilities=CAPABILITIES,
        makes=(KNNPer,),
        check_model=_check_model,
    ),
)

