"""The dry run's note that an MLflow store which is no server was not checked (opening it would create it) is a note
like the dry run's others: shown under ``-q`` (it was an info line, which ``-q`` hid, so ``--dry-run -q`` said
nothing of the store it did not check); ``-qq`` (errors only) hides it."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import main
from test_sinkfix_store import _config_file

NOTE = "is not checked on a dry run (opening it would create it); the run checks it before its folder is made"


@pytest.mark.parametrize("quiet, shown", [("-q", True), ("-qq", False)])
def test_the_unchecked_store_note_survives_one_q(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                                 quiet: str, shown: bool) -> None:
    pytest.importorskip("mlflow")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    db = tmp_path / "store" / "mlflow.db"
    assert main(["run", str(_config_file(tmp_path, "sq", f"sqlite:///{db}")), "--dry-run", quiet]) == 0
    err = capsys.readouterr().err
    assert (NOTE in err and f"sqlite:///{db}" in err) is shown
    assert not db.exists()
