"""The public extension API: write your own method outside the package, against these types.

A method is made of up to four parts, each one small class (docs/extending.md is the tutorial,
docs/architecture.md the reference of the seams they plug into):

* **an aggregator** (server rule, :class:`Aggregator`): it receives the global state and the
  round's :class:`ClientResult` s (sorted by client id) and returns the next global state; it
  may send each client extra :class:`Downlink` context, and owns the server's state between
  rounds (``state_dict`` / ``load_state_dict``, for bitwise resume). Subclass
  :class:`AggregatorBase` for the do-nothing parts (:class:`FedAvg` when the rule is FedAvg's
  weighted mean), and declare what core code may ask in ``capabilities = Capabilities(...)``
  (takes per-client weights, plain SGD only, runs on Flower, holds a personal model); a rule
  that computes only part of the global model from the uploads (FedPer's base, not its head)
  says which part in ``aggregated_keys`` (:class:`AggregatesPart`), which ``[privacy]`` clips; a wrapper over another
  algorithm (``AlgorithmSpec(wraps="base")``) subclasses :class:`AroundAggregator` and builds its base with
  :func:`build_base`, and the run holds it to its base's limits too; one that reads each client's update
  w_i - start_i (a clip, a forging of its own) keeps the starts its base's downlinks sent (:class:`SentStarts`) and
  says so (:class:`ReadsUpdates`), so that the run refuses a client half that moves its start in ``prepare``;
* **its client half** (:class:`ClientHalf`, optional, from ``Aggregator.client_half()``): it
  runs on the client around local training: ``prepare`` receives the client's own state
  (:data:`ClientState`, name -> tensor), the start model and the sent context, and returns the
  model and context to train with; ``finish`` receives the :class:`Trained` outcome and returns
  the client's next state and its :data:`Report` to the server (:func:`evaluate` is the built-ins' loss and accuracy
  of a state on the client's rows, which IFCA's choice and q-FFL's report read). The runtime keeps the state
  (in checkpoints too); the half holds options only, since it travels to worker processes.
  A half that keeps the client's own model implements :class:`HoldsPersonalModel`
  (``checkpoint.client_models`` saves it), and one that puts the client's own values of some
  entries in place of the sent ones implements :class:`KeepsEntries` (a returning client's
  downlink does not carry them; with :class:`HoldsKeptEntries` a resumed run checks that each such client holds them), and one whose client holds state before its first participation
  (FML's independently initialised local model) implements :class:`StartsOwnState`, and one whose local accuracy is taken
  on the server after the average (FedPer's ``local_eval = "averaged"``) is :class:`MeasuredAfterAverage`; one that runs the client's trainings itself
  (Ditto, FedRep) is :class:`Personalising`, yielding :class:`Train` requests, and one whose trainings besides the run's
  own have their own epochs (FedRep's head) declares them (:class:`PlansStages`, a :class:`PlannedStage` each), so that the
  check before the run counts their local steps too; one that never runs the run's own training (pFedMe's inner problems
  only) says so too (:class:`SkipsOwnTraining`), so that the check does not count it. A server rule that acts on the
  parameters and averages the buffers implements :class:`LearnsParameters`, told the run's model. One whose downlink feeds
  local terms declares them (:class:`NeedsTerms`; its spec returns them with :func:`with_terms`), so that an instance passed
  from Python runs them too; an instance passed from Python is held to the checks of the spec that builds it, found by
  :attr:`AlgorithmSpec.makes` (the classes a registered spec makes) or named by the instance (:class:`BuiltBySpec`, for a
  spec registered nowhere). An aggregator that makes part of each
  client's model itself (pFedHN's hypernetwork) implements :class:`MakesClientModels`, and the half's personal model is
  built on it (for every client that took part, even one whose half keeps no state). A half whose client's own model
  is not the run's architecture (FedCP's policy-split head) implements :class:`OwnArchitecture`: local accuracy runs it
  in the template the half brings. An aggregator whose
  ``aggregate`` is defined with no client (a private aggregator releasing its noise alone) implements
  :class:`AggregatesNobody`: a round nobody reported then runs through it instead of being skipped; one whose method
  trains every client with training rows each round while aggregating the reporting ones only (pFedMe's Algorithm 1)
  implements :class:`TrainsEveryClient`: the others are sent the round's model and trained too, their states kept and
  their local accuracy measured, their uploads never read;
* **local objective terms** (:class:`LossTerm`, or :class:`BatchTerm` for terms that read the
  batch's features): each receives the trainable parameters and the client's :data:`Context`
  and returns a scalar added to the loss; ``reads`` names the context keys it reads
  (:func:`read_table`, :func:`read_number`, :func:`read_tensor` read them typed); a
  :class:`TermSpec` (:func:`register_term`) makes one a name for ``[objective] terms``; a client half's ``objectives``
  may replace the data loss itself (:data:`BaseLoss`: a plain :data:`LossFunction`, or a :class:`DeclaredLoss` that
  declares ``uses_context`` / ``uses_features``, checked against its signature when its spec is built);
* **a temperature policy** (:class:`TemperaturePolicy`): the softmax temperature each client
  trains with, per round, updated from the clients' local accuracy; where the temperature is
  the client's own (FedChill), its client half (:class:`TemperatureHalf`) keeps it in the
  client's state; a :class:`PolicySpec` (:func:`register_policy`) declares its
  :class:`Capabilities` from its options;
* **a soft-label method** (a :class:`SoftLabelSpec`: its options, its server half
  :class:`SoftLabelMethod` and its client half :class:`SoftLabelClientHalf`, stateless by default
  (:class:`SoftLabelClientHooks`) or with a typed :class:`MethodState`): how the server combines
  the clients' soft-labels on the public set, what clients upload and what each keeps;
* **a prototype method** (a :class:`PrototypeSpec`: its options and its :class:`PrototypeHooks`):
  what a client releases about its classes after training (:class:`ClassRows`: class means,
  counts and the method's own per-class rows), how the server combines them into the global
  :class:`Knowledge`, and the clients' loss (a :class:`PrototypeLoss`, told the model's
  :class:`Head`);
* **a model** (any ``nn.Module``; passed to ``chillfl.run(model=...)``, or named in ``[model] name`` by import path
  or entry point: a class or function called as ``build(input_shape, num_classes, options, section)``, or a
  :class:`ModelSpec`): one that names its classifier
  head (:class:`DeclaresHead`, a ``head_name()`` method) is split there by every method that reads the
  representation or personalises the head (MOON, the prototype family, FedRoD, FedDBE, FedGen, CKA);
  one that does not gets its last ``nn.Linear``, with a warning;
* **an attack** (an :class:`AttackSpec`: its options and its hooks): what the attacking clients do,
  by rewriting their training data before the run (under every protocol) or forging what they
  upload (the run's data is a :class:`FederatedData`; :func:`relabel_rows` rewrites the attackers' labels in a copy): their models, given the whole round (:class:`ModelRound`), their soft-label rows
  (:class:`RowsUpload`) or their class prototypes (:class:`PrototypeUpload`); optionally a probe
  whose accuracy under the global model is recorded as the attack's success;
* **a privacy mechanism** (a :class:`MechanismSpec`: its options, what it accounts and its hooks): what
  each round costs which privacy unit (:class:`Accounting` before the run, :class:`Charge` s per round
  given the :class:`Participant` s, over the run's :class:`RunSizes`), and where it acts with the decided
  :class:`Noise`: around the weighted-mean aggregator (a :class:`WeightedMean`; :class:`PrivateAggregation`
  is the built-ins' clip-and-noise; a class of its own that lets attackers skip it says whom by
  :class:`ExemptsClients`), in the local step (:class:`PrivateGradients`) or on a client's
  soft-label rows (:class:`RowRelease`).

Use them either way, with no global state touched:

* from Python, as instances: ``chillfl.run(config, aggregator=MyRule(), terms=[MyTerm()],
  policy=MyPolicy())`` (and ``chillfl.compare``); each run works on deep copies;
* from a config or the command line, by import path: ``[algorithm] name = "mypkg.rules:MyRule"``,
  ``[temperature] policy = "mypkg.warmup:Warmup"``, ``[distillation] method = "mypkg.sl:SPEC"``,
  ``[prototypes] method = "mypkg.protos:SPEC"``, ``[model] name = "mypkg.nets:Net"``, ``[attack] kind = "mypkg.attacks:SPEC"``, ``[privacy] mechanism = "mypkg.dp:SPEC"``,
  with the class's ``Options`` dataclass parsed and validated like a built-in's options
  (or an :class:`AlgorithmSpec` / :class:`PolicySpec` when the builder needs more, e.g. the
  number of clients, or adds terms); or by a name that an installed distribution registers
  under the ``chillfl.plugins`` entry-point group, which ``chillfl list`` then shows.

This module imports torch (the types are torch's); ``import chillfl`` alone does not.
"""

from __future__ import annotations

from chillfl.aggregation.base import (
    Aggregator,
    AggregatorBase,
    AroundAggregator,
    AggregatesPart,
    ChoosesStart,
    ClientHalf,
    ClientResult,
    ClientState,
    Context,
    Downlink,
    FedAvg,
    HoldsPersonalModel,
    HoldsKeptEntries,
    KeepsEntries,
    NamesKeepOption,
    LearnsParameters,
    Local,
    NeedsTerms,
    BuiltBySpec,
    MakesClientModels,
    MeasuredAfterAverage,
    AggregatesNobody,
    LocalProgram,
    OwnArchitecture,
    Params,
    Personal,
    Personalising,
    PlannedStage,
    PlansStages,
    ReadsUpdates,
    SkipsOwnTraining,
    Report,
    SentStarts,
    StartsOwnState,
    Stateless,
    Train,
    Trained,
    TrainsEveryClient,
    Wire,
    aggregated_keys,
    check_state_keys,
    combine,
    load_params,
    own_entries,
    params_state,
    sample_weights,
    weighted_average,
    with_prefix,
)
from chillfl.aggregation.registry import (
    AlgorithmSpec,
    BuildContext,
    after_average,
    build_base,
    instance_field,
    register_algorithm,
    require_model_head,
    run_value,
    weighted_bases,
    with_terms,
)
from chillfl.attacks.poison import relabel_rows
from chillfl.attacks.spec import AttackSpec, ModelRound, PrototypeUpload, RowsUpload
from chillfl.aggregation.scaffold import LinearCorrectionTerm
from chillfl.capabilities import FORWARD, ONE_BATCH_JOB, PARAMETER_TERM, Capabilities, Cost, TakesName
from chillfl.data import ArrayDataset, FederatedData
from chillfl.data.datasets import DatasetEntry, DatasetSize
from chillfl.data.partition import Partition, PartitionerEntry
from chillfl.protocols.softlabels.messages import SoftLabelUplink
from chillfl.protocols.softlabels.method import (
    Aggregate,
    MethodState,
    NoState,
    Pretraining,
    SoftLabelClientHalf,
    SoftLabelClientHooks,
    SoftLabelMethod,
    SoftLabelSpec,
    stack_uplinks,
)
from chillfl.errors import ConfigError
from chillfl.models.parts import DeclaresHead
from chillfl.models.spec import ModelSpec
from chillfl.options import require
from chillfl.privacy.aggregate import AdaptiveClip, PrivateAggregation, WeightedMean
from chillfl.privacy.spec import Accounting, Charge, ExemptsClients, MechanismSpec, Noise, Participant, RunSizes
from chillfl.protocols.softlabels.client import RowRelease
from chillfl.prototypes.maths import PrototypeLoss, Weighting, aggregate_means, class_means, nearest_prototype, prototype_distance
from chillfl.prototypes.spec import ClassRows, Head, Knowledge, PrototypeHooks, PrototypeSpec, average_rows
from chillfl.seeds import derive_seed
from chillfl.settings.distillation import MethodSettings
from chillfl.plots.registry import FigureSpec, register_figure
from chillfl.temperature import ClassCounts, PolicySpec, register_policy
from chillfl.temperature.base import ConstantTemperature, TemperatureHalf, TemperaturePolicy, TemperatureState
from chillfl.training.local import BaseLoss, DeclaredLoss, LocalSpec, LossFunction, PrivateGradients, evaluate
from chillfl.training.objective import BatchTerm, ContextError, LossTerm, ProximalTerm, StepView, Term, read_number, read_table, read_tensor
from chillfl.training.terms import TermError, TermSpec, register_term

__all__ = [
    "Accounting",
    "AdaptiveClip",
    "Aggregate",
    "Aggregator",
    "ArrayDataset",
    "AggregatorBase",
    "AggregatesPart",
    "AroundAggregator",
    "AlgorithmSpec",
    "AttackSpec",
    "BatchTerm",
    "BaseLoss",
    "BuildContext",
    "Capabilities",
    "Charge",
    "ChoosesStart",
    "ClassCounts",
    "ClassRows",
    "ClientHalf",
    "ClientResult",
    "ClientState",
    "ConfigError",
    "ConstantTemperature",
    "Context",
    "ContextError",
    "Cost",
    "DatasetEntry",
    "DatasetSize",
    "DeclaresHead",
    "DeclaredLoss",
    "FORWARD",
    "ONE_BATCH_JOB",
    "PARAMETER_TERM",
    "Downlink",
    "FedAvg",
    "FederatedData",
    "FigureSpec",
    "Head",
    "HoldsPersonalModel",
    "HoldsKeptEntries",
    "KeepsEntries",
    "NamesKeepOption",
    "LearnsParameters",
    "NeedsTerms",
    "BuiltBySpec",
    "with_terms",
    "Knowledge",
    "LinearCorrectionTerm",
    "Local",
    "LocalProgram",
    "LocalSpec",
    "ExemptsClients",
    "LossTerm",
    "LossFunction",
    "MakesClientModels",
    "MeasuredAfterAverage",
    "AggregatesNobody",
    "MechanismSpec",
    "MethodSettings",
    "MethodState",
    "ModelRound",
    "ModelSpec",
    "NoState",
    "Noise",
    "OwnArchitecture",
    "Params",
    "Participant",
    "Partition",
    "PartitionerEntry",
    "Personal",
    "Personalising",
    "PlannedStage",
    "PlansStages",
    "ReadsUpdates",
    "SkipsOwnTraining",
    "PolicySpec",
    "Pretraining",
    "PrivateAggregation",
    "PrivateGradients",
    "PrototypeHooks",
    "PrototypeLoss",
    "PrototypeSpec",
    "PrototypeUpload",
    "ProximalTerm",
    "Report",
    "RowRelease",
    "RowsUpload",
    "RunSizes",
    "SoftLabelClientHalf",
    "SoftLabelClientHooks",
    "SoftLabelMethod",
    "SoftLabelSpec",
    "SoftLabelUplink",
    "StartsOwnState",
    "SentStarts",
    "Stateless",
    "TakesName",
    "StepView",
    "TemperatureHalf",
    "TemperaturePolicy",
    "TemperatureState",
    "Term",
    "TermError",
    "TermSpec",
    "Train",
    "Trained",
    "TrainsEveryClient",
    "WeightedMean",
    "Weighting",
    "Wire",
    "aggregate_means",
    "aggregated_keys",
    "after_average",
    "average_rows",
    "build_base",
    "check_state_keys",
    "class_means",
    "combine",
    "derive_seed",
    "evaluate",
    "instance_field",
    "load_params",
    "nearest_prototype",
    "own_entries",
    "params_state",
    "prototype_distance",
    "read_number",
    "read_table",
    "read_tensor",
    "register_algorithm",
    "register_figure",
    "register_policy",
    "register_term",
    "relabel_rows",
    "require",
    "require_model_head",
    "run_value",
    "sample_weights",
    "stack_uplinks",
    "weighted_average",
    "weighted_bases",
    "with_prefix",
]
