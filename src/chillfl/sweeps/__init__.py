"""Planning and running sweeps: ``chillfl compare``, ``chillfl.compare`` and each claim of ``chillfl reproduce``.

* :mod:`chillfl.sweeps.plan`: what a comparison runs: its variants (a ``--grid``, the config's
  ``[variants]``, step-size controls), seeds and tuning grid, every run's config, checked before
  anything runs;
* :mod:`chillfl.sweeps.record`: ``sweep.json``, the plan as its folder records it, and matching a
  folder to a plan (resume, reuse of a finished comparison);
* :mod:`chillfl.sweeps.resume`: what an interrupted comparison left of each run (finished,
  diverged, stopped with a checkpoint);
* :mod:`chillfl.sweeps.run`: running the plan (worker pools, one run after another, failures,
  resume), the tuned point per variant, and the tables.

Imports flow one way: the sweeps render their results with :mod:`chillfl.report` (the tables,
caveats and figures), which never imports them.
"""
