"""``--dry-run`` ("nothing is run") trained FedMD's server model on the public set (report-fuzz finding 4)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import chillfl.protocols.softlabels.build as build
from test_fuzzfix_options import run


def test_a_dry_run_does_not_pretrain_the_server_model(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    def trained(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a dry run trained the server model")

    monkeypatch.setattr(build, "train_client", trained)
    code, err = run(tmp_path, capsys, "distillation.method=fedmd", "distillation.public_size=200", "distillation.subset_size=100")
    assert code == 0, err


def test_the_check_is_scoped_to_the_dry_run() -> None:
    with build.only_checking():
        assert build._CHECKING.get()
    assert not build._CHECKING.get()


def test_a_comparisons_dry_run_does_not_pretrain_the_server_model(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """`chillfl compare --dry-run` built each variant's protocol with its pretraining (sweeps.run), after `run --dry-run` stopped."""
    from chillfl.cli import main
    from test_fuzzfix_options import BASE

    def trained(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a comparison's dry run trained the server model")

    monkeypatch.setattr(build, "train_client", trained)
    path = tmp_path / "base.toml"
    path.write_text(BASE.format(out=tmp_path / "out"), encoding="utf-8")
    code = main(["compare", str(path), "-q", "--dry-run", "--grid", "client.lr=0.05,0.1", "distillation.method=fedmd",
                 "distillation.public_size=200", "distillation.subset_size=100"])
    assert code == 0, capsys.readouterr().err
