"""FedGH (Yi, Wang, Liu, Shi & Yu, ACM MM 2023): a global prediction header trained on the server from class means.

Each client k keeps its own feature extractor F_k (the body: everything before the model's last
``nn.Linear``) and shares one header H(theta) (that last layer). Round t, for a sampled client k::

    start:   omega_k = F_k(phi_k) o H(theta^{t-1})                 (its own body, the global header)
    train:   omega_k <- omega_k - eta grad CE(omega_k(x), y)       (the whole model, the run's local training)
    upload:  Rbar_k^s = 1/|D_k^s| sum_{(x, y) in D_k^s} F_k(x; phi_k)   for each class s it holds (a LAR)

and the server trains the header on the round's (LAR, class) pairs::

    theta <- theta - eta_theta grad_theta CE(H(Rbar_k^s; theta), s)      for each k, each s of k

(the authors' code: one SGD step per pair, client by client, one pass; HtFLlib: shuffled mini-batches for
``server_epochs``). Only the header goes down and only the class means go up: bodies never leave the
clients, so architectures may differ (``model.groups``) as long as the representation width does.

Evaluation: ``local_acc`` is the client's model after its training (its body, the head it trained from the
header); ``global_acc`` the mean over the clients trained so far of body + the *current* global header on
the global test set (the family's mean over the clients' own models, each as its next round would start).

Choices (the paper is terse; the authors' code and HtFLlib fill the gaps):

* Server step order: ``server_batch_size = 1``, ``server_epochs = 1``, ``shuffle = false`` is the authors'
  code (one step per pair in client order, classes ascending here, first appearance there); HtFLlib's
  reading is ``server_batch_size = client batch``, ``shuffle = true``, ``server_epochs = 100``. Pairs are
  unweighted (a client's class mean is one sample, whatever its count), as in both.
* ``server_lr = 0.01``: both codes' default (the authors' ``--lr``, HtFLlib's ``-slr``). Plain SGD, no
  momentum, weight decay or gradient clipping (the authors' code clips at 50 and, as released, steps the
  clients' optimizer instead of the header's: read as a slip, not followed).
* The header starts as the default architecture's initial last layer (HtFLlib copies client 0's head;
  the authors' code initialises a separate layer and lets round 1 train from each model's own head);
  every client, round 1 included, starts from it.
* The class means are computed once after training, in eval mode, over the client's training split
  (the family's rule; the authors' code averages per-batch means, in eval mode too: the test it runs
  just before leaves the model there; PFLlib and HtFLlib take exact means in eval mode).
* Local training is the run's (``[client]`` optimiser, CE at the run's temperature); the authors' code
  uses SGD with momentum 0.9 and weight decay 1e-3.
* A frozen last layer (``requires_grad = False``: :attr:`~chillfl.training.local.LocalSpec.frozen`) is refused
  on ``model.name``: the server trains the header, which the clients' training may not move.
* PFLlib's FedGH (``servergh.py``) is HtFLlib's but for one pass (no ``server_epochs``) and
  ``-slr`` 1.0 by default.
* The server keeps no global prototypes (``known_classes`` is 0, ``global_proto_acc`` empty); a client's
  ``local_proto_acc`` uses its own class means.

Checked (2026-12) against: LipingYi/FedGH ``FedGH_Codes/experiments/FLHetero/FedGH.py`` (the
client loop, the per-class means, the server loop: ``criteria(net_FC(rep), cls)``, ``backward``,
``clip_grad_norm_(net_FC, 50)``, then ``optimizer.step()`` of the clients' ``net``, with no
``zero_grad`` of the header), TsingZ0/HtFLlib ``system/flcore/servers/servergh.py`` (client 0's
head, ``DataLoader(batch_size, shuffle=True)``, ``server_epochs`` passes of SGD at ``-slr``) and
``system/main.py`` (``-slr`` 0.01, ``-se`` 100, ``-lbs`` 10), TsingZ0/PFLlib ``servergh.py`` /
``clientgh.py``. No difference in the maths; the authors' means are in eval mode, not train mode
as this page said.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

import torch

from chillfl.capabilities import Capabilities, Cost
from chillfl.errors import ConfigError
from chillfl.options import require
from chillfl.prototypes.maths import PrototypeLoss
from chillfl.prototypes.methods.fedproto import ON_FLOWER, RAW_MEANS
from chillfl.prototypes.spec import ClassRows, Head, Knowledge, Params, PrototypeHooks, PrototypeSpec
from chillfl.seeds import derive_seed
from chillfl.training.local import BaseLoss

WEIGHT, BIAS = "weight", "bias"
"""The header's entries in :attr:`~chillfl.prototypes.spec.Knowledge.params` (and in checkpoints)."""


@dataclass(frozen=True)
class FedGHOptions:
    """``server_lr``: eta_theta (0.01). ``server_epochs``: passes over the round's pairs (1). ``server_batch_size``:
    pairs per step (1: one step per class mean, the authors' code). ``shuffle``: draw the order each pass (seeded
    by the run and the round) instead of client order, classes ascending."""

    server_lr: float = 0.01
    server_epochs: int = 1
    server_batch_size: int = 1
    shuffle: bool = False

    def validate(self, section: str) -> None:
        require(self.server_lr > 0, f"{section}.server_lr", f"must be > 0, got {self.server_lr}")
        require(self.server_epochs >= 1, f"{section}.server_epochs", f"must be >= 1, got {self.server_epochs}")
        require(self.server_batch_size >= 1, f"{section}.server_batch_size", f"must be >= 1, got {self.server_batch_size}")


def header_pairs(releases: Sequence[ClassRows]) -> tuple[torch.Tensor, torch.Tensor]:
    """The round's training set for the header: every (class mean, class) a client holds, client by client, classes ascending."""
    rows, labels = [], []
    for r in releases:
        held = torch.nonzero(r.counts > 0).flatten()
        rows.append(r.means[held])
        labels.append(held)
    return torch.cat(rows), torch.cat(labels)


def header_step(weight: torch.Tensor, bias: torch.Tensor, x: torch.Tensor, y: torch.Tensor, lr: float) -> tuple[torch.Tensor, torch.Tensor]:
    """One SGD step of the mean cross-entropy of the linear header on the batch ``(x, y)``.

    With p = softmax(x W^T + b) and G = (p - onehot(y)) / B: grad_W = G^T x, grad_b = sum of G's rows.
    """
    g = (torch.softmax(x @ weight.T + bias, dim=1) - torch.nn.functional.one_hot(y, weight.shape[0]).to(x.dtype)) / len(y)
    return weight - lr * (g.T @ x), bias - lr * g.sum(0)


class FedGH(PrototypeHooks[FedGHOptions]):
    """Class means up, the header trained on them down; the clients' loss is plain CE with the header put in."""

    def loss(self, head: Head) -> BaseLoss:
        """Plain CE at the run's T (the header is in the model, not in the loss); called once per architecture
        when the run is built, so a last layer without a bias, or a frozen one, is refused there."""
        if head.bias is None:
            raise ConfigError("model.name", f"FedGH's header is a linear layer with a bias; the model's {head.weight.rsplit('.', 1)[0]!r} has none")
        if head.frozen:  # the server would train it all the same (and every client start from it)
            raise ConfigError("model.name", f"FedGH's server trains the header; the model's {head.weight.rsplit('.', 1)[0]!r} is frozen (requires_grad = False)")
        return PrototypeLoss(0.0)

    def initial_params(self, head: Params) -> dict[str, torch.Tensor]:
        return {name: t.detach().clone() for name, t in head.items()}

    def start(self, params: Params, knowledge: Knowledge, head: Head) -> Params:
        assert head.bias is not None  # loss() refused a head without one
        out = dict(params)
        out[head.weight] = knowledge.params[WEIGHT].to(params[head.weight])
        out[head.bias] = knowledge.params[BIAS].to(params[head.bias])
        return out

    def update(self, previous: Knowledge, releases: Sequence[ClassRows], round: int) -> Knowledge:
        o = self.options
        weight, bias = previous.params[WEIGHT], previous.params[BIAS]
        x, y = header_pairs(releases)
        x = x.to(weight)
        y = y.to(weight.device)
        gen = torch.Generator().manual_seed(derive_seed(self.seed, "fedgh-header", round)) if o.shuffle else None
        for _ in range(o.server_epochs):
            order = torch.randperm(len(y), generator=gen).to(weight.device) if gen is not None else torch.arange(len(y), device=weight.device)
            for i in range(0, len(y), o.server_batch_size):
                batch = order[i : i + o.server_batch_size]
                weight, bias = header_step(weight, bias, x[batch], y[batch], o.server_lr)
        return Knowledge(torch.zeros_like(previous.protos), torch.zeros_like(previous.mask), {}, {WEIGHT: weight, BIAS: bias})


CAPABILITIES = Capabilities(
    on_flower=ON_FLOWER,
    personal_model=True,
    private_steps=RAW_MEANS,
    linear_head="FedGH's server trains the header as W z + b on the class means, with that map's gradient written out",
)
"""Its limits (its cost follows its options: :func:`capabilities`)."""
HEADER_STEP = 0.07
"""One SGD step of the header on the server (:func:`header_step`: a few calls on a batch of class means), in plain steps'
overheads. Measured 2026-12-02 on the 2-vCPU AVX2 machine (``benchmarks/estimates.py``, FLex&Chill CNN on digits, 10 clients a
round): ``server_epochs = 20`` took 0.27 CPU seconds more than 1 over 5 rounds, about 55 us a step."""


def capabilities(options: FedGHOptions) -> Capabilities:
    """Its limits, and its cost: ``server_epochs`` passes over the round's (class mean, class) pairs in steps of
    ``server_batch_size``, :data:`HEADER_STEP` each, a pair for each class a sampled client holds (priced at every class)."""
    return replace(CAPABILITIES, cost=Cost(class_server_steps=options.server_epochs / options.server_batch_size * HEADER_STEP))


SPEC = PrototypeSpec(
    "fedgh",
    FedGHOptions,
    FedGH,
    summary="a global header trained on the server from the class means (server_lr = 0.01, one step per mean); bodies stay on the clients",
    capabilities=CAPABILITIES,
    capabilities_of=capabilities,
    global_prototypes=False,
)
