"""``chillfl report``'s grouping: ``strict`` changes no result (it only turns a warning into a stop), so runs differing
only in it are seeds of one group (they were two groups); a run that ``strict`` stopped still says so in its group's row."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from chillfl.config import RunConfig
from chillfl.report.html import Run, group_runs, render
from chillfl.storage.jsonl import encode_record, strict as strict_json
from chillfl.storage.results import summarize, to_toml


def run(seed: int, strict: bool) -> Run:
    return Run(Path(f"tiny-s{seed}"), RunConfig(name=f"tiny-s{seed}", seed=seed, strict=strict), [], {})


def test_strict_does_not_split_seeds() -> None:
    groups = group_runs([run(0, strict=False), run(1, strict=True)])
    assert [sorted(g.seeds) for g in groups] == [[0, 1]]


def test_other_settings_still_split_groups() -> None:
    """Only ``strict`` joined: a different temperature is still another group."""
    other = Run(Path("t"), RunConfig(name="t", seed=1, temperature={"policy": "fixed", "value": 0.5}), [], {})
    assert len(group_runs([run(0, strict=True), other])) == 2


def write_run(folder: Path, recs: list[dict[str, Any]], summary: bool, **config: Any) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.toml").write_text(to_toml(RunConfig(**{"name": folder.name.split(".")[0], **config}).to_dict()), encoding="utf-8")
    (folder / "metrics.jsonl").write_text("".join(json.dumps(encode_record(r)) + "\n" for r in recs), encoding="utf-8")
    if summary:
        (folder / "summary.json").write_text(json.dumps(strict_json(summarize(recs))), encoding="utf-8")
    return folder


def test_a_run_strict_stopped_is_named_in_its_group(tmp_path: Path) -> None:
    """Seed 0 ran to the end without ``strict``; seed 1 (``strict = true``) stopped at round 2 on an exploding loss."""
    recs = [{"round": r, "global_acc": 0.5, "global_loss": 1.0} for r in (1, 2, 3)]
    done = write_run(tmp_path / "tiny-s0", recs, True, seed=0, federation={"rounds": 3})
    stopped = write_run(tmp_path / "tiny-s1.failed", recs[:1], False, seed=1, strict=True, federation={"rounds": 3})
    (stopped / "failure.json").write_text(json.dumps({"round": 2, "what": "training loss 1e+05 >= 1e4 x round 1's"}), encoding="utf-8")
    page = html.unescape(render([done, stopped], models=False, partitions=False))
    table = page.split("<h2>Results</h2>")[1].split("</table>")[0]
    rows = table.split("<tr>")[2:]
    assert len(rows) == 1 and "<td>2</td>" in rows[0]  # one group of both seeds
    assert "tiny-s1: diverged (at round 2), strict = true, 1/3 rounds" in rows[0]
