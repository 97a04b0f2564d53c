"""``chillfl report``: the page is self-contained, groups seeds, and renders in a real headless browser.

The browser test needs Chromium (Debian package ``chromium``). Locally it is
skipped when no browser is installed; under CI (``CI=true``) a missing
browser is a failure, since ``.ci/run`` installs it.
"""

from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from chillfl.cli import main
from chillfl.report.html import band, group_runs, load_run, mean_std, render

TINY = ["dataset.name=digits", "federation.num_clients=4", "federation.rounds=3", "federation.clients_per_round=2", "model.name=mlp", "eval.client_split_size=20"]
WIDTH, HEIGHT = 1280, 2400


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return three_runs(tmp_path_factory.mktemp("report"))


def three_runs(root: Path) -> Path:
    """Two seeds of T = 0.1 and one run of T = 1 under ``root/out``: three folders (chill, chill-2, warm), two groups."""
    config = root / "exp.toml"
    config.write_text(f'name = "chill"\nout_dir = "{root / "out"}"\n[temperature]\npolicy = "fixed"\nvalue = 0.1\n')
    for extra in (["--seed", "0"], ["--seed", "1"], ["temperature.value=1", "name=warm"]):
        assert main(["run", str(config), "-q", *TINY, *extra]) == 0
    return root / "out"


def test_mean_std_and_band_on_given_numbers() -> None:
    # mean of 1, 2, 6 = 3; sample variance ((1-3)^2 + (2-3)^2 + (6-3)^2) / 2 = 14 / 2 = 7 -> std sqrt(7)
    mean, std, n = mean_std([1.0, 2.0, None, 6.0, float("nan")])
    assert (mean, n) == (3.0, 3) and std == pytest.approx(7**0.5)
    assert mean_std([0.5]) == (0.5, None, 1)  # one value: no spread, as the compare table (metrics.stats.summarize)
    # band over two seeds at their common rounds (round 3 only in the first): values (0.2, 0.4) and (0.6, 0.8)
    a = [{"round": 1, "global_acc": 0.2}, {"round": 2, "global_acc": 0.4}, {"round": 3, "global_acc": 0.9}]
    b = [{"round": 1, "global_acc": 0.6}, {"round": 2, "global_acc": 0.8}, {"round": 3}]
    rounds, m, s = band([a, b], "global_acc")
    assert rounds.tolist() == [1, 2] and m.tolist() == pytest.approx([0.4, 0.6])
    assert s.tolist() == pytest.approx([0.2 * 2**0.5, 0.2 * 2**0.5])  # |0.6 - 0.2| / sqrt(2)


def test_runs_that_differ_only_by_seed_form_one_group(runs: Path) -> None:
    loaded = [load_run(p) for p in sorted(runs.iterdir())]
    groups = group_runs(loaded)
    assert sorted((g.label, sorted(g.seeds)) for g in groups) == [("chill", [0, 1]), ("warm", [0])]


def test_page_is_self_contained(runs: Path) -> None:
    page = render([runs])
    assert "http://" not in page and "https://" not in page  # nothing to fetch
    srcs = re.findall(r'<img[^>]* src="([^"]*)"', page)
    assert len(srcs) >= 6 and all(s.startswith("data:image/png;base64,") for s in srcs)
    assert '<table id="configs">' in page and '<table id="metrics">' in page
    assert " ± " in page  # the two-seed group has a spread
    assert "final ECE" in page


def test_report_cli_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path), "-o", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("chillfl: error: RUN_DIR:") and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r.html").exists()



@pytest.mark.parametrize("name", ["r.pdf", "r.PNG"])
def test_an_output_that_is_not_html_is_one_line_and_nothing_written(runs: Path, tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """-o r.pdf wrote the HTML page into r.pdf."""
    assert main(["report", str(runs), "--no-models", "--no-partitions", "-o", str(tmp_path / name)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("chillfl: error: --output:") and ".html" in err[0], err
    assert not (tmp_path / name).exists()
    assert main(["report", str(runs), "--no-models", "--no-partitions", "-o", str(tmp_path / "r.HTM")]) == 0  # any case of .html/.htm


def test_an_unwritable_output_is_one_line(runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """-o under a file was a FileNotFoundError/NotADirectoryError traceback, exit 1."""
    (tmp_path / "f").write_text("")
    assert main(["report", str(runs), "--no-models", "--no-partitions", "-o", str(tmp_path / "f" / "r.html")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("chillfl: error: --output:"), err


def _browser() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        if path := shutil.which(name):
            return path
    return None


def _chromium(browser: str, *args: str, home: Path) -> subprocess.CompletedProcess[str]:
    # A private profile and HOME: no state shared with other runs, nothing written outside tmp_path.
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run", f"--user-data-dir={home / 'profile'}"]
    env = {**os.environ, "HOME": str(home)}
    return subprocess.run([browser, *flags, *args], capture_output=True, text=True, timeout=120, env=env, check=False)


def test_page_renders_in_a_headless_browser(runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    browser = _browser()
    if browser is None:
        if os.environ.get("CI") == "true":
            pytest.fail("no Chromium found under CI (.ci/run installs the Debian package 'chromium')")
        pytest.skip("no Chromium installed (apt-get install chromium)")
    out = tmp_path / "report.html"
    assert main(["report", str(runs), "-o", str(out), "--title", "test report"]) == 0
    assert f"report: {out}" in capsys.readouterr().out
    url = out.resolve().as_uri()

    # 1. The DOM after load: the inline check script ran and every image decoded.
    dom = _chromium(browser, "--virtual-time-budget=10000", f"--window-size={WIDTH},{HEIGHT}", "--dump-dom", url, home=tmp_path).stdout
    check = re.search(r'<p id="render-check"[^>]*data-images="(\d+)" data-broken="(\d+)" data-tables="(\d+)" data-overflow="(\d+)"', dom)
    assert check is not None, dom[-2000:]
    images, broken, tables, overflowing = map(int, check.groups())
    assert images >= 6 and broken == 0 and tables == 2
    assert overflowing == 0  # nothing wider than the 1280 px window (the config table wraps)
    assert "<title>test report</title>" in dom and "chill" in dom and "warm" in dom

    # 2. A screenshot of the requested size that is not blank.
    from PIL import Image

    shot = tmp_path / "shot.png"
    _chromium(browser, f"--screenshot={shot}", f"--window-size={WIDTH},{HEIGHT}", url, home=tmp_path)
    assert shot.is_file()
    with Image.open(shot) as img:
        assert img.size == (WIDTH, HEIGHT)
        rgb = img.convert("RGB")
        colours = rgb.getcolors(maxcolors=1 << 20)
        assert colours is not None and len(colours) > 50  # text, tables and plots, not a blank page
        white = max(count for count, c in colours if c == (255, 255, 255)) if any(c == (255, 255, 255) for _, c in colours) else 0
        assert white < 0.97 * WIDTH * HEIGHT
        # the plots are drawn: some pixel in the lower half is coloured (not grey/white/black)
        lower = rgb.crop((0, HEIGHT // 2, WIDTH, HEIGHT)).getcolors(maxcolors=1 << 20) or []
        assert any(max(c) - min(c) > 80 for _, c in lower)


def test_rounds_to_target_says_how_many_seeds_reached_it() -> None:
    from chillfl.config import RunConfig
    from chillfl.report.html import Group, Run, _metrics_row

    def run(seed: int, rounds: int | None) -> Run:
        return Run(Path("."), RunConfig(seed=seed), [], {"target_accuracy": 0.9, "rounds_to_target": rounds, "final_global_acc": 0.5 + seed / 10})

    row = _metrics_row(Group("g", [run(0, 4), run(1, None), run(2, 8)]))
    assert "6.0 ± 2.8 (2/3 reached)" in row  # mean 6 of (4, 8), sample std sqrt(8) = 2.83
    assert "60.00 ± 10.00" in row  # final acc 50, 60, 70 %: mean 60, std 10


def test_seed_groups_are_labelled_by_what_varies() -> None:
    from chillfl.config import RunConfig
    from chillfl.report.html import Run

    def run(name: str, seed: int, temperature: dict) -> Run:
        return Run(Path(name), RunConfig(name=name, seed=seed, temperature=temperature), [], {})

    cold = {"policy": "fixed", "value": 0.5}
    groups = group_runs([run("T0.5_seed0", 0, cold), run("T0.5_seed1", 1, cold), run("T1_seed0", 0, {"policy": "none"}), run("T1_seed1", 1, {"policy": "none"})])
    assert [g.label for g in groups] == ["temperature.policy=fixed, temperature.value=0.5", "temperature.policy=none"]
    assert [sorted(g.seeds) for g in groups] == [[0, 1], [0, 1]]


def test_a_chosen_parts_default_options_are_not_labels() -> None:
    """A compare of ``temperature.policy=none,fedchill`` (README's quickstart) labelled its FedChill groups with all ten
    FedChill options at their defaults (``temperature.t_max=1.0, temperature.t_min=0.05, ...``), since the none groups
    lack them: the curves' legend and every heading ran to three lines. ``policy=fedchill`` implies them. An option
    set to other values in different groups (FedProx's mu) stays, and so does one off its default (the test above)."""
    from chillfl.config import RunConfig
    from chillfl.report.html import Run
    from chillfl.resolve import algorithm_table, temperature_table

    def run(name: str, seed: int, **tables: dict) -> Run:
        return Run(Path(name), RunConfig(name=name, seed=seed, **tables), [], {})

    chill = temperature_table({"policy": "fedchill"})  # as a run folder's config.toml holds it: every option written
    assert len(chill) > 5
    groups = group_runs([run(f"chill-s{s}", s, temperature=chill) for s in (0, 1)] + [run(f"none-s{s}", s, temperature={"policy": "none"}) for s in (0, 1)])
    assert [g.label for g in groups] == ["temperature.policy=fedchill", "temperature.policy=none"]
    prox = [algorithm_table({"name": "fedprox", "mu": mu}) for mu in (0.01, 0.1)]  # 0.01 is mu's default
    groups = group_runs([run(f"{i}-s{s}", s, algorithm=a) for i, a in enumerate([{"name": "fedavg"}, *prox]) for s in (0, 1)])
    assert [g.label for g in groups] == ["algorithm.name=fedavg", "algorithm.name=fedprox, algorithm.mu=0.01", "algorithm.name=fedprox, algorithm.mu=0.1"]


def test_an_exploding_loss_is_log_scaled() -> None:
    from chillfl.report.html import Group, Run, _explodes

    def run(losses: list[float]) -> Run:
        from chillfl.config import RunConfig

        return Run(Path("."), RunConfig(), [{"round": i + 1, "global_loss": v} for i, v in enumerate(losses)], {})

    calm = [Group("a", [run([2.0, 1.0, 0.5])]), Group("b", [run([2.0, 0.9, 0.6])])]
    assert not _explodes(calm, "global_loss")  # peak 2.0 <= 10 x median final (0.6)
    wild = [*calm, Group("c", [run([2.0, 50.0, 0.7])])]
    assert _explodes(wild, "global_loss")  # 50 > 10 x 0.6


def test_a_comparison_folder_shows_its_table_and_its_diverged_runs(tmp_path: Path) -> None:
    config = tmp_path / "cmp.toml"
    config.write_text(f'name = "cmp"\nout_dir = "{tmp_path / "out"}"\n[compare]\nseeds = [0, 1]\n'
                      '[variants."calm"]\nclient = { lr = 0.05 }\n[variants."boom"]\nclient = { lr = 1e6 }\n')
    assert main(["compare", str(config), "-q", *TINY]) == 3  # only the baseline finished: nothing compared (the table is still written)
    folder = tmp_path / "out" / "cmp-compare"
    page = render([folder], models=False, partitions=False)
    table = (folder / "table.md").read_text()
    calm_row = next(line for line in table.splitlines() if line.startswith("| calm |"))
    rounds_cell = calm_row.split(" | ")[-2]  # "rounds to target (reached)", as compare printed it
    assert f"<td class=\"l\">{rounds_cell}</td>" in page.replace("&quot;", '"')
    assert len(re.findall(r"<li>boom-s\d: diverged at round \d+", page)) == 2, re.findall(r"<li>[^<]*diverged[^<]*", page)  # both seeds, with their round
    results = re.sub(r"<details>.*?</details>", "", page, flags=re.S).split("<h2>Results</h2>")[1].split("</table>")[0]
    assert "not checked" not in page and not re.search(r"calm(-s|_seed)0", results)  # groups are labelled by what varies, not by a member's folder


def test_long_unbreakable_names_do_not_widen_the_page(tmp_path: Path) -> None:
    """A 1280 px window: the config table wraps a long label (compare's folder names run long)."""
    browser = _browser()
    if browser is None:
        if os.environ.get("CI") == "true":
            pytest.fail("no Chromium found under CI (.ci/run installs the Debian package 'chromium')")
        pytest.skip("no Chromium installed (apt-get install chromium)")
    config = tmp_path / "exp.toml"
    config.write_text(f'name = "{"T0.05_client.lr0.2_algorithm.namefedavg_" * 4}"\nout_dir = "{tmp_path / "out"}"\n')
    assert main(["run", str(config), "-q", *TINY]) == 0
    out = tmp_path / "report.html"
    assert main(["report", str(tmp_path / "out"), "-o", str(out), "--no-models", "--no-partitions"]) == 0
    dom = _chromium(browser, "--virtual-time-budget=10000", f"--window-size={WIDTH},{HEIGHT}", "--dump-dom", out.resolve().as_uri(), home=tmp_path).stdout
    check = re.search(r'data-overflow="(\d+)"', dom)
    assert check is not None and check.group(1) == "0", dom[-1500:]


def test_a_run_on_custom_data_keeps_its_reliability_diagram(tmp_path: Path) -> None:
    """A report cannot rebuild the user's own module and data from config.toml; the run keeps the diagram's bins instead."""
    import json

    import torch

    import chillfl
    from digits_net import Net

    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(160, 64, generator=gen), torch.randint(0, 10, (160,), generator=gen)
    data = chillfl.TensorData(x[:120], y[:120], x[120:], y[120:], num_classes=10)
    torch.manual_seed(0)
    result = chillfl.run(model=Net(), data=data, config={"federation": {"num_clients": 3, "rounds": 2}, "eval": {"ece_bins": 5}},
                         out_dir=str(tmp_path), progress=False)
    page = render([result.folder], partitions=False)
    assert page.count('alt="reliability') == 1
    saved = json.loads((result.folder / "summary.json").read_text())["calibration"]
    assert sum(saved["reliability"]["count"]) == 40 and len(saved["reliability"]["edges"]) == 6
    last = result.records[-1]  # the last round evaluated this same final model in the same pass: bitwise the same numbers
    assert (saved["ece"], saved["nll"], saved["brier"], saved["accuracy"]) == (last["global_ece"], last["global_nll"], last["global_brier"], last["global_acc"])


def test_heat_map_titles_fit_in_the_image(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A long run name (compare's folder names) in a heat map's title is wrapped, not cut off at the image's edges."""
    import numpy as np
    from matplotlib.figure import Figure

    from chillfl.data.show import plot_class_heatmap

    boxes: list[tuple[float, float, float, float, float, float]] = []
    save = Figure.savefig

    def spy(self: Figure, *args: object, **kwargs: object) -> object:
        renderer = self.canvas.get_renderer()  # type: ignore[attr-defined]
        for text in [ax.title for ax in self.axes if ax.get_title()] + list(self.texts):  # texts: the suptitle among them
            box = text.get_window_extent(renderer)
            boxes.append((box.x0, box.x1, box.y0, box.y1, self.bbox.x1, self.bbox.y1))
        return save(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Figure, "savefig", spy)
    name = "T0.05_client.lr0.2_algorithm.namefedavg_" * 2
    for clients in (2, 4, 30):
        plot_class_heatmap(np.ones((clients, 10), dtype=np.int64), tmp_path / "h.png", title=f"{name}: class counts per client (seed 0)")
    assert len(boxes) == 3
    assert all(0 <= x0 and x1 <= width and 0 <= y0 and y1 <= height for x0, x1, y0, y1, width, height in boxes), boxes


def test_groups_on_the_same_partition_share_one_heat_map(tmp_path: Path) -> None:
    config = tmp_path / "exp.toml"
    config.write_text(f'name = "a"\nout_dir = "{tmp_path / "out"}"\n')
    for extra in (["temperature.value=0.5", "temperature.policy=fixed"], ["name=b"], ["name=c", "client.lr=0.05", "--seed", "1"]):
        assert main(["run", str(config), "-q", *TINY, *extra]) == 0
    page = render([tmp_path / "out"], models=False)
    assert page.count('class="fig"><p class="muted">') == page.count('alt="partition') == 2  # a and b: one partition (seed 0); c: another (seed 1)


def test_a_named_stopped_or_diverged_run_says_so_in_the_results_table(runs: Path, tmp_path: Path) -> None:
    """A ``.partial`` or ``.failed`` folder named on the command line has curves but no summary: its row was all
    dashes, with nothing saying it stopped at round 2 of 3 (or diverged) rather than measured nothing."""
    partial, failed = tmp_path / "warm.partial", tmp_path / "warm.failed"
    for folder in (partial, failed):
        shutil.copytree(runs / "warm", folder)
        (folder / "summary.json").unlink()
        lines = (folder / "metrics.jsonl").read_text().splitlines(keepends=True)
        (folder / "metrics.jsonl").write_text("".join(lines[:2]))
    (failed / "failure.json").write_text('{"round": 3}')
    for folder, state in ((partial, "stopped (before its first checkpoint: resume refuses it; run its config.toml again), 2/3 rounds"), (failed, "diverged (at round 3), 2/3 rounds")):
        page = render([folder], models=False, partitions=False)
        results = page.split("<h2>Results</h2>")[1].split("</table>")[0]
        assert f"warm (warm: {state})" in results


def test_a_stopped_run_with_a_torn_last_line_is_reported_as_resume_reads_it(runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run killed while it wrote a round's line: ``chillfl resume`` drops the cut line, the report refused the folder
    ("unreadable result files"). It now drops it too, and the run is stopped at the rounds written whole."""
    partial = tmp_path / "warm.partial"
    shutil.copytree(runs / "warm", partial)
    (partial / "summary.json").unlink()
    lines = (partial / "metrics.jsonl").read_text().splitlines(keepends=True)
    (partial / "metrics.jsonl").write_text("".join(lines[:2]) + lines[2][: len(lines[2]) // 2])  # cut mid-line, no newline
    assert main(["report", str(partial), "--no-models", "--no-partitions", "-o", str(tmp_path / "r.html")]) == 0, capsys.readouterr().err
    results = (tmp_path / "r.html").read_text().split("<h2>Results</h2>")[1].split("</table>")[0]
    assert "warm (warm: stopped (before its first checkpoint: resume refuses it; run its config.toml again), 2/3 rounds)" in results
    assert [r["round"] for r in load_run(partial).records] == [1, 2]
    (partial / "metrics.jsonl").write_text("".join(lines[:1]) + "garbled\n" + lines[2])  # a bad line that is not the last stays an error
    assert main(["report", str(partial), "--no-models", "--no-partitions", "-o", str(tmp_path / "r2.html")]) == 2
    assert capsys.readouterr().err.startswith("chillfl: error: RUN_DIR:")


def test_a_heat_map_of_many_clients_stays_readable(tmp_path: Path) -> None:
    """200 clients drew an 8640 x 540 px strip (0.35 in a client), which the page shrinks to a few pixels' height."""
    import struct

    import numpy as np

    from chillfl.data.show import plot_class_heatmap

    plot_class_heatmap(np.ones((200, 10), dtype=np.int64), tmp_path / "h.png", title="many")
    width, height = struct.unpack(">II", (tmp_path / "h.png").read_bytes()[16:24])
    assert width <= 2000 and width / height <= 4, (width, height)


def test_a_folder_of_runs_names_the_folders_it_leaves_out(runs: Path, tmp_path: Path) -> None:
    """``chillfl report results`` took the finished runs and dropped a comparison folder and unfinished runs
    beside them without a word; the page now names them (as the one way to include them: name them)."""
    folder = tmp_path / "results"
    shutil.copytree(runs, folder)
    shutil.copytree(runs / "warm", folder / "late.partial")
    (folder / "x-compare").mkdir()
    (folder / "x-compare" / "sweep.json").write_text("{}")
    page = render([folder], models=False, partitions=False)
    skipped = re.search(r'<p class="muted" id="skipped">([^<]*)</p>', page)
    assert skipped is not None and skipped.group(1).endswith(f"{folder / 'late.partial'}, {folder / 'x-compare'}")
    assert 'id="skipped"' not in render([runs], models=False, partitions=False)


def test_a_group_keeps_its_colour_in_every_panel(runs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A group without local accuracy (eval.clients = none) shifted every later group's colour in that panel only:
    the local-accuracy panel drew the next group in the colour the global one gave the group before."""
    import chillfl.report.html as page
    from chillfl.report.html import Group, Run, curves_figure

    figures: list[object] = []
    monkeypatch.setattr(page, "_png", lambda fig: figures.append(fig) or "")
    run = load_run(runs / "warm")
    no_local = Run(run.folder, run.config, [{k: v for k, v in r.items() if k != "local_acc"} for r in run.records], run.summary)
    curves_figure([Group("a", [no_local]), Group("b", [run])], (("global_acc", "g"), ("local_acc", "l")))
    (fig,) = figures
    colours = [{line.get_label(): line.get_color() for line in ax.get_lines()} for ax in fig.axes]  # type: ignore[attr-defined]
    assert colours[0]["b (n=1)"] == colours[1]["b (n=1)"], colours


def test_a_folder_of_only_unfinished_runs_says_so(runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An interrupted comparison's folder (one ``.partial`` run) was "not a chillfl run folder ... nor a folder of them"."""
    shutil.copytree(runs / "warm", tmp_path / "cmp" / "a-s0.partial")
    assert main(["report", str(tmp_path / "cmp"), "-o", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"chillfl: error: RUN_DIR: {tmp_path / 'cmp'} holds no finished run, only unfinished ones (a-s0.partial): name one to report it"]


def test_a_seed_given_twice_is_not_counted_twice_in_a_group(runs: Path, tmp_path: Path) -> None:
    """The same run in two folders (a run and a comparison's copy of it) joined one group as seeds "0, 1, 0": its
    mean ± std counted seed 0 twice. The repeat is a group of its own."""
    shutil.copytree(runs / "chill", tmp_path / "again")
    groups = group_runs([load_run(p) for p in (runs / "chill", runs / "chill-2", tmp_path / "again")])
    assert [sorted(g.seeds) for g in groups] == [[0, 1], [0]]


def test_groups_that_differ_only_in_a_setting_without_a_column_show_it(runs: Path, tmp_path: Path) -> None:
    """A run with ``eval.clients = none`` (or [privacy], [attack], [prototypes]) had a configurations row equal to
    the plain run's but for its name; the differing settings are now in an "other" column."""
    config = tmp_path / "exp.toml"
    config.write_text(f'name = "quiet"\nout_dir = "{tmp_path / "out"}"\n[temperature]\npolicy = "fixed"\nvalue = 1\n')
    assert main(["run", str(config), "-q", *TINY, "eval.clients=none"]) == 0
    page = render([runs / "warm", tmp_path / "out" / "quiet"], models=False, partitions=False)
    table = page.split('<table id="configs">')[1].split("</table>")[0]
    assert "<th class=\"l\">other</th>" in table and "eval.clients=none" in table and "eval.clients=sampled" in table
    assert "other</th>" not in render([runs / "warm"], models=False, partitions=False)


@pytest.mark.parametrize(
    ("file", "text", "said"),
    [
        ("summary.json", "[1, 2]", "summary.json is not a JSON object"),
        ("summary.json", '{"final_global_acc": "high"}', "summary.json: final_global_acc is 'high', not a number"),
        ("metrics.jsonl", '{"round": 1, "global_acc": "y"}\n', "metrics.jsonl record 1: global_acc is 'y', not a number"),
        ("metrics.jsonl", '{"round": 1}\n[2]\n', "metrics.jsonl record 2: not a round's record (an object with an integer round)"),
        ("metrics.jsonl", '{"round": "1"}\n', "metrics.jsonl record 1: not a round's record (an object with an integer round)"),
    ],
)
def test_a_result_file_of_the_wrong_shape_is_one_line_naming_it(
    runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], file: str, text: str, said: str,
) -> None:
    """Valid JSON of the wrong shape (hand-edited, another tool's) printed a traceback from deep in the page
    (AttributeError: 'list' object has no attribute 'get'; ValueError: could not convert string to float) and exit 1."""
    run = tmp_path / "warm"
    shutil.copytree(runs / "warm", run)
    (run / file).write_text(text)
    assert main(["report", str(run), "--no-models", "--no-partitions", "-o", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert err == f"chillfl: error: RUN_DIR: {run / file}{said.removeprefix(file)}\n", err
    assert not (tmp_path / "r.html").exists()


def test_curves_of_five_long_labelled_variants_lay_out_without_a_warning() -> None:
    """`chillfl report` on a comparison of 5 variants labelled by several options printed matplotlib's
    "Tight layout not applied ..." warning: a legend entry wider than its panel."""
    import warnings

    from chillfl.config import RunConfig
    from chillfl.report.html import ACCURACY_CURVES, CALIBRATION_CURVES, Group, Run, curves_figure

    def run(i: int) -> Run:
        records = [{"round": r, "global_acc": 0.1 * r + 0.01 * i, "local_acc": 0.2, "global_ece": 0.1, "global_nll": 1.0, "global_brier": 0.2} for r in (1, 2, 3)]
        return Run(Path("x"), RunConfig(), records, {})

    label = "algorithm.name=fedprox, algorithm.mu=0.01, client.lr=0.05, client.local_epochs=5, partition.alpha=0.1, temperature.value=0.5, "
    label += "model.name=cnn, optimizer.weight_decay=0.0001, federation.clients_per_round=10, eval.client_split_size=20"
    groups = [Group(f"{label} [{i}]", [run(i), run(i + 1)]) for i in range(5)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for keys in (ACCURACY_CURVES, CALIBRATION_CURVES):
            assert curves_figure(groups, keys)


CHILL_LABEL = "FedAvg + chilling T=0.5"


@pytest.fixture(scope="module")
def comparison(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real comparison: 2 variants x 2 seeds on digits, 1 round (seconds)."""
    root = tmp_path_factory.mktemp("labels")
    config = root / "cmp.toml"
    config.write_text(f'name = "cmp"\nout_dir = "{root / "out"}"\n[compare]\nseeds = [0, 1]\n[variants."FedAvg"]\nclient = {{ lr = 0.05 }}\n'
                      f'[variants."{CHILL_LABEL}"]\nclient = {{ lr = 0.05 }}\ntemperature = {{ policy = "fixed", value = 0.5 }}\n')
    assert main(["compare", str(config), "-q", *TINY, "federation.rounds=1"]) == 0
    return root / "out" / "cmp-compare"


def _report_groups(tmp_path: Path, *folders: Path) -> list[str]:
    """The groups ``chillfl report`` names on its page (each group's folded config), in order."""
    out = tmp_path / "report.html"
    assert main(["report", *map(str, folders), "-o", str(out), "--no-models", "--no-partitions"]) == 0
    return [html.unescape(label) for label in re.findall(r"<details><summary>(.*?): full config \(", out.read_text(encoding="utf-8"))]


def test_a_comparisons_groups_are_labelled_by_its_variant_labels(comparison: Path, tmp_path: Path) -> None:
    """The page names a comparison's groups as its table does (the labels the user chose), not by the options that
    differ (``temperature.policy=none`` / ``temperature.policy=fixed, temperature.value=0.5``)."""
    assert _report_groups(tmp_path, comparison) == ["FedAvg", "FedAvg + chilling T=0.5"]
    groups = group_runs([load_run(p) for p in sorted(comparison.glob("*-s?"))])
    assert [(g.label, sorted(g.seeds)) for g in groups] == [("FedAvg", [0, 1]), (CHILL_LABEL, [0, 1])]


def test_a_group_with_a_run_from_elsewhere_or_a_shared_label_falls_back_to_its_options(comparison: Path, tmp_path: Path) -> None:
    """A group whose runs do not all carry the comparison's label (a seed run from the comparison's config.toml outside
    it) is named by what differs; so are two groups of two comparisons that share a label. A label that is one
    group's alone stays."""
    solo = tmp_path / "solo"
    assert main(["run", str(comparison / "FedAvg-s0" / "config.toml"), "-q", "--seed", "5", "name=solo", f"out_dir={solo}"]) == 0
    assert _report_groups(tmp_path, comparison, solo / "solo") == ["temperature.policy=none", CHILL_LABEL]
    config = tmp_path / "other.toml"  # another comparison with a variant also called FedAvg (another lr)
    config.write_text(f'name = "other"\nout_dir = "{tmp_path / "out"}"\n[compare]\nseeds = [0, 1]\n[variants."FedAvg"]\nclient = {{ lr = 0.2 }}\n')
    assert main(["compare", str(config), "-q", *TINY, "federation.rounds=1"]) == 0
    groups = _report_groups(tmp_path, comparison, tmp_path / "out" / "other-compare")
    assert groups == ["client.lr=0.05, temperature.policy=none", CHILL_LABEL, "client.lr=0.2, temperature.policy=none"]


def test_run_labels_name_the_runs_a_plan_names(tmp_path: Path) -> None:
    """:func:`chillfl.run_names.run_labels` reads back the folder names :func:`~chillfl.sweeps.plan.plan_runs` gives:
    tuned (with the point in the label), one seed (no suffix), and short names that collide (then the long ones)."""
    from chillfl.config import load_config
    from chillfl.run_names import run_labels
    from chillfl.sweeps.plan import CompareOptions, plan_runs

    config = tmp_path / "c.toml"
    config.write_text('name = "c"\n[eval]\nvalidation = 0.2\n[variants."A"]\nclient = { lr = 0.05 }\n[variants."A".tune]\n"client.epochs" = [2, 3]\n'
                      '[variants."A-epochs2"]\nclient = { lr = 0.1 }\n')  # short names A-epochs2-s0 twice: the long ones
    base = load_config(config)
    for options in (CompareOptions(seeds=[0, 1], tune={"client.batch_size": [8, 16]}), CompareOptions(seeds=[3]), CompareOptions(seeds=[0, 1])):
        plan = plan_runs(base, [], options)
        labels = run_labels(plan.variants, plan.tune_table, plan.seeds)
        assert sorted(labels) == sorted(c.config.name for c in plan.cells)
        assert all(("seed" in name) == (not options.tune) for name in labels)  # without the shared grid A-epochs2-s0 is two runs' short name: the long ones
        for c in plan.cells:
            point = plan.points_of(c.variant)[c.point]
            assert labels[c.config.name] == ", ".join([c.variant.label, *(f"{k}={v}" for k, v in point.items())])



def test_configurations_show_values_as_toml_not_python_reprs(runs: Path, tmp_path: Path) -> None:
    """A table option (``dataset.augment``) read ``augment={'crop_padding': 0, ...}`` and a list of terms
    ``objective.terms=({'name': 'decorr', ...},)``: Python's reprs, not the TOML a reader types."""
    config = tmp_path / "exp.toml"
    config.write_text(f'name = "decorr"\nout_dir = "{tmp_path / "out"}"\n[temperature]\npolicy = "fixed"\nvalue = 1\n')
    assert main(["run", str(config), "-q", *TINY, 'objective.terms=[{name = "decorr", beta = 0.5}]']) == 0
    page = render([runs / "warm", tmp_path / "out" / "decorr"], models=False, partitions=False)
    table = html.unescape(page.split('<table id="configs">')[1].split("</table>")[0])
    assert "augment={crop_padding = 0" in table and 'objective.terms=[{name = "decorr", beta = 0.5' in table
    assert "{'" not in table and "True" not in table and "None" not in table


def test_an_exploding_nll_panel_is_log_scaled_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """The calibration figure's NLL panel is the same unbounded cross-entropy as the loss panel: one diverged run's 3.5e34
    left every other line flat on 0 on a linear axis (the log-scale test read ``"loss" in key``)."""
    from chillfl.config import RunConfig
    from chillfl.report import html as report_html

    figures: list[Any] = []
    monkeypatch.setattr(report_html, "_png", lambda fig: figures.append(fig) or "png")

    def run(nll: list[float]) -> report_html.Run:
        return report_html.Run(Path("."), RunConfig(), [{"round": i + 1, "global_nll": v, "global_ece": 0.1} for i, v in enumerate(nll)], {})

    groups = [report_html.Group("a", [run([2.0, 1.0, 0.5])]), report_html.Group("b", [run([2.0, 0.9, 0.6])]), report_html.Group("c", [run([2.0, 3.5e34, 0.7])])]
    report_html.curves_figure(groups, report_html.CALIBRATION_CURVES)
    ece, nll = figures[0].axes[:2]
    assert nll.get_yscale() == "log" and nll.get_title().startswith("NLL (log scale)")
    assert ece.get_yscale() == "linear"  # a bounded metric stays linear
