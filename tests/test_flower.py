"""chillfl.flower: a config as Flower ServerApp + ClientApp gives chillfl's own metrics, bit for bit.

* the wire format round-trips typed messages exactly (tensors' bytes, floats' bits);
* under Flower's simulation engine (Ray backend, 2 SuperNodes serving 4 clients) FedChill temperatures +
  SCAFFOLD + a FedProx term, and PA3Fed with FLex&Chill's fixed temperature, give the same records as
  ``chillfl``'s runtime (every float compared exactly);
* what Flower does not carry (the soft-label protocol) and a missing ``flwr`` are one-line ConfigErrors.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("flwr")

from chillfl.config import config_from_dict  # noqa: E402
from chillfl.errors import ConfigError  # noqa: E402
from chillfl.flower import run_simulation, server_app  # noqa: E402
from chillfl.flower.wire import decode, encode  # noqa: E402
from chillfl.engine.protocol import ClientReply, ClientTask  # noqa: E402
from chillfl.protocols.parameters import ParamDownlink, ParamUplink  # noqa: E402
from chillfl.runner import run_experiment  # noqa: E402

BASE: dict[str, Any] = {
    "name": "flower",
    "seed": 5,
    "threads": 1,
    "device": "cpu",
    "dataset": {"name": "digits"},
    "partition": {"name": "dirichlet", "alpha": 0.3},
    "model": {"name": "mlp"},
    "federation": {"num_clients": 4, "clients_per_round": 3, "rounds": 2},
    "client": {"epochs": 1, "batch_size": 32, "lr": 0.05},
    "eval": {"clients": "sampled", "client_split": "proportional", "client_split_size": 20},
}


def _config(tmp_path: Path, **parts: Any) -> Any:
    return config_from_dict({**BASE, "out_dir": str(tmp_path / "out"), **parts})


def test_wire_round_trip_is_exact() -> None:
    g = torch.Generator().manual_seed(0)
    start = {"w": torch.randn(3, 2, generator=g), "steps": torch.tensor(7), "h": torch.randn(2, generator=g, dtype=torch.float64)}
    down = ParamDownlink(start, 0.1 + 0.2, 1 / 3, {"c": {"w": torch.randn(3, 2, generator=g)}, "mu": 1e-300, "flag": True}, 2**62 + 1)
    task = ClientTask(3, 4, down, None, None, 0.625)  # type: ignore[arg-type]
    back = decode(encode(task))
    assert isinstance(back, ClientTask) and isinstance(back.downlink, ParamDownlink)
    assert (back.client_id, back.round, back.work, back.data, back.state) == (3, 4, 0.625, None, None)
    d = back.downlink
    assert d.lr == 0.1 + 0.2 and d.temperature == 1 / 3 and d.seed == 2**62 + 1 and d.context["mu"] == 1e-300 and d.context["flag"] is True
    for k, v in start.items():  # same dtype, shape and bytes
        assert d.start[k].dtype == v.dtype and torch.equal(d.start[k], v)
    assert torch.equal(d.context["c"]["w"], down.context["c"]["w"])
    up = ClientReply(3, ParamUplink(start, 120, 4, float("nan"), {"score": 0.5, "grad_norm": 2.0}), None, 0.75, None)
    got = decode(encode(up))
    assert got.uplink.num_samples == 120 and got.uplink.train_loss != got.uplink.train_loss and got.uplink.report == {"score": 0.5, "grad_norm": 2.0}
    assert got.local_acc == 0.75 and got.local_loss is None


def test_wire_refuses_unregistered_classes() -> None:
    class Evil:
        pass

    with pytest.raises(TypeError, match="cannot send a Evil"):
        encode({"x": Evil()})


METHODS = {
    "fedchill-scaffold-fedprox": {"temperature": {"policy": "fedchill"}, "algorithm": {"name": "scaffold"}, "objective": {"proximal_mu": 0.01}},
    "pa3fed-flexchill": {"temperature": {"policy": "fixed", "value": 0.5}, "algorithm": {"name": "pa3fed", "mode": "always"}},
}


@pytest.mark.parametrize("method", sorted(METHODS))
def test_simulation_equals_chillfl_runtime(method: str, tmp_path: Path) -> None:
    config = _config(tmp_path, **METHODS[method])
    expected = run_experiment(config, write=False, progress=False).records
    out = run_simulation(config, num_supernodes=2)  # 2 SuperNodes: clients 0, 2 on one, 1, 3 on the other
    assert [r["round"] for r in out.records] == [1, 2]
    assert out.records == expected  # every metric, floats compared exactly
    assert Path(out.folder).name == "flower" and (Path(out.folder) / "metrics.jsonl").is_file()


def test_soft_label_protocol_is_refused_in_one_line(tmp_path: Path) -> None:
    config = _config(tmp_path, distillation={"method": "scarlet", "public_size": 120, "subset_size": 40})
    with pytest.raises(ConfigError) as info:
        run_simulation(config)
    assert str(info.value).startswith("distillation.method: ") and "\n" not in str(info.value)


def test_without_flwr_one_line_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "flwr", None)
    with pytest.raises(ConfigError, match=r"^flower: chillfl.flower needs Flower, which is not installed here: pip install 'chillfl\[flower\]'$"):
        server_app()
