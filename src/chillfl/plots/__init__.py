"""Figures of runs and comparisons (matplotlib, the ``plots`` extra): the run's own PNGs, communication, PA3Fed, privacy, attacks, seed bands.

Below everything that draws them (:mod:`chillfl.runner` after a run,
:mod:`chillfl.analysis`, :mod:`chillfl.report`): these modules read round
records and write files, and import none of their callers. Nothing is
imported here, so ``import chillfl.plots`` needs no matplotlib; each module
raises one :class:`~chillfl.extras.MissingExtra` line when it is absent.
"""
