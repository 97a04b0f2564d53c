"""The class x client heat map past about one client a pixel (report-scale #4).

At most 16 in wide (~1,460 plot pixels at 120 dpi), one ``imshow`` column a client drew 20,000 clients as one client
in 13, the rest dropped, and could draw stripes the data lacks: client i holding class 0 iff i % 13 == 0 came out as ~60
broad class-0 stripes. Past ``HEATMAP_MAX_COLUMNS`` clients a column is now a block of clients in order, coloured by
their mean class share, and the title says so; below it the map is as it was.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from chillfl.data.show import plot_class_heatmap  # noqa: E402


def _alias(n: int) -> np.ndarray:
    counts = np.zeros((n, 2), dtype=np.int64)
    every13 = np.arange(n) % 13 == 0
    counts[every13, 0] = 10
    counts[~every13, 1] = 10
    return counts


def test_20000_clients_are_drawn_in_blocks_without_the_stripes_the_data_lacks(tmp_path: Path, drawn: list[Any]) -> None:
    path = tmp_path / "alias.png"
    plot_class_heatmap(_alias(20_000), path, title="alias")
    fig = drawn[-1]
    ax = fig.axes[0]
    (image,) = ax.get_images()
    grid = np.asarray(image.get_array())
    assert grid.shape[1] <= 1_460  # at most one a pixel (old: 20,000 columns into ~1,460 pixels)
    per = -(-20_000 // grid.shape[1])
    assert fig._suptitle.get_text().replace("\n", " ") == f"alias (20,000 clients, {per} a column: their mean class share)"
    assert ax.get_xlim() == (-0.5, 20_000 - 0.5)  # the x axis still counts clients
    # each column: the share of its block's clients that hold class 0, at most 2 in 15 (old: ~60 broad class-0 stripes)
    expected = [np.mean(np.arange(s, min(s + per, 20_000)) % 13 == 0) for s in range(0, 20_000, per)]
    np.testing.assert_allclose(grid[0], expected)
    np.testing.assert_allclose(grid[1], 1 - np.asarray(expected))
    # the PNG itself: the class-0 row's pixels stay dark across the plot
    from matplotlib.image import imread

    pixels = imread(str(path))
    box = ax.get_window_extent()
    scale = pixels.shape[1] / fig.bbox.width
    row = pixels[int(pixels.shape[0] - (box.y0 + box.height / 4) * scale), int((box.x0 + 2) * scale):int((box.x1 - 2) * scale), :3]
    assert row.sum(axis=1).max() < 1.0  # viridis' dark end (0.27, 0, 0.33)-ish; a class-0 stripe's yellow sums to ~2


def test_client_blocks_are_the_mean_class_share_of_their_clients() -> None:
    from chillfl.data.show import client_blocks

    counts = np.array([[2, 2], [0, 4], [0, 0], [3, 1], [1, 0]])  # client 2 holds no rows: left out of its block's mean
    blocks = client_blocks(counts, 2)
    np.testing.assert_allclose(blocks, [[0.25, 0.75], [0.75, 0.25], [1.0, 0.0]])
    np.testing.assert_allclose(client_blocks(np.zeros((3, 2)), 2), np.zeros((2, 2)))


def test_up_to_the_limit_each_client_is_a_column_of_counts_as_before(tmp_path: Path, drawn: list[Any]) -> None:
    from chillfl.data.show import HEATMAP_MAX_COLUMNS

    counts = _alias(HEATMAP_MAX_COLUMNS)
    plot_class_heatmap(counts, tmp_path / "heat.png", title="alias")
    fig = drawn[-1]
    (image,) = fig.axes[0].get_images()
    assert np.array_equal(np.asarray(image.get_array()), counts.T)
    assert fig._suptitle.get_text() == "alias"
    assert fig.axes[1].get_ylabel() == "samples"
