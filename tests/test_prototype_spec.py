"""The prototype family's seam: a method is a PrototypeSpec found by name or import path, and the protocol only calls its hooks.

The plugins below live in this module, so a config names them as ``"test_prototype_spec:NAME"``, the way a user's do.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import pytest
import torch

from chillfl.cli import main
from chillfl.config import RunConfig, load_config
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment, build_protocol
from chillfl.extend import ClassRows, Head, Knowledge, PrototypeHooks, PrototypeLoss, PrototypeSpec, average_rows, class_means
from chillfl.options import require
from chillfl.settings.prototypes import method_names, method_spec, parse_prototypes

from kd_helpers import MIXED, records

ME = __name__


@dataclass(frozen=True)
class PlainOptions:
    """No options: the default hooks (prototype sharing at lambda = 1, count-weighted)."""


PLAIN = PrototypeSpec("plain", PlainOptions)


@dataclass(frozen=True)
class SharedOptions:
    lam: float = 1.0
    share: bool = True
    most_rounds: int = 0

    def validate(self, section: str) -> None:
        require(self.lam >= 0, f"{section}.lam", f"must be >= 0, got {self.lam}")


class Shared(PrototypeHooks[SharedOptions]):
    """Also sends each class's mean squared representation; the server turns them into per-class variances."""

    def release(self, cid: int, round: int, features: torch.Tensor, logits: torch.Tensor, y: torch.Tensor) -> ClassRows:
        rows = super().release(cid, round, features, logits, y)
        second = class_means((features * features).mean(1, keepdim=True), y, self.num_classes)[0]  # [C, 1]: E[|f|^2] / d
        return ClassRows(rows.means, rows.counts, {"variance": second})

    def combine(self, releases: Sequence[ClassRows]) -> Knowledge:
        k = average_rows(releases)
        return Knowledge(k.protos, k.mask, {"variance": (k.extra["variance"] - (k.protos * k.protos).mean(1, keepdim=True)).clamp_min(0)})

    def initial(self) -> dict[str, torch.Tensor]:
        return {"variance": torch.zeros(self.num_classes, 1)}

    def loss(self, head: Head) -> PrototypeLoss:
        return PrototypeLoss(self.options.lam)


def _check(options: SharedOptions, config: RunConfig) -> None:
    if options.most_rounds and config.federation.rounds > options.most_rounds:
        raise ConfigError("prototypes.most_rounds", f"at most {options.most_rounds} rounds, got {config.federation.rounds}")


def _shares(options: SharedOptions) -> bool:
    return options.share


SHARED = PrototypeSpec("shared", SharedOptions, Shared, summary="prototypes and variances", shares_model=_shares, check=_check)
NOT_A_SPEC = object()


def _config(prototypes: dict[str, Any], **over: Any) -> RunConfig:
    base = {"seed": 3, "dataset.name": "digits", "model.name": "mlp", "federation.num_clients": 4, "federation.clients_per_round": 2,
            "federation.rounds": 2, "client.batch_size": 32, "client.lr": 0.05, "eval.client_split_size": 20, **over}
    return load_config(None, base).with_overrides({"prototypes": prototypes})


def test_built_ins_are_listed_without_import_and_found_like_a_plugin() -> None:
    assert {"fedproto", "fedhkd"} <= set(method_names())
    assert method_spec(f"{ME}:SHARED") is SHARED
    assert isinstance(method_spec("fedhkd"), PrototypeSpec) and method_spec("fedhkd").hooks.__module__ == "chillfl.prototypes.methods.fedhkd"


def test_a_plugin_with_default_hooks_is_fedproto_bit_for_bit() -> None:
    """The default hooks are plain prototype sharing: the same records as FedProto at its defaults."""
    assert records({"model": {"name": "mlp"}, "prototypes": {"method": f"{ME}:PLAIN"}}) == records({"model": {"name": "mlp"}, "prototypes": {"method": "fedproto"}})


def test_a_plugins_options_shares_model_and_own_rows_reach_the_protocol() -> None:
    exp = build_experiment(_config({"method": f"{ME}:SHARED", "lam": 0.5}))
    protocol = build_protocol(exp)
    assert protocol.global_state() is not None  # shares_model: the models are averaged too
    assert set(protocol.knowledge.extra) == {"variance"} and protocol.knowledge.extra["variance"].shape == (10, 1)
    kept = build_protocol(build_experiment(_config({"method": f"{ME}:SHARED", "share": False})))
    assert kept.global_state() is None
    recs = run(_config({"method": f"{ME}:SHARED", "lam": 0.5}))
    assert len(recs) == 2 and recs[-1]["global_acc"] is not None and recs[-1]["known_classes"] == 10


def run(config: RunConfig) -> list[dict[str, Any]]:
    from chillfl.runner import run_experiment

    return run_experiment(config, write=False, progress=False).records


def test_the_uplink_counts_the_methods_own_rows() -> None:
    """Without model sharing, bytes up are rows of known classes: (d + the method's widths) floats + class id + count."""
    plain = run(_config({"method": f"{ME}:PLAIN"}))
    shared = run(_config({"method": f"{ME}:SHARED", "share": False}))
    assert shared[0]["bytes_up"] > plain[0]["bytes_up"]  # 64 + 1 floats per class instead of 64


def test_a_plugins_check_and_options_are_one_config_error() -> None:
    with pytest.raises(ConfigError) as err:
        build_experiment(_config({"method": f"{ME}:SHARED", "most_rounds": 1}))
    assert err.value.field == "prototypes.most_rounds"
    with pytest.raises(ConfigError) as err:
        parse_prototypes({"method": f"{ME}:SHARED", "lam": -1.0})
    assert err.value.field == "prototypes.lam"
    with pytest.raises(ConfigError) as err:
        parse_prototypes({"method": f"{ME}:SHARED", "kd_weight": 0.1})
    assert err.value.field == "prototypes.kd_weight" and "allowed: lam, method, most_rounds, share" in err.value.message


@pytest.mark.parametrize(
    ("method", "says"),
    [(f"{ME}:NOT_A_SPEC", "must name a chillfl.extend.PrototypeSpec"), (f"{ME}:MISSING", "has no attribute"), ("fedprotox", "unknown value"), ("", "is required")],
)
def test_a_bad_method_is_one_line_naming_the_field(method: str, says: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_prototypes({"method": method})
    assert err.value.field == "prototypes.method" and says in err.value.message


def test_cli_refuses_a_bad_plugin_with_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "run.toml").write_text('[dataset]\nname = "digits"\n\n[prototypes]\nmethod = "' + ME + ':NOT_A_SPEC"\n', encoding="utf-8")
    code = main(["run", "--dry-run", str(tmp_path / "run.toml"), f"out_dir={tmp_path / 'out'}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "prototypes.method" in err[0] and "PrototypeSpec" in err[0]
    assert not (tmp_path / "out").exists()


def test_a_plugin_that_shares_models_refuses_heterogeneous_clients() -> None:
    cfg = load_config(None, {"dataset.name": "digits", "federation.num_clients": 6, "federation.clients_per_round": 2})
    with pytest.raises(ConfigError) as err:
        build_experiment(cfg.with_overrides({"prototypes": {"method": f"{ME}:SHARED"}, "model": MIXED}))
    assert err.value.field == "model.groups"


def test_own_rows_cannot_take_the_protocols_names() -> None:
    with pytest.raises(ValueError, match="protos"):
        ClassRows(torch.zeros(2, 3), torch.zeros(2, dtype=torch.int64), {"protos": torch.zeros(2, 1)})


def test_knowledge_round_trips_and_reads_an_older_checkpoint() -> None:
    k = Knowledge(torch.ones(2, 3), torch.tensor([True, False]), {"soft": torch.eye(2)})
    back = Knowledge.from_state(k.state_dict())
    assert torch.equal(back.protos, k.protos) and torch.equal(back.mask, k.mask) and torch.equal(back.extra["soft"], k.extra["soft"])
    old = Knowledge.from_state({"protos": torch.ones(2, 3), "mask": torch.tensor([True, True]), "soft": None})  # FedProto's, before the seam
    assert old.extra == {} and old.width() == 3 and set(old.context()) == {"protos", "proto_mask"}


def test_average_rows_by_hand() -> None:
    """Class 0: A has 1 sample (mean 1, row 0.2), B has 3 (mean 5, row 0.6): (1 + 15) / 4 = 4 and (0.2 + 1.8) / 4 = 0.5."""
    a = ClassRows(torch.tensor([[1.0]]), torch.tensor([1]), {"r": torch.tensor([[0.2]])})
    b = ClassRows(torch.tensor([[5.0]]), torch.tensor([3]), {"r": torch.tensor([[0.6]])})
    k = average_rows([a, b])
    assert k.protos.item() == 4.0 and k.extra["r"].item() == pytest.approx(0.5) and k.mask.tolist() == [True]
    assert average_rows([a, b], "uniform").protos.item() == 3.0
