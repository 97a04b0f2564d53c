"""pFedHN (Shamsian, Navon, Fetaya & Chechik, ICML 2021): a server-side hypernetwork generates each client's model.

The server holds a hypernetwork h(v; phi): a learned embedding v_i per client
(a row of the table E, part of the server's parameters) and an MLP phi whose
output is the client model's parameters. A sampled client i is sent::

    theta_i = h(v_i; phi)

trains it with the run's local training (k steps) to theta~_i and uploads it;
the server forms the update the client made and moves phi and v_i by the
chain rule (Algorithm 1)::

    delta_i = theta_i - theta~_i                                  (``sign = "descent"``)
    phi    <- phi - alpha (d theta_i / d phi)^T delta_i
    v_i    <- v_i - alpha (d theta_i / d v_i)^T delta_i

delta_i stands in for the local loss's gradient at theta_i, so the step
descends sum_i L_i(h(v_i; phi)) through the hypernetwork. With
pFedHN-PC (``variant = "pc"``) h generates every parameter but the classifier
head's; each client keeps its own head, trains it with the body, and never
sends it.

The hypernetwork (the authors' ``CNNHyper`` for any model: one linear output
per parameter tensor, as theirs has for each tensor of their LeNet)::

    f = W_L(... ReLU(W_1 ReLU(W_0 v + b_0) + b_1) ...) + b_L     (hidden_layers + 1 linear layers, ``hidden`` wide)
    theta[k] = reshape(U_k f + c_k, shape of tensor k)

Checked against the authors' AvivSham/pFedHN (``experiments/pfedhn/models.py``'s
``CNNHyper``: embedding, n_hidden + 1 linear layers with ReLU between and none
after, one linear output per tensor; ``experiments/pfedhn/trainer.py``:
delta = inner_state - final_state, ``autograd.grad(weights, hnet.parameters(),
grad_outputs=delta)``, clip at 50, SGD momentum 0.9, wd 1e-3, embed_lr) and
FL-bench (``pfedhn.py``): the server side. The client is the run's own local
training; the authors' (``--inner-steps 50`` at ``--inner-lr 5e-3``, batch 64,
SGD momentum 0.9, wd 5e-5, the gradient clipped at 50 every step) sets the
displacement their ``server_lr = 0.01`` is tuned to, and docs/personalised.md
(pFedHN) names the ``client.*`` config nearest it.

Choices
-------
* The sign: Algorithm 1 prints delta_i = theta~_i - theta_i with the step
  phi <- phi - alpha grad_phi theta_i^T delta_i, which read literally moves
  theta_i away from what the client learnt; the authors' code
  (``experiments/pfedhn/trainer.py``) and FL-bench use theta_i - theta~_i with
  a descent step. ``sign = "descent"`` (default) is the code's;
  ``"as_printed"`` is the printed formula, for the record.
* The server step: the paper's is plain SGD at rate alpha. The authors' code
  (whose numbers the paper reports) uses ``torch.optim.SGD`` with momentum
  0.9 and weight decay 1e-3 over the MLP and the embedding table (decay and
  momentum then move every row of E, not only v_i), and clips the gradient's
  norm at 50 over all of them first; those are the defaults here:
  ``server_lr = 0.01``, ``embedding_lr`` (None: ``server_lr``),
  ``momentum = 0.9``, ``weight_decay = 1e-3``, ``clip_norm = 50`` (0: no
  clip). ``momentum = 0, weight_decay = 0, clip_norm = 0`` is Algorithm 1's
  plain step. The clip scales by C / ||g|| (torch adds 1e-6 to the norm).
* Several clients a round: Algorithm 1 samples one client a step. Here each
  of a round's clients was sent h(v_i; phi_t) from the same phi_t, and the
  server takes one step per client, in client-id order, with
  g_i = J_i(phi_t)^T delta_i (``server_steps = "each"``, default: as
  FL-bench, which trains a round's clients one after the other; with one
  client a round it is Algorithm 1 exactly). The Jacobian is the one at
  phi_t, which made what client i trained from; decay and momentum act on
  the current parameters. ``"mean"``: one step on the plain mean of the g_i.
* Sizes: ``embed_dim = 0`` is the authors' int(1 + n / 4) for n clients;
  ``hidden = 100``, ``hidden_layers = 3`` (their trainer's defaults). The
  output layers hold hidden x (model parameters) weights: 2.9 M for
  flexchill_cnn, on the host.
* Initialisation: nn.Linear's and nn.Embedding's default distributions
  (weights and biases U(-1/sqrt(fan_in), 1/sqrt(fan_in)); embeddings N(0, 1)),
  drawn from a generator seeded with (run seed, "pfedhn-init"), so a run is
  reproducible without touching torch's global stream. The hypernetwork
  lives on the host in the model's dtype; its output goes to the run's device.
* Buffers (batch-norm statistics) and the model's frozen weights
  (``requires_grad = False``) are not generated: they are the global
  model's, the FedAvg (n_i / n) of the round's uploads; under pFedHN-PC the
  head's are the client's own with the head.
* The global model (global accuracy, ``model.safetensors``, the start of
  every entry h does not generate) is h at the mean embedding,
  h(mean_j v_j; phi), over every client's row of E (the paper defines none;
  its new clients learn an embedding of their own). Under pFedHN-PC its head
  is the model's initial one (no head leaves a client): read local accuracy.
* Local accuracy measures each client's theta~_i: the model it was sent,
  after the round's training (and, under PC, its own head). The authors
  evaluate h(v_i; phi) untrained. A client keeps nothing between rounds but,
  under PC, its head; its model is regenerated each round.
  ``checkpoint.client_models`` writes, for each client that took part, its
  h(v_i; phi) at the run's end (the server makes it from v_i: the client
  keeps nothing), under pFedHN-PC with the head the client keeps.
* Bytes: the downlink is the client's generated theta_i, whole, every round
  (``Downlink.params``); the uplink is theta~_i (the server reads all of it;
  under PC the body only: the head stays on the client). The hypernetwork
  never travels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Collection, Literal, Mapping, Sequence

import torch
from torch import nn
from torch.nn import functional as F

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
    client_weights,
    load_params,
    own_entries,
    params_state,
    same_params,
    weighted_average,
    with_prefix,
)
from chillfl.aggregation.registry import AlgorithmSpec, BuildContext, Built, instance_field, register_algorithm, require_head, run_value
from chillfl.capabilities import Capabilities, Cost
from chillfl.engine.record import Json
from chillfl.errors import ConfigError
from chillfl.options import Scale, require
from chillfl.seeds import derive_seed, instance_seed


@dataclass(frozen=True)
class PFedHNOptions:
    """Hypernetwork: ``embed_dim`` (0: int(1 + n/4)), ``hidden``, ``hidden_layers``; server SGD: ``server_lr``, ``embedding_lr``,
    ``momentum``, ``weight_decay``, ``clip_norm``; ``sign``, ``server_steps``; ``variant``: full or pc (the client keeps its head).
    ``max_params``: the most parameters the hypernetwork may hold (its output layers alone hold ``hidden`` x the model's
    generated entries: 2.9 M for the digits CNN, 1.1 billion for ResNet-18, which with momentum and gradients would not fit
    a laptop); a larger one is a config error before anything is built."""

    variant: Literal["full", "pc"] = "full"
    embed_dim: int = 0
    hidden: int = 100
    hidden_layers: int = 3
    server_lr: float = 0.01
    embedding_lr: float | None = None
    momentum: float = 0.9
    weight_decay: Scale = 1e-3
    clip_norm: float = 50.0
    sign: Literal["descent", "as_printed"] = "descent"
    server_steps: Literal["each", "mean"] = "each"
    max_params: int = 100_000_000

    def validate(self, section: str) -> None:
        require(0 <= self.embed_dim <= 4096, f"{section}.embed_dim", f"must be in [0, 4096] (0: int(1 + clients / 4)), got {self.embed_dim}")
        require(1 <= self.hidden <= 4096, f"{section}.hidden", f"must be in [1, 4096], got {self.hidden}")
        require(0 <= self.hidden_layers <= 16, f"{section}.hidden_layers", f"must be in [0, 16], got {self.hidden_layers}")
        require(self.server_lr > 0, f"{section}.server_lr", f"must be > 0, got {self.server_lr}")
        if self.embedding_lr is not None:
            require(self.embedding_lr >= 0, f"{section}.embedding_lr", f"must be >= 0, got {self.embedding_lr}")
        require(0 <= self.momentum < 1, f"{section}.momentum", f"must be in [0, 1), got {self.momentum}")
        require(self.weight_decay >= 0, f"{section}.weight_decay", f"must be >= 0, got {self.weight_decay}")
        require(self.clip_norm >= 0, f"{section}.clip_norm", f"must be >= 0 (0: no clip), got {self.clip_norm}")
        require(self.max_params >= 1, f"{section}.max_params", f"must be >= 1, got {self.max_params}")


EMBEDDINGS = "embeddings"
"""The hypernetwork's entry holding every client's v_i (one row a client)."""
HEAD = "pfedhn.head."
"""Where a pFedHN-PC client keeps its own head in its state."""


def embedding_size(options: PFedHNOptions, num_clients: int) -> int:
    """``embed_dim``, or the authors' int(1 + n / 4) when it is 0."""
    return options.embed_dim or int(1 + num_clients / 4)


def hypernetwork_size(shapes: Mapping[str, torch.Size], num_clients: int, embed_dim: int, hidden: int, hidden_layers: int) -> int:
    """How many numbers :func:`init_hypernetwork` makes: the embeddings, the MLP's layers and one output layer per generated tensor."""
    widths = [embed_dim] + [hidden] * (hidden_layers + 1)
    mlp = sum(widths[j] * widths[j + 1] + widths[j + 1] for j in range(hidden_layers + 1))
    outputs = sum((hidden + 1) * shape.numel() for shape in shapes.values())
    return num_clients * embed_dim + mlp + outputs


def init_hypernetwork(
    shapes: Mapping[str, torch.Size], num_clients: int, embed_dim: int, hidden: int, hidden_layers: int, seed: int, dtype: torch.dtype = torch.float32
) -> Params:
    """E ~ N(0, 1) and every linear layer's weight and bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)): the torch defaults, from ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    out: Params = {EMBEDDINGS: torch.randn(num_clients, embed_dim, generator=gen, dtype=dtype)}

    def linear(name: str, fan_in: int, fan_out: int) -> None:
        bound = 1 / math.sqrt(fan_in)
        out[f"{name}.weight"] = (torch.rand(fan_out, fan_in, generator=gen, dtype=dtype) * 2 - 1) * bound
        out[f"{name}.bias"] = (torch.rand(fan_out, generator=gen, dtype=dtype) * 2 - 1) * bound

    widths = [embed_dim] + [hidden] * (hidden_layers + 1)
    for j in range(hidden_layers + 1):
        linear(f"mlp.{j}", widths[j], widths[j + 1])
    for key, shape in shapes.items():
        linear(f"out.{key}", hidden, shape.numel())
    return out


def generate(hyper: Mapping[str, torch.Tensor], v: torch.Tensor, shapes: Mapping[str, torch.Size]) -> Params:
    """theta = h(v; phi): the MLP (ReLU between its linear layers, none after the last), then one linear output per tensor."""
    f = v
    j = 0
    while f"mlp.{j}.weight" in hyper:
        if j:
            f = F.relu(f)
        f = F.linear(f, hyper[f"mlp.{j}.weight"], hyper[f"mlp.{j}.bias"])
        j += 1
    return {k: F.linear(f, hyper[f"out.{k}.weight"], hyper[f"out.{k}.bias"]).reshape(shape) for k, shape in shapes.items()}


def chain_rule_gradient(
    hyper: Mapping[str, torch.Tensor], client: int, shapes: Mapping[str, torch.Size], trained: Mapping[str, torch.Tensor], sign: str = "descent"
) -> Params:
    """(d theta_i / d (phi, E))^T delta_i, delta_i = theta_i - theta~_i (``as_printed``: theta~_i - theta_i), theta_i = h(E[client]; phi).

    Differentiated as the scalars ``sum(theta_k * delta_k)`` (delta constant): their backward hands each theta_k
    ``1 * delta_k``, exactly delta_k, so the bits are those of ``grad_outputs=delta``; but a tensor in ``grad_outputs``
    makes torch (2.13) import sympy on its first use, 0.4 s of CPU a pFedHN process.
    """
    leaves = {k: v.detach().requires_grad_(True) for k, v in hyper.items()}
    with torch.enable_grad():
        theta = generate(leaves, leaves[EMBEDDINGS][client], shapes)
        after = {k: trained[k].to(device=theta[k].device, dtype=theta[k].dtype) for k in shapes}
        delta = [theta[k].detach() - after[k] if sign == "descent" else after[k] - theta[k].detach() for k in shapes]
        grads = torch.autograd.grad([(theta[k] * d).sum() for k, d in zip(shapes, delta)], list(leaves.values()))
    return dict(zip(leaves, grads))


def total_norm(grads: Mapping[str, torch.Tensor]) -> float:
    """||g|| over every tensor (the norm of the tensors' norms, as ``clip_grad_norm_``)."""
    return float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads.values()])))


def clipped(grads: Params, clip_norm: float) -> Params:
    """g * C / ||g|| when ||g|| > C > 0; else g as it is."""
    norm = total_norm(grads)
    if clip_norm <= 0 or norm <= clip_norm:
        return grads
    scale = clip_norm / norm
    return {k: g * scale for k, g in grads.items()}


def accumulate(total: Params, g: Mapping[str, torch.Tensor]) -> Params:
    """``total + g`` entry by entry (``g`` itself first): a running sum in client order, the same bits as summing a list."""
    if not total:
        return dict(g)
    return {k: total[k] + g[k] for k in total}


@dataclass(frozen=True)
class KeepHead:
    """pFedHN-PC's client half: its own head (the initial one before its first round) completes the body it is sent; it keeps the trained head."""

    keys: frozenset[str]

    def prepare(self, state: ClientState, start: Params, context: Context) -> tuple[Params, dict[str, Wire]]:
        own = own_entries(state, HEAD)
        return ({**start, **own} if own else start), dict(context)

    def finish(self, model: nn.Module, state: ClientState, trained: Trained) -> tuple[ClientState, Report]:
        return with_prefix({k: v for k, v in trained.params.items() if k in self.keys}, HEAD), {}

    def personal_model(self, state: ClientState, global_model: Params) -> Params:
        """The body the server makes for this client (:meth:`PFedHN.client_model`, in ``global_model``) with the head it keeps."""
        own = own_entries(state, HEAD)
        return {k: own[k].to(v.device) if k in own else v for k, v in global_model.items()}


@dataclass(frozen=True)
class Generated:
    """Full pFedHN's client half: the client trains what it is sent and keeps nothing; its own model is the one the
    server makes for it, h(v_i; phi) (:meth:`PFedHN.client_model`, already in ``global_model``), so
    ``checkpoint.client_models`` writes it."""

    def prepare(self, state: ClientState, start: Params, context: Context) -> tuple[Params, dict[str, Wire]]:
        return start, dict(context)

    def finish(self, model: nn.Module, state: ClientState, trained: Trained) -> tuple[ClientState, Report]:
        return {}, {}

    def personal_model(self, state: ClientState, global_model: Params) -> Params:
        """h(v_i; phi) now: the global model with every generated entry the server made for this client."""
        return dict(global_model)


class PFedHN(AggregatorBase):
    """Holds the hypernetwork (MLP and embeddings) and its SGD momentum; sends each client h(v_i; phi); steps by the chain rule."""

    def __init__(
        self,
        options: PFedHNOptions,
        num_clients: int,
        shapes: Mapping[str, torch.Size],
        seed: int | None = None,
        dtype: torch.dtype = torch.float32,
        head: Collection[str] = (),
    ) -> None:
        self.options = options
        self.num_clients = num_clients
        self.shapes = dict(shapes)
        """The generated tensors' names and shapes, in the model's order."""
        self.head = frozenset(head)
        """pFedHN-PC: the head's entries, which the clients keep."""
        self.seed = seed
        """The run's seed, as every seeded method's is (None: the run's, which a run fills, :func:`_bind`; 0 outside a
        run). The hypernetwork's start is drawn from :func:`init_seed` of it, a stream of its own."""
        self.dtype = dtype
        self._hyper: Params | None = None
        """phi and E, on the host; drawn at first use (:attr:`hyper`), so an instance whose seed a run fills is drawn once."""
        self.velocity: Params = {}
        """SGD momentum buffers (empty before the first step, or with ``momentum = 0``)."""
        self._metrics: dict[str, Json] = {}

    @property
    def hyper(self) -> Params:
        """phi and E, drawn from :func:`init_seed` of the seed at first use (0 outside a run while the seed is unset)."""
        if self._hyper is None:
            self._hyper = self.initial_hyper(init_seed(instance_seed(self.seed)))
        return self._hyper

    @hyper.setter
    def hyper(self, value: Params) -> None:
        self._hyper = value

    def initial_hyper(self, seed: int) -> Params:
        """phi and E at their start, drawn from the generator seed ``seed`` (:func:`init_seed` of the run's)."""
        o = self.options
        return init_hypernetwork(self.shapes, self.num_clients, embedding_size(o, self.num_clients), o.hidden, o.hidden_layers, seed, self.dtype)

    def client_half(self) -> ClientHalf | None:
        return KeepHead(self.head) if self.head else Generated()

    def theta(self, client_id: int) -> Params:
        """h(v_i; phi) as the server holds it now."""
        with torch.no_grad():
            return generate(self.hyper, self.hyper[EMBEDDINGS][client_id], self.shapes)

    def client_model(self, client_id: int, global_params: Params) -> Params:
        """h(v_i; phi) on the run's device: what client ``client_id`` is sent, and the body of its own model under pFedHN-PC."""
        return _like(self.theta(client_id), global_params)

    def downlink(self, client_id: int, round: int, global_params: Params) -> Downlink:
        return Downlink(params=self.client_model(client_id, global_params))

    def aggregated_keys(self, global_params: Params) -> tuple[str, ...]:
        """Every entry but pFedHN-PC's head, which the clients keep and never send."""
        return tuple(k for k in global_params if k not in self.head)

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int) -> Params:
        o = self.options
        if not results:  # no client reported: nothing to step on
            self._metrics = {}
            return dict(global_params)
        sent = dict(self.hyper)  # phi_t: every theta_i of the round was generated from it (a step makes new tensors)
        # one client's gradient at a time, each a tensor the size of the hypernetwork (the embedding table's included):
        # held all at once they were 97 MB a sampled client at 10,000 clients. Same order, same operations, same bits.
        norms: list[float] = []
        total: Params = {}
        for r in results:
            g = chain_rule_gradient(sent, r.client_id, self.shapes, r.params, o.sign)
            norms.append(total_norm(g))
            if o.server_steps == "each":
                self.step(clipped(g, o.clip_norm))
            else:
                total = accumulate(total, g)
        if o.server_steps == "mean":
            self.step(clipped({k: v / len(results) for k, v in total.items()}, o.clip_norm))
        self._metrics = {"hn_grad_norm": sum(norms) / len(norms)}
        out = dict(global_params)
        rest = [k for k in global_params if k not in self.shapes and k not in self.head]  # buffers: FedAvg's
        if rest:
            out.update(weighted_average([r.params for r in results], client_weights(results), rest))
        with torch.no_grad():
            out.update(_like(generate(self.hyper, self.hyper[EMBEDDINGS].mean(dim=0), self.shapes), global_params))
        return out

    def step(self, grads: Mapping[str, torch.Tensor]) -> None:
        """One ``torch.optim.SGD`` step (no dampening, no Nesterov): d = g + wd p; b = mu b + d (b = d first); p <- p - lr b."""
        o = self.options
        for k, p in self.hyper.items():
            d = grads[k] + o.weight_decay * p if o.weight_decay else grads[k]
            if o.momentum:
                d = o.momentum * self.velocity[k] + d if k in self.velocity else d
                self.velocity[k] = d
            lr = o.server_lr if k != EMBEDDINGS or o.embedding_lr is None else o.embedding_lr
            self.hyper[k] = p - lr * d

    def round_metrics(self) -> Mapping[str, Json]:
        """The mean norm of the round's chain-rule gradients, before clipping."""
        return dict(self._metrics)

    def state_dict(self) -> dict[str, Any]:
        """The hypernetwork (phi and E) and its momentum buffers."""
        return {"hyper": params_state(self.hyper), "velocity": params_state(self.velocity)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        check_state_keys(state, ("hyper", "velocity"), "pFedHN")
        hyper = load_params(state["hyper"])
        if set(hyper) != set(self.hyper) or any(hyper[k].shape != v.shape for k, v in self.hyper.items()):
            raise ValueError("pFedHN hypernetwork state does not match this run's hypernetwork (model, embed_dim, hidden, hidden_layers or clients differ)")
        # server bookkeeping on the host, whatever device the checkpoint was read onto
        self.hyper = {k: v.to("cpu", self.hyper[k].dtype) for k, v in hyper.items()}
        self.velocity = {k: v.to("cpu", self.hyper[k].dtype) for k, v in load_params(state["velocity"]).items()}


def _like(params: Mapping[str, torch.Tensor], like: Mapping[str, torch.Tensor]) -> Params:
    """``params`` on the devices and in the dtypes of the run's model."""
    return {k: v.to(device=like[k].device, dtype=like[k].dtype) for k, v in params.items()}


def _build(options: PFedHNOptions, ctx: BuildContext) -> Built:
    head: tuple[str, ...] = ()
    if options.variant == "pc":
        name = require_head(ctx, "pFedHN-PC")
        module = ctx.model.get_submodule(name)
        head = tuple(f"{name}.{n}" for n, _ in (*module.named_parameters(), *module.named_buffers()))
    params = dict(ctx.model.named_parameters())
    # a frozen weight (requires_grad = False: LocalSpec.frozen) keeps the model's value, as a buffer does: h would
    # replace it by a generated one no client trains
    shapes = {k: p.shape for k, p in params.items() if k not in head and p.requires_grad}
    size = hypernetwork_size(shapes, ctx.num_clients, embedding_size(options, ctx.num_clients), options.hidden, options.hidden_layers)
    if size > options.max_params:
        generated = sum(s.numel() for s in shapes.values())
        raise ConfigError(
            f"{ctx.section}.max_params",
            f"pFedHN's hypernetwork would hold {size:,} parameters (hidden = {options.hidden} x the model's {generated:,} generated"
            f" entries, and more), over max_params = {options.max_params:,}: use a smaller model or hidden, or raise max_params",
        )
    dtype = next(iter(params.values())).dtype
    return PFedHN(options, ctx.num_clients, shapes, ctx.seed, dtype, head), []


def init_seed(seed: int) -> int:
    """The generator seed of the hypernetwork's start in a run of ``seed``: ``derive_seed(seed, "pfedhn-init")``."""
    return derive_seed(seed, "pfedhn-init")


def _bind(aggregator: PFedHN, ctx: BuildContext) -> None:
    """An instance passed from Python holds one embedding a client, ``num_clients`` of them: another count than the run's
    is refused on ``aggregator.num_clients`` (an IndexError at the first client id past it otherwise). Its ``seed`` is the
    run's, as every seeded method's (None: filled, and the hypernetwork drawn from its :func:`init_seed`, again only where
    it was read before the run and is still seed 0's drawing by value; a hypernetwork set, loaded or written in place from
    Python differs from it, and is the user's, kept), another refused on ``aggregator.seed`` (seed 0 started every seed's
    run alike)."""
    aggregator.num_clients = run_value(aggregator.num_clients, ctx.num_clients, instance_field(ctx, "num_clients"), "federation.num_clients")
    seed = run_value(aggregator.seed, ctx.seed, instance_field(ctx, "seed"), "seed")
    held = aggregator._hyper
    if aggregator.seed is None and held is not None and same_params(held, aggregator.initial_hyper(init_seed(instance_seed(None)))):
        aggregator.hyper = aggregator.initial_hyper(init_seed(seed))
    aggregator.seed = seed


CAPABILITIES = Capabilities(
    not_a_base="pFedHN's server steps a hypernetwork and sends each client its own generated model; it averages no models",
    personal_model=True,
)
"""pFedHN's: every client has a model of its own, h(v_i; phi) (pFedHN-PC: the body, with the head each client keeps)."""

HYPER_FLOPS = 88.0
"""What the server's work for one sampled client costs per weight of the hypernetwork's output layers (``hidden`` x the model's
parameters), in FLOPs at the small models' throughput: generating theta_i, the chain rule's vector-Jacobian product and the
clipped SGD step with momentum and decay, each over those weights, bound by their memory. Measured 2026-12-02 on the 2-vCPU AVX2
machine (``benchmarks/estimates.py``, 10 clients a round): 24.6 ms more than FedAvg a client with the FLex&Chill CNN on digits
(28,586 parameters) at ``hidden = 100``, 13.2 ms at 50, 4.8 ms with the MLP (4,810) at 100: 8.0 ns a weight (88 FLOPs at 11
GFLOP/s) and :data:`HYPER_CALLS` steps' overheads."""
HYPER_CALLS = 2.4
"""The calls of one client's server step (a tensor at a time: the outputs, their gradients, the step), in plain steps' overheads
(1.8 ms of the measurements in :data:`HYPER_FLOPS`)."""


HYPER_GLOBAL = 2.0
"""The global model generated once a round (h at the mean embedding, :meth:`PFedHN.aggregate`), in FLOPs a weight of the output
layers (``hidden`` x the model's parameters): one matrix-vector product, 2 FLOPs a weight. Measured 2026-12-02 on the 2-vCPU AVX2
machine, one thread: 0.57 ms with the FLex&Chill CNN on digits at ``hidden = 100`` (0.20 ns a weight: 2.2 FLOPs at 11 GFLOP/s),
0.36 ms at 50, 0.13 ms with the MLP at 100 (2.9 FLOPs). (The runs :data:`HYPER_FLOPS` was fitted on held it too: 0.2 % of them.)"""


def capabilities(options: PFedHNOptions) -> Capabilities:
    """Its limits, and its cost: the server's hypernetwork work for each sampled client, ``HYPER_FLOPS`` x ``hidden`` FLOPs a
    parameter of the model and :data:`HYPER_CALLS` steps' overheads (pFedHN-PC's head, not generated, is counted too: an
    upper bound), and once a round the global model it generates, :data:`HYPER_GLOBAL` x ``hidden`` FLOPs a parameter."""
    cost = Cost(client_server_steps=HYPER_CALLS, server_parameter_flops=HYPER_FLOPS * options.hidden, round_server_parameter_flops=HYPER_GLOBAL * options.hidden)
    return replace(CAPABILITIES, cost=cost)


SPEC = register_algorithm(
    "pfedhn",
    AlgorithmSpec(
        PFedHNOptions,
        _build,
        "a server hypernetwork generates each client's model from its embedding (Shamsian et al. 2021)",
        capabilities=CAPABILITIES,
        capabilities_of=capabilities,
        makes=(PFedHN,),
        bind=_bind,
    ),
)
