"""FedCP (Zhang et al., KDD 2023): a conditional policy splits each feature vector between a global and a personal head.

The model is a feature extractor (the body, W^fe) and a linear head, split at the head's input h
(:mod:`chillfl.models.parts`). Client i holds, besides the model it is sent,

* a personal head W^hp_i (weight and bias), which never leaves the client;
* the frozen global head W^hg, the head of the model it was sent;
* the Conditional Policy Network (CPN) Theta: ``Linear(d, 2d) -> LayerNorm(2d) -> ReLU`` on h ⊙ v̂_i, where
  v_i = sum_c W^hp_i[c, :] (the personal head's weight summed over its classes) and v̂_i = v_i / ||v_i||_2.

The CPN's 2d outputs are d pairs (a_k, b_k) of logits, the first d for the personal head and the last d for the global
one (the authors' ``view(B, 2, d)``). Each pair goes through a two-way Gumbel-softmax at temperature tau: with the
difference of two Gumbel draws written as one logistic draw l = log u - log(1 - u), u ~ U(0, 1),

    s_k = sigmoid((a_k - b_k + l_k) / tau)      (the personal share)
    r_k = 1 - s_k                               (the global share)

and the output is

    out = W^hp_i (h ⊙ s) + b^hp_i + W^hg (h ⊙ r) + b^hg.

The local loss is CE(out, y) + lambda_eta * MMD^2(h, h^g), with h^g = W^fe(x) the features of the extractor the client
was sent (frozen) and the authors' MMD: the biased estimate mean(K(X, X) + K(Y, Y) - 2 K(X, Y)) summed over the
bandwidths a of a Gaussian kernel exp(-||x - y||^2 / (2 a)), a in (10, 15, 20, 50). Its weight at the round's learning
rate eta is lambda_eta = lambda * eta_lambda / eta (:func:`alignment_weight`): lambda = 5 is the authors' at their
eta_lambda = 0.005, and the step eta * lambda_eta = 0.025 that the term takes is theirs at every eta.

The server averages the body and the CPN by FedAvg; the global head is the average of what each client uploads
as its head, (W^hp_i + W^hg) / 2 (the authors' ``generate_upload_head``). The personal heads stay.

In chillfl the global model is the run's model (body + global head), so the global accuracy measures it (no
CPN); the CPN is the server's state, sent in the downlink context and returned in the client's report.
Local accuracy measures the client's own model: its trained body, personal head and CPN with the round's
global head, in a template of its own (:class:`FedCPModel`, through
:class:`~chillfl.aggregation.base.OwnArchitecture`), without the noise: the split sigmoid((a - b) / tau). ``checkpoint.client_models`` saves the current global body, CPN and head with the
client's personal head (the CPN reaches :meth:`FedCPClient.personal_model` as an entry the server makes,
:class:`~chillfl.aggregation.base.MakesClientModels`).

Checked against the authors' TsingZ0/FedCP (``system/flcore/clients/clientcp.py``,
``system/flcore/servers/servercp.py``, ``system/run_me.sh``) and PFLlib's copy of it (``clientcp.py``): the CPN's
layers, the context from the personal head's weight summed over classes and L2-normalised, the policy's pair order,
the MMD's kernel and bandwidths on the full representation h, the frozen global head and frozen reference extractor,
the uploaded head (W^hp + W^hg) / 2, the body, head and CPN averaged with n_i / n, lambda = 5 (``-lam 5``) at their
learning rate 0.005 (``main.py``'s default, which ``run_me.sh`` keeps).

Choices
-------
* **The MMD weight follows the learning rate** (``lam_at_lr``): the authors ran lambda = 5 at eta = 0.005 only. The
  term pulls the batch's mean representation back to the sent extractor's: for bandwidths a >> ||h - h^g||^2 it is
  about sum_a (1/a) ||mean h - mean h^g||^2 (0.237 ||.||^2), stiff in the body's weights (its curvature grows with the
  squared norm of the body's inner activations), so plain SGD on it is stable only while eta * lambda stays small. At
  eta = 0.1 and lambda = 5 (20 times the authors' step) the representation overshoots and oscillates every step, and
  at 0.3 it diverges: on Dirichlet(0.1) digits (``flexchill_cnn``) FedCP then learns nothing (chance global accuracy,
  the majority class locally). By default the weight is lambda * 0.005 / eta, so the term's step is the authors' at
  any eta and exactly their lambda at theirs; ``lam_at_lr = 0`` weighs it lambda at every eta (the authors' code read
  literally). eta is the round's learning rate (a step schedule within the round does not rescale it).
* **The noise** (``noise``): ``gumbel`` (default, the authors' ``F.gumbel_softmax``) draws it from a counter-based
  hash of the client's round seed and the step (:func:`uniform_noise`), so each client's draws are its own, the same
  under every executor and after a resume, and the vectorised executor can batch the step (torch's generator would
  make it fall back). ``none`` trains with the noise-free split. Evaluation is always noise-free; the authors sample
  noise at test time too.
* **What a client trains with**: the body, global head and CPN the server holds when it samples the client. The
  authors send the body to every client each round but the head and the CPN only to that round's clients after the
  average, so a client sampled again later trains with the head and CPN of its previous round; under full
  participation (their ``-jr 1``) the two are the same.
* **v_i** is computed from the personal head at the start of each training and held fixed through it (the authors:
  from the personal head after the client's previous training, the same head). At a client's first training it is the
  head it was sent (the authors': a random vector). The client's own model after training uses v_i of its trained head.
* **The aligned features** (``align``): ``features`` (default, the authors' code) aligns the whole h with h^g;
  ``global_part`` aligns the global part h ⊙ r (a reading of the paper's figure).
* **The uploaded head** (``upload_head``): ``mixed`` (default, the authors' code) (W^hp + W^hg) / 2; ``personal``
  uploads W^hp alone. Either way W^hp was trained from the personal head the client keeps (the authors'
  ``set_parameters`` sends the body only; their ``model.head`` stays on the client), so the uploaded head minus the
  sent one is no update of the sent model: FedCP declares ``trains_from_own_start``, and a model attack, which forges
  from w - start with the start the server sent, is refused on ``attack.kind``.
* ``kernel = "multiscale"`` is the authors' other kernel, a^2 / (a^2 + ||x - y||^2), a in (0.2, 0.5, 0.9, 1.3).
* ``hard = true`` is the straight-through Gumbel-softmax (one-hot forward, soft gradient), the authors' ``hard``
  flag (off by default).
* The CPN starts from PyTorch's default initialisation, seeded from the run's seed; its parameters train under the
  run's local optimiser at the round's learning rate, as the body and the personal head (the authors: one SGD for all).
* A parameter term of the run's objective (``proximal_mu``) applies to the body and the personal head (the latter
  anchored at the global head it was sent); batch terms and representation-based losses do not compose.
* ``local_eval = "averaged"`` measures, as the authors do before each round's training, the client's personal head on
  the body, CPN and global head the server has just averaged.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from typing import Any, Literal, Mapping, Sequence, cast

import torch
from torch import nn
from torch.nn import functional as F

from chillfl.aggregation.base import (
    ClientHalf,
    ClientResult,
    ClientState,
    Context,
    Downlink,
    FedAvg,
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
    own_entries,
    report_tensor,
    weighted_average,
    with_prefix,
)
from chillfl.aggregation.registry import AlgorithmSpec, BuildContext, after_average, instance_field, register_algorithm, run_value
from chillfl.capabilities import FORWARD, Capabilities, Cost
from chillfl.errors import ConfigError
from chillfl.global_rng import forked_rng
from chillfl.models.parts import head_name, head_size
from chillfl.options import require
from chillfl.seeds import derive_seed, instance_seed
from chillfl.training.local import LocalSpec, half_to_float, refuse_representation_readers
from chillfl.training.objective import LossTerm
from chillfl.training.terms import StepView, Term, read_number


@dataclass(frozen=True)
class FedCPOptions:
    """``lam``: the MMD term's weight lambda at the learning rate ``lam_at_lr`` (5 at 0.005, the authors' command);
    ``lam_at_lr``: the term weighs lam * lam_at_lr / lr at the round's lr, so that its step lr * weight is the same at
    every lr (0: lam at every lr); ``kernel``: its kernel; ``align``: the MMD on
    the whole representation (``features``) or its global part (``global_part``); ``upload_head``: the head a client
    uploads, (W^hp + W^hg) / 2 (``mixed``) or W^hp (``personal``); ``tau``: the Gumbel-softmax temperature; ``hard``:
    straight-through one-hot policy; ``noise``: ``gumbel`` or ``none`` in training; ``local_eval``: local accuracy of
    the trained model (``trained``) or of the personal head on the model just averaged (``averaged``, the authors')."""

    lam: float = 5.0
    lam_at_lr: float = 0.005
    kernel: Literal["rbf", "multiscale"] = "rbf"
    align: Literal["features", "global_part"] = "features"
    upload_head: Literal["mixed", "personal"] = "mixed"
    tau: float = 1.0
    hard: bool = False
    noise: Literal["gumbel", "none"] = "gumbel"
    weighting: Literal["samples", "uniform"] = "samples"
    local_eval: Literal["trained", "averaged"] = "trained"

    def validate(self, section: str) -> None:
        require(0 <= self.lam <= 1e6, f"{section}.lam", f"must be in [0, 1e6], got {self.lam}")
        require(0 <= self.lam_at_lr <= 1e3, f"{section}.lam_at_lr", f"must be in [0, 1e3] (0: lam at every learning rate), got {self.lam_at_lr}")
        require(0 < self.tau <= 1e3, f"{section}.tau", f"must be in (0, 1e3], got {self.tau}")


PREFIX = "fedcp."
"""Where the personal head lives in the client's state."""
CPN = "fedcp_cpn."
"""Context, report and client-model keys of the CPN's entries."""
LAM = "fedcp_lam"
"""The context key of the MMD term's weight at the round's learning rate (:func:`alignment_weight`)."""
NET, REFERENCE = "net", "reference"
"""The submodules of :class:`FedCPModel`: the client's model and the frozen extractor it was sent."""

BANDWIDTHS: dict[str, tuple[float, ...]] = {"rbf": (10.0, 15.0, 20.0, 50.0), "multiscale": (0.2, 0.5, 0.9, 1.3)}
"""The authors' kernel parameters a (``MMD`` in ``clientcp.py``)."""

MASK32 = 0xFFFFFFFF
MIX = 0x45D9F3B
"""The multiplier of :func:`mix32` (below 2^27: a 32-bit value times it stays inside int64)."""


def mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash of each element of the int64 tensor ``x`` (values in [0, 2^32)): xor-shift-multiply rounds."""
    x = x ^ torch.div(x, 1 << 16, rounding_mode="floor")
    x = (x * MIX) & MASK32
    x = x ^ torch.div(x, 1 << 16, rounding_mode="floor")
    x = (x * MIX) & MASK32
    return x ^ torch.div(x, 1 << 16, rounding_mode="floor")


def uniform_noise(seed: torch.Tensor, step: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """u in (0, 1), float32, one per element of ``shape``: a hash of (seed, step, element index), no generator.

    Why a hash: a draw from torch's generator cannot be batched over clients (``vmap``), and the client's own stream
    would have to travel with the step; (seed, step) are two int64 buffers of the model (:class:`PolicyHead`).
    u = (24 high bits of the hash + 1/2) / 2^24.
    """
    key = mix32(mix32((seed & MASK32) ^ mix32(torch.div(seed, 1 << 32, rounding_mode="floor") & MASK32)) ^ (step & MASK32))
    index = torch.arange(shape.numel(), dtype=torch.int64, device=seed.device)
    h = mix32(mix32(index ^ key) ^ key)
    return ((torch.div(h, 1 << 8, rounding_mode="floor").to(torch.float32) + 0.5) / float(1 << 24)).reshape(shape)


def policy(logits: torch.Tensor, tau: float, noise: torch.Tensor | None = None, hard: bool = False) -> torch.Tensor:
    """s, the personal share of each feature, from the CPN's 2d outputs (a | b): sigmoid((a - b + l) / tau).

    The two-way Gumbel-softmax softmax((a + g_1, b + g_2) / tau)_1 with g_1 - g_2 = l = log u - log(1 - u), a logistic
    draw (``noise`` = u; None: no noise). ``hard``: the one-hot (s >= 1/2) forward with the soft gradient.
    """
    d = logits.shape[-1] // 2
    diff = half_to_float(logits[..., :d] - logits[..., d:])  # bf16 autocast's in float32; a float64 model's stay float64
    if noise is not None:
        diff = diff + torch.log(noise) - torch.log1p(-noise)
    s = torch.sigmoid(diff / tau)
    if hard:
        s = (s >= 0.5).to(s.dtype) - s.detach() + s
    return s.to(logits.dtype)


def alignment_weight(options: FedCPOptions, lr: float) -> float:
    """lambda_eta = lam * lam_at_lr / lr, the MMD term's weight at learning rate ``lr``: its SGD step lr * lambda_eta is
    lam * lam_at_lr whatever lr (the authors' 5 * 0.005); ``lam`` itself where ``lam_at_lr`` is 0 or lr is not positive."""
    if options.lam_at_lr == 0 or lr <= 0:
        return options.lam
    return options.lam * options.lam_at_lr / lr


def condition(weight: torch.Tensor) -> torch.Tensor:
    """v_i = sum_c W^hp[c, :]: the personal head's weight summed over its classes (normalised where it is used)."""
    return weight.detach().sum(0)


def policy_network(d: int, dtype: torch.dtype = torch.float32) -> nn.Sequential:
    """The CPN Theta: ``Linear(d, 2d) -> LayerNorm(2d) -> ReLU`` (the authors' ``ConditionalSelection``).

    Drawn in ``dtype`` (float32; the caller casts it to the head's dtype), not the process's default: a default left at
    float64 by an earlier notebook cell would otherwise draw another start for the same run."""
    return nn.Sequential(nn.Linear(d, 2 * d, dtype=dtype), nn.LayerNorm(2 * d, dtype=dtype), nn.ReLU())


class PolicyHead(nn.Module):
    """The head the run's model is given in :class:`FedCPModel`: W^hp (its own ``weight`` and ``bias``), the global head
    and the CPN; its input is h, its output W^hp (h ⊙ s) + b^hp + W^hg (h ⊙ r).

    Buffers: ``condition`` (v_i), ``seed`` and ``step`` (the noise's key and counter: the step counts up in training),
    and a copy of each ``persistent=False`` buffer of the head it replaces (a temperature the model's forward reads as
    ``self.head.temp``: the run's state holds none of them, so it stays the module's own, as on the head).
    ``share`` passes r through, so that a term can capture it.
    """

    condition: torch.Tensor
    seed: torch.Tensor
    step: torch.Tensor

    def __init__(self, head: nn.Module, tau: float, hard: bool, noise: bool) -> None:
        super().__init__()
        weight = cast(torch.Tensor, head.weight)
        bias = cast("torch.Tensor | None", getattr(head, "bias", None))
        self.weight = nn.Parameter(weight.detach().clone())
        self.bias = None if bias is None else nn.Parameter(bias.detach().clone())
        self.global_head = copy.deepcopy(head)
        self.cpn = policy_network(weight.shape[1]).to(weight.dtype)
        self.share = nn.Identity()
        self.tau, self.hard, self.noise = tau, hard, noise
        self.register_buffer("condition", torch.zeros(weight.shape[1], dtype=weight.dtype))
        self.register_buffer("seed", torch.zeros((), dtype=torch.int64))
        self.register_buffer("step", torch.zeros((), dtype=torch.int64))
        for name, buffer in head.named_buffers(recurse=False):
            if name not in head._non_persistent_buffers_set:
                continue
            if hasattr(self, name):
                raise ConfigError("model.name", f"FedCP replaces the classifier head by a policy head whose own {name!r} is not the head's "
                                                f"persistent=False buffer {name!r}: rename that buffer")
            self.register_buffer(name, buffer.detach().clone(), persistent=False)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        logits = self.cpn(h * F.normalize(self.condition, dim=0))
        u = None
        if self.training and self.noise:
            u = uniform_noise(self.seed, self.step, logits[..., : h.shape[-1]].shape)
            self.step.add_(1)  # in place, as batch norm's counter: the training state carries it from step to step
        s = policy(logits, self.tau, u, self.hard)
        r = self.share(1 - s)
        return F.linear(h * s, self.weight, self.bias) + self.global_head(h * r)


class FedCPModel(nn.Module):
    """The run's model with its head replaced by a :class:`PolicyHead` (``net``), and in training the frozen model the
    client was sent (``reference``), run beside it so that the alignment term captures its head's input h^g."""

    def __init__(self, model: nn.Module, head: str, options: FedCPOptions, reference: bool) -> None:
        super().__init__()
        net = copy.deepcopy(model)
        parent, _, child = head.rpartition(".")
        split = PolicyHead(net.get_submodule(head), options.tau, options.hard, options.noise == "gumbel")
        setattr(net.get_submodule(parent) if parent else net, child, split)
        self.net = net
        self.head = head
        self.reference = copy.deepcopy(model) if reference else None

    def head_name(self) -> str:
        """The policy head, whose input is h (:class:`~chillfl.models.parts.DeclaresHead`)."""
        return f"{NET}.{self.head}"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.reference is not None and self.training:
            self.reference(x)  # read by the alignment term through its capture of the reference head's input
        return cast(torch.Tensor, self.net(x))


def squared_distances(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """||a_i - b_j||^2 for every pair of rows (the authors' rx^T + ry - 2 a b^T)."""
    return (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2 * a @ b.T


def mmd(x: torch.Tensor, y: torch.Tensor, kernel: str = "rbf", bandwidths: Sequence[float] | None = None) -> torch.Tensor:
    """The authors' MMD^2 estimate: sum over a of mean(K_a(X, X) + K_a(Y, Y) - 2 K_a(X, Y)), rows of ``x`` and ``y``.

    ``rbf``: K_a = exp(-D / (2 a)); ``multiscale``: K_a = a^2 / (a^2 + D); D the squared distances;
    ``bandwidths``: the a's (None: :data:`BANDWIDTHS` of the kernel).
    """
    dxx, dyy, dxy = squared_distances(x, x), squared_distances(y, y), squared_distances(x, y)
    total = torch.zeros((), dtype=x.dtype, device=x.device)
    for a in BANDWIDTHS[kernel] if bandwidths is None else bandwidths:
        if kernel == "rbf":
            kxx, kyy, kxy = torch.exp(-0.5 * dxx / a), torch.exp(-0.5 * dyy / a), torch.exp(-0.5 * dxy / a)
        else:
            kxx, kyy, kxy = a * a / (a * a + dxx), a * a / (a * a + dyy), a * a / (a * a + dxy)
        total = total + (kxx + kyy - 2 * kxy).mean()
    return total


class FeatureAlignment:
    """``lambda_eta * MMD^2(h, h^g)`` (or of h ⊙ r with ``share``): a batch term on the step's representation and the
    reference extractor's, captured as the input of the reference's head; lambda_eta, which depends on the round's
    learning rate, is read from the context (:data:`LAM`)."""

    per_batch = True
    reads: tuple[str, ...] = (LAM,)

    def __init__(self, kernel: str, reference: str, share: str | None = None) -> None:
        self.kernel = kernel
        self.reference = reference
        self.share = share
        self.captures: tuple[str, ...] = (reference,) if share is None else (reference, share)

    def __call__(self, params: Mapping[str, torch.Tensor], context: Context, step: StepView) -> torch.Tensor:
        h = step.features
        if self.share is not None:
            h = h * step.captured[self.share][1]
        g = step.captured[self.reference][0].detach()
        d = h.shape[-1]
        return read_number(context, LAM) * mmd(h.reshape(-1, d), g.reshape(-1, d).to(h.dtype), self.kernel)


def net_state(model: Params, personal: Params, cpn: Params, head: str, seed: int = 0) -> Params:
    """The entries of :class:`FedCPModel`'s ``net`` from the run model's (body + global head), the personal head's and the CPN's."""
    at = head + "."
    weight = personal["weight"]
    out: Params = {k: v for k, v in model.items() if not k.startswith(at)}
    out.update({at + k: v for k, v in personal.items()})
    out.update({f"{at}global_head.{k[len(at) :]}": v for k, v in model.items() if k.startswith(at)})
    out.update({f"{at}cpn.{k}": v.to(weight.device) for k, v in cpn.items()})
    out[at + "condition"] = condition(weight)
    out[at + "seed"] = torch.tensor(seed & (2**63 - 1), dtype=torch.int64, device=weight.device)
    out[at + "step"] = torch.zeros((), dtype=torch.int64, device=weight.device)
    return out


@dataclass(frozen=True)
class FedCPClient:
    """FedCP's client half: trains body, personal head and CPN under the frozen global head and reference extractor;
    uploads the body, the head (:attr:`FedCPOptions.upload_head`) and the CPN; keeps the personal head."""

    head: str
    """The run's model's head: its entries are the global head's."""
    options: FedCPOptions
    template: FedCPModel
    """The training template (with the reference extractor when lambda > 0)."""
    own: FedCPModel
    """The client's own model's template (no reference)."""

    @property
    def after_average(self) -> bool:
        """``local_eval = "averaged"`` (:class:`~chillfl.aggregation.base.MeasuredAfterAverage`)."""
        return self.options.local_eval == "averaged"

    def prepare(self, state: ClientState, start: Params, context: Context) -> tuple[Params, dict[str, Wire]]:
        return start, dict(context)

    def personal_template(self) -> nn.Module:
        """:class:`FedCPModel` without the reference (:class:`~chillfl.aggregation.base.OwnArchitecture`)."""
        return self.own

    def objectives(self, spec: LocalSpec) -> tuple[LocalSpec, ...]:
        """0: the template's step: the run's base loss on its output, its parameter terms on ``net`` and the alignment term;
        the reference and the global head frozen; the run's frozen and no-decay names renamed into ``net``."""
        refuse_representation_readers(spec, "FedCP's head splits the representation by its policy network")
        at = self.head + "."
        terms: list[Term] = [OnPart(cast(LossTerm, t), f"{NET}.") for t in spec.terms]
        if self.template.reference is not None:
            share = f"{NET}.{at}share" if self.options.align == "global_part" else None
            terms.append(FeatureAlignment(self.options.kernel, f"{REFERENCE}.{self.head}", share))
        split = cast(PolicyHead, self.template.net.get_submodule(self.head))
        fixed = {f"{NET}.{at}global_head.{k}" for k, _ in split.global_head.named_parameters()}
        if self.template.reference is not None:
            fixed |= {f"{REFERENCE}.{k}" for k, _ in self.template.reference.named_parameters()}
        frozen = frozenset(f"{NET}.{k}" for k in spec.frozen if not k.startswith(at)) | fixed  # W^hp is FedCP's own: it trains
        no_decay = frozenset(f"{NET}.{k}" for k in spec.no_decay)
        return (replace(spec, model=self.template, terms=tuple(terms), frozen=frozen, no_decay=no_decay),)

    def train(self, local: Local) -> LocalProgram:
        at = self.head + "."
        sent = {k[len(at) :]: v for k, v in local.start.items() if k.startswith(at)}
        personal = own_entries(local.state, PREFIX) or sent
        cpn = {k[len(CPN) :]: cast(torch.Tensor, v) for k, v in local.context.items() if k.startswith(CPN)}
        net = net_state(local.start, {k: v.to(sent["weight"].device) for k, v in personal.items()}, cpn, self.head, local.seed)
        start = with_prefix(net, f"{NET}.")
        if self.template.reference is not None:
            start.update(with_prefix(local.start, f"{REFERENCE}."))
        context: dict[str, Wire] = {k: v for k, v in local.context.items() if not k.startswith(CPN)}
        if self.template.reference is not None:
            context[LAM] = alignment_weight(self.options, local.lr)
        out = yield Train(start, context, objective=0)
        trained = own_entries(out.params, f"{NET}.")
        mine = {k: trained[at + k] for k in sent}
        up = mine if self.options.upload_head == "personal" else {k: 0.5 * mine[k] + 0.5 * sent[k] for k in sent}
        params = {k: up[k[len(at) :]] if k.startswith(at) else trained[k] for k in local.start}
        report: Report = {CPN + k: trained[f"{at}cpn.{k}"] for k in cpn}
        own = {**trained, at + "condition": condition(mine["weight"])}
        return Personal(params, out.num_steps, out.mean_loss, with_prefix(own, f"{NET}."), with_prefix(mine, PREFIX), report)

    def finish(self, model: nn.Module, state: ClientState, trained: Trained) -> tuple[ClientState, Report]:
        return {}, {}  # the personal head is kept by the training (Personal.state)

    def personal_model(self, state: ClientState, global_model: Params) -> Params:
        """The current global body, head and CPN (the server's, :meth:`FedCP.client_model`) with this client's personal
        head (the global head before its first training), as :class:`FedCPModel`'s ``net`` entries."""
        cpn = {k[len(CPN) :]: v for k, v in global_model.items() if k.startswith(CPN)}
        if not cpn:
            raise ValueError("FedCP's client model needs the server's CPN among the global model's entries (FedCP.client_model)")
        model = {k: v for k, v in global_model.items() if not k.startswith(CPN)}
        at = self.head + "."
        personal = own_entries(state, PREFIX) or {k[len(at) :]: v for k, v in model.items() if k.startswith(at)}
        return with_prefix(net_state(model, personal, cpn, self.head), f"{NET}.")


class FedCP(FedAvg):
    """FedAvg of the uploaded body and head; FedAvg of the CPNs the clients report; every personal head is its client's."""

    def __init__(self, model: nn.Module, options: FedCPOptions = FedCPOptions(), seed: int | None = None) -> None:
        """``seed``: the run's, which draws the CPN's start (None: the run's, which a run fills, :func:`_bind`; 0 outside a run)."""
        super().__init__(options.weighting)
        self.options = options
        self.seed = seed
        self.head = head_name(model)
        self.features = head_size(model).features
        self.dtype = cast(torch.Tensor, model.get_submodule(self.head).weight).dtype
        drawn = instance_seed(seed)
        self.cpn: Params = initial_cpn(self.features, self.dtype, drawn)
        """Theta, the server's CPN."""
        with forked_rng(derive_seed(drawn, "fedcp", "templates")):  # their CPNs' values are never read: drawn off the global stream
            training = FedCPModel(model, self.head, options, reference=options.lam > 0)
            own = FedCPModel(model, self.head, options, reference=False)
        self.client = FedCPClient(self.head, options, training, own)

    def client_half(self) -> ClientHalf:
        return self.client

    def downlink(self, client_id: int, round: int, global_params: Params) -> Downlink:
        device = next(iter(global_params.values())).device  # a checkpoint may have brought the state back on another
        return Downlink(context={CPN + k: v.to(device) for k, v in self.cpn.items()})

    def client_model(self, client_id: int, global_params: Params) -> Params:
        """The server's CPN, which every client's own model runs (:class:`~chillfl.aggregation.base.MakesClientModels`)."""
        device = next(iter(global_params.values())).device
        return {CPN + k: v.to(device) for k, v in self.cpn.items()}

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int, weights: torch.Tensor | None = None) -> Params:
        w = self.default_weights(results) if weights is None else weights
        networks = [{k: report_tensor(r, CPN + k, "FedCP") for k in self.cpn} for r in results]
        if results:
            self.cpn = {k: v.detach().clone() for k, v in weighted_average(networks, w).items()}
        return super().aggregate(global_params, results, round, w)

    def state_dict(self) -> dict[str, Any]:
        return {"cpn": dict(self.cpn)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        check_state_keys(state, ("cpn",), "FedCP")
        check_state_keys(state["cpn"], tuple(self.cpn), "FedCP's CPN")
        self.cpn = {k: v.detach().clone() for k, v in state["cpn"].items()}


def initial_cpn(features: int, dtype: torch.dtype, seed: int) -> Params:
    """The CPN's start for a head of ``features`` inputs: PyTorch's default initialisation, from the run's own stream
    ``derive_seed(seed, "fedcp", "cpn")``."""
    with forked_rng(derive_seed(seed, "fedcp", "cpn")):
        network = policy_network(features).to(dtype)
    return {k: v.detach().clone() for k, v in network.state_dict().items()}


def _bind(aggregator: FedCP, ctx: BuildContext) -> None:
    """An instance passed from Python starts its CPN from the run's seed, as the builder's does: its ``seed`` the run's
    (None: filled, the CPN drawn again from it), another refused on ``aggregator.seed`` (seed 0 started every seed's alike)."""
    seed = run_value(aggregator.seed, ctx.seed, instance_field(ctx, "seed"), "seed")
    if aggregator.seed is None:
        aggregator.cpn = initial_cpn(aggregator.features, aggregator.dtype, seed)
    aggregator.seed = seed


CALLS = 1.5
"""FedCP's overhead on each pass of a local step, in plain steps' overheads (:attr:`~chillfl.capabilities.Cost.pass_overhead`),
on top of its 1 + ``FORWARD`` passes: its step's calls that carry next to no FLOPs (the counter-hash noise, ``mix32`` five
times a step; the MMD term's loop over 4 bandwidths x 3 kernels and its backward; the CPN and the split head): about 420
aten ops a step against FedAvg's 85. Fitted 2026-12-07 on the 2-vCPU AVX2 machine (FLex&Chill CNN on 8x8 digits,
Dirichlet(0.1), 2 epochs at batch 16): FedCP took 2.40-2.64x FedAvg's CPU time at 20 clients (10 a round) and 2.17x at
100 (20 a round), which the passes alone priced at 1.48x and 1.45x; with this, 2.44x and 2.35x."""


SPEC: AlgorithmSpec = register_algorithm(
    "fedcp",
    AlgorithmSpec(
        FedCPOptions,
        lambda o, ctx: (FedCP(ctx.model, o, ctx.seed), []),
        "a policy network splits each feature between a global and a personal head (Zhang et al. 2023)",
        capabilities=Capabilities(
            private_steps=("FedCP's MMD term compares the batch's representations with the sent extractor's: one sample changes every sample's gradient, which per-sample clipping does not bound"),
            takes_weights=True,
            not_a_base="FedCP's clients run their own local trainings, which PA3Fed's client half does not compose with",
            personal_model=True,
            reports="each client's trained conditional policy network (CPN)",
            trains_from_own_start=("from its second round each client trains its head from the personal head it keeps, and uploads "
                                   "(W^hp + W^hg) / 2 (or W^hp), not an update of the head it is sent"),
            linear_head="FedCP's conditional input sums the personal head's weight over its classes, and its split head computes W (h * s) + b",
            cost=Cost(step_passes=1 + FORWARD, pass_overhead=CALLS),  # the reference body's forward; its calls (CALLS)
        ),
        capabilities_of=lambda o: after_average(SPEC.capabilities, "local_eval", "averaged", o.local_eval == "averaged"),
        makes=(FedCP,),  # an instance passed from Python meets this spec's checks (check_instance)
        bind=_bind,
    ),
)
