"""Import torch with the cyclic garbage collector paused; chillfl's entry modules (runner, api) import this first.

Why: importing torch creates ~170k objects that live as long as the process,
and the collector's passes over them during the import are about a tenth of
it (0.07-0.1 s of the 0.7-1.0 s ``import torch`` takes on the benchmark
machine: measured as the import with and without ``gc.disable()``, in fresh
processes). Where chillfl owns the process (the command, a worker) they are frozen
afterwards (:func:`chillfl._freeze_import_objects`), so later collections skip them too;
a library import freezes nothing (it would freeze the caller's objects too). Nothing
changes when torch was imported before chillfl.
"""

from __future__ import annotations

import gc
import sys

if "torch" not in sys.modules:
    _enabled = gc.isenabled()
    gc.disable()
    try:
        import torch  # noqa: F401
    finally:
        if _enabled:
            gc.enable()
