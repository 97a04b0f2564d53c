"""Every learning-rate-like float of the config refuses inf, -inf and NaN in one line naming it (no option gives inf a
meaning): a regression guard over the fields a report named (``client.lr=inf --dry-run`` was said to be accepted; the
coercion of every ``float`` option, :func:`chillfl.options.coerce`, refuses it)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from chillfl.api import make_config
from chillfl.cli import main
from chillfl.errors import ConfigError

FIELDS = [
    ({}, "client.lr"), ({}, "client.lr_decay"), ({}, "client.lr_min"), ({}, "client.lr_gamma"), ({}, "client.momentum"),
    ({}, "client.weight_decay"), ({}, "client.clip_norm"), ({"client.optimizer": "adam"}, "client.beta1"), ({"client.optimizer": "adam"}, "client.eps"),
    ({"algorithm.name": "fedadam"}, "algorithm.server_lr"), ({"algorithm.name": "fedavgm"}, "algorithm.server_lr"),
    ({"algorithm.name": "fedavg_ft"}, "algorithm.finetune_lr"),
]


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan], ids=["inf", "-inf", "nan"])
@pytest.mark.parametrize(("setup", "field"), FIELDS, ids=[f"{s.get('algorithm.name', '')}{f}" for s, f in FIELDS])
def test_nonfinite_is_refused_naming_the_field(setup: dict[str, object], field: str, value: float) -> None:
    with pytest.raises(ConfigError) as err:
        make_config(None, {**setup, field: value})
    assert err.value.field == field and "finite" in err.value.message


@pytest.mark.parametrize("text", ["inf", "-inf", "nan"])
def test_command_line_ends_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str) -> None:
    assert main(["run", f"client.lr={text}", f"out_dir={tmp_path}", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"chillfl: error: client.lr: must be a finite number, got {text}"]
