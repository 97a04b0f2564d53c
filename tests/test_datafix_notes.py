"""``dirichlet`` with ``scheme = "client"`` leaves many training rows to no client (each client takes
floor(|D_k| p_k) of class k): a run says how many its clients hold, once, in a note on stderr."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import main
from chillfl.config import load_config
from chillfl.experiment import build_data, unused_rows_note

BASE = 'name = "d"\nseed = 0\n[dataset]\nname = "digits"\n[model]\nname = "mlp"\n[federation]\nnum_clients = 5\nrounds = 1\n'


def _config(tmp_path: Path) -> Path:
    path = tmp_path / "exp.toml"
    path.write_text(BASE)
    return path


def _note(tmp_path: Path, **partition: object) -> str | None:
    config = load_config(_config(tmp_path), {"partition": dict(partition)})
    return unused_rows_note(config, build_data(config))


def test_client_scheme_notes_the_rows_its_clients_hold(tmp_path: Path) -> None:
    config = load_config(_config(tmp_path), {"partition": {"name": "dirichlet", "scheme": "client"}})
    data = build_data(config)
    held, rows = sum(len(ix) for ix in data.train_indices), len(data.dataset.y_train)
    assert held < 0.6 * rows  # 5 clients of 10 classes: about half
    note = unused_rows_note(config, data)
    assert note is not None and note.startswith(f"note: the clients hold {held} of the {rows} training rows ({held / rows:.0%})")
    assert 'partition.scheme = "client"' in note


@pytest.mark.parametrize("partition", [{"name": "dirichlet"}, {"name": "dirichlet_balanced", "frac": 0.3}, {"name": "shards", "shard_size": 50}])
def test_no_note_where_every_row_is_handed_out_or_the_drop_was_asked_for(tmp_path: Path, partition: dict[str, object]) -> None:
    assert _note(tmp_path, **partition) is None


def test_no_note_when_the_clients_hold_most_rows(tmp_path: Path) -> None:
    # 20 clients over 10 classes over-subscribe every class: over 90% of the rows are handed out
    config = load_config(_config(tmp_path), {"partition": {"name": "dirichlet", "scheme": "client", "alpha": 5.0}, "federation": {"num_clients": 20}})
    data = build_data(config)
    assert sum(len(ix) for ix in data.train_indices) >= 0.9 * len(data.dataset.y_train)
    assert unused_rows_note(config, data) is None


def test_a_dry_run_says_it_once_on_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(_config(tmp_path)), "--dry-run", "partition.scheme=client"]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if "training rows" in line]
    assert len(err) == 1 and err[0].startswith("chillfl: note: the clients hold ")


def test_data_show_says_it_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``chillfl data show`` is where a split is looked at: it says what the run would."""
    assert main(["data", "show", str(_config(tmp_path)), "partition.scheme=client", "-o", str(tmp_path / "h.png")]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if "training rows" in line]
    assert len(err) == 1 and err[0].startswith("chillfl: note: the clients hold ")
