"""A comparison resumed with ``--force`` across an executor move to another float path (``vectorized`` to ``sequential``,
or back) said nothing, while a run's resume warns that the rest is not bitwise what an uninterrupted run gives. Its
resume now says the same line, the comparison's start for the checkpoint (note105 section 5)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl import runner
from chillfl.cli import main
from test_sweep_resume import _interrupt

ARGS = ["--grid", "client.lr=0.05,0.1", "-q", "name=c", "device=cpu", "dataset.name=digits", "model.name=mlp", "model.hidden=[8]",
        "federation.num_clients=4", "federation.clients_per_round=2", "federation.rounds=2", "checkpoint.every=1", "eval.clients=none"]


@pytest.mark.parametrize(("before", "after"), [("sequential", "vectorized"), ("vectorized", "sequential")])
def test_a_forced_comparison_resume_across_float_paths_warns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                                            before: str, after: str) -> None:
    monkeypatch.setattr(runner, "_plots", lambda *args: None)
    _interrupt(monkeypatch, run=1, after_round=1)  # the second run is still to run: on the new executor
    (tmp_path / "c.toml").write_text("")
    assert main(["compare", str(tmp_path / "c.toml"), *ARGS, f"out_dir={tmp_path}", f"executor={before}"]) == 130
    config = tmp_path / "c-compare.partial" / "config.toml"
    text = config.read_text()
    assert f'executor = "{before}"' in text
    config.write_text(text.replace(f'executor = "{before}"', f'executor = "{after}"'))
    capsys.readouterr()
    assert main(["resume", str(config.parent), "--force", "-q"]) == 0
    err = capsys.readouterr().err
    assert (f"config.toml: executor {before!r} -> {after!r} since the comparison started: another float path, not bitwise what an "
            "uninterrupted run gives") in err, err
