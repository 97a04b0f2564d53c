"""[dataset.augment]: crop/flip on hand-checked images, seeding, executors, normalisation, errors."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch import nn

from chillfl.api import run
from chillfl.data import load_dataset
from chillfl.data.augment import Augment, AugmentOptions, crop_flip, parse_augment
from chillfl.executors.sequential import ClientJob, SequentialExecutor
from chillfl.executors.processes import ProcessExecutor
from chillfl.executors.vectorized import VectorizedExecutor
from chillfl.errors import ConfigError
from chillfl.seeds import derive_seed
from chillfl.training.local import LocalSpec, model_state, step_batch

IMG = torch.tensor([[1.0, 2.0], [3.0, 4.0]]).view(1, 1, 2, 2)  # one 1-channel 2x2 image


def one(dy: int, dx: int, flip: bool, mode: str) -> torch.Tensor:
    return crop_flip(IMG, torch.tensor([dy]), torch.tensor([dx]), torch.tensor([flip]), 1, mode)[0, 0]


def test_zero_padding_crops_by_hand():
    # padded with zeros (p = 1):   0 0 0 0
    #                              0 1 2 0
    #                              0 3 4 0
    #                              0 0 0 0
    # crop 2x2 at (row dy, col dx):
    assert one(0, 1, False, "constant").tolist() == [[0, 0], [1, 2]]
    assert one(1, 0, False, "constant").tolist() == [[0, 1], [0, 3]]
    assert one(2, 2, False, "constant").tolist() == [[4, 0], [0, 0]]
    assert one(1, 1, False, "constant").tolist() == [[1, 2], [3, 4]]  # the centre is the image itself


def test_reflect_padding_crops_by_hand():
    # reflect (edge not repeated): row -1 = row 1, row 2 = row 0; same for columns:
    #   4 3 4 3
    #   2 1 2 1
    #   4 3 4 3
    #   2 1 2 1
    assert one(0, 0, False, "reflect").tolist() == [[4, 3], [2, 1]]
    assert one(0, 1, False, "reflect").tolist() == [[3, 4], [1, 2]]
    assert one(2, 1, False, "reflect").tolist() == [[3, 4], [1, 2]]


def test_flip_mirrors_the_crop_left_right():
    assert one(1, 1, True, "constant").tolist() == [[2, 1], [4, 3]]  # flip of the image itself
    assert one(0, 1, True, "constant").tolist() == [[0, 0], [2, 1]]  # crop [[0,0],[1,2]], then mirrored
    x = torch.arange(12.0).view(1, 1, 3, 4)  # no padding: a pure flip of a 3x4 image
    out = crop_flip(x, torch.tensor([0]), torch.tensor([0]), torch.tensor([True]), 0)
    assert torch.equal(out, x.flip(-1))


@pytest.mark.parametrize("mode, h, w, p", [("constant", 5, 5, 2), ("reflect", 5, 7, 3), ("reflect", 6, 4, 1), ("constant", 3, 8, 4)])
def test_batched_gather_equals_per_image_crops(mode, h, w, p):
    # [clients=2, batch=3, C=2, h, w]: the one gather equals padding with F.pad and slicing each image on its own
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 2, h, w, generator=g)
    dy, dx = torch.randint(0, 2 * p + 1, (2, 3), generator=g), torch.randint(0, 2 * p + 1, (2, 3), generator=g)
    flip = torch.randint(0, 2, (2, 3), generator=g).bool()
    fill = (0.5, -3.0)
    out = crop_flip(x, dy, dx, flip, p, mode, fill)
    assert out.shape == x.shape
    if mode == "reflect":
        padded = torch.nn.functional.pad(x.reshape(6, 2, h, w), (p, p, p, p), mode="reflect").reshape(2, 3, 2, h + 2 * p, w + 2 * p)
    else:
        padded = torch.stack([torch.full((2, 3, h + 2 * p, w + 2 * p), v) for v in fill], dim=2)
        padded[..., p : p + h, p : p + w] = x
    for c in range(2):
        for b in range(3):
            ref = padded[c, b, :, dy[c, b] : dy[c, b] + h, dx[c, b] : dx[c, b] + w]
            assert torch.equal(out[c, b], ref.flip(-1) if flip[c, b] else ref)


def test_draws_lie_in_range_and_depend_only_on_the_seed():
    aug = Augment(crop_padding=4, flip=True)
    dy, dx, flip = aug.draw(7, 500)
    assert int(dy.min()) == 0 and int(dy.max()) == 8 and int(dx.min()) == 0 and int(dx.max()) == 8  # [0, 2p], both ends reached in 500 draws
    assert 0 < int(flip.sum()) < 500
    again = aug.draw(7, 500)
    assert all(torch.equal(a, b) for a, b in zip((dy, dx, flip), again))
    assert not torch.equal(dy, aug.draw(8, 500)[0])
    # only flip: offsets stay 0 (the crop is the identity)
    dy, dx, _ = Augment(flip=True).draw(7, 10)
    assert dy.abs().sum() == 0 and dx.abs().sum() == 0


def test_values_stay_within_the_image_values():
    x = torch.rand(3, 4, 3, 8, 8)
    spec = LocalSpec(epochs=1, batch_size=4, augment=Augment(crop_padding=3, padding_mode="reflect", flip=True))
    out = step_batch(spec, x, [1, 2, 3], step=0)
    assert out.shape == x.shape
    for c in range(3):  # reflect padding only repeats pixels of the same image
        for b in range(4):
            assert set(out[c, b].flatten().tolist()) <= set(x[c, b].flatten().tolist())


def test_step_batch_is_seeded_per_client_and_step_and_independent_of_the_stack():
    spec = LocalSpec(epochs=1, batch_size=4, augment=Augment(crop_padding=2, padding_mode="constant", flip=True))
    x = torch.rand(2, 4, 1, 6, 6)
    both = step_batch(spec, x, [11, 12], step=3)
    assert torch.equal(both, step_batch(spec, x, [11, 12], step=3))  # same seed, same batch
    assert torch.equal(both[1], step_batch(spec, x[1:], [12], step=3)[0])  # a client's batch ignores the others
    assert not torch.equal(both, step_batch(spec, x, [11, 12], step=4))  # the step changes the draw
    assert step_batch(LocalSpec(epochs=1, batch_size=4), x, [11, 12], 3) is x  # off: the very same tensor


def _cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 3, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(3 * 36, 4))


def _jobs(model: nn.Module) -> list[ClientJob]:
    g = torch.Generator().manual_seed(5)
    start = model_state(model)
    jobs = []
    for c, n in enumerate([9, 14, 14, 5]):
        jobs.append(ClientJob(c, start, torch.randn(n, 1, 6, 6, generator=g), torch.randint(0, 4, (n,), generator=g), 0.1, 1.0, {}, 500 + c))
    return jobs


def test_every_executor_trains_on_the_same_augmented_batches():
    model = _cnn()
    spec = LocalSpec(epochs=2, batch_size=4, augment=Augment(crop_padding=2, padding_mode="reflect", flip=True))
    plain = LocalSpec(epochs=2, batch_size=4)
    jobs = _jobs(model)
    ref = SequentialExecutor(model, spec).run(jobs)
    again = SequentialExecutor(model, spec).run(jobs)
    without = SequentialExecutor(model, plain).run(jobs)
    assert all(torch.equal(a.params[k], b.params[k]) for a, b in zip(ref, again) for k in a.params)
    assert any(not torch.equal(a.params[k], b.params[k]) for a, b in zip(ref, without) for k in a.params)  # augmentation acts
    pool = ProcessExecutor(model, spec, workers=1)
    try:
        procs = pool.run(jobs)
    finally:
        pool.close()
    for a, b in zip(ref, procs):  # the process pool: bitwise
        assert a.mean_loss == b.mean_loss and all(torch.equal(a.params[k], b.params[k]) for k in a.params)
    vec = VectorizedExecutor(model, spec, chunk_size=3).run(jobs)  # vectorised: equal up to float rounding
    for a, b in zip(ref, vec):
        assert abs(a.mean_loss - b.mean_loss) <= 1e-5 * max(1.0, abs(a.mean_loss))
        for k in a.params:
            torch.testing.assert_close(b.params[k], a.params[k], atol=1e-5, rtol=1e-5)


def test_sequential_step_uses_the_job_seed_and_step():
    # train_client's step s augments with derive_seed(job seed, "augment", s): recompute the first batch by hand
    aug = Augment(crop_padding=1, flip=True)
    dy, dx, flip = aug.draw(derive_seed(500, "augment", 0), 4)
    x = torch.rand(1, 4, 1, 6, 6)
    spec = LocalSpec(epochs=1, batch_size=4, augment=aug)
    assert torch.equal(step_batch(spec, x, [500], 0), crop_flip(x, dy[None], dx[None], flip[None], 1))


def test_normalize_options_on_digits():
    default = load_dataset("digits")
    raw = load_dataset("digits", {"augment": {"normalize": False}})
    fixed = load_dataset("digits", {"augment": {"normalize": [[0.5], [0.25]]}})
    assert torch.equal(load_dataset("digits", {"augment": {"normalize": "dataset"}}).x_train, default.x_train)
    # digits are pixel / 16 in [0, 1]: undone standardisation gives them back (up to float32 rounding)
    assert float(raw.x_train.min()) >= -1e-6 and float(raw.x_train.max()) <= 1 + 1e-6
    torch.testing.assert_close(raw.x_train * 16, (raw.x_train * 16).round(), atol=1e-4, rtol=0)
    torch.testing.assert_close(fixed.x_test, (raw.x_test - 0.5) / 0.25, atol=1e-5, rtol=1e-5)  # test split scaled alike


@pytest.mark.parametrize(
    "table, field",
    [
        ({"crop_padding": -1}, "dataset.augment.crop_padding"),
        ({"crop_padding": 1.5}, "dataset.augment.crop_padding"),
        ({"flip": "yes"}, "dataset.augment.flip"),
        ({"padding_mode": "edge"}, "dataset.augment.padding_mode"),
        ({"normalize": "imagenet"}, "dataset.augment.normalize"),
        ({"normalize": [[0.5, 0.5], [0.2]]}, "dataset.augment.normalize"),
        ({"normalize": [[0.5], [0.0]]}, "dataset.augment.normalize"),
        ({"rotate": 3}, "dataset.augment.rotate"),
    ],
)
def test_bad_options_name_the_field(table, field):
    with pytest.raises(ConfigError) as err:
        parse_augment(table)
    assert err.value.field == field


def test_shape_errors():
    with pytest.raises(ConfigError, match="needs images"):
        load_dataset("mnist1d", {"num_samples": 200, "augment": {"flip": True}})
    with pytest.raises(ConfigError, match="reflect padding"):
        load_dataset("digits", {"augment": {"crop_padding": 8}})
    with pytest.raises(ConfigError, match="has 1"):
        load_dataset("digits", {"augment": {"normalize": [[0.5, 0.5, 0.5], [0.2, 0.2, 0.2]]}})
    with pytest.raises(ConfigError, match="no recorded channel statistics"):
        load_dataset("mnist1d", {"num_samples": 200, "augment": {"normalize": False}})
    assert not AugmentOptions(normalize=False).active and Augment.from_options(AugmentOptions()) is None


def test_cli_reports_one_line_and_exits_2(tmp_path):
    cfg = tmp_path / "aug.toml"
    cfg.write_text('[dataset]\nname = "digits"\n[dataset.augment]\ncrop_padding = -2\n')
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.run([sys.executable, "-m", "chillfl", "run", "-q", str(cfg), "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "dataset.augment.crop_padding" in lines[0]
    assert not any(out.iterdir())


CONFIG = {
    "dataset": {"name": "digits"},
    "partition": {"name": "iid"},
    "model": {"name": "flexchill_cnn"},
    "federation": {"num_clients": 3, "clients_per_round": 3, "rounds": 1},
    "client": {"epochs": 1, "batch_size": 32, "lr": 1e-30},
    "eval": {"clients": "none"},
}


def test_augmentation_never_touches_evaluation():
    # lr = 1e-30: updates vanish below float32 resolution, the global model stays the initial one, so an unaugmented evaluation scores it identically;
    # the training loss differs, which shows the training batches were augmented.
    aug = {**CONFIG, "dataset": {"name": "digits", "augment": {"crop_padding": 2, "flip": True}}}
    a = run(config=CONFIG, write=False, progress=False).records[-1]
    b = run(config=aug, write=False, progress=False).records[-1]
    assert a["global_acc"] == b["global_acc"] and a["global_loss"] == b["global_loss"]
    assert a["train_loss"] != b["train_loss"]


def test_constant_padding_is_raw_black_in_the_input_space():
    # data standardised with mean 0.5, std 0.25: raw black (0) is (0 - 0.5) / 0.25 = -2 in the model's input space
    aug = Augment.from_options(AugmentOptions(crop_padding=1, padding_mode="constant"), mean=(0.5,), std=(0.25,))
    assert aug is not None and aug.fill == (-2.0,)
    out = crop_flip(IMG, torch.tensor([0]), torch.tensor([0]), torch.tensor([False]), 1, "constant", aug.fill)[0, 0]
    assert out.tolist() == [[-2, -2], [-2, 1]]
    two = torch.zeros(1, 2, 2, 2)  # per-channel fill: channel 0 gets -1, channel 1 gets 3
    out = crop_flip(two, torch.tensor([2]), torch.tensor([2]), torch.tensor([False]), 1, "constant", (-1.0, 3.0))
    assert out[0, 0].tolist() == [[0, -1], [-1, -1]] and out[0, 1].tolist() == [[0, 3], [3, 3]]


def test_datasets_record_the_standardisation_they_end_with():
    default = load_dataset("digits")
    assert default.channel_mean is not None and default.channel_std is not None and len(default.channel_mean) == 1
    raw = load_dataset("digits", {"augment": {"normalize": False}})
    assert raw.channel_mean == (0.0,) and raw.channel_std == (1.0,)  # black is 0 again
    fixed = load_dataset("digits", {"augment": {"normalize": [[0.5], [0.25]]}})
    assert fixed.channel_mean == (0.5,) and fixed.channel_std == (0.25,)


def test_run_metrics_agree_across_executors_with_augmentation():
    aug = {**CONFIG, "dataset": {"name": "digits", "augment": {"crop_padding": 2, "flip": True}}, "client": {"epochs": 1, "batch_size": 32, "lr": 0.05}}
    seq = run(config=aug, write=False, progress=False).records
    proc = run(config={**aug, "executor": "processes"}, write=False, progress=False).records
    drop = ("time", "wall")  # timing fields, if any, are not results
    same = [{k: v for k, v in r.items() if not any(d in k for d in drop)} for r in seq]
    assert same == [{k: v for k, v in r.items() if not any(d in k for d in drop)} for r in proc]  # bitwise
    # the vectorised executor: equal up to float rounding, checked on the trained states in
    # test_every_executor_trains_on_the_same_augmented_batches


def test_normalize_is_refused_for_tensors_passed_from_python():
    ds = load_dataset("digits")
    with pytest.raises(ConfigError) as err:
        run(data=ds, config={**CONFIG, "dataset": {"name": "custom", "augment": {"normalize": False}}}, write=False, progress=False)
    assert err.value.field == "dataset.augment.normalize"
    flipped = run(data=ds, config={**CONFIG, "dataset": {"name": "custom", "augment": {"flip": True}}}, write=False, progress=False)
    plain = run(data=ds, config={**CONFIG, "dataset": {"name": "custom"}}, write=False, progress=False)
    assert flipped.records[-1]["train_loss"] != plain.records[-1]["train_loss"]  # crop/flip do apply to tensors from Python
    assert flipped.config.dataset["augment"] == {"flip": True}  # and the saved config says so
