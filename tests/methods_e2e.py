"""Shared end-to-end checks for the representation-based baselines (MOON, FedAlign, FedGen).

Each method runs through the real round loop under every executor: the
sequential and process-pool executors must agree bit for bit, the vectorised
one within float rounding; a run stopped after round ``stop``, saved,
written, read back and resumed in fresh objects must give the same records
bit for bit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from chillfl.config import RunConfig, load_config
from chillfl.storage.checkpoint import read_state, write_state
from chillfl.engine.loop import run_rounds
from chillfl.experiment import Experiment, build_experiment, build_protocol, make_executor
from chillfl.protocols.parameters import ParameterSharing
from chillfl.runner import run_experiment
from lent_pools import pools

TINY: dict[str, Any] = {
    "seed": 3,
    "device": "cpu",  # CPU tests (they compare with the processes executor, which CUDA refuses): pinned, so a GPU machine runs them too
    "dataset.name": "digits",
    "partition.name": "dirichlet",
    "partition.alpha": 0.5,
    "federation.num_clients": 4,
    "federation.clients_per_round": 3,
    "federation.rounds": 3,
    "client.epochs": 1,
    "client.batch_size": 32,
    "client.lr": 0.05,
    "eval.clients": "sampled",
    "eval.client_split_size": 20,
}


def config(**over: Any) -> RunConfig:
    return load_config(None, {**TINY, **over})


def protocol_rounds(cfg: RunConfig, rounds: int) -> tuple[Experiment, ParameterSharing, list[dict[str, Any]]]:
    """``rounds`` rounds of ``cfg`` through the real round loop, with its built parts kept to inspect (its server's
    aggregator and ledger), for a parameter-sharing method."""
    exp = build_experiment(cfg)
    protocol = build_protocol(exp)
    assert isinstance(protocol, ParameterSharing)
    executor = make_executor(exp, protocol)
    try:
        done = list(run_rounds(protocol, executor, seed=cfg.seed, num_clients=cfg.federation.num_clients,
                               clients_per_round=cfg.federation.sample_size(), rounds=rounds))
    finally:
        executor.close()
    return exp, protocol, done


def records(cfg: RunConfig) -> list[dict[str, Any]]:
    """The run's records; a process-pool run borrows this test process's workers (``lent_pools``)."""
    return run_experiment(cfg, write=False, progress=False, pools=pools()).records


def assert_executors_agree(cfg: RunConfig, rel: float = 1e-4) -> list[dict[str, Any]]:
    """sequential == processes bitwise; vectorized == sequential within float rounding. Returns sequential's records.

    ``rel``: the vectorised executor's batched kernels round differently, and
    a deep batch-norm network amplifies that over a round's steps (ResNet-20
    with plain FedAvg drifts by ~2e-3 of the loss in two rounds), so its
    tolerance is the caller's; its single steps are compared tightly elsewhere.
    """
    seq = records(cfg)
    assert records(cfg.with_overrides({"executor": "processes", "threads": 1})) == seq
    vec = records(cfg.with_overrides({"executor": "vectorized"}))
    assert len(vec) == len(seq)
    for a, b in zip(seq, vec):
        assert b["train_loss"] == pytest.approx(a["train_loss"], rel=rel, abs=1e-6)
    return seq


def resumed_records(cfg: RunConfig, stop: int, tmp_path: Path) -> list[dict[str, Any]]:
    """Rounds 0..stop-1, a checkpoint written and read back, then the rest in freshly built objects."""
    fed = cfg.federation

    def rounds(protocol: Any, exp: Any, start: int, end: int) -> list[dict[str, Any]]:
        executor = make_executor(exp, protocol)
        try:
            loop = run_rounds(protocol, executor, seed=cfg.seed, num_clients=exp.data.num_clients, clients_per_round=fed.sample_size(),
                              rounds=end, start=start, participation=fed)
            return list(loop)
        finally:
            executor.close()

    exp = build_experiment(cfg)
    protocol = build_protocol(exp)
    first = rounds(protocol, exp, 0, stop)
    write_state(tmp_path / "state.pt", {"round": stop, "protocol": protocol.state_dict()})
    state = read_state(tmp_path / "state.pt")
    exp2 = build_experiment(cfg)
    protocol2 = build_protocol(exp2)
    protocol2.load_state_dict(state["protocol"])
    return first + rounds(protocol2, exp2, stop, fed.rounds)


def cli_option_error(tmp_path: Path, capsys: pytest.CaptureFixture[str], algorithm: str, override: str) -> tuple[int, list[str], bool]:
    """``chillfl run`` of a tiny digits config of ``algorithm`` with ``override`` on the command line:
    (exit code, stderr's lines, whether a result folder was written)."""
    from chillfl.cli import main

    run = tmp_path / "run.toml"
    run.write_text(
        f'out_dir = "{tmp_path / "results"}"\ndevice = "cpu"\n[dataset]\nname = "digits"\n[model]\nname = "mlp"\n[algorithm]\nname = "{algorithm}"\n',
        encoding="utf-8",
    )
    code = main(["run", str(run), override])
    return code, capsys.readouterr().err.strip().splitlines(), (tmp_path / "results").exists()
