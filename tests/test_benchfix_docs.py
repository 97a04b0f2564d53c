"""The benchmark docs against the code they describe (task benchfix): the modes table, the GPU peaks and the flags
that pass them, the reference files. Parsed, nothing run."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

import run  # noqa: E402
from workloads import PEAK_GFLOPS  # noqa: E402

README = (ROOT / "benchmarks" / "README.md").read_text()


def test_the_modes_table_names_every_cpu_chillfl_mode() -> None:
    row = next(line for line in README.splitlines() if line.startswith("| `chillfl["))
    named = {f"chillfl[{v}]" for v in re.match(r"\| `chillfl\[(.+?)\]`", row).group(1).split("\\|")}
    assert named == {m.name for m in run.all_modes("cpu") if m.name.startswith("chillfl[")}


def test_peak_gflops_holds_the_readmes_peak_table() -> None:
    table = README.split("| device | FP32 | TF32 tensor cores | BF16 tensor cores |")[1].split("\n\n")[0]
    rows = [line.strip("|").split("|") for line in table.strip().splitlines()[1:]]
    assert len(rows) == 4
    for device, *peaks in rows:
        for precision, peak in zip(("FP32", "TF32", "BF16"), peaks):
            entries = [v for k, v in PEAK_GFLOPS.items() if k.startswith(device.strip()) and precision in k]
            assert entries == [int(peak.strip().replace(",", ""))], (device, precision)


def test_every_documented_command_passes_each_peak_to_its_own_flag() -> None:
    """``--peak-gflops`` is the FP32 peak; performance.md once gave it the TF32 one (7x too high a peak)."""
    by_flag = {"--peak-gflops": "FP32", "--peak-gflops-tf32": "TF32", "--peak-gflops-bf16": "BF16"}
    pages = [README, *(p.read_text() for p in (ROOT / "docs").glob("*.md")), (ROOT / "benchmarks" / "gpu-check.sh").read_text()]
    found = [(flag, int(value)) for page in pages for flag, value in re.findall(r"(--peak-gflops(?:-tf32|-bf16)?) (\d+)\b", page)]
    assert len(found) >= 10
    for flag, value in found:
        assert value in {v for k, v in PEAK_GFLOPS.items() if by_flag[flag] in k}, (flag, value)


def test_every_reference_json_is_json() -> None:
    files = sorted((ROOT / "benchmarks" / "reference").glob("*.json"))
    assert len(files) > 20
    for path in files:
        assert isinstance(json.loads(path.read_text()), dict), path.name
