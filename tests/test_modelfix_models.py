"""Model-side fixes: summary.json's num_parameters, ViT's patch, a user model whose constructor raises, FedBN's refusal."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from chillfl.cli import main
from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.models import build_model, count_parameters
from chillfl.runner import run_experiment

TINY = {"dataset.name": "digits", "federation.num_clients": 2, "federation.clients_per_round": 2, "federation.rounds": 1,
        "client.epochs": 1, "eval.client_split_size": 20}


def test_num_parameters_counts_trainable_parameters_not_batch_norm_statistics() -> None:
    """It summed every float entry of the state, running_mean/running_var too: 28,706 for a 28,646-parameter model,
    against summary's own architectures.*.parameters (count_parameters)."""
    out = run_experiment(load_config(None, {**TINY, "model.name": "flexchill_cnn", "model.batch_norm": True}), write=False, progress=False)
    model = build_model("flexchill_cnn", (1, 8, 8), 10, {"batch_norm": True})
    buffers = sum(b.numel() for b in model.buffers() if b.is_floating_point())
    assert buffers == 60 and out.summary["num_parameters"] == count_parameters(model) == 28_646


def test_the_docs_resnet20_count_is_the_models() -> None:
    """docs/fedchill.md quotes FedAlign's ResNet-20 at digits' shape; 270,810 counted its batch-norm statistics."""
    text = (Path(__file__).parents[1] / "docs" / "fedchill.md").read_text()
    count = count_parameters(build_model("resnet20", (1, 8, 8), 10))
    assert f"`resnet20`, {count:,} parameters" in text


@pytest.mark.parametrize("shape,patch", [((1, 8, 8), 3), ((3, 32, 32), 5), ((1, 28, 28), 8)])
def test_a_vit_patch_that_does_not_divide_the_image_is_refused_on_model_patch(shape: tuple[int, int, int], patch: int) -> None:
    """Its stride-p patch conv dropped the last rows and columns unseen: 32x32 at patch 5 read 30x30."""
    with pytest.raises(ConfigError) as info:
        build_model("vit", shape, 10, {"patch": patch, "dim": 8, "heads": 2, "mlp_dim": 8, "depth": 1})
    assert info.value.field == "model.patch" and f"must divide the {shape[1]}x{shape[2]} image" in str(info.value)


def test_a_vit_patch_that_divides_the_image_still_builds() -> None:
    assert count_parameters(build_model("vit", (1, 28, 28), 10, {"patch": 7, "dim": 8, "heads": 2, "mlp_dim": 8, "depth": 1})) > 0


def test_vit_patch_on_the_command_line_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--dry-run", "-q", "--out", str(tmp_path), "dataset.name=digits", "model.name=vit", "model.patch=3"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("chillfl: error: model.patch: must divide the 8x8 image") and "patches that divide it: 1, 2, 4, 8" in err[0], err
    assert not list(tmp_path.iterdir())


RAISES = """
from torch import nn


class Picky(nn.Module):
    def __init__(self, input_shape, num_classes, options, section):
        super().__init__()
        raise ValueError("my model does not like this input")
"""


@pytest.mark.parametrize("name,said", [("torch.nn:Linear", "RuntimeError: "), ("picky_model:Picky", "ValueError: my model does not like this input")])
def test_a_user_model_whose_constructor_raises_is_one_line_on_model_name(
    name: str, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], user_module: Callable[[str, str], None]
) -> None:
    user_module("picky_model", RAISES)
    out = tmp_path / "out"
    assert main(["run", "--dry-run", "-q", "--out", str(out), "dataset.name=digits", f"model.name={name}"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"chillfl: error: model.name: {name!r} fails to build for inputs of shape (1, 8, 8) and 10 classes"), err
    assert said in err[0]
    assert not out.exists()


def test_a_built_in_models_slip_is_not_blamed_on_the_user(monkeypatch: pytest.MonkeyPatch) -> None:
    """A registered model's error is chillfl's bug: raised as it is, not turned into a line on the config."""
    from chillfl.models.registry import MODELS

    def broken(*args: object) -> None:
        raise ZeroDivisionError("ours")

    monkeypatch.setitem(MODELS, "mlp", MODELS["mlp"]._replace(build=broken))
    with pytest.raises(ZeroDivisionError):
        build_model("mlp", (4,), 2)


@pytest.mark.parametrize("overrides,field,setting", [
    ({"model.name": "resnet18", "model.norm": "group"}, "model.norm", 'set model.norm = "batch"'),
    ({"model.name": "resnet18", "model.norm": "none"}, "model.norm", 'set model.norm = "batch"'),
    ({"model.name": "flexchill_cnn"}, "model.batch_norm", "set model.batch_norm = true"),
    ({"model.name": "mcmahan_cnn"}, "model.name", "choose a model with batch-norm layers"),  # the same module as flexchill_cnn, without the option
    ({"model.name": "mlp"}, "model.name", "choose a model with batch-norm layers"),
])
def test_fedbns_refusal_names_the_option_of_the_model_at_hand(overrides: dict[str, object], field: str, setting: str) -> None:
    """It said ``model.batch_norm = true`` for every model; resnet18 has no such option (its is ``norm``)."""
    with pytest.raises(ConfigError) as info:
        run_experiment(load_config(None, {**TINY, **overrides, "algorithm.name": "fedbn"}), write=False, progress=False)
    assert info.value.field == field and setting in str(info.value)
