"""The soft-label family's one way in: a typed spec per method, found by module or import path, with a typed client state."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from chillfl.errors import ConfigError
from chillfl.protocols.softlabels import ClientState, ClientStore, SoftLabelSpec, StoredState
from chillfl.settings.distillation import built_in_names, method_settings, parse_distillation

SRC = Path(__file__).resolve().parents[1] / "src"


def test_listing_the_built_in_methods_imports_no_torch() -> None:
    code = ("import sys; from chillfl.settings.distillation import built_in_names\n"
            "names = built_in_names(); assert 'torch' not in sys.modules, 'torch'; print(','.join(names))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env={"PYTHONPATH": str(SRC)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().split(",") == list(built_in_names()) and "selective_fd" in built_in_names()


def test_a_user_spec_is_found_by_import_path_like_a_built_in() -> None:
    spec = method_settings("chillfl.distillation.methods.scarlet:SPEC")
    assert spec is method_settings("scarlet") and isinstance(spec, SoftLabelSpec)
    setup = parse_distillation({"method": "chillfl.distillation.methods.scarlet:SPEC", "public_size": 10, "subset_size": 5, "beta": 1.5})
    assert setup.options.beta == 1.5 and setup.cache_duration == 50  # the spec's default D


@pytest.mark.parametrize("path", ["chillfl.options:NoOptions", "chillfl.distillation.methods.scarlet:SCARLET"])
def test_an_import_path_that_names_no_spec_is_one_config_error(path: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_distillation({"method": path, "public_size": 10, "subset_size": 5})
    assert info.value.field == "distillation.method" and "SoftLabelSpec" in info.value.message


def test_a_method_state_round_trips_on_a_flower_node() -> None:
    """The node keeps a method's state as named tensors (``method.<name>``) and gives it back for its client half."""
    from flwr.app import RecordDict

    from chillfl.distillation.methods.selective_fd import SelectorState
    from chillfl.flower.state import load_client_state, save_client_state

    records = RecordDict()
    save_client_state(records, 1, ClientState({"w": torch.ones(2)}, None, SelectorState(torch.tensor([True, False, True]))))
    back = load_client_state(records, 1)
    assert isinstance(back, ClientState) and isinstance(back.method, StoredState)
    assert back.method.to_tensors()["in_distribution"].tolist() == [True, False, True]


def test_a_client_without_a_method_state_stores_none() -> None:
    store = ClientStore(on_disk=True)
    try:
        store.save(0, ClientState({"w": torch.zeros(1)}))
        back = store.load(0)
        assert back is not None and back.method is None
    finally:
        store.close()


def test_scarlet_and_dsfl_defaults_follow_the_paper() -> None:
    # SCARLET Sec. IV: cache duration D = 50, beta = 2.0 (CIFAR-10, alpha = 0.05), 1,000 public samples a round,
    # lr 0.1 for client-server distillation; Table V: DS-FL's ERA temperature T = 0.1 (CIFAR-10). Only SCARLET caches.
    from chillfl.distillation.methods import dsfl, scarlet
    from chillfl.settings.distillation import DistillationOptions

    assert scarlet.SPEC.default_cache_duration == 50 and dsfl.SPEC.default_cache_duration == 0
    assert scarlet.SCARLETOptions().beta == 2.0
    assert (dsfl.DSFLOptions().temperature, dsfl.DSFLOptions().aggregation) == (0.1, "era")
    common = DistillationOptions(method="scarlet")
    assert (common.subset_size, common.distill_lr) == (1000, 0.1)
