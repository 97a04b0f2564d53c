"""Device mixing caught without a GPU (issue 26): the stand-in device's checker, and every method resumed on it.

:class:`device_mixing.StandInDevice` makes the run's device the stand-in ``cpu:0``: any op that meets a host-made
tensor with one of the run's fails, as CUDA would. The first tests check the checker itself; every registered
method's two rounds under it (and under the deterministic-alerts mode, in the same run) are in
tests/test_every_method_gpu_rules.py; the last tests here stop and resume every method on the stand-in device.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

import numpy as np
import pytest
import torch

import chillfl.experiment as experiment
from chillfl.config import load_config
from chillfl.runner import run_experiment
from device_mixing import HOST, RUN, STAND_IN, DeviceMixing, home, stand_in_device
import resume_cases

# ---------------------------------------------------------------- the checker


def test_host_tensors_meeting_the_run_device_are_caught() -> None:
    with stand_in_device():
        x = torch.randn(4, 3).to(STAND_IN)
        assert home(x) == RUN and x.device == STAND_IN
        with pytest.raises(DeviceMixing, match="mul"):
            _ = x * torch.ones(3)  # made on the host: CUDA would refuse
        with pytest.raises(DeviceMixing, match="numpy"):
            np.asarray(x * 2)
        with pytest.raises(DeviceMixing, match="cdist"):
            torch.cdist(x, torch.from_numpy(np.ones((2, 3), dtype=np.float32)))


def test_what_cuda_accepts_is_not_flagged() -> None:
    with stand_in_device():
        x = torch.randn(4, 3).to(STAND_IN)
        y = x * torch.tensor(2.0) + torch.zeros(3, device=x.device)  # a 0-dim host scalar; a factory on x's device
        rows = x[torch.tensor([0, 2])]  # host index tensor
        host = x.cpu()
        assert home(y) == RUN and home(rows) == RUN and home(host) == HOST and host.device == torch.device("cpu")
        np.asarray(host)
        back = torch.zeros(2, 3)
        back[0] = x[1]  # a copy into a host tensor
        assert home(torch.func.vmap(lambda r: r * 2)(x)) == RUN


def test_mixing_inside_vmap_is_caught() -> None:
    with stand_in_device():
        x = torch.randn(4, 3).to(STAND_IN)
        with pytest.raises(DeviceMixing):
            torch.func.vmap(lambda r: r + torch.ones(3))(x)


def test_a_no_op_move_leaves_the_source_on_the_host() -> None:
    """On the CPU ``.to(device)`` returns the very tensor: the checker hands back an alias, so the host copy stays host."""
    with stand_in_device():
        src = torch.ones(3)
        moved = src.to(STAND_IN)
        assert home(src) == HOST and home(moved) == RUN
        model = torch.nn.Linear(3, 2).to(STAND_IN)
        assert all(home(p) == RUN for p in model.parameters())


# ---------------------------------------------------------------- every registered method

# test_every_method_gpu_rules.py runs every registered method under this mode and the deterministic-alerts one at once


def test_a_host_generator_drawing_on_the_run_device_is_caught() -> None:
    with stand_in_device():
        gen = torch.Generator().manual_seed(0)
        torch.randperm(5, generator=gen)  # on the host: fine
        with pytest.raises(DeviceMixing, match="Generator"):
            torch.randperm(5, generator=gen, device=STAND_IN)


def test_the_vectorized_step_loop_reads_nothing_back_from_the_device() -> None:
    """No host sync in the resident step loop (the CPU twin of test_cuda's sync-debug-mode test): no .item(), float(t), .cpu()."""
    from torch import nn

    from chillfl.executors.sequential import ClientJob
    from chillfl.executors.vectorized import VectorizedExecutor
    from chillfl.training.local import LocalSpec, model_state

    torch.manual_seed(0)
    g = torch.Generator().manual_seed(7)
    with stand_in_device() as mode:
        model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 36, 5)).to(STAND_IN)
        start = model_state(model)
        jobs = [ClientJob(c, start, torch.randn(n, 1, 6, 6, generator=g).to(STAND_IN), torch.randint(0, 5, (n,), generator=g).to(STAND_IN),
                          0.05, 1.0, {}, 500 + c) for c, n in enumerate([17, 9, 12])]
        ex = VectorizedExecutor(model, LocalSpec(epochs=2, batch_size=4, momentum=0.5), accelerator=True)
        ex.run(jobs)  # the probe and chunk sizing (once per run) may read values
        train_steps, counted = ex._train_steps, []

        def watched(*args: Any, **kwargs: Any) -> Any:
            before = len(mode.syncs)
            out = train_steps(*args, **kwargs)
            counted.append(mode.syncs[before:])
            return out

        ex._train_steps = watched  # type: ignore[method-assign]
        ex.run(jobs)
    assert counted and all(not syncs for syncs in counted), counted


# ---------------------------------------------------------------- resumed on the device


@pytest.mark.slow  # every method x 2 executors, stopped and resumed: minutes
@pytest.mark.parametrize("executor", ["sequential", "vectorized"])
@pytest.mark.parametrize("method", [pytest.param(m, id=m) for m in resume_cases.methods()])
def test_every_method_resumes_with_its_tensors_on_the_run_device(method: str, executor: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run stopped after round 1 and resumed on the stand-in device: the checkpoint's tensors come back to where the
    run uses them (a GPU resume would fail on any that came back to the host, or on the device where numpy reads them)."""
    from chillfl import runner
    from chillfl.executors import vectorized

    monkeypatch.setattr(vectorized.VectorizedExecutor, "resident", lambda self, device: True)
    monkeypatch.setattr(runner, "_plots", lambda *args: None)
    over = {**resume_cases.TINY, "name": "cut", "out_dir": str(tmp_path), "executor": executor, "checkpoint.every": 1, "federation.rounds": 2}
    cfg = load_config(None, over).with_overrides(resume_cases.overrides(method))
    with mock.patch.object(experiment, "resolve_device", lambda name: STAND_IN), stand_in_device():
        with pytest.raises(resume_cases.Crash):
            run_experiment(cfg, progress=False, callbacks=[resume_cases._CrashIn(2)])
        saved = tmp_path / "cut.partial" / "config.toml"  # it names the stand-in, "cpu:0", which a config may not: back to "cpu"
        saved.write_text(saved.read_text().replace('device = "cpu:0"', 'device = "cpu"'))
        out = runner.resume_experiment(tmp_path / "cut.partial", progress=False, force=True)  # force: the config was edited
    assert [r["round"] for r in out.records] == [1, 2]
