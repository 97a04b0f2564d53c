"""``individual``: no collaboration (SCARLET Sec. IV-B): clients train on their private data only, no server model.

Checked against: kitsuyaazuma/SCARLET (branch ``reproducibility``) ``src/algorithm/individual.py`` (private training only).
"""

from __future__ import annotations

from chillfl.options import NoOptions
from chillfl.protocols.softlabels.method import SoftLabelMethod, SoftLabelSpec


class Individual(SoftLabelMethod[NoOptions]):
    """The server half of no collaboration: never asked to aggregate (the spec is not collaborative)."""


SPEC = SoftLabelSpec("individual", NoOptions, Individual, summary="no collaboration", collaborative=False)
