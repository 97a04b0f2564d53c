"""The ``[ray]`` note names every option off its default, in the fields' order, as the table's values read."""

from __future__ import annotations

from chillfl.config import config_from_dict
from chillfl.experiment import ignored_ray_note
from test_flowerfix2_ray_note import TINY


def test_every_ray_option_off_its_default_is_named_in_field_order() -> None:
    """ignored_ray_note compares the table with its defaults as dicts (no getattr walk); the note is the one it said."""
    ray = {"start_timeout": 5, "max_retries": 0, "workers": 2, "num_gpus": 0.5, "num_cpus": 3, "address": "h:1"}  # not in field order
    note = ignored_ray_note(config_from_dict({**TINY, "executor": "processes", "ray": ray}))
    assert note == ("note: ray.address = 'h:1', ray.num_cpus = 3.0, ray.num_gpus = 0.5, ray.workers = 2, ray.max_retries = 0, "
                    "ray.start_timeout = 5.0 are ignored: executor = 'processes' runs the client updates without Ray; "
                    'executor = "ray" runs them on it (docs/ray.md)')
    assert ignored_ray_note(config_from_dict({**TINY, "ray": {"num_cpus": 1.0, "max_retries": 3}})) is None  # set, but to the defaults
