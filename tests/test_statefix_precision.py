"""An fp32 run computes in fp32 whatever the caller set: its autocast, its float32 matmul precision, oneDNN's fp32
precision. Each is off (or pinned) for the run and the caller's again after it, an exception included. Exact equality
is between two runs in one test, on one machine."""

from typing import Any, Iterator

import pytest
import torch
from torch import nn

import chillfl
from torch.torch_version import TorchVersion

FP32_PRECISION_API = TorchVersion(torch.__version__) >= "2.9"  # per-backend fp32_precision settings
CONFIG = {"federation": {"num_clients": 3, "rounds": 2}, "client": {"batch_size": 16}}


def _data() -> chillfl.TensorData:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(180, 24, generator=g), torch.randint(0, 4, (180,), generator=g)
    return chillfl.TensorData(x[:150], y[:150], x[150:], y[150:], num_classes=4)


def _model() -> nn.Module:
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential(nn.Linear(24, 64), nn.ReLU(), nn.Linear(64, 4))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return model


def _records(**kw: Any) -> list[dict[str, Any]]:
    out = chillfl.run(model=_model(), data=_data(), config=CONFIG, write=False, progress=False, **kw)
    return [{k: v for k, v in r.items() if "time" not in k} for r in out.records]


@pytest.fixture
def settings_back() -> Iterator[None]:
    """Whatever a test sets, the next test starts from this process's defaults."""
    yield
    torch.set_float32_matmul_precision("highest")
    if FP32_PRECISION_API:  # and the two it set explicitly back to reading their backend's
        torch.backends.mkldnn.matmul.fp32_precision = "none"  # type: ignore[attr-defined]
        torch.backends.cuda.matmul.fp32_precision = "none"


def test_caller_autocast_is_off_for_the_run() -> None:
    plain = _records()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        under = _records()
        assert torch.is_autocast_enabled("cpu")  # the caller's again
        assert torch.get_autocast_dtype("cpu") == torch.bfloat16
    assert under == plain


def test_caller_matmul_precision_is_pinned_for_the_run(settings_back: None) -> None:
    plain = _records()
    torch.set_float32_matmul_precision("medium")
    under = _records()
    assert torch.get_float32_matmul_precision() == "medium"
    assert under == plain


@pytest.mark.skipif(not FP32_PRECISION_API, reason="torch before 2.9 has no per-backend fp32_precision")
def test_caller_onednn_precision_is_pinned_for_the_run(settings_back: None) -> None:
    plain = _records()
    torch.backends.mkldnn.matmul.fp32_precision = "bf16"  # type: ignore[attr-defined]
    seen: list[str] = []

    class Look(chillfl.Callback):
        def on_round(self, record: dict[str, Any]) -> None:
            seen.append(torch.backends.mkldnn.matmul.fp32_precision)  # type: ignore[attr-defined]
    under = _records(callbacks=[Look()])
    assert seen == ["ieee", "ieee"]
    assert torch.backends.mkldnn.matmul.fp32_precision == "bf16"  # type: ignore[attr-defined]
    assert under == plain


def test_settings_come_back_after_an_exception(settings_back: None) -> None:
    class Fail(chillfl.Callback):
        def on_round(self, record: dict[str, Any]) -> None:
            assert not torch.is_autocast_enabled("cpu")
            raise RuntimeError("stop here")

    torch.set_float32_matmul_precision("medium")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with pytest.raises(RuntimeError, match="stop here"):
            _records(callbacks=[Fail()])
        assert torch.is_autocast_enabled("cpu")
    assert torch.get_float32_matmul_precision() == "medium"


def _legacy(read: Any) -> Any:
    try:
        return read()
    except RuntimeError:  # torch refuses a legacy setting that disagrees with the new ones
        return "unreadable"


def _all_settings() -> list[str]:
    b: Any = torch.backends
    legacy = [_legacy(torch.get_float32_matmul_precision), _legacy(lambda: b.cuda.matmul.allow_tf32), _legacy(lambda: b.cudnn.allow_tf32)]
    return [*legacy, b.fp32_precision, b.mkldnn.fp32_precision, b.cudnn.fp32_precision, *(s.fp32_precision for s in (
        b.mkldnn.matmul, b.mkldnn.conv, b.mkldnn.rnn, b.cuda.matmul, b.cudnn.conv, b.cudnn.rnn))]


@pytest.mark.skipif(not FP32_PRECISION_API, reason="torch before 2.9 has no per-backend fp32_precision")
@pytest.mark.parametrize("caller", ["defaults", "medium", "high", "onednn bf16", "cudnn off"])
@pytest.mark.parametrize("precision", ["fp32", "tf32"])
def test_pin_gives_every_setting_back(caller: str, precision: str) -> None:
    from chillfl.training.local import pin_precision

    b: Any = torch.backends
    default = _all_settings()
    try:
        if caller == "medium":
            torch.set_float32_matmul_precision("medium")
        elif caller == "high":
            torch.set_float32_matmul_precision("high")
        elif caller == "onednn bf16":
            b.mkldnn.matmul.fp32_precision = "bf16"
        elif caller == "cudnn off":
            b.cudnn.allow_tf32 = False
        before = _all_settings()
        restore = pin_precision(precision)
        pinned = _all_settings()[6:]
        # oneDNN IEEE; cuBLAS TF32 for tf32 only; cuDNN on TF32 always (torch's default, which fp32 has always meant)
        assert pinned == ["ieee"] * 3 + (["tf32"] * 3 if precision == "tf32" else ["ieee", "tf32", "tf32"])
        assert _all_settings()[:3] == (["high", True, True] if precision == "tf32" else ["highest", False, True])  # readable: no mix
        restore()
        assert _all_settings() == before
    finally:
        torch.set_float32_matmul_precision(default[0])
        b.cudnn.allow_tf32 = default[2]
        b.fp32_precision = "none"
        for setting, value in zip((b.mkldnn, b.cudnn, b.mkldnn.matmul, b.mkldnn.conv, b.mkldnn.rnn, b.cuda.matmul, b.cudnn.conv, b.cudnn.rnn), default[4:]):
            setting.fp32_precision = value
    assert _all_settings() == default
