"""Writing matplotlib figures without pyplot (no global figure state, no display)."""

from __future__ import annotations

from pathlib import Path

from chillfl.extras import need

need("matplotlib", "plots", "plots")  # one MissingExtra line instead of an ImportError
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

__all__ = ["Figure", "save_png"]


def save_png(fig: Figure, path: str | Path, dpi: int = 100) -> Path:
    """Render ``fig`` with the Agg canvas to ``path`` (parent folders created); returns the path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig)
    fig.savefig(out, format="png", dpi=dpi)
    return out
