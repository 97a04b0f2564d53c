"""``gaussian``: an attacker throws its honest upload away and sends noise, under every protocol that uploads something.

* parameters: ``w + N(0, sigma^2 I)`` from (seed, "attack", "gaussian", round, client)
  (:func:`chillfl.attacks.updates.gaussian`);
* soft-labels: its rows plus ``N(0, sigma^2)``, probabilities projected back onto the simplex
  (:func:`chillfl.attacks.softlabels.noisy_rows`, from (seed, "attack", "rows", round, client));
* prototypes: its held classes' means plus ``N(0, sigma^2 I)``
  (:func:`chillfl.attacks.prototypes.noisy_means`, from (seed, "attack", "prototypes", round, client)).

Checked against (2026-12-02) vio1etus/FLPoison ``attackers/gaussian.py`` (the update replaced by ``N(0, 1)``:
``w + N(0, sigma^2 I)`` at sigma = 1, its default; its update vector, ``model_utils.state2vec``, holds every state
entry, batch-norm statistics included, as every float entry here) and lishenghui/blades
``blades/adversaries/noise_adversary.py`` (the update replaced by ``N(0.1, 0.1^2)``: a mean and a smaller scale, not
options here). Noise on a batch-norm ``running_var`` can make it negative (NaN outputs), part of what the attack does.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from chillfl.attacks.spec import AttackSpec, ModelRound, PrototypeUpload, RowsUpload
from chillfl.options import require
from chillfl.seeds import derive_seed

if TYPE_CHECKING:
    import torch

    from chillfl.aggregation.base import Params
    from chillfl.prototypes.spec import ClassRows


@dataclass(frozen=True)
class GaussianOptions:
    """``sigma``: the noise's standard deviation (parameters: around the global model; soft-labels: on the rows;
    prototypes: on the class means)."""

    sigma: float = 1.0

    def validate(self, section: str) -> None:
        require(math.isfinite(self.sigma) and self.sigma > 0, f"{section}.sigma", f"must be > 0, got {self.sigma}")


def forge_models(options: GaussianOptions, round: ModelRound) -> dict[int, Params]:
    from chillfl.attacks import updates

    return {
        r.client_id: updates.gaussian(round.start(r.client_id), r.params, options.sigma, derive_seed(round.seed, "attack", "gaussian", round.round, r.client_id))
        for r in round.bad
    }


def forge_rows(options: GaussianOptions, upload: RowsUpload) -> torch.Tensor:
    from chillfl.attacks.softlabels import noisy_rows

    return noisy_rows(upload.rows, options.sigma, derive_seed(upload.seed, "attack", "rows", upload.round, upload.client_id), upload.logits)


def forge_prototypes(options: GaussianOptions, upload: PrototypeUpload) -> ClassRows:
    from chillfl.attacks.prototypes import noisy_means

    seed = derive_seed(upload.seed, "attack", "prototypes", upload.round, upload.client_id)
    return dataclasses.replace(upload.rows, means=noisy_means(upload.rows.means, upload.rows.counts, options.sigma, seed))


SPEC = AttackSpec(
    "gaussian",
    GaussianOptions,
    summary="the attackers send noise: w + N(0, sigma^2) (soft-labels: noised rows; prototypes: noised class means)",
    forge_models=forge_models,
    forge_rows=forge_rows,
    forge_prototypes=forge_prototypes,
)
