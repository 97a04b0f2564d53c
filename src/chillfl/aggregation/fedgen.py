"""FedGen (Zhu, Hong & Zhou, ICML 2021): FedAvg + a server-trained feature generator as the clients' regulariser.

One round (the official ``serverpFedGen.train``):

1. clients train with CE + alpha_t * CE(h(z), y) on features z the current
   generator made for them (no term in round 0: no generator yet), plus, with
   ``beta > 0``, the official client's second term (below);
2. each client uploads its model and its label counts n_{k,c}
   (:class:`LabelCounts`, the method's client report);
3. the server trains the generator on the round's clients' heads
   (:func:`~chillfl.training.fedgen.teacher_loss` + eta * diversity), then averages the models (FedAvg).

Server-side training is deterministic: labels and noise of step s of round r
come from a ``torch.Generator`` seeded with (seed, "fedgen", r); each
client's generated features of round r from (seed, "fedgen-samples", r, client).

Choices
-------
* ``label_prior``: labels for the generator's training are drawn uniformly
  from the "qualified" labels (some client of the round holds more than one
  sample, ``MIN_SAMPLES_PER_LABEL``) with ``"qualified"`` (default, the
  official ``train_generator``); ``"counts"`` draws them in proportion to the
  round's label counts, the paper's y ~ p(y) of Eq. 5.
* ``client_labels``: the labels of a client's generated samples. ``"prior"``
  (default) draws them from the generator's prior above. The official client
  (``UserpFedGen.train``) draws them uniformly from ``available_labels``, every
  label of the federation's training data, qualified or not: ``"all"`` does
  that, uniform over the head's classes (the same set wherever every class has
  a training sample).
* Label counts: the official client counts the labels of the batches it
  trained on, starting every label at 1 (``clean_up_counts``), so with its
  ``max > MIN_SAMPLES_PER_LABEL = 1`` a label seen once by one client
  qualifies and the weights are (1 + n_{k,c}) / sum_j (1 + n_{j,c}); here the
  counts are the client's training labels without the 1 (w = n_{k,c} / sum_j
  n_{j,c}, 0 for a client without c), so a label qualifies when some client
  holds two samples of it. Not offered as an option.
* The generator's batch norm uses batch statistics always; the official
  clients call ``generative_model.eval()`` and so generate with the running
  statistics the server's training left (the server trains in train mode).
* The client term uses ``samples`` (32) generated features per round, drawn
  once per round and shared by all its steps; the official code draws a
  fresh batch of 32 per step. The downlink therefore carries the samples
  (``samples x feature_dim`` floats, counted as control bytes) rather than
  the generator itself.
* ``teacher`` (checked 2026-12-01): how the heads teach the generator
  (:func:`~chillfl.training.fedgen.teacher_loss`). ``"clients"`` (default):
  sum_k mean_i w[y_i, k] CE(h_k(z_i), y_i), what the official
  ``train_generator`` line is written to compute; that line multiplies the
  per-sample CE ``[B]`` by the weights reshaped ``[B, 1]``, which broadcasts to
  ``[B, B]``, so it computes sum_k (mean_i w[y_i, k]) (mean_j CE_k(z_j, y_j))
  instead: ``"broadcast"`` reproduces that. ``"ensemble"``: one CE of the
  label-weighted ensemble of the heads' logits, mean_i CE(sum_k w[y_i, k]
  h_k(z_i), y_i) (the official ``teacher_logit``; PFLlib's FedGen does the same
  with sample-count weights). The paper's Eq. 4 could not be read here.
* The official code's ratio gen_batch_size / batch_size (1 at its defaults)
  is folded into ``alpha``. Its second client term, ``generative_beta *
  KL(softmax(h(G(y_i, eps_i))) || softmax(f(x_i)))`` over the batch (the head
  on a generated feature of each real sample's label as a detached target for
  the model's prediction on that sample; beta 10 for MNIST and CelebA, 1 for
  EMNIST, decayed as alpha), is ``beta`` (default 0, off, the earlier behaviour:
  Eq. 5 as :mod:`chillfl.training.fedgen` gives it has the CE term only, and the
  paper's text could not be read here to settle whether it has more): with
  ``beta > 0`` each client also receives one generated feature per class
  (``classes x feature_dim`` floats, one generator batch of the classes, its
  noise drawn after the samples' from the same stream, so the samples are
  unchanged) and :class:`~chillfl.training.fedgen.FedGenLatentTerm` adds
  ``max(1e-4, beta * alpha_decay^t) * KL`` (the official draws a fresh
  feature per sample and step).
* Both client terms are at temperature 1, whatever the base loss's temperature.

Defaults from the official code (zhuangdizhu/FedGen, read 2026-12-01), which
runs MNIST, EMNIST and CelebA only (its ``get_dataset_name`` refuses anything
else, and ``RUNCONFIGS`` has no CIFAR entry): ``alpha = 10``
(``generative_alpha`` of every config), Adam lr 1e-4 (EMNIST's
``ensemble_lr``; MNIST's and CelebA's are 3e-4) decayed by 0.98 per round, weight
decay 1e-2, ``generator_steps = 50`` (ensemble_epochs 50 // n_teacher_iters 5
epochs of 5 iterations), ``eta = 1`` (``ensemble_eta``'s default), generator
batch 32 (the clients' batch size); hidden 512 and noise 64 are
``GENERATORCONFIGS["cifar"]``, an entry that code never reaches (its MNIST
generators are 256 / 32).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal, Mapping, Sequence

import torch
from torch import nn

from chillfl.aggregation.base import (
    Json,
    ClientHalf,
    ClientResult,
    ClientState,
    Downlink,
    FedAvg,
    Params,
    Report,
    Stateless,
    Trained,
    Wire,
    check_state_keys,
    load_params,
    params_state,
    same_params,
)
from chillfl.options import Scale, require
from chillfl.global_rng import forked_rng
from chillfl.training.terms import Term
from chillfl.training.fedgen import FeatureGenerator, Teacher, diversity_loss, teacher_loss
from chillfl.seeds import derive_seed, instance_seed
from chillfl.aggregation.registry import AlgorithmSpec, BuildContext, Built, instance_field, register_algorithm, require_head, run_value
from chillfl.capabilities import FORWARD, Capabilities, Cost

MIN_SAMPLES_PER_LABEL = 1
ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8
NOISE_DTYPE = torch.float32  # the generator's noise and weights: the heads' dtype (read .float()), not the process's default


@dataclass(frozen=True)
class FedGenOptions:
    """Client term: ``alpha``, ``alpha_decay``, ``samples``; generator: ``noise_dim``, ``hidden``, ``generator_lr``,
    ``lr_decay``, ``weight_decay``, ``generator_steps``, ``generator_batch``, ``eta`` (diversity weight);
    ``label_prior``: qualified | counts; ``client_labels``: prior | all (the clients' generated labels);
    ``teacher``: clients | ensemble | broadcast (the generator's teacher loss); ``beta``: the weight of the
    official client's second term (0: off, the paper's Eq. 5)."""

    alpha: Scale = 10.0
    alpha_decay: float = 0.98
    samples: int = 32
    noise_dim: int = 64
    hidden: int = 512
    generator_lr: float = 1e-4
    lr_decay: float = 0.98
    weight_decay: Scale = 1e-2
    generator_steps: int = 50
    generator_batch: int = 32
    eta: Scale = 1.0
    label_prior: Literal["qualified", "counts"] = "qualified"
    client_labels: Literal["prior", "all"] = "prior"
    teacher: Teacher = "clients"
    beta: Scale = 0.0

    def validate(self, section: str) -> None:
        for name in ("alpha", "beta", "weight_decay", "eta"):
            require(vars(self)[name] >= 0, f"{section}.{name}", f"must be >= 0, got {vars(self)[name]}")
        for name in ("alpha_decay", "lr_decay"):
            require(0 < vars(self)[name] <= 1, f"{section}.{name}", f"must be in (0, 1], got {vars(self)[name]}")
        require(self.generator_lr > 0, f"{section}.generator_lr", f"must be > 0, got {self.generator_lr}")
        for name in ("samples", "noise_dim", "hidden", "generator_batch"):
            require(1 <= vars(self)[name] <= 1 << 16, f"{section}.{name}", f"must be in [1, 65536], got {vars(self)[name]}")
        require(self.generator_batch >= 2, f"{section}.generator_batch", "must be >= 2 (batch norm needs two samples)")
        require(self.samples >= 2, f"{section}.samples", "must be >= 2 (the generator's batch norm needs two samples)")
        require(0 <= self.generator_steps <= 100000, f"{section}.generator_steps", f"must be in [0, 100000], got {self.generator_steps}")


@dataclass(frozen=True)
class LabelCounts(Stateless):
    """FedGen's client half: it reports how many samples of each label the client trained on."""

    num_classes: int

    def finish(self, model: nn.Module, state: ClientState, trained: Trained) -> tuple[ClientState, Report]:
        return {}, {"label_counts": torch.bincount(trained.y.cpu(), minlength=self.num_classes)}


def label_weights(counts: Sequence[torch.Tensor]) -> tuple[torch.Tensor, list[int]]:
    """(w[c, k] = n_{k,c} / sum_j n_{j,c} (0 where no client has c), qualified labels: max_k n_{k,c} > 1)."""
    table = torch.stack([c.to(torch.float64) for c in counts], dim=1)  # [classes, clients]
    totals = table.sum(dim=1, keepdim=True)
    weights = torch.where(totals > 0, table / totals.clamp_min(1), torch.zeros_like(table))
    qualified = [c for c in range(table.shape[0]) if float(table[c].max()) > MIN_SAMPLES_PER_LABEL]
    return weights.to(torch.float32), qualified


class FedGen(FedAvg):
    """FedAvg that trains the feature generator after each round and sends each client generated features."""

    def __init__(self, options: FedGenOptions, head: str, num_classes: int, feature_dim: int, seed: int | None = None) -> None:
        """``seed``: the run's, which draws the generator's start and every sample (None: the run's, which a run fills,
        :func:`_bind`; 0 outside a run)."""
        self.options = options
        self.head = head
        self.seed = seed
        self.num_classes = num_classes
        self.feature_dim = feature_dim
        self._generator: FeatureGenerator | None = None
        self._params: Params | None = None
        """The generator's module and weights, drawn together at first use (:attr:`generator`, :attr:`params`), so an
        instance whose seed a run fills is drawn once, from the run's seed (it was drawn from 0 here, then again)."""
        self.moments: dict[str, Params] = {"m": {}, "v": {}}
        self.steps = 0
        self.lr = options.generator_lr
        self.prior = torch.zeros(num_classes, dtype=torch.float64)  # label distribution to sample; zeros: no generator yet
        self.trained_rounds = 0
        self._last_loss = 0.0

    def draw_generator(self, seed: int) -> None:
        """The generator at its start, PyTorch's default initialisation from the run's own stream (seed, "fedgen-init")."""
        with forked_rng(derive_seed(seed, "fedgen-init")):  # the CPU's alone: the fork restores no CUDA generator
            self._generator = FeatureGenerator(self.num_classes, self.options.noise_dim, self.options.hidden, self.feature_dim)
        self._params = {k: v.detach().clone() for k, v in self._generator.named_parameters()}

    def _drawn(self) -> tuple[FeatureGenerator, Params]:
        """The module and the weights, drawn from the seed (0 outside a run while it is unset) if not yet; weights set
        before the module was drawn (a loaded checkpoint's) are kept."""
        if self._generator is None or self._params is None:
            self._draw(instance_seed(self.seed), self._params if self._generator is None else None)
        assert self._generator is not None and self._params is not None
        return self._generator, self._params

    def _draw(self, seed: int, kept: Params | None) -> None:
        """Draw the module and weights from ``seed``, then put ``kept`` (weights set from Python) back over the drawn ones."""
        self.draw_generator(seed)
        if kept is not None:
            self._params = kept

    @property
    def generator(self) -> FeatureGenerator:
        """G_w's module: :meth:`_generate` calls it with :attr:`params`, which hold its weights (as set, by a subclass's own
        :meth:`draw_generator` too, else drawn at first use)."""
        return self._generator if self._generator is not None else self._drawn()[0]

    @generator.setter
    def generator(self, value: FeatureGenerator) -> None:
        """Set by a subclass's own :meth:`draw_generator` (a wider generator), as it could before the drawing was lazy."""
        self._generator = value

    @property
    def params(self) -> Params:
        """G_w's weights, which the server trains (drawn at first use, :meth:`_drawn`)."""
        return self._params if self._params is not None else self._drawn()[1]

    @params.setter
    def params(self, value: Params) -> None:
        """Kept over a later drawing of the module (:meth:`_drawn`); set by a subclass's own :meth:`draw_generator` in
        any order (drawing here recursed into it)."""
        self._params = value

    # -- client side --------------------------------------------------------------------------------

    def client_half(self) -> ClientHalf:
        """Each client's label counts (the generator's label prior and per-label weights)."""
        return LabelCounts(self.num_classes)

    def _generate(self, labels: torch.Tensor, noise: torch.Tensor, params: Mapping[str, torch.Tensor]) -> torch.Tensor:
        return torch.func.functional_call(self.generator, dict(params), (labels, noise))

    def downlink(self, client_id: int, round: int, global_params: Params) -> Downlink:
        o = self.options
        dtype = next(iter(global_params.values())).dtype
        device = next(iter(global_params.values())).device
        width = self.feature_dim  # the generator's output, known without drawing it (round 0 sends no features)
        class_z = torch.zeros(self.num_classes, width, dtype=dtype)  # the latent term's features (sent when beta > 0)
        if not bool(self.prior.sum() > 0):
            z = torch.zeros(o.samples, width, dtype=dtype)
            y = torch.zeros(o.samples, dtype=torch.int64)
            weight = latent = 0.0
        else:
            rng = torch.Generator().manual_seed(derive_seed(instance_seed(self.seed), "fedgen-samples", round, client_id))
            labels = self.prior if o.client_labels == "prior" else torch.ones(self.num_classes, dtype=torch.float64)
            y = torch.multinomial(labels, o.samples, replacement=True, generator=rng)
            noise = torch.rand(o.samples, o.noise_dim, generator=rng, dtype=NOISE_DTYPE)
            with torch.no_grad():
                z = self._generate(y, noise, self.params).to(dtype)
                if o.beta > 0:  # drawn after the samples, so the samples are the same with or without beta
                    class_z = self._generate(torch.arange(self.num_classes), torch.rand(self.num_classes, o.noise_dim, generator=rng, dtype=NOISE_DTYPE), self.params).to(dtype)
            weight = _decayed(o.alpha, o.alpha_decay, round)
            latent = _decayed(o.beta, o.alpha_decay, round)
        context: dict[str, Wire] = {"fedgen_z": z.to(device), "fedgen_y": y.to(device), "fedgen_weight": weight}
        if o.beta > 0:
            context.update(fedgen_class_z=class_z.to(device), fedgen_beta=latent)
        # before the first generator the features are zeros the term never reads (its weight 0 is sent): no bytes on the wire
        unsent = () if weight or latent else tuple(k for k in ("fedgen_z", "fedgen_y", "fedgen_class_z") if k in context)
        return Downlink(context=context, local=unsent)

    # -- server side --------------------------------------------------------------------------------

    def aggregate(
        self, global_params: Params, results: Sequence[ClientResult], round: int, weights: torch.Tensor | None = None
    ) -> Params:
        heads = [(r.params[f"{self.head}.weight"].detach().cpu().float(), _bias(r.params, self.head)) for r in results]
        counts = [_counts(r) for r in results]
        table, qualified = label_weights(counts)
        if qualified:
            self.prior = self._prior(counts, qualified)
            self._train_generator(heads, table, round)
        return super().aggregate(global_params, results, round, weights)

    def _prior(self, counts: Sequence[torch.Tensor], qualified: list[int]) -> torch.Tensor:
        """The label distribution the generator and the clients' samples draw from (see ``label_prior``)."""
        prior = torch.zeros(self.num_classes, dtype=torch.float64)
        if self.options.label_prior == "counts":
            total = torch.stack([c.to(torch.float64) for c in counts]).sum(dim=0)
            prior[qualified] = total[qualified]
        else:
            prior[qualified] = 1.0
        return prior / prior.sum()

    def _train_generator(self, heads: list[tuple[torch.Tensor, torch.Tensor | None]], table: torch.Tensor, round: int) -> None:
        """``generator_steps`` Adam steps on teacher + eta * diversity; then the learning rate decays (once per round)."""
        o = self.options
        rng = torch.Generator().manual_seed(derive_seed(instance_seed(self.seed), "fedgen", round))
        loss = torch.zeros((), dtype=NOISE_DTYPE)
        for _ in range(o.generator_steps):
            y = torch.multinomial(self.prior, o.generator_batch, replacement=True, generator=rng)
            noise = torch.rand(o.generator_batch, o.noise_dim, generator=rng, dtype=NOISE_DTYPE)
            leaves = {k: v.clone().requires_grad_(True) for k, v in self.params.items()}
            with torch.enable_grad():
                z = self._generate(y, noise, leaves)
                loss = teacher_loss(z, y, heads, table, o.teacher) + o.eta * diversity_loss(noise, z)
                grads = torch.autograd.grad(loss, list(leaves.values()))
            self._adam_step(dict(zip(leaves, grads)))
        self._last_loss = float(loss.detach())
        self.lr *= o.lr_decay
        self.trained_rounds += 1

    def _adam_step(self, grads: Mapping[str, torch.Tensor]) -> None:
        """torch.optim.Adam's update (L2 weight decay added to the gradient, bias-corrected moments)."""
        b1, b2 = ADAM_BETAS
        self.steps += 1
        m, v = self.moments["m"], self.moments["v"]
        for k, w in self.params.items():
            g = grads[k] + self.options.weight_decay * w
            m[k] = b1 * m.get(k, torch.zeros_like(w)) + (1 - b1) * g
            v[k] = b2 * v.get(k, torch.zeros_like(w)) + (1 - b2) * g * g
            m_hat = m[k] / (1 - b1**self.steps)
            denom = (v[k] / (1 - b2**self.steps)).sqrt() + ADAM_EPS
            self.params[k] = w - self.lr * m_hat / denom

    def round_metrics(self) -> Mapping[str, Json]:
        return {"generator_loss": self._last_loss} if self.trained_rounds else {}

    def state_dict(self) -> dict[str, Any]:
        """The generator's weights, its Adam moments, step count and learning rate, and the label prior of the last round."""
        return {
            "generator": params_state(self.params),
            "m": params_state(self.moments["m"]),
            "v": params_state(self.moments["v"]),
            "steps": self.steps,
            "lr": self.lr,
            "prior": self.prior,
            "trained_rounds": self.trained_rounds,
            "last_loss": self._last_loss,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        check_state_keys(state, ("generator", "m", "v", "steps", "lr", "prior", "trained_rounds", "last_loss"), "FedGen")
        # the generator trains on the host (its samples go down as messages): a checkpoint read onto the run's device
        # comes back here, or a GPU resume would draw with a host generator on the device
        self.params = {k: v.cpu() for k, v in load_params(state["generator"]).items()}
        self.moments = {m: {k: v.cpu() for k, v in load_params(state[m]).items()} for m in ("m", "v")}
        self.steps = int(state["steps"])
        self.lr = float(state["lr"])
        self.prior = state["prior"].to("cpu", torch.float64)
        self.trained_rounds = int(state["trained_rounds"])
        self._last_loss = float(state["last_loss"])


def _decayed(weight: float, decay: float, round: int) -> float:
    """The official ``exp_lr_scheduler``: max(1e-4, weight * decay^round); a weight of 0 stays 0 (the term off)."""
    return max(1e-4, weight * decay**round) if weight > 0 else 0.0


def _bias(params: Mapping[str, torch.Tensor], head: str) -> torch.Tensor | None:
    bias = params.get(f"{head}.bias")
    return None if bias is None else bias.detach().cpu().float()


def _counts(result: ClientResult) -> torch.Tensor:
    counts = result.report.get("label_counts")
    if not isinstance(counts, torch.Tensor):
        raise ValueError(f"FedGen needs report['label_counts'] from every client (client {result.client_id})")
    return counts


def _build(options: FedGenOptions, ctx: BuildContext) -> Built:
    from chillfl.models.parts import head_size
    from chillfl.training.fedgen import FedGenLatentTerm, FedGenTerm

    head = require_head(ctx, "FedGen")
    classes, features = head_size(ctx.model)
    terms: list[Term] = [FedGenTerm(head)]
    if options.beta > 0:
        terms.append(FedGenLatentTerm(head))
    return FedGen(options, head, classes, features, ctx.seed), terms


def _bind(aggregator: FedGen, ctx: BuildContext) -> None:
    """An instance passed from Python starts its generator and draws its samples from the run's seed, as the builder's
    does: its ``seed`` the run's (None: filled, and the generator drawn from it at first use, again only where it was
    read before the run), another refused on ``aggregator.seed`` (seed 0 drew every seed's alike). Weights set or loaded
    from Python after such a read are the user's, kept (a warm start's were drawn over, its Adam state kept): whatever
    differs from seed 0's drawing in a name or a value (:func:`~chillfl.aggregation.base.same_params`), so a warm start
    written into the read dict (``params.update``, a tensor's ``copy_``) counts as well as a set or loaded one."""
    seed = run_value(aggregator.seed, ctx.seed, instance_field(ctx, "seed"), "seed")
    if aggregator.seed is None and aggregator._generator is not None:  # drawn from seed 0 before the run: drawn again
        held = aggregator._params
        aggregator.draw_generator(instance_seed(None))  # seed 0's drawing again, to tell it from the user's by value
        drawn = aggregator._params
        own = held is not None and (drawn is None or not same_params(held, drawn))
        aggregator._draw(seed, held if own else None)
    aggregator.seed = seed


CAPABILITIES = Capabilities(
    takes_weights=True,
    reports="each client's label counts, from which the server builds the generator's prior",
    linear_head="FedGen's teacher and client term compute CE(W z + b, y) on generated features z from the head's weight and bias",
)


def _capabilities(options: FedGenOptions) -> Capabilities:
    """Its cost: a frozen forward's worth a local step (generated features through the generator and the head), and the
    generator's ``generator_steps`` on the server a round (their pass through every teacher head is not counted)."""
    return replace(CAPABILITIES, cost=Cost(step_passes=1 + FORWARD, server_steps=options.generator_steps))


SPEC = register_algorithm(
    "fedgen",
    AlgorithmSpec(
        FedGenOptions,
        _build,
        "server-trained feature generator as regulariser (Zhu et al. 2021)",
        capabilities=CAPABILITIES,
        capabilities_of=_capabilities,
        makes=(FedGen,),  # an instance passed from Python meets this spec's checks (check_instance)
        bind=_bind,
    ),
)
