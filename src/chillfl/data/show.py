"""Human-readable views of a federated split: a text table and a class x client heat map.

The heat map mirrors FLex&Chill Fig. 5/6 and SCARLET Fig. 5: one column per
client, one row per class, colour = number of training samples. Past
:data:`HEATMAP_MAX_COLUMNS` clients a column is a block of clients, coloured by their mean class share.
"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import numpy as np

from chillfl.data.federated import FederatedData
from chillfl.extras import need
from chillfl.wording import counted


DESCRIBE_MAX_CLIENTS = 40
"""``describe`` lists at most this many clients' rows (the first half and the last half) unless asked for all: 10,000
clients printed 10,001 lines before the summary a reader looks for scrolled away; the totals cover every client."""


def describe(fd: FederatedData, max_clients: int | None = DESCRIBE_MAX_CLIENTS) -> str:
    """Per-client table (train size, eval size, noise sigma, class counts) plus totals; ``max_clients`` rows at most
    (``None``: every client), a ``...`` line saying how many were left out."""
    counts = fd.class_counts()
    classes = [f"c{c}" for c in range(fd.num_classes)]
    header = ["client", "train", "eval"] + (["sigma"] if fd.noise is not None else []) + classes
    shown = list(range(fd.num_clients))
    head = len(shown)  # the rows before the "..." line
    if max_clients is not None and fd.num_clients > max_clients + 1:  # one row left out would cost the "..." line it saves
        head = (max_clients + 1) // 2
        shown = shown[:head] + shown[fd.num_clients - (max_clients - head):]
    rows = []
    for cid in shown:
        row = [str(cid), str(len(fd.train_indices[cid])), str(len(fd.eval_indices[cid]))]
        if fd.noise is not None:
            row.append(f"{fd.noise[cid]:.3f}")
        rows.append(row + [str(v) for v in counts[cid]])
    total = ["total", str(int(counts.sum())), str(sum(len(e) for e in fd.eval_indices))]
    if fd.noise is not None:
        total.append("")
    rows.append(total + [str(v) for v in counts.sum(axis=0)])
    widths = [max(len(header[j]), *(len(r[j]) for r in rows)) for j in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  ".join(cell.rjust(w) for cell, w in zip(cells, widths))

    lines = [line(r) for r in rows]
    if len(shown) < fd.num_clients:
        lines.insert(head, f"... {counted(fd.num_clients - len(shown), 'client')} not shown (`data show --all` prints every row; the totals below count them)")

    sizes = counts.sum(axis=1)
    held_out = fd.validation_indices
    n_val = 0 if held_out is None else len(held_out)
    summary = (
        f"{fd.dataset.name}: {fd.num_clients} clients, {fd.num_classes} classes, "
        f"train sizes min/mean/max {sizes.min()}/{sizes.mean():.1f}/{sizes.max()}, "
        f"public pool {len(fd.public_indices)}, test set {len(fd.dataset.y_test) - n_val}"  # what the test metrics score
        + (f", validation {n_val}" if held_out is not None else "")
    )
    legend = (  # the eval total can exceed the test set's size: a newcomer read it as a miscount
        "train: the client's training rows; eval: its own evaluation rows (eval.client_split), drawn from the test set, "
        "so clients' rows can overlap" + ("; sigma: its feature noise" if fd.noise is not None else "")
        + f"; c0..c{fd.num_classes - 1}: its training rows per class"
    )
    return "\n".join([summary, line(header), *lines, legend])


HEATMAP_MAX_WIDTH = 16.0
"""The heat map's widest figure, in inches (1920 px at its 120 dpi)."""


HEATMAP_EVERY_TICK = 20
"""Up to this many classes (clients), every row (column) of the heat map gets its tick label."""


HEATMAP_MAX_COLUMNS = 1400
"""Past this many clients the heat map draws blocks of clients, not clients: its widest plot is ~1,460 px, and one
column a client drew 1 client in 13 at 20,000 clients (the rest dropped) and stripes the data did not have."""


def client_blocks(counts: np.ndarray, per: int) -> np.ndarray:
    """[blocks, classes]: the mean class share (a client's rows of each class over its rows) of each run of ``per``
    clients in order (the last block may be shorter). A client without rows has no share and is left out of its
    block's mean; a block of such clients only is 0 in every class."""
    counts = np.asarray(counts, dtype=np.float64)
    sizes = counts.sum(axis=1)
    held = sizes > 0
    shares = np.divide(counts, sizes[:, None], out=np.zeros_like(counts), where=held[:, None])
    starts = np.arange(0, len(counts), per)
    held_in = np.add.reduceat(held.astype(np.float64), starts)
    out: np.ndarray = np.add.reduceat(shares, starts, axis=0) / np.maximum(held_in, 1.0)[:, None]
    return out


def plot_class_heatmap(counts: np.ndarray, path: str | Path, title: str = "") -> None:
    """Save a class x client heat map of ``counts`` ([clients, classes]) as a PNG (``path``'s suffix names another format;
    a ``path`` without one gets ``.png`` added, as matplotlib's ``savefig`` adds it).

    Past :data:`HEATMAP_MAX_COLUMNS` clients (about one a pixel), each column is a block of clients in order, coloured
    by their mean class share (:func:`client_blocks`), and the title says how many clients a column holds: drawn one
    column a client, the image showed one client in every few and could draw stripes the data lacks.
    Counts are written into the cells when the grid has at most 400 cells and the figure is not at its widest.
    Written as every chillfl figure is (:func:`save_heatmap`): atomically and never through a link at ``path``
    (``savefig(path)`` overwrote what a planted ``NAME-partition.png -> ~/.bashrc`` pointed to); a file that cannot be
    written (a full disk) is a :class:`~chillfl.errors.StorageError` naming it, not a traceback.
    """
    need("matplotlib", "plots", "heat maps")  # lazy: matplotlib is the `plots` extra
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import Normalize
    from matplotlib.figure import Figure

    counts = np.asarray(counts)
    n_clients, n_classes = counts.shape
    per = -(-n_clients // HEATMAP_MAX_COLUMNS)  # clients a column: 1 up to HEATMAP_MAX_COLUMNS clients
    grid = (client_blocks(counts, per) if per > 1 else counts).T  # rows: classes, columns: clients (or blocks of them)
    if per > 1:
        title = f"{title} " * bool(title) + f"({n_clients:,} clients, {per} a column: their mean class share)"
    # at most HEATMAP_MAX_WIDTH inches wide: 0.35 in a client made 200 clients an 8640 x 540 px strip (a page shows it
    # a few pixels high); past ~40 clients the cells only narrow, and the counts are not written in them anyway
    fig = Figure(figsize=(min(HEATMAP_MAX_WIDTH, max(4.0, 0.35 * n_clients + 2)), max(3.0, 0.3 * n_classes + 1.5)))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    # from 0: scaled from the smallest count, an IID split's 25-48 per cell spanned the whole map and a 25 was as dark as
    # an empty cell in a non-IID one (and a single client's 139-146 drew its 139 as if empty)
    scale = Normalize(vmin=0, vmax=float(grid.max()) if grid.size else 1.0)
    # a block's column spans its clients' ids on the x axis (the last, shorter block cut at the last client)
    extent = (-0.5, grid.shape[1] * per - 0.5, -0.5, n_classes - 0.5) if per > 1 else None
    image = ax.imshow(grid, aspect="auto", cmap="viridis", interpolation="nearest", origin="lower", norm=scale, extent=extent)
    if per > 1:
        ax.set_xlim(-0.5, n_clients - 0.5)
    fig.colorbar(image, ax=ax, label="samples" if per == 1 else "mean class share")
    ax.set_xlabel("client")
    ax.set_ylabel("class")
    if n_classes <= HEATMAP_EVERY_TICK:  # every class named: matplotlib's 0, 2, 4, ... left a reader counting rows
        ax.set_yticks(range(n_classes))
    if n_clients <= HEATMAP_EVERY_TICK:
        ax.set_xticks(range(n_clients))
    if n_classes * n_clients <= 400 and 0.35 * n_clients + 2 <= HEATMAP_MAX_WIDTH:  # each cell wide enough for its count
        for (row, col), value in np.ndenumerate(grid):
            colour = "black" if float(scale(value)) > 0.6 else "white"  # by the cell's place on the colour scale: viridis is light at its top
            ax.text(col, row, str(int(value)), ha="center", va="center", fontsize=6, color=colour)
    if title:
        fit_title(fig, title)
    fig.tight_layout()
    save_heatmap(fig, Path(path))


def save_heatmap(fig: Any, path: Path) -> None:
    """``fig`` drawn as :func:`chillfl.plots.figure.save_figure` draws (its format by ``path``'s suffix), into memory, then
    written with :func:`~chillfl.storage.checkpoint.write_atomic`: a link at ``path`` is replaced, not followed, and a
    failed write leaves no half-written image. A ``path`` without a suffix is written as ``path.png``, the name
    ``savefig(path)`` gave it before (a caller's ``plot_class_heatmap(counts, "heat")`` then opens ``heat.png``; drawn into a
    buffer, the PNG went to ``heat``). Not ``save_figure`` itself: ``chillfl.plots`` imports the config, which imports this
    package (a cycle between the packages)."""
    import io

    from chillfl.errors import StorageError
    from chillfl.storage.checkpoint import write_atomic

    if not path.suffix:
        path = path.with_name(path.name + ".png")
    image = io.BytesIO()
    fig.savefig(image, format=path.suffix[1:].lower(), dpi=120)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a full disk, a file where a folder must go: one line naming it (exit 1), as write_atomic's
        what = "no space left on the device" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else (exc.strerror or str(exc))
        raise StorageError(f"cannot write {path}: {what}") from exc
    write_atomic(path, image.getvalue())  # a StorageError naming the file when it cannot be written


def fit_title(fig: Any, title: str, fontsize: float = 10.0) -> None:
    """``title`` over the whole figure, wrapped to its width: a long run name must not be cut off at the image's edges."""
    import textwrap

    def drawn(text: str) -> str:  # a run name's $ drawn as written (plots.figure.literal's rule: chillfl.data does not
        return text.replace("$", r"\$")  # import chillfl.plots); escaped after wrapping, so a wrap never splits an escape

    renderer = fig.canvas.get_renderer()
    text = fig.suptitle(drawn(title), fontsize=fontsize)
    width = len(title)
    while width > 8 and text.get_window_extent(renderer).width > 0.96 * fig.bbox.width:
        width = max(8, int(width * 0.85))
        text.set_text("\n".join(drawn(line) for line in textwrap.wrap(title, width, break_long_words=True)))
