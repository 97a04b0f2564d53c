"""Writing matplotlib figures without pyplot (no global figure state, no display)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from chillfl.extras import need

need("matplotlib", "plots", "plots")  # one MissingExtra line instead of an ImportError
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

__all__ = ["Figure", "finish_figure", "mark_lone_points", "save_png"]


def save_png(fig: Figure, path: str | Path, dpi: int = 100) -> Path:
    """Render ``fig`` with the Agg canvas to ``path`` (parent folders created); returns the path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig)
    fig.savefig(out, format="png", dpi=dpi)
    return out


def mark_lone_points(ax: Any) -> None:
    """A marker on every line of one point (a 1-round run): a line through one point draws nothing."""
    for line in ax.get_lines():
        if len(line.get_xdata()) == 1 and line.get_marker() in ("None", None, ""):
            line.set_marker("o")


def log_scale(ax: Any, which: str) -> None:
    """``ax``'s ``which`` axis (``"x"`` or ``"y"``) logarithmic, labelled 2, 5, 10, 20, 50, ...: matplotlib's own labels of a
    log axis spanning a decade or two are 2x10^1, 3x10^1, 4x10^1, ..., which run into each other."""
    from math import floor, log10

    def label(value: float, _: Any) -> str:
        mantissa = round(value / 10 ** floor(log10(value)), 6) if value > 0 else 0.0
        return f"{value:g}" if mantissa in (1.0, 2.0, 5.0) else ""

    getattr(ax, f"set_{which}scale")("log")
    axis = ax.xaxis if which == "x" else ax.yaxis
    axis.set_major_formatter(label)
    axis.set_minor_formatter(label)


def finish_figure(fig: Figure, axes: Sequence[Any], path: str | Path, title: str = "") -> Path:
    """A run figure's last steps: a light grid and, where a panel has labelled lines, its legend on every panel; the
    title; tight layout; the PNG at the run figures' 110 dpi. One place, so that every run figure looks alike."""
    for ax in axes:
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return save_png(fig, path, dpi=110)
