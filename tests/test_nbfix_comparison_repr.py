"""``chillfl.Comparison`` in a notebook: a one-line repr (not every record and tensor) and its table as Markdown."""

from __future__ import annotations

import chillfl

TINY = {"dataset": {"name": "digits"}, "model": {"name": "mlp"}, "federation": {"num_clients": 4, "rounds": 2}, "eval": {"client_split_size": 20}}


def test_a_comparison_shows_one_short_line_and_renders_its_table() -> None:
    comparison = chillfl.compare(config=TINY, grid={"algorithm.name": ["fedavg", "fedprox"]}, seeds=[0, 1], write=False, progress=False)
    shown = repr(comparison)
    assert shown == ("Comparison(variants=['algorithm.name=fedavg', 'algorithm.name=fedprox'], seeds=[0, 1], runs=4, failures=0, "
                     "folder=None)")
    assert "\n" not in shown and "tensor(" not in shown
    markdown = comparison._repr_markdown_()
    assert markdown is not None
    rows = [line for line in comparison.table.splitlines() if line.startswith("|")]
    assert len(rows) == 4 and "\n".join(rows) in markdown  # header, rule, two variants: one block
    lines = markdown.splitlines()
    above = lines.index(rows[0]) - 1
    assert above == -1 or lines[above] == ""  # the target line above does not swallow the header row
