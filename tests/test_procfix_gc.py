"""A library import or a lazy API name freezes nothing: the caller's reference cycles stay collectable (was gc.freeze())."""

from __future__ import annotations

import subprocess
import sys

CYCLE = (
    "import gc, weakref\n"
    "frozen = gc.get_freeze_count()\n"  # the interpreter's own: 0 on 3.11, hundreds on 3.12+
    "class Node: pass\n"
    "a, b = Node(), Node(); a.b, b.a = b, a\n"
    "w = weakref.ref(a)\n"
)


def _ok(code: str) -> None:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_a_cycle_made_before_import_chillfl_is_freed() -> None:
    _ok(CYCLE + "import chillfl\ndel a, b; gc.collect()\nassert w() is None, 'cycle kept alive'\nprint('ok')\n")


def test_a_cycle_made_before_the_first_access_of_an_api_name_is_freed() -> None:
    _ok(CYCLE + "import chillfl\n_ = chillfl.run\ndel a, b; gc.collect()\nassert w() is None, 'cycle kept alive'\nassert gc.get_freeze_count() == frozen\nprint('ok')\n")


def test_the_command_still_freezes_the_run_modules_it_owns() -> None:
    _ok("import gc, sys\nfrozen = gc.get_freeze_count()\nfrom chillfl.cli import _own_process\n_own_process('list')\nassert gc.get_freeze_count() == frozen\n"
        "_own_process('run')\nassert 'torch' in sys.modules and gc.get_freeze_count() > 10000\nprint('ok')\n")
