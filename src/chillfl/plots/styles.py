"""A variant's line style in figures of many variants (a comparison's curves, the HTML report's): no matplotlib here,
so that the report imports it without the ``plots`` extra."""

from __future__ import annotations

STYLES = ("-", "--", ":", "-.")
"""A variant's line style, the next one for every ten variants: ten colours alone gave the 11th variant the 1st one's."""


def variant_style(index: int) -> tuple[str, str]:
    """(colour, line style) of the ``index``-th variant: ``C0``-``C9`` solid, then dashed, dotted, dash-dotted, so that up
    to forty variants are told apart, each the same in every panel."""
    return f"C{index % 10}", STYLES[(index // 10) % len(STYLES)]
