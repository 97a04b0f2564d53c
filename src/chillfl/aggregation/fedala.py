"""FedALA (Zhang, Hua, Wang, Song, Xue, Ma & Guan, AAAI 2023): adaptive local aggregation.

Client i keeps its local model theta_i (the one it trained last round) and,
for the higher layers (the last ``layer_idx`` parameter tensors), element-wise
weights W_i in [0, 1]. Sent the global model theta, it first initialises its
model by ALA (Eq. 4-6)::

    lower layers:   theta_hat = theta
    higher layers:  theta_hat = theta_i + (theta - theta_i) * W_i
    W_i <- clip(W_i - eta * grad_theta_hat L(theta_hat; batch) * (theta - theta_i), 0, 1)   per batch

over the batches of a random ``rand_percent`` % of its training data
(a contiguous slice, unshuffled, as the authors' ``ALA.py``, of the client's
rows in a fixed shuffled order: see Choices), re-blending theta_hat
after every step; then it trains theta_hat with the run's local training,
keeps it (its personal model, which local accuracy measures) with W_i, and
uploads it. The server is FedAvg (n_i / n).

The weight learning is a run of :class:`~chillfl.aggregation.base.Train`
requests of the one training path: each is one plain SGD step (lr = eta, no
momentum, no weight decay, the lower layers frozen) of the run's base loss on
one batch from theta_hat, so that theta_hat - theta_hat' = eta * grad, and
W_i moves by -(theta_hat - theta_hat') * (theta - theta_i).

Checked against
---------------
PFLlib (TsingZ0/PFLlib) ``system/utils/ALA.py`` (``adaptive_local_aggregation``),
``system/flcore/clients/clientala.py`` and ``system/flcore/servers/serverala.py``;
the authors' TsingZ0/FedALA ``system/flcore/clients/clientALA.py``,
``system/flcore/servers/serverALA.py`` and ``system/main.py`` (its ALA module
is the same ``utils/ALA.py``); FL-bench (KarhouTam/FL-bench)
``src/client/fedala.py``. They agree with the above: the lower layers copied
from theta, the blend, the clipped weight step with the gradient at theta_hat
and the re-blend after every batch, W_i kept across rounds, the stop rule
(``np.std``, population), FedAvg by n_i / n, the defaults.

Choices (against the authors' ``ALA.py`` / PFLlib ``clientala.py``)
-------------------------------------------------------------------
* ``layer_idx`` counts parameter tensors from the end (PFLlib's meaning,
  default 2: the classifier's weight and bias).
* ALA is skipped at a client's first participation (it has no local model
  yet: the reference skips it while theta_i equals theta); W_i starts at ones
  at its first ALA. That first ALA trains W_i until the last ``num_pre_loss``
  (10) epochs' losses have a standard deviation below ``threshold`` (0.1), the
  loss of an epoch being its last batch's; later ones run one epoch. The first
  ALA stops after ``max_init_epochs`` (100) epochs in any case: the reference
  has no bound.
* ALA runs when a client is sampled, from the model of its last training.
  The reference's server runs it on *every* client every round (its
  ``send_models`` loops over all clients), so an unsampled client's model is
  replaced by its theta_hat and its W_i learns on, and a client not yet
  sampled blends the initial model after the first round. Under full
  participation (the paper's join ratio 1) the two are the same.
* The random slice is drawn from a generator seeded by the client's round seed,
  from the client's rows in an order fixed for the run (a permutation seeded
  by the run's seed and the client): the reference's client data were
  shuffled once when the data set was split, so its contiguous slice is a
  random share of them; a client's rows here keep the data set's order,
  grouped by label for some (Caltech-256, Tiny ImageNet), where a contiguous
  slice would leave out whole labels.
  Its short last batch is kept (as the run's training keeps it);
  ``drop_last = true`` leaves it out, as the reference's loader
  (``drop_last=True``) does, except when it is the only batch (the reference
  then has none and fails). FL-bench samples a shuffled subset instead.
* Buffers (batch-norm statistics) of theta_hat are theta_i's, as the reference
  keeps its local model's buffers.
* The gradient is read off an SGD step, so it carries that step's float
  rounding (ulp(theta_hat) / eta at most); the run's temperature applies to the
  loss, its objective's extra terms do not (ALA uses the plain loss); the
  run's other training settings (augmentation, precision, per-sample
  privacy where set) apply to these steps as to any training on the data.
* Local accuracy measures theta_i after the round's training. The reference
  tests every client's theta_hat, right after ALA and before training (PFLlib's
  port tests both then and after training).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from typing import Generator, Sequence

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
from chillfl.errors import ConfigError
from chillfl.options import require
from chillfl.seeds import derive_seed, instance_seed
from chillfl.training.local import LocalOutcome, LocalSpec
from chillfl.training.schedule import SGD
from chillfl.aggregation.registry import AlgorithmSpec, BuildContext, instance_field, register_algorithm, run_value
from chillfl.capabilities import Capabilities, Cost


@dataclass(frozen=True)
class FedALAOptions:
    """Reference defaults: ``eta`` 1.0, ``rand_percent`` 80, ``layer_idx`` 2, ``threshold`` 0.1, ``num_pre_loss`` 10;
    ``drop_last``: the slice's short last batch left out of the weight learning (the reference's loader) or kept."""

    eta: float = 1.0
    rand_percent: int = 80
    layer_idx: int = 2
    threshold: float = 0.1
    num_pre_loss: int = 10
    max_init_epochs: int = 100
    drop_last: bool = False

    def validate(self, section: str) -> None:
        require(self.eta > 0, f"{section}.eta", f"must be > 0, got {self.eta}")
        require(0 < self.rand_percent <= 100, f"{section}.rand_percent", f"must be in (0, 100], got {self.rand_percent}")
        require(self.layer_idx >= 1, f"{section}.layer_idx", f"must be >= 1, got {self.layer_idx}")
        require(self.threshold >= 0, f"{section}.threshold", f"must be >= 0, got {self.threshold}")
        require(self.num_pre_loss >= 1, f"{section}.num_pre_loss", f"must be >= 1, got {self.num_pre_loss}")
        require(self.max_init_epochs >= 1, f"{section}.max_init_epochs", f"must be >= 1, got {self.max_init_epochs}")


MODEL, WEIGHT = "fedala.model.", "fedala.weight."
"""Where theta_i and W_i live in the client's state."""


def higher_keys(model: nn.Module, layer_idx: int) -> list[str]:
    """The last ``layer_idx`` parameter tensors' names (the layers ALA blends); refused if that leaves no lower layer."""
    names = [n for n, _ in model.named_parameters()]
    if layer_idx >= len(names):
        raise ValueError(f"{type(model).__name__} has {len(names)} parameter tensors; layer_idx = {layer_idx} leaves no lower layer")
    return names[-layer_idx:]


def blend(local: Params, global_: Params, weights: Params, higher: Sequence[str], param_keys: frozenset[str]) -> Params:
    """theta_hat: the global lower layers, theta_i + (theta - theta_i) * W on the higher ones, theta_i's buffers."""
    out = {k: (global_[k] if k in param_keys else local[k]) for k in local}
    for k in higher:
        out[k] = local[k] + (global_[k] - local[k]) * weights[k]
    return out


def weight_step(weights: Params, before: Params, after: Params, local: Params, global_: Params) -> Params:
    """W <- clip(W - (theta_hat - theta_hat') * (theta - theta_i), 0, 1), theta_hat - theta_hat' = eta * grad (one SGD step)."""
    return {k: (w - (before[k] - after[k]) * (global_[k] - local[k])).clamp(0.0, 1.0) for k, w in weights.items()}


def converged(losses: Sequence[float], num_pre_loss: int, threshold: float) -> bool:
    """The reference's stop: more than ``num_pre_loss`` losses, the last ``num_pre_loss`` with std < threshold (population std, numpy's)."""
    return len(losses) > num_pre_loss and statistics.pstdev(losses[-num_pre_loss:]) < threshold


def client_order(n: int, seed: int, client_id: int) -> torch.Tensor:
    """The client's n rows in the order ALA's slices are cut from: a permutation seeded by the run's seed and the client,
    the same every round (the reference's client data set, shuffled once when the data were split).

    Not the rows' own order: a client's rows keep the data set's, grouped by label for some (Caltech-256 and Tiny
    ImageNet, read class folder by class folder), where a contiguous slice of them would leave out whole labels.
    """
    return torch.randperm(n, generator=torch.Generator().manual_seed(derive_seed(seed, "fedala-order", client_id)))


def sample_batches(n: int, rand_percent: int, batch_size: int, generator: torch.Generator, drop_last: bool = False,
                   order: torch.Tensor | None = None) -> list[torch.Tensor]:
    """The batches of a random contiguous slice of ``rand_percent`` % of the n samples of ``order`` (None: 0..n-1), in order.

    The last one may be short; ``drop_last`` leaves it out (the reference's ``DataLoader(..., drop_last=True)``) unless
    it is the only one, where the reference would have no batch at all (and fail).
    """
    size = max(1, int(rand_percent / 100 * n))
    lo = int(torch.randint(0, n - size + 1, (1,), generator=generator))
    rows = torch.arange(lo, lo + size) if order is None else order[lo : lo + size]
    batches = list(rows.split(batch_size))
    if drop_last and len(batches) > 1 and len(batches[-1]) < batch_size:
        batches.pop()
    return batches


@dataclass(frozen=True)
class FedALAClient:
    """FedALA's client half: ALA from (theta, theta_i, W_i), then the run's training; keeps theta_i and W_i."""

    higher: tuple[str, ...]
    param_keys: frozenset[str]
    options: FedALAOptions
    seed: int = 0
    """The run's seed, which with the client's id orders the rows ALA's slices are cut from (:func:`client_order`)."""

    def prepare(self, state: ClientState, start: Params, context: Context) -> tuple[Params, dict[str, Wire]]:
        return start, dict(context)

    def objectives(self, spec: LocalSpec) -> tuple[LocalSpec, ...]:
        """0: one plain SGD step of the base loss on one batch, only the higher layers trainable (the weight learning)."""
        frozen = frozenset(self.param_keys - set(self.higher))
        return (replace(spec, epochs=1, momentum=0.0, weight_decay=0.0, optim=SGD, terms=(), frozen=frozen),)

    def train(self, local: Local) -> LocalProgram:
        theta_i = own_entries(local.state, MODEL)
        start = local.start
        weights = own_entries(local.state, WEIGHT)
        if theta_i:
            start, weights = yield from self.ala(local, theta_i, weights)
        out = yield Train(start, local.context)
        state = {**with_prefix(out.params, MODEL), **with_prefix(weights, WEIGHT)}
        return Personal(out.params, out.num_steps, out.mean_loss, state=state)

    def ala(self, local: Local, theta_i: Params, weights: Params) -> Generator[Train, LocalOutcome, tuple[Params, Params]]:
        """The adaptive local aggregation: theta_hat and the learnt W_i."""
        o, g = self.options, local.start
        theta_i = {k: v.to(g[k].device) for k, v in theta_i.items()}
        first = not weights
        weights = {k: torch.ones_like(g[k]) for k in self.higher} if first else {k: v.to(g[k].device) for k, v in weights.items()}
        seeded = torch.Generator().manual_seed(derive_seed(local.seed, "fedala"))
        batches = sample_batches(len(local.y), o.rand_percent, local.spec.batch_size, seeded, o.drop_last, client_order(len(local.y), self.seed, local.client_id))
        theta_hat = blend(theta_i, g, weights, self.higher, self.param_keys)
        losses: list[float] = []
        for _ in range(o.max_init_epochs if first else 1):
            loss = 0.0
            for rows in batches:
                out = yield Train(theta_hat, local.context, objective=0, lr=o.eta, rows=rows.to(local.y.device))
                weights = weight_step(weights, theta_hat, out.params, theta_i, g)
                theta_hat = blend(theta_i, g, weights, self.higher, self.param_keys)
                loss = out.mean_loss
            losses.append(loss)
            if converged(losses, o.num_pre_loss, o.threshold):
                break
        return theta_hat, weights

    def finish(self, model: nn.Module, state: ClientState, trained: Trained) -> tuple[ClientState, Report]:
        return {}, {}  # theta_i and W_i are kept by the training (Personal.state)

    def personal_model(self, state: ClientState, global_model: Params) -> Params:
        """theta_i, the client's model after its last training (every entry: no global part)."""
        return own_entries(state, MODEL)


class FedALA(FedAvg):
    """FedAvg on the clients' models; ALA runs on the clients (:class:`FedALAClient`)."""

    def __init__(self, model: nn.Module, options: FedALAOptions = FedALAOptions(), section: str = "algorithm", seed: int | None = None) -> None:
        """``seed``: the run's, which orders each client's rows for ALA's slices (:func:`client_order`; None: the run's,
        which a run fills, :func:`_bind`; 0 outside a run)."""
        super().__init__()
        self.options = options
        self.seed = seed
        try:
            self.higher = tuple(higher_keys(model, options.layer_idx))
        except ValueError as e:  # a layer_idx too large for this model: the user's option, one line naming it
            raise ConfigError(f"{section}.layer_idx", str(e)) from None
        self.param_keys = frozenset(n for n, _ in model.named_parameters())

    def client_half(self) -> ClientHalf:
        return FedALAClient(self.higher, self.param_keys, self.options, instance_seed(self.seed))


CAPABILITIES = Capabilities(
    private_steps="each client learns its ALA weights W_i on its data without noise, and the upload starts from the model they blend",
    takes_weights=True,
    trains_from_own_start="each client trains from its ALA blend of the sent model and its own, not the model it is sent",
    not_a_base="FedALA's clients run their own local trainings, which PA3Fed's client half does not compose with",
    personal_model=True,
)
"""Its limits (its cost follows its options: :func:`cost`)."""


def cost(options: FedALAOptions) -> Cost:
    """The ALA before each training, one epoch of steps over ``rand_percent`` % of the client's rows (``rand_percent / 100``
    epochs, as the run's own: measured 6.0 ms an ALA epoch of 57 rows at batch 16 on digits, 7.2 ms priced); and once a client,
    its first ALA, which runs until its losses settle: ``num_pre_loss + 1`` such epochs at the least (``max_init_epochs`` at the
    most), priced at the least. The first ALA comes at a client's second participation and none at its first, where the
    per-round one is priced: ``num_pre_loss`` of them are further epochs at its first participation (``first_epochs``).
    Measured as above: ``num_pre_loss = 10`` took 0.79 CPU seconds more than 2 (8 first-ALA epochs less each, for about 16
    clients), 6.1 ms an ALA epoch."""
    share = options.rand_percent / 100
    return Cost(epochs=share, first_epochs=options.num_pre_loss * share)


def _bind(aggregator: FedALA, ctx: BuildContext) -> None:
    """An instance passed from Python orders its clients' rows by the run's seed, as the builder's does: its ``seed`` the
    run's (None: filled), another refused on ``aggregator.seed`` (seed 0 cut every seed's slices alike)."""
    aggregator.seed = run_value(aggregator.seed, ctx.seed, instance_field(ctx, "seed"), "seed")


SPEC = register_algorithm(
    "fedala",
    AlgorithmSpec(
        FedALAOptions,
        lambda o, ctx: (FedALA(ctx.model, o, ctx.section, ctx.seed), []),
        "adaptive local aggregation of the global model into the local one (Zhang et al. 2023)",
        capabilities=replace(CAPABILITIES, cost=cost(FedALAOptions())),
        capabilities_of=lambda o: replace(CAPABILITIES, cost=cost(o)),
        makes=(FedALA,),
        bind=_bind,
    ),
)
