"""The generated reference lists as ``device``'s allowed values those a run accepts: it listed ``mps``, which every run
refuses."""

from __future__ import annotations

import pytest

from chillfl.cli import main
from chillfl.config import RunConfig
from chillfl.errors import ConfigError


def test_reference_lists_the_devices_a_run_accepts(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "--options"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| `device` |")]
    assert rows == ['| `device` | `str` | `"auto"` | `cpu`, `cuda`, `cuda:N`, `auto` |']
    with pytest.raises(ConfigError) as info:  # the error for an unknown one lists the same values
        RunConfig(device="foo").validate("")
    assert info.value.message == "unknown value 'foo'; allowed: cpu, cuda, cuda:N, auto (mps is not supported yet)"
