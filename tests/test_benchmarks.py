"""The benchmark harness's logic (benchmarks/): workloads, FLOP counts, chillfl overrides, tables, --device.

No time is asserted, and the benchmarks that run here run tiny
(conv_layouts.py, w1_curves.py, to check their reports): these check what the
numbers are computed from.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch


import mode_chillfl  # noqa: E402
import run  # noqa: E402
from workloads import client_slice, public_slice, round_flops, sample_flops, workload  # noqa: E402


def test_soft_label_and_100k_workloads_are_shaped_as_documented() -> None:
    w3, w4 = workload("3"), workload("4")
    # workload 3: 100 clients x 400 private rows, then the 10,000-row public pool: 50,000 rows, the same file as workloads 1 and 2
    assert (w3.num_clients, w3.clients_per_round, w3.public_size, w3.public_per_round, w3.num_samples) == (100, 100, 10_000, 1_000, 50_000)
    assert public_slice(w3) == slice(40_000, 50_000) and client_slice(w3, 99) == slice(39_600, 40_000)
    # training samples: 100 clients x 400 private + 100 clients x 1,000 distilled + the server's 1 epoch x 1,000
    assert w3.sample_steps_per_round == 40_000 + 100_000 + 1_000
    assert w3.forward_samples_per_round == 100_000  # every client predicts P^t
    assert not w3.peers
    # workload 4: 100,000 clients over workload 2's 1,000 blocks of 50 rows
    assert (w4.num_clients, w4.blocks, w4.num_samples) == (100_000, 1_000, 50_000)
    assert client_slice(w4, 1) == client_slice(w4, 1_001) == client_slice(w4, 99_001) == slice(50, 100)
    assert w4.steps_per_round == workload("2").steps_per_round == 500
    assert client_slice(workload("2"), 999) == slice(49_950, 50_000)


def test_mlp_flops_per_sample_by_hand() -> None:
    # MLP 3072 -> 64 -> 10, 2 FLOPs per multiply-add:
    #   forward: 2 * (3072 * 64 + 64 * 10) = 394,496
    #   backward: fc2 weight grad 2 * 64 * 10 = 1,280, fc2 input grad 1,280, fc1 weight grad 2 * 3072 * 64 = 393,216;
    #             no input gradient for fc1 (the data need none)          -> 395,776
    train, forward = sample_flops("mlp", 10)
    assert forward == 394_496
    assert train == 394_496 + 395_776
    assert sample_flops("mlp", 50) == (train, forward)  # linear in the batch size
    assert round_flops(workload("2")) == 790_272 * 5_000  # 100 clients x 50 samples x 1 epoch


def test_cnn_flops_per_sample_by_hand() -> None:
    # McMahan CNN forward, per sample: conv1 28*28 outputs * 32 ch * (3*5*5) MACs; conv2 10*10 * 64 * (32*5*5);
    # fc1 1600*512; fc2 512*10 -> x2 FLOPs. Backward: twice the forward, minus conv1's input gradient.
    conv1, conv2, fc1, fc2 = 2 * 784 * 32 * 75, 2 * 100 * 64 * 800, 2 * 1600 * 512, 2 * 512 * 10
    forward = conv1 + conv2 + fc1 + fc2
    train, fwd = sample_flops("cnn", 4)
    assert fwd == forward
    assert train == 3 * forward - conv1


def test_flop_rates_and_tables() -> None:
    results = {"compute_bound": {"status": "ok", "s_per_round_median": 2.0, "s_per_round_min": 1.0}, "x": {"status": "not available: no"}}
    run.add_flop_rates(results, 4e9, 10.0)
    assert results["compute_bound"]["gflops_median"] == 2.0 and results["compute_bound"]["gflops_best"] == 4.0
    assert results["compute_bound"]["peak_fraction_median"] == 0.2
    assert "gflops_median" not in results["x"]
    entry = {"status": "ok", "s_per_round_min": 1.0, "s_per_round_median": 2.0, "peak_mb": 10.0, "first_round_end_s_median": 3.0, **results["compute_bound"]}
    report = {"workloads": {"2": {"workload": workload("2").to_dict(), "rounds_per_run": 3, "flops_per_round": 4e9,
                                  "modes": {"compute_bound": entry, "x": results["x"]}, "chillfl_startup_run_experiment": {}}}}
    table = run.markdown_table(report).splitlines()
    assert table[0].endswith("| GFLOP/s | % of peak | peak | aten ops / client step |")  # the peak the % is of (fp32 here)
    assert table[2].endswith("| 2.00 | 20.0 | fp32 |  |") and table[3].startswith("| 2 | x | not available: no |")
    assert "4.00 GFLOP per round" in run.fmt_table(report)
    # op counts (issue 39): 1,200 ops over 100 client steps = 12.0 a client step; on CUDA the launches too
    entry["ops"] = {"status": "ok", "ops_per_client_step": 12.0}
    assert run.markdown_table(report).splitlines()[2].endswith("| 2.00 | 20.0 | fp32 | 12.0 |")
    entry["ops"] = {"status": "ok", "ops_per_client_step": 12.0, "cuda_launches_per_client_step": 30.0}
    assert run.markdown_table(report).splitlines()[2].endswith("| 12.0 (30.0 launches) |")
    assert "12.0 (30.0 launches)" in run.fmt_table(report)


def test_modes_per_device_and_workload() -> None:
    cpu = [m.name for m in run.all_modes("cpu")]
    assert "chillfl[processes]" in cpu and "chillfl[auto+bf16]" in cpu and "flower[simulation]" in cpu
    assert "chillfl[processes]" not in [m.name for m in run.all_modes("cuda")]  # chillfl refuses it on a GPU
    args = run.parse_args(["--device", "cuda", "--peak-gflops", "67000", "--workload", "4"])
    assert (args.device, args.peak_gflops, args.rounds_for["4"]) == ("cuda", 67000.0, 3)
    chosen = [m.name for m in run.select_modes(run.all_modes("cuda"), "chillfl[auto+graphs], blazefl[threads],chillfl[auto]")]
    assert chosen == ["compute_bound", "chillfl[auto+graphs]", "blazefl[threads]", "chillfl[auto]"]  # as named, the bound first
    args = run.parse_args(["--device", "cuda", "--modes", "chillfl[auto+graphs],blazefl[threads]", "--no-bound", "--no-peers"])
    assert [m.name for m in run.modes_for(args)] == ["chillfl[auto+graphs]"]  # no bound, no peer
    # op counts for the modes named exactly (gpu-check.sh's budget): chillfl[auto] does not also count chillfl[auto+bf16]
    assert run.counted("chillfl[auto]", "") and run.counted("chillfl[auto+bf16]", "")
    assert run.counted("chillfl[auto]", "chillfl[auto], chillfl[auto+graphs]") and not run.counted("chillfl[auto+bf16]", "chillfl[auto]")


def test_gpu_check_names_only_modes_run_py_has() -> None:
    """A misspelt mode in gpu-check.sh would cost a whole workload's step of a scarce GPU session: every name its
    --modes and --ops-modes lists give is one of run.py's CUDA modes."""
    import re

    script = (Path(__file__).resolve().parents[1] / "benchmarks" / "gpu-check.sh").read_text()
    named = {m.strip() for listed in re.findall(r'--(?:ops-)?modes "([^"]+)"', script) for m in listed.split(",")}
    assert len(named) > 5 and "chillfl[auto+gemm+graphs]" in named
    curves = [f"chillfl[{v.strip()}]" for listed in re.findall(r'--variants "([^"]+)"', script) for v in listed.split(",")]
    assert len(curves) >= 3 and "chillfl[auto+bf16+graphs]" in curves  # w1_curves.py's variants: run.py's modes too
    assert named | set(curves) <= {m.name for m in run.all_modes("cuda")}


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message for a machine without a GPU")
def test_device_cuda_without_a_gpu_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert run.main(["--device", "cuda", "--workload", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("run.py: --device cuda: ") and "no CUDA GPU" in err[0]


def test_chillfl_overrides_device_bf16_and_scarlet() -> None:
    o = mode_chillfl.overrides(workload("3"), "vectorized+bf16", 2, 0, "cuda")
    assert (o["executor"], o["precision"], o["device"]) == ("vectorized", "bf16", "cuda")
    assert o["distillation"] == {"method": "scarlet", "public_size": 10_000, "subset_size": 1_000}
    plain = mode_chillfl.overrides(workload("2"), "auto", 2, 0)
    assert "precision" not in plain and "distillation" not in plain and plain["device"] == "cpu"
    # every round evaluates: the run's first evaluation falls in round 1, which is never timed (EVAL_EVERY)
    assert plain["eval.every"] == 1 and mode_chillfl.overrides(workload("2"), "auto", 3, 0)["eval.every"] == 1


def test_chillfl_data_for_100k_clients_share_the_blocks() -> None:
    arrays = {"x": np.zeros((50_000, 3, 32, 32), np.float32)[:, :1, :1, :1], "y": np.zeros(50_000, np.int64),
              "x_test": np.zeros((4, 1, 1, 1), np.float32), "y_test": np.zeros(4, np.int64)}
    data = mode_chillfl.federated_data(workload("4"), arrays, 0)
    assert data.num_clients == 100_000
    rows = data.train_indices  # a ClientRows: client c owns block c mod 1000, rows [50 b, 50 b + 50)
    assert list(rows[1_001]) == list(rows[1]) == list(range(50, 100))
    assert list(rows[99_999]) == list(range(49_950, 50_000)) and len(rows[0]) == 50
    public = mode_chillfl.federated_data(workload("3"), arrays, 0).public_indices
    assert (public[0], public[-1], len(public)) == (40_000, 49_999, 10_000)


def test_each_precision_is_measured_against_its_own_peak() -> None:
    """% of peak for the precision used (issue 26): +bf16 against the bf16 peak, +tf32 the TF32 one, the rest fp32."""
    ok = {"status": "ok", "s_per_round_median": 2.0, "s_per_round_min": 1.0}
    results = {name: dict(ok) for name in ("chillfl[auto]", "chillfl[auto+tf32]", "chillfl[auto+bf16]", "blazefl[threads]")}
    run.add_flop_rates(results, 4e9, 10.0, {"tf32": 40.0, "bf16": 100.0})  # 2 GFLOP/s each
    fractions = {name: (r["peak_fraction_median"], r["peak_precision"]) for name, r in results.items()}
    assert fractions == {"chillfl[auto]": (0.2, "fp32"), "chillfl[auto+tf32]": (0.05, "tf32"), "chillfl[auto+bf16]": (0.02, "bf16"),
                         "blazefl[threads]": (0.2, "fp32")}
    run.add_flop_rates(results, 4e9, 10.0, {"tf32": None, "bf16": None})  # no precision peak given: the fp32 one, named so
    assert results["chillfl[auto+bf16]"]["peak_precision"] == "fp32" and results["chillfl[auto+bf16]"]["peak_fraction_median"] == 0.2
    assert "chillfl[auto+tf32]" in [m.name for m in run.all_modes("cuda")] and "chillfl[auto+tf32]" not in [m.name for m in run.all_modes("cpu")]


def test_gpu_targets_met_missed_and_not_measured() -> None:
    """The issue's target table from run.py reports: thresholds on hand-made numbers; a missing mode is never met."""
    import gpu_targets

    def ok(t: float) -> dict:
        return {"status": "ok", "s_per_round_median": t}

    graphed = {**ok(0.28), "ops": {"cuda_launches_per_round": 8000}}
    workloads = {
        "1": {"modes": {"chillfl[auto]": ok(0.25), "chillfl[auto+bf16]": ok(0.2), "chillfl[auto+graphs]": graphed, "chillfl[auto+gemm]": ok(0.5),
                        "chillfl[auto+graphs+nondet]": ok(0.1), "blazefl[threads]": ok(8.0), "blazefl[serial]": ok(9.0)}},
        "2": {"modes": {"chillfl[auto]": ok(0.05), "chillfl[auto+graphs]": ok(0.1), "blazefl[threads]": ok(0.6)},
              "chillfl_startup_run_experiment": {"chillfl[auto]": {"status": "ok", "median_s": 2.6, "median_minus_import_torch_s": 0.9}}},
        "3": {"modes": {"compute_bound": ok(2.0), "chillfl[auto]": ok(0.9), "chillfl[auto+bf16]": ok(1.2)}},
    }
    rows = {target: (measured, verdict) for target, measured, _, verdict in gpu_targets.targets(workloads)}
    assert rows["W1 chillfl[auto] s/round"] == ("0.250 s", "met")
    assert rows["W1 chillfl[auto] vs BlazeFL best"] == ("32.000x (blazefl[threads])", "met")  # 8.0 / 0.25
    assert rows["W1 chillfl[auto+bf16] s/round"] == ("0.200 s", "MISSED")  # > 0.15
    assert rows["W1 chillfl[auto+bf16] vs BlazeFL best"] == ("40.000x (blazefl[threads])", "met")
    assert rows["W1 chillfl[auto+gemm] s/round"] == ("0.500 s", "MISSED")  # a mode measured beyond the headline: listed too
    assert rows["W1 chillfl[auto+tf32+graphs] s/round"] == ("-", "not measured")  # a headline mode not run
    assert rows["W1 chillfl[auto+graphs+nondet] s/round"] == ("0.100 s", "met (diagnostic: not deterministic)")  # never the target itself
    assert rows["W1 chillfl[auto+graphs] launches/round"] == ("8,000", "MISSED")  # > 7,565: a tenth of the 75,647 before
    assert "W1 chillfl[auto] launches/round" not in rows  # not counted: no row
    assert rows["W3 chillfl best / plain loop"] == ("0.450x (chillfl[auto])", "met")
    assert rows["W2 chillfl[auto] vs BlazeFL best"] == ("12.000x (blazefl[threads])", "met")
    assert rows["W2 chillfl[auto+graphs] vs BlazeFL best"] == ("6.000x (blazefl[threads])", "MISSED")
    assert rows["W4 chillfl[auto] vs BlazeFL best"] == ("-", "not measured")
    assert rows["W2 launch -> end of round 1 - import torch"] == ("0.900 s (raw 2.60 s)", "met")
    assert rows["W1 accuracy curve vs fp32"] == ("-", "not measured")  # no w1_curves.py report: never met


def test_w1_curves_tolerance_worked_out_by_hand() -> None:
    """Two seeds, two rounds. Reference [[0.5, 0.6], [0.7, 0.8]]: means 0.6, 0.7, sd 0.1414 each. A mode at
    [[0.5, 0.6], [0.5, 0.6]] (means 0.5, 0.6, sd 0): gaps 0.1, tolerance 2 sqrt((0 + 0.02) / 2) = 0.2: met. At 0.3
    and 0.4: gaps 0.3 > 0.2: missed, worst at round 1 (the first of the equal ones). Identical curves (sd 0 both):
    the floor, 0.01, so a gap of 0.005 is met and 0.02 missed."""
    import w1_curves

    ref = [[0.5, 0.6], [0.7, 0.8]]
    near = w1_curves.compare(ref, [[0.5, 0.6], [0.5, 0.6]])
    assert near["met"] and near["gap"] == pytest.approx([0.1, 0.1]) and near["tolerance"] == pytest.approx([0.2, 0.2])
    far = w1_curves.compare(ref, [[0.3, 0.4], [0.3, 0.4]])
    assert not far["met"] and far["worst_round"] == 1 and far["worst_gap"] == pytest.approx(0.3)
    flat = [[0.5, 0.5], [0.5, 0.5]]
    assert w1_curves.compare(flat, [[0.505, 0.5], [0.505, 0.5]])["met"]
    assert w1_curves.compare(flat, [[0.52, 0.5], [0.52, 0.5]])["tolerance"] == pytest.approx([0.01, 0.01])
    assert not w1_curves.compare(flat, [[0.52, 0.5], [0.52, 0.5]])["met"]


def test_w1_curves_data_are_balanced_learnable_and_seeded() -> None:
    """Every class equally often; the class templates carry the signal (the mean image of a class is its template
    x signal, the noise averaging out); the same seed, the same bytes."""
    import w1_curves

    x, y = w1_curves.learnable(2000, 3, signal=0.5)
    assert x.shape == (2000, 3, 32, 32) and torch.bincount(y).tolist() == [200] * 10
    means = torch.stack([x[y == k].mean(0) for k in range(10)])
    assert (means.flatten(1).std(1) > 0.4).all()  # 0.5 x a unit-spread template, plus noise of sd 1/sqrt(200)
    x2, y2 = w1_curves.learnable(2000, 3, signal=0.5)
    assert torch.equal(x, x2) and torch.equal(y, y2)
    assert not torch.equal(w1_curves.learnable(2000, 4, signal=0.5)[0], x)


def test_w1_curves_runs_compares_and_feeds_the_targets(tmp_path: Path) -> None:
    """One client (--scale 0.01), 2 seeds, 1 round, on the CPU: the reference, a mode held to it (sequential: the same
    fp32 maths as auto, which trains this CNN client by client on the CPU) and one that cannot run (not measured);
    its report feeds gpu_targets.py's table."""
    import json

    import gpu_targets
    import w1_curves

    assert w1_curves.main(["--device", "cpu", "--variants", "sequential,auto+nosuch", "--seeds", "2", "--rounds", "1",
                           "--scale", "0.01", "--test-size", "100", "--signal", "0.2", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "curves-w1.json").read_text())
    ref = report["modes"]["auto"]["accuracy"]
    assert len(ref) == 2 and all(len(run) == 1 and 0 <= run[0] <= 1 for run in ref)
    assert report["modes"]["sequential"]["against_reference"]["met"]
    assert "error" in report["modes"]["auto+nosuch"] and "against_reference" not in report["modes"]["auto+nosuch"]
    rows = {target: verdict for target, _, _, verdict in gpu_targets.targets({}, report)}
    assert rows["W1 chillfl[sequential] accuracy curve vs fp32"] == "met"
    assert rows["W1 chillfl[auto+nosuch] accuracy curve vs fp32"] == "not measured"
    assert w1_curves.main(["--device", "cpu", "--seeds", "1", "--out", str(tmp_path)]) == 2  # no spread from one seed


def test_chillfl_variants_set_precision_and_memory_format() -> None:
    o = mode_chillfl.overrides(workload("1", 0.02), "auto+bf16+channels_last", 2, 0, "cuda")
    assert (o["executor"], o["precision"], o["memory_format"]) == ("auto", "bf16", "channels_last")
    o = mode_chillfl.overrides(workload("1", 0.02), "auto+tf32", 2, 0, "cuda")
    assert o["precision"] == "tf32" and "memory_format" not in o
    o = mode_chillfl.overrides(workload("1", 0.02), "auto+bf16+gemm+graphs", 2, 0, "cuda")
    assert (o["precision"], o["batched_conv"], o["cuda_graphs"]) == ("bf16", "gemm", True)
    assert "cuda_graphs" not in mode_chillfl.overrides(workload("1", 0.02), "auto", 2, 0, "cuda")
    o = mode_chillfl.overrides(workload("1", 0.02), "auto+bf16+nhwc+graphs", 2, 0, "cuda")
    assert (o["precision"], o["batched_conv"], o["cuda_graphs"]) == ("bf16", "nhwc", True)
    o = mode_chillfl.overrides(workload("1", 0.02), "auto+bf16+graphs+nondet", 2, 0, "cuda")  # what determinism costs on a GPU
    assert (o["precision"], o["cuda_graphs"], o["deterministic"]) == ("bf16", True, False)
    assert "deterministic" not in mode_chillfl.overrides(workload("1", 0.02), "auto+graphs", 2, 0, "cuda")
    assert "chillfl[auto+graphs+nondet]" in [m.name for m in run.all_modes("cuda")] and "chillfl[auto+graphs+nondet]" not in [m.name for m in run.all_modes("cpu")]
    assert "chillfl[auto+bf16+channels_last]" in [m.name for m in run.all_modes("cuda")]
    o = mode_chillfl.overrides(workload("1", 0.02), "auto+bf16+gemm", 2, 0, "cuda")
    assert (o["precision"], o["batched_conv"]) == ("bf16", "gemm") and "memory_format" not in o
    assert "batched_conv" not in mode_chillfl.overrides(workload("1", 0.02), "auto", 2, 0, "cuda")
    gpu, cpu = ([m.name for m in run.all_modes(d)] for d in ("cuda", "cpu"))
    assert {"chillfl[auto+gemm]", "chillfl[auto+tf32+gemm]", "chillfl[auto+bf16+gemm]"} <= set(gpu) and not any("gemm" in m for m in cpu)


def test_conv_layouts_reports_each_batched_conv(tmp_path: Path) -> None:
    """benchmarks/conv_layouts.py on the CPU, tiny: a row per (batched_conv, precision), each run really vmapped (it asserts so)."""
    import json

    import conv_layouts

    threads = torch.get_num_threads()
    assert conv_layouts.main(["--device", "cpu", "--clients", "2", "--samples", "50", "--repeats", "1", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "conv-layouts.json").read_text())
    assert [(r["batched_conv"], r["precision"]) for r in report["rows"]] == conv_layouts.settings("cpu")
    assert {r["batched_conv"] for r in report["rows"]} == {"grouped", "gemm", "nhwc", "loop"} and all(r["ms_per_step"] > 0 for r in report["rows"])
    assert torch.get_num_threads() == threads  # its --threads 1 is restored


def test_conv_kernels_forms_compute_each_clients_convolution(tmp_path: Path) -> None:
    """benchmarks/conv_kernels.py times one step's convolutions in four forms: each must compute every client's own
    convolution and its two gradients (checked against autograd, client by client), or its time measures other work."""
    import json
    import warnings

    import conv_kernels as ck

    b, n, cin, cout, hw = 3, 4, 2, 5, 9
    k, out = ck.KERNEL, hw - ck.KERNEL + 1
    canonical = {  # each form's result -> [clients, ...] as autograd gives it per client
        "grouped": {"forward": lambda r: r.view(n, b, cout, out, out).transpose(0, 1),
                    "input_grad": lambda r: r[0].view(n, b, cin, hw, hw).transpose(0, 1), "weight_grad": lambda r: r[1].view(b, cout, cin, k, k)},
        "loop": {"forward": torch.stack, "input_grad": lambda r: torch.stack([c[0] for c in r]), "weight_grad": lambda r: torch.stack([c[1] for c in r])},
        "gemm": {"forward": lambda r: r.view(b, n, out * out + 1, cout)[:, :, :-1].reshape(b, n, out, out, cout).permute(0, 1, 4, 2, 3),  # - blank
                 "input_grad": lambda r: r[:, :, :-1].reshape(b, n, hw, hw, cin).permute(0, 1, 4, 2, 3),  # NHWC, as gathered; - zero pixel
                 "weight_grad": lambda r: r.view(b, cout, k, k, cin).permute(0, 1, 4, 2, 3)},  # K ordered (i, j, c)
    }
    for form, views in canonical.items():
        s = ck.Setting(form, "fp32")
        layer = ck.Layer(s, b, n, cin, cout, hw, "cpu")
        want: dict[str, list[torch.Tensor]] = {"forward": [], "input_grad": [], "weight_grad": []}
        for c in range(b):
            x, w = layer.x[c].clone().requires_grad_(), layer.w[c].clone().requires_grad_()
            y = torch.nn.functional.conv2d(x, w)
            y.backward(layer.gy[c])
            want["forward"].append(y.detach()), want["input_grad"].append(x.grad), want["weight_grad"].append(w.grad)
        for op, fn in ck.ops(s, layer, []).items():
            torch.testing.assert_close(views[op](fn()), torch.stack(want[op]), rtol=1e-4, atol=1e-4, msg=f"{form} {op}")
    assert conv_kernels_main_rows(ck, tmp_path) == [s.name for s in ck.settings("cpu")]
    report = json.loads((tmp_path / "conv-kernels.json").read_text())
    assert all(r["ms"] > 0 and "error" not in r for r in report["rows"]) and {r["op"] for r in report["rows"]} == {"forward", "input_grad", "weight_grad"}
    assert not any(r["layer"] == "conv1" and r["op"] == "input_grad" for r in report["rows"])  # the data's gradient: never taken
    # kernels per call from one profiler session: a kernel belongs to the last call that started before it
    assert ck.count_in_windows([(10.0, "b"), (0.0, "a"), (20.0, "c")], [1.0, 2.0, 12.0, 25.0, 26.0, -1.0]) == {"a": 2, "b": 1, "c": 2}
    calls = [("conv2.forward", lambda: torch.nn.functional.conv2d(torch.ones(1, 1, 5, 5), torch.ones(1, 1, 3, 3))), ("noop", lambda: None)]
    with warnings.catch_warnings():  # on a machine without CUDA the profiler says it records none
        warnings.filterwarnings("ignore", "CUDA is not available", UserWarning)
        assert ck.kernels_per_call(calls, lambda: None) == {"conv2.forward": 0, "noop": 0}  # the profiler's API as used (CPU tensors)


def conv_kernels_main_rows(ck, out: Path) -> list[str]:
    """The settings conv_kernels.main measures on the CPU at tiny sizes, in order (its flags restored after)."""
    import json

    flags = torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.benchmark
    assert ck.main(["--device", "cpu", "--clients", "2", "--batch", "2", "--repeats", "1", "--out", str(out)]) == 0
    assert (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.benchmark) == flags
    return list(dict.fromkeys(r["setting"] for r in json.loads((out / "conv-kernels.json").read_text())["rows"]))


@pytest.mark.slow  # two processes of workload 1 at scale 0.01 (one client: its compute bound is 50 SGD steps, not 2 clients' 100): seconds
def test_a_run_stopped_by_sigterm_keeps_what_it_measured_and_leaves_no_process(tmp_path: Path) -> None:
    """gpu-check.sh ends a step with `timeout` (SIGTERM): run.py writes the modes measured so far and kills the one running."""
    import json
    import os
    import signal
    import subprocess

    out = tmp_path / "report.json"
    cmd = [sys.executable, str(Path(run.__file__)), "--workload", "1", "--scale", "0.01", "--rounds", "1", "--repeats", "1", "--no-peers",
           "--no-ops", "--modes", "chillfl[sequential]", "--timeout", "300", "--data-dir", str(tmp_path / "data"), "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env={**os.environ, "TMPDIR": str(tmp_path)})
    assert proc.stdout is not None
    for line in proc.stdout:  # the compute bound's line ends when it is measured; chillfl's starts right after
        if "compute_bound ..." in line and "s/round" in line:
            break
    else:
        pytest.fail(f"run.py ended before measuring the compute bound (exit {proc.wait()})")
    proc.send_signal(signal.SIGTERM)
    rest = proc.communicate(timeout=120)[0]
    assert proc.returncode == 0, rest
    report = json.loads(out.read_text())
    assert "stopped by SIGTERM" in report["stopped"]
    modes = report["workloads"]["1"]["modes"]
    assert modes["compute_bound"]["status"] == "ok" and modes["compute_bound"]["s_per_round_median"] > 0
    # its ratio and FLOP rate were filled in when it was measured, not at the end that SIGTERM cut (a "nan" table before)
    assert modes["compute_bound"]["time_ratio_median"] == 1.0 and modes["compute_bound"]["gflops_median"] > 0
    assert report["workloads"]["1"]["flops_per_round"] > 0
    assert "chillfl[sequential]" not in modes  # it was running: not measured, and not reported as if it were
    left = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if str(tmp_path) in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                left.append(pid)
        except OSError:
            continue
    assert not left, f"processes left running: {left}"


def test_host_time_runs_the_accelerator_path_records_once_and_undoes_its_patches() -> None:
    """benchmarks/host_time.py (issue 39): workload 2's round with 4 features, resident chunks, steps replayed by the tape
    recorder; its steps are recorded once in the run (the slots) and replayed, and the executor is left as it was."""
    import host_time
    from chillfl.executors.vectorized import VectorizedExecutor

    resident, init = VectorizedExecutor.resident, VectorizedExecutor.__init__
    out = host_time.measure("2", rounds=1, graphs=True, profile=3)
    assert VectorizedExecutor.resident is resident and VectorizedExecutor.__init__ is init
    # 3 rounds of 100 clients x 50 samples at batch 10: 5 full-batch steps of every client a round (one shape);
    # warm-up 2 steps, one capture, and each later step but the capture itself a replay: 15 - 2 - 1 = 12
    assert out["captures"] == 1 and out["replays"] == 12
    assert len(out["per_round_s"]) == 1 and out["median_s"] > 0
    assert len(out["top_functions"]) == 3 and all("(" in r["function"] for r in out["top_functions"])
    with pytest.raises(ValueError, match="not a plain MLP workload"):
        host_time.experiment("1", 1, False)


def test_compile_steps_eager_twin_is_each_clients_own_sgd_step() -> None:
    # benchmarks/compile_step.py times torch.compile against this step: it must be the executor's maths, i.e. each
    # client's own SGD step w - lr * grad on its own batch (here on the MLP, checked client by client against autograd)
    from compile_step import vmapped_sgd_step
    from float_paths import ABS, REL

    from chillfl.models.registry import build_model

    model = build_model("mlp", (3, 32, 32), 10, seed=0)
    g = torch.Generator().manual_seed(1)
    params = {k: torch.stack([v.detach() + 0.01 * c for c in range(2)]) for k, v in model.named_parameters()}
    x, y = torch.randn(2, 4, 3, 32, 32, generator=g), torch.randint(0, 10, (2, 4), generator=g)
    expected = {}
    for c in range(2):
        mine = {k: v[c].clone().requires_grad_(True) for k, v in params.items()}
        loss = torch.nn.functional.cross_entropy(torch.func.functional_call(model, mine, (x[c],)), y[c])
        grads = torch.autograd.grad(loss, list(mine.values()))
        expected[c] = {k: (v - 0.5 * gr).detach() for (k, v), gr in zip(mine.items(), grads)}
    vmapped_sgd_step(model, 0.5)(params, x, y)
    for c in range(2):
        for k in params:
            torch.testing.assert_close(params[k][c], expected[c][k], rtol=REL, atol=ABS)  # vmapped against per-client kernels


def test_compile_steps_per_client_twin_is_one_plain_sgd_step_in_place() -> None:
    # compile_step.py --per-client times one client's unvmapped step: w - lr * grad of the cross-entropy, in place
    from compile_step import per_client_sgd_step

    from chillfl.models.registry import build_model

    model = build_model("mlp", (3, 32, 32), 10, seed=0)
    g = torch.Generator().manual_seed(2)
    params = {k: v.detach().clone() for k, v in model.named_parameters()}
    x, y = torch.randn(4, 3, 32, 32, generator=g), torch.randint(0, 10, (4,), generator=g)
    mine = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    loss = torch.nn.functional.cross_entropy(torch.func.functional_call(model, mine, (x,)), y)
    grads = dict(zip(mine, torch.autograd.grad(loss, list(mine.values()))))
    tensors = {k: id(v) for k, v in params.items()}
    per_client_sgd_step(model, 0.5)(params, x, y)
    assert {k: id(v) for k, v in params.items()} == tensors  # updated in place
    for k in params:
        assert torch.equal(params[k].detach(), (mine[k] - 0.5 * grads[k]).detach())  # 0.5 * g is exact, so one rounding either way


def blazefl_missing_case(tmp_path: Path) -> tuple[Any, ...]:
    """run_workload's arguments for workload 1 at scale 0.01, one round, the compute bound and blazefl[serial] with
    blazefl missing: a measured mode and one never launched."""
    args = run.parse_args(["--workload", "1", "--scale", "0.01", "--rounds", "1", "--repeats", "1", "--no-ops", "--data-dir", str(tmp_path / "data")])
    modes = run.select_modes(run.all_modes("cpu"), "blazefl[serial]")  # the compute bound runs too
    peers = {"blazefl": {"ok": False, "detail": "(not installed here)"}}
    return workload("1", 0.01), modes, peers, args, tmp_path


def test_a_workload_measured_to_the_end_reports_measured_and_never_launched_modes(tmp_path: Path) -> None:
    """run_workload's last pass gives each mode never launched (its peer missing) its reason, and keeps the measured ones.

    That pass once took ``dead[name]`` as setdefault's default, which is evaluated for every mode, so any
    measured mode ended the workload with a KeyError before its ops were counted or the next workload ran.
    """
    # scale 0.01: one client (the compute bound's 50 CNN steps, not 2 clients' 100): what is checked is the statuses, not the size
    entry = run.run_workload(*blazefl_missing_case(tmp_path))
    statuses = {name: result["status"] for name, result in entry["modes"].items()}
    assert statuses == {"compute_bound": "ok", "blazefl[serial]": "not available: blazefl (not installed here)"}
    assert entry["modes"]["compute_bound"]["s_per_round_median"] > 0
