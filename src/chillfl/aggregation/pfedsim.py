"""pFedSim (Tan, Zhou, Liu, Wang & Yu, arXiv 2305.15706, 2023): feature extractors averaged among clients of similar classifiers.

The model is a feature extractor theta and a classifier (head) phi. For the
first R_w rounds (the warm-up) the run is FedAvg: the clients train the
global model, the server averages it. From round R_w on each client keeps its
own classifier phi_i, and the server, which holds every client's latest
upload, measures how alike two clients' data are by how alike their
classifiers are (the rows of phi's weight matrix W, one a class)::

    s_ij = max(0, (1/C) sum_c cos(W_i[c], W_j[c]))              (i != j; s_ii := 0.9999)

turns each similarity into an aggregation weight that grows without bound as
the classifiers align, and normalises the weights over the clients it holds::

    p_ij = -log(1 - s_ij) / sum_k -log(1 - s_ik)

and sends client i its personalised extractor::

    theta_i = sum_j p_ij theta_j

which it trains together with its own classifier phi_i (the model it uploads,
and the one local accuracy measures). A client no other client is similar to
(s_ij = 0 for every j) gets its own extractor back: p_ii = 1. The weights are
those of the authors' code (the first author's FL-bench, ``pfedsim.py``):
the self-similarity 0.9999 gives a client weight -log(1e-4) = 9.21 on its
own extractor, against 0.69 for a client with s = 0.5 and 2.30 for s = 0.9.
Only the paper's abstract was at hand when this was written: the equations
are those of the authors' code, which the paper's first author maintains.

Choices
-------
* Warm-up: ``warmup`` is FL-bench's ``warmup_round``: a share of
  ``federation.rounds`` when <= 1 (int(warmup * rounds); default 0.5), else a
  whole number of rounds (< ``federation.rounds``).
* Which pairs: s_ij is measured for every pair of clients trained in the same
  personalised round, from their uploads of that round, and kept until both
  train together again (the authors' matrix, initially no similarity: so in
  the first personalised round every client trains the global model). The
  extractor averages over every client the server holds a personalised-phase
  upload of (its latest); one it never compared with i has p_ij = 0.
* ``similarity = "rows"``: the authors' mean over classes of the rows'
  cosine, on the classifier's weight matrix (the last parameter of the head
  with two or more dimensions; its bias is not read). ``"flat"``: the cosine
  of the whole head flattened (weights, biases, any floating buffers; in
  name order) into one vector; also
  what ``"rows"`` reads of a head without a weight matrix (a model whose last
  parameterised layer is a batch norm).
* ``transform = "log"``: the authors' -log(1 - s). ``"linear"``: p_ij
  proportional to s_ij itself (a plain similarity-weighted mean). In both,
  s_ij is clipped into [0, ``self_similarity``]: two identical classifiers
  (s = 1, an infinite log weight in the authors' code) weigh as much as the
  client itself.
* The head is the classifier head and the ``head_layers - 1`` parameterised modules
  before it (FedPer's ``head_layers``, :func:`~chillfl.aggregation.fedper.head_keys`; default 1, the classifier), parameters and buffers. The
  extractor is every other entry: the floating ones (parameters, batch-norm
  statistics) averaged in float64 and cast back; integer ones (batch-norm's
  step counts) are client i's own.
* The client keeps its whole trained model (its personal model, which
  ``checkpoint.client_models`` saves); from its second personalised round it
  puts its own head in place of the global one, and the downlink prices only
  the extractor it is sent (``Downlink.held``). The server's copy of the
  head, from the upload, is read for the similarities, and rides in the
  downlink's ``params`` unpriced (held) so that what the round's clients
  started from is read right where a wrapper asks (an attack's
  update ``w_i - start_i``, :class:`~chillfl.aggregation.base.SentStarts`):
  the global head there counted the gap to it as the client's update.
* The global model (``global_acc``, and by default the start of a client the
  server holds no personalised upload of) is the FedAvg (n_i / n; ``weighting =
  "uniform"``: the plain mean) of the round's uploads, extractors and heads:
  pFedSim itself has none after the warm-up. FL-bench stops aggregating at the
  warm-up's end, and a client's first personalised round starts from that
  model (every client's personal parameters are set to it); ``start =
  "warmup"`` does so (the global model at the first personalised round: the
  warm-up's last FedAvg, or the initial model without a warm-up, kept by the
  server). Under full participation the two are the same.
* FL-bench aggregates the parameters only (buffers follow its ``buffers``
  setting); here the extractor's batch-norm statistics are averaged too.

Checked against FL-bench (KarhouTam/FL-bench ``src/server/pfedsim.py``:
``__init__``'s warm-up, ``train``, ``get_client_model_params``,
``update_weight_matrix``): the warm-up count, the rows' cosine of
``classifier.weight`` clipped at 0, the pairs of the round, the 0.9999 self
weight, -log(1 - s) normalised, the extractor (every non-classifier
parameter) and the client's own classifier agree; the differences are the
choices above. (KarhouTam/pFedSim itself was not at hand.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Collection, Literal, Mapping, Sequence

import torch
from torch import nn

from chillfl.aggregation.base import (
    AggregatorBase,
    ClientHalf,
    ClientResult,
    ClientState,
    Context,
    Downlink,
    PairValues,
    Params,
    Report,
    Trained,
    Wire,
    check_state_keys,
    client_params_state,
    client_weights,
    load_client_params,
    load_pair_values,
    load_params,
    own_entries,
    pair_values_state,
    params_state,
    weighted_average,
    with_prefix,
)
from chillfl.aggregation.client_states import ClientParams
from chillfl.aggregation.fedper import head_keys
from chillfl.aggregation.registry import AlgorithmSpec, BuildContext, Built, instance_field, register_algorithm
from chillfl.capabilities import Capabilities
from chillfl.engine.record import Json
from chillfl.errors import ConfigError
from chillfl.options import require
from chillfl.training.local import persistent_buffers

if TYPE_CHECKING:
    from chillfl.config import RunConfig


@dataclass(frozen=True)
class PFedSimOptions:
    """``warmup``: FedAvg rounds first (a share of the rounds when <= 1, else a count; FL-bench's 0.5); the similarity and its weights."""

    warmup: float = 0.5
    head_layers: int = 1
    similarity: Literal["rows", "flat"] = "rows"
    transform: Literal["log", "linear"] = "log"
    self_similarity: float = 0.9999
    weighting: Literal["samples", "uniform"] = "samples"
    start: Literal["global", "warmup"] = "global"
    """Where a client's first personalised round starts: the round's global model, or the warm-up's last (FL-bench)."""

    def validate(self, section: str) -> None:
        require(self.warmup >= 0, f"{section}.warmup", f"must be >= 0, got {self.warmup}")
        require(self.warmup <= 1 or float(self.warmup).is_integer(), f"{section}.warmup", f"must be a share in [0, 1] or a whole number of rounds, got {self.warmup}")
        require(self.head_layers >= 1, f"{section}.head_layers", f"must be >= 1, got {self.head_layers}")
        require(0 < self.self_similarity < 1, f"{section}.self_similarity", f"must be in (0, 1), got {self.self_similarity}")


PREFIX = "pfedsim.model."
"""Where the client's trained model lives in its state."""
PERSONAL = "pfedsim_personal"
"""Context flag (1.0) of a personalised round: the client puts its own head in and keeps its trained model."""
EPS = 1e-8
"""Norms below this count as this in a cosine (torch's ``cosine_similarity`` default): a zero vector is similar to nothing."""


def warmup_rounds(warmup: float, rounds: int) -> int:
    """R_w: int(warmup * rounds) for a share <= 1, else the count itself (FL-bench's ``warmup_round``)."""
    return int(rounds * warmup) if warmup <= 1 else int(warmup)


def cosine(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Row-wise cosine of two 2-D tensors in float64 (each norm at least :data:`EPS`)."""
    a, b = a.double(), b.double()
    na = torch.linalg.vector_norm(a, dim=-1).clamp_min(EPS)
    nb = torch.linalg.vector_norm(b, dim=-1).clamp_min(EPS)
    return (a * b).sum(-1) / (na * nb)


def similarity(head_i: Params, head_j: Params, weight_key: str, mode: Literal["rows", "flat"]) -> float:
    """s_ij = max(0, cos): the mean of the rows' cosines of the weight matrix (``rows``), or of the flattened heads (``flat``)."""
    if mode == "rows":
        wi, wj = head_i[weight_key], head_j[weight_key]
        s = float(cosine(wi.reshape(wi.shape[0], -1), wj.reshape(wj.shape[0], -1)).mean())
    else:
        keys = sorted(k for k in head_i if torch.is_floating_point(head_i[k]))  # no step counts
        flat_i = torch.cat([head_i[k].reshape(-1).double() for k in keys])
        flat_j = torch.cat([head_j[k].reshape(-1).double() for k in keys])
        s = float(cosine(flat_i[None], flat_j[None])[0])
    return max(0.0, s)


def weights(others: Sequence[float], self_similarity: float, transform: Literal["log", "linear"]) -> list[float]:
    """(p_ii, p_ij for each of ``others``): each s clipped into [0, self_similarity], -log(1 - s) or s, normalised."""
    sims = [self_similarity, *(min(max(s, 0.0), self_similarity) for s in others)]
    raw = [-math.log1p(-s) for s in sims] if transform == "log" else sims
    total = math.fsum(raw)
    return [r / total for r in raw]


def extractor(models: Sequence[Params], coefs: Sequence[float], keys: Sequence[str]) -> Params:
    """theta_i = sum_j p_ij theta_j on ``keys`` (client i's model first): floating entries in float64, cast back; the others i's own."""
    out: Params = {}
    for k in keys:
        own = models[0][k]
        if not torch.is_floating_point(own):
            out[k] = own
            continue
        acc = torch.zeros_like(own, dtype=torch.float64)
        for c, m in zip(coefs, models):
            acc.add_(m[k], alpha=c)
        out[k] = acc.to(own.dtype)
    return out


@dataclass(frozen=True)
class PFedSimClient:
    """pFedSim's client half: in a personalised round it trains with its own head (once it has one) and keeps its trained model."""

    head: frozenset[str]

    def prepare(self, state: ClientState, start: Params, context: Context) -> tuple[Params, dict[str, Wire]]:
        ctx = dict(context)
        personal = ctx.pop(PERSONAL, 0.0)
        own = own_entries(state, PREFIX)
        if personal and own:
            start = {**start, **{k: v for k, v in own.items() if k in self.head}}
        return start, ctx

    def finish(self, model: nn.Module, state: ClientState, trained: Trained) -> tuple[ClientState, Report]:
        if not trained.sent.get(PERSONAL):
            return {}, {}  # warm-up: FedAvg's client keeps nothing
        return with_prefix(trained.params, PREFIX), {}

    def personal_model(self, state: ClientState, global_model: Params) -> Params:
        """The client's model after its last personalised training (every entry); the global model before it has one."""
        own = own_entries(state, PREFIX)
        return own or dict(global_model)


class PFedSim(AggregatorBase):
    """FedAvg for the warm-up; then each client's personalised extractor from the similarities of the clients' heads."""

    def __init__(self, num_clients: int, keys: Sequence[str], head: Collection[str], weight_key: str, warmup: int | None,
                 options: PFedSimOptions = PFedSimOptions()) -> None:
        self.head = tuple(k for k in keys if k in set(head))
        self.body = tuple(k for k in keys if k not in set(head))
        self.unknown_head = tuple(sorted(set(head) - set(keys)))
        """Head names ``keys`` lacks (a typo, a tied weight's second name): left out of the head, refused by a run's bind."""
        self.weight_key = weight_key
        self.warmup = warmup
        """R_w (None: the run's rounds were unknown when built, and ``warmup`` is a share of them)."""
        self.options = options
        self.models = ClientParams()
        """client id -> its latest personalised-phase upload (every entry)."""
        self.sim: PairValues = {}
        """s_ij for the pairs trained in one personalised round, keyed (min, max) (absent: never compared, 0). Only the
        pairs compared: a dense N x N matrix was 800 MB at 10,000 clients, in memory and in every checkpoint."""
        self.warm: Params | None = None
        """``start = "warmup"``: the global model at the first personalised round (on the CPU), every newcomer's start."""
        self._metrics: dict[str, Json] = {}

    def client_half(self) -> ClientHalf:
        return PFedSimClient(frozenset(self.head))

    def warming(self, round: int) -> bool:
        """Whether ``round`` is one of the FedAvg warm-up's."""
        if self.warmup is None:
            raise ValueError("pFedSim's warmup is a share of the run's rounds, which it was built without: build it with BuildContext.rounds")
        return round < self.warmup

    def coefficients(self, client_id: int) -> tuple[list[int], list[float]]:
        """The clients held (i first) and p_ij for each."""
        held = [client_id, *(j for j in sorted(self.models) if j != client_id)]
        o = self.options
        return held, weights([self.similarity_of(client_id, j) for j in held[1:]], o.self_similarity, o.transform)

    def similarity_of(self, i: int, j: int) -> float:
        """s_ij = s_ji as last measured (0: never trained in one personalised round)."""
        return self.sim.get(pair(i, j), 0.0)

    def personalised(self, client_id: int, global_params: Params) -> Params:
        """theta_i over the clients held (i's model must be held), with i's own head (its last upload): the model it
        starts from, its head held (its client half puts its own in, so the downlink prices only the extractor)."""
        held, coefs = self.coefficients(client_id)
        models = [_on(self.models[j], global_params) for j in held]  # held[0] is i: its head is models[0]'s
        return {**extractor(models, coefs, self.body), **{k: models[0][k] for k in self.head}}

    def downlink(self, client_id: int, round: int, global_params: Params) -> Downlink:
        if self.warming(round):
            return Downlink()
        if client_id not in self.models:  # no head of its own yet: it trains the global model (or the warm-up's)
            if self.options.start == "global":
                return Downlink(context={PERSONAL: 1.0})
            if self.warm is None:
                self.warm = {k: v.detach().to("cpu", copy=True) for k, v in global_params.items()}
            return Downlink(params=_on(self.warm, global_params), context={PERSONAL: 1.0})
        return Downlink(params=self.personalised(client_id, global_params), context={PERSONAL: 1.0}, held=self.head)

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int) -> Params:
        if not self.warming(round):
            for r in results:
                self.models[r.client_id] = r.params  # a copy, flat on the CPU until read
            sims = []
            for a, ra in enumerate(results):
                for rb in results[a + 1:]:
                    s = similarity({k: ra.params[k] for k in self.head}, {k: rb.params[k] for k in self.head}, self.weight_key, self.options.similarity)
                    self.sim[pair(ra.client_id, rb.client_id)] = s
                    sims.append(s)
            self._metrics = {"similarity": math.fsum(sims) / len(sims)} if sims else {}
        return weighted_average([r.params for r in results], client_weights(results, self.options.weighting))

    def round_metrics(self) -> Mapping[str, Json]:
        """The mean s_ij over the pairs of the round's clients (personalised rounds only)."""
        return dict(self._metrics)

    def state_dict(self) -> dict[str, Any]:
        """Every client's latest personalised upload, the similarity matrix (and, once kept, the warm-up's model)."""
        state: dict[str, Any] = {"models": client_params_state({cid: self.models[cid] for cid in sorted(self.models)}), "sim": pair_values_state(self.sim)}
        if self.warm is not None:
            state["warm"] = params_state(self.warm)
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        check_state_keys(state, ("models", "sim", "warm") if "warm" in state else ("models", "sim"), "pFedSim")
        self.warm = load_params(state["warm"]) if "warm" in state else None
        self.sim = load_pair_values(state["sim"], "pFedSim similarities")
        self.models = ClientParams.of(load_client_params(state["models"]))


def pair(i: int, j: int) -> tuple[int, int]:
    """The key of s_ij = s_ji."""
    return (i, j) if i < j else (j, i)


def _on(params: Params, like: Params) -> Params:
    """``params`` on the device of the run's model (a checkpoint may have brought them back on another)."""
    device = next(iter(like.values())).device
    return {k: v.to(device) for k, v in params.items()}


def classifier_weight(model: nn.Module, head: Sequence[str]) -> str | None:
    """The head's last parameter with two or more dimensions (the classifier's weight matrix, one row a class); None: it has none."""
    params = dict(model.named_parameters())
    found = [k for k in head if k in params and params[k].dim() >= 2]
    return found[-1] if found else None


def _build(options: PFedSimOptions, ctx: BuildContext) -> Built:
    head = head_keys(ctx.model, options.head_layers, f"{ctx.section}.head_layers")
    weight_key = classifier_weight(ctx.model, head) if options.similarity == "rows" else None
    if weight_key is None:  # "flat", or a head without a weight matrix (a last batch-norm layer): the flattened head
        options = replace(options, similarity="flat")
    rounds = None if ctx.rounds is None else warmup_rounds(options.warmup, ctx.rounds)
    if options.warmup > 1 and rounds is None:
        rounds = int(options.warmup)
    # the run's state's names (model_state): state_dict() repeats a tied tensor under every alias, which no upload has
    return PFedSim(ctx.num_clients, state_keys(ctx.model), head, weight_key or "", rounds, options), []


def state_keys(model: nn.Module) -> list[str]:
    """The entries a client sends: parameters (a tied one once, under its first name) and persistent buffers, in order."""
    return [n for n, _ in model.named_parameters()] + [n for n, _ in persistent_buffers(model)]


def _check(options: PFedSimOptions, config: RunConfig, section: str) -> None:
    """A warm-up leaves at least one personalised round, given as a count of rounds (FL-bench: 1 < warmup < rounds) or as a
    share (``warmup = 1``, read as the whole run, was a run of FedAvg with nothing said)."""
    rounds = config.federation.rounds
    require(options.warmup <= 1 or options.warmup < rounds, f"{section}.warmup", f"must be < federation.rounds ({rounds}) as a count of rounds, got {options.warmup}")
    require(options.warmup > 1 or warmup_rounds(options.warmup, rounds) < rounds, f"{section}.warmup",
            f"a share <= 1 of the run's {rounds} rounds: {options.warmup} leaves no personalised round (every round is warm-up, FedAvg); "
            "give a smaller share, or a count of rounds > 1")


def warmup_option(count: int, rounds: int) -> float:
    """The ``warmup`` option that gives ``count`` warm-up rounds of ``rounds`` (:func:`warmup_rounds`): a count when it is
    more than 1, else a share (1.5 / rounds: int(1.5) rounds, far from a rounding edge), 0 for none."""
    return float(count) if count > 1 else 1.5 / rounds if count == 1 else 0.0


def _bind(aggregator: PFedSim, ctx: BuildContext) -> None:
    """An instance passed from Python runs the warm-up it was built with (its positional ``warmup``: R_w rounds), which
    its options must say, as the run records its options and not the count: None takes the options' share of the run's
    rounds, as the builder does; a count outside [0, rounds), or one the options give otherwise, is refused on
    ``aggregator.warmup`` (the options were validated first, :func:`~chillfl.aggregation.registry.bind_instance`), as
    FedPHP's H is. Why not rewrite the options to the count: the record kept the caller's, so it said another warm-up.
    Its keys must name entries the clients send (:func:`state_keys`): ``state_dict()``'s, which repeat a tied weight
    under its second name, failed mid-run with a KeyError; refused on ``aggregator.keys``."""
    if unknown := sorted({*aggregator.head, *aggregator.body} - set(state_keys(ctx.model))):
        raise ConfigError(instance_field(ctx, "keys"), f"names entries the clients do not send, {_names(unknown)} (a tied weight's second "
                                                       "name from state_dict(), or a typo): pass chillfl.aggregation.pfedsim.state_keys(model)")
    if aggregator.unknown_head or not aggregator.head:
        what = f"names entries its keys lack, {_names(list(aggregator.unknown_head))}" if aggregator.unknown_head else "is empty"
        raise ConfigError(instance_field(ctx, "head"), f"{what}: the head whose similarities weight the clients must be entries of the "
                                                       "model's state (chillfl.aggregation.fedper.head_keys(model, 1) is the classifier)")
    if aggregator.options.similarity == "rows" and aggregator.weight_key not in aggregator.head:
        raise ConfigError(instance_field(ctx, "weight_key"), f"must be the head's weight matrix under similarity = 'rows', one of "
                                                             f"{_names(list(aggregator.head))}, got {aggregator.weight_key!r} "
                                                             "(chillfl.aggregation.pfedsim.classifier_weight(model, head))")
    rounds = ctx.rounds
    if rounds is None:
        return
    said = warmup_rounds(aggregator.options.warmup, rounds)
    if aggregator.warmup is None:
        aggregator.warmup = said
        return
    if said != aggregator.warmup:  # where the options say it, the spec's check names them
        require(0 <= aggregator.warmup < rounds, instance_field(ctx, "warmup"),
                f"must leave a personalised round: a count of warm-up rounds in [0, federation.rounds = {rounds}), got {aggregator.warmup}")
    require(said == aggregator.warmup, instance_field(ctx, "warmup"),
            f"must be the warm-up its options say, {ctx.section}.warmup = {aggregator.options.warmup} of federation.rounds = {rounds}: "
            f"{said} round(s), got {aggregator.warmup}; set PFedSimOptions(warmup={warmup_option(aggregator.warmup, rounds)!r}) "
            "for that count, or pass warmup=None (the options')")


def _names(names: Sequence[str]) -> str:
    return ", ".join(map(repr, names[:3])) + (" and more" if len(names) > 3 else "")


SPEC = register_algorithm(
    "pfedsim",
    AlgorithmSpec(
        PFedSimOptions,
        _build,
        "feature extractors averaged among clients of similar classifiers (Tan et al. 2023)",
        capabilities=Capabilities(not_a_base="pFedSim's server sends each client its own extractor; its global model is only a reference", personal_model=True,
                                  trains_from_own_start="after its warm-up each client trains from its start with the head it keeps swapped in, not the model it is sent"),
        check=_check,
        makes=(PFedSim,),  # an instance passed from Python meets this spec's checks (check_instance)
        bind=_bind,
    ),
)
