"""FedCAC (Wu, Liu, Niu, Zhu & Tang, ICCV 2023): cautiously aggressive collaboration on critical parameters.

Client i trains from the model it was sent, theta_i^b, to theta_i. Each
parameter's sensitivity to the client's data is its value times its change in
the round's training (a first-order importance |g ⊙ theta| with the local
update standing in for the gradient g)::

    s_i = |theta_i ⊙ (theta_i - theta_i^b)|

and the top ``tau`` share of each parameter tensor (each "layer") by s_i is
the client's critical parameters, mask M_i (1 = critical). For two clients
the overlap of their critical locations is::

    O_ij = 1 - ||M_i - M_j||_1 / (2 ||M_i||_1)

and, t rounds done, client i's collaborators are the clients j != i with
O_ij >= eps_t, a threshold shared by all clients that rises from the mean
overlap to the largest one over ``beta`` rounds::

    eps_t = mean_{i != j} O_ij + (t / beta) (max_{i != j} O_ij - mean_{i != j} O_ij)

so collaboration on critical parameters is broad early (while the masks are
still settling) and cautious later: at t = beta only clients with the
largest overlap collaborate, past it none (unless all overlaps are equal).
Up to t = beta the threshold is kept <= the largest overlap, which float
rounding of the formula could overstep (:func:`threshold`). The server sends client i its customised model::

    c_i     = (theta_i + sum_{j in C_i} theta_j) / (1 + |C_i|)        (C_i: i's collaborators)
    start_i = M_i ⊙ c_i + (1 - M_i) ⊙ theta_g                         (theta_g: the global model)

its critical parameters averaged with its collaborators', the others the
global model's. Client i trains from start_i; local accuracy measures its
trained theta_i, which it keeps (its personal model) and uploads.

The equations are those of the authors' code in the FLing framework, which the
paper names as its implementation (FLAIR-Community/Fling
``fling/component/client/fedcac_client.py``: ``evaluate_critical_parameter``;
``fling/component/group/fedcac_group.py``: ``get_customized_global_models``,
``sync``), and of PFLlib's port (TsingZ0/PFLlib
``system/flcore/clients/clientcac.py``, ``system/flcore/servers/servercac.py``);
the two agree but for the round counter (below). Checked against them: s_i
from the model the client started from, the per-tensor ``int(tau * n)``-th
largest as threshold with its zero fallback, ``>=``, O_ij with i's count,
the mean over the n (n - 1) pairs and the maximum, ``>= eps_t``, c_i the
plain mean over i and C_i, the start's masks, FedAvg for theta_g. FL-bench
has no FedCAC.

Choices
-------
* The server computes M_i itself, from theta_i (the upload) and the start it
  sent, which it rebuilds from what it held when it sent it (the same
  function of the same tensors as the client's: the authors' client computes
  it and uploads it). So the mask costs no uplink, and under ``dp-sgd`` it is
  post-processing of the private upload: the clients send only their model,
  and their one training a round is all they read their data for.
* A "layer" is one parameter tensor (a weight or a bias, as the authors
  iterate ``named_parameters``); buffers (batch-norm statistics) are never
  critical and stay the client's own: its start takes its own buffers from
  the model it kept (the authors' customisation sets the parameters only).
* Ties at the tau-th largest sensitivity are all critical (``s >= threshold``,
  as the authors), so a mask may hold more than the tau share. A tensor too
  small for one (``int(tau * n) = 0``) has none. When the tau-th largest is
  <= 1e-10, the threshold is the smallest sensitivity above 1e-20 (and with
  none, every parameter of the tensor is critical): the authors' code.
* O_ij divides by client i's own count, so it is not symmetric when the masks'
  sizes differ (ties); a client with no critical parameter has O_ij = 0.
* The paper samples every client every round. Here the server keeps each
  client's latest model and mask; the overlaps, their mean and maximum are
  over the clients it holds, and a client it holds none of yet is sent the
  global model (every client starts from it in the paper). Under full
  participation this is the authors' algorithm exactly.
* t counts the rounds done when the model is sent (the authors' counter:
  their threshold after their round e, 0-based, uses (e + 1) / beta and
  serves round e + 1). PFLlib's port uses (t + 1) / beta, a round later.
* c_i is the plain mean of the models (the authors' ``torch.div`` by the
  group's size), summed in float64 and cast back. The global model theta_g is
  the FedAvg (n_i / n) of the round's uploads (the authors' ``fed_avg``), or
  their plain mean with ``weighting = "uniform"``.
* Local accuracy measures theta_i after the round's training
  (``local_eval = "trained"``, default). Both the authors' pipeline
  (``personalized_model_pipeline.py``: ``test`` after ``aggregate``, which
  customises every client) and PFLlib (``evaluate`` after ``send_models``)
  test each client's customised start for the next round:
  ``local_eval = "averaged"`` measures that, on the server right after the
  round's aggregation (:class:`FedCACAveraged`), and ``checkpoint.client_models``
  then saves it.
* A model's buffers (batch norm's statistics) are each client's own: a returning client starts them from its values,
  not the sent ones, so ``bytes_down`` does not count them from its second participation (since 2026-12-07; a run
  resumed across that change counts them in its earlier rounds), and a forging attack is refused on such a model.
* Defaults ``tau = 0.5``, ``beta = 100``: the authors' CIFAR-10 setting (300
  rounds); for CIFAR-100 they use ``tau = 0.4``, ``beta = 170``. beta is in
  rounds: scale it with the run's length.
"""

from __future__ import annotations

from dataclasses import dataclass
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
    Params,
    Report,
    Trained,
    Wire,
    check_state_keys,
    client_params_state,
    client_weights,
    load_client_params,
    load_params,
    own_entries,
    weighted_average,
    with_prefix,
)
from chillfl.aggregation.client_states import ClientParams
from chillfl.aggregation.registry import AlgorithmSpec, after_average, register_algorithm
from chillfl.capabilities import Capabilities
from chillfl.engine.record import Json
from chillfl.options import require


@dataclass(frozen=True)
class FedCACOptions:
    """``tau``: the critical share of each layer; ``beta``: rounds over which the threshold climbs to the largest overlap (the authors' CIFAR-10 0.5 and 100)."""

    tau: float = 0.5
    beta: int = 100
    weighting: Literal["samples", "uniform"] = "samples"
    local_eval: Literal["trained", "averaged"] = "trained"
    """``trained``: local accuracy of theta_i after the client's training; ``averaged``: of its customised start for the
    next round, measured by the server after the round (the authors' code's)."""

    def validate(self, section: str) -> None:
        require(0 < self.tau <= 1, f"{section}.tau", f"must be in (0, 1], got {self.tau}")
        require(self.beta >= 1, f"{section}.beta", f"must be >= 1, got {self.beta}")


PREFIX = "fedcac.theta."
"""Where theta_i (the client's trained model) lives in the client's state."""
ZERO = 1e-10
"""A tau-th largest sensitivity at or below this is taken as zero (the authors' code) ..."""
TINY = 1e-20
"""... and the threshold becomes the smallest sensitivity above this one."""


def sensitivity(before: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
    """s = |theta ⊙ (theta - theta^b)| element-wise, in the parameters' dtype (the authors' ``|g * v|``)."""
    return ((after - before) * after).abs()


def critical_mask(before: torch.Tensor, after: torch.Tensor, tau: float) -> torch.Tensor:
    """M (bool, ``after``'s shape): s >= the ``int(tau * n)``-th largest s of the tensor; see the module's Choices for ties and zeros."""
    s = sensitivity(before, after)
    flat = s.reshape(-1)
    k = int(tau * flat.numel())
    if k == 0:
        return torch.zeros_like(s, dtype=torch.bool)
    thresh = torch.topk(flat, k).values[-1]
    if float(thresh) <= ZERO:
        nonzero = flat[flat > TINY]
        if nonzero.numel():
            thresh = nonzero.min()
    return s >= thresh


def critical_masks(before: Params, after: Params, keys: Sequence[str], tau: float) -> Params:
    """M_i for every parameter tensor in ``keys``."""
    return {k: critical_mask(before[k], after[k], tau) for k in keys}


def overlap_rates(shared: torch.Tensor) -> torch.Tensor:
    """O_ij = 1 - (n_i + n_j - 2 c_ij) / (2 n_i) from c_ij = |M_i and M_j| (n_i = c_ii on the diagonal); O_ij = 0 when n_i = 0.

    ``||M_i - M_j||_1 = n_i + n_j - 2 c_ij`` for 0/1 masks: the authors' formula, from integer counts (float64).
    """
    c = shared.to(torch.float64)
    n = torch.diagonal(c)
    diff = n[:, None] + n[None, :] - 2 * c
    rates = 1 - diff / (2 * n[:, None])
    return torch.where(n[:, None] > 0, rates, torch.zeros_like(rates))


def threshold(rates: torch.Tensor, rounds_done: int, beta: int) -> float:
    """eps_t = mean + (t / beta) (max - mean) of the off-diagonal overlaps (at least two clients).

    Up to t = beta, eps_t <= max exactly, so the pair of largest overlap always collaborates: in floats the mean
    of overlaps all equal to the max can round above it, and so can mean + 1.0 (max - mean) at t = beta
    (0.3 + (0.9 - 0.3) = 0.9000000000000001), which would shut that pair out. So the mean is kept within
    [min, max] (all overlaps equal: mean = max, eps_t = max at every t, past beta too) and eps_t <= max until
    t = beta; where neither rounds over, these are the formula's bits."""
    h = rates.shape[0]
    off = rates[~torch.eye(h, dtype=torch.bool)]
    low, top = float(off.min()), float(off.max())
    mean = min(max(float(off.sum()) / (h * (h - 1)), low), top)
    eps = mean + rounds_done / beta * (top - mean)
    return min(eps, top) if rounds_done <= beta else eps


COUNT_SLICE = 1 << 24
"""Entries (clients x mask entries) of one float32 product in :func:`shared_counts`: 64 MB of floats."""


def shared_counts(rows: Sequence[Params], cols: Sequence[Params], keys: Sequence[str], budget: int = COUNT_SLICE) -> torch.Tensor:
    """c_ij = |M_i and M_j| of every mask of ``rows`` against every mask of ``cols`` (int64, ``[len(rows), len(cols)]``, on the CPU).

    Why: one matrix product of the 0/1 masks a slice of entries, not a bitwise and, a sum and a host read for each pair.
    Exact: the products are 0 or 1 and a slice has fewer than 2^24 entries, so every partial sum is an integer a float32
    holds, whatever the order of the sum; the slices' counts are added in int64. ``budget`` bounds the floats of a product
    ((rows + cols) x slice entries)."""
    out = torch.zeros(len(rows), len(cols), dtype=torch.int64)
    width = max(1, min(budget // (len(rows) + len(cols)), (1 << 24) - 1))
    for k in keys:
        a = torch.stack([m[k].reshape(-1).cpu() for m in rows])
        b = torch.stack([m[k].reshape(-1).cpu() for m in cols])
        for s in range(0, a.shape[1], width):
            out += (a[:, s : s + width].float() @ b[:, s : s + width].float().T).to(torch.int64)
    return out


def customised(models: Sequence[Params], keys: Sequence[str]) -> Params:
    """c_i: the plain mean of ``models`` (i's first, then its collaborators') on ``keys``, summed in float64."""
    out: Params = {}
    for k in keys:
        acc = models[0][k].double()
        for m in models[1:]:
            acc = acc + m[k].double()
        out[k] = (acc / len(models)).to(models[0][k].dtype)
    return out


def blend(mask: Params, custom: Params, global_params: Params) -> Params:
    """start_i = M_i ⊙ c_i + (1 - M_i) ⊙ theta_g, on the masked keys."""
    return {k: torch.where(m, custom[k], global_params[k]) for k, m in mask.items()}


@dataclass(frozen=True)
class FedCACClient:
    """FedCAC's client half: trains from the start it is sent (with its own buffers); keeps the trained model."""

    param_keys: frozenset[str]
    after_average: bool = False
    """Local accuracy of the client's customised start for the next round, measured by the server after the round
    (:class:`~chillfl.aggregation.base.MeasuredAfterAverage`; ``local_eval = "averaged"``)."""
    buffer_keys: frozenset[str] = frozenset()
    """The model's entries outside ``param_keys`` (batch-norm statistics): a returning client starts them from its own
    values, and says so (:meth:`kept_entries`)."""

    def prepare(self, state: ClientState, start: Params, context: Context) -> tuple[Params, dict[str, Wire]]:
        buffers = {k: v for k, v in own_entries(state, PREFIX).items() if k not in self.param_keys}
        return ({**start, **buffers} if buffers else start), dict(context)

    def finish(self, model: nn.Module, state: ClientState, trained: Trained) -> tuple[ClientState, Report]:
        return with_prefix(trained.params, PREFIX), {}

    def kept_entries(self) -> frozenset[str]:
        """``buffer_keys`` (:class:`~chillfl.aggregation.base.KeepsEntries`). Why: its server averages them, so a
        forging attack, which reads each update from the sent start, is refused before the run, not by the clients'
        start check in round 2 with round 1 on disk."""
        return self.buffer_keys

    def personal_model(self, state: ClientState, global_model: Params) -> Params:
        """theta_i, the client's model after its last training (every entry: no global part); with ``after_average``,
        its start for the next round: ``global_model`` (the server's :meth:`FedCACAveraged.client_model` in place) with its own buffers."""
        own = own_entries(state, PREFIX)
        if not self.after_average:
            return own
        return {**global_model, **{k: v for k, v in own.items() if k not in self.param_keys}}


class FedCAC(AggregatorBase):
    """Keeps every client's latest model, mask and mask overlaps; sends client i its customised start; the global model is FedAvg's."""

    def __init__(self, num_clients: int, param_keys: Collection[str], options: FedCACOptions = FedCACOptions()) -> None:
        averaged = isinstance(self, FedCACAveraged)
        if (options.local_eval == "averaged") != averaged:  # the class decides what is measured, the options what is recorded
            raise ValueError(f"{type(self).__name__} measures local accuracy {'after the average' if averaged else 'on the trained model'}, but its options say "
                             f"local_eval = {options.local_eval!r}: use {'FedCAC' if averaged else 'FedCACAveraged'} (or fedcac.build(...), which picks the class)")
        self.num_clients = num_clients  # not read: the per-client models and masks grow with the clients that train (no run check needed)
        self.param_keys = tuple(param_keys)
        self.options = options
        self.models = ClientParams()
        """client id -> its latest upload's parameters (theta_j)."""
        self.masks = ClientParams()
        """client id -> its latest critical mask M_j (bool)."""
        self.buffer_keys: frozenset[str] = frozenset()
        """The model's entries outside ``param_keys``, which each client keeps its own of (:meth:`learn_parameters`)."""
        self.held: list[int] = []
        """The clients held (those with a mask), in id order: the rows and columns of :attr:`shared`."""
        self.shared = torch.zeros(0, 0, dtype=torch.int64)
        """c_ij = |M_i and M_j| for the clients held (c_ii = n_i): the overlaps' integer counts. Only theirs: an N x N
        matrix was 800 MB at 10,000 clients, in memory and in every checkpoint."""
        self._metrics: dict[str, Json] = {}
        self._sent: dict[int, tuple[int, Params, tuple[Params, list[int], float | None]]] = {}
        """client id -> (round, the global parameters, :meth:`start`'s answer) its downlink built: what :meth:`aggregate`
        reads its start from instead of building it again (the state it was built from changes only in aggregate)."""

    def client_half(self) -> ClientHalf:
        return FedCACClient(frozenset(self.param_keys), buffer_keys=self.buffer_keys)

    def learn_parameters(self, model: nn.Module) -> None:
        """Take ``model``'s entries outside ``param_keys`` as the buffers its clients keep
        (:class:`~chillfl.aggregation.base.LearnsParameters`: the builder asks it, and the run asks an instance passed
        from Python); ``param_keys`` stay the ones it was built with."""
        keys = frozenset(self.param_keys)
        self.buffer_keys = frozenset(k for k in model.state_dict() if k not in keys)

    def collaborators(self, client_id: int, rounds_done: int) -> tuple[list[int], float | None]:
        """C_i among the clients held, and eps_t (None: fewer than two clients held)."""
        held = self.held
        if len(held) < 2:
            return [], None
        rates = overlap_rates(self.shared)
        eps = threshold(rates, rounds_done, self.options.beta)
        row = rates[held.index(client_id)]
        return [j for idx, j in enumerate(held) if j != client_id and float(row[idx]) >= eps], eps

    def start(self, client_id: int, rounds_done: int, global_params: Params) -> tuple[Params, list[int], float | None]:
        """start_i for a client held (its parameters only), C_i and eps_t."""
        group, eps = self.collaborators(client_id, rounds_done)
        custom = customised([_on(self.models[j], global_params) for j in (client_id, *group)], self.param_keys)
        return blend(_on(self.masks[client_id], global_params), custom, global_params), group, eps

    def downlink(self, client_id: int, round: int, global_params: Params) -> Downlink:
        if client_id not in self.masks:
            return Downlink()  # no model of it yet: the global model
        built = self.start(client_id, round, global_params)
        self._sent[client_id] = (round, global_params, built)
        return Downlink(params=built[0])

    def _start_sent(self, client_id: int, round: int, global_params: Params) -> tuple[Params, list[int], float | None]:
        """:meth:`start` as this round's downlink built it for ``client_id`` (from the same global parameters), else built now."""
        sent = self._sent.get(client_id)
        if sent is not None and sent[0] == round and sent[1] is global_params:
            return sent[2]
        return self.start(client_id, round, global_params)

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int) -> Params:
        sizes: list[int] = []
        eps: float | None = None
        masks = []
        for r in results:  # each start rebuilt from the state it was sent from, before any of it changes
            sent = global_params
            if r.client_id in self.masks:
                sent, group, eps = self._start_sent(r.client_id, round, global_params)
                sizes.append(len(group))
            masks.append(critical_masks(sent, r.params, self.param_keys, self.options.tau))
        for r, mask in zip(results, masks):
            self.models[r.client_id] = {k: r.params[k] for k in self.param_keys}  # a copy, flat on the CPU until read
            self.masks[r.client_id] = mask
        self._sent = {}  # built from the state just changed
        self._count_shared([r.client_id for r in results])
        self._metrics = {} if eps is None else {"collaborators": sum(sizes) / len(sizes), "threshold": eps}
        return weighted_average([r.params for r in results], client_weights(results, self.options.weighting))

    def _count_shared(self, updated: Sequence[int]) -> None:
        """c_ij for every updated client i against every client held (both ways); a row and a column for each newcomer."""
        held = sorted(self.masks)
        at = {j: k for k, j in enumerate(held)}  # client id -> its row and column
        if held != self.held:  # newcomers: the counts so far, moved to the rows of their clients
            grown = torch.zeros(len(held), len(held), dtype=torch.int64)
            old = torch.tensor([at[j] for j in self.held], dtype=torch.int64)
            grown[old[:, None], old[None, :]] = self.shared
            self.shared, self.held = grown, held
        if not updated:
            return
        counts = shared_counts([self.masks[i] for i in updated], [self.masks[j] for j in held], self.param_keys)
        rows = torch.tensor([at[i] for i in updated], dtype=torch.int64)
        self.shared[rows, :] = counts  # c_ij for each updated i against every j held, and c_ji alike
        self.shared[:, rows] = counts.T

    def round_metrics(self) -> Mapping[str, Json]:
        """The mean |C_i| of the round's clients that had a mask, and the threshold eps_t they were sent with."""
        return dict(self._metrics)

    def state_dict(self) -> dict[str, Any]:
        """Every client's latest parameters and mask, and the masks' shared counts."""
        return {
            "models": client_params_state({cid: self.models[cid] for cid in sorted(self.models)}),
            "masks": client_params_state({cid: self.masks[cid] for cid in sorted(self.masks)}),
            "shared": {"ids": torch.tensor(self.held, dtype=torch.int64), "counts": self.shared},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        check_state_keys(state, ("models", "masks", "shared"), "FedCAC")
        shared = state["shared"]
        if isinstance(shared, torch.Tensor):
            raise ValueError("FedCAC shared counts are an N x N matrix, the layout of checkpoints before 2026-12-05: resume it with that version")
        table = load_params(shared)
        check_state_keys(table, ("ids", "counts"), "FedCAC shared counts")
        self.models = ClientParams.of(load_client_params(state["models"]))
        self.masks = ClientParams.of(load_client_params(state["masks"]))
        self._sent = {}
        held = [int(j) for j in table["ids"].tolist()]
        if held != sorted(self.masks) or table["counts"].shape != (len(held), len(held)):
            raise ValueError("FedCAC shared counts must be those of the clients with a mask, in id order")
        self.held = held
        self.shared = table["counts"].to("cpu", torch.int64).clone()  # server bookkeeping, on the host


class FedCACAveraged(FedCAC):
    """FedCAC whose local accuracy is measured after the round (``local_eval = "averaged"``): it makes each client's
    customised start for the next round (:class:`~chillfl.aggregation.base.MakesClientModels`), which the server
    measures right after the aggregation, as the authors' code tests it."""

    def __init__(self, num_clients: int, param_keys: Collection[str], options: FedCACOptions = FedCACOptions()) -> None:
        super().__init__(num_clients, param_keys, options)
        self.rounds_done = 0
        """t for the next round's starts: the rounds aggregated so far."""

    def client_half(self) -> ClientHalf:
        return FedCACClient(frozenset(self.param_keys), after_average=True, buffer_keys=self.buffer_keys)

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int) -> Params:
        out = super().aggregate(global_params, results, round)
        self.rounds_done = round + 1
        return out

    def client_model(self, client_id: int, global_params: Params) -> Params:
        """start_i for the next round (its parameters), as :meth:`downlink` will send it; none for a client not held."""
        if client_id not in self.masks:
            return {}
        return self.start(client_id, self.rounds_done, global_params)[0]

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "rounds_done": self.rounds_done}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        check_state_keys(state, ("models", "masks", "shared", "rounds_done"), "FedCAC")
        super().load_state_dict({k: v for k, v in state.items() if k != "rounds_done"})
        self.rounds_done = int(state["rounds_done"])


def build(num_clients: int, param_keys: Collection[str], options: FedCACOptions) -> FedCAC:
    """The aggregator for ``options``: :class:`FedCACAveraged` under ``local_eval = "averaged"``."""
    kind = FedCACAveraged if options.local_eval == "averaged" else FedCAC
    return kind(num_clients, param_keys, options)


def learned(aggregator: FedCAC, model: nn.Module) -> FedCAC:
    """``aggregator``, told the run's ``model``'s buffers (:meth:`FedCAC.learn_parameters`)."""
    aggregator.learn_parameters(model)
    return aggregator


def _on(params: Params, like: Params) -> Params:
    """``params`` on the device of the run's model (a checkpoint may have brought them back on another)."""
    device = next(iter(like.values())).device
    return {k: v.to(device) for k, v in params.items()}


SPEC: AlgorithmSpec = register_algorithm(
    "fedcac",
    AlgorithmSpec(
        FedCACOptions,
        lambda o, ctx: (learned(build(ctx.num_clients, ctx.param_keys(), o), ctx.model), []),
        "critical parameters averaged with the clients whose critical locations overlap (Wu et al. 2023)",
        capabilities=Capabilities(not_a_base="FedCAC's server sends each client its own customised model; its global model is only their non-critical part", personal_model=True),
        capabilities_of=lambda o: after_average(SPEC.capabilities, "local_eval", "averaged", o.local_eval == "averaged"),
        makes=(FedCAC, FedCACAveraged),  # each class build() returns, by local_eval
    ),
)
