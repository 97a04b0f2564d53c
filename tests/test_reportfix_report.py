"""``chillfl report``'s numbers and notes, on run folders written by hand (no training: fast).

Non-finite final values are shown as such, a ``.partial`` folder with a ``summary.json`` says where it stopped,
settings that change nothing do not split seeds into groups, an unfinished comparison names its missing runs,
private runs given one by one get the epsilon caveat, and a garbled ``metrics.jsonl`` line is named by file and line.
"""

from __future__ import annotations

import html
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from chillfl.cli import main
from chillfl.config import RunConfig
from chillfl.paths import shell_path
from chillfl.report.html import Group, Run, _metrics_row, group_runs, load_run, render
from chillfl.storage.jsonl import encode_record, strict
from chillfl.storage.results import summarize, to_toml

INF = math.inf


def records(*losses: float, acc: float = 0.5) -> list[dict[str, Any]]:
    """One record a round, with these global test losses (the last round's accuracy ``acc``)."""
    return [{"round": i + 1, "global_acc": acc, "global_loss": loss} for i, loss in enumerate(losses)]


def write_run(folder: Path, recs: list[dict[str, Any]], summary: bool = True, **config: Any) -> Path:
    """A run folder as ``chillfl run`` leaves it: config.toml, metrics.jsonl (non-finite values spelled) and summary.json."""
    folder.mkdir(parents=True)
    (folder / "config.toml").write_text(to_toml(RunConfig(**{"name": folder.name.split(".")[0], **config}).to_dict()), encoding="utf-8")
    (folder / "metrics.jsonl").write_text("".join(json.dumps(encode_record(r)) + "\n" for r in recs), encoding="utf-8")
    if summary:
        (folder / "summary.json").write_text(json.dumps(strict(summarize(recs))), encoding="utf-8")
    return folder


def results_table(page: str) -> str:
    return html.unescape(page.split("<h2>Results</h2>")[1].split("</table>")[0])


def loss_cells(page: str) -> list[str]:
    """The "final loss" cell of each results row."""
    table = results_table(page)
    heads = re.findall(r"<th[^>]*>(.*?)</th>", table)
    column = heads.index("final loss")
    return [re.findall(r"<td[^>]*>(.*?)</td>", row)[column] for row in re.findall(r"<tr>(.*?)</tr>", table)[1:]]


def page_of(*folders: Path) -> str:
    return html.unescape(render(list(folders), models=False, partitions=False))


def test_a_non_finite_final_loss_is_shown_as_such(tmp_path: Path) -> None:
    """summary.json writes an overflowed final loss as null; the report read it as "not measured": a dash for one run,
    and in a group of seeds the other seed's loss alone, with no mark, while "runs" counted both."""
    finite = write_run(tmp_path / "out" / "tiny", records(2.0, 1.5), seed=0)
    overflow = write_run(tmp_path / "out" / "tiny-2", records(2.0, INF), seed=1)
    assert json.loads((overflow / "summary.json").read_text())["final_global_loss"] is None  # as a run writes it
    assert loss_cells(page_of(overflow)) == ["inf"]
    assert loss_cells(page_of(tmp_path / "out")) == ["1.5000 (inf in 1 of 2 runs, left out)"]
    assert loss_cells(page_of(finite)) == ["1.5000"]  # a finite one as before


def test_non_finite_cells_say_how_many_runs() -> None:
    def run(seed: int, loss: float | None) -> Run:
        return Run(Path(f"r{seed}"), RunConfig(seed=seed), records(1.0, INF if loss is None else loss), {"final_global_loss": loss})

    both = _metrics_row(Group("g", [run(0, None), run(1, None)]))
    assert "<td>inf (2 of 2 runs)</td>" in both
    mixed = _metrics_row(Group("g", [run(0, 1.0), run(1, 3.0), run(2, None)]))
    assert "<td>2.0000 ± 1.4142 (inf in 1 of 3 runs, left out)</td>" in mixed  # mean of 1 and 3, sample std sqrt(2)


def test_a_partial_run_with_a_summary_says_it_stopped(tmp_path: Path) -> None:
    """A run killed after writing summary.json, before its folder's rename, was reported as a finished one."""
    partial = write_run(tmp_path / "tiny.partial", records(2.0, 1.5, 1.2), federation={"rounds": 3})
    assert (partial / "summary.json").is_file()
    assert ("tiny (tiny: stopped (after its last round, before its folder was complete (a final write failed or was cut short; no checkpoint to "
            "resume from): run its config.toml again for a complete folder), 3/3 rounds)") in results_table(page_of(partial))


def test_checkpoint_and_log_settings_do_not_split_seeds() -> None:
    """Metrics do not depend on checkpoint.every or log.*: seeds differing in them were two groups of one run each."""
    def run(seed: int, **tables: Any) -> Run:
        return Run(Path(f"tiny-{seed}"), RunConfig(name="tiny", seed=seed, **tables), [], {})

    from chillfl.config import CheckpointConfig, LogConfig

    groups = group_runs([run(0, checkpoint=CheckpointConfig(every=2)), run(1, checkpoint=CheckpointConfig(every=5), log=LogConfig(per_client=True))])
    assert [sorted(g.seeds) for g in groups] == [[0, 1]]


def test_an_unfinished_comparison_names_its_missing_runs(tmp_path: Path) -> None:
    """A NAME-compare.partial of 4 planned runs with 1 finished was "1 run in 1 group", nothing said of the other 3."""
    folder = tmp_path / "cmp-compare.partial"
    write_run(folder / "T1-s0", records(2.0, 1.5), name="T1-s0")
    write_run(folder / "T0.25-s0.partial", records(2.0), summary=False, name="T0.25-s0", seed=0)
    variants = [{"label": label, "short": None, "tune": {}} for label in ("T1", "T0.25")]
    (folder / "sweep.json").write_text(json.dumps({"options": {"seeds": [0, 1], "tune": {}}, "variants": variants}), encoding="utf-8")
    (folder / "config.toml").write_text(to_toml(RunConfig(name="cmp").to_dict()), encoding="utf-8")
    page = page_of(folder)
    missing = re.findall(r'<p id="missing">(.*?)</p>', page)
    assert len(missing) == 1 and "3 of its 4 planned runs are not on this page" in missing[0], missing
    assert "T1-s1 (not started)" in missing[0] and "T0.25-s1 (not started)" in missing[0]
    assert "T0.25-s0 (stopped (before its first checkpoint: runs again))" in missing[0]
    assert f"chillfl resume {shell_path(folder)} runs them" in missing[0]


def test_private_runs_given_one_by_one_get_the_epsilon_caveat(tmp_path: Path) -> None:
    """Client-level (dp-fedavg) and sample-level (dp-sgd) epsilons side by side: the caveat that they do not compare
    was only in a named comparison's own table."""
    recs = [{"round": 1, "global_acc": 0.5, "global_loss": 1.0, "epsilon": 3.0}]
    client = write_run(tmp_path / "client", recs, privacy={"mechanism": "dp-fedavg"})
    sample = write_run(tmp_path / "sample", recs, privacy={"mechanism": "dp-sgd"})
    page = page_of(client, sample)
    caveat = re.findall(r'<p class="muted" id="epsilon-caveat">(.*?)</p>', page)
    assert len(caveat) == 1 and "dp-fedavg" in caveat[0] and "dp-sgd" in caveat[0] and "do not compare epsilons" in caveat[0]
    assert 'id="epsilon-caveat"' not in page_of(write_run(tmp_path / "plain", records(1.0)))  # no epsilon column, no caveat
    folder = tmp_path / "cmp-compare"  # a named comparison whose own table says it already: once on the page
    folder.mkdir()
    for run in (client, sample):
        run.rename(folder / run.name)
    (folder / "table.md").write_text(f"| variant |\n|---|\n| client |\n{caveat[0]}\n", encoding="utf-8")
    assert page_of(folder).count(caveat[0]) == 1


def test_a_garbled_line_names_the_file_and_its_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = write_run(tmp_path / "tiny", records(2.0, 1.5, 1.2))
    lines = (run / "metrics.jsonl").read_text().splitlines(keepends=True)
    (run / "metrics.jsonl").write_text(lines[0] + "{not json\n" + "".join(lines[1:]))
    assert main(["report", str(run), "--no-models", "--no-partitions", "-o", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"RUN_DIR: {run}: unreadable result files: metrics.jsonl line 2: not JSON" in err, err
    assert err.rstrip().endswith("'{not json'")
    assert not (tmp_path / "r.html").exists()
    assert load_run(write_run(tmp_path / "fine", records(1.0))).records  # a whole file reads as before
