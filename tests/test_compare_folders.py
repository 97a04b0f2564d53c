"""What a comparison's folder records for a reader of it, and how an older folder is read back.

* A folder an older chillfl wrote, whose loss terms are bare names (``terms = ["ntd"]``, before every term was recorded
  with its options as a table), resumes with its finished runs read back: equal meaning matches.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

import chillfl.sweeps.run as sweep  # where the comparison's runs start
from chillfl.cli import main

CONFIG = """name = "t"
dataset = { name = "digits" }
model = { name = "mlp", hidden = [16] }
federation = { num_clients = 3, rounds = 1 }
eval = { clients = "none" }
objective = { terms = ["ntd"] }
[variants.plain]
[variants.decorr]
objective = { terms = ["ntd", { name = "decorr", beta = 0.1 }] }
"""


def _bare_terms(path: Path) -> None:
    """``path`` (a config.toml) with every loss term written as its bare name, as an older chillfl wrote it."""
    text = path.read_text(encoding="utf-8")
    bare = re.sub(r'\{ name = "(\w+)"[^}]*\}', r'"\1"', text)
    assert bare != text or "{ name" not in text
    path.write_text(bare, encoding="utf-8")


def test_an_older_comparison_folder_with_bare_term_names_resumes_reading_its_finished_runs_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    config = tmp_path / "t.toml"
    config.write_text(f'out_dir = "{tmp_path / "out"}"\n' + CONFIG, encoding="utf-8")
    assert main(["compare", str(config), "-q"]) == 0
    done = tmp_path / "out" / "t-compare"
    table = (done / "table.md").read_bytes()
    assert '{ name = "ntd", beta = 1.0' in (done / "plain" / "config.toml").read_text()  # recorded as tables now
    partial = done.rename(done.with_name("t-compare.partial"))  # as an older chillfl left it, interrupted before its last run
    for name in ("table.md", "table.json", "curves.png", "accuracy_vs_bytes.png"):
        (partial / name).unlink()
    shutil.rmtree(partial / "decorr")
    for path in (partial / "config.toml", partial / "plain" / "config.toml"):
        _bare_terms(path)
    assert "{ name" not in (partial / "config.toml").read_text() + (partial / "plain" / "config.toml").read_text()
    record = json.loads((partial / "sweep.json").read_text())
    record["config_sha256"] = hashlib.sha256((partial / "config.toml").read_bytes()).hexdigest()  # as that chillfl recorded its config.toml
    record["variants"][1]["overrides"]["objective"]["terms"] = ["ntd", "decorr"]
    (partial / "sweep.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    capsys.readouterr()

    ran: list[str] = []
    real = sweep.run_experiment

    def run_experiment(cfg: Any, **kw: Any) -> Any:
        ran.append(cfg.name)
        return real(cfg, **kw)

    monkeypatch.setattr(sweep, "run_experiment", run_experiment)
    assert main(["resume", str(partial), "-q"]) == 0
    assert ran == ["decorr"]  # plain, finished before, is read back
    assert (done / "table.md").read_bytes() == table


def test_variants_whose_labels_name_one_folder_are_one_line(tmp_path: Path) -> None:
    """At one seed "A" and "A!" both named their run's folder A, short and long: two runs wrote one folder. Refused on variants
    (at two seeds the long names differ, A_seed0 and A__seed0, and the comparison runs)."""
    from chillfl.config import load_config
    from chillfl.errors import ConfigError
    from chillfl.sweeps.plan import CompareOptions, plan_runs

    config = tmp_path / "c.toml"
    config.write_text('name = "c"\n[variants."A"]\nclient = { lr = 0.05 }\n[variants."A!"]\nclient = { lr = 0.1 }\n')
    with pytest.raises(ConfigError) as err:
        plan_runs(load_config(config), [], CompareOptions(seeds=[0]))
    assert err.value.field == "variants" and str(err.value).startswith("variants: 'A', 'A!' name their runs' folders alike ('A':")
    assert sorted(c.config.name for c in plan_runs(load_config(config), [], CompareOptions(seeds=[0, 1])).cells) == ["A__seed0", "A__seed1", "A_seed0", "A_seed1"]
