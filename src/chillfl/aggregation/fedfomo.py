"""FedFomo (Zhang, Sapra, Fidler, Yeung & Alvarez, ICLR 2021): first-order model optimisation for personalisation.

The server keeps every client's latest model and an affinity matrix P
(clients x clients). Client i, sampled, receives the M models theta_n of the
clients it rates highest (its row of P), and before training weights each by
how much it lowers the loss on the client's validation split, per unit of
distance from its own model theta_i (Eq. 6)::

    w_n = (L_i(theta_i) - L_i(theta_n)) / (||theta_n - theta_i|| + 1e-5)
    theta_i <- sum_n max(w_n, 0) theta_n / sum_n max(w_n, 0)     (kept as is when no w_n > 0)

then trains theta_i with the run's local training on the rest of its data,
keeps it (its personal model, which local accuracy measures) and uploads it
with the raw w_n; the server stores theta_i and adds w_n to P[i, n].

Choices
-------
* The validation split is ``int(val_ratio * n)`` (``val_ratio`` 0.2, PFLlib's
  ``clientfomo.py``) of the client's n training samples, drawn by a
  permutation seeded by the run's seed and the client, the same every round;
  the local training sees the rest. PFLlib takes the last ``val_ratio`` of its
  client's samples, a random share because its data sets are shuffled when
  they are split; here a client's rows keep the data set's order, grouped by
  label for some (Caltech-256, Tiny ImageNet), where the last rows would hold
  only the client's last labels. A client with fewer than two samples trains
  on all of them and keeps its model (no weights).
* L_i is the mean cross-entropy per validation sample, in eval mode
  (:func:`chillfl.training.local.evaluate`); PFLlib averages per-batch means.
* The M models are those of the clients with the highest P[i, n] among the
  clients the server holds a model of, i itself excluded (its weight would be
  0); ties go to the lower client id, so the choice is deterministic. PFLlib
  ranks all clients (itself included) with ``torch.topk`` and initialises
  unseen clients' models to the global one. The paper's epsilon-greedy
  exploration is off by default (PFLlib has none): ``epsilon`` > 0 turns it
  on as the authors' ``Client.get_federating_clients`` does it: each of the
  M slots is, with probability max(epsilon - t epsilon_decay, 0) (t the
  round), a client drawn uniformly from the candidates not yet chosen,
  otherwise the best-rated one left (their config: 0.3 and 0.05 a round).
  The draws come from a generator seeded by (run seed, round, client).
* The distance and the combination cover the trainable parameters; buffers
  (batch-norm statistics) stay the client's own (the authors' code combines
  every state entry). The distance is the L2 norm plus 1e-5 (the paper's
  ||.||, PFLlib's ``torch.norm(params_dif) + 1e-5``); ``distance = "l1"`` is
  the authors' default ``--model_delta_norm l1`` (the sum of |differences|,
  plus the same 1e-5).
* P accumulates the raw w_n (PFLlib's ``weight_vector``); the authors' code
  adds them divided by |sum_n w_n|, which changes their scale, not their
  sign, within a round.
* A client's model before its first participation is the global model it is
  sent. The global model, used for the global evaluation and first-time
  clients, is the FedAvg (n_i / n) of the round's uploads; FedFomo has none.
* The downlink carries the M models and their ids. The global model goes to a
  client's first round only: a client the server holds a model of starts from
  theta_i, its own, and never reads the global one, so the downlink marks it
  held (``Downlink.held``) and the ledger does not price it. The ids (int32,
  4 bytes each: the ledger's index size) travel back with the weights, so
  that the server's update of P is a function of the uploads alone: it keeps
  nothing of a round's downlinks until their replies (in memory or in a
  checkpoint).

Checked against PFLlib (TsingZ0/PFLlib ``system/flcore/clients/clientfomo.py``
``weight_cal``/``weight_scale``/``aggregate_parameters``/``load_train_data``,
``system/flcore/servers/serverfomo.py`` ``send_models``/``receive_models``)
and the authors' code (NVlabs/FedFomo ``federation.py``
``compute_fomo_weights``/``update_client_weights``/``federate``, ``client.py``
``get_federating_clients``, ``federated/configs.py``): Eq. 6, the clip at 0,
the normalisation and the update theta_i + sum_n w_n (theta_n - theta_i)
(= sum_n w_n theta_n for normalised weights) agree; the rest are the choices above.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Collection, Literal, Mapping, Sequence

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
    client_params_state,
    client_weights,
    load_client_params,
    load_pair_values,
    own_entries,
    pair_values_state,
    weighted_average,
    with_prefix,
)
from chillfl.options import require
from chillfl.training.local import LocalSpec, evaluate
from chillfl.aggregation.client_states import ClientParams
from chillfl.aggregation.registry import AlgorithmSpec, BuildContext, instance_field, register_algorithm, run_value
from chillfl.capabilities import FORWARD, Capabilities, Cost
from chillfl.seeds import derive_seed, instance_seed


@dataclass(frozen=True)
class FedFomoOptions:
    """``m``: models a client downloads (PFLlib ``-M 5``); ``val_ratio``: its validation share of its training data (0.2);
    ``epsilon``/``epsilon_decay``: the paper's epsilon-greedy choice of the m (off: 0); ``distance``: ``l2`` or ``l1``."""

    m: int = 5
    val_ratio: float = 0.2
    weighting: Literal["samples", "uniform"] = "samples"
    epsilon: float = 0.0
    epsilon_decay: float = 0.0
    distance: Literal["l2", "l1"] = "l2"

    def validate(self, section: str) -> None:
        require(self.m >= 1, f"{section}.m", f"must be >= 1, got {self.m}")
        require(0 < self.val_ratio < 1, f"{section}.val_ratio", f"must be in (0, 1), got {self.val_ratio}")
        require(0 <= self.epsilon <= 1, f"{section}.epsilon", f"must be in [0, 1], got {self.epsilon}")
        require(self.epsilon_decay >= 0, f"{section}.epsilon_decay", f"must be >= 0, got {self.epsilon_decay}")


IDS, MODEL, WEIGHTS = "fedfomo_ids", "fedfomo_model_", "fedfomo_weights"
"""Context keys of the models sent (ids, then one table per model) and the report of their weights."""
PREFIX = "fedfomo.theta."
"""Where theta_i lives in the client's state."""
EPS = 1e-5
"""Added to the distance (PFLlib's ``clientfomo.py``), so that a model equal to the client's gets weight 0."""


def distance(a: Params, b: Params, keys: Collection[str], norm: Literal["l2", "l1"] = "l2") -> float:
    """||a - b|| over ``keys`` (float64): the L2 norm, or the L1 norm (the sum of |a - b|)."""
    if norm == "l1":
        return sum(float((a[k].double() - b[k].double()).abs().sum()) for k in keys)
    return sum(float(((a[k].double() - b[k].double()) ** 2).sum()) for k in keys) ** 0.5


def fomo_weights(own_loss: float, losses: Sequence[float], distances: Sequence[float]) -> list[float]:
    """w_n = (L(theta_i) - L(theta_n)) / (||theta_n - theta_i|| + 1e-5): Eq. 6, before the clip at 0."""
    return [(own_loss - loss) / (d + EPS) for loss, d in zip(losses, distances)]


def combine_models(own: Params, models: Sequence[Params], weights: Sequence[float], keys: Collection[str]) -> Params:
    """sum_n max(w_n, 0) theta_n / sum_n max(w_n, 0) on ``keys``; ``own`` unchanged when no weight is positive."""
    clipped = [max(w, 0.0) for w in weights]
    total = sum(clipped)
    if total <= 0:
        return own
    mixed = weighted_average(models, torch.tensor([c / total for c in clipped], dtype=torch.float64), list(keys))
    return {**own, **mixed}


def validation_rows(n: int, val_ratio: float) -> int:
    """How many of the client's samples are its validation split (0 when fewer than two samples: no split)."""
    n_val = int(val_ratio * n)
    return n_val if 0 < n_val < n else 0


def validation_split(n: int, n_val: int, seed: int, client_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(validation rows, training rows), each sorted: ``n_val`` of the client's n rows drawn by a permutation seeded by the
    run's seed and the client, so that the split is the same every round (and under every executor and a resume).

    Drawn, not the last rows by position: a client's rows come in the data set's order, which is grouped by label for
    some (Caltech-256 and Tiny ImageNet, read class folder by class folder), and the last rows would then hold only the
    client's last labels. PFLlib's last ``val_ratio`` rows are a random share because its clients' data were shuffled
    when the data set was split.
    """
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(derive_seed(seed, "fedfomo-validation", client_id)))
    return perm[:n_val].sort().values, perm[n_val:].sort().values


@dataclass(frozen=True)
class FedFomoClient:
    """FedFomo's client half: weights the models it was sent on its validation split, trains on the rest, keeps theta_i."""

    model: nn.Module
    param_keys: frozenset[str]
    val_ratio: float
    eval_batch_size: int = 1024
    norm: Literal["l2", "l1"] = "l2"
    seed: int = 0
    """The run's seed, which with the client's id draws its validation rows (:func:`validation_split`)."""

    def prepare(self, state: ClientState, start: Params, context: Context) -> tuple[Params, dict[str, Wire]]:
        return start, dict(context)

    def objectives(self, spec: LocalSpec) -> tuple[LocalSpec, ...]:
        return ()

    def train(self, local: Local) -> LocalProgram:
        own = own_entries(local.state, PREFIX) or local.start
        ids, models = received(local.context)
        context = {k: v for k, v in local.context.items() if k != IDS and not k.startswith(MODEL)}
        n = len(local.y)
        n_val = validation_rows(n, self.val_ratio)
        raw: list[float] = []
        start = own
        val, rows = validation_split(n, n_val, self.seed, local.client_id) if n_val else (None, None)
        if val is not None and models:
            xv, yv = local.x[val.to(local.x.device)], local.y[val.to(local.y.device)]
            own_loss = evaluate(self.model, own, xv, yv, self.eval_batch_size)[1]
            losses = [evaluate(self.model, m, xv, yv, self.eval_batch_size)[1] for m in models]
            raw = fomo_weights(own_loss, losses, [distance(m, own, self.param_keys, self.norm) for m in models])
            start = combine_models(own, models, raw, sorted(self.param_keys))
        out = yield Train(start, context, rows=None if rows is None else rows.to(local.y.device))
        report: Report = {IDS: ids, WEIGHTS: torch.tensor(raw, dtype=torch.float64)} if raw else {}  # the ids: see the module's Choices
        return Personal(out.params, out.num_steps, out.mean_loss, state=with_prefix(out.params, PREFIX), report=report)

    def finish(self, model: nn.Module, state: ClientState, trained: Trained) -> tuple[ClientState, Report]:
        return {}, {}  # theta_i is kept, and the weights reported, by the training (Personal)

    def personal_model(self, state: ClientState, global_model: Params) -> Params:
        """theta_i, the client's own model (every entry: no global part)."""
        return own_entries(state, PREFIX)


def received(context: Context) -> tuple[torch.Tensor, list[Params]]:
    """The ids and models the server sent (empty when it holds none yet)."""
    ids = context.get(IDS)
    if not isinstance(ids, torch.Tensor):
        return torch.zeros(0, dtype=torch.int64), []
    models = []
    for i in range(len(ids)):
        table = context[f"{MODEL}{i}"]
        assert isinstance(table, dict), "FedFomo's models travel as name -> tensor tables"
        models.append(table)
    return ids, models


def ranked(row: Mapping[int, float], candidates: Sequence[int], m: int) -> list[int]:
    """The ``m`` candidates of highest affinity in ``row`` (absent: 0), ties to the lower id."""
    return sorted(candidates, key=lambda j: (-row.get(j, 0.0), j))[:m]


def epsilon_greedy(row: Mapping[int, float], candidates: Sequence[int], m: int, epsilon: float, generator: torch.Generator) -> list[int]:
    """``m`` candidates, each slot with probability ``epsilon`` a uniform draw among those left, else the best-rated left.

    The authors' ``get_federating_clients``; ``epsilon = 0`` is :func:`ranked` (and draws nothing).
    """
    if epsilon <= 0:
        return ranked(row, candidates, m)
    best = ranked(row, candidates, len(candidates))
    chosen: list[int] = []
    for _ in range(min(m, len(candidates))):
        left = [j for j in best if j not in chosen]
        explore = float(torch.rand((), generator=generator, dtype=torch.float64)) < epsilon
        chosen.append(left[int(torch.randint(len(left), (), generator=generator))] if explore else left[0])
    return chosen


class FedFomo(AggregatorBase):
    """Keeps every client's latest model and the affinities P; sends each client its M best-rated models."""

    def __init__(self, num_clients: int, param_keys: Collection[str], options: FedFomoOptions = FedFomoOptions(), model: nn.Module | None = None,
                 eval_batch_size: int = 1024, seed: int | None = None) -> None:
        self.num_clients = num_clients
        self.seed = seed
        """The run's seed, which draws the epsilon-greedy choices and the clients' validation rows (None: the run's, which
        a run fills, :func:`_bind`; 0 outside a run)."""
        self.param_keys = frozenset(param_keys)
        self.options = options
        self.model = model
        """The architecture the clients weigh the models they are sent with (None: the run's model, which a run fills,
        :func:`_bind`; its client half needs one)."""
        self.eval_batch_size = eval_batch_size
        self.models = ClientParams()
        self.affinity: dict[int, dict[int, float]] = {}
        """P[i][n], for the n client i was sent (absent: 0). Only those: a dense N x N matrix was 800 MB at 10,000 clients,
        in memory and in every checkpoint."""

    def client_half(self) -> ClientHalf:
        if self.model is None:
            raise ValueError("FedFomo's clients evaluate the models they are sent: it needs the run's model (FedFomo(..., model=...))")
        return FedFomoClient(self.model, self.param_keys, self.options.val_ratio, self.eval_batch_size, self.options.distance,
                             instance_seed(self.seed))

    def choose(self, client_id: int, round: int) -> list[int]:
        """The clients whose models ``client_id`` is sent: the m best-rated held ones, or the epsilon-greedy choice."""
        o = self.options
        candidates = [j for j in sorted(self.models) if j != client_id]
        epsilon = max(o.epsilon - round * o.epsilon_decay, 0.0)
        if epsilon <= 0:
            return ranked(self.affinity.get(client_id, {}), candidates, o.m)
        generator = torch.Generator().manual_seed(derive_seed(instance_seed(self.seed), "fedfomo", round, client_id))
        return epsilon_greedy(self.affinity.get(client_id, {}), candidates, o.m, epsilon, generator)

    def downlink(self, client_id: int, round: int, global_params: Params) -> Downlink:
        """The chosen models and their ids; the global model is held (unpriced) by a client the server holds a model of:
        such a client has trained, keeps theta_i and starts from it (:meth:`FedFomoClient.train`), never from the global model."""
        held = tuple(global_params) if client_id in self.models else ()
        chosen = self.choose(client_id, round)
        if not chosen:
            return Downlink(held=held)
        context: dict[str, Wire] = {IDS: torch.tensor(chosen, dtype=torch.int32)}
        device = next(iter(global_params.values())).device  # a checkpoint may have brought them back on another
        context.update({f"{MODEL}{i}": {k: v.to(device) for k, v in self.models[j].items()} for i, j in enumerate(chosen)})
        return Downlink(context=context, held=held)

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int) -> Params:
        for r in results:
            self.models[r.client_id] = r.params  # a copy, flat on the CPU until it is read
            ids, w = r.report.get(IDS), r.report.get(WEIGHTS)
            if isinstance(ids, torch.Tensor) and isinstance(w, torch.Tensor):
                row = self.affinity.setdefault(r.client_id, {})
                for n, wn in zip(ids.tolist(), w.cpu().double().tolist()):  # float64 adds, as index_add_ into a float64 row
                    row[n] = row.get(n, 0.0) + wn
        return weighted_average([r.params for r in results], client_weights(results, self.options.weighting))

    def state_dict(self) -> dict[str, Any]:
        """Every client's latest model and the affinity matrix P."""
        affinity = pair_values_state({(i, n): value for i, row in self.affinity.items() for n, value in row.items()})
        return {"models": client_params_state({cid: self.models[cid] for cid in sorted(self.models)}), "affinity": affinity}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        check_state_keys(state, ("models", "affinity"), "FedFomo")
        self.models = ClientParams.of(load_client_params(state["models"]))
        self.affinity = {}
        for (i, n), v in load_pair_values(state["affinity"], "FedFomo affinity").items():  # (client, sent client): its row
            self.affinity.setdefault(i, {})[n] = v


CAPABILITIES = Capabilities(
    private_steps="each client weighs the models it receives by their loss on its validation rows, without noise, and the upload starts from their combination",
    not_a_base="FedFomo's clients run their own model combination and training, which PA3Fed's client half does not compose with",
    personal_model=True,
    trains_from_own_start="each client trains from its weighted combination of the models it receives, not the model it is sent",
    reports="each client's weights of the models it was sent, from their losses on its own data",
)


def capabilities(options: FedFomoOptions) -> Capabilities:
    """Its limits, and its cost: a client trains on the ``1 - val_ratio`` of its rows outside its validation split, and first
    runs its own model and the ``m`` it was sent forward over that split (``(m + 1) val_ratio`` epochs of forwards; fewer
    while the server holds fewer models: an upper bound)."""
    return replace(CAPABILITIES, cost=Cost(trainings=1 - options.val_ratio, epochs=(options.m + 1) * options.val_ratio * FORWARD))


def _bind(aggregator: FedFomo, ctx: BuildContext) -> None:
    """An instance passed from Python runs on the run's model and seed, as the builder's does: its ``model`` the run's
    where None (its clients evaluated on ``nn.Identity`` and failed in round 0), its ``seed`` the run's (None: filled),
    another refused on ``aggregator.seed`` (seed 0 drew every seed's choices and validation rows alike)."""
    if aggregator.model is None:
        aggregator.model = ctx.model
    aggregator.seed = run_value(aggregator.seed, ctx.seed, instance_field(ctx, "seed"), "seed")


SPEC = register_algorithm(
    "fedfomo",
    AlgorithmSpec(
        FedFomoOptions,
        lambda o, ctx: (FedFomo(ctx.num_clients, ctx.param_keys(), o, ctx.model, seed=ctx.seed), []),
        "clients combine the models that help their validation loss (Zhang et al. 2021)",
        capabilities=CAPABILITIES,
        capabilities_of=capabilities,
        makes=(FedFomo,),
        bind=_bind,
    ),
)
