"""Run figures by name: a spec's ``figures`` names them, each plot module registers its own next to its code.

The runner draws the common figures and those the run's method and protocol declare
(:attr:`~chillfl.aggregation.registry.AlgorithmSpec.figures`), and those of the switched tables that are
on (a privacy mechanism's and an attack's ``figures``: ``privacy.png``, ``attack.png``), looking each
name up here; it imports no plot function and names no method. A plugin registers its figure the same
way (:func:`register_figure` at its module's import) and names it in its spec's ``figures``.
This module imports no matplotlib; :func:`registered_figures` imports the plot modules, so it
raises :class:`~chillfl.errors.MissingExtra` without the ``plots`` extra.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from chillfl.plugins import Registry

if TYPE_CHECKING:
    from chillfl.config import RunConfig

Records = Sequence[Mapping[str, Any]]

Draw = Callable[[Records, Path, str], object]
"""``draw(records, path, title)``: write the figure at ``path`` from the run's round records (it may
write nothing when the records lack its metrics); the return value is ignored."""

DrawRun = Callable[[Records, Path, "RunConfig"], object]
"""``draw_run(records, path, config)``: as :data:`Draw`, for a figure that reads the run's config too (its title is
``config.name``): what the records do not hold, such as a private run's target epsilon or the attack's kind."""


@dataclass(frozen=True)
class FigureSpec:
    """One run figure: the file it writes in the run folder and how to draw it.

    ``draw(records, path, title)`` writes the figure at ``path``, the run folder joined with ``file`` (not the folder
    itself), from the run's round records; ``title`` is the run's name. ``draw_run(records, path, config)``, where
    given, is what a run calls instead: the figure from the records and the run's config (``draw`` stays the one
    that needs only records).
    """

    file: str
    draw: Draw
    summary: str
    draw_run: DrawRun | None = None

    def render(self, records: Records, path: Path, config: RunConfig) -> None:
        """Draw the figure of a run with ``config`` at ``path`` (``draw_run`` where given, else ``draw`` titled with the run's name)."""
        if self.draw_run is not None:
            self.draw_run(records, path, config)
        else:
            self.draw(records, path, config.name)


_REGISTRY: Registry[FigureSpec] = Registry("figure", package="chillfl.plots")
"""Every plot module registers its figures next to its plot function; all are imported on the first lookup."""

COMMON = ("accuracy_loss", "temperatures")
"""The figures every run draws, before the ones its protocol and method declare."""


def register_figure(name: str, spec: FigureSpec) -> FigureSpec:
    """Name ``spec`` ``name`` (each plot module, next to its plot function); a name registered by another module is an error, by its own module again replaces (:class:`~chillfl.plugins.Registry`)."""
    return _REGISTRY.register(name, spec)


def registered_figures() -> dict[str, FigureSpec]:
    """Every registered figure by name, after importing the plot modules (MissingExtra without matplotlib)."""
    return _REGISTRY.specs()
