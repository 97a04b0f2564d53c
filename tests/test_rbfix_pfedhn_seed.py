"""pFedHN's ``seed`` is the run's seed, as every other seeded method's is (rev101b finding 5).

``PFedHN(..., 3)`` in a seed-3 run was refused and asked for the 19-digit ``derive_seed(3, "pfedhn-init")``; the
constructor now derives that generator seed itself. A config-built run draws its hypernetwork from the same generator
seed as before, so its runs are unchanged.
"""

from __future__ import annotations

import torch
from test_pyagg_bind import model, same, state

from chillfl.aggregation.pfedhn import EMBEDDINGS, PFedHN, PFedHNOptions, init_hypernetwork
from chillfl.seeds import derive_seed

OPTIONS = {"hidden": 4, "hidden_layers": 1}


def _shapes() -> dict[str, torch.Size]:
    return {k: v.shape for k, v in model().named_parameters()}


def test_the_runs_seed_binds_bitwise_as_the_configs_method() -> None:
    made = PFedHN(PFedHNOptions(**OPTIONS), 3, _shapes(), 3, torch.float64)  # the seed-3 run's own seed
    assert same(state({"name": "fedavg"}, aggregator=made), state({"name": "pfedhn", **OPTIONS}))


def test_the_hypernetwork_is_drawn_from_the_generator_seed_it_was_drawn_from_before() -> None:
    """Same generator seed, ``derive_seed(seed, "pfedhn-init")``, as the builder passed: config-built runs stay bitwise."""
    made = PFedHN(PFedHNOptions(**OPTIONS), 3, _shapes(), 5, torch.float64)
    before = init_hypernetwork(_shapes(), 3, made.hyper[EMBEDDINGS].shape[1], 4, 1, derive_seed(5, "pfedhn-init"), torch.float64)
    assert same(made.hyper, before)
