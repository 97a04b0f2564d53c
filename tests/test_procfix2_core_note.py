"""The note for more threads than cores says "the 1 core" (it said "the 1 cores" to a job given one CPU)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl import experiment
from chillfl.config import load_config

ONE_RUN = """[dataset]
name = "digits"
[federation]
num_clients = 4
rounds = 1
clients_per_round = 2
"""


@pytest.mark.parametrize(("cores", "said"), [(1, "the 1 core this process may use"), (3, "the 3 cores this process may use")])
def test_the_note_counts_cores_in_good_english(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cores: int, said: str) -> None:
    monkeypatch.setattr(experiment, "usable_cores", lambda: cores)
    (tmp_path / "q.toml").write_text("threads = 4\n" + ONE_RUN)
    note = experiment.oversubscribed_threads_note(load_config(tmp_path / "q.toml"))
    assert note is not None and f"threads = 4 is more than {said}: " in note and f"or at most {cores}" in note
