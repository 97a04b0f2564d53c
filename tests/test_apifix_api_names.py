"""``chillfl.api.__all__`` names every public function docs/api.md lists as a member of ``chillfl.api``: it left out
``resume`` and ``reproduce_paper``, which ``from chillfl.api import *`` then did not bring (report-apiref F7)."""

from __future__ import annotations

import chillfl
import chillfl.api


def test_api_all_holds_what_chillfl_exports_from_it() -> None:
    assert {"resume", "reproduce_paper"} <= set(chillfl.api.__all__)
    defined = {name for name, value in vars(chillfl.api).items() if getattr(value, "__module__", None) == "chillfl.api" and not name.startswith("_")}
    from_api = {name for name in chillfl.__all__ if name in defined}
    assert from_api <= set(chillfl.api.__all__), from_api - set(chillfl.api.__all__)
