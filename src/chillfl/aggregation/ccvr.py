"""CCVR (Luo et al., NeurIPS 2021): FedAvg, then the classifier calibrated on virtual representations.

"No Fear of Heterogeneity: Classifier Calibration for Federated Learning with Non-IID Data" (Sec. 4, Algorithm 1).
The model is FedAvg's. Calibration then retrains the classifier head alone, on the server:

1. each client k computes, with the global model it was sent and for every class c it holds, the mean mu_ck and the
   unbiased covariance Sigma_ck of the head's inputs (the representation: :mod:`chillfl.models.parts`) over its N_ck
   rows of class c, and sends them (:data:`CLASSES`, :data:`COUNTS`, :data:`MEANS`, :data:`COVS`: the report, priced
   by the ledger as the upload's ``control`` bytes);
2. the server pools them exactly (N_c = sum_k N_ck)::

       mu_c    = sum_k N_ck / N_c mu_ck
       Sigma_c = sum_k (N_ck - 1) / (N_c - 1) Sigma_ck + sum_k N_ck / (N_c - 1) mu_ck mu_ck^T - N_c / (N_c - 1) mu_c mu_c^T

   (the unbiased covariance of all the class's rows, as if pooled: :func:`pool`);
3. draws ``virtual_per_class`` features per class from N(mu_c, Sigma_c) (:func:`draw_virtual`);
4. trains the head alone on them with cross-entropy, ``calibration_steps`` SGD steps of ``calibration_batch`` at
   ``calibration_lr`` (:func:`calibrate_head`). The body and every buffer stay FedAvg's.

Choices
-------
* **When** (``every_round``). ``false`` (default, the paper's): FedAvg for the first ``rounds - 1`` rounds; the last
  round is the calibration round: its clients compute their statistics with the global model they are sent (FedAvg's
  model after ``rounds - 1`` rounds), train nothing, and the server calibrates that model's head, so the last record's
  global accuracy is the calibrated model's. A round exchanges one message each way, so the paper's extra exchange
  after training takes the run's last round: a CCVR run of ``rounds = R`` trains R - 1 rounds, and compares with
  FedAvg at R - 1 (or set R + 1). ``true`` (FL-bench's ``CCVRServer.test``): every round trains as FedAvg and its
  clients send their statistics of the model they were sent; the server calibrates the head of the round's average
  with them before it is evaluated, and sends the next round's clients the average's own head (the calibration serves
  the evaluation only, as FL-bench restores the head after testing). The statistics are then one round behind the
  body they calibrate (the model the round's clients received, not the average they trained to): FL-bench asks every
  client again after the average, which chillfl's one exchange a round has no room for.
* Only the round's participating clients send statistics: under partial participation the calibration sees their
  classes only (the paper's clients all take part); a class no participating client holds gets no virtual features.
  A last round skipped (fewer than ``min_clients`` reporting) calibrates nothing: the model stays FedAvg's.
* ``virtual_per_class = 100``: the paper studies M_c in its ablation; 100 is this implementation's default, not a
  number read from the paper (its text was not at hand); FL-bench's ``sample_per_class`` is 200.
* Statistics are computed in eval mode, in float64, and sent as float32 (the model's precision); a class a client
  holds once sends a zero covariance (its weight N_ck - 1 is 0). A class with N_c = 1 over all clients has a zero
  covariance. The server pools in float64.
* **Positive definite for sampling**: Sigma_c is symmetrised, its eigenvalues below 0 (rounding) set to 0, and a
  ridge of :data:`RIDGE` added to every eigenvalue; features are drawn as mu_c + V diag(sqrt(lambda + ridge)) e,
  e ~ N(0, I), from the run's own stream ``derive_seed(seed, "ccvr", round)``, class by class, in float64 on the
  CPU; the same stream then shuffles the virtual set (a fresh permutation each pass over it).
* The head trains with plain SGD (no momentum, no weight decay), ``calibration_lr = 0.01``, batches of
  ``calibration_batch = 64``, ``calibration_steps = 100`` steps, through the head module's own forward: its output is
  taken as the logits (a model that transforms the head's output further is calibrated on the head's output).
* The calibration round's clients report the received model's mean cross-entropy on their rows as their training loss
  (they train nothing), and send that model back unchanged, priced as every upload is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal, Mapping, Sequence

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
    Params,
    Personal,
    Report,
    Train,
    Trained,
    Wire,
    check_state_keys,
    client_weights,
    load_params,
    params_state,
    report_tensor,
    weighted_average,
)
from chillfl.aggregation.registry import AlgorithmSpec, BuildContext, Built, instance_field, register_algorithm, require_head, require_model_head, run_value
from chillfl.capabilities import FORWARD, Capabilities, Cost
from chillfl.errors import ConfigError
from chillfl.models.parts import head_inputs, head_name, head_size
from chillfl.options import require
from chillfl.seeds import derive_seed, instance_seed
from chillfl.training.local import LocalSpec

if TYPE_CHECKING:  # config imports no method
    from chillfl.config import RunConfig


@dataclass(frozen=True)
class CCVROptions:
    """``virtual_per_class`` (M_c), ``calibration_steps``, ``calibration_lr``, ``calibration_batch``, ``every_round``
    (false: calibrate in the last round only, the paper's; true: every round before evaluation), ``weighting`` (FedAvg's)."""

    virtual_per_class: int = 100
    calibration_steps: int = 100
    calibration_lr: float = 0.01
    calibration_batch: int = 64
    every_round: bool = False
    weighting: Literal["samples", "uniform"] = "samples"

    def validate(self, section: str) -> None:
        require(self.virtual_per_class >= 1, f"{section}.virtual_per_class", f"must be >= 1, got {self.virtual_per_class}")
        require(self.calibration_steps >= 1, f"{section}.calibration_steps", f"must be >= 1, got {self.calibration_steps}")
        require(math.isfinite(self.calibration_lr) and self.calibration_lr > 0, f"{section}.calibration_lr",
                f"must be a finite number > 0, got {self.calibration_lr}")
        require(self.calibration_batch >= 1, f"{section}.calibration_batch", f"must be >= 1, got {self.calibration_batch}")


PHASE = "ccvr_phase"
"""Context key the server sends in a round whose clients compute statistics: :data:`TRAIN_AND_STATS` or :data:`STATS_ONLY`."""
TRAIN_AND_STATS, STATS_ONLY = 1.0, 2.0
"""``every_round``'s rounds (train as FedAvg, and send statistics), and the calibration round (statistics only)."""
CLASSES, COUNTS, MEANS, COVS = "ccvr_classes", "ccvr_counts", "ccvr_means", "ccvr_covs"
"""Report keys: the classes the client holds, and per class its row count N_ck, mean mu_ck and covariance Sigma_ck."""
RIDGE = 1e-6
"""Added to every eigenvalue of a pooled covariance before sampling, so that N(mu_c, Sigma_c) is non-degenerate
(a ReLU feature that is 0 on every row of a class has zero variance)."""


def class_statistics(features: torch.Tensor, y: torch.Tensor) -> Report:
    """The client's message: its classes, and per class N_ck, mu_ck and the unbiased Sigma_ck (zero when N_ck = 1)."""
    f = features.double()
    classes = torch.unique(y)  # sorted
    counts, means, covs = [], [], []
    for c in classes.tolist():
        rows = f[y == c]
        mean = rows.mean(0)
        centred = rows - mean
        n = len(rows)
        counts.append(n)
        means.append(mean)
        covs.append(centred.T @ centred / (n - 1) if n > 1 else torch.zeros(f.shape[1], f.shape[1], dtype=f.dtype, device=f.device))
    return {
        CLASSES: classes.to(torch.int64),
        COUNTS: torch.tensor(counts, dtype=torch.int64, device=f.device),
        MEANS: torch.stack(means).to(features.dtype),
        COVS: torch.stack(covs).to(features.dtype),
    }


def pool(counts: Sequence[int], means: Sequence[torch.Tensor], covs: Sequence[torch.Tensor]) -> tuple[int, torch.Tensor, torch.Tensor]:
    """(N_c, mu_c, Sigma_c) of one class from the clients' (N_ck, mu_ck, Sigma_ck), in float64: the unbiased covariance of
    all the class's rows together (a zero matrix when N_c = 1)."""
    n = sum(int(k) for k in counts)
    mu = sum((int(k) / n) * m.double() for k, m in zip(counts, means))
    assert isinstance(mu, torch.Tensor)
    if n <= 1:
        return n, mu, torch.zeros(len(mu), len(mu), dtype=torch.float64, device=mu.device)
    sigma = torch.zeros(len(mu), len(mu), dtype=torch.float64, device=mu.device)
    for k, m, s in zip(counts, means, covs):
        m = m.double()
        sigma = sigma + (int(k) - 1) / (n - 1) * s.double() + int(k) / (n - 1) * torch.outer(m, m)
    return n, mu, sigma - n / (n - 1) * torch.outer(mu, mu)


def pool_reports(results: Sequence[ClientResult], num_classes: int) -> dict[int, tuple[int, torch.Tensor, torch.Tensor]]:
    """Class -> pooled (N_c, mu_c, Sigma_c) over the round's clients' reports, for every class one of them holds."""
    per: dict[int, tuple[list[int], list[torch.Tensor], list[torch.Tensor]]] = {}
    for r in results:
        classes = report_tensor(r, CLASSES, "CCVR").tolist()
        counts = report_tensor(r, COUNTS, "CCVR").tolist()
        means, covs = report_tensor(r, MEANS, "CCVR").cpu(), report_tensor(r, COVS, "CCVR").cpu()
        for i, c in enumerate(classes):
            if not 0 <= int(c) < num_classes:
                raise ValueError(f"CCVR: client {r.client_id} reported class {c}, outside 0..{num_classes - 1}")
            entry = per.setdefault(int(c), ([], [], []))
            entry[0].append(int(counts[i]))
            entry[1].append(means[i])
            entry[2].append(covs[i])
    return {c: pool(*per[c]) for c in sorted(per)}


def draw_virtual(pooled: Mapping[int, tuple[int, torch.Tensor, torch.Tensor]], per_class: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``per_class`` features of each pooled class from N(mu_c, Sigma_c + ridge): (features float64 ``[M, d]``, labels ``[M]``).

    Sigma_c is made positive definite by clamping its eigenvalues at 0 and adding :data:`RIDGE`; draws are class by
    class, in ascending class order, from ``generator`` (on the CPU)."""
    xs, ys = [], []
    for c, (_, mu, sigma) in pooled.items():
        values, vectors = torch.linalg.eigh((sigma + sigma.T) / 2)
        scale = vectors * (values.clamp(min=0) + RIDGE).sqrt()  # V diag(sqrt(lambda+ + ridge))
        e = torch.randn(per_class, len(mu), generator=generator, dtype=torch.float64)
        xs.append(mu + e @ scale.T)
        ys.append(torch.full((per_class,), c, dtype=torch.int64))
    return torch.cat(xs), torch.cat(ys)


def calibrate_head(
    head: nn.Module, prefix: str, params: Params, x: torch.Tensor, y: torch.Tensor, options: CCVROptions, generator: torch.Generator,
) -> Params:
    """The head's trainable parameters (keys ``prefix.name``) after ``calibration_steps`` SGD steps of cross-entropy on (x, y).

    Batches walk a permutation of the virtual set drawn from ``generator``, a new one at each pass. Only the head's
    parameters that require a gradient move; its buffers are read as they are."""
    names = [n for n, p in head.named_parameters() if p.requires_grad]
    device = params[f"{prefix}.{names[0]}"].device if names else x.device
    own = {n: params[f"{prefix}.{n}"].detach().clone() for n, _ in head.named_parameters()}
    buffers = {n: params[f"{prefix}.{n}"] for n, b in head.named_buffers() if b is not None and f"{prefix}.{n}" in params}
    dtype = next(iter(own.values())).dtype if own else torch.float32
    x, y = x.to(device=device, dtype=dtype), y.to(device)
    order = torch.empty(0, dtype=torch.int64)
    at = 0
    for _ in range(options.calibration_steps):
        if at >= len(order):
            order, at = torch.randperm(len(y), generator=generator), 0
        rows = order[at : at + options.calibration_batch].to(device)
        at += options.calibration_batch
        trainable = {n: own[n].requires_grad_(True) for n in names}
        logits = functional_call(head, ({**own, **trainable}, buffers), (x[rows],))
        loss = nn.functional.cross_entropy(logits, y[rows])
        grads = torch.autograd.grad(loss, [trainable[n] for n in names])
        with torch.no_grad():
            for n, g in zip(names, grads):
                own[n] = (trainable[n] - options.calibration_lr * g).detach()
    return {f"{prefix}.{n}": own[n] for n in names}


@dataclass(frozen=True)
class CCVRClient:
    """CCVR's client half: FedAvg's training, and in the rounds the server asks (:data:`PHASE`) the class statistics of
    the model it was sent; in the calibration round (:data:`STATS_ONLY`) the statistics alone. Keeps nothing."""

    model: nn.Module
    eval_batch_size: int = 1024

    def prepare(self, state: ClientState, start: Params, context: Context) -> tuple[Params, dict[str, Wire]]:
        return start, dict(context)

    def objectives(self, spec: LocalSpec) -> tuple[LocalSpec, ...]:
        return ()  # the run's own objective only

    def train(self, local: Local) -> LocalProgram:
        phase = local.context.get(PHASE)
        report: Report = {}
        if phase is not None:
            reps, logits = head_inputs(self.model, head_name(self.model, warn=False), local.start, local.x, self.eval_batch_size)
            report = class_statistics(reps, local.y)
            if phase == STATS_ONLY:
                loss = float(nn.functional.cross_entropy(logits.float(), local.y.to(logits.device)))
                return Personal(dict(local.start), 0, loss, report=report)
        trained = yield Train(local.start, local.context)
        return Personal(trained.params, trained.num_steps, trained.mean_loss, report=report)

    def finish(self, model: nn.Module, state: ClientState, trained: Trained) -> tuple[ClientState, Report]:
        return {}, {}


class CCVR(AggregatorBase):
    """FedAvg's weighted mean; the head calibrated on virtual representations in the rounds ``every_round`` says."""

    def __init__(self, model: nn.Module, options: CCVROptions = CCVROptions(), rounds: int | None = None, seed: int | None = None,
                 eval_batch_size: int = 1024, head: str | None = None) -> None:
        """``rounds``: the run's, whose last is the calibration round when ``every_round`` is false (None: unknown, refused then);
        ``seed``: the run's, which draws the virtual features (None: the run's, which a run fills, :func:`_bind`; 0 outside a run);
        ``head``: the classifier head's name where the builder looked it up (None: :func:`head_name`)."""
        self.model = model
        self.options = options
        self.rounds = rounds
        self.seed = seed
        self.eval_batch_size = eval_batch_size
        self.head = head_name(model) if head is None else head
        self.num_classes = head_size(model, self.head).classes
        self.trained_head: Params | None = None
        """``every_round``: the head of the last average, before calibration, which the next round's clients start from."""

    def client_half(self) -> ClientHalf:
        return CCVRClient(self.model, self.eval_batch_size)

    def last_round(self) -> int:
        if self.rounds is None:
            raise ValueError("CCVR calibrates in the run's last round: it needs the run's rounds (CCVR(..., rounds=...), make_aggregator(..., rounds=...))")
        return self.rounds - 1

    def phase(self, round: int) -> float | None:
        """What the round's clients do besides FedAvg's training: :data:`TRAIN_AND_STATS`, :data:`STATS_ONLY`, or None."""
        if self.options.every_round:
            return TRAIN_AND_STATS
        return STATS_ONLY if round == self.last_round() else None

    def downlink(self, client_id: int, round: int, global_params: Params) -> Downlink:
        phase = self.phase(round)
        context: dict[str, Wire] = {} if phase is None else {PHASE: phase}
        if self.trained_head is None:
            return Downlink(context=context)
        device = next(iter(global_params.values())).device  # a checkpoint may have brought the head back on another
        return Downlink(params={k: v.to(device) for k, v in self.trained_head.items()}, context=context)

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int) -> Params:
        phase = self.phase(round)
        if phase == STATS_ONLY:  # nobody trained: the model is the one they were sent, its head calibrated
            return {**global_params, **self.calibrated(global_params, results, round)}
        mean = weighted_average([r.params for r in results], client_weights(results, self.options.weighting))
        if phase is None:
            return mean
        head = self.calibrated(mean, results, round)
        self.trained_head = {k: mean[k].detach().clone() for k in head}
        return {**mean, **head}

    def calibrated(self, params: Params, results: Sequence[ClientResult], round: int) -> Params:
        """The head of ``params`` trained on virtual features drawn from the pooled statistics of ``results``."""
        pooled = pool_reports(results, self.num_classes)
        generator = torch.Generator().manual_seed(derive_seed(instance_seed(self.seed), "ccvr", round))
        x, y = draw_virtual(pooled, self.options.virtual_per_class, generator)
        return calibrate_head(self.model.get_submodule(self.head), self.head, params, x, y, self.options, generator)

    def state_dict(self) -> dict[str, Any]:
        """``every_round``: the uncalibrated head the next round starts from."""
        return {"trained_head": {} if self.trained_head is None else params_state(self.trained_head)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        check_state_keys(state, ("trained_head",), "CCVR")
        self.trained_head = load_params(state["trained_head"]) or None


CAPABILITIES = Capabilities(
    reports="each client's per-class feature means, covariances and counts",
    private_steps="its clients compute the class statistics they send from their data outside the local training",
    not_a_base="CCVR's server calibrates the head after the average and its clients' half asks for their statistics",
)


def capabilities(options: CCVROptions) -> Capabilities:
    """Its cost: with ``every_round``, a forward pass over each client's rows (its statistics) and ``calibration_steps``
    server steps a round; without, FedAvg's (the last round's forward pass replaces that round's training)."""
    if not options.every_round:
        return CAPABILITIES
    return replace(CAPABILITIES, cost=Cost(epochs=FORWARD, server_steps=options.calibration_steps))


def check(options: CCVROptions, config: RunConfig, section: str) -> None:
    """Without ``every_round`` the last round calibrates and trains nothing: a run needs a round to train before it."""
    if not options.every_round and config.federation.rounds < 2:
        raise ConfigError("federation.rounds", f"CCVR{'' if section.startswith('aggregator') else f' ({section}.name)'} calibrates in its last round, which trains nothing "
                                               f"({section}.every_round = false): it needs rounds >= 2, got {config.federation.rounds}")


def build(options: CCVROptions, ctx: BuildContext) -> Built:
    """CCVR on the run's model, rounds and seed; a model without a classifier head is a ConfigError on ``model.name``."""
    return CCVR(ctx.model, options, ctx.rounds, ctx.seed, head=require_head(ctx, "CCVR")), []


def _bind(aggregator: CCVR, ctx: BuildContext) -> None:
    """An instance passed from Python calibrates in the run's last round on features drawn from the run's seed: its
    ``rounds`` and ``seed`` the run's (None: filled), another refused on ``aggregator.rounds`` (it never calibrated, or
    failed in round 0 without any) or ``aggregator.seed`` (seed 0 drew every seed's virtual features alike)."""
    aggregator.rounds = run_value(aggregator.rounds, ctx.rounds, instance_field(ctx, "rounds"), "federation.rounds")
    aggregator.seed = run_value(aggregator.seed, ctx.seed, instance_field(ctx, "seed"), "seed")


def _check_model(options: CCVROptions, model: nn.Module) -> None:
    """CCVR calibrates the classifier head on virtual representations: a model without one is refused (both paths)."""
    require_model_head(model, "CCVR")


SPEC = register_algorithm(
    "ccvr",
    AlgorithmSpec(
        CCVROptions,
        build,
        "FedAvg, then the classifier head calibrated on virtual features from the clients' class statistics (Luo et al. 2021)",
        capabilities=CAPABILITIES,
        capabilities_of=capabilities,
        check=check,
        makes=(CCVR,),  # an instance passed from Python meets this spec's checks (check_instance)
        bind=_bind,
        check_model=_check_model,
    ),
)
