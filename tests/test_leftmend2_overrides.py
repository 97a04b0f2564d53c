"""An override that every run of a comparison replaces is refused by ``chillfl.compare()`` as by the command line (one
check, :mod:`chillfl.sweeps.replaced`), and one that every run keeps (the variants write the same value, no tuning axis
covers it) is not refused, whatever the value's kind (a list: ``model.hidden``)."""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from pathlib import Path

import pytest

import chillfl
from chillfl.cli import main
from chillfl.errors import ConfigError
from chillfl.sweeps.replaced import AskedBy, check_overrides_replaced
from test_clifix2_compare_overrides import CMP, _error
from test_clifix2_datasets import BASE

TUNED = {"name": "c", "federation": {"num_clients": 4, "rounds": 1, "clients_per_round": 2}, "dataset": {"name": "digits"},
         "model": {"name": "mlp"}, "eval": {"validation": 0.2}, "tune": {"client.lr": [0.1, 0.3]}}

HIDDEN = BASE + 'hidden = [64, 32]\n[variants."A".model]\nname = "mlp"\nhidden = [64, 32]\n[variants."B".model]\nname = "mlp"\nhidden = {B}\n'


def test_python_compare_refuses_an_override_the_tuning_axis_replaces(tmp_path: Path) -> None:
    """The finding's case: lr = 0.5 recorded as the comparison's base though every run was at 0.1 or 0.3."""
    with pytest.raises(ConfigError) as info:
        chillfl.compare(config=TUNED, out_dir=tmp_path, progress=False, **{"client.lr": 0.5})
    assert info.value.field == "client.lr"
    assert info.value.message == ("every run of c replaces the override client.lr=0.5 (the tuning grid's [tune] client.lr), so no run would use it, "
                                  "though the comparison's config.toml would record it; tune it at that value instead: **{'tune.client.lr': [0.5]}")
    with pytest.raises(ConfigError) as info:  # the caller's own tuning grid, as a table-valued override
        chillfl.compare(config={**TUNED, "tune": {}}, tune={"client.lr": [0.1, 0.3]}, out_dir=tmp_path, progress=False, client={"lr": 0.5})
    assert info.value.field == "client.lr"
    assert info.value.message.endswith("(the tuning grid's tune={'client.lr': ...}), so no run would use it, though the comparison's config.toml "
                                       "would record it; tune it at that value instead: tune={'client.lr': [0.5]}")
    assert not any(tmp_path.iterdir())  # refused before anything was written


def test_python_compare_refuses_an_override_every_grid_row_replaces(tmp_path: Path) -> None:
    config = {k: v for k, v in TUNED.items() if k != "tune"}
    with pytest.raises(ConfigError) as info:
        chillfl.compare(config=config, grid={"client.lr": [0.1, 0.2]}, out_dir=tmp_path, progress=False, **{"client.lr": 0.3})
    assert info.value.field == "client.lr"
    assert info.value.message == ("every run of c replaces the override client.lr=0.3 (the grid rows 'client.lr=0.1', 'client.lr=0.2'), so no run would "
                                  "use it, though the comparison's config.toml would record it; give its value to grid")


def test_python_compare_keeps_an_override_some_runs_keep(tmp_path: Path) -> None:
    """The check itself, as chillfl.compare calls it: variant A runs at T = 1, so temperature.value=1.0 is kept."""
    path = tmp_path / "cmp.toml"
    path.write_text(CMP.replace("[tune]\n\"client.lr\" = [0.01, 0.05]\n", ""))
    config = chillfl.make_config(str(path), {"temperature.policy": "fixed", "temperature.value": 1.0})
    check_overrides_replaced(config, {"temperature.policy": "fixed", "temperature.value": 1.0}, None, {}, AskedBy())
    config = chillfl.make_config(str(path), {"temperature.policy": "fixed", "temperature.value": 0.2})
    with pytest.raises(ConfigError) as info:
        check_overrides_replaced(config, {"temperature": {"policy": "fixed", "value": 0.2}}, None, {}, AskedBy())
    assert info.value.field == "temperature.value"
    assert info.value.message.endswith("(the variants 'A', 'B'), so no run would use it, though the comparison's config.toml would record it; set it in the variants")


def _dry_run(path: Path, *argv: str) -> int:
    with redirect_stdout(io.StringIO()):
        return main(["compare", str(path), "--dry-run", *argv])


def test_an_override_every_variant_writes_alike_is_kept(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Both variants write model.hidden = [64, 32], the override's value: no run replaces it with another, nothing is
    mislabelled. The resolved base held (64, 32) and the variants [64, 32], which compared unequal: refused before."""
    path = tmp_path / "h.toml"
    path.write_text(HIDDEN.replace("{B}", "[64, 32]"))
    assert _dry_run(path, "model.hidden=[64,32]") == 0
    config = chillfl.make_config(str(path), {"model.hidden": [64, 32]})
    check_overrides_replaced(config, {"model.hidden": [64, 32]}, None, {}, AskedBy())  # chillfl.compare's path


def test_python_compare_keeps_an_override_every_variant_writes_alike(tmp_path: Path) -> None:
    """chillfl.compare itself, not only the check it calls: what it passes to the check (the override as the caller
    gave it, a list) is not refused where both variants write that value."""
    path = tmp_path / "h.toml"
    path.write_text(HIDDEN.replace("{B}", "[64, 32]"))  # federation.rounds = 1
    result = chillfl.compare(config=str(path), write=False, progress=False, **{"model.hidden": [64, 32]})
    assert result.runs == 2 and result.complete and not result.failures


def test_an_override_every_variant_writes_otherwise_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The other direction: A writes [32], B [16]: every run replaces [64, 32], said as TOML (it was ``(64, 32)``)."""
    path = tmp_path / "h.toml"
    path.write_text(HIDDEN.replace("hidden = [64, 32]\n[variants", "hidden = [32]\n[variants").replace("{B}", "[16]"))
    assert _dry_run(path, "model.hidden=[64,32]") == 2
    assert _error(capsys) == ("model.hidden: every run of t replaces the command line's model.hidden=[64, 32] (the variants 'A', 'B'), so no run would "
                              "use it, though the comparison's config.toml would record it; set it in the variants, or run one variant at it: "
                              f"chillfl run {path} --variant LABEL --seed N 'model.hidden=[64, 32]'")


def test_a_tuning_axis_at_the_override_s_value_still_replaces_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A tuning axis covers the key: the runs take its values, not the override, even where the axis holds that value."""
    path = tmp_path / "t.toml"
    path.write_text(BASE + '[eval]\nvalidation = 0.2\n[tune]\n"client.lr" = [0.3]\n')
    assert _dry_run(path, "client.lr=0.3") == 2
    assert _error(capsys).startswith("client.lr: every run of t replaces the command line's client.lr=0.3 (the tuning grid's [tune] client.lr)")
    with pytest.raises(ConfigError) as info:
        chillfl.compare(config=str(path), out_dir=tmp_path / "out", progress=False, **{"client.lr": 0.3})
    assert info.value.field == "client.lr"
