"""Tuning a variant's options honestly: select on the server's validation split, report on the test set.

``compare`` runs every variant at every point of the ``[tune]`` grid (the
cartesian product of its lists) and at every seed. Each variant's point is
chosen by :func:`select_point` from **validation** numbers only
(``val_acc``, measured on ``eval.validation``'s held-out part of the test
set, disjoint from what ``global_acc`` uses); the table then reports the
chosen point's **test** numbers. :func:`validation_score` is the only
place selection looks at a run's records, and it reads ``val_acc`` alone.

Rule (``[compare] select``):

* ``"final"`` (default): the validation accuracy of the last evaluated round;
* ``"best"``: the best validation accuracy over evaluated rounds;
* ``"local_final"`` / ``"local_best"``: the same on the **local** validation
  accuracy ``local_val_acc`` instead of ``val_acc``: the mean over the round's
  clients of each client's own model (a personalised method's personal model)
  on the client's own validation split, which comes out of the same held-out
  validation rows (:mod:`chillfl.data.federated`), never from a test split.
  For personalised methods, whose goal is the clients' own accuracy, the
  global rule favours the global model.

The score of a point is the mean over seeds; a point that diverged at any
seed scores -inf, and one whose run finished with a non-finite validation
accuracy at any seed NaN: neither is chosen while another point has a finite
score; ties go to the earlier point of the grid (grid order = the order of
the lists), scores within :data:`TIE_TOLERANCE` (relative) of each other being
a tie: the same mean summed in another order differs in its last bits.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from chillfl.errors import ConfigError, did_you_mean
from chillfl.options import plain, short_repr

SELECT_RULES = ("final", "best", "local_final", "local_best")
VALIDATION_KEY = "val_acc"
LOCAL_VALIDATION_KEY = "local_val_acc"
LOCAL_PREFIX = "local_"
MAX_POINTS = 1000
EVALUATION_PREFIX = "eval."
EVALUATION_DATA = ("dataset.name", "data_dir")
"""With ``eval.*``: what decides the validation and test rows a point is scored on; never a tuning option."""
DATASET_PREFIX = "dataset."
"""Every option of the dataset's table decides its rows, test rows included (``test_fraction``, ``split_seed``, a
generator's ``seed``, a resize, the label set): as the test-set caveat reads the whole table
(:data:`chillfl.report.caveats.TEST_SET_FIELDS`), a point that set one would be scored on test rows of its own."""
TRAINING_DATA_PREFIX = "dataset.augment."
"""The dataset's one table that transforms rows, never chooses them (:data:`chillfl.data.augment.SECTION`): crops and
flips of the training steps, a normalisation of every row alike; tunable."""

Point = dict[str, Any]


def dotted_grid(items: Iterable[tuple[str, Any]], field: str = "tune") -> dict[str, Any]:
    """``client = {lr = [...]}`` -> ``{"client.lr": [...]}``: a grid's ``items()`` as TOML reads ``client.lr = [...]`` unquoted.

    Why: TOML turns an unquoted dotted key into nested tables, so ``[tune]`` with ``client.lr = [0.05, 0.2]``
    was refused ("tune.client: expected a non-empty list") unless the key was quoted. A grid's values are
    lists, never tables, so a nested table can only be such a path. A key written twice is refused. A tuple of values
    (a Python config dict) becomes a list, as ``grid=`` takes one.
    """
    out: dict[str, Any] = {}
    stack = list(items)[::-1]
    while stack:  # iterative, in the order written
        key, value = stack.pop()
        if isinstance(value, Mapping) and value:
            stack.extend((f"{key}.{k}", v) for k, v in list(value.items())[::-1])
        elif key in out:
            raise ConfigError(f"{field}.{key}", "is given twice (as a dotted key and in a table)")
        else:
            out[key] = list(value) if isinstance(value, tuple) else value  # a Python tuple of values, as grid= takes
    return out


def parse_tune(table: Mapping[str, Any], field: str = "tune") -> list[Point]:
    """``{"client.lr": [0.01, 0.1], ...}`` -> the grid's points in order; ``[{}]`` (one empty point) when empty."""
    axes: list[list[tuple[str, Any]]] = []
    for key, values in table.items():
        if not isinstance(key, str):  # chillfl.compare(tune={1: [...]}): split below raised an AttributeError
            raise ConfigError(field, f"a key must be an option name (a string, e.g. 'client.lr'), got {short_repr(key)} ({type(key).__name__})")
        where = f"{field}.{key}"
        values = plain(values)  # a NumPy array of values (np.logspace(...)), which grid= takes: a list
        if not isinstance(values, list) or not values:
            raise ConfigError(where, f"expected a non-empty list of values, got {short_repr(values)}")
        for v in values:
            if isinstance(v, (dict, list)):
                raise ConfigError(where, f"values must be numbers, strings or booleans, got {short_repr(v)}")
        if len({repr(v) for v in values}) != len(values):
            twice = next(v for v in values if [repr(w) for w in values].count(repr(v)) > 1)
            raise ConfigError(where, f"duplicate values: {short_repr(twice)} twice in {short_repr(values)}")
        if key in ("name", "seed", "variants", "compare", "tune") or not all(key.split(".")):
            raise ConfigError(where, "not a tunable option (give section.option, e.g. client.lr)")
        if key.startswith(EVALUATION_PREFIX) or key in EVALUATION_DATA:
            # a point with its own validation fraction, splits or dataset is scored on other rows: selection would pick
            # the evaluation, and its test numbers would come from other test rows than the other points'
            raise ConfigError(where, "sets how (or on which rows) runs are evaluated, which tuning cannot choose; tune the method's options")
        if key.startswith(DATASET_PREFIX) and not key.startswith(TRAINING_DATA_PREFIX):
            # dataset.test_fraction, dataset.split_seed: each point held out other test (and validation) rows, so
            # selection compared points on other rows and the table reported the chosen one's own test set
            raise ConfigError(where, "decides the dataset's rows (its test and validation rows among them), which tuning cannot choose: "
                                     "each point would be scored on rows of its own; tune the method's options (dataset.augment.* is tunable)")
        axes.append([(key, v) for v in values])
    size = math.prod(len(a) for a in axes)
    if size > MAX_POINTS:
        raise ConfigError(field, f"{size} points; at most {MAX_POINTS}")
    return [dict(combo) for combo in itertools.product(*axes)]


def point_label(point: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in point.items())


def is_local(rule: str) -> bool:
    """Whether ``rule`` selects on the clients' local validation accuracy (``local_val_acc``)."""
    return rule.startswith(LOCAL_PREFIX)


def rule_key(rule: str) -> str:
    """The one record key ``rule`` reads: ``val_acc`` (global rules) or ``local_val_acc`` (``local_*`` rules)."""
    if rule not in SELECT_RULES:
        raise ConfigError("compare.select", f"unknown rule {rule!r}{did_you_mean(rule, SELECT_RULES)}; allowed: {', '.join(SELECT_RULES)}")
    return LOCAL_VALIDATION_KEY if is_local(rule) else VALIDATION_KEY


def describe_rule(rule: str) -> str:
    """How the comparison table names ``rule``: which accuracy, which model, which round."""
    when = "best round" if rule.endswith("best") else "final round"
    if is_local(rule):
        return f"local validation accuracy ({LOCAL_VALIDATION_KEY}: each client's own model on its own validation split), {when}"
    return f"global validation accuracy ({VALIDATION_KEY}: the server's model on the server's validation split), {when}"


DIVERGED = -math.inf
"""The score of a run that did not finish (and of a point with such a run): below every other, never chosen."""
NONFINITE = math.nan
"""The score of a finished run whose validation accuracy under the rule is NaN or infinite (and of a point with such a
run, none diverged): ranked below every finite score as :data:`DIVERGED` is, but the run finished, so the table of
every point says "non-finite", not "diverged"."""


def validation_score(records: Sequence[Mapping[str, Any]] | None, rule: str) -> float:
    """A run's validation accuracy under ``rule``; reads ``val_acc`` (or, for ``local_*`` rules, ``local_val_acc``) only.
    None (diverged) -> :data:`DIVERGED` (-inf); a finished run without a finite score -> :data:`NONFINITE` (NaN)."""
    key = rule_key(rule)
    if records is None:
        return -math.inf
    values = [float(r[key]) for r in records if r.get(key) is not None]
    if not values:
        if key == LOCAL_VALIDATION_KEY:
            raise ConfigError("compare.select", f"rule {rule!r} selects on {key}, which this run did not record: it needs eval.validation > 0, "
                                                "and eval.clients other than 'none' (the clients of every built-in protocol measure it)")
        # the plan refused eval.validation = 0 and a method without a global model up front; a run that still has no
        # val_acc kept no global model the server scored: the local rules read what its clients measured
        raise ConfigError("compare.select", f"rule {rule!r} selects on {key}, which this run did not record: it needs eval.validation > 0 and a global "
                                            f"model (a method whose clients keep only models of their own records none); "
                                            f"use select = {' or '.join(repr(r) for r in SELECT_RULES if is_local(r))}")
    finite = [v for v in values if math.isfinite(v)]
    if rule.endswith("final"):
        return values[-1] if math.isfinite(values[-1]) else NONFINITE
    return max(finite) if finite else NONFINITE


def point_scores(runs: Sequence[Sequence[Sequence[Mapping[str, Any]] | None]], rule: str) -> list[float]:
    """Mean validation score over seeds of every point; ``runs[p][s]``: records of point p at seed s (None: diverged).
    A point with a diverged seed scores :data:`DIVERGED`; else one with a non-finite seed :data:`NONFINITE`."""
    out = []
    for per_seed in runs:
        scores = [validation_score(r, rule) for r in per_seed]
        if any(s == DIVERGED for s in scores):
            out.append(DIVERGED)
        elif not all(math.isfinite(s) for s in scores):
            out.append(NONFINITE)
        else:
            out.append(math.fsum(scores) / len(scores))
    return out


TIE_TOLERANCE = 1e-12
"""Scores within this relative distance of the highest are a tie, which goes to the earliest point: a mean over seeds
of equal accuracies summed in another order differs in its last bits (55, 55, 57 and 55, 56, 56 correct of 72 gave
0.773148148148148 and 0.7731481481481483), and a bare ``max`` gave that tie to the later point."""


def select_point(scores: Sequence[float]) -> int:
    """Index of the highest finite score; the earliest of those within :data:`TIE_TOLERANCE` of it (a tie up to
    rounding). Without a finite score (every point diverged or scored non-finite), 0."""
    if not scores:
        raise ValueError("no points to select from")
    finite = [x for x in scores if math.isfinite(x)]
    if not finite:  # every point diverged or scored non-finite at a seed: none is chosen, the first stands in
        return 0
    best = max(finite)
    return next(i for i, x in enumerate(scores) if math.isfinite(x) and math.isclose(x, best, rel_tol=TIE_TOLERANCE, abs_tol=0.0))
