"""FedTGP (Zhang, Liu, Hua & Cao, AAAI 2024): trainable global prototypes, trained on the server by adaptive-margin contrast.

Zhang et al., "FedTGP: Trainable Global Prototypes with Adaptive-Margin-Enhanced Contrastive Learning
for Data and Model Heterogeneity in Federated Learning" (arXiv 2401.03230). Clients upload class
means as in FedProto; the server does not average them but *trains* the global prototypes. Round t::

    upload:  P_i^c = mean of f_i(x) over client i's samples of class c             (the family's release)
    centres: Q^c   = 1/|N^c| sum_{i in N^c} P_i^c       N^c: the round's clients holding c (uniform)
    margin:  delta = min(max_c min_{c' != c} ||Q^c - Q^c'||, tau)                  (tau: a threshold)
    TGP:     Phat^c = W2 relu(W1 e_c + b1) + b2       e_c: class c's learnable embedding (the generator)
    server:  for server_epochs passes over the round's pairs (P_i^c, c), in batches:
               L = mean over the batch of -log softmax_c(-(phi(P_i^c, Phat^k) + delta [k = c]))_k
               theta <- theta - server_lr grad_theta L                            (theta: e, W1, b1, W2, b2)
    client:  L_i = CE(F_i(x) / T, y) + lam * MSE(f_i(x), Phat^y)                  (FedProto's term)

phi is the Euclidean distance. The margin makes a client prototype's own class's TGP count as
delta farther than it is, so the generator must bring it delta closer than any other class's
to win: the TGP spread apart by up to the widest gap the clients' centres already keep, at most
tau. The generator never leaves the server (its parameters are :attr:`~chillfl.prototypes.spec.Knowledge.server`:
checkpointed, never sent, counted nowhere); what goes down is the C generated prototypes.

Choices (the paper is terse; the authors' code, ``TsingZ0/FedTGP`` and ``TsingZ0/HtFLlib``
``servertgp.py`` / ``clienttgp.py``, fills the gaps; every one an option where there are two readings):

* Defaults: the authors' run script (``run_me.sh``: ``-lam 10 -se 100 -mart 100``, ``-lr 0.01``,
  ``-lbs 10``): ``lam = 10``, ``tau = 100``, ``server_epochs = 100``; ``server_lr = 0.01`` and
  ``server_batch_size = 10`` are the code's, which reuses the clients' lr and batch size for the server.
  The paper's text could not be read here (session 74: its stored copies are the abstract and summaries; the
  repository's ``[AAAI] FedTGP.pdf`` is the talk's slides, which call tau "a margin threshold" and give no values).
  A third-party port (RigFL) says the paper has lambda = 0.1, S = 100 and tau = 100, unverified here: ``lam = 0.1``
  is that reading (docs/methods.md).
* Each round's margin delta goes to metrics.jsonl as ``agg_margin`` (:meth:`FedTGP.round_metrics`).
* The generator: an embedding per class, ``Linear -> ReLU -> Linear``, the embedding and hidden widths
  the representation's d (the code's ``Trainable_prototypes`` with ``server_hidden_dim = feature_dim``);
  ``embed_dim`` / ``hidden_dim`` set others (0: d). Initialised as PyTorch initialises ``nn.Embedding``
  (N(0, 1)) and ``nn.Linear`` (U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias), from a generator
  seeded by the run's seed alone: no global RNG is read or moved. Trained by plain SGD (the code's
  ``torch.optim.SGD``, made afresh each round: no state besides the parameters).
* The pairs: one per (client, class it holds), unweighted by counts, client by client, classes
  ascending; each epoch in a fresh order drawn from (seed, round, epoch) (the code's shuffling
  ``DataLoader``; ``shuffle = false``: that order every epoch), the last batch kept when short.
* The margin (``margin = "nearest"``): the largest, over the round's classes, of the distance from a
  class's centre to the nearest other class's centre, capped at tau (the code's class-wise minimum
  distances ``gap`` and their maximum ``max_gap``; the paper's "maximum prototype margin"). A round
  whose clients hold fewer than two classes has no such distance: the margin is tau (the code's
  1e9 placeholder, capped). ``margin = "farthest"``: the largest distance between any two centres,
  capped at tau, a looser reading of "max distance between class centres". ``tau = 0``: no margin.
* Distances are ``||a - b||`` computed on the differences (the code expands ``|a|^2 - 2ab + |b|^2``
  then takes the square root: the same value up to rounding, which that form loses near zero).
* What goes down (``send = "all"``): every class's TGP once the generator has trained, as the code
  sends its C outputs; ``"seen"``: only the classes some client has ever uploaded (the rest masked,
  as FedProto's unknown classes). Round 1 has no prototypes: plain CE, as in the code.
* The client's term (``distance = "mse"``): ``nn.MSELoss`` between f(x) and Phat^y, FedProto's term,
  as the authors' client code does ("we use MSE here following FedProto's official implementation");
  ``"euclidean"`` is the paper's phi: 1/n sum_i ||f(x_i) - Phat^{y_i}||. A sample whose class has no
  prototype contributes zero either way (it still counts in n).
* The class means are computed once after training, in eval mode, over the client's training split,
  as the code's ``collect_protos`` does (the family's rule). Local training is the run's
  ``[client]`` optimiser (the code's: SGD at ``-lr``).

Checked (2026-12) against TsingZ0/HtFLlib ``system/flcore/servers/servertgp.py`` (``receive_protos``:
``proto_cluster`` a plain mean per class, ``gap`` / ``max_gap``; ``update_Gen``: ``DataLoader(uploaded_protos,
batch_size, shuffle=True)``, ``dist + one_hot * margin``, ``CEloss(-dist, y)``; ``Trainable_prototypes``),
``clients/clienttgp.py`` (``loss_mse(proto_new, rep) * lamda``, ``collect_protos`` in eval mode) and
TsingZ0/FedTGP ``system/run_me.sh`` and ``system/main.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal, Mapping, Sequence

import torch
import torch.nn.functional as F

from chillfl.capabilities import Capabilities, Cost
from chillfl.engine.record import Json
from chillfl.options import Scale, require
from chillfl.prototypes.maths import PrototypeLoss, aggregate_means
from chillfl.prototypes.methods.fedproto import ON_FLOWER, RAW_MEANS
from chillfl.prototypes.spec import ClassRows, Head, Knowledge, PrototypeHooks, PrototypeSpec
from chillfl.seeds import derive_seed
from chillfl.training.local import BaseLoss
from chillfl.training.objective import Context, read_tensor, temperature_cross_entropy

Margin = Literal["nearest", "farthest"]
"""Which gap between the round's class centres sets the margin: the widest nearest-neighbour gap (the code) or the widest of all."""
Send = Literal["all", "seen"]
"""Which classes' prototypes go down: every class's (the code) or those some client has uploaded."""
Distance = Literal["mse", "euclidean"]
"""The client's prototype term: FedProto's MSE (the code) or the paper's Euclidean distance."""

EMBEDDING, HIDDEN_W, HIDDEN_B, OUT_W, OUT_B = "embedding", "hidden.weight", "hidden.bias", "out.weight", "out.bias"
"""The generator's tensors in :attr:`~chillfl.prototypes.spec.Knowledge.server` (and in checkpoints)."""

GeneratorState = Mapping[str, torch.Tensor]
"""The generator's tensors by name (:data:`EMBEDDING`, ...)."""


@dataclass(frozen=True)
class FedTGPOptions:
    """FedTGP's options (defaults: the authors' run script and code).

    ``lam``: weight of the clients' prototype term (10). ``tau``: the margin's threshold (100; 0: no margin).
    ``server_epochs``: passes over the round's pairs (100). ``server_lr``: the generator's SGD step (0.01).
    ``server_batch_size``: pairs per step (10). ``embed_dim`` / ``hidden_dim``: the generator's widths (0: the
    representation's). ``margin``: ``nearest`` or ``farthest`` gap between class centres. ``send``: ``all`` classes'
    prototypes or those ``seen``. ``distance``: the clients' term, ``mse`` or ``euclidean``. ``shuffle``: a fresh
    order of the pairs each epoch (seeded by the run, the round and the epoch) instead of client order.
    """

    lam: Scale = 10.0
    tau: float = 100.0
    server_epochs: int = 100
    server_lr: float = 0.01
    server_batch_size: int = 10
    embed_dim: int = 0
    hidden_dim: int = 0
    margin: Margin = "nearest"
    send: Send = "all"
    distance: Distance = "mse"
    shuffle: bool = True

    def validate(self, section: str) -> None:
        for name in ("lam", "tau"):
            value = vars(self)[name]
            require(value >= 0 and math.isfinite(value), f"{section}.{name}", f"must be finite and >= 0, got {value}")
        require(self.server_lr > 0, f"{section}.server_lr", f"must be > 0, got {self.server_lr}")
        for name in ("server_epochs", "server_batch_size"):
            value = vars(self)[name]
            require(value >= 1, f"{section}.{name}", f"must be >= 1, got {value}")
        for name in ("embed_dim", "hidden_dim"):
            value = vars(self)[name]
            require(value >= 0, f"{section}.{name}", f"must be >= 0 (0: the representation's width), got {value}")


# ---------------------------------------------------------------- the maths


def pairwise_distances(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``||a_i - b_j||`` ``[n, m]``, from the differences (exact at zero, unlike the expanded form)."""
    return torch.linalg.vector_norm(a.unsqueeze(1) - b.unsqueeze(0), dim=-1)


def adaptive_margin(releases: Sequence[ClassRows], tau: float, margin: Margin = "nearest") -> float:
    """delta = min(gap, tau) from the round's class centres Q^c (the plain mean over the clients holding c).

    ``nearest``: gap = max over held c of min over held c' != c of ||Q^c - Q^c'||; ``farthest``: the max over
    pairs. Fewer than two classes held: no gap, delta = tau.
    """
    centres, held = aggregate_means([r.means for r in releases], [r.counts for r in releases], "uniform")
    q = centres[held]
    if len(q) < 2:
        return float(tau)
    dist = pairwise_distances(q, q)
    off = ~torch.eye(len(q), dtype=torch.bool, device=q.device)
    if margin == "nearest":
        gap = dist.masked_fill(~off, math.inf).min(dim=1).values.max()
    else:
        gap = dist[off].max()
    return min(float(gap), float(tau))


def contrastive_loss(protos: torch.Tensor, y: torch.Tensor, generated: torch.Tensor, delta: float) -> torch.Tensor:
    """The adaptive-margin contrastive loss: mean over the batch of CE(-(phi(P, Phat) + delta onehot(y)), y).

    ``protos`` ``[B, d]`` client prototypes of classes ``y``; ``generated`` ``[C, d]`` the TGP.
    """
    dist = pairwise_distances(protos, generated)  # [B, C]
    return F.cross_entropy(-(dist + delta * F.one_hot(y, generated.shape[0]).to(dist.dtype)), y)


def generate(g: GeneratorState) -> torch.Tensor:
    """The C trainable global prototypes ``[C, d]``: W2 relu(W1 e_c + b1) + b2 for every class's embedding e_c."""
    hidden = torch.relu(g[EMBEDDING] @ g[HIDDEN_W].T + g[HIDDEN_B])
    return hidden @ g[OUT_W].T + g[OUT_B]


def initial_generator(num_classes: int, dim: int, embed_dim: int, hidden_dim: int, seed: int) -> dict[str, torch.Tensor]:
    """The generator as PyTorch initialises ``nn.Embedding`` and ``nn.Linear``, drawn from its own seeded stream (CPU, float32)."""
    gen = torch.Generator().manual_seed(seed)

    def uniform(shape: tuple[int, ...], fan_in: int) -> torch.Tensor:
        bound = 1.0 / math.sqrt(fan_in)
        return (torch.rand(shape, generator=gen) * 2 - 1) * bound

    return {
        EMBEDDING: torch.randn((num_classes, embed_dim), generator=gen),
        HIDDEN_W: uniform((hidden_dim, embed_dim), embed_dim),
        HIDDEN_B: uniform((hidden_dim,), embed_dim),
        OUT_W: uniform((dim, hidden_dim), hidden_dim),
        OUT_B: uniform((dim,), hidden_dim),
    }


def server_step(g: GeneratorState, protos: torch.Tensor, y: torch.Tensor, delta: float, lr: float) -> dict[str, torch.Tensor]:
    """One SGD step of the generator on the contrastive loss of the batch ``(protos, y)``."""
    names = list(g)
    with torch.enable_grad():
        leaves = [g[n].detach().requires_grad_(True) for n in names]
        loss = contrastive_loss(protos, y, generate(dict(zip(names, leaves))), delta)
        grads = torch.autograd.grad(loss, leaves)
    return {n: (p - lr * d).detach() for n, p, d in zip(names, leaves, grads)}


def server_pairs(releases: Sequence[ClassRows]) -> tuple[torch.Tensor, torch.Tensor]:
    """The round's pairs (P_i^c, c): one per client and class it holds, client by client, classes ascending."""
    rows, labels = [], []
    for r in releases:
        held = torch.nonzero(r.counts > 0).flatten()
        rows.append(r.means[held])
        labels.append(held.to(r.means.device))
    return torch.cat(rows), torch.cat(labels)


# ---------------------------------------------------------------- the clients' term


def euclidean_distance(features: torch.Tensor, y: torch.Tensor, protos: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """1/n sum_i ||f(x_i) - P_{y_i}||, zero for samples whose class has no prototype; no data-dependent shapes (``vmap``).

    A masked sample's difference is replaced by ones before the norm, so its (discarded) norm is never the
    non-differentiable ``||0||``.
    """
    known = mask[y].unsqueeze(-1)  # [n, 1]
    diff = torch.where(known, features - protos.to(features.dtype)[y], torch.ones_like(features))
    norms = torch.linalg.vector_norm(diff, dim=-1)
    return (norms * known.squeeze(-1).to(features.dtype)).sum() / features.shape[0]


@dataclass(frozen=True)
class EuclideanPrototypeLoss(PrototypeLoss):
    """CE(F(x) / T, y) + ``distance_weight`` * 1/n sum ||f(x) - P_y||: the paper's phi in the clients' term."""

    def __call__(
        self,
        logits: torch.Tensor,
        targets: torch.Tensor,
        temperature: Any,
        *,
        features: torch.Tensor | None = None,
        params: Mapping[str, torch.Tensor] | None = None,
        context: Context | None = None,
    ) -> torch.Tensor:
        if features is None or context is None:
            raise TypeError("EuclideanPrototypeLoss needs the representation and the context (StepLoss passes them)")
        value = temperature_cross_entropy(logits, targets, temperature)
        if self.distance_weight:
            protos, mask = read_tensor(context, "protos"), read_tensor(context, "proto_mask")
            value = value + self.distance_weight * euclidean_distance(features, targets, protos, mask)
        return value


# ---------------------------------------------------------------- the hooks


class FedTGP(PrototypeHooks[FedTGPOptions]):
    """Class means up; a generator trained on them with the adaptive-margin contrastive loss; its C prototypes down."""

    def loss(self, head: Head) -> BaseLoss:
        o = self.options
        return EuclideanPrototypeLoss(o.lam) if o.distance == "euclidean" else PrototypeLoss(o.lam)

    def generator(self, dim: int) -> dict[str, torch.Tensor]:
        """The generator before round 1, for prototypes ``dim`` wide (seeded by the run's seed alone)."""
        o = self.options
        return initial_generator(self.num_classes, dim, o.embed_dim or dim, o.hidden_dim or dim, derive_seed(self.seed, "fedtgp-generator"))

    def update(self, previous: Knowledge, releases: Sequence[ClassRows], round: int) -> Knowledge:
        o = self.options
        device, dtype = previous.protos.device, previous.protos.dtype
        g = dict(previous.server) or {k: v.to(device=device, dtype=dtype) for k, v in self.generator(int(previous.protos.shape[1])).items()}
        if not any(bool((r.counts > 0).any()) for r in releases):  # nobody held a class: nothing to train on, nothing new known
            return Knowledge(previous.protos, previous.mask, {}, {}, g)
        x, y = server_pairs(releases)
        x, y = x.to(device=device, dtype=dtype), y.to(device)
        seen = previous.mask | torch.stack([r.counts > 0 for r in releases]).any(0).to(device)
        delta = adaptive_margin(releases, o.tau, o.margin)
        for epoch in range(o.server_epochs):
            if o.shuffle:
                gen = torch.Generator().manual_seed(derive_seed(self.seed, "fedtgp-pairs", round, epoch))
                order = torch.randperm(len(y), generator=gen).to(device)
            else:
                order = torch.arange(len(y), device=device)
            for i in range(0, len(y), o.server_batch_size):
                batch = order[i : i + o.server_batch_size]
                g = server_step(g, x[batch], y[batch], delta, o.server_lr)
        with torch.no_grad():
            protos = generate(g)
        mask = torch.ones_like(seen) if o.send == "all" else seen
        return Knowledge(protos, mask, {}, {}, g)

    def round_metrics(self, knowledge: Knowledge, releases: Sequence[ClassRows], round: int) -> Mapping[str, Json]:
        """``margin``: the round's adaptive margin delta (``agg_margin`` in metrics.jsonl), recomputed from the uploads as
        :meth:`update` computed it; none in a round where no client held a class (no server step)."""
        if not any(bool((r.counts > 0).any()) for r in releases):
            return {}
        return {"margin": adaptive_margin(releases, self.options.tau, self.options.margin)}


SPEC = PrototypeSpec(
    "fedtgp",
    FedTGPOptions,
    FedTGP,
    summary="class means up; global prototypes trained on the server by adaptive-margin contrast (lam = 10, tau = 100, 100 server epochs)",
    capabilities=Capabilities(
        on_flower=ON_FLOWER,
        personal_model=True,
        private_steps=RAW_MEANS,
        cost=Cost(server_steps=100.0),  # at the default server_epochs, one batch each at least: a lower bound
    ),
)
