"""A tiny finished run folder, made once per test module, and copies of it to tamper with: a results folder received
from someone else (tests/test_secfix_*.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

from chillfl.cli import main

TINY = ["dataset.name=digits", "federation.num_clients=4", "federation.clients_per_round=2", "model.name=mlp", "eval.client_split_size=20"]
DEEP = "[" * 200000 + "]" * 200000
"""JSON nested past Python's recursion limit."""


def make_run(root: Path, rounds: int = 2) -> Path:
    """A finished digits run of ``rounds`` rounds under ``root``; its folder."""
    config = root / "exp.toml"
    config.write_text(f'name = "tiny"\nout_dir = "{root / "out"}"\n')
    assert main(["run", str(config), "-q", *TINY, f"federation.rounds={rounds}"]) == 0
    return root / "out" / "tiny"


def copy_run(run_dir: Path, tmp_path: Path, name: str = "tiny") -> Path:
    """A copy of ``run_dir`` (links kept as links) named ``name`` under ``tmp_path``."""
    return Path(shutil.copytree(run_dir, tmp_path / name, symlinks=True))
