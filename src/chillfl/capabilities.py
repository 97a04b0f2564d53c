"""What a method declares about itself, so that core code asks a question instead of naming the method.

Every family's spec (aggregators, soft-label methods, prototype methods, temperature policies)
carries one :class:`Capabilities`. The run builder, the Flower apps and wrappers such as PA3Fed
read these fields; none of them tests a method's name or class. A plugin declares the same
fields, so the rules a built-in follows are written down for it too. The defaults are the
safe side: a method that declares nothing runs under chillfl's own runtime with any client
optimiser, takes no client weights and holds no personal model. Its :class:`Cost` says what work it
adds to a round beyond plain local SGD, which time estimates ask for (declaring nothing: priced as FedAvg).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import astuple, dataclass, replace

from chillfl.errors import ConfigError


FORWARD = 0.5
"""What a forward-only pass (a frozen teacher's, labelling a public set) counts in forward + backward passes: a third of
their FLOPs, but about half their time on the CPU-scale models, whose steps the per-call overhead bounds (measured
2026-12-02 on the 2-vCPU AVX2 machine: FedNTD's teacher, MOON's two frozen models)."""

PARAMETER_TERM = 0.6
"""The overhead of a term over every parameter tensor a pass (the proximal term mu/2 ||w - w^t||^2 and its gradient), in
plain steps' overheads (:attr:`Cost.pass_overhead`): a few calls a tensor and next to no FLOPs. Measured 2026-12-02 on the
2-vCPU AVX2 machine (``benchmarks/estimates.py``, FLex&Chill CNN on digits): FedProx took 1.26x FedAvg's CPU time, 0.48 ms
more a step, 0.6 of the estimate's 0.76 ms a step."""
ONE_BATCH_JOB = 1.0
"""The overhead of a training job of one batch (a client half that asks the training path for one job a batch: Per-FedAvg,
pFedMe), in plain steps' overheads (:attr:`Cost.pass_overhead`): the job's setup costs about a step's. Measured as
:data:`PARAMETER_TERM`: Per-FedAvg (FO), the run's batches once in one-batch jobs, took 1.47x FedAvg's CPU time, 0.84 ms
more a batch (1.1 steps' overheads)."""


@dataclass(frozen=True)
class Cost:
    """The work a method adds to a round beyond plain local SGD, in units the time estimates price
    (:mod:`chillfl.catalogue`: per-step overhead plus FLOPs). A forward-only pass counts :data:`FORWARD` of a
    forward + backward one; work on the parameters alone is priced by its calls (:attr:`pass_overhead`) and, where it sweeps
    many copies of them, its FLOPs (:attr:`step_parameter_flops`); the server's own work by the ``*_server_*`` fields."""

    step_passes: float = 1.0
    """Forward + backward passes of one local step, plain SGD's being 1: 2 for a second gradient a step (FedSAM),
    ``1 + FORWARD`` with one frozen model's forward a step (FedNTD's teacher), ``1 + 2 * FORWARD`` with two (MOON's)."""
    trainings: float = 1.0
    """Local trainings a client runs a round, each as long as the run's (``client.epochs``): 2 with a personal model trained as long (Ditto)."""
    epochs: float = 0.0
    """Further epochs over its own rows a client trains a round: FedAvg-FT's fine-tuning before it evaluates; ``FORWARD``
    for a forward pass (a prototype method's prototypes)."""
    public_samples: float = 0.0
    """Samples of a public set each client trains on a round (``FORWARD`` each it only labels): a soft-label method's distillation."""
    server_samples: float = 0.0
    """Samples the server trains the run's model on a round: a soft-label method's server model."""
    server_steps: float = 0.0
    """Steps the server takes a round on a small network of its own (FedGen's generator), priced at the per-step overhead alone."""
    test_passes: float = 0.0
    """Further forward passes over the whole test set, at the evaluation batch, on each round that evaluates (``eval.every``)
    besides the global model's evaluation: each client's own model where models stay with the clients (the clients expected to have trained by then). Below 0 where fewer rows are evaluated
    than the global model's pass (a protocol without a global model: its pass, the 1, does not run)."""
    pass_overhead: float = 0.0
    """Further overhead of each forward + backward pass of a local step, in plain steps' overheads, with no FLOPs: calls that
    work on the parameters alone (:data:`PARAMETER_TERM`, a proximal term) or a job set up a batch (:data:`ONE_BATCH_JOB`).
    Priced at the per-step overhead alone, so it weighs on the CPU-scale models, whose steps that overhead bounds."""
    extra_pass_overhead: float = 0.0
    """As :attr:`pass_overhead`, on the passes of the further trainings and epochs alone (the ``trainings - 1`` beyond the run's
    and the :attr:`epochs`), not of the run's own training: a term only a second training computes (Ditto's proximal term on
    its personal model)."""
    steps: float = 0.0
    """Further one-batch local passes a client takes a round outside its epochs (Per-FedAvg's ``adapt_steps``): each priced as a
    pass of ``client.batch_size`` samples with its :attr:`pass_overhead`, not multiplied by :attr:`step_passes`."""
    first_epochs: float = 0.0
    """Further epochs over its own rows a client runs once, at its first participation (FedALA's first ALA, until its losses
    settle; what a one-off fit costs, in such epochs): spread over the rounds with the clients expected to take part at least
    once, N (1 - (1 - m / N)^R)."""
    first_pair_flops: float = 0.0
    """FLOPs a client spends once, at its first participation, per pair of its rows and per input feature (n^2 d: a kernel or
    a Gram matrix over its rows, a fit on them: Selective-FD's density-ratio fit, PACFL's signature). Spread over the rounds as
    :attr:`first_epochs`; priced at the large models' throughput (dense float64 matrix work)."""
    step_parameter_flops: float = 0.0
    """FLOPs each local pass spends on the parameters alone, per trainable parameter of the model and per client of the
    federation: a step that mixes every client's copy of the model (APPLE's mixture of the N core models). Priced at the model's
    training throughput, on top of the pass's own FLOPs."""
    client_server_steps: float = 0.0
    """Work the server does a round for each sampled client, in plain steps' overheads, with no FLOPs: small sequential
    solvers (FedPAC's QP iterations). Host work: priced alike in the CPU and the GPU estimates."""
    class_server_steps: float = 0.0
    """As :attr:`client_server_steps`, for each class of the dataset a sampled client sends (priced at all the dataset's
    classes: an upper bound): steps on one row per class (FedGH's header steps on the class means)."""
    server_parameter_flops: float = 0.0
    """FLOPs the server spends a round for each sampled client, per trainable parameter of the model (pFedHN's hypernetwork:
    generating the client's model, the chain rule and the step, each over ``hidden`` x the parameters). Host work, priced at
    the small models' throughput in both estimates."""
    round_server_parameter_flops: float = 0.0
    """As :attr:`server_parameter_flops`, once a round whoever is sampled: the server's own model made afresh each round
    (pFedHN's global model, generated at the mean embedding: a matrix-vector product over ``hidden`` x the parameters)."""
    first_public_pair_flops: float = 0.0
    """FLOPs a client spends once, at its first participation, per pair of one of its rows and one sample of the run's public
    set, and per input feature (n |P| d: a kernel between its rows and the public set, scoring every public sample against
    its data: Selective-FD's selector). Spread over the rounds and priced as :attr:`first_pair_flops`; |P| is the protocol's
    (a run without a public set prices none)."""
    pair_server_steps: float = 0.0
    """Host work the server does once for each pair of the clients expected to take part, in plain steps' overheads, with no
    FLOPs: comparing what two clients sent once, each client against every other (PACFL's angles between two signatures).
    Priced at P^2 pairs, P = N (1 - (1 - m / N)^R): both ways, as a matrix of the first round's clients is (an upper bound
    when later newcomers are compared with the clients seen before them only)."""
    class_pair_server_steps: float = 0.0
    """As :attr:`pair_server_steps`, for each pair of their classes too (priced at all the dataset's classes, C^2 a pair of
    clients: an upper bound): comparing summaries sent a class each (PACFL's per-label signatures)."""

    def plus(self, other: Cost) -> Cost:
        """Both costs in one run (a method with a loss term, a wrapper over its base): the extras add up (the passes a step
        and the trainings, whose plain value is 1, add their excess over 1)."""
        total = Cost(*(a + b for a, b in zip(astuple(self), astuple(other))))
        return replace(total, step_passes=total.step_passes - 1, trainings=total.trainings - 1)


@dataclass(frozen=True)
class Capabilities:
    """A method's declared abilities and limits (each ``str`` field: None = no limit, else the one-line reason)."""

    plain_sgd: str | None = None
    """Why the method's server maths assumes plain (heavy-ball) SGD steps at one lr a round, e.g.
    "SCAFFOLD's option II control variate (x - y_i) / (K lr)". Set, a run refuses another client
    optimiser, Nesterov momentum or a per-step lr schedule, with this reason in the line."""
    on_flower: str | None = None
    """Why ``chillfl.flower`` cannot run the method (None: it can)."""
    takes_weights: bool = False
    """Its ``aggregate()`` accepts per-client ``weights=`` (a weighted average), so a wrapper that
    reweights clients (PA3Fed) may use it as its base."""
    withstands_bad_clients: bool = False
    """It is built to survive bad clients (a byzantine-robust rule: median, Krum, clipping), so the server leaves a
    client's non-finite upload out of its round, with one warning line, where any other rule stops the run naming the
    client (:func:`chillfl.aggregation.uploads.finite_uploads`). A spec that declares :attr:`AlgorithmSpec.tolerates`
    counts as one too."""
    not_a_base: str | None = None
    """Why a wrapper that reweights clients and brings its own client half cannot wrap it even though
    it takes weights (its clients run their own local training; its server step is its own)."""
    personal_model: bool = False
    """Each client keeps a model of its own (``checkpoint.client_models`` saves them; the method
    implements :class:`~chillfl.aggregation.base.HoldsPersonalModel` or its family's equivalent)."""
    trains_global_model: bool = False
    """With :attr:`personal_model`: the clients still train and upload the global model itself, as FedAvg's clients do
    (Ditto's and APFL's w, trained beside each client's personal model), so the analyses that read the global model and
    its aggregate (``cka``, ``aggregation-accuracy``, ``aggregation-entropy``) take the run. A personal-model method that
    does not declare it is refused there: what its clients upload is not a model they use (``local_only``'s global model
    is never trained, FedRep's and FedPer's heads stay home, FedBN's norm layers are the client's own). For the same
    reason a comparison marks such a method's row ``global_model = "partial"`` and names it under its table (the
    global-model caveat, :func:`chillfl.report.caveats.global_model_kind`)."""
    static_global_model: bool = False
    """Its server never changes the global model (it reads no upload: ``local_only``), so the run's global model stays the
    initial one and ``global_acc`` measures a model no client trained or uses. A comparison's table keeps the row's
    numbers and says so under it (the global-model caveat, :func:`chillfl.report.caveats.global_model_caveat`)."""
    trains_from_own_start: str | None = None
    """Why its clients train from a start the server does not know, the sent model changed inside their own training (a
    kept model, a blend with it, a combination of received models: FedAMP's w_i, FedALA's ALA blend, FedFomo's and
    APPLE's kept core model), e.g. "each client trains from its own kept model". A model attack forges from each attacker's
    update w_i - start_i with the start the server knows (the sent one, or a :class:`~chillfl.aggregation.base.ChoosesStart`
    method's report), so it is refused with such a method on ``attack.kind``: the forged uploads were silently other ones.
    (A start changed in a client half's ``prepare`` is caught when the clients report it; one changed inside a
    ``Personalising`` half's ``train`` cannot be, hence this declaration.)"""
    reports: str | None = None
    """What the method's clients send besides their model, computed from their data without noise (FedGen's
    label counts, q-FFL's loss), e.g. "each client's label counts". No ``[privacy]`` mechanism noises it or
    counts it in epsilon, so a private run refuses the method with this in the line."""
    private_steps: str | None = None
    """Why clipping and noising the local steps (``dp-sgd``'s per-sample step) does not bound all that the method's
    clients upload or report from their data: its clients read their data outside the round's one training (FedRep's
    head trained first, FedLC's loss built from the client's label counts), or the accountant, which counts one
    training a round, would miss some of their trainings (Ditto's personal model; FedAvg-FT's tuned model, whose
    local_acc is reported). Set, a private run with such a mechanism refuses the method with this in the line. A
    client half that runs its own trainings
    (:class:`~chillfl.aggregation.base.Personalising`) is refused even if it declares nothing."""
    linear_head: str | None = None
    """What of the method applies the model's classifier head as the affine map ``z -> W z + b`` (it reads the head's
    ``weight`` and ``bias`` and computes with them itself), e.g. "FedGen's teacher, CE(W z + b, y) on generated features z".
    Set, a run whose model's head is not an ``nn.Linear`` (a cosine classifier, a module with its own forward) is
    refused on ``model`` with this in the line; a method that only reads the head's input, keeps or averages its
    parameters, or reads its row count declares nothing."""
    steers_by_accuracy: str | None = None
    """What of the method reads each client's accuracy after its local training to steer its later training, e.g.
    "FedChill's decay (temperature.decay = true)". Without a validation split (``eval.validation = 0``) that accuracy
    is the client's evaluation split's, drawn from the test rows the run reports its accuracy on, so test rows steer
    training: the run says so in one line on stderr (:func:`chillfl.experiment.steering_note`), and a comparison's
    table in its steering caveat (:func:`chillfl.report.caveats.steering_caveat`)."""
    trains_at: float | None = None
    """The one softmax temperature a temperature policy trains every client at, every round (``none``: 1, ``fixed``: its
    ``value``); None: it sets T per client or round. A comparison reads it to tell which variants compare one T against
    another (its step-size caveat, the ``--controls`` at lr x 1/T, the T = 1 baseline), so a plugin's constant policy
    is one of them as the built-ins are."""
    limited_by: str | None = None
    """The option of the method's own table whose value sets the limits above (FedChill's
    ``normalisation = "minmax"`` keeps it off Flower), so a refusal names that option rather than
    the method; None: the method itself."""
    cost: Cost = Cost()
    """The work it adds to a round beyond plain local SGD, for time estimates (:class:`Cost`; the default: none, priced as FedAvg)."""

    @property
    def own_models_only(self) -> bool:
        """Whether the clients each keep a model of their own and do not train the global model itself
        (:attr:`personal_model` without :attr:`trains_global_model`): what they upload is not a model they use. One
        question, asked by the analyses that read the global model (they refuse the run) and by a comparison's table (its
        ``global_model = "partial"`` rows)."""
        return self.personal_model and not self.trains_global_model

    def wrapping(self, base: Capabilities) -> Capabilities:
        """A wrapper's effective capabilities over ``base``: it runs the base's server maths and client half, so the
        base's limits (plain SGD, Flower, a linear head), its personal model (and whether it trains the global model, or leaves it as
        it began), its reports, its private-step limit and its cost are the wrapper's too
        (the wrapper's own cost added); whether the wrapper can itself
        be wrapped (``takes_weights``, ``not_a_base``) stays its own."""
        return Capabilities(
            plain_sgd=self.plain_sgd or base.plain_sgd,
            on_flower=self.on_flower or base.on_flower,
            takes_weights=self.takes_weights,
            withstands_bad_clients=self.withstands_bad_clients or base.withstands_bad_clients,
            not_a_base=self.not_a_base,
            personal_model=self.personal_model or base.personal_model,
            trains_global_model=self.trains_global_model or base.trains_global_model,
            static_global_model=self.static_global_model or base.static_global_model,
            trains_from_own_start=self.trains_from_own_start or base.trains_from_own_start,
            reports=self.reports or base.reports,
            private_steps=self.private_steps or base.private_steps,
            linear_head=self.linear_head or base.linear_head,
            steers_by_accuracy=self.steers_by_accuracy or base.steers_by_accuracy,
            trains_at=self.trains_at if self.trains_at is not None else base.trains_at,
            limited_by=self.limited_by if (self.plain_sgd or self.on_flower) else None,
            cost=self.cost.plus(base.cost),
        )


def declared(value: object, name: str, field: str) -> Capabilities:
    """``value``, what a plugin ``name`` declares, when it is a :class:`Capabilities`; else a ConfigError on ``field``.

    A spec is a plain dataclass, so nothing stops a plugin from passing a string or a dict there; read as
    it is, it would end the run later with an AttributeError (first where a check asks one of its fields).
    """
    if not isinstance(value, Capabilities):
        raise ConfigError(field, f"{name!r}: its capabilities must be a chillfl.extend.Capabilities, got {type(value).__name__}")
    return value


def _all_paths(paths: Sequence[str]) -> list[str]:
    return list(paths)


@dataclass(frozen=True)
class TakesName:
    """What a spec declares of an option that is a plain string in its options dataclass but takes one of a registry's
    names (PA3Fed's ``base``: an algorithm; FedChill's ``measure``: a heterogeneity measure), in the spec's
    ``takes_names = {"option": TakesName(...)}``. The configuration reference (``chillfl list --options``) lists those
    names as the option's allowed values. Why declared: the reference named the two built-in options itself, so a
    plugin's option that takes a name was listed as a bare ``str``."""

    names: Callable[[], list[str]]
    """The names the option allows, read when the reference is rendered (``weighted_bases``; ``lambda: sorted(MEASURES)``)."""
    part: str | None = None
    """The part (config section: ``"algorithm"``) whose import paths the option takes as well; None: registered names only."""
    paths: Callable[[Sequence[str]], list[str]] = _all_paths
    """Of the import paths :attr:`part` claims in a listing (``chillfl list --options pkg.module:Name``), those the option
    allows, with or without the registered names (repeats are dropped); the default: every one of them."""
