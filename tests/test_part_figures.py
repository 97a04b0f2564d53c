"""A private run draws ``privacy.png`` and an attacked run that records ``attack_success_rate`` draws ``attack.png``:
figures the privacy mechanism's and the attack's specs declare (``figures``), read by the runner as a method's are,
so a plugin's spec adds its own the same way. Checked: the files are written (valid PNGs; pixels are not compared)
for tiny runs and not for a plain one, a one-round figure still draws its point, the records are paired as documented."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest

from chillfl import runner
from chillfl.config import load_config
from chillfl.runner import run_experiment
from plugin_modules import plugin_module

pytest.importorskip("matplotlib")

BASE: dict[str, Any] = {
    "seed": 0,
    "device": "cpu",
    "executor": "sequential",
    "dataset.name": "digits",
    "partition.name": "iid",
    "model.name": "mlp",
    "model.hidden": [16],
    "federation.num_clients": 4,
    "federation.rounds": 2,
    "client.batch_size": 32,
    "client.lr": 0.1,
    "eval.clients": "none",
    "checkpoint.every": 0,
}

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) of a PNG file, from its header (signature, then the IHDR chunk); an AssertionError when it is none."""
    head = path.read_bytes()[:24]
    assert head[:8] == PNG_SIGNATURE and head[12:16] == b"IHDR", f"{path.name} is not a PNG"
    width, height = struct.unpack(">II", head[16:24])
    assert width > 0 and height > 0
    return width, height


def run_pngs(tmp_path: Path, name: str, **overrides: Any) -> dict[str, Path]:
    """The PNGs of one run of ``BASE`` with ``overrides``, by file name."""
    out = run_experiment(load_config(None, {**BASE, "out_dir": str(tmp_path), "name": name, **overrides}), progress=False)
    assert out.folder is not None
    return {p.name: p for p in out.folder.glob("*.png")}


def test_a_private_run_writes_privacy_png_and_a_plain_run_neither_figure(tmp_path: Path) -> None:
    pytest.importorskip("opacus")
    private = run_pngs(tmp_path, "private", **{"privacy.mechanism": "dp-fedavg", "privacy.noise_multiplier": 1.0})
    plain = run_pngs(tmp_path, "plain")
    assert {"accuracy_loss.png", "privacy.png"} <= set(private) and "attack.png" not in private
    png_size(private["privacy.png"])
    assert "accuracy_loss.png" in plain and not {"privacy.png", "attack.png"} & set(plain)


def test_a_backdoored_run_writes_attack_png_and_an_attack_without_a_probe_does_not(tmp_path: Path) -> None:
    backdoor = run_pngs(tmp_path, "backdoor", **{"attack.kind": "backdoor", "attack.fraction": 0.25})
    gaussian = run_pngs(tmp_path, "gaussian", **{"attack.kind": "gaussian", "attack.fraction": 0.25})
    assert {"accuracy_loss.png", "attack.png"} <= set(backdoor) and "privacy.png" not in backdoor
    png_size(backdoor["attack.png"])
    assert "attack.png" not in gaussian  # declared (the default figures), but no attack_success_rate to draw


def test_the_runner_reads_the_switched_specs_figures_once_each_after_the_methods() -> None:
    plain = load_config(None, BASE)
    both = load_config(None, {**BASE, "algorithm.name": "pa3fed", "privacy.mechanism": "dp-fedavg", "attack.kind": "backdoor"})
    assert runner.run_figures([], plain) == ("accuracy_loss", "temperatures")
    assert runner.run_figures([], both) == ("accuracy_loss", "temperatures", "clp", "privacy", "attack")


def test_every_figure_a_mechanism_or_attack_declares_is_registered() -> None:
    from chillfl.plots.registry import registered_figures
    from chillfl.settings.attack import attack_spec, kind_names
    from chillfl.settings.privacy import mechanism_names, mechanism_spec

    figures = registered_figures()
    declared = {name for m in mechanism_names() for name in mechanism_spec(m).figures} | {name for k in kind_names() for name in attack_spec(k).figures}
    assert {"privacy", "attack"} <= declared <= set(figures)
    assert (figures["privacy"].file, figures["attack"].file) == ("privacy.png", "attack.png")


def test_accuracy_is_paired_with_the_epsilon_of_its_own_round() -> None:
    from chillfl.plots.privacy import accuracy_vs_epsilon

    # round 1: both -> (0.5, 0.2); round 2: no evaluation -> no point; round 3: epsilon infinite (null) -> no point;
    # round 4: both -> (2.0, 0.4). Round order kept: epsilons 0.5, 2.0.
    records = [{"round": 1, "epsilon": 0.5, "global_acc": 0.2}, {"round": 2, "epsilon": 1.0}, {"round": 3, "epsilon": None, "global_acc": 0.3}, {"round": 4, "epsilon": 2.0, "global_acc": 0.4}]
    assert accuracy_vs_epsilon(records) == ([0.5, 2.0], [0.2, 0.4])


def test_one_round_figures_draw_their_point_on_a_whole_round_tick(tmp_path: Path, drawn: list[Any]) -> None:
    """A 1-round run: every line is a single point, which a line without a marker would not show."""
    from chillfl.plots.attacks import plot_attack
    from chillfl.plots.privacy import plot_privacy

    one = [{"round": 1, "global_acc": 0.3, "epsilon": 1.5, "attack_success_rate": 0.9}]
    assert plot_privacy(one, tmp_path / "privacy.png", "one round", target_epsilon=4.0)
    assert plot_attack(one, tmp_path / "attack.png", "one round")
    png_size(tmp_path / "privacy.png")
    png_size(tmp_path / "attack.png")
    for fig in drawn:
        for ax in fig.axes:
            curves = [line for line in ax.get_lines() if line.get_linestyle() != "--"]  # the target line spans the axis
            assert curves and all(len(line.get_xdata()) == 1 and line.get_marker() not in ("None", None, "") for line in curves)
            if ax.get_xlabel() == "round":
                assert list(ax.get_xticks()) == [1]
    target = [line for line in drawn[0].axes[1].get_lines() if line.get_linestyle() == "--"]
    assert [list(line.get_ydata()) for line in target] == [[4.0, 4.0]]


def test_a_soft_label_run_draws_epsilon_upload_beside_the_row_bound(tmp_path: Path, drawn: list[Any]) -> None:
    """``epsilon_upload`` (a client's whole upload: the client-level figure docs/privacy.md calls honest) was recorded but
    never drawn: both panels draw it beside ``epsilon``, relabelled as the bound for one row, on log axes across decades."""
    from chillfl.plots.privacy import accuracy_vs_epsilon, epsilon_curves, plot_privacy, spans_decades

    # rounds 1-3: epsilon (one row) 0.5, 0.7, 0.9; epsilon_upload (every row) 4, 30, 60; accuracy at rounds 1 and 3
    records = [{"round": 1, "epsilon": 0.5, "epsilon_upload": 4.0, "global_acc": 0.2}, {"round": 2, "epsilon": 0.7, "epsilon_upload": 30.0},
               {"round": 3, "epsilon": 0.9, "epsilon_upload": 60.0, "global_acc": 0.4}]
    assert epsilon_curves(records) == [("epsilon", "epsilon: any one row"), ("epsilon_upload", "epsilon_upload: a client's whole upload")]
    assert epsilon_curves([{"round": 1, "epsilon": 0.5}]) == [("epsilon", "epsilon spent")]  # parameter sharing: as before
    assert accuracy_vs_epsilon(records, epsilon="epsilon_upload") == ([4.0, 60.0], [0.2, 0.4])
    assert spans_decades([0.5, 60.0]) and not spans_decades([0.5, 4.0]) and not spans_decades([0.0, 3.0])  # 60 > 10 * 0.5; 4 < 5
    assert plot_privacy(records, tmp_path / "privacy.png", "soft labels")
    png_size(tmp_path / "privacy.png")
    ax_acc, ax_eps = drawn[0].axes
    assert [list(line.get_ydata()) for line in ax_eps.get_lines()] == [[0.5, 0.7, 0.9], [4.0, 30.0, 60.0]]
    assert [list(line.get_xdata()) for line in ax_acc.get_lines()] == [[0.5, 0.9], [4.0, 60.0]]
    assert (ax_acc.get_xscale(), ax_eps.get_yscale()) == ("log", "log")
    assert [t.get_text() for t in ax_eps.get_legend().get_texts()] == ["epsilon: any one row", "epsilon_upload: a client's whole upload"]


def test_no_figure_without_its_metric(tmp_path: Path) -> None:
    from chillfl.plots.attacks import plot_attack
    from chillfl.plots.privacy import plot_privacy

    plain = [{"round": 1, "global_acc": 0.3}]
    assert not plot_privacy(plain, tmp_path / "privacy.png") and not plot_attack(plain, tmp_path / "attack.png")
    assert list(tmp_path.iterdir()) == []


PLUGINS = """
import dataclasses

from chillfl.extend import FigureSpec, register_figure
from chillfl.plots.figure import Figure, save_png
from chillfl.privacy.mechanisms.local import SPEC as LOCAL
from chillfl.attacks.kinds.backdoor import SPEC as BACKDOOR


def spent(records, path, config):  # reads the run's config: draw_run
    fig = Figure()
    fig.subplots().bar([config.privacy.mechanism], [records[-1]["epsilon"]])
    save_png(fig, path)


def success(records, path, title):  # records only: draw
    fig = Figure()
    fig.subplots().plot([r["round"] for r in records], [r["attack_success_rate"] for r in records])
    save_png(fig, path)


register_figure("plugin_spent", FigureSpec("plugin_spent.png", lambda records, path, title: None, "final epsilon", draw_run=spent))
register_figure("plugin_success", FigureSpec("plugin_success.png", success, "attack success"))
MECHANISM = dataclasses.replace(LOCAL, name="plugin_local", figures=("privacy", "plugin_spent"))
ATTACK = dataclasses.replace(BACKDOOR, name="plugin_backdoor", figures=("plugin_success",))
"""


def test_a_plugin_mechanism_and_attack_get_the_figures_their_specs_declare(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The mechanism adds its figure beside privacy.png; the attack declares only its own, so attack.png is not drawn."""
    pytest.importorskip("opacus")
    (tmp_path / "user").mkdir()
    with plugin_module(tmp_path / "user", monkeypatch, "figure_plugins", PLUGINS):
        pngs = run_pngs(
            tmp_path / "runs", "plugins", **{"privacy.mechanism": "figure_plugins:MECHANISM", "privacy.noise_multiplier": 1.0, "attack.kind": "figure_plugins:ATTACK", "attack.fraction": 0.25}
        )
    assert {"accuracy_loss.png", "privacy.png", "plugin_spent.png", "plugin_success.png"} <= set(pngs) and "attack.png" not in pngs
    for name in ("privacy.png", "plugin_spent.png", "plugin_success.png"):
        png_size(pngs[name])


SOFT_PLUGIN = """
import dataclasses
from chillfl.distillation.methods.dsfl import SPEC as DSFL
from chillfl.plots.figure import Figure, save_png
from chillfl.plots.registry import FigureSpec, register_figure

def rounds_done(records, path, title):
    fig = Figure(figsize=(3, 2))
    fig.subplots().plot([r["round"] for r in records], [r["round"] for r in records], marker="o")
    save_png(fig, path)

register_figure("soft_rounds", FigureSpec("soft_rounds.png", rounds_done, "rounds"))
SOFT = dataclasses.replace(DSFL, name="soft_with_figure", figures=("soft_rounds",))
"""


def test_a_soft_label_method_gets_the_figures_its_spec_declares(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SoftLabelSpec.figures was declared and documented, but the runner read only an aggregator's: never drawn."""
    (tmp_path / "user").mkdir()
    soft = {"distillation.method": "soft_figure_plugins:SOFT", "distillation.public_size": 200, "distillation.subset_size": 100, "federation.rounds": 1}
    with plugin_module(tmp_path / "user", monkeypatch, "soft_figure_plugins", SOFT_PLUGIN):
        assert runner.method_figures(load_config(None, {**BASE, **soft})) == ("soft_rounds",)
        pngs = run_pngs(tmp_path / "runs", "soft", **soft)
    png_size(pngs["soft_rounds.png"])
    assert runner.method_figures(load_config(None, {**BASE, **soft, "distillation.method": "dsfl"})) == ()  # the built-in declares none
