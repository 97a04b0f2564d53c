"""Run one experiment end to end: build, loop with a progress bar, write the result folder."""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from tqdm import tqdm

from chillfl.config import RunConfig
from chillfl.data import FederatedData
from chillfl.engine.loop import run_rounds
from chillfl.engine.results import ResultWriter, summarize
from chillfl.engine.setup import Experiment, build_experiment


@dataclass
class RunOutput:
    folder: Path | None
    records: list[dict[str, Any]]
    summary: dict[str, Any]


def _postfix(record: dict[str, Any]) -> dict[str, str]:
    out = {}
    for key, short in (("global_acc", "acc"), ("local_acc", "local"), ("global_loss", "loss")):
        if record.get(key) is not None:
            out[short] = f"{record[key]:.4f}"
    return out


def rounds_for(exp: Experiment) -> Callable[[Experiment], Iterator[dict[str, Any]]]:
    """The round loop for the configured protocol (soft-label sharing when ``[distillation]`` names a method)."""
    if exp.config.distillation.get("method"):
        from chillfl.distillation.protocol import run_distillation_rounds

        return run_distillation_rounds
    return run_rounds


def run_experiment(
    config: RunConfig,
    *,
    write: bool = True,
    progress: bool = True,
    data: FederatedData | None = None,
    label: str | None = None,
) -> RunOutput:
    """Build and run ``config``; write its result folder unless ``write`` is False.

    All validation happens in :func:`build_experiment` before the folder exists.
    """
    with intra_op_threads(config.threads):
        return _run(config, write=write, progress=progress, data=data, label=label)


@contextmanager
def intra_op_threads(threads: int) -> Iterator[None]:
    """Run with ``threads`` torch intra-op threads (0: leave torch's setting), then restore it.

    The thread count is part of the config because it changes float reduction
    order, and so the last bits of every metric.
    """
    previous = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _run(config: RunConfig, *, write: bool, progress: bool, data: FederatedData | None, label: str | None) -> RunOutput:
    exp = build_experiment(config, data=data)
    writer = ResultWriter(config.out_dir, config.name) if write else None
    records: list[dict[str, Any]] = []
    start = time.perf_counter()
    try:
        if writer:
            writer.write_config(config.to_dict())
        bar = tqdm(total=config.federation.rounds, desc=label or config.name, unit="round", disable=not progress, leave=True, dynamic_ncols=True)
        with bar:
            for record in rounds_for(exp)(exp):
                records.append(record)
                if writer:
                    writer.append(record)
                bar.set_postfix(_postfix(record), refresh=False)
                bar.update(1)
        summary = summarize(records, config.eval.target_accuracy)
        summary["wall_time_s"] = round(time.perf_counter() - start, 3)
        summary["num_parameters"] = sum(v.numel() for k, v in exp.initial_state.items() if v.is_floating_point())
        from chillfl.metrics.stability import stability_summary  # PA3Fed Table 1 / Fig. 5 (None without per-client losses)

        if (stability := stability_summary(records)) is not None:
            summary["stability"] = stability
        has_bytes = bool(records) and "bytes_cumulative" in records[-1]
        if has_bytes:  # SCARLET Sec. IV-A: total bytes and the cost to reach the target accuracy
            from chillfl.metrics.communication import communication_summary

            summary["communication"] = communication_summary(records, config.eval.target_accuracy)
        if writer:
            writer.write_json("summary.json", summary)
            from chillfl.report.plots import plot_run, plot_temperatures

            plot_run(records, writer.path / "accuracy_loss.png", title=config.name)
            plot_temperatures(records, writer.path / "temperatures.png")
            if has_bytes and config.distillation.get("method"):  # Fig. 7 style: accuracy against cumulative bytes
                from chillfl.report.communication_plots import plot_accuracy_vs_bytes

                plot_accuracy_vs_bytes(records, writer.path / "accuracy_vs_bytes.png", title=config.name)
            if any("agg_clp" in r for r in records):
                from chillfl.report.pa3fed_plots import plot_clp

                plot_clp(records, writer.path / "clp.png", title=config.name)
            return RunOutput(writer.finish(), records, summary)
        return RunOutput(None, records, summary)
    except BaseException:
        if writer:
            writer.abort()
        raise
