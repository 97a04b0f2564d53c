"""What the commands' --help says they write, the analyses' figures' width over many runs, reproduce's where-line."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from chillfl.cli import main


def _help(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *words: str) -> str:
    monkeypatch.setenv("COLUMNS", "1000")  # no wrapping: a file name is not split at its hyphen
    with pytest.raises(SystemExit) as exc:
        main([*words, "--help"])
    assert exc.value.code == 0
    return " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize(("words", "named"), [
    (("run",), ["results/NAME/", "config.toml", "metrics.jsonl", "summary.json", "accuracy_loss.png", "model.safetensors", "partition.json",
                "NAME.partial/", "checkpoint.safetensors"]),
    (("compare",), ["NAME-compare/", "table.md", "table.json", "curves.png", "differences.png", "accuracy_vs_bytes.png", "config.toml", "sweep.json",
                    "one run folder per run", "NAME-compare.partial/"]),
    (("resume",), ["NAME.partial/", "rename the folder NAME/ when the run completes", "NAME-compare.partial/"]),
    (("reproduce",), ["reproduce-PAPER.md", "reproduce-PAPER.png", "NAME-compare/", "results/PAPER/"]),
    (("analyze", "calibration"), ["calibration.json", "reliability.png", "<first RUN_DIR>/analysis/"]),
    (("analyze", "cka"), ["cka.json", "cka.png"]),
    (("analyze", "aggregation-accuracy"), ["aggregation-accuracy.json", "aggregation-accuracy.png"]),
    (("analyze", "aggregation-entropy"), ["aggregation-entropy.json", "aggregation-entropy.png"]),
    (("analyze", "grad-norms"), ["grad-norms.json", "grad-norms.png"]),
    (("analyze", "soft-label-entropy"), ["entropy_vs_temperature.png", "entropy_vs_beta.png"]),
    (("analyze", "cache-ratio"), ["cache_ratio.png"]),
    (("analyze", "temperature-sweep"), ["<out_dir>/<name>-temperature-sweep/", "out_dir=PATH"]),
    (("analyze", "scarlet-deficit"), ["it writes no file", "stdout"]),
])
def test_help_names_what_the_command_writes(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, words: tuple[str, ...], named: list[str]) -> None:
    text = _help(capsys, monkeypatch, *words)
    assert [n for n in named if n not in text] == []


def _png_size(path: Path) -> tuple[int, int]:
    width, height = struct.unpack(">II", path.read_bytes()[16:24])
    return width, height


def test_per_run_figures_wrap_into_rows_of_bounded_width(tmp_path: Path) -> None:
    """27 runs: the reliability diagrams were one row ~10,700 px wide; Fig. 9 and Fig. 10 grew the same way."""
    from chillfl.analysis.aggregation import plot_accuracy_change, plot_entropy_change
    from chillfl.analysis.calibration import plot_reliability
    MAX_COLUMNS, RUNS_PER_ROW = 5, 10  # chillfl.analysis.layout's

    n = 27
    rel = {"edges": [0.0, 0.5, 1.0], "count": [3, 5], "confidence": [0.3, 0.8], "accuracy": [0.2, 0.9]}
    cal = {"runs": {f"run-{i}": {"reliability": rel, "binning": "width", "bins": 2, "temperature": 1.0, "ece": 0.1, "nll": 0.5, "brier": 0.2}
                    for i in range(n)}}
    plot_reliability(cal, tmp_path / "rel.png")
    width, height = _png_size(tmp_path / "rel.png")
    assert width <= (3.6 * MAX_COLUMNS + 0.4) * 110 + 1 and height > width / 2  # 6 rows of at most 5 panels
    clients = [{"client": c, "participating": c % 2 == 0, "delta": 0.01 * c} for c in range(4)]
    plot_accuracy_change({"runs": {f"run-{i}": {"clients": clients} for i in range(n)}}, tmp_path / "acc.png")
    plot_entropy_change({"runs": {f"run-{i}": {"before": 1.0, "after": 0.8} for i in range(n)}}, tmp_path / "ent.png")
    for name, per in (("acc.png", 1.6), ("ent.png", 1.4)):
        width, height = _png_size(tmp_path / name)
        assert width <= (per * RUNS_PER_ROW + 2) * 110 + 1 and height >= 3 * 4.0 * 110 - 1, (name, width, height)


def test_the_cka_figures_left_panel_names_its_x_axis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from matplotlib.figure import Figure

    from chillfl.analysis.cka import plot_cka

    drawn: list[Figure] = []
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: drawn.append(self))
    plot_cka({"runs": {"a": {"layers": ["fc1", "fc2"], "global_vs_reference": {"fc1": 0.9, "fc2": 0.5}}}}, tmp_path / "cka.png")
    assert drawn[0].axes[0].get_xlabel() == "layer"


@pytest.mark.parametrize("figure", [True, False])
def test_reproduces_last_line_names_the_figure_beside_the_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], figure: bool) -> None:
    import chillfl.reproduce as rp

    def written(paper: str, outcomes: object) -> Path:
        path = tmp_path / f"reproduce-{paper}.md"
        path.write_text("table\n")
        if figure:
            path.with_suffix(".png").write_bytes(b"png")
        return path

    monkeypatch.setattr(rp, "reproduce", lambda *args, **kwargs: [])
    monkeypatch.setattr(rp, "format_outcomes", lambda outcomes: "")
    monkeypatch.setattr(rp, "write_verdicts", written)
    assert main(["reproduce", "flexchill", "--seeds", "0,1,2", "--out", str(tmp_path), "-q"]) == 0
    last = capsys.readouterr().err.strip().splitlines()[-1]
    md = tmp_path / "reproduce-flexchill.md"
    assert last == f"chillfl reproduce: verdicts and their evidence folders in {md}" + (f" (figure: {md.with_suffix('.png')})" if figure else "")
