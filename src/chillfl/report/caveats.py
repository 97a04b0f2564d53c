"""Warnings printed with a comparison's table where the table alone would mislead.

The test-set caveat: variants that differ in the dataset, its folder or ``eval.validation`` are scored on other
test rows (``eval.validation`` moves rows from the test set into the validation split), so a difference
"paired per seed" no longer compares them on the same samples.

The step-size caveat: the gradient of CE(z / T) is 1/T times that of CE(z) in scale (FLex&Chill
Eq. 2; ``tests/test_objective.py``), so temperatures compared at one shared learning rate differ in
step size as well as in temperature. At a small shared lr a low T "wins" the way a larger lr would
(the demo shows it: tuned per temperature, the gain vanishes). The caveat names the two remedies.
"""

from __future__ import annotations

import json
import math
from typing import Any, Mapping, Sequence

from chillfl.config import RunConfig


def _temperature(config: RunConfig) -> str:
    """What the variant trains at: ``1`` (no chilling), ``T=<value>``, or a per-client policy's name."""
    policy = str(config.temperature.get("policy", "none"))
    if policy == "none":
        return "1"
    if policy == "fixed":
        value = float(config.temperature.get("value", 1.0))
        return "1" if value == 1.0 else f"T={value:g}"
    return policy


def step_size_caveat(configs: Sequence[RunConfig], tune: Mapping[str, Sequence[Any]], controls: bool) -> str | None:
    """One paragraph when the variants compare temperatures at one shared ``client.lr``; None otherwise."""
    temperatures = {_temperature(c) for c in configs}
    lrs = {c.client.lr for c in configs}
    if len(temperatures) < 2 or len(lrs) != 1 or "client.lr" in tune or controls:
        return None
    lr = lrs.pop()
    return (
        f"step-size caveat: every variant trains at one shared client.lr = {lr:g}, and the gradient of CE(z / T) "
        "scales with 1/T, so a T < 1 row also takes larger steps: a gain here may be the step size alone. "
        "Controlled: rerun with --controls (adds T = 1 at lr x 1/T and magnitude-/direction-only ablations); "
        f"tuned: --seeds 0,1,2 eval.validation=0.2 --tune client.lr={lr:g},{5 * lr:g},{20 * lr:g} (docs/comparisons.md)."
    )


TEST_SET_FIELDS = ("dataset", "data_dir", "eval.validation")
"""What decides a run's global test rows besides the seed."""


def other_test_rows_caveat(configs: Sequence[RunConfig]) -> str | None:
    """One line when the variants are not scored on one test set (:data:`TEST_SET_FIELDS` differ); None otherwise."""
    keys = [(json.dumps(c.dataset, sort_keys=True, default=str), c.data_dir, c.eval.validation) for c in configs]
    differ = [name for i, name in enumerate(TEST_SET_FIELDS) if len({k[i] for k in keys}) > 1]
    if not differ:
        return None
    return (f"test-set caveat: the variants differ in {' and '.join(differ)}, so each is scored on other test rows: "
            "their accuracy differences, paired per seed, do not compare them on the same samples.")


def ends_with_nonfinite_loss(records: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the last round that measured the global accuracy has a non-finite global test loss (``null`` in
    ``metrics.jsonl``): the weights stayed finite, so the run finished and counts, but its predictions overflow."""
    for record in reversed(records):
        if record.get("global_acc") is not None:
            if "global_loss" not in record:  # a run that records no global loss: nothing to say
                return False
            loss = record["global_loss"]
            return loss is None or not math.isfinite(loss)
    return False


def nonfinite_loss_caveat(runs: Sequence[str]) -> str | None:
    """One line naming the finished runs whose final global test loss is non-finite (:func:`ends_with_nonfinite_loss`);
    None when there are none. They still count (only non-finite weights are a divergence), so the table says which
    of its accuracies and validation scores come from them, and that the loss column leaves them out."""
    if not runs:
        return None
    count = f"{len(runs)} run{'s' if len(runs) != 1 else ''}"
    return (f"loss caveat: {count} finished with a non-finite final global test loss (weights finite, so not diverged; "
            f"their accuracy and validation scores count, the loss column leaves them out): {', '.join(runs)}.")
