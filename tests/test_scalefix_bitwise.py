"""pFedHN, FedFomo, pFedSim, FedCAC and APPLE keep their results bit for bit since their state became O(participants).

Each case runs a tiny federation through the real runner and hashes ``metrics.jsonl``, ``model.safetensors`` and
``client_models.safetensors``. The digests were recorded from the code before the change (dense N x N matrices,
one dense gradient kept per sampled client, APPLE's (N, ...) banks in every client state): same config, same seed,
same bits.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from chillfl import runner
from chillfl.config import load_config
from chillfl.runner import CLIENT_MODELS, MODEL, run_experiment

TINY: dict[str, Any] = {
    "seed": 3,
    "threads": 1,
    "device": "cpu",
    "dataset.name": "digits",
    "partition.name": "dirichlet",
    "partition.alpha": 0.5,
    "model.name": "mlp",
    "model.hidden": [16],
    "federation.num_clients": 8,
    "federation.clients_per_round": 4,
    "federation.rounds": 5,
    "client.epochs": 1,
    "client.batch_size": 32,
    "client.lr": 0.05,
    "eval.client_split_size": 20,
    "checkpoint.client_models": True,
}

CASES: dict[str, dict[str, Any]] = {
    "pfedhn-each": {"algorithm": {"name": "pfedhn", "hidden": 8, "hidden_layers": 1, "clip_norm": 0.5}},
    "pfedhn-mean": {"algorithm": {"name": "pfedhn", "hidden": 8, "hidden_layers": 1, "server_steps": "mean"}},
    "fedfomo": {"algorithm": {"name": "fedfomo", "m": 1}},
    "fedfomo-greedy": {"algorithm": {"name": "fedfomo", "m": 1, "epsilon": 0.6}},
    "pfedsim": {"algorithm": {"name": "pfedsim", "warmup": 0.25}},
    "fedcac": {"algorithm": {"name": "fedcac", "beta": 2}},
    "fedcac-averaged": {"algorithm": {"name": "fedcac", "local_eval": "averaged"}},
    "apple": {"algorithm": {"name": "apple", "downloads": 2}},
}

RECORDED: dict[str, str] = {
    "apple": "9d7000434c349a6500d139bf9122c93f68211a30827dc40e60a32639d272e0e2",
    "fedcac": "52783320703f45db1e536acd79a4e0fbc9135c610e0841e2c270a70fe24d9ae3",
    "fedcac-averaged": "7ed7c70a7af83c192ebc9683666b7c9ba1a413345c4553a157f4335fe59db0a8",
    "fedfomo": "a1cd67fcdb4d8d8f7ec689b47fdcac28539dca513078a2560a0a3714077380c8",
    "fedfomo-greedy": "a1cd67fcdb4d8d8f7ec689b47fdcac28539dca513078a2560a0a3714077380c8",
    "pfedhn-each": "7b4eaf4ec3e08e21c324e3432d544368720f2564d0e286f2de3d4af68b829d1d",
    "pfedhn-mean": "e4bc026b5346a7fc390d1928ddb2298c2f27abff6443d34d36c3a47b518b0fd6",
    "pfedsim": "afe44b20ce60438e41dbfa20110211fc6ce2e10f0574abcab6287d33eae79155",
}
"""sha256 of each case's results, from the code before the change."""


def digest(method: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(runner, "_plots", lambda *args: None)
    cfg = load_config(None, {**TINY, "name": method, "out_dir": str(tmp_path), "checkpoint.every": 0}).with_overrides(CASES[method])
    folder = run_experiment(cfg, progress=False).folder
    assert folder is not None
    h = hashlib.sha256()
    for name in ("metrics.jsonl", MODEL, CLIENT_MODELS):
        h.update((folder / name).read_bytes())
    return h.hexdigest()


@pytest.mark.parametrize("method", sorted(CASES))
def test_results_are_bitwise_those_of_the_dense_code(method: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert digest(method, tmp_path, monkeypatch) == RECORDED[method]
