"""On macOS the recorded CPU model fell back to ``platform.processor()``, which says ``arm`` (or ``i386``) of every
chip: two Macs' results looked as if from one machine. macOS's ``sysctl -n machdep.cpu.brand_string`` names the chip."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chillfl import environment


@pytest.fixture
def on_a_mac(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[list[str]]]:
    """No ``/proc/cpuinfo``, ``sys.platform`` darwin, ``platform.processor()`` "arm"; the commands run, recorded."""
    real_path = Path

    class NoCpuinfo(type(Path())):  # type: ignore[misc]
        def read_text(self, *args: Any, **kwargs: Any) -> str:
            if str(self) == "/proc/cpuinfo":
                raise FileNotFoundError(self)
            return real_path(self).read_text(*args, **kwargs)

    ran: list[list[str]] = []
    monkeypatch.setattr(environment, "Path", NoCpuinfo)
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(environment.platform, "processor", lambda: "arm")
    environment.cpu_model.cache_clear()
    yield ran
    environment.cpu_model.cache_clear()


def test_a_mac_names_its_chip_from_sysctl(on_a_mac: list[list[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    def run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        on_a_mac.append(cmd)
        assert kwargs.get("timeout") is not None
        return subprocess.CompletedProcess(cmd, 0, "Apple M2 Pro\n", "")

    monkeypatch.setattr(environment.subprocess, "run", run)
    assert environment.cpu_model() == "Apple M2 Pro"
    assert on_a_mac == [["sysctl", "-n", "machdep.cpu.brand_string"]]


@pytest.mark.parametrize("outcome", ["fails", "raises", "times out", "empty"])
def test_without_an_answer_from_sysctl_it_falls_back_as_before(on_a_mac: list[list[str]], monkeypatch: pytest.MonkeyPatch, outcome: str) -> None:
    def run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        if outcome == "raises":
            raise FileNotFoundError("sysctl")
        if outcome == "times out":
            raise subprocess.TimeoutExpired(cmd, kwargs["timeout"])
        return subprocess.CompletedProcess(cmd, 1 if outcome == "fails" else 0, "" if outcome == "fails" else "  \n", "")

    monkeypatch.setattr(environment.subprocess, "run", run)
    assert environment.cpu_model() == "arm"
