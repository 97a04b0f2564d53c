"""``chillfl report``'s group labels.

Groups of different configs that share a run name (``demo`` run at two ``client.lr``, the name kept from the config)
were ``demo [1]`` and ``demo [2]``: they are named by the options that differ among them. A run repeating another's
config and seed (a copy) is a group of its own whose pairing no longer depends on the order the folders were named,
labelled as its first copy's with ``[repeat 1]``. Option labels write values as the configurations table does
(``unset``, ``true``, ``[{name = "decorr"}]``, not ``None``, ``True``, ``({'name': 'decorr'},)``), and lines listing
several groups separate them with "; " (a label holds ", ").
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from chillfl.config import config_from_dict
from chillfl.report.html import Run, group_runs
from test_reportfix_report import page_of, records, write_run


def run(folder: str, seed: int, **config: Any) -> Run:
    """A run of ``config``'s tables as ``chillfl report`` reads its config.toml: through the loader, every section whole
    (a raw ``{"lr": 0.05}`` for ``client`` held that key alone, which no run folder gives the label code)."""
    config.setdefault("name", Path(folder).name)
    return Run(Path(folder), config_from_dict({**config, "seed": seed}), [], {})


def test_groups_sharing_a_name_are_labelled_by_the_options_that_differ() -> None:
    groups = group_runs([run("lr/demo", 0, name="demo", client={"lr": 0.05}), run("lr/demo-2", 0, name="demo", client={"lr": 0.2}),
                         run("lr/demo-3", 1, name="demo", client={"lr": 0.2}), run("lr/other", 0, dataset={"name": "iris"})])
    assert [(g.label, sorted(g.seeds)) for g in groups] == [("demo, client.lr=0.05", [0]), ("demo, client.lr=0.2", [0, 1]), ("other", [0])]


def test_an_option_label_writes_none_as_unset() -> None:
    groups = group_runs([run(f"x-s{s}", s) for s in (0, 1)] + [run(f"y-s{s}", s, eval={"target_accuracy": 0.3}) for s in (0, 1)])
    assert [g.label for g in groups] == ["eval.target_accuracy=unset", "eval.target_accuracy=0.3"]


def test_an_option_label_writes_bools_lists_and_tables_as_toml() -> None:
    """As a reader types them in config.toml (``true``, ``[{name = "decorr"}]``, ``[]``), not as Python spells them
    (``True``, ``({'name': 'decorr'},)``, ``()``: the loader makes a list option a tuple)."""
    nesterov = [run(f"n/demo{s}", 0, name="demo", client={"momentum": 0.9, "nesterov": on}) for s, on in (("", True), ("-2", False))]
    assert [g.label for g in group_runs(nesterov)] == ["demo, client.nesterov=true", "demo, client.nesterov=false"]
    terms = [run("t/demo", 0, name="demo", objective={"terms": [{"name": "decorr"}]}), run("t/demo-2", 0, name="demo")]
    assert [g.label for g in group_runs(terms)] == ['demo, objective.terms=[{name = "decorr"}]', "demo, objective.terms=[]"]


def test_a_repeated_run_pairs_the_same_whatever_the_order_named() -> None:
    """``runs/a`` (seed 0), ``runs/a-2`` (seed 1) and a copy of ``a`` (seed 0): of ``a`` and its copy, the one in the
    folder holding fewer of these runs is the repeat (``elsewhere/a``), within one folder the later by name (``runs/a``
    beside ``runs/0-copy``), named as such whichever order the folders come in (the pairing followed that order: the
    seed 0 that came first joined ``a-2``, and the two groups read ``a [1]``, ``a [2]``)."""
    a, a2 = run("runs/a", 0, name="a"), run("runs/a-2", 1, name="a")
    for copy in (run("elsewhere/a", 0, name="a"), run("runs/0-copy", 0, name="a")):
        for order in ([a, a2, copy], [copy, a, a2], [a2, copy, a]):
            groups = group_runs(order)
            assert sorted((g.label, sorted(str(r.folder) for r in g.runs)) for g in groups) == [
                ("a", sorted(["runs/a", "runs/a-2"] if copy.folder.parent.name == "elsewhere" else ["runs/0-copy", "runs/a-2"])),
                ("a [repeat 1]", ["runs/a"] if copy.folder.parent.name == "runs" else ["elsewhere/a"])], (copy.folder, order)


def test_the_groups_line_and_a_shared_partition_caption_separate_labels_with_semicolons(tmp_path: Path) -> None:
    gone = str(tmp_path / "gone.json")  # both groups share one partition, not drawable: one caption names both
    common = {"name": "demo", "partition": {"name": "file", "from": gone}, "federation": {"num_clients": 4, "clients_per_round": 2, "rounds": 1}}
    first = write_run(tmp_path / "runs" / "demo", records(1.0), client={"lr": 0.05, "epochs": 1}, **common)
    write_run(tmp_path / "runs" / "demo-2", records(1.0), client={"lr": 0.2, "epochs": 2}, **common)
    from html import unescape

    from chillfl.report.html import render

    page = unescape(render([first.parent], models=False, partitions=True))
    labels = "demo, client.epochs=1, client.lr=0.05; demo, client.epochs=2, client.lr=0.2"
    assert re.findall(r'<p id="groups">(.*?)</p>', page) == [f"groups: {labels}"]
    assert f"{labels}: partition not drawn:" in page.split("<h2>Partitions</h2>")[1]
    assert "[1]" not in page_of(first.parent)
