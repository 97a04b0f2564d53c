"""APPLE (Luo & Wu, IJCAI 2022): adapt to adaptation, learned personalisation for cross-silo FL.

Every client j owns a *core model* theta_j, which it uploads. Client i keeps
copies of the core models it has downloaded and a *directed relationship* (DR)
vector p_i, one weight per client; its personalised model is::

    theta_hat_i = sum_j p_ij theta_j          (theta_i its own core model, the others its copies)

It trains theta_i and p_i together by gradient descent on its data, the other
copies held fixed, on::

    L_i(theta_hat_i) + lambda(r) mu ||p_i - p_i^0||^2              (``proximal = "half"``: lambda(r) mu / 2 ||...||^2)

so that d/d theta_i = p_ii g and d/d p_ij = <g, theta_j> + 2 lambda(r) mu (p_ij - p_ij^0), g the gradient at
theta_hat_i. p_i^0 = (n_1/n, ..., n_N/n), every client's start, is FedAvg's weighting: the proximal term pulls
the personalised model towards the global one while the loss scheduler lambda(r) (1 at round 0, 0 from round L on)
is large, and lets it go local afterwards::

    cosine:      lambda(r) = (cos(pi r / L) + 1) / 2         r < L
    exponential: lambda(r) = 0.001^(r / L)                    r < L          (both 0 for r >= L; L = int(share * rounds))

The training is one job of the one training path: a :class:`Mixture` template holds theta_i (``core.``), p_i
(``p``), the copies (``bank.``, buffers) and a one-hot of i (``own``); its forward runs the model at theta_hat_i.
The server keeps every client's latest core model and DR vector and sends client i, each round it is sampled, at
most ``downloads`` (M) of the others' core models; local accuracy measures theta_hat_i after the round's training.

Checked against
---------------
The authors' code (ljaiverson/pFL-APPLE ``train_APPLE.py``, ``utils/apple.py`` ``init_pss`` /
``prepare_client_model`` / ``get_download_which``, ``utils/losses.py`` ``reg_loss`` / ``get_reg_coef``,
``utils/models.py`` ``ClientNet``, ``utils/utils.py``'s defaults): p_i^0 = n_j / n for every i, the proximal
term coef * sum (p - p0)^2 (no 1/2) with coef = lambda(r) mu, the two schedulers with L = int(0.1 rounds) and the
exponential's 0.001, the defaults mu = 0.1, eta_p = 0.001, scheduler ``exponential``, the download rule of
``get_download_which``. The paper's own text could not be read here beyond its abstract (searched again in session
74: the stored copies of arXiv 2110.08394 hold the abstract and introduction only); where its equations and the code
could differ, the code's is the default and the other reading an option: the 1/2 of the proximal term
(``proximal = "half"``). p_i's momentum: the code's 0.9 is ``p_momentum = 0.9``; the default stays the plain step
(0), as the paper's text on it could not be checked. PFLlib's ``clientapple.py`` (a port)
was read too and is not followed (p_i^0 uniform, a cosine scheduler only, lr scaled by the number of clients).

Choices
-------
* theta_hat_i combines the trainable parameters; its buffers (batch-norm statistics) are theta_i's. The authors'
  ``ClientNet`` mixes each layer's outputs, sum_j p_ij layer_j(x), which for their convolutions and linear layers
  is the same model.
* p_i takes SGD steps at ``p_lr`` (eta_p, the authors' ``lr_coef`` 0.001) outside the run's optimiser, plain by
  default, with heavy-ball momentum ``p_momentum`` (:attr:`~chillfl.training.local.LocalSpec.plain_momentum`, the
  buffer from zero each round); theta_i takes the run's optimiser at the round's learning rate. The authors step
  both with one SGD of momentum 0.9 (two learning rates, a fresh optimiser each round) and decay both each round;
  their ``lr_net`` 0.01 is ``client.lr``, their momentum on theta_i ``client.momentum = 0.9``.
* Downloads (M = ``downloads``; unset: every core model the server holds, the authors' default 10000). Client i is
  sent, of the clients the server holds a core model of (i excluded): all of them when there are at most M;
  otherwise first those never sent to i (M of them drawn uniformly if there are more), then, for the slots left,
  draws without replacement with probability proportional to base^|p_ij|, base = max(``threshold``,
  ``growth`` r M / N) (the authors' 1.5 and 1.0) -- ``get_download_which``. In the authors' code the
  "never sent" record (``downloaded_once``) is never updated, so every draw is in effect uniform:
  ``selection = "uniform"`` draws the M uniformly, as it runs. The draws come from a generator seeded by
  (run seed, round, client).
* A core model client i holds no copy of (it was never sent one, or its owner has not trained yet) is taken to be
  the global model it is sent this round: at round 0 that is every core model's start w^0, as in the authors' code
  (which downloads every model at round 0, all still equal to w^0); a copy once received is kept, stale, until the
  next one replaces it (the authors' ``ClientNet`` keeps them the same way).
* What travels. The global model goes down while the client reads it: before its first upload (theta_i starts from
  it) and while some client j != i has a slot it holds no copy of (the fill above). A client with a core model whose
  every other slot it holds a copy of (the server knows which: the ids it reported) never reads it -- its own slot's
  weight in the mixture is p_ii (1 - 1) = 0 -- so its downlink marks the global model held (``Downlink.held``,
  unpriced). p^0 goes down in a client's first round only: the client keeps it in its state, and later downlinks mark
  it local. p_i goes up in its own dtype (the model's; the server widens it to float64, exactly). The ids of the core
  models sent (int32, 4 bytes each: the ledger's index size) come back with p_i, so that the server's record of what
  each client holds is a function of the uploads alone, kept nothing of a round's downlinks until their replies.
* Partial participation (the paper has all clients every round): a client's core model and p_i start, at its first
  participation, from the global model it is sent and p_i^0; an unsampled client's core model stays the server's
  copy of its last upload. r in the scheduler and the download rule is the run's round.
* The global model (the global evaluation, first-time clients, unheld copies) is the FedAvg (n_i / n) of the
  round's uploaded core models; APPLE has none.
* ``p0 = "uniform"`` starts p_i at 1/N (``ClientNet``'s own default, PFLlib's start) instead of n_j / n.
* The run's parameter terms (``[objective] proximal_mu``) apply to theta_i (:class:`~chillfl.aggregation.base.OnPart`);
  a term or loss that reads the representation is refused (the forward is the mixture's).
"""

from __future__ import annotations

import copy
import functools
import math
from dataclasses import dataclass, replace
from typing import Any, Collection, Literal, Mapping, Sequence, cast

import torch
from torch import nn
from torch.func import functional_call

from chillfl.aggregation.base import (
    AggregatorBase,
    ClientHalf,
    ClientResult,
    ClientState,
    Context,
    Downlink,
    Local,
    LocalProgram,
    OnPart,
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
    own_entries,
    weighted_average,
    with_prefix,
)
from chillfl.aggregation.client_states import ClientParams
from chillfl.aggregation.registry import AlgorithmSpec, BuildContext, Built, instance_field, register_algorithm, run_value
from chillfl.capabilities import PARAMETER_TERM, Capabilities, Cost
from chillfl.options import Scale, require, require_memory
from chillfl.seeds import derive_seed, instance_seed
from chillfl.training.local import LocalSpec, refuse_representation_readers
from chillfl.training.objective import LossTerm, Term
from chillfl.training.terms import read_number, read_tensor


@dataclass(frozen=True)
class APPLEOptions:
    """The authors' defaults: ``mu`` 0.1, ``scheduler`` exponential over ``schedule_share`` 0.1 of the rounds, ``p_lr`` 0.001,
    every model downloaded (``downloads`` unset), ``threshold`` 1.5 and ``growth`` 1.0 for the limited-download draws."""

    mu: Scale = 0.1
    """mu, the proximal term's weight on ||p_i - p_i^0||^2 (scaled by lambda(r))."""
    proximal: Literal["sum", "half"] = "sum"
    """The proximal term: lambda(r) mu ||p_i - p_i^0||^2 (the authors' ``reg_loss``) or lambda(r) mu / 2 ||p_i - p_i^0||^2."""
    scheduler: Literal["exponential", "cosine"] = "exponential"
    """The loss scheduler lambda(r): 0.001^(r / L) or (cos(pi r / L) + 1) / 2 for r < L, 0 after."""
    schedule_share: float = 0.1
    """L = int(schedule_share * federation.rounds), the round from which lambda(r) = 0."""
    p_lr: float = 0.001
    """eta_p, the learning rate of p_i's plain SGD step (the authors' ``lr_coef``)."""
    p_momentum: float = 0.0
    """Heavy-ball momentum of p_i's step, its buffer from zero each round (the authors' code: 0.9, as on theta_i)."""
    downloads: int | None = None
    """M, the most core models a client is sent a round; unset: every one the server holds (the authors' default)."""
    selection: Literal["relationship", "uniform"] = "relationship"
    """How the M are drawn when there are more: never-sent first, then by base^|p_ij| (``get_download_which``); or uniformly."""
    threshold: float = 1.5
    """The least base of the draws' base^|p_ij| (the authors' ``thresh``)."""
    growth: float = 1.0
    """The base grows as growth * r M / N past ``threshold`` (the authors' ``lamb``)."""
    p0: Literal["samples", "uniform"] = "samples"
    """p_i^0, every client's start and the proximal term's anchor: n_j / n (the authors') or 1/N."""
    weighting: Literal["samples", "uniform"] = "samples"
    """The global model's FedAvg weights (n_i / n or 1/|S|)."""

    def validate(self, section: str) -> None:
        require(math.isfinite(self.mu) and self.mu >= 0, f"{section}.mu", f"must be a finite number >= 0, got {self.mu}")
        require(math.isfinite(self.schedule_share) and 0 <= self.schedule_share <= 1, f"{section}.schedule_share", f"must be in [0, 1], got {self.schedule_share}")
        require(math.isfinite(self.p_lr) and self.p_lr >= 0, f"{section}.p_lr", f"must be a finite number >= 0, got {self.p_lr}")
        require(math.isfinite(self.p_momentum) and 0 <= self.p_momentum < 1, f"{section}.p_momentum", f"must be in [0, 1), got {self.p_momentum}")
        if self.downloads is not None:
            require(self.downloads >= 1, f"{section}.downloads", f"must be >= 1 (unset: every core model), got {self.downloads}")
        require(math.isfinite(self.threshold) and self.threshold >= 1, f"{section}.threshold", f"must be a finite number >= 1, got {self.threshold}")
        require(math.isfinite(self.growth) and self.growth >= 0, f"{section}.growth", f"must be a finite number >= 0, got {self.growth}")


IDS, MODEL, PROX, P0, P = "apple_ids", "apple_model_", "apple_prox", "apple_p0", "apple_p"
"""Context keys: the ids and tables of the core models sent, lambda(r) mu, p^0; and the report of p_i."""
CORE, BANK, RELATION, HELD, OWN, START = "apple.core.", "apple.bank.", "apple.p", "apple.held", "apple.own", "apple.p0"
"""Where theta_i, the copies it holds (one (K, ...) stack per parameter, K the copies held), p_i, the ids of those copies
(int64, ascending), i's one-hot and p^0 (sent in its first round only) live in the state."""
FLOOR = 0.001
"""The exponential scheduler's value at r = L (the authors' ``epsilon``)."""


def loss_scheduler(round: int, decay_rounds: int, shape: Literal["exponential", "cosine"]) -> float:
    """lambda(r): 0.001^(r / L) or (cos(pi r / L) + 1) / 2 for r < L, else 0 (L = 0: always 0, as the authors' code)."""
    if round >= decay_rounds:
        return 0.0
    if shape == "cosine":
        return (math.cos(math.pi * round / decay_rounds) + 1) / 2
    return float(FLOOR ** (round / decay_rounds))


def initial_relations(num_clients: int, sizes: Sequence[int] | None, p0: Literal["samples", "uniform"]) -> torch.Tensor:
    """p^0 (float64): n_j / n, or 1/N each."""
    if p0 == "uniform":
        return torch.full((num_clients,), 1.0 / num_clients, dtype=torch.float64)
    if sizes is None:
        raise ValueError("APPLE's p0 = 'samples' needs the clients' training sizes (make_aggregator(..., client_sizes=...))")
    counts = torch.tensor(list(sizes), dtype=torch.float64)
    return counts / counts.sum()


def combine(p: torch.Tensor, own: torch.Tensor, core: torch.Tensor, bank: torch.Tensor) -> torch.Tensor:
    """sum_j p_j theta_j for one parameter: p_i theta_i (i the one-hot ``own``) + sum_{j != i} p_j bank_j (bank: (N, ...))."""
    mine = (p * own).sum()
    others = p * (1 - own)
    return mine * core + torch.tensordot(others.to(bank.dtype), bank, dims=1)


def _attribute(module: nn.Module, name: str) -> torch.Tensor:
    """The tensor at dotted ``name``, read as an attribute: inside ``functional_call`` it is the substituted one."""
    return cast(torch.Tensor, functools.reduce(getattr, name.split("."), module))


class Mixture(nn.Module):
    """theta_i (``core``), p_i (``p``), the copies (``bank.b<k>``, buffers, one (N, ...) stack per parameter) and i's
    one-hot (``own``, a buffer): the forward is the model at theta_hat_i = sum_j p_ij theta_j (:func:`combine`)."""

    def __init__(self, model: nn.Module, num_clients: int) -> None:
        super().__init__()
        self.core = copy.deepcopy(model)
        self.names = tuple(n for n, _ in model.named_parameters())
        self.p = nn.Parameter(torch.zeros(num_clients))
        self.bank = nn.Module()
        for k, (_, t) in enumerate(model.named_parameters()):
            self.bank.register_buffer(f"b{k}", torch.zeros(num_clients, *t.shape, dtype=t.dtype))
        self.register_buffer("own", torch.zeros(num_clients))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p, own = _attribute(self, "p"), _attribute(self, "own")
        weights = {n: combine(p, own, _attribute(self.core, n), _attribute(self.bank, f"b{k}")) for k, n in enumerate(self.names)}
        return cast(torch.Tensor, functional_call(self.core, weights, (x,)))


class RelationProximal:
    """c ||p_i - p_i^0||^2 on the mixture's ``p``, c the downlink's weight (lambda(r) mu, or lambda(r) mu / 2: ``proximal``)."""

    reads: tuple[str, ...] = (PROX, P0)

    def __call__(self, params: Mapping[str, torch.Tensor], context: Context) -> torch.Tensor:
        p = params["p"]
        return read_number(context, PROX) * ((p - read_tensor(context, P0).to(p.dtype)) ** 2).sum()


@dataclass(frozen=True)
class APPLEClient:
    """APPLE's client half: trains theta_i and p_i through the mixture; keeps theta_i, p_i and its copies."""

    model: nn.Module
    num_clients: int
    p_lr: float
    p_momentum: float = 0.0

    def prepare(self, state: ClientState, start: Params, context: Context) -> tuple[Params, dict[str, Wire]]:
        return start, dict(context)

    def objectives(self, spec: LocalSpec) -> tuple[LocalSpec, ...]:
        """0: the mixture's step: theta_i by the run's optimiser, p_i by SGD at ``p_lr`` (momentum ``p_momentum``), the copies fixed."""
        refuse_representation_readers(spec, "APPLE's forward is the mixture of the core models, not the run's model")
        terms: list[Term] = [OnPart(cast(LossTerm, t), "core.") for t in spec.terms]
        terms.append(RelationProximal())
        frozen = frozenset(f"core.{k}" for k in spec.frozen)
        no_decay = frozenset(f"core.{k}" for k in spec.no_decay) | {"p"}
        mixture = Mixture(self.model, self.num_clients)
        return (replace(spec, model=mixture, terms=tuple(terms), frozen=frozen, no_decay=no_decay, plain_sgd=frozenset({"p"}), plain_lr=self.p_lr,
                        plain_momentum=self.p_momentum),)

    def train(self, local: Local) -> LocalProgram:
        g = local.start
        device = next(iter(g.values())).device
        names = [n for n, _ in self.model.named_parameters()]
        core = {k: v.to(device) for k, v in own_entries(local.state, CORE).items()} or g
        start_p = local.state[START].to(device) if START in local.state else read_tensor(local.context, P0)  # kept since its first round
        p = local.state[RELATION].to(device) if RELATION in local.state else start_p.to(device, g[names[0]].dtype)
        bank, held = unpacked(local.state, self.num_clients, g, names)
        ids, models = received(local.context)
        for j, table in zip(ids.tolist(), models):
            for n in names:
                bank[n][j] = table[n].to(device)
            held[j] = 1.0
        own = torch.zeros(self.num_clients, device=device)
        own[local.client_id] = 1.0
        filled = fill(bank, held, g)
        start = {"p": p, "own": own, **with_prefix(core, "core."), **{f"bank.b{k}": filled[n] for k, n in enumerate(names)}}
        context = {**{k: v for k, v in local.context.items() if k != IDS and not k.startswith(MODEL)}, P0: start_p}
        out = yield Train(start, context, objective=0)
        new_core = own_entries(out.params, "core.")
        new_p = out.params["p"]
        slots = torch.nonzero(held > 0).reshape(-1)  # the copies held: only they are kept (the others are the global model's)
        state = {**with_prefix(new_core, CORE), **with_prefix({n: stack[slots] for n, stack in bank.items()}, BANK), RELATION: new_p, HELD: slots, OWN: own,
                 START: start_p}
        report: Report = {IDS: ids, P: new_p.detach()}  # p_i in its own dtype (the model's): the server widens it to float64
        return Personal(new_core, out.num_steps, out.mean_loss, personalised(new_core, filled, new_p, own), state, report)

    def finish(self, model: nn.Module, state: ClientState, trained: Trained) -> tuple[ClientState, Report]:
        return {}, {}  # theta_i, p_i and the copies are kept, and p_i reported, by the training (Personal)

    def personal_model(self, state: ClientState, global_model: Params) -> Params:
        """theta_hat_i from the state, the copies it does not hold taken as ``global_model`` (as in its training)."""
        device = next(iter(global_model.values())).device
        core = {k: v.to(device) for k, v in own_entries(state, CORE).items()}
        if not core:  # never trained: no model of its own yet
            return {}
        bank, held = unpacked(state, self.num_clients, global_model, [n for n, _ in self.model.named_parameters()])
        filled = fill(bank, held, global_model)
        return personalised(core, filled, state[RELATION].to(device), state[OWN].to(device))


def unpacked(state: ClientState, num_clients: int, like: Params, names: Sequence[str]) -> tuple[Params, torch.Tensor]:
    """The (N, ...) stacks of parameters ``names``' copies a client holds (zeros in the slots it does not) and its 0/1 ``held`` vector, on
    ``like``'s device, from its state: the copies it holds and their ids. A state of a checkpoint before 2026-12-05
    holds every (N, ...) stack and a 0/1 ``held`` vector (floating): read as it is."""
    device = next(iter(like.values())).device
    held = torch.zeros(num_clients, device=device)
    stored = own_entries(state, BANK)
    if HELD in state and torch.is_floating_point(state[HELD]):  # the dense layout
        held = state[HELD].to(device).clone()
        return {n: stored[n].to(device).clone() if n in stored else like[n].new_zeros((num_clients, *like[n].shape)) for n in names}, held
    bank: Params = {}
    slots = state[HELD].to(device) if HELD in state else torch.zeros(0, dtype=torch.int64, device=device)
    for n in names:
        bank[n] = like[n].new_zeros((num_clients, *like[n].shape))
        if len(slots):
            bank[n][slots] = stored[n].to(device)
    held[slots] = 1.0
    return bank, held


def fill(bank: Mapping[str, torch.Tensor], held: torch.Tensor, global_model: Params) -> Params:
    """The copies with every slot not held (``held`` 0) replaced by the global model's entry."""
    out: Params = {}
    for n, stack in bank.items():
        mask = held.view(-1, *([1] * (stack.dim() - 1))) > 0
        out[n] = torch.where(mask, stack, global_model[n].to(stack.dtype).unsqueeze(0))
    return out


def personalised(core: Params, bank: Mapping[str, torch.Tensor], p: torch.Tensor, own: torch.Tensor) -> Params:
    """theta_hat_i: :func:`combine` on every parameter (those with a ``bank`` stack), theta_i's own buffers."""
    return {k: combine(p, own, v, bank[k]).detach() if k in bank else v for k, v in core.items()}


def received(context: Context) -> tuple[torch.Tensor, list[Params]]:
    """The ids and core models the server sent (none: empty)."""
    ids = context.get(IDS)
    if not isinstance(ids, torch.Tensor):
        return torch.zeros(0, dtype=torch.int64), []
    models = []
    for k in range(len(ids)):
        table = context[f"{MODEL}{k}"]
        assert isinstance(table, dict), "APPLE's core models travel as name -> tensor tables"
        models.append(table)
    return ids, models


def download_base(round: int, m: int, num_clients: int, threshold: float, growth: float) -> float:
    """base = max(threshold, growth r M / N): the draws favour large |p_ij| more as downloads accumulate (r M / N a model)."""
    return max(threshold, growth * round * m / num_clients)


def choose_downloads(
    candidates: Sequence[int],
    never_sent: Collection[int],
    relations: torch.Tensor,
    m: int | None,
    base: float,
    generator: torch.Generator,
    selection: Literal["relationship", "uniform"] = "relationship",
) -> list[int]:
    """The candidates (sorted ids) a client is sent: all when at most ``m``; else ``m`` of them, never-sent ones first
    (drawn uniformly when more than ``m``), the rest drawn without replacement with probability proportional to
    base^|p_ij| (``relations`` the client's p_i); ``uniform``: ``m`` drawn uniformly. Returned sorted."""
    if m is None or m >= len(candidates):
        return list(candidates)
    if selection == "uniform":
        order = torch.randperm(len(candidates), generator=generator)[:m]
        return sorted(candidates[int(k)] for k in order)
    fresh = [j for j in candidates if j in never_sent]
    if len(fresh) >= m:
        order = torch.randperm(len(fresh), generator=generator)[:m]
        return sorted(fresh[int(k)] for k in order)
    rest = [j for j in candidates if j not in never_sent]
    weights = torch.tensor([base ** abs(float(relations[j])) for j in rest], dtype=torch.float64)
    drawn = torch.multinomial(weights, m - len(fresh), replacement=False, generator=generator)
    return sorted(fresh + [rest[int(k)] for k in drawn])


class APPLE(AggregatorBase):
    """Keeps every client's latest core model and DR vector; sends each sampled client up to M core models."""

    def __init__(self, num_clients: int, model: nn.Module, options: APPLEOptions = APPLEOptions(), client_sizes: Sequence[int] | None = None,
                 rounds: int | None = None, seed: int | None = None) -> None:
        self.num_clients = num_clients
        self.model = model
        self.options = options
        self.seed = seed
        """The run's seed, which draws the uniform and weighted download choices (None: the run's, which a run fills,
        :func:`_bind`; 0 outside a run)."""
        self.client_sizes = None if client_sizes is None else tuple(client_sizes)
        self.rounds = rounds
        """The run's rounds (None: unknown, refused by the scheduler; a run fills them, :func:`_bind`)."""
        self.decay_rounds = None if rounds is None else int(options.schedule_share * rounds)
        self.models = ClientParams()
        """client id -> its latest uploaded core model."""
        self.relations: dict[int, torch.Tensor] = {}
        """client id -> its latest p_i (float64, on the CPU)."""
        self.sent: dict[int, set[int]] = {}
        """sent[i]: the clients whose core models were sent to client i at least once (absent: none). Only those: an N x N
        matrix was 100 MB at 10,000 clients, in memory and in every checkpoint."""

    def client_half(self) -> ClientHalf:
        return APPLEClient(self.model, self.num_clients, self.options.p_lr, self.options.p_momentum)

    def proximal_weight(self, round: int) -> float:
        """What the client's ||p_i - p_i^0||^2 is multiplied by: lambda(r) mu, or lambda(r) mu / 2 (``proximal = "half"``)."""
        if self.decay_rounds is None:
            raise ValueError("APPLE's loss scheduler needs the run's rounds (APPLE(..., rounds=...), make_aggregator(..., rounds=...))")
        half = 0.5 if self.options.proximal == "half" else 1.0
        return half * self.options.mu * loss_scheduler(round, self.decay_rounds, self.options.scheduler)

    def start_relations(self) -> torch.Tensor:
        """p^0 (float64)."""
        return initial_relations(self.num_clients, self.client_sizes, self.options.p0)

    def choose(self, client_id: int, round: int) -> list[int]:
        """The clients whose core models ``client_id`` is sent this round (:func:`choose_downloads`)."""
        o = self.options
        candidates = [j for j in sorted(self.models) if j != client_id]
        got = self.sent.get(client_id, set())
        never = {j for j in candidates if j not in got}
        relations = self.relations.get(client_id, self.start_relations())
        base = download_base(round, o.downloads or 0, self.num_clients, o.threshold, o.growth)
        generator = torch.Generator().manual_seed(derive_seed(instance_seed(self.seed), "apple", round, client_id))
        return choose_downloads(candidates, never, relations, o.downloads, base, generator, o.selection)

    def downlink(self, client_id: int, round: int, global_params: Params) -> Downlink:
        """lambda(r) mu, p^0 (local to a client that has trained: it keeps it), the chosen core models and their ids; the
        global model held (unpriced) when the client reads it nowhere (:meth:`reads_global`)."""
        like = next(iter(global_params.values()))
        context: dict[str, Wire] = {PROX: self.proximal_weight(round), P0: self.start_relations().to(like.device, like.dtype)}
        chosen = self.choose(client_id, round)
        if chosen:
            context[IDS] = torch.tensor(chosen, dtype=torch.int32)
            context.update({f"{MODEL}{k}": {n: v.to(like.device) for n, v in self.models[j].items()} for k, j in enumerate(chosen)})
        returning = client_id in self.models
        held = () if self.reads_global(client_id, chosen) else tuple(global_params)
        return Downlink(context=context, local=(P0,) if returning else (), held=held)

    def reads_global(self, client_id: int, chosen: Collection[int]) -> bool:
        """Whether the client reads the global model this round: it has no core model yet (theta_i starts from it), or
        some other client's slot is one it holds no copy of after this downlink (:func:`fill`). Its own slot is filled too,
        but its weight in the mixture is 0 (``combine``'s ``p (1 - own)``), so its value is never read."""
        if client_id not in self.models:
            return True
        holds = self.sent.get(client_id, set()) | set(chosen)
        return any(j not in holds for j in range(self.num_clients) if j != client_id)

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int) -> Params:
        for r in results:
            self.models[r.client_id] = r.params  # a copy, flat on the CPU until it is read
            ids, p = r.report.get(IDS), r.report.get(P)
            if isinstance(ids, torch.Tensor) and len(ids):
                self.sent.setdefault(r.client_id, set()).update(int(j) for j in ids.tolist())
            if isinstance(p, torch.Tensor):
                self.relations[r.client_id] = p.detach().to("cpu", torch.float64).clone()
        return weighted_average([r.params for r in results], client_weights(results, self.options.weighting))

    def state_dict(self) -> dict[str, Any]:
        """Every client's latest core model and DR vector, and which models each client was sent ((client, sent) pairs)."""
        return {
            "models": client_params_state({cid: self.models[cid] for cid in sorted(self.models)}),
            "relations": {str(cid): self.relations[cid] for cid in sorted(self.relations)},
            "sent": torch.tensor(sorted((i, j) for i, got in self.sent.items() for j in got), dtype=torch.int64).reshape(-1, 2),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        check_state_keys(state, ("models", "relations", "sent"), "APPLE")
        self.models = ClientParams.of(load_client_params(state["models"]))
        relations = state["relations"]
        if not isinstance(relations, Mapping) or not all(isinstance(v, torch.Tensor) and v.shape == (self.num_clients,) for v in relations.values()):
            raise ValueError(f"APPLE relations must map client ids to ({self.num_clients},) tensors")
        self.relations = {int(cid): v.to("cpu", torch.float64).clone() for cid, v in relations.items()}
        sent = state["sent"]
        if not isinstance(sent, torch.Tensor) or sent.dim() != 2 or sent.shape[1] != 2 or sent.dtype != torch.int64:
            # a checkpoint before 2026-12-05 held an N x N bool matrix
            raise ValueError("APPLE sent must be a (P, 2) int64 tensor of (client, client sent) pairs (an N x N matrix is the layout of checkpoints before 2026-12-05: resume it with that version)")
        self.sent = {}
        for i, j in sent.tolist():
            self.sent.setdefault(int(i), set()).add(int(j))


def build(options: APPLEOptions, ctx: BuildContext) -> Built:
    """The server with the run's client sizes (p^0) and rounds (the scheduler's L).

    Refused at once when the clients' banks would not fit in memory: every client that has trained keeps a bank of
    all N core models (float32), N^2 models in all by the end of a run, which suits cross-silo federations (the
    paper's 12 clients) and not 1,000 clients of a large model; without this it failed rounds later, in the allocator.
    """
    trainable = sum(p.numel() for p in ctx.model.parameters() if p.requires_grad)
    require_memory(4.0 * trainable * ctx.num_clients**2, "federation.num_clients",
                   f"APPLE keeps, for each of the {ctx.num_clients} clients, a bank of every client's core model ({trainable:,} parameters each)")
    return APPLE(ctx.num_clients, ctx.model, options, ctx.client_sizes, ctx.rounds, ctx.seed), []


def _bind(aggregator: APPLE, ctx: BuildContext) -> None:
    """An instance passed from Python, bound as the builder builds one: its ``num_clients`` the run's (the banks and p_i's
    size), and its ``rounds`` (the scheduler's L), ``client_sizes`` (p^0) and ``seed`` (the download draws) the run's where
    None; another value is refused on ``aggregator.<argument>`` (without rounds it failed in round 0; with seed 0 every
    seed of a run drew the same downloads)."""
    aggregator.num_clients = run_value(aggregator.num_clients, ctx.num_clients, instance_field(ctx, "num_clients"), "federation.num_clients")
    aggregator.client_sizes = run_value(aggregator.client_sizes, ctx.client_sizes, instance_field(ctx, "client_sizes"), "clients' training rows")
    aggregator.rounds = run_value(aggregator.rounds, ctx.rounds, instance_field(ctx, "rounds"), "federation.rounds")
    aggregator.seed = run_value(aggregator.seed, ctx.seed, instance_field(ctx, "seed"), "seed")
    if aggregator.rounds is not None:
        aggregator.decay_rounds = int(aggregator.options.schedule_share * aggregator.rounds)


MIXTURE_FLOPS = 36.0
"""What a pass of the mixture costs beyond the model's, per parameter of the model and per client of the federation, in FLOPs at
the model's training throughput: the forward's sum_j p_ij theta_j and the backward's <g, theta_j> read every (N, ...) stack, and
the work is bound by that memory, not the 4 FLOPs. Measured 2026-12-02 on the 2-vCPU AVX2 machine (``benchmarks/estimates.py``,
FLex&Chill CNN on digits, 28,586 parameters): 2.0 ms more than FedAvg a pass with 20 clients, 6.2 ms with 60; the MLP (4,810), 0.8 ms
with 20; with :data:`~chillfl.capabilities.PARAMETER_TERM` for the calls a parameter tensor, 36 fits all three within 25 %."""
COST = Cost(pass_overhead=PARAMETER_TERM, step_parameter_flops=MIXTURE_FLOPS)
"""Each local pass mixes the N core models (:func:`combine` on every parameter tensor): :data:`MIXTURE_FLOPS` a parameter and a client."""


SPEC = register_algorithm(
    "apple",
    AlgorithmSpec(
        APPLEOptions,
        build,
        "each client learns how much to take from every client's core model (Luo & Wu 2022)",
        capabilities=Capabilities(
            private_steps="not audited: its one training also moves the client's kept p_i, whose per-sample gradients would be clipped together with theta_i's",
            not_a_base="APPLE's clients run their own mixture training, which PA3Fed's client half does not compose with",
            personal_model=True,
            trains_from_own_start="from its second round each client trains the core model it keeps (theta_i), not the model it is sent",
            reports="each client's directed-relationship vector p_i, learnt from its data",
            cost=COST,
        ),
        makes=(APPLE,),
        bind=_bind,
    ),
)
