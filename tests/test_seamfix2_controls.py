"""A comparison's plan keeps which variants were asked for and which :func:`with_controls` added (``Variant.control``),
and ``sweep.json`` records it; an older ``sweep.json`` without it reads back as before (inferred from ``lr_scale``).

It was inferred after the fact from ``lr_scale``, which a variant asked for may set itself (``chillfl.sweeps.run.
run_compare(variants=...)``): with controls on, such a variant before them made the folder's ``config.toml`` record the
three controls as variants asked for and no controls (rerun, the lr x 2 control ran at lr x 1); with controls off, the
table took it for a control and dropped the step-size caveat of an uncontrolled T < 1 row.
"""

from __future__ import annotations

import dataclasses
from chillfl.config import tomllib  # tomli on Python 3.10
from pathlib import Path
from typing import Any

from chillfl.config import RunConfig, config_from_dict, load_config
from chillfl.sweeps.plan import CompareOptions, Plan, Variant, plan_runs
from chillfl.sweeps.record import comparison_toml, read_sweep, recorded_flags, sweep_record, write_sweep
from chillfl.sweeps.run import run_compare

BASE: dict[str, Any] = {"name": "g", "device": "cpu", "dataset": {"name": "digits"}, "model": {"name": "mlp"},
                        "federation": {"num_clients": 2, "clients_per_round": 2, "rounds": 1}}
CHILLED = Variant("T=0.5", {"temperature": {"policy": "fixed", "value": 0.5}}, 0.5)
HALF_LR = Variant("half lr", {}, None, 0.5)  # asked for, and scales its own lr
CONTROLS = ["T=1, lr x 2 (control of T=0.5)", "T=0.5 magnitude only", "T=0.5 direction only"]


def _plan(controls: bool, variants: list[Variant] | None = None) -> tuple[RunConfig, Plan]:
    config = config_from_dict(BASE)
    return config, plan_runs(config, [], CompareOptions(controls=controls), variants if variants is not None else [CHILLED, HALF_LR])


def test_a_variant_that_scales_its_own_lr_is_recorded_as_asked_and_the_controls_as_controls() -> None:
    _, plan = _plan(True)
    assert [v.label for v in plan.variants] == ["T=0.5", "half lr", *CONTROLS]
    assert [v.label for v in plan.asked] == ["T=0.5", "half lr"] and plan.controls_added
    config, _ = _plan(True)
    saved = tomllib.loads(comparison_toml(config, plan))
    assert list(saved["variants"]) == ["T=0.5", "half lr"]  # the old code: the three controls too, as rows asked for
    assert saved["compare"]["controls"] is True  # the old code: none


def test_sweep_json_records_which_variants_were_added() -> None:
    config, plan = _plan(True)
    record = sweep_record(comparison_toml(config, plan).encode(), plan, resumable=True)
    assert [(v["label"], v["control"]) for v in record["variants"]] == [("T=0.5", False), ("half lr", False), *((c, True) for c in CONTROLS)]


def _folder(tmp_path: Path, config: RunConfig, plan: Plan, old: bool = False) -> Path:
    """A comparison folder of ``plan``: its ``config.toml`` and ``sweep.json`` (``old``: without the controls' flags, as an older chillfl wrote it)."""
    folder = tmp_path / "g-compare.partial"
    folder.mkdir(parents=True)
    toml = comparison_toml(config, plan)
    (folder / "config.toml").write_text(toml)
    record = sweep_record(toml.encode(), plan, resumable=True)
    if old:
        for v in record["variants"]:
            del v["control"]
    write_sweep(folder, record)
    return folder


def test_a_resumed_plan_keeps_them(tmp_path: Path) -> None:
    config, plan = _plan(True)
    folder = _folder(tmp_path, config, plan)
    variants, options, reference = read_sweep(folder)
    again = plan_runs(load_config(folder / "config.toml"), [], options, variants, reference)  # as `chillfl resume` plans it
    assert [(v.label, v.control) for v in again.variants] == [(v.label, v.control) for v in plan.variants]
    assert comparison_toml(config, again) == comparison_toml(config, plan)


def test_an_older_sweep_json_without_them_reads_as_before(tmp_path: Path) -> None:
    config, plan = _plan(True, [CHILLED])
    folder = _folder(tmp_path, config, plan, old=True)
    variants, options, reference = read_sweep(folder)
    assert [v.control for v in variants] == [None] * 4  # not recorded
    again = plan_runs(load_config(folder / "config.toml"), [], options, variants, reference)
    assert not again.controls_recorded and again.controls_added  # inferred from the control's lr x 2, as before
    # as the old code planned it: its resume fills in the controls' T, so with_controls' list never matched the record's
    saved = tomllib.loads(comparison_toml(config, again))
    assert list(saved["variants"]) == ["T=0.5", *CONTROLS] and "controls" not in saved["compare"]


def test_variants_that_do_not_say_are_inferred_as_before() -> None:
    config, plan = _plan(True, [dataclasses.replace(CHILLED, control=None)])
    assert not plan.controls_recorded and plan.controls_added
    saved = tomllib.loads(comparison_toml(config, plan))
    assert list(saved["variants"]) == ["T=0.5"] and saved["compare"]["controls"] is True


def test_recorded_flags_name_the_controls_as_a_flag(tmp_path: Path) -> None:
    """``chillfl compare FOLDER/config.toml`` of a comparison whose file names no variants reads its flags from ``sweep.json``."""
    config, plan = _plan(True, [CHILLED])
    hints = []
    for old in (False, True):
        folder = _folder(tmp_path / str(old), config, plan, old=old)
        (folder / "config.toml").write_text("")  # not read here: the hint reads sweep.json
        hints.append(recorded_flags(folder / "config.toml", config))
    new, older = hints
    assert new is not None and "--grid temperature=0.5 --seeds 0 --controls` runs it again" in new  # None on the old code
    assert older is not None and "; T=0.5 magnitude only (client.loss=magnitude_only" in older  # as the old code said it


def test_the_table_of_a_variant_that_scales_its_own_lr_is_not_taken_for_a_controlled_one() -> None:
    """Controls off, a chilled row: the step-size caveat stays (the old code took ``half lr`` for a control and dropped it)."""
    config, _ = _plan(False)
    result = run_compare(config, [], options=CompareOptions(controls=False), variants=[CHILLED, HALF_LR], progress=False, write=False)
    assert "step-size caveat" in result.table
