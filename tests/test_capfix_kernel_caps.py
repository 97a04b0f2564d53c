"""numpy's kernel choices are named in a run's record as torch's are: ``OPENBLAS_CORETYPE`` picks OpenBLAS's kernels
(Haswell's ``ddot`` and SkylakeX's summed a round's train_loss in another order: 1.2488999374468361 vs 1.248899937446836
on one machine) and ``NPY_DISABLE_CPU_FEATURES`` numpy's own SIMD loops (its float64 exp and log), and neither was in
``kernel_caps``: the two runs' records were identical and ``chillfl resume`` could not warn."""

from __future__ import annotations

import pytest
import torch

from chillfl.environment import COMPARED, KERNEL_CAPS, differences, environment


def test_the_record_names_numpys_and_openblass_kernel_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in KERNEL_CAPS:
        monkeypatch.delenv(name, raising=False)
    plain = environment(torch.device("cpu"))
    assert plain["kernel_caps"] is None
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    monkeypatch.setenv("NPY_DISABLE_CPU_FEATURES", "X86_V4 AVX512_ICL AVX512_SPR")
    capped = environment(torch.device("cpu"))
    assert capped["kernel_caps"] == "OPENBLAS_CORETYPE=Haswell NPY_DISABLE_CPU_FEATURES=X86_V4 AVX512_ICL AVX512_SPR"
    assert "kernel_caps" in COMPARED  # what resume compares: a change of either is warned of
    assert differences(plain, capped) == ["kernel_caps None -> OPENBLAS_CORETYPE=Haswell NPY_DISABLE_CPU_FEATURES=X86_V4 AVX512_ICL AVX512_SPR"]
    monkeypatch.setenv("OPENBLAS_CORETYPE", "SkylakeX")
    assert differences(capped, environment(torch.device("cpu"))) == [
        "kernel_caps OPENBLAS_CORETYPE=Haswell NPY_DISABLE_CPU_FEATURES=X86_V4 AVX512_ICL AVX512_SPR -> "
        "OPENBLAS_CORETYPE=SkylakeX NPY_DISABLE_CPU_FEATURES=X86_V4 AVX512_ICL AVX512_SPR"]
