"""``analyze cka`` computes its features on a seeded uniform subset of the test set, as grad-norms does: the first N rows
of a test set ordered by client or device (``synthetic``'s) were a few classes only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from chillfl.analysis import cka
from chillfl.analysis.grad_norms import sample_subset
from chillfl.analysis.replay import build_run
from chillfl.cli import main
from chillfl.seeds import derive_seed

TINY = ["dataset.name=digits", "federation.num_clients=4", "federation.rounds=1", "federation.clients_per_round=2",
        "model.name=mlp", "eval.client_split_size=20", "seed=3"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("metfix_cka")
    config = root / "exp.toml"
    config.write_text(f'name = "tiny"\nout_dir = "{root / "out"}"\n')
    assert main(["run", str(config), "-q", *TINY]) == 0
    return root / "out" / "tiny"


def test_cka_features_are_on_the_seeded_uniform_subset(run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[torch.Tensor] = []
    real = cka.layer_features

    def spy(model: Any, state: Any, x: torch.Tensor, names: Any) -> Any:
        seen.append(x.detach().cpu().clone())
        return real(model, state, x, names)

    monkeypatch.setattr(cka, "layer_features", spy)
    out = cka.analyze([str(run_dir)], None, samples=64)
    exp = build_run(run_dir)
    x, y = exp.data.test()
    want = sample_subset(x, y, 64, derive_seed(exp.config.seed, "cka"))[0]
    assert seen and all(torch.equal(s, want) for s in seen)  # the reference's and the global model's inputs alike
    assert not torch.equal(want, x[:64])  # not the first 64 rows
    run = out["runs"]["tiny"]
    assert run["n"] == 64 and run["available"] == len(y) and run["random_subset"] is True
    again = cka.analyze([str(run_dir)], None, samples=64)  # seeded: the same command gives the same numbers
    assert again["runs"]["tiny"]["global_vs_reference"] == run["global_vs_reference"]


def test_cka_uses_every_test_row_when_they_fit(run_dir: Path) -> None:
    exp = build_run(run_dir)
    n = len(exp.data.test()[1])
    run = cka.analyze([str(run_dir)], None, samples=n + 10)["runs"]["tiny"]
    assert run["n"] == n and run["random_subset"] is False
