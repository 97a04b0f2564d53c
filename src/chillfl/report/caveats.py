"""Warnings printed with a comparison's table where the table alone would mislead.

The test-set caveat: variants that differ in the dataset, its folder or ``eval.validation`` are scored on other
test rows (``eval.validation`` moves rows from the test set into the validation split), so a difference
"paired per seed" no longer compares them on the same samples.

The step-size caveat: the gradient of CE(z / T) is 1/T times that of CE(z) in scale (FLex&Chill
Eq. 2; ``tests/test_objective.py``), so temperatures compared at one shared learning rate differ in
step size as well as in temperature. At a small shared lr a low T "wins" the way a larger lr would
(the demo shows it: tuned per temperature, the gain vanishes). The caveat names the two remedies.

The steering caveat: a temperature policy that reads each client's accuracy after its training to steer its later
training (:attr:`~chillfl.capabilities.Capabilities.steers_by_accuracy`: FedChill's decay) reads it, without a validation
split (``eval.validation = 0``), on the client's evaluation split, drawn from the test rows the table reports: those
variants' accuracies are then not on rows their training never saw. The run says so on stderr; the table's reader sees
only the table, so it names them too (:func:`steering_caveat`).

The evaluation-interval caveat: a rounds (or MB) to target is that of the first round that *evaluated* the global
model at or above the target, so under ``eval.every`` = k it may lag the round that reached it by up to k - 1 rounds,
and two variants that reached it in different rounds of one interval tie (:func:`eval_interval_caveat`; each row's
``eval_interval`` in ``table.json``, :func:`chillfl.storage.results.evaluation_interval`).

The global-model caveat: a comparison pairs each variant's ``global_acc`` with the baseline's, and a few variants'
``global_acc`` is no trained global model's. A run whose protocol keeps no global model
(:attr:`~chillfl.protocols.registry.ProtocolKind.global_model`: FedProto, FedHKD with ``share_model = false``, FedGH)
records the mean of its clients' own models on the global test set; a run whose method never changes the global model
(:attr:`~chillfl.capabilities.Capabilities.static_global_model`: ``local_only``) records the initial model's; a run whose
clients each keep a model of their own and do not train the global model itself
(:attr:`~chillfl.capabilities.Capabilities.personal_model` without
:attr:`~chillfl.capabilities.Capabilities.trains_global_model`: FedRep, FedPer, LG-FedAvg, FedBN...) records a global
model only partly the clients' training: the server's, in which what each client keeps for itself (a head, a
representation, BN entries, a whole model) is averaged, left at its initial value or absent, and which no client trains or
uses as it is (under FedPer's default ``global_head = "average"`` its head is the clients' heads' mean, under ``"keep"``
the initial head). It is the model that the analyses of the global model refuse, asked the same question
(:func:`chillfl.analysis.replay.refuse_personal_models`). Their rows keep their numbers (as recorded), ``table.json`` marks them (``global_model``, :func:`global_model_kind`) and one
line under the table names them (:func:`global_model_caveat`).

The local validation warning: a client's local validation split may not follow its training class mix
(:meth:`chillfl.data.FederatedData.local_validation_mismatch`, each run's ``local_val_mix_tv``), so ``local_val_acc``
scores the client on another mix than it trains on. It matters only where a comparison *selects* on that number
(``local_final`` / ``local_best``), so only such a comparison warns, once, when a run's distance exceeds
:data:`LOCAL_MIX_TOLERANCE`. A warning where the splits are built fired on nearly every small run, which selects
nothing. Why, and so what helps, depends on the split kind (``eval.client_split``; :data:`LOCAL_MIX_ADVICE`):

* ``proportional``: the split is drawn from the validation split with the client's training mix, and a small
  validation split cannot supply it (the rows of a class it lacks go to the client's other classes), so the mix is
  *flatter* (8x8 digits at ``eval.validation = 0.2``: mean distance 0.36-0.45, ``local_val_acc`` 6-12 points under
  ``local_acc``). A larger ``eval.validation`` or a smaller ``eval.client_split_size`` lets it follow the mix.
* ``natural`` / ``partition``: the split is the client's own test rows (the dataset's, the partitioner's) that fell
  into the validation split, about ``eval.validation`` of them; ``eval.client_split_size`` does not size it. Few rows
  stray from the mix by chance (a larger ``eval.validation`` gives each client more of them); own test rows whose mix
  differs from the training rows' stay off at any size, and ``eval.client_split = "proportional"`` draws the split
  with the training mix instead.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from chillfl.aggregation.registry import configured_capabilities, run_capabilities
from chillfl.config import RunConfig
from chillfl.data.augment import AUGMENT_KEY
from chillfl.numeric import is_real
from chillfl.protocols.registry import protocol_of
from chillfl.temperature.policy import TemperaturePolicy
from chillfl.temperature.registry import constant_temperature, steers_on_test_rows


def _temperature(config: RunConfig, policy: TemperaturePolicy | None = None) -> str:
    """What the variant trains at: ``1`` (no chilling), ``T=<value>`` (a policy declaring one T, ``trains_at``), or a
    per-client policy's name. ``policy``: one passed from Python, read for its ``trains_at`` (:func:`constant_temperature`)."""
    value = constant_temperature(config.temperature, policy)
    if value is None:
        return str(config.temperature.get("policy", "none"))
    return "1" if value == 1.0 else f"T={value:g}"


def step_size_caveat(configs: Sequence[RunConfig], tune: Mapping[str, Sequence[Any]], controls: bool, uncontrolled: Sequence[str] = (),
                     policy: TemperaturePolicy | None = None) -> str | None:
    """One paragraph when the variants compare temperatures at one shared ``client.lr``; None otherwise.

    ``controls``: the comparison has step-size controls; they cover the variants at one fixed T, so the caveat then
    stays for ``uncontrolled`` alone (labels of chilled variants whose policy sets T per client or round: no one T to
    scale the lr by), naming them, and is None when there are none. ``policy``: the one passed from Python, if any."""
    temperatures = {_temperature(c, policy) for c in configs}
    lrs = {c.client.lr for c in configs}
    if len(temperatures) < 2 or len(lrs) != 1 or "client.lr" in tune or (controls and not uncontrolled):
        return None
    lr = lrs.pop()
    tuned = f"--seeds 0,1,2 eval.validation=0.2 --tune client.lr={lr:g},{5 * lr:g},{20 * lr:g} (docs/comparisons.md)."
    if controls:  # labels quoted, as the other caveats': a label may hold commas itself
        return (f"step-size caveat: the controls cover the variants at one fixed T; {', '.join(repr(label) for label in uncontrolled)} "
                f"set{'s' if len(uncontrolled) == 1 else ''} T per client or round, so {'it has' if len(uncontrolled) == 1 else 'they have'} none, "
                f"and {'trains' if len(uncontrolled) == 1 else 'train'} at the shared client.lr = {lr:g}, where the gradient of CE(z / T) "
                f"scales with 1/T: a gain there may be the step size alone. Tuned: {tuned}")
    return (
        f"step-size caveat: every variant trains at one shared client.lr = {lr:g}, and the gradient of CE(z / T) "
        "scales with 1/T, so a T < 1 row also takes larger steps: a gain here may be the step size alone. "
        "Controlled: rerun with --controls (adds T = 1 at lr x 1/T and magnitude-/direction-only ablations); "
        f"tuned: {tuned}"
    )


def _identity_breakers(config: RunConfig) -> list[str]:
    """What in ``config``'s local training breaks "magnitude only at lr = T = 1 at lr x 1/T", each as ``field = value (why)``.

    The identity is ``lr * (g / T) = (lr / T) * g`` step for step: it holds for SGD with momentum (Nesterov too) and
    lr decay or a schedule of factors, since each is linear in the gradient and the lr."""
    c = config.client
    out = []
    if c.optimizer != "sgd":
        out.append(f"client.optimizer = {c.optimizer!r} (it divides the gradient's scale out, so 1/T barely changes its steps while lr x 1/T does)")
    if c.weight_decay > 0:
        out.append(f"client.weight_decay = {c.weight_decay:g} (lr x 1/T scales the decay too, a gradient x 1/T does not)")
    if c.clip_norm > 0:
        out.append(f"client.clip_norm = {c.clip_norm:g} (it clips the gradient x 1/T to one norm, not the step)")
    if c.lr_schedule == "cosine" and c.lr_min > 0:
        out.append(f"client.lr_min = {c.lr_min:g} (cosine anneals to it, unscaled by lr x 1/T)")
    return out


def controls_caveat(controlled: Sequence[RunConfig]) -> str | None:
    """One line when the step-size controls ran where their identity fails (:func:`_identity_breakers`); None otherwise.

    ``controlled``: the configs of the variants that got controls (the controls share their local training). Under
    Adam, clipping, weight decay or a cosine floor, "T = 1 at lr x 1/T" no longer takes the chilled run's step, so its
    rows would read as step-size matches that they are not."""
    breakers = list(dict.fromkeys(b for c in controlled for b in _identity_breakers(c)))
    if not breakers:
        return None
    return ("controls caveat: the step-size controls rest on magnitude only at lr taking the steps of T = 1 at lr x 1/T, "
            f"which holds for plain SGD (momentum included), not with {'; '.join(breakers)}: read the control rows as ablations "
            "at another step size, not as step-size matches (docs/comparisons.md).")


def grid_edge_caveat(chosen: Sequence[tuple[str, Mapping[str, Any], Mapping[str, Sequence[Any]]]]) -> str | None:
    """One line naming each variant whose chosen value of a numeric tuned key is its grid's smallest or largest; None otherwise.

    ``chosen``: (label, its chosen point, its grid: the shared one and its own) of each variant that chose a point. A key
    with 2 values or fewer has no inside to choose, so only grids of more than 2 are read: there a chosen edge says the
    best value may lie beyond the grid (the README demo's T = 1 took the top lr, T = 0.05 the bottom)."""
    edges = []
    for label, point, grid in chosen:
        for key, values in grid.items():
            numbers = {float(v) for v in values if is_real(v)}
            value = point.get(key)
            if len(numbers) < 3 or len(numbers) != len(values) or not is_real(value):
                continue
            if value in (min(numbers), max(numbers)):
                edges.append(f"{label!r} chose {key} = {value:g}, the {'largest' if value == max(numbers) else 'smallest'} of its grid")
    if not edges:
        return None
    return f"grid-edge caveat: {'; '.join(edges)}: the best value may lie outside the grid; widen the grid to see (docs/comparisons.md)."


TEST_SET_FIELDS = ("dataset", "data_dir", "eval.validation")
"""What decides a run's global test rows besides the seed: the dataset table without its ``augment`` sub-table
(:func:`_rows_table`)."""


def _rows_table(dataset: Mapping[str, Any]) -> str:
    """The dataset table less ``augment``, as a comparable string. Why: crops and flips change training batches only
    and a normalisation maps every row alike, so variants that differ there are still scored on the same test samples
    (their paired differences compare them), where a caveat saying otherwise was a false alarm."""
    return json.dumps({k: v for k, v in dataset.items() if k != AUGMENT_KEY}, sort_keys=True, default=str)


def other_test_rows_caveat(configs: Sequence[RunConfig]) -> str | None:
    """One line when the variants are not scored on one test set (:data:`TEST_SET_FIELDS` differ); None otherwise."""
    keys = [(_rows_table(c.dataset), c.data_dir, c.eval.validation) for c in configs]
    differ = [name for i, name in enumerate(TEST_SET_FIELDS) if len({k[i] for k in keys}) > 1]
    if not differ:
        return None
    return (f"test-set caveat: the variants differ in {' and '.join(differ)}, so each is scored on other test rows: "
            "their accuracy differences, paired per seed, do not compare them on the same samples.")


@dataclass(frozen=True)
class Guarantee:
    """What one private variant's epsilon bounds: its mechanism's privacy unit under a neighbouring relation, at a delta.
    Epsilons of different guarantees bound different things and do not compare (:func:`epsilon_caveat`)."""

    mechanism: str
    relation: str
    delta: float

    def __str__(self) -> str:
        return f"{self.mechanism} ({self.relation} neighbours, delta = {self.delta:g})"


def guarantee(config: RunConfig) -> Guarantee | None:
    """The variant's :class:`Guarantee`; None when it runs without ``[privacy]``."""
    p = config.privacy
    if not p.enabled:
        return None
    return Guarantee(p.mechanism, p.spec.adjacency if p.adjacency == "auto" else p.adjacency, p.delta)


CLIENTS_AS_POISSON = "the round's clients, drawn without replacement under federation.sampling = \"fixed\", as Poisson sampled at q = m / N"
"""What a subsampled mechanism without an ``approximation`` hook approximates under fixed-size client sampling."""


def approximation(config: RunConfig) -> str | None:
    """What the private variant's epsilon accounts as Poisson sampled though the run samples it otherwise (docs/privacy.md,
    *Sampling*); None for a proven bound or a run without ``[privacy]``. The mechanism's own
    :attr:`~chillfl.privacy.spec.MechanismSpec.approximation` says it; without one, a subsampled mechanism is read as
    sampling clients: fixed-size sampling of fewer than every client a round (all of them every round is Poisson at q = 1)."""
    p = config.privacy
    if not p.enabled:
        return None
    spec = p.spec
    if spec.approximation is not None:
        return spec.approximation(p.options, config)
    fed = config.federation
    return CLIENTS_AS_POISSON if spec.subsampled and fed.sampling == "fixed" and fed.sample_size() < fed.num_clients else None


def epsilon_units(variants: Sequence[tuple[str, RunConfig]]) -> dict[str, str]:
    """Label -> what its epsilon bounds (:class:`Guarantee` as text), for the private variants: the marks of
    ``privacy_utility.png`` (:mod:`chillfl.plots.privacy_utility`), in the caveat's words."""
    return {label: str(g) for label, config in variants if (g := guarantee(config)) is not None}


def epsilon_caveat(variants: Sequence[tuple[str, RunConfig]], tuning_points: Mapping[str, int] | None = None) -> str | None:
    """One line under a table with an ``epsilon`` column: what each variant's epsilon bounds; None when no variant is private.

    The column alone reads as one scale, but each value is the run's own (mechanism, neighbouring relation, delta)
    guarantee for its own privacy unit (a client under ``dp-fedavg``, a sample under ``dp-sgd``, a client's upload or a
    soft-label row under ``local``): the line names them per group of variants, says that groups do not compare, and
    names the variants whose epsilon is the Poisson approximation (:func:`approximation`), not a proven bound.

    ``tuning_points``: label -> how many tuning points the variant chose among (``[tune]``). Each point is a private
    training on the same data, and the chosen run's epsilon does not account the choice (Papernot & Steinke 2022):
    the line says so, naming the tuned private variants, rather than let the column read as the tuned row's cost.
    """
    groups: dict[Guarantee, list[str]] = {}
    approximations: dict[str, list[str]] = {}
    for label, config in variants:
        g = guarantee(config)
        if g is None:
            continue
        groups.setdefault(g, []).append(label)
        what = approximation(config)
        if what is not None:
            approximations.setdefault(what, []).append(repr(label))
    if not groups:
        return None
    # labels quoted: a comparison's labels often hold commas themselves ("FedAvg, eps=8")
    parts = [f"{g}: {', '.join(repr(label) for label in labels)}" for g, labels in groups.items()]
    line = ("epsilon caveat: epsilon is what each run had spent by its last round, the worst-off privacy unit's, at its own delta; "
            + "; ".join(parts) + ".")
    if len(groups) > 1:
        line += " Other mechanisms, neighbours or deltas bound other things (a client, a sample, one client's update or soft-label row): do not compare epsilons across them."
    if approximations:
        clauses = [f"{', '.join(labels)} account{'s' * (len(labels) == 1)} {what}" for what, labels in approximations.items()]
        line += f" The usual approximation, not a proven bound: {'; '.join(clauses)}."
    private = {label for labels in groups.values() for label in labels}
    tuned: dict[int, list[str]] = {}
    for label, n in (tuning_points or {}).items():
        if label in private and n > 1:
            tuned.setdefault(n, []).append(repr(label))
    if tuned:
        clauses = [f"{', '.join(labels)}: epsilon is one run's; the selection over {n} tuning points is not accounted" for n, labels in tuned.items()]
        line += f" Tuned, each tuning point a private training on the same data: {'; '.join(clauses)} (Papernot & Steinke 2022)."
    return line + " (docs/privacy.md)"


def steering_caveat(variants: Sequence[tuple[str, RunConfig]], policy: TemperaturePolicy | None = None) -> str | None:
    """One line under a table naming the variants (quoted labels) whose training test rows steer, and what of them reads
    those rows (the policy's ``steers_by_accuracy`` text, asked as the run's stderr note asks it:
    :func:`~chillfl.temperature.registry.steers_on_test_rows`), with the fix; None when no variant's does.

    ``policy``: the temperature policy passed from Python to the comparison (its ``custom`` variants run copies of it).
    """
    groups: dict[str, list[str]] = {}
    for label, config in variants:
        steers = steers_on_test_rows(config, policy)
        if steers is not None:
            groups.setdefault(steers, []).append(label)
    if not groups:
        return None
    # labels quoted, as the epsilon caveat's: a label may hold commas itself
    parts = " and ".join(f"{steers} in {', '.join(repr(label) for label in labels)}" for steers, labels in groups.items())
    return (f"steering caveat: {parts} read{'s' if len(groups) == 1 else ''} each client's accuracy on its evaluation split, drawn from the "
            "test rows this table reports (eval.validation = 0): test rows steer those variants' training, so their accuracies "
            "are not on held-out rows; rerun with eval.validation = 0.2 to keep them out (docs/comparisons.md).")


NO_GLOBAL_MODEL = "none"
"""``table.json``'s ``global_model`` of a row whose runs keep no global model: its accuracy is its clients' own models' mean."""

STATIC_GLOBAL_MODEL = "untrained"
"""``table.json``'s ``global_model`` of a row whose global model is never trained: its accuracy is the initial model's."""

PARTIAL_GLOBAL_MODEL = "partial"
"""``table.json``'s ``global_model`` of a row whose clients keep models of their own and do not train the global model
itself: its accuracy is the server's global model, which no client trains or uses as it is."""


def global_model_kind(config: RunConfig, aggregator: object | None = None) -> str | None:
    """What the variant's global accuracy measures where it is no trained global model's: :data:`NO_GLOBAL_MODEL` when its
    protocol keeps none (:attr:`~chillfl.protocols.registry.ProtocolKind.global_model`), :data:`STATIC_GLOBAL_MODEL` when
    its method (or the aggregator its protocol runs) declares :attr:`~chillfl.capabilities.Capabilities.static_global_model`,
    :data:`PARTIAL_GLOBAL_MODEL` when it declares a personal model whose clients do not train the global model itself
    (:attr:`~chillfl.capabilities.Capabilities.own_models_only`); None for a trained global model. Asked of the protocol and the specs, never by the
    method's name. ``aggregator``: one passed from Python to the comparison (``chillfl.compare(aggregator=...)``), asked
    as the run asks it."""
    kind = protocol_of(config)
    if not kind.global_model(config):
        return NO_GLOBAL_MODEL
    declared = [kind.method_capabilities(config)] if kind.method_capabilities is not None else []
    if kind.uses_aggregator:
        declared.append(configured_capabilities(config.algorithm) if aggregator is None else run_capabilities(config.algorithm, aggregator))
    if any(c.static_global_model for c in declared):
        return STATIC_GLOBAL_MODEL
    return PARTIAL_GLOBAL_MODEL if any(c.own_models_only for c in declared) else None


def global_model_kinds(variants: Sequence[tuple[str, RunConfig]], aggregator: object | None = None) -> dict[str, str]:
    """Label -> :func:`global_model_kind` of the variants whose accuracy is no trained global model's (the others left out:
    a row without ``global_model`` in ``table.json`` is a trained global model's, as every row of an older one reads)."""
    return {label: kind for label, config in variants if (kind := global_model_kind(config, aggregator)) is not None}


def _flagged(rows: Sequence[Mapping[str, Any]], label: str | None) -> str | None:
    """The ``global_model`` of row ``label`` where it has an accuracy (the rows the caveat names); None otherwise."""
    return next((str(r["global_model"]) for r in rows if r["variant"] == label and r.get("global_model") is not None
                 and r.get("final_acc") is not None), None)


TARGET_WORDS = {NO_GLOBAL_MODEL: "its clients' own models' mean, no global model", STATIC_GLOBAL_MODEL: "the initial model's, no trained global model",
                PARTIAL_GLOBAL_MODEL: "a global model no client trains or uses as it is"}
"""What the target is, per ``global_model`` of the reference's row, in the tables' target line."""


def target_words(rows: Sequence[Mapping[str, Any]], ref_label: str) -> str:
    """`` (what it is; global-model caveat below)`` for a target line whose reference's accuracy is no trained global
    model's; "" otherwise: the line then says "best accuracy" of a number that no global model scored."""
    kind = _flagged(rows, ref_label)
    return "" if kind is None else f" ({TARGET_WORDS.get(kind, kind)}; global-model caveat below)"


def global_model_caveat(rows: Sequence[Mapping[str, Any]], base_label: str | None = None, ref_label: str | None = None) -> str | None:
    """One line naming the rows (quoted labels) whose accuracy is no trained global model's (their ``global_model``) and
    what it is instead; None when there are none. Only rows with an accuracy: a row every run of which failed prints none.

    Why: the table heads its accuracy "final global test accuracy" and pairs it with the baseline's (diff, sign holds,
    rounds to target), which for these rows compares another number; the numbers stay as recorded, the line says what they are.
    Where the baseline (``base_label``) or the reference (``ref_label``) is such a row, *every* row's diff or rounds to
    target is measured against its number, not only the named rows': the line says so."""
    groups: dict[str, list[str]] = {}
    for r in rows:
        kind = r.get("global_model")
        if kind is not None and r.get("final_acc") is not None:
            groups.setdefault(str(kind), []).append(repr(r["variant"]))
    parts = []
    if none := groups.get(NO_GLOBAL_MODEL):
        one = len(none) == 1
        parts.append(f"{', '.join(none)} keep{'s' if one else ''} no global model: {'its' if one else 'their'} accuracy is the mean of "
                     f"{'its' if one else 'their'} clients' own models on the global test set, not one model's accuracy (docs/baselines.md)")
    if static := groups.get(STATIC_GLOBAL_MODEL):
        one = len(static) == 1
        parts.append(f"{', '.join(static)} never train{'s' if one else ''} {'its' if one else 'their'} global model (the server reads no upload): "
                     f"{'its' if one else 'their'} accuracy is the initial model's, which no client uses (docs/personalised.md)")
    if partial := groups.get(PARTIAL_GLOBAL_MODEL):
        one = len(partial) == 1
        parts.append(f"{', '.join(partial)} keep{'s' if one else ''} a model of {'its' if one else 'their'} own on each client, and "
                     f"{'its' if one else 'their'} clients do not train the global model itself: {'its' if one else 'their'} accuracy is "
                     "the server's global model, only partly the clients' training (what each keeps for itself is in it averaged, at "
                     "its initial value or not at all), which no client trains or uses as it is (docs/personalised.md)")
    if not parts:
        return None
    base = base_label if _flagged(rows, base_label) is not None else None
    ref = ref_label if _flagged(rows, ref_label) is not None else None
    own = [what for what, flagged in (("diff", base), ("rounds to target", ref)) if flagged is None]  # still a global model's number
    said = []
    if base is not None and base == ref:
        said.append(f"{base!r} is the baseline and the reference, so every row's diff and rounds to target are against its number, not a global model's")
    else:
        if base is not None:
            said.append(f"{base!r} is the baseline, so every row's diff is against its number, not a global model's")
        if ref is not None:
            said.append(f"{ref!r} is the reference, so every row's rounds to target count to its best accuracy, not a global model's")
    if own:
        said.insert(0, f"The {' and '.join(own)} of such a row set{'s' if own == ['diff'] else ''} that number against global models' accuracies")
    return f"global-model caveat: {'; '.join(parts)}. {'; '.join(said)}."


def eval_interval_caveat(rows: Sequence[Mapping[str, Any]]) -> str | None:
    """One line when a row's rounds to target rests on runs not evaluated every round (``eval_interval`` > 1), naming
    the interval(s) and the rows; None otherwise (or without a target: no rounds to it)."""
    if not any(t is not None for r in rows for t in _as_list(r.get("target"))):
        return None
    by_interval: dict[int, list[str]] = {}
    for r in rows:
        interval = r.get("eval_interval") or 1
        if interval > 1:
            by_interval.setdefault(int(interval), []).append(repr(r["variant"]))
    if not by_interval:
        return None
    said = "; ".join(f"every {k} rounds in {', '.join(labels)}" for k, labels in sorted(by_interval.items()))
    most = max(by_interval)
    return (f"rounds-to-target caveat: the global model was evaluated {said} (eval.every), so rounds to target (and MB to "
            f"target) are the first evaluated round at the target: up to {most - 1} round{'s' if most > 2 else ''} late, and "
            "variants that reached it within one interval tie; set eval.every = 1 to count every round.")


def _as_list(value: Any) -> list[Any]:
    """A row's per-seed list (a seed table's) or its one value (a one-seed table's) as a list."""
    return list(value) if isinstance(value, list) else [value]


def _final_accuracy(records: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The last record that measured the global accuracy (NaN included: measured, and its logits overflowed); None: none did."""
    return next((record for record in reversed(records) if record.get("global_acc") is not None), None)


def ends_with_nonfinite_loss(records: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the last round that measured the global accuracy has a finite accuracy but a non-finite global test loss
    (``null`` in ``metrics.jsonl``): the weights stayed finite, so the run finished and counts, but its loss overflows.
    A non-finite accuracy is :func:`ends_with_nonfinite_accuracy`'s: that accuracy does not count (the table shows "-")."""
    record = _final_accuracy(records)
    if record is None or "global_loss" not in record or not math.isfinite(record["global_acc"]):  # no global loss recorded: nothing to say
        return False
    loss = record["global_loss"]
    return loss is None or not math.isfinite(loss)


def ends_with_nonfinite_accuracy(records: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the last round that measured the global accuracy measured a non-finite one (its logits are not finite,
    though its weights are: not diverged). Why apart from :func:`ends_with_nonfinite_loss`: that caveat says the
    accuracy counts, and such a run's accuracy is NaN, left out of the table ("-")."""
    record = _final_accuracy(records)
    return record is not None and not math.isfinite(record["global_acc"])


def nonfinite_loss_caveat(runs: Sequence[str]) -> str | None:
    """One line naming the finished runs whose final global test loss is non-finite (:func:`ends_with_nonfinite_loss`);
    None when there are none. They still count (only non-finite weights are a divergence), so the table says which
    of its accuracies and validation scores come from them, and that the loss column leaves them out."""
    if not runs:
        return None
    count = f"{len(runs)} run{'s' if len(runs) != 1 else ''}"
    return (f"loss caveat: {count} finished with a non-finite final global test loss (weights finite, so not diverged; "
            f"their accuracy and validation scores count, the loss column leaves them out): {', '.join(runs)}.")


def nonfinite_accuracy_caveat(runs: Sequence[str]) -> str | None:
    """One line naming the finished runs whose final global accuracy is itself non-finite (:func:`ends_with_nonfinite_accuracy`);
    None when there are none: the table's "-" in their accuracy and loss columns is said, not left unexplained."""
    if not runs:
        return None
    count = f"{len(runs)} run{'s' if len(runs) != 1 else ''}"
    return (f"logits caveat: {count} finished with non-finite logits on the test set (weights finite, so not diverged; "
            f"their final accuracy and loss are not numbers, left out of the accuracy and loss columns): {', '.join(runs)}.")


LOCAL_MIX_TOLERANCE = 0.2
"""The mean total variation distance between the clients' training and local validation class mixes above which a
comparison that selects on ``local_val_acc`` warns: a fifth of a client's validation rows stand for classes in other
proportions than it trains on. Rounding a client's mix to a 100-row split moves it by a few hundredths at most; on
digits the mismatch that cost 6-12 points of ``local_val_acc`` measured 0.36-0.45 (docs/comparisons.md)."""


@dataclass(frozen=True)
class MixAdvice:
    """What a split kind's mismatched split scores a client on (``scored``), and what lets it follow the mix (``remedy``)."""

    scored: str
    remedy: str


def _own_test_rows(whose: str) -> MixAdvice:
    """``natural`` / ``partition``: a client's local validation split is the part of its own test rows in the validation split."""
    return MixAdvice("another mix", f"their splits are their own test rows ({whose}) that fell into the validation split (eval.client_split_size "
                     "does not size them): a larger eval.validation gives each client more of them, and where a client's own test rows "
                     'differ from its training mix, eval.client_split = "proportional" draws its split with that mix')


LOCAL_MIX_ADVICE: dict[str, MixAdvice] = {
    "proportional": MixAdvice("a flatter mix", "a larger eval.validation or a smaller eval.client_split_size lets the splits follow it"),
    "natural": _own_test_rows("the dataset's per-client test split"),
    "partition": _own_test_rows("the partitioner's per-client test split"),
}
"""Per split kind that has local validation splits (``eval.client_split``; ``none`` has none): what ``local_val_acc``
scores a client on when its split misses its training mix, and what lets the split follow it (the module docstring)."""


def local_mix_warning(mismatch: Mapping[str, float], select: str, splits: Mapping[str, str]) -> str | None:
    """One line when a run's mean train/local-validation mix distance (run name -> ``local_val_mix_tv``) exceeds
    :data:`LOCAL_MIX_TOLERANCE`, naming the worst run; None otherwise. Only for a comparison that selects with a
    local rule (``select``): the caller decides that. ``splits``: run name -> its ``eval.client_split``, whose advice
    (:data:`LOCAL_MIX_ADVICE`) the line gives, each kind's once, for the runs over the tolerance."""
    over = {name: value for name, value in mismatch.items() if value > LOCAL_MIX_TOLERANCE}
    if not over:
        return None
    worst = max(over, key=lambda name: over[name])
    kinds = sorted({splits[name] for name in over}, key=list(LOCAL_MIX_ADVICE).index)
    scored = LOCAL_MIX_ADVICE[kinds[0]].scored if len(kinds) == 1 else "another mix"
    advice = LOCAL_MIX_ADVICE[kinds[0]].remedy if len(kinds) == 1 else "; ".join(
        f'eval.client_split = "{kind}": {LOCAL_MIX_ADVICE[kind].remedy}' for kind in kinds)
    return (f"local validation mismatch: select = {select} chooses on local_val_acc, but in {len(over)} of {len(mismatch)} runs the clients' "
            f"local validation splits do not follow their training class mix (mean total variation distance up to {over[worst]:.2f}, "
            f"in {worst}; above {LOCAL_MIX_TOLERANCE:g}), so local_val_acc scores them on {scored} than they train on; "
            f"{advice} (docs/comparisons.md)")
