"""``[attack]`` end to end: poisoning hurts FedAvg and not the median, the backdoor's success is measured,
executors agree, a killed attacked run resumes bit for bit, data attacks run under every protocol."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chillfl import runner
from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.runner import run_experiment
from lent_pools import pools
from resume_cases import check_resume

DIGITS: dict[str, Any] = {
    "seed": 0,
    "threads": 1,
    "device": "cpu",
    "dataset.name": "digits",
    "partition.name": "iid",
    "model.name": "mlp",
    "model.hidden": [32],
    "federation.num_clients": 10,
    "federation.clients_per_round": 10,  # every client each round: the 2 attackers (20 %) are always in
    "federation.rounds": 8,
    "client.epochs": 1,
    "client.batch_size": 16,
    "client.lr": 0.1,
    "eval.clients": "none",
    "checkpoint.every": 0,
}


@pytest.fixture(autouse=True)
def _no_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "_plots", lambda *args: None)


def records(tmp_path: Path, name: str, base: dict[str, Any] = DIGITS, lent: bool = False, **overrides: Any) -> list[dict[str, Any]]:
    """The metrics of one run of ``base`` with ``overrides`` (tests/test_attack_spec.py runs its own base through it).

    ``lent``: a process-pool run borrows this test process's workers (``lent_pools``); not for a run of a user's
    module put on ``sys.path`` after they started (as tests/test_attack_spec.py's are), which they could not import."""
    config = load_config(None, {**base, "out_dir": str(tmp_path), "name": name, **overrides})
    folder = run_experiment(config, progress=False, pools=pools() if lent else None).folder
    assert folder is not None
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


def test_scaling_attackers_break_fedavg_not_the_median(tmp_path: Path) -> None:
    clean = records(tmp_path, "clean")[-1]["global_acc"]
    attack = {"attack.kind": "scaling", "attack.fraction": 0.2, "attack.factor": 50.0}
    fedavg = records(tmp_path, "fedavg", **attack)
    median = records(tmp_path, "median", **{**attack, "algorithm.name": "median"})
    assert clean > 0.75  # the clean run learns (about 0.89)
    assert all(len(r["attackers"]) == 2 for r in fedavg)  # round(0.2 * 10) = 2, all sampled every round
    assert fedavg[-1]["global_acc"] < clean - 0.3  # about 0.10: the boosted updates swamp the mean
    assert median[-1]["global_acc"] > clean - 0.1  # about 0.90: two outliers of ten never reach the median


def test_backdoor_success_is_measured_every_round(tmp_path: Path) -> None:
    attack = {"attack.kind": "backdoor", "attack.fraction": 0.2, "attack.target": 0}
    fedavg = records(tmp_path, "fedavg", **attack)
    median = records(tmp_path, "median", **{**attack, "algorithm.name": "median"})
    assert all(0.0 <= r["attack_success_rate"] <= 1.0 for r in fedavg + median)
    assert fedavg[-1]["attack_success_rate"] > median[-1]["attack_success_rate"] + 0.2  # about 0.5 against 0.0
    assert fedavg[-1]["global_acc"] > 0.75  # the main task still learns: a backdoor hides


def test_same_seed_same_attack_and_executors_agree(tmp_path: Path) -> None:
    short = {"federation.rounds": 2, "attack.kind": "gaussian", "attack.sigma": 0.05}
    seq = records(tmp_path, "seq", **short)
    again = records(tmp_path, "again", **short)
    procs = records(tmp_path, "procs", lent=True, **short, executor="processes")
    vec = records(tmp_path, "vec", **short, executor="vectorized")
    assert seq == again
    assert seq == procs  # bitwise: the attack runs in the driver, the clients' training is the processes' own bitwise
    for a, b in zip(seq, vec):
        assert a["attackers"] == b["attackers"]
        assert a["global_acc"] == pytest.approx(b["global_acc"], abs=0.02)


@pytest.mark.parametrize(
    ("method", "kind"),
    [("algorithm.fedavg", "gaussian"), ("algorithm.median", "lie"), ("algorithm.fedavg", "backdoor"), ("distillation.dsfl", "gaussian"), ("prototypes.fedproto", "gaussian")],
)
def test_attacked_run_resumes_bitwise(method: str, kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    extra = {"attack.kind": kind, "attack.fraction": 0.5, "federation.clients_per_round": 4}  # attackers in (almost) every round
    check_resume(method, "sequential", 1, tmp_path, monkeypatch, **extra)


@pytest.mark.parametrize(
    "protocol",
    [
        {"distillation": {"method": "dsfl", "public_size": 60, "subset_size": 20, "server_epochs": 1, "distill_batch_size": 32}},
        {"prototypes": {"method": "fedproto"}},
    ],
    ids=["softlabels", "prototypes"],
)
def test_label_flip_runs_under_every_protocol(protocol: dict[str, Any], tmp_path: Path) -> None:
    config = load_config(None, {**DIGITS, "out_dir": str(tmp_path), "federation.rounds": 2, "attack.kind": "label_flip"}).with_overrides(protocol)
    folder = run_experiment(config, progress=False).folder
    assert folder is not None
    lines = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    assert all(len(r["attackers"]) == 2 for r in lines)


def test_gaussian_soft_labels_run_and_agree_across_executors(tmp_path: Path) -> None:
    soft = {"distillation": {"method": "dsfl", "public_size": 60, "subset_size": 20, "server_epochs": 1, "distill_batch_size": 32}}

    def lines(name: str, executor: str) -> list[dict[str, Any]]:
        config = load_config(None, {**DIGITS, "out_dir": str(tmp_path), "name": name, "executor": executor, "federation.rounds": 2, "attack.kind": "gaussian", "attack.sigma": 0.3}).with_overrides(
            soft
        )
        folder = run_experiment(config, progress=False, pools=pools()).folder  # processes: lent workers (lent_pools)
        assert folder is not None
        return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]

    seq = lines("seq", "sequential")
    assert seq == lines("procs", "processes")  # the attackers' noise is drawn from (seed, round, client) in the worker
    assert all(len(r["attackers"]) == 2 for r in seq)


def test_gaussian_prototypes_change_the_run(tmp_path: Path) -> None:
    proto = {"prototypes": {"method": "fedproto"}}

    def lines(name: str, kind: str) -> list[dict[str, Any]]:
        config = load_config(None, {**DIGITS, "out_dir": str(tmp_path), "name": name, "federation.rounds": 2, "attack.kind": kind, "attack.clients": [0, 1, 2], "attack.sigma": 5.0}).with_overrides(
            proto
        )
        folder = run_experiment(config, progress=False).folder
        assert folder is not None
        return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]

    clean, noised = lines("clean", "none"), lines("noised", "gaussian")
    assert [r["attackers"] for r in noised] == [[0, 1, 2]] * 2
    assert lines("again", "gaussian") == noised  # same seed, same noise
    assert noised[-1]["global_proto_acc"] < clean[-1]["global_proto_acc"] - 0.2  # about 0.17 against 0.77: nearest-prototype accuracy falls


def test_update_attack_under_soft_labels_is_one_line(tmp_path: Path) -> None:
    soft = {"distillation": {"method": "dsfl", "public_size": 60, "subset_size": 20}}
    config = load_config(None, {**DIGITS, "out_dir": str(tmp_path), "attack.kind": "scaling"}).with_overrides(soft)
    with pytest.raises(ConfigError) as err:
        run_experiment(config, progress=False)
    assert err.value.field == "attack.kind"
    assert not any(tmp_path.iterdir())  # refused before anything is written
