"""An exploding training loss that has not turned NaN: one warning line, or a :class:`Diverged` stop with ``strict``.

A non-finite loss already stops the run (``check_finite_loss``). A loss can
also blow up by orders of magnitude and stay finite: ``client.lr = 50`` on
digits gives a round-1 loss of ~1e8 and a run that ends at chance accuracy
with exit 0. :class:`LossWatch` sees every round's record and reports that in
one line, once per run.

Choices
-------
* The rule: the round's training loss (``train_loss``, the sample-weighted
  mean over the round's clients) is at least :data:`LOSS_GROWTH` times the
  first round's, or above :data:`LOSS_CEILING`. Measured on digits, a run
  that blows up mostly does so inside round 1 (lr 20-50: round-1 losses of
  5e2 to 1e8, then chance accuracy at losses of 2-20), so the ceiling does
  most of the work; the growth rule catches a run that was healthy first.
  No healthy cross-entropy comes near the ceiling: it is the mean ``-log p``
  of the true class in nats (chance on 10 classes is 2.3; T = 0.05 chilling
  starts near 8 on digits).
* The ceiling is in T = 1 units: below T = 1 it is :data:`LOSS_CEILING` / T for
  the round's smallest training temperature (``temperatures``, else
  ``temperature_mean``). Why: CE(z / T) grows like 1 / T, so an untrained
  model's logit gaps of 0.1-0.3 give a healthy round-1 loss of 1e3-3e3 at the
  legal T = 1e-4 (it falls to ~20 and reaches 88 % on digits); a fixed 1e3
  warned it and stopped it under ``strict``, with a "lower client.lr" that made
  the loss higher still. Above T = 1 the ceiling stays 1e3 (the loss only
  shrinks there).
* The growth rule compares losses in T = 1 units too (:func:`t1_loss`, the
  same for round 1 and the round): with per-client temperatures below 1, the
  plain mean over the round's clients of ``loss_i * min(T_i, 1)``; else
  ``train_loss * min(T, 1)`` with the round's one temperature (no temperature
  recorded: the raw loss). Why: a policy that lowers T across rounds (FedChill
  decays it on stagnation) makes a healthy run's raw loss grow like 1 / T, and
  raw losses warned (or, under ``strict``, stopped) a run whose T fell
  1e4-fold. Why per client: the mean scaled by the round's smallest T shrank
  a round with one client at T = 1e-4 1e4-fold, and a later round's unchanged
  loss read as a 1e4-fold growth.
* It is a guard against blow-ups by orders of magnitude, not a quality check:
  a run stuck at chance with a loss below the ceiling is not reported.
* A warning by default (the run is still a valid, if useless, result);
  ``strict = true`` (``--strict``) makes it a divergence: exit 3, the folder
  renamed ``NAME.failed``, as for a NaN. Both go through :meth:`LossWatch.observe`.
* Warned once per run (per resumed segment): the next rounds would repeat it.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Iterable, Mapping

from chillfl.errors import LOSS_HINT, Diverged

log = logging.getLogger(__name__)

LOSS_GROWTH = 1e4
"""A training loss at least this many times the first round's is reported."""
LOSS_CEILING = 1e3
"""A training loss above this is reported, whatever the first round's was."""


def training_temperature(record: Mapping[str, Any]) -> float | None:
    """The smallest temperature the round's clients trained at: the least of ``temperatures`` (per-client T), else
    ``temperature_mean`` (one T for all); None when the record has neither (or it is not a positive finite number)."""
    per_client = record.get("temperatures")
    values = [float(t) for t in per_client.values()] if isinstance(per_client, Mapping) and per_client else []
    if not values and record.get("temperature_mean") is not None:
        values = [float(record["temperature_mean"])]
    t = min(values, default=math.nan)
    return t if math.isfinite(t) and t > 0 else None


def loss_ceiling(temperature: float | None) -> float:
    """:data:`LOSS_CEILING` in the units of a loss trained at ``temperature``: divided by T below T = 1 (CE(z / T) grows
    like 1 / T), unchanged at or above it and when T is not known."""
    return LOSS_CEILING / temperature if temperature is not None and temperature < 1 else LOSS_CEILING


def t1_units(loss: float, temperature: float | None) -> float:
    """``loss``, trained at ``temperature``, in T = 1 units: times T below T = 1 (CE(z / T) grows like 1 / T), unchanged at
    or above it and when T is not known, as :func:`loss_ceiling` scales the ceiling."""
    return loss * temperature if temperature is not None and temperature < 1 else loss


def t1_loss(record: Mapping[str, Any]) -> float | None:
    """The round's training loss in T = 1 units (None: a skipped round). Per client where the record has per-client
    losses (``client_train_loss``) and temperatures (``temperatures``, both keyed by client id) and some T is below 1:
    the plain mean of ``loss_i * min(T_i, 1)``, so one client at a tiny T scales its own loss, not the round's. Else
    ``train_loss`` at the round's one temperature (:func:`t1_units`): raw at T >= 1, as the rule was before T."""
    loss = record.get("train_loss")
    if loss is None:
        return None
    losses, temperatures = record.get("client_train_loss"), record.get("temperatures")
    if isinstance(losses, Mapping) and losses and isinstance(temperatures, Mapping) and set(losses) <= set(temperatures):
        pairs = [(float(losses[cid]), float(temperatures[cid])) for cid in losses]
        if all(math.isfinite(t) and t > 0 for _, t in pairs) and any(t < 1 for _, t in pairs):
            return sum(value * min(t, 1.0) for value, t in pairs) / len(pairs)
    return t1_units(float(loss), training_temperature(record))


def loss_growth(loss: float, first: float, now: float, then: float) -> str | None:
    """Why ``loss`` counts as grown past round 1's ``first`` (None: it does not); ``now``, ``then``: the two in T = 1
    units (:func:`t1_loss`), the values compared. The message prints them where they are not the raw losses."""
    if not (then > 0 and now >= LOSS_GROWTH * then):
        return None
    if (now, then) == (loss, first):
        return f"is {loss / first:.3g} times round 1's {first:.3g}"
    return f"is {now / then:.3g} times round 1's in T = 1 units (now {now:.3g}, round 1 {then:.3g})"


def loss_explosion(loss: float, first: float | None, temperature: float | None = None, first_temperature: float | None = None) -> str | None:
    """Why ``loss`` counts as exploding given the first round's ``first`` (None: it does not); ``temperature``: the
    round's smallest training temperature, which scales the ceiling (:func:`loss_ceiling`); ``first_temperature``: round
    1's, the growth rule comparing both losses in T = 1 units (:func:`t1_units`: one temperature per round)."""
    ceiling = loss_ceiling(temperature)
    if loss > ceiling:
        scaled = f" ({LOSS_CEILING:g} / T at the round's smallest training temperature T = {temperature:g})" if ceiling != LOSS_CEILING else ""
        return f"is above {ceiling:.3g}{scaled}" if scaled else f"is above {LOSS_CEILING:g}"
    if first is None:
        return None
    return loss_growth(loss, first, t1_units(loss, temperature), t1_units(first, first_temperature))


class LossWatch:
    """Watches each round's ``train_loss``; ``records``: the rounds already run (a resumed run's). ``name``: the run the
    warning names, where several runs share one stderr (a comparison's: its "diverged" lines name theirs)."""

    def __init__(self, strict: bool, records: Iterable[Mapping[str, Any]] = (), name: str | None = None, hint: str = LOSS_HINT) -> None:
        self.strict = strict
        self.name = name
        self.hint = hint
        """What to change, said with a blown-up loss: :data:`~chillfl.errors.LOSS_HINT`, led by the run's own suspects
        (its ``[privacy]`` noise, its attack: :func:`~chillfl.errors.loss_hint`) where the run has them."""
        begun = next((r for r in records if r.get("train_loss") is not None), None)  # a resume's round 1, from its metrics.jsonl
        self.first: float | None = None if begun is None else float(begun["train_loss"])
        self.first_t1: float | None = None if begun is None else t1_loss(begun)
        """Round 1's training loss in T = 1 units (:func:`t1_loss`), what the growth rule compares each round's with."""
        self.warned = False
        self.warned_local = False
        self.warned_global = False

    def observe(self, record: Mapping[str, Any]) -> None:
        """Warn (or raise :class:`Diverged` when strict) if this round's training loss explodes, its global test loss is
        not finite (the model evaluates to NaN logits), or its local loss (the clients' own models on their own splits)
        is above the ceiling: a personal model trained beside the one whose
        loss ``train_loss`` is (Ditto's v_k) blew up there alone, with no word."""
        loss = record.get("train_loss")
        if loss is not None:  # None: a skipped round
            now = t1_loss(record)
            why = loss_explosion(float(loss), None, training_temperature(record))  # the ceiling
            if why is None and self.first is not None and self.first_t1 is not None and now is not None:
                why = loss_growth(float(loss), self.first, now, self.first_t1)
            if self.first is None:
                self.first, self.first_t1 = float(loss), now
            if why is not None and not self.warned:
                self._report(record, f"training loss {float(loss):.3g} {why} ({self.hint})")
                self.warned = True
        evaluated = record.get("global_loss")  # NaN logits (a variance below 0, weights blown up): the accuracy is NaN too
        if evaluated is not None and not math.isfinite(float(evaluated)) and not self.warned_global:
            self._report(record, f"the global model's test loss is {float(evaluated)} (its logits are not finite: weights blown up, or a "
                                 "batch-norm variance below 0)")
            self.warned_global = True
        local = record.get("local_loss")
        if local is not None and not (float(local) <= LOSS_CEILING) and not self.warned_local:  # NaN too: a client's own model's logits are not finite
            why = f"is above {LOSS_CEILING:g}" if math.isfinite(float(local)) else "is not finite (a client's own model gives non-finite logits)"
            self._report(record, f"local loss {float(local):.3g} (the clients' own models on their own splits) {why} ({self.hint})")
            self.warned_local = True

    def _report(self, record: Mapping[str, Any], what: str) -> None:
        if self.strict:
            raise Diverged(int(record["round"]), what)
        log.warning("%sround %d: %s; the run goes on (with strict = true, or --strict, it would stop here)", f"{self.name}: " if self.name else "", record["round"], what)
