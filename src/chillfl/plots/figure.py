"""Writing matplotlib figures without pyplot (no global figure state, no display)."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Literal, Mapping, Sequence

from chillfl.extras import need
from chillfl.storage.results import nulls_as_nan as nulls_as_nan  # defined beside series (matplotlib-free): the HTML report's bands use it too

need("matplotlib", "plots", "plots")  # one MissingExtra line instead of an ImportError
from matplotlib.artist import Artist  # noqa: E402
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.figure import Figure as MatplotlibFigure  # noqa: E402
from matplotlib.ticker import Formatter, ScalarFormatter  # noqa: E402

__all__ = ["Figure", "centre_title_over_axes", "figure_file", "finish_figure", "fit_title", "gap_marker", "legend_below",
           "literal", "log_scale", "lone_spread", "mark_lone_points", "measured_series", "no_offset", "nulls_as_nan", "percent_axis", "plain_log_labels",
           "save_figure", "save_png", "shared_legend", "spans_decades", "wrapped"]


def no_offset(fig: MatplotlibFigure) -> None:
    """Every linear axis of ``fig`` labelled with its values themselves, never with matplotlib's offset: an axis of
    686.064 to 686.088 kB was labelled 0.065 ... 0.085 under a small "+6.86e2", and a loss of 2.306334 ... 2.306340
    read 4 ... 10 under "1e-6+2.30633" (the curve "fell from 10 to 4"). A formatter other than matplotlib's plain one
    (percent, log) is left as it is."""
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            formatter = axis.get_major_formatter()
            if isinstance(formatter, ScalarFormatter):
                formatter.set_useOffset(False)


class Figure(MatplotlibFigure):
    """matplotlib's figure whose axes never use an offset (:func:`no_offset`), from the moment each is added, so that a
    layout (``tight_layout``) is worked out with the labels that are drawn. :func:`save_figure` applies it again to a
    figure made otherwise (matplotlib's own, an axis whose scale was set after it was added)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.add_axobserver(no_offset)  # called as each axes is added (a twin, a colour bar's included)


def literal(text: str) -> str:
    """``text`` (a run or variant name, a title, a label a user chose) as matplotlib draws it literally: every ``$``
    escaped. Unescaped, two ``$`` were parsed as mathtext, so a legal run name ``lr_$a_b_c$`` ended ``report`` and
    ``compare`` in a mathtext traceback (a comparison left ``.partial`` after all its runs trained), and ``fee=$10$``
    was drawn in math italics. Applied once, where the user's text becomes a matplotlib text (chillfl draws no mathtext
    of its own; a tick formatter's is left alone)."""
    return text.replace("$", r"\$")


def save_png(fig: MatplotlibFigure, path: str | Path, dpi: int = 100) -> Path:
    """Render ``fig`` with the Agg canvas to ``path`` as PNG (parent folders created; :func:`save_figure`); returns the path."""
    return save_figure(fig, path, dpi, "png")


def save_figure(fig: MatplotlibFigure, path: str | Path, dpi: int = 100, format: str | None = None) -> Path:
    """Render ``fig`` (Agg canvas) to ``path``, in ``format`` or the one its suffix names, atomically and without following
    a link at ``path``: drawn into a new file beside it, then renamed over the name. A ``path`` without a suffix gets the
    format's (``.png`` by default), as ``savefig(path)`` named it; the path written is returned.

    Why: an analysis's default output is ``<RUN_DIR>/analysis/``, inside a run folder that may have been received from
    someone else; ``savefig(path)`` opened a planted ``reliability.png -> ~/.bashrc`` and overwrote what it pointed to.
    ``os.replace`` replaces the link itself. An interrupted draw also leaves no half-written image under the name."""
    import io

    from chillfl.storage.checkpoint import write_atomic

    out = Path(path)
    if not out.suffix:  # as savefig(path) names it: a caller's plot_curves(..., "acc") then finds acc.png
        out = out.with_name(f"{out.name}.{format or 'png'}")
    FigureCanvasAgg(fig)
    no_offset(fig)  # every figure written, also one made from matplotlib's Figure or rescaled since its axes were added
    centre_title_over_axes(fig)
    image = io.BytesIO()  # drawn in memory first: an image is small, and a failed draw leaves the old file as it was
    fig.savefig(image, format=format or out.suffix[1:].lower(), dpi=dpi)
    out.parent.mkdir(parents=True, exist_ok=True)  # once drawn: a draw interrupted (Ctrl-C) leaves no empty folder
    write_atomic(out, image.getvalue())  # O_NOFOLLOW temp file, then os.replace over the name (a link there, replaced)
    return out


def figure_file(output: str, field: str) -> Path:
    """A figure file a user named (``-o``), checked before anything is computed: without a suffix it is a PNG named so
    (matplotlib would write ``name.png``, so the line naming the file would name one that does not exist), and a suffix
    matplotlib writes no format for (``.txt``), or a folder (one there, or one named by a trailing ``/``:
    :func:`~chillfl.paths.names_folder`), is one line on ``field``, not a traceback after the work."""
    from matplotlib.backend_bases import FigureCanvasBase

    from chillfl.errors import ConfigError
    from chillfl.options import short_path
    from chillfl.paths import check_name_lengths, names_folder

    path = Path(output)
    check_name_lengths(output, field, ("" if path.suffix else ".png") + ".tmp")  # is_dir() raises for one over 255 bytes; written as NAME.tmp
    if path.is_dir():  # before the suffix: a folder's name would otherwise become folder.png beside it
        raise ConfigError(field, f"{output} is a folder; give a .png file path")
    if names_folder(output):  # `-o new/`, new not there yet: Path() drops the slash, and new.png was written beside it
        raise ConfigError(field, f"{output} names a folder; give a .png file path, e.g. {path / 'figure.png'}")
    if not path.suffix:
        return path.with_name(path.name + ".png")
    formats = FigureCanvasBase.get_supported_filetypes()
    if path.suffix[1:].lower() not in formats:
        others = ", ".join(f".{f}" for f in sorted(formats) if f != "png")
        raise ConfigError(field, f"{short_path(str(output))}: no image format is written as {path.suffix!r}; give a .png path (or {others})")
    return path


def mark_lone_points(ax: Any) -> None:
    """A marker on every line with a finite point that has no finite neighbour (a 1-round run, or a value alone between
    NaN gaps): a line through one point draws nothing, so that value was not drawn at all."""
    for line in ax.get_lines():
        if line.get_marker() in ("None", None, "") and has_lone_point([float(y) for y in line.get_ydata()]):
            line.set_marker("o")


def lone_indices(values: Sequence[float]) -> list[int]:
    """Indices of the finite values in ``values`` with no finite value next to them (a line draws no segment through them)."""
    finite = [math.isfinite(v) for v in values]
    return [i for i, ok in enumerate(finite) if ok and not (i > 0 and finite[i - 1]) and not (i + 1 < len(finite) and finite[i + 1])]


def lone_spread(ax: Any, xs: Sequence[float], mean: Sequence[float], std: Sequence[float], colour: str) -> None:
    """An error bar of +- ``std`` at each lone point of ``mean`` (:func:`lone_indices`): a band shaded with
    ``fill_between`` has no width at a point alone (a 1-round run), so its spread over seeds was not drawn at all."""
    lone = [i for i in lone_indices([float(m) for m in mean]) if math.isfinite(float(std[i]))]
    if lone:
        ax.errorbar([xs[i] for i in lone], [mean[i] for i in lone], yerr=[std[i] for i in lone], fmt="none", ecolor=colour,
                    alpha=0.5, capsize=4, lw=2)


def has_lone_point(values: Sequence[float]) -> bool:
    """Whether some finite value in ``values`` has no finite value next to it (a line draws no segment through it)."""
    return bool(lone_indices(values))


def measured_series(records: Sequence[Mapping[str, Any]], key: str) -> tuple[list[int], list[float]]:
    """(rounds, values) of the rounds whose record has ``key``, a null as NaN (:func:`nulls_as_nan`; none at all where
    ``key`` is null in every round)."""
    kept = [r for r in nulls_as_nan(records, key) if r.get(key) is not None]
    return [int(r["round"]) for r in kept], [float(r[key]) for r in kept]


def gap_marker(rounds: Sequence[int]) -> str | None:
    """``"."`` when ``rounds`` skip a round (``eval.every`` > 1, a skipped round): a plain line through the rounds
    between read as values measured there; a dot on each measured round says where the data are. None otherwise."""
    return "." if any(b - a > 1 for a, b in zip(rounds, rounds[1:])) else None


def percent_axis(ax: Any, which: Literal["x", "y"] = "y") -> None:
    """``ax``'s ``which`` axis, whose data are accuracies as shares (0 to 1, as metrics.jsonl records them), labelled in
    percent (50 %): the HTML report and differences.png give accuracy in percent and points, and one report read 0.5 in
    one figure beside 50 in the next."""
    from matplotlib.ticker import PercentFormatter

    (ax.xaxis if which == "x" else ax.yaxis).set_major_formatter(PercentFormatter(xmax=1.0, decimals=None))


def spans_decades(values: Sequence[float]) -> bool:
    """Whether positive ``values`` differ by more than a factor of 10: a log axis then keeps the small ones readable,
    while within one decade a linear axis reads better (a log axis there has one labelled tick or none)."""
    positive = [v for v in values if v > 0]
    return bool(positive) and max(positive) > 10 * min(positive)


def log_scale(ax: Any, which: Literal["x", "y"]) -> None:
    """``ax``'s ``which`` axis (``"x"`` or ``"y"``) logarithmic, labelled as :func:`plain_log_labels` says."""
    getattr(ax, f"set_{which}scale")("log")
    plain_log_labels(ax.xaxis if which == "x" else ax.yaxis)


def plain_log_labels(axis: Any) -> None:
    """A log ``axis`` (an axes' or a colour bar's) labelled 2, 5, 10, 20, 50, ...: matplotlib's own labels of a log axis
    spanning a decade or two are 2x10^1, 3x10^1, 4x10^1, ..., which run into each other. Where the view holds fewer than
    two of those (values between 0.22 and 0.4, say), every tick in it is labelled (0.3, 0.4), so that the axis still reads."""
    formatter = PlainLogFormatter(axis)
    axis.set_major_formatter(formatter)
    axis.set_minor_formatter(formatter)


def _mantissa(value: float) -> float:
    from math import floor, log10

    return round(value / 10 ** floor(log10(value)), 6) if value > 0 else 0.0


class PlainLogFormatter(Formatter):
    """:func:`plain_log_labels`' labels. Whether the view is sparse is decided once per set of ticks
    (:meth:`format_ticks`): decided per label, it located every tick again for each one (0.45 s for one figure)."""

    def __init__(self, axis: Any) -> None:
        self.labelled = axis
        """The axis whose ticks decide (matplotlib's own ``self.axis`` may be a stand-in without tick locations)."""

    def __call__(self, x: float, pos: int | None = None) -> str:
        return self._labels([x])[0]

    def format_ticks(self, values: Sequence[float]) -> list[str]:
        return self._labels(values)

    def _labels(self, values: Sequence[float]) -> list[str]:
        axis = self.labelled
        low, high = sorted(axis.get_view_interval())
        in_view = [t for t in (*axis.get_majorticklocs(), *axis.get_minorticklocs()) if low <= t <= high]
        sparse = sum(_mantissa(t) in (1.0, 2.0, 5.0) for t in in_view) < 2
        return [f"{v:g}" if sparse or _mantissa(v) in (1.0, 2.0, 5.0) else "" for v in values]


LEGEND_ROWS = 16
"""Entries per column of :func:`shared_legend`: sixteen at 8 pt fill a 4-inch figure's height."""


def shared_legend(fig: MatplotlibFigure, axes: Sequence[Any], fontsize: float = 8) -> None:
    """One legend for panels that draw the same variants in the same colours, outside them on the right (constrained
    layout makes the room): a legend per panel repeats itself and, with a few variants, covers their curves. An entry
    is taken once, from the first panel that has it."""
    entries: dict[str, Artist] = {}  # a legend entry's text -> the line (or patch) it shows
    for ax in axes:
        for handle, text in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(text, handle)
    if entries:
        fig.set_layout_engine("constrained")
        columns = 1 + (len(entries) - 1) // LEGEND_ROWS  # a column taller than the figure was cut off at its foot
        fig.legend(list(entries.values()), list(entries), loc="outside right upper", fontsize=fontsize, ncols=columns)


BELOW_INCHES = 0.5
"""How far under an axes' bottom edge :func:`legend_below` puts the legend's top: below its tick labels and x label at
10 pt."""


def legend_below(ax: Any, fontsize: float = 8) -> Any:
    """``ax``'s legend under it, below its tick labels and x label (at least :data:`BELOW_INCHES`, more where they are
    taller: several lines of a wrapped run name), whatever size layout gives the axes: inside, a legend hid the points
    under it wherever it went when points fill every corner (a scatter). Call it once the tick labels are set; tight
    layout makes the room (an axes' tight box holds its legend)."""
    from matplotlib.transforms import ScaledTranslation

    fig = ax.figure
    inches = BELOW_INCHES
    if fig.canvas is not None and hasattr(fig.canvas, "get_renderer"):  # the x axis' labels measured (an Agg canvas)
        renderer = fig.canvas.get_renderer()
        labels = ax.xaxis.get_tightbbox(renderer)
        if labels is not None:
            inches = max(inches, (ax.get_window_extent(renderer).y0 - labels.y0) / fig.dpi + 0.1)
    under = ax.transAxes + ScaledTranslation(0.0, -inches, fig.dpi_scale_trans)
    return ax.legend(fontsize=fontsize, loc="upper center", bbox_to_anchor=(0.5, 0.0), bbox_transform=under, borderaxespad=0.0)


def wrapped(text: str, inches: float, points: float = 10.0, break_words: bool = True) -> str:
    """``text`` wrapped to the characters ``inches`` hold at ``points`` (:data:`TITLE_EM`), each line of it kept: an
    axes title as long as a run's name ran past both edges of the figure. ``break_words = False``: broken at a run name's
    separators, inside a word only where it is longer than a line, and never inside a number where another place will
    do (a run name's ``lr0.05`` read as ``lr0.0`` over ``5``): :func:`_packed`."""
    import textwrap

    chars = max(20, int(inches * 72 / (TITLE_EM * points)))
    if not break_words:
        return "\n".join(part for line in text.split("\n") for part in _packed(line, chars))
    return "\n".join(part for line in text.split("\n") for part in (textwrap.wrap(line, chars, break_long_words=True) or [""]))


_SPACED = re.compile(r"(?<=\s)|(?<=[A-Za-z0-9.]-)(?<![0-9.][eE]-)")
"""Where a run name's options part: after a space or a hyphen, but not after a minus sign (``=-1``) or an exponent's
hyphen (``1e-05``), which would split a number."""

_JOINED = re.compile(r"(?<=[_/,])")
"""Where else a name may break: after ``_``, ``/`` or ``,`` (``fedprox_mu0.01_lr0.05``, ``parent/name``)."""

_NUMBER = re.compile(r"-?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")


def _packed(line: str, chars: int) -> list[str]:
    """``line`` packed greedily into lines of at most ``chars``, broken after spaces and hyphens (textwrap breaks at a
    hyphen only between letters, so ``lr0.05-objective`` stayed whole), a part still longer than ``chars`` after
    ``_``, ``/`` and ``,`` (a name of underscores stayed one line, over its neighbours'), and one longer still inside,
    as textwrap did, outside its numbers where it can (:func:`_cut`). One option of a hyphen-joined name
    (``objective.proximal_mu0.01-``) is kept whole up to half as long again as ``chars``: its ``_`` is inside a key."""
    options = _SPACED.split(line)
    longest = chars * 3 // 2 if len(options) > 1 else chars
    parts = [p for option in options
             for p in ([option] if len(option.rstrip()) <= longest else
                       [piece for word in _JOINED.split(option) for piece in _cut(word, chars)])]
    out = [""]
    for part in parts:
        if out[-1] and len(out[-1]) + len(part.rstrip()) > chars:
            out[-1] = out[-1].rstrip()
            out.append("")
        out[-1] += part
    return [o.rstrip() for o in out]


def _cut(part: str, chars: int) -> list[str]:
    """``part`` in pieces of at most ``chars`` (its trailing space aside), each cut at the last place that splits no
    number (``lr0.05`` read as ``lr0.0`` over ``5``), or at ``chars`` where every place does."""
    pieces = []
    while len(part.rstrip()) > chars:
        inside = {i for m in _NUMBER.finditer(part) for i in range(m.start() + 1, m.end())}
        at = next((i for i in range(chars, 0, -1) if i not in inside), chars)
        pieces.append(part[:at])
        part = part[at:]
    return [*pieces, part]


def centre_title_over_axes(fig: MatplotlibFigure) -> None:
    """Centre ``fig``'s suptitle over its axes when a figure legend stands beside them: centred over the whole figure it
    stood off to the side of the panels it names, over the legend's column. Laid out once first (the panels' place is
    known only then); the title kept inside the figure's edges. Nothing without a figure legend or a suptitle."""
    title = fig.get_suptitle()
    texts = [t for t in fig.texts if t.get_text() == title]
    if not (fig.legends and title and texts and fig.axes):
        return
    fig.draw_without_rendering()  # runs the layout engine: the axes' final positions
    left = min(ax.get_position().x0 for ax in fig.axes)
    right = max(ax.get_position().x1 for ax in fig.axes)
    width = texts[0].get_window_extent().width / fig.bbox.width
    centre = min(max((left + right) / 2, width / 2), 1 - width / 2)
    texts[0].set_x(centre)
    texts[0].set_horizontalalignment("center")


TITLE_EM = 0.62
"""A title character's mean width in ems (DejaVu Sans, with room for wide ones): how many fit a figure's width."""


def fit_title(fig: MatplotlibFigure, title: str) -> None:
    """``title`` over the whole figure at matplotlib's suptitle size, wrapped to the characters its width holds: a long
    run name (a comparison's, every option of its variant and the seed) ran past both edges of the image."""
    from matplotlib import rcParams
    from matplotlib.font_manager import FontProperties

    fig.suptitle(literal(wrapped(title, fig.get_figwidth(), FontProperties(size=rcParams["figure.titlesize"]).get_size_in_points())))


def finish_figure(fig: MatplotlibFigure, axes: Sequence[Any], path: str | Path, title: str = "", shared: bool = False) -> Path:
    """A run figure's last steps: a light grid and, where a panel has labelled lines, its legend on every panel (with
    ``shared``, one legend for all beside them: :func:`shared_legend`); the title; tight layout; the PNG at the run
    figures' 110 dpi. One place, so that every run figure looks alike."""
    for ax in axes:
        ax.grid(alpha=0.3)
        if not shared and ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    if shared:
        shared_legend(fig, axes)
    if title:
        fit_title(fig, title)
    if fig.get_layout_engine() is None:
        fig.tight_layout()
    return save_png(fig, path, dpi=110)
