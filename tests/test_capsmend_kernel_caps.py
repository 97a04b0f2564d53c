"""A record written before ``KERNEL_CAPS`` grew ``OPENBLAS_CORETYPE`` and ``NPY_DISABLE_CPU_FEATURES`` says
``kernel_caps None`` of variables it never looked at: resumed on a machine that presets ``OPENBLAS_CORETYPE``
(many clusters do), ``chillfl resume`` warned ``kernel_caps None -> OPENBLAS_CORETYPE=Haswell`` and summary.json
recorded a change of setup that nobody made. A record now names the variables it tracked, and only those both
records tracked are compared."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch

from chillfl.environment import FIRST_KERNEL_CAPS, KERNEL_CAPS, as_comment, caps_of, changes, differences, environment
from chillfl.storage.checkpoint import read_state, write_state
from test_run_outputs import _stopped_after_round_2

OLD = {"torch": "2.5.1", "code": "0123456789abcdef", "kernel_caps": None}
"""An older record: no ``kernel_caps_tracked`` (it tracked oneDNN's and MKL's caps only)."""


def _now(**caps: str) -> dict[str, object]:
    return {"torch": "2.5.1", "code": "0123456789abcdef", "kernel_caps": " ".join(f"{k}={v}" for k, v in caps.items()) or None, "kernel_caps_tracked": list(KERNEL_CAPS)}


def test_an_older_record_is_compared_over_the_variables_it_tracked() -> None:
    assert FIRST_KERNEL_CAPS == ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR")
    preset = _now(OPENBLAS_CORETYPE="Haswell", NPY_DISABLE_CPU_FEATURES="X86_V4 AVX512_ICL")
    assert differences(OLD, preset) == [] and changes(OLD, preset) == {}
    # a variable the old record did track still warns, named alone (the others it never saw are left out)
    capped = _now(MKL_CBWR="AVX2", OPENBLAS_CORETYPE="Haswell")
    assert differences(OLD, capped) == ["kernel_caps None -> MKL_CBWR=AVX2"]
    assert changes(OLD, capped) == {"kernel_caps": [None, "MKL_CBWR=AVX2"]}
    was = {**OLD, "kernel_caps": "ONEDNN_MAX_CPU_ISA=AVX2"}
    assert differences(was, preset) == ["kernel_caps ONEDNN_MAX_CPU_ISA=AVX2 -> None"]
    assert differences(was, _now(ONEDNN_MAX_CPU_ISA="AVX2", OPENBLAS_CORETYPE="Haswell")) == []


def test_records_that_tracked_the_same_variables_compare_whole() -> None:
    plain, preset = _now(), _now(OPENBLAS_CORETYPE="Haswell")
    assert differences(plain, preset) == ["kernel_caps None -> OPENBLAS_CORETYPE=Haswell"]
    assert differences(preset, _now(OPENBLAS_CORETYPE="SkylakeX")) == ["kernel_caps OPENBLAS_CORETYPE=Haswell -> OPENBLAS_CORETYPE=SkylakeX"]
    # a newer record against an older one: the variable the older never tracked is left out either way round
    assert differences(preset, OLD) == []


def test_a_value_with_spaces_stays_whole_when_narrowed() -> None:
    caps = "MKL_CBWR=AVX2 NPY_DISABLE_CPU_FEATURES=X86_V4 AVX512_ICL OPENBLAS_CORETYPE=Haswell"
    assert caps_of(caps, KERNEL_CAPS, ("NPY_DISABLE_CPU_FEATURES",)) == "NPY_DISABLE_CPU_FEATURES=X86_V4 AVX512_ICL"
    assert caps_of(caps, KERNEL_CAPS, ("MKL_CBWR", "OPENBLAS_CORETYPE")) == "MKL_CBWR=AVX2 OPENBLAS_CORETYPE=Haswell"
    assert caps_of(caps, KERNEL_CAPS, ("ONEDNN_MAX_CPU_ISA",)) is None and caps_of(None, KERNEL_CAPS, KERNEL_CAPS) is None
    # a word holding "=" whose name is no tracked variable continues the value before it: it starts no variable
    assert caps_of("NPY_DISABLE_CPU_FEATURES=X86_V4 X=Y MKL_CBWR=AVX2", KERNEL_CAPS, ("NPY_DISABLE_CPU_FEATURES",)) == "NPY_DISABLE_CPU_FEATURES=X86_V4 X=Y"


def test_a_record_without_kernel_caps_leaves_the_other_whole() -> None:
    # a saved record from before kernel_caps was recorded says nothing of it: nothing to narrow, nothing to compare
    # (narrowing it anyway read its absent value)
    assert differences({"torch": "2.5.1"}, _now(OPENBLAS_CORETYPE="Haswell")) == []


def test_the_record_names_what_it_tracked_but_the_config_comment_does_not(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in KERNEL_CAPS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    env = environment(torch.device("cpu"))
    assert env["kernel_caps_tracked"] == list(KERNEL_CAPS)
    assert "kernel_caps OPENBLAS_CORETYPE=Haswell, " in as_comment(env) and "kernel_caps_tracked" not in as_comment(env)


def _resume_old_checkpoint(partial: Path, caplog: pytest.LogCaptureFixture, caps: str | None) -> tuple[list[str], object]:
    """Resume ``partial`` after making its record an older chillfl's (``kernel_caps`` = ``caps``, nothing tracked
    named): the setup warnings and summary.json's ``resumed``."""
    from chillfl.cli import main

    state = read_state(partial / "checkpoint.safetensors")
    del state["environment"]["kernel_caps_tracked"]
    state["environment"]["kernel_caps"] = caps
    write_state(partial / "checkpoint.safetensors", state)
    with caplog.at_level(logging.WARNING, logger="chillfl"):
        assert main(["resume", str(partial), "-q"]) == 0
    summary = json.loads((partial.parent / "r" / "summary.json").read_text())
    return [r.getMessage() for r in caplog.records if "another setup" in r.getMessage()], summary.get("resumed")


def test_resuming_an_older_checkpoint_on_a_machine_that_presets_openblas_says_nothing(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in KERNEL_CAPS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    lines, resumed = _resume_old_checkpoint(_stopped_after_round_2(tmp_path), caplog, None)
    assert lines == [] and not resumed


def test_resuming_an_older_checkpoint_still_warns_of_a_variable_it_tracked(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in KERNEL_CAPS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    lines, resumed = _resume_old_checkpoint(_stopped_after_round_2(tmp_path), caplog, "MKL_CBWR=AVX2")
    assert len(lines) == 1 and "(kernel_caps MKL_CBWR=AVX2 -> None)" in lines[0]
    assert resumed == [{"round": 2, "changed": {"kernel_caps": ["MKL_CBWR=AVX2", None]}}]


def test_a_record_without_the_field_tracked_what_its_value_names() -> None:
    """A record written between KERNEL_CAPS growing and ``kernel_caps_tracked`` (2026-12-07) named OPENBLAS_CORETYPE in its
    value: its removal is a change (it was read as tracking the first four only, and went unwarned: rev116a 2)."""
    from chillfl.environment import KERNEL_CAPS, differences

    now = {"kernel_caps": None, "kernel_caps_tracked": list(KERNEL_CAPS)}
    assert differences({"kernel_caps": "OPENBLAS_CORETYPE=Haswell"}, now, ("kernel_caps",)) == ["kernel_caps OPENBLAS_CORETYPE=Haswell -> None"]
    assert differences({"kernel_caps": None}, {"kernel_caps": "OPENBLAS_CORETYPE=Haswell", "kernel_caps_tracked": list(KERNEL_CAPS)},
                       ("kernel_caps",)) == []  # an older record's None says nothing of a variable it did not track
