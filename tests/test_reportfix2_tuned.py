"""A tuned comparison's report marks the tuning point each variant selected (its ``table.json``'s ``tuned``, the point
the comparison's table reports): every point's scores and results rows were shown alike. Folders written by hand."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

from chillfl.config import RunConfig, load_config
from chillfl.report.html import _markdown_html, render, selected_points
from chillfl.run_names import RecordedVariant, run_labels
from chillfl.storage.jsonl import strict
from chillfl.storage.results import summarize, to_toml

LRS = [0.01, 0.1]
TABLE_MD = """tuned per variant on the validation split
| variant | tuned | accuracy % |
|---|---|---|
| A | client.lr=0.01 | 50.00 ± 0.00 |
| B | client.lr=0.1 | 60.00 ± 0.00 |

validation accuracy % at every tuning point (final round, mean over seeds; diverged = at one seed or more)
| variant | client.lr=0.01 | client.lr=0.1 |
|---|---|---|
| A | 50.00 | 40.00 |
| B | 30.00 | 60.00 |
"""


def tuned_comparison(folder: Path) -> Path:
    """Variants A (selected lr 0.01, not the grid's last point) and B (selected 0.1), one seed, lr 0.01 and 0.1 each."""
    folder.mkdir()
    variants = [{"label": label, "short": None, "tune": {}} for label in ("A", "B")]
    (folder / "sweep.json").write_text(json.dumps({"options": {"seeds": [0], "tune": {"client.lr": LRS}}, "variants": variants}))
    (folder / "table.json").write_text(json.dumps([{"variant": "A", "tuned": {"client.lr": 0.01}, "validation_scores": [0.5, 0.4]},
                                                   {"variant": "B", "tuned": {"client.lr": 0.1}, "validation_scores": [0.3, 0.6]}]))
    (folder / "table.md").write_text(TABLE_MD)
    names = run_labels([RecordedVariant("A", None, {}), RecordedVariant("B", None, {})], {"client.lr": LRS}, [0])
    for name, label in names.items():  # e.g. A-lr0.01-s0 -> "A, client.lr=0.01"
        run = folder / name
        run.mkdir()
        temperature = {"policy": "fixed", "value": 1.0 if label.startswith("A") else 0.5}
        lr = float(label.rsplit("=", 1)[1])
        (run / "config.toml").write_text(to_toml(RunConfig(name=name, seed=0, temperature=temperature, client={"lr": lr}).to_dict()))
        recs: list[dict[str, Any]] = [{"round": 1, "global_acc": 0.5, "global_loss": 1.0}]
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
        (run / "summary.json").write_text(json.dumps(strict(summarize(recs))))
    return folder


def test_results_rows_mark_each_variants_selected_point(tmp_path: Path) -> None:
    page = html.unescape(render([tuned_comparison(tmp_path / "c-compare")], models=False, partitions=False))
    table = page.split("<h2>Results</h2>")[1].split("</table>")[0]
    heads = re.findall(r"<th[^>]*>(.*?)</th>", table)
    column = heads.index("tuning point")
    marks = {re.sub("<[^>]+>", "", cells[0]): re.sub("<[^>]+>", "", cells[column])
             for row in re.findall(r"<tr[^>]*>(.*?)</tr>", table)[1:] for cells in [re.findall(r"<td[^>]*>(.*?)</td>", row)]}
    assert marks == {"A, client.lr=0.01": "selected", "A, client.lr=0.1": "-", "B, client.lr=0.01": "-", "B, client.lr=0.1": "selected"}
    every = page.split("at every tuning point")[1].split("</table>")[0]  # the validation table: the selected score marked
    assert re.findall(r'<td class="l selected"><strong>(.*?)</strong>', every) == ["50.00", "60.00"]


def test_an_untuned_comparison_has_no_tuning_column(tmp_path: Path) -> None:
    folder = tuned_comparison(tmp_path / "c-compare")
    (folder / "table.json").write_text(json.dumps([{"variant": "A"}, {"variant": "B"}]))
    assert selected_points(folder) is None
    page = render([folder], models=False, partitions=False)
    assert "<th>tuning point</th>" not in page and "(selected)" not in page


def test_a_variants_own_grid_point_is_its_row(tmp_path: Path) -> None:
    """FedProx's own ``algorithm.mu`` grid: its rows in the validation table are ``FedProx, algorithm.mu=...``."""
    (tmp_path / "sweep.json").write_text(json.dumps({"options": {"seeds": [0], "tune": {"client.lr": LRS}},
                                                     "variants": [{"label": "FedProx", "short": None, "tune": {"algorithm.mu": [0.0, 0.1]}}]}))
    (tmp_path / "table.json").write_text(json.dumps([{"variant": "FedProx", "tuned": {"client.lr": 0.1, "algorithm.mu": 0.0}}]))
    selection = selected_points(tmp_path)
    assert selection is not None
    assert selection.labels == {"FedProx, client.lr=0.1, algorithm.mu=0.0"}
    assert selection.cells == {("FedProx, algorithm.mu=0.0", "client.lr=0.1")}
    md = ("validation accuracy % at every tuning point\n| variant | client.lr=0.01 | client.lr=0.1 |\n|---|---|---|\n"
          "| FedProx, algorithm.mu=0.0 | 10.00 | 70.00 |\n| FedProx, algorithm.mu=0.1 | 20.00 | 65.00 |\n")
    out = "".join(_markdown_html(md, selection.cells))
    assert re.findall(r"<strong>(.*?)</strong>", out) == ["70.00"]


def test_the_results_tables_epsilon_caveat_says_the_selection_is_not_accounted(tmp_path: Path) -> None:
    """The page's own caveat under the results table lacked the sentence the comparison's table has: each of the 2 tuning
    points is a private training on the same data, and the selected row's epsilon does not account the choice."""
    folder = tuned_comparison(tmp_path / "c-compare")
    for run in folder.iterdir():
        if run.is_dir():
            config = load_config(run / "config.toml", {"privacy.mechanism": "dp-fedavg"})
            (run / "config.toml").write_text(to_toml(config.to_dict()))
            recs = [{"round": 1, "global_acc": 0.5, "global_loss": 1.0, "epsilon": 2.0}]
            (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
            (run / "summary.json").write_text(json.dumps(strict(summarize(recs))))
    assert selected_points(folder).points == {"A, client.lr=0.01": 2, "B, client.lr=0.1": 2}  # type: ignore[union-attr]
    page = html.unescape(render([folder], models=False, partitions=False))
    caveat = re.findall(r'<p class="muted" id="epsilon-caveat">(.*?)</p>', page)
    assert len(caveat) == 1, caveat
    assert "'A, client.lr=0.01', 'B, client.lr=0.1': epsilon is one run's; the selection over 2 tuning points is not accounted" in caveat[0]
