"""The class x client heat map (``data show``, the report's partition) on a scale from 0 (report figvis, item 4).

Scaled from the smallest count, an IID split's 25-48 per cell spanned the whole map (a 25 as dark as an empty cell),
and the count labels, black above 0.6 x the largest count, were black on dark purple.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from matplotlib.colors import to_rgba  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402


def test_the_heat_map_scale_starts_at_0_and_each_count_is_readable_on_its_cell(tmp_path: Path, drawn: list[Figure]) -> None:
    from chillfl.data.show import plot_class_heatmap

    counts = np.array([[25, 48, 30], [40, 29, 45], [139, 146, 140]])  # [clients, classes]: IID-like, then one large client
    plot_class_heatmap(counts, tmp_path / "heat.png", title="iid")
    ax = drawn[-1].axes[0]
    (image,) = ax.get_images()
    assert image.norm.vmin == 0 and image.norm.vmax == 146
    texts = {int(t.get_text()): to_rgba(t.get_color()) for t in ax.texts if t.get_text().isdigit()}
    assert texts[29] == texts[48] == to_rgba("white")  # 29 and 48 of 146: the dark part of the scale, white text
    assert texts[139] == texts[146] == to_rgba("black")  # near the top: the light yellow end, black text
