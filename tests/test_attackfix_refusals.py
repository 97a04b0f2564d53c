"""An attack that would change nothing is refused, every record has ``attackers``, and the refusal lines say what is true."""

from __future__ import annotations

from typing import Any

import pytest

import chillfl
from chillfl.attacks.build import check_attack
from chillfl.config import load_config
from chillfl.errors import ConfigError

TINY: dict[str, Any] = {
    "seed": 0, "executor": "sequential", "device": "cpu", "dataset": {"name": "digits"}, "model": {"name": "mlp", "hidden": [8]},
    "partition": {"name": "iid"}, "federation": {"num_clients": 4, "clients_per_round": 4, "rounds": 1},
    "client": {"lr": 0.1, "batch_size": 64, "epochs": 1}, "eval": {"clients": "none"},
}


def refusal(config: dict[str, Any]) -> ConfigError:
    with pytest.raises(ConfigError) as err:
        chillfl.run(config={**TINY, **config}, write=False, progress=False)
    return err.value


def test_a_model_attack_on_a_method_whose_server_reads_no_upload_is_refused() -> None:
    err = refusal({"algorithm": {"name": "local_only"}, "attack": {"kind": "sign_flip", "clients": [0, 1]}})
    assert err.field == "attack.kind"
    assert err.message.startswith("'sign_flip' rewrites a model update, and algorithm 'local_only' uploads none (its server reads no entry of the clients' models)")
    assert "label_flip" in err.message  # what acts there instead


def test_a_data_attack_on_such_a_method_still_runs() -> None:
    records = chillfl.run(config={**TINY, "algorithm": {"name": "local_only"}, "attack": {"kind": "label_flip", "clients": [0]}}, write=False, progress=False).records
    assert records[-1]["attackers"] == [0]


def test_a_row_attack_on_a_soft_label_method_that_shares_nothing_is_refused() -> None:
    config = load_config(None, {"attack.kind": "gaussian"}).with_overrides({"distillation": {"method": "individual"}})
    with pytest.raises(ConfigError) as err:
        check_attack(config)
    assert err.value.field == "attack.kind"
    assert err.value.message.startswith("'gaussian' rewrites soft-label rows, and distillation method 'individual' uploads none (no collaboration)")


def test_a_skipped_rounds_record_has_its_attackers_too() -> None:
    config = {**TINY, "federation": {"num_clients": 4, "clients_per_round": 1, "rounds": 6, "sampling": "poisson"},
              "attack": {"kind": "scaling", "clients": [0, 1]}}
    records = chillfl.run(config=config, write=False, progress=False).records
    skipped = [r for r in records if r.get("skipped")]
    assert skipped  # the seed draws rounds with nobody in them
    assert all(r["attackers"] == [] for r in skipped)
    assert all("attackers" in r for r in records)


def test_a_model_attack_under_a_prototype_method_that_uploads_models_says_why_it_is_refused() -> None:
    config = load_config(None, {"attack.kind": "scaling"}).with_overrides({"prototypes": {"method": "fedhkd"}})
    with pytest.raises(ConfigError) as err:
        check_attack(config)
    assert "has none" not in err.value.message  # FedHKD's clients do upload models
    assert "under prototypes.method 'fedhkd' their models too, which reach the server honest" in err.value.message


def test_the_privacy_refusal_of_a_non_mean_says_what_local_does() -> None:
    err = refusal({"algorithm": {"name": "local_only"}, "privacy": {"mechanism": "local", "noise_multiplier": 1.0, "clip_norm": 1.0, "delta": 1e-3}})
    assert err.field == "privacy.mechanism"
    assert "adds noise to a weighted mean" not in err.message  # local noises each client's own update, not a mean
    assert err.message.startswith("'local' clips and noises each client's update on the client and hands the privatised updates to the server's rule "
                                  "over them (a weighted mean, a median, Krum, ...), which the server step of algorithm 'local_only' is not (")


def test_a_comparison_refuses_the_variant_before_any_run_is_written(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """The check ran where each run's protocol was built: `--grid algorithm.name=fedavg,local_only` ran fedavg to the
    end and left a .partial folder before refusing local_only, without naming the variant."""
    from chillfl.cli import main

    config = tmp_path / "att.toml"
    config.write_text('name = "att"\n[attack]\nkind = "sign_flip"\nclients = [0, 1]\n')
    args = [f"{k}={v}" for k, v in {"seed": 0, "executor": "sequential", "device": "cpu", "dataset.name": "digits", "model.name": "mlp",
                                     "model.hidden": "[8]", "federation.num_clients": 4, "federation.clients_per_round": 4, "federation.rounds": 1,
                                     "eval.clients": "none", "out_dir": str(tmp_path / "out")}.items()]
    assert main(["compare", str(config), "-q", *args, "--grid", "algorithm.name=fedavg,local_only"]) == 2
    assert "(grid variant algorithm.name=local_only)" in capsys.readouterr().err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
