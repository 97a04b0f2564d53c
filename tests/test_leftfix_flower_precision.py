"""A Flower run computes under the run's precision, as ``chillfl run`` does: the server's loop under
:func:`chillfl.runner.device_settings`, each node's updates too. Under a caller's bf16 ``torch.autocast`` and
``set_float32_matmul_precision("medium")`` (bf16 matmuls on the CPU) an fp32 Flower run trained and evaluated in bf16,
and its records differed from chillfl's. Run without Ray: the real server and client apps over the in-process grid of
tests/test_flower_privacy_attacks.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest
import torch

pytest.importorskip("flwr", reason="the Flower backend needs the [flower] extra (flwr)")

from chillfl.flower import apps  # noqa: E402
from test_flower_privacy_attacks import _config, on_flower, sequential, server_identity  # noqa: E402,F401

__all__ = ["server_identity"]


@pytest.fixture
def callers_bf16() -> Iterator[None]:
    """The caller's own low-precision settings around the run, as a notebook may have them."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("medium")
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            yield
    finally:
        torch.set_float32_matmul_precision(before)


@pytest.mark.usefixtures("server_identity")
def test_a_flower_run_under_the_callers_bf16_equals_chillfls(tmp_path: Path, callers_bf16: None) -> None:
    flower, _ = on_flower(_config(tmp_path, "under-bf16"))
    assert torch.is_autocast_enabled("cpu") and torch.get_float32_matmul_precision() == "medium"  # the caller's, given back
    with torch.autocast("cpu", enabled=False):
        torch.set_float32_matmul_precision("highest")
        plain = sequential(_config(tmp_path, "plain"))
    assert flower == plain


@pytest.mark.usefixtures("server_identity")
def test_the_server_and_every_node_enter_the_runs_device_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    entered: list[tuple[str, bool, str]] = []
    real = apps.device_settings

    def recording(config: Any, device: torch.device) -> Any:
        entered.append((config.precision, config.deterministic, torch.device(device).type))
        return real(config, device)

    monkeypatch.setattr(apps, "device_settings", recording)
    config = _config(tmp_path, "deterministic", deterministic=True)  # tf32: CUDA only
    records, grid = on_flower(config)
    assert len(records) == config.federation.rounds
    assert entered[0] == ("fp32", True, "cpu")  # the server's, around its loop
    assert len(entered) == 1 + grid.sent.count("train") and set(entered) == {("fp32", True, "cpu")}  # each node's updates
