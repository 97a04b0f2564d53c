"""Mend from report-rev109b 4: an ``[objective] terms`` entry without a name is named by its index
(``objective.terms[2]``), as every other entry refusal is; it named the list (``objective.terms``)."""

from __future__ import annotations

import pytest

from chillfl.config import ObjectiveConfig
from chillfl.errors import ConfigError


@pytest.mark.parametrize(("terms", "field"), [(("ntd", "decorr", {"beta": 2.0}), "objective.terms[2]"), (("",), "objective.terms[0]"),
                                              (("ntd", {"name": ""}), "objective.terms[1]")])
def test_a_term_entry_without_a_name_is_named_by_its_index(terms: tuple[object, ...], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        ObjectiveConfig(terms=terms).validate("objective")  # type: ignore[arg-type]
    assert err.value.field == field
