"""FedChill end to end: per-client temperatures from Eq. 7, Algorithm 1's decay in a real run, Table 4 configs."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from chillfl.config import load_config
from chillfl.data import ArrayDataset
from chillfl.runner import run_experiment
from chillfl.experiment import base_losses, build_algorithm, build_data, build_experiment, build_initial_model
from chillfl.experiments import bundled_experiments, resolve_config
from chillfl.sweeps.plan import apply_variant, variants_from_config
from chillfl.sweeps.run import run_compare
from chillfl.temperature import make_policy

T_MIN, GAMMA = 0.05, 0.5


def eq7_by_hand(counts: np.ndarray, s: float = 2.0) -> np.ndarray:
    """Eq. 6 against uniform p_g, divided by its maximum 2(C - 1), then Eq. 7 clipped to [0.05, 1]."""
    p = counts / counts.sum(axis=1, keepdims=True)
    c = counts.shape[1]
    h = np.abs(p * c - 1.0).sum(axis=1) / (2.0 * (c - 1))  # p / (1/C) - 1 = p C - 1
    return np.clip(np.exp(-s * h), T_MIN, 1.0)


def test_eq7_by_hand_helper() -> None:
    # counts (6, 2, 0, 0) over C = 4: p = (.75, .25, 0, 0); |3 - 1| + |1 - 1| + 1 + 1 = 4; / (2 * 3) = 2/3
    # T = exp(-4/3) = 0.263597
    assert eq7_by_hand(np.array([[6.0, 2.0, 0.0, 0.0]]))[0] == pytest.approx(0.263597, abs=1e-6)


def test_fedchill_run_initial_temperatures_and_forced_decay(tmp_path) -> None:
    """A tiny run where a decay must happen: lr = 1e-12 leaves every weight unchanged in float32,
    so each client's validation accuracy is identical every round. Algorithm 1 with P = 1:
    after rounds 1-2 |A| < 3 (counter 0); after round 3 a_3 <= A[-2] -> counter 1 >= P ->
    T <- max(gamma T, T_min); after round 4 again. Every client trains every round, so its
    participations are the rounds. ``temperatures`` in metrics.jsonl are the temperatures each
    client *trained with* in that round, so the first decay shows in round 4, the second in round 5."""
    config = load_config(
        None,
        {
            "name": "fedchill-e2e",
            "out_dir": str(tmp_path),
            "dataset.name": "digits",
            "partition.name": "dirichlet_balanced",
            "partition.alpha": 0.5,
            "model.name": "flexchill_cnn",
            "federation.num_clients": 5,
            "federation.rounds": 5,
            "client.epochs": 1,
            "client.batch_size": 64,
            "client.lr": 1e-12,
            "temperature.policy": "fedchill",
            "temperature.patience": 1,
            "temperature.gamma": GAMMA,
            "eval.client_split_size": 40,
        },
    )
    out = run_experiment(config, progress=False)
    assert out.folder is not None and (out.folder / "temperatures.png").stat().st_size > 0
    records = [json.loads(line) for line in (out.folder / "metrics.jsonl").read_text().splitlines()]
    temps = np.array([[r["temperatures"][str(c)] for c in range(5)] for r in records])  # [round, client]

    t0 = eq7_by_hand(build_data(config).class_counts().astype(np.float64))
    assert len({round(t, 9) for t in t0}) == 5  # distinct per-client initial temperatures

    def decay(t: np.ndarray) -> np.ndarray:  # Algorithm 1 lines 13-14 once the counter reaches P
        return np.where(t > 1.1 * T_MIN, np.maximum(GAMMA * t, T_MIN), t)

    for rnd in range(3):  # rounds 1-3 train at Eq. 7's temperatures
        assert temps[rnd] == pytest.approx(t0, rel=1e-12)
    assert temps[3] == pytest.approx(decay(t0), rel=1e-12)  # decayed after round 3's stagnation
    assert temps[4] == pytest.approx(decay(decay(t0)), rel=1e-12)  # and again after round 4's
    assert np.all(temps[4] < temps[0])
    for record, row in zip(records, temps):
        assert record["temperature_mean"] == pytest.approx(row.mean())
    # Accuracy really stagnated (the premise of the forced decay).
    assert len({r["local_acc"] for r in records}) == 1


def test_table4_rows_mean_what_the_docs_say() -> None:
    config = load_config(resolve_config("fedchill/table4-digits"))
    by_label = {v.label: apply_variant(config, v) for v in variants_from_config(config)}
    assert list(by_label) == ["FedAvg (T=1.0)", "Fixed T=0.05", "FedChill", "FedChill*", "FedChill (init+decay)"]
    data = build_data(config)
    counts = data.class_counts()
    policies = {label: make_policy(cfg.temperature, counts) for label, cfg in by_label.items()}
    assert [policies["FedAvg (T=1.0)"].temperature(c, 0) for c in range(10)] == [1.0] * 10
    assert [policies["Fixed T=0.05"].temperature(c, 0) for c in range(10)] == [0.05] * 10
    assert policies["FedAvg (T=1.0)"].client_half(10) is None and policies["Fixed T=0.05"].client_half(10) is None
    halves = {label: policies[label].client_half(data.num_classes) for label in ("FedChill", "FedChill*", "FedChill (init+decay)")}
    init_only, decay_only, full = halves["FedChill"], halves["FedChill*"], halves["FedChill (init+decay)"]
    labels = [data.client_train(c)[1] for c in range(10)]
    t0 = eq7_by_hand(counts.astype(np.float64))
    assert [init_only.temperature({}, math.nan, labels[c]) for c in range(10)] == pytest.approx(t0)
    assert [full.temperature({}, math.nan, labels[c]) for c in range(10)] == pytest.approx(t0)
    assert [decay_only.temperature({}, math.nan, labels[c]) for c in range(10)] == [1.0] * 10  # FedChill*: starts at T_max
    # init only never decays, the other two do (accuracies 0.5, 0.5, 0.5: stagnation at the third, P = 2 at the fourth)
    after = {}
    for label, half in halves.items():
        state: dict[str, torch.Tensor] = {}
        for rnd in range(4):
            state = half.finish(state, half.temperature(state, math.nan, labels[0]), 0.5)
        after[label] = half.temperature(state, math.nan, labels[0])
    assert after["FedChill"] == pytest.approx(t0[0])
    assert after["FedChill*"] == pytest.approx(0.95)
    assert after["FedChill (init+decay)"] == pytest.approx(0.95 * t0[0])


def test_table4_compare_runs_in_one_command(tmp_path) -> None:
    config = load_config(
        resolve_config("fedchill/table4-digits"),
        {"out_dir": str(tmp_path), "federation.num_clients": 4, "federation.clients_per_round": 4, "federation.rounds": 2, "client.epochs": 1},
    )
    result = run_compare(config, [], progress=False)
    assert [r["variant"] for r in result.rows] == ["FedAvg (T=1.0)", "Fixed T=0.05", "FedChill", "FedChill*", "FedChill (init+decay)"]
    assert all(r["final_acc"] is not None and r["final_local_acc"] is not None for r in result.rows)
    assert "local acc" in result.table and "FedChill*" in result.table
    assert result.folder is not None and (result.folder / "table.md").is_file()
    # the per-client policies wrote their temperature trajectories, the fixed ones did not
    run_dirs = [d for d in result.folder.iterdir() if d.is_dir()]
    assert len(run_dirs) == 5 and all((d / "summary.json").is_file() for d in run_dirs)
    assert sum((d / "temperatures.png").exists() for d in run_dirs) == 3  # FedChill, FedChill*, init+decay


def _fake_image_dataset(name: str, classes: int, shape: tuple[int, ...], n: int = 2000) -> ArrayDataset:
    gen = torch.Generator().manual_seed(0)
    y = torch.arange(n) % classes
    return ArrayDataset(name, torch.randn((n, *shape), generator=gen), y, torch.randn((n // 2, *shape), generator=gen), torch.arange(n // 2) % classes, classes)


def test_every_bundled_fedchill_config_and_variant_builds() -> None:
    """CPU configs build every variant on the real embedded data; full-size ones on a fake dataset of the real shape."""
    names = [n for n in bundled_experiments() if n.startswith("fedchill/")]
    tables = {n.split("/")[1].split("-")[0] for n in names}
    assert {"fig1", "table1", "table2", "table3", "table4", "table5", "table6", "table7", "table10"} <= tables
    fakes = {"cifar10": (10, (3, 32, 32)), "cifar100": (100, (3, 32, 32)), "svhn": (10, (3, 32, 32))}
    models: dict[tuple[str, int], object] = {}
    for name in names:
        config = load_config(resolve_config(name))
        variants = [apply_variant(config, v) for v in variants_from_config(config)] or [config]
        dataset_name = config.dataset["name"]
        if dataset_name == "digits":
            for cfg in variants:
                build_experiment(cfg)
            continue
        assert dataset_name in fakes, name
        classes, shape = fakes[dataset_name]
        fake = _fake_image_dataset(dataset_name, classes, shape)
        for cfg in variants:
            data = build_data(cfg, fake)
            key = (cfg.model["name"], classes)
            if key not in models:  # the big CNNs are built once per class count
                models[key] = build_initial_model(cfg, shape, classes)[0]
            build_algorithm(cfg, models[key])  # type: ignore[arg-type]
            make_policy(cfg.temperature, data.class_counts())
            assert cfg.client.loss in base_losses()
            assert data.num_clients == cfg.federation.num_clients and min(map(len, data.train_indices)) > 0


@pytest.mark.parametrize("validation", [0.0, 0.5], ids=["eval-split", "validation-split"])
@pytest.mark.parametrize(
    "protocol_table",
    [{}, {"distillation": {"method": "dsfl", "public_size": 60, "subset_size": 20}}, {"prototypes": {"method": "fedproto"}}],
    ids=["parameters", "softlabels", "prototypes"],
)
def test_fedchill_run_keeps_each_clients_temperature_with_the_client(protocol_table: dict, validation: float, tmp_path) -> None:
    """Partial participation, P = 1: the server's policy holds no client entry; each client's
    Algorithm 1 state (T, A_n with one entry per participation, its last 3 kept, counter) is in its own client state,
    and the temperature it trained at is what the record says. A_n holds the client's validation accuracy when the
    run has validation splits: its evaluation split comes from the test rows (it was read there, a test-set leak)."""
    from chillfl.engine.loop import run_rounds
    from chillfl.experiment import build_protocol, make_executor
    from chillfl.temperature.fedchill import from_entries

    overrides = {
        "out_dir": str(tmp_path), "dataset.name": "digits", "model.name": "mlp", "federation.num_clients": 5, "federation.clients_per_round": 3,
        "federation.rounds": 4, "client.epochs": 1, "temperature.policy": "fedchill", "temperature.patience": 1, "eval.client_split_size": 20,
        "eval.validation": validation,
    }
    exp = build_experiment(load_config(None, overrides).with_overrides(protocol_table))
    protocol = build_protocol(exp)
    fresh = dict(vars(exp.policy))
    records = list(run_rounds(protocol, make_executor(exp, protocol), seed=0, num_clients=5, clients_per_round=3, rounds=4))
    assert dict(vars(exp.policy)) == fresh and exp.policy.state_dict() == {}
    seen = {c for r in records for c in r["clients"]}
    for cid in seen:
        state = protocol.own.get(cid) if protocol_table.get("prototypes") else protocol.store.load(cid)
        got = from_entries(state.own if protocol_table.get("distillation") else state)
        assert got is not None
        participations = [r for r in records if cid in r["clients"]]
        read = protocol.book.log.val if validation else protocol.book.log.acc
        assert not validation or set(protocol.book.log.val) == seen  # every client scored on its own validation split
        assert len(got.history) == min(len(participations), 3) and got.history[-1] == read[cid]  # A_n (its last 3): its own local (validation) accuracies
        # every protocol records the T each client trained at (docs/fedchill.md); an `if` here hid that prototypes' did not
        assert got.temperature <= participations[-1]["temperatures"][str(cid)]  # T never grows
    protocol.close()


@pytest.mark.parametrize("protocol", [[], ["distillation.method=scarlet", "distillation.public_size=400", "distillation.subset_size=100"]],
                         ids=["parameters", "softlabels"])
def test_decay_without_client_accuracy_is_refused_before_anything_trains(protocol: list[str], tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    """``eval.clients = "none"`` measures no client's accuracy, which the decay reads: the run trained a whole round first,
    then said so in a line on ``temperature.decay`` that asked for ``eval.client_split`` (already set). Now one line on
    ``eval.clients`` before anything trains, asked of the policy's declared ``steers_by_accuracy``, not of its name."""
    from chillfl.cli import main

    config = tmp_path / "c.toml"
    config.write_text('[dataset]\nname = "digits"\n[model]\nname = "mlp"\n[federation]\nnum_clients = 4\nclients_per_round = 2\nrounds = 1\n')
    run = ["run", str(config), "-q", "--out", str(tmp_path / "out"), "temperature.policy=fedchill", "eval.clients=none", *protocol]
    assert main(run) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("chillfl: error: eval.clients: FedChill's decay (temperature.decay = true) reads each client's accuracy") and "\n" not in err
    assert not (tmp_path / "out").exists()
    assert main([*run, "--dry-run"]) == 2  # a dry run checks it too
    assert main([*run, "temperature.decay=false", "--dry-run"]) == 0  # off: nothing reads it
