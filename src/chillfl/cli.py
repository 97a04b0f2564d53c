"""The ``chillfl`` command line.

    chillfl run [CONFIG] [key=value ...]           one experiment (no CONFIG: the demo)
    chillfl resume RUN_DIR                         continue an interrupted run from its checkpoint
    chillfl compare CONFIG --grid key=v1,v2 ...   variants on the same partition and seed
        [--seeds 0,1,2] [--tune client.lr=0.01,0.1] [--controls]   over seeds, tuned on validation, with step-size controls
    chillfl reproduce PAPER [--seeds 0,1,2] [--resume]  a paper's headline claims at CPU scale: claim vs measured, verdict
    chillfl data show CONFIG                       the partition: sizes, class counts, heat map
    chillfl data download NAME... [--data-dir D]   fetch, check and unpack real datasets
    chillfl list                                   registered datasets, models, methods, experiments
    chillfl report RUN_DIR... [-o report.html]     one self-contained HTML page of result folders
    chillfl analyze NAME RUN_DIR...                calibration, cka, aggregation-accuracy/-entropy, grad-norms, ...

User errors print one line ``chillfl: error: <field>: <problem>`` and exit 2.
Each command imports what it runs inside its handler, so ``chillfl --help`` imports no torch
(``tests/test_cli_startup.py``).
"""

from __future__ import annotations

from chillfl.stop_signals import SIGHUP, STOP_SIGNALS, HeldSignals, StartHold, command_start, stop_signals

with command_start():  # a signal from here (the standard library's imports too) ends the command with one line; held on until main() takes it over
    import argparse
    import codecs
    import contextlib
    import dataclasses
    import io
    import itertools
    import logging
    import os
    import re
    import shlex
    import shutil
    import signal
    import sys
    import textwrap
    from pathlib import Path
    from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, NoReturn, Sequence
    from chillfl.worker_start import refuse_in_worker_start
    from chillfl._version import __version__
    from chillfl.config import (RunConfig, check_out_dir, is_folder, load_config, not_a_file, override_hint, parse_overrides, parse_value, read_config_file,
                                variant_config)
    from chillfl.errors import (DIVERGED_EXIT, ComparisonInterrupted, ConfigError, Diverged, InterruptedAfterRun, MissingExtra, RunNotStarted, StorageError, SweepFailed,
                                Unreachable, closest_name, did_you_mean, one_line, signal_in, stopped_as)
    from chillfl.experiments import DEMO_GRID, bundled_experiments, experiments_root, resolve_config
    from chillfl.extras import need, package_file
    from chillfl.once import said_once
    from chillfl.papers import PAPERS  # reproduce's PAPER choices: chillfl.reproduce itself imports torch
    from chillfl.options import flat_key_fields, option_takes, override_value, short_path, short_repr, table_chooser
    from chillfl.paths import home_path, shell_path
    from chillfl.stderr import say
    from chillfl.wording import counted
    from chillfl.tune import SELECT_RULES

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from chillfl.machine_speed import Calibration
    from chillfl.progress import ProgressMode
    from chillfl.sweeps.shard import Shard
    from chillfl.report.compare import CompareResult
    from chillfl.sweeps.plan import CompareOptions
    from chillfl.runner import RunInterrupted, RunOutput

DEMO = "demo"


def demo_file() -> Path:
    """The built-in demo's config, bundled: what ``chillfl run`` with no config loads, whatever files the current folder
    holds (``DEMO`` resolved there read a file ``./demo`` as the demo's, with the demo's temperature rows added to it)."""
    return experiments_root() / f"{DEMO}.toml"


def _config_path(config: str) -> Path:
    """The config file ``config`` names; a name that is neither a file nor a bundled experiment is one line,
    with the closest bundled name for a typo (``flexchill/table4-digit`` -> ``flexchill/table4-digits``)."""
    _refuse_empty_path("config", config)
    path = resolve_config(config)
    if config == DEMO and path != demo_file():  # a file ./demo would win over the built-in demo, its temperature rows added to it
        raise ConfigError("config", f"{DEMO!r} is ambiguous here: it names the file ./{DEMO} and the built-in demo; give ./{DEMO} for the file, or, "
                                    f"for the built-in demo, run from a folder without a file named {DEMO} (`chillfl run` with no config runs the demo anywhere)")
    try:
        found = path.is_file()
    except (OSError, ValueError):  # too long, NUL: the same one line
        found = False
    if not found and is_folder(path):
        saved = f"; a result folder's config is {short_path(str(path / 'config.toml'))}" if (path / "config.toml").is_file() else ""
        raise ConfigError("config", f"{short_path(config)} is a folder, not a config file{saved}")
    if not found and _is_override(config):
        raise ConfigError("config", f"{short_repr(config)} is an override (section.option=value): give the config file or bundled experiment first")
    if not found and (odd := not_a_file(path)):  # a FIFO, a link loop: there, so not "file not found"
        raise ConfigError("config", f"{short_path(config)} {odd}, not a config file")
    if not found:
        hint = did_you_mean(config.removesuffix(".toml"), bundled_experiments())
        raise ConfigError("config", f"file not found: {short_path(config)}{hint}; `chillfl list experiments` lists the bundled experiments")
    return path


_OVERRIDE = re.compile(r'[A-Za-z_][\w.]*("[^"]*"[\w.]*)?=')  # a quoted variant name may hold "=": variants."T=1".client.lr=0.1


def _is_override(text: str) -> bool:
    """Whether a config argument reads as an override (``client.lr=0.1``) and names no file."""
    if not _OVERRIDE.match(text):
        return False
    try:
        return not resolve_config(text).is_file()
    except (OSError, ValueError):
        return True


def _load(config: str | None, overrides: Sequence[str], args: argparse.Namespace | None = None, variants: Sequence[str] = (),
          grid: Sequence[str] = ()) -> RunConfig:
    """The config the command runs, checked and resolved; ``variants``: the ``--variant`` labels of ``run`` / ``compare``,
    chosen among the rows of ``grid`` where one is given (the demo's temperatures), else among the config's ``[variants]``."""
    path = _config_path(config) if config is not None else None
    _refuse_variant_overrides(overrides, grid)
    flags = {key: getattr(args, key) for key in ("device", "seed", "out_dir", "data_dir", "strict") if args is not None and getattr(args, key, None) is not None}
    if path is not None and not read_config_file(path):  # a file that sets nothing is more often a mistake than a choice
        what = "the defaults with the command line's settings" if overrides or flags else "the defaults"
        listed = "" if args is not None and args.dry_run else " (--dry-run lists them)"  # said before any check: no "running"
        say(f"chillfl: note: {config} sets nothing; the config is {what}{listed}")
    with _signals_held():  # imports the registries (and torch, seconds of a command's start): not for --help
        from chillfl.resolve import resolved

    # a comparison's swept keys: a switch swept there (--grid privacy.mechanism=none,dp-fedavg) lets the base hold its options
    swept = [item.split("=", 1)[0].strip() for item in [*(getattr(args, "grid", None) or []), *(getattr(args, "tune", None) or [])]]
    if not variants:
        return resolved(load_config(path, {**flags, **parse_overrides(list(overrides))}, swept))
    with _signals_held():
        from chillfl.sweeps.plan import chosen_variants, one_variant

    if args is not None and (args.command == "data" or (args.command == "run" and args.seed is not None)) and len(variants) == 1:  # that row's one run
        tables, after = _variant_table_overrides(parse_overrides(list(overrides)))
        return resolved(one_variant(_grid_rows(load_config(path, {**flags, **tables}, swept), grid), variants[0], after, swept))
    return resolved(chosen_variants(_grid_rows(load_config(path, {**flags, **parse_overrides(list(overrides))}, swept), grid), variants))


def _variant_table_overrides(overrides: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``overrides`` split into those of the ``[variants]`` tables (``variants.L.client.lr``) and the rest. Why: with
    ``--variant L --seed N`` every override was applied to the one chosen run's config, after the variant, so
    ``variants.L.client.lr=0.2`` put a ``[variants]`` table back into it (a comparison folder was written instead of the
    one run) and ``variants.L.distillation.beta=0.5`` made a ``distillation`` table without the variant's ``method``.
    The tables' own are applied to the config's ``[variants]`` before the row is chosen, as ``chillfl compare`` does."""
    tables = {k: v for k, v in overrides.items() if k == "variants" or k.startswith("variants.")}
    return tables, {k: v for k, v in overrides.items() if k not in tables}


def _refuse_variant_overrides(overrides: Sequence[str], grid: Sequence[str]) -> None:
    """The demo's variants are its temperature grid's rows, made after the overrides: ``variants."T=1".client.lr=0.1``
    made a variant of its own that the grid then replaced without a word (the bare ``variants.T=1...`` was refused as
    a string), so an override of ``[variants]`` beside a grid is refused, saying what does work."""
    if grid and any(item.strip().startswith(("variants.", "variants=")) for item in overrides):
        raise ConfigError("variants", "the demo's variants are its temperatures (T=1, T=0.25, T=0.05), made after the overrides: "
                                      "an override without 'variants.' sets every one of them; to change one, save "
                                      "`chillfl run --dry-run > demo.toml`, edit its [variants] and run that file")


def _grid_rows(config: RunConfig, grid: Sequence[str]) -> RunConfig:
    """``config`` with the rows of ``grid`` as its ``[variants]`` (the demo's temperatures, which no table of its config
    holds), so that ``--variant T=0.25`` chooses among them as among a config's own; ``config`` itself without a grid."""
    if not grid:
        return config
    from chillfl.sweeps.plan import parse_grid

    return dataclasses.replace(config, variants={v.label: v.overrides for v in parse_grid(grid, config)})


def _report(out: "RunOutput") -> int:
    """The run's table; a signal while it prints ends the command with the run's folder named (it is complete)."""
    try:
        return _print_summary(out)
    except KeyboardInterrupt as exc:
        raise InterruptedAfterRun(out.folder) from exc


def _print_summary(out: "RunOutput") -> int:
    s = out.summary
    parts = [f"{k}={s[k]:.4f}" for k in ("final_global_acc", "best_global_acc", "final_local_acc", "final_global_loss") if k in s]
    # none: every evaluation was non-finite (summary.json keeps no NaN), or the run evaluated nothing; an empty line before
    evaluated = any(key in record for record in out.records for key in ("global_acc", "local_acc", "global_loss"))
    print(" ".join(parts) or ("no finite final metric (every evaluation was non-finite: metrics.jsonl has each round's)" if evaluated else
                              "no evaluated metric (the run scored no model: no global model, and eval.clients = \"none\")"))
    print(f"results: {_absolute(out.folder)}")
    return 0


def _absolute(folder: Path | None) -> Path | None:
    """A result folder as the ``results:`` line names it: absolute, as a run's is (a resume's was the path as typed)."""
    return None if folder is None else Path(os.path.abspath(folder))


def _checking() -> "AbstractContextManager[None]":
    """Where a dry run checks every run's parts: on one torch intra-op thread, restored after.

    Why: the checks build each run's model and push one sample through it (shape probes), and keep no number,
    so threads only add a hand-off to each tiny op; on a loaded 2-core machine those hand-offs were most of
    ``reproduce fedchill --dry-run``'s check (2.6 s for its 24 runs' parts, 0.4 s on one thread). Only the
    command line's dry runs: what their checks leave cached for a later run in the process (loaded datasets,
    standardised in numpy; a dataset's min and max) does not depend on torch's thread count.
    """
    from chillfl.runner import intra_op_threads

    return intra_op_threads(1)


def _dry_run(config: RunConfig, grid: Sequence[str] = (), args: argparse.Namespace | None = None, writes: bool = True) -> int:
    """``--dry-run``: build and check every part as the run would, then print the resolved config
    (file < flags < overrides, as :func:`_load` merges them) as it would be saved; nothing runs and nothing is written.
    A comparison's runs (every variant x seed x tuning point, by name, and their count) come first as comments.

    A mistake a run would hit exits 2 here. For ``compare``, every variant, tuning point and
    seed is checked. Without the dataset's files only names and options are checked (one note).
    """
    from chillfl.storage.results import to_toml, unset_comment
    from chillfl.runner import check_sinks

    if writes:  # what a run checks before it writes anything
        check_out_dir(config.out_dir)
        check_sinks(config, dry_run=True)  # a store that is no server is not opened: that would create it
    planned: list[str] = []
    if args is not None and (args.command == "compare" or bool(grid) or _compares(config, args)):  # `run` on a config with variants compares too
        from chillfl.sweeps.plan import check_select_used
        from chillfl.sweeps.run import run_compare

        options = _compare_options(args)
        _check_command_line(config, args, grid, options)
        check_select_used(config, options)
        with _checking():
            checked = run_compare(config, grid, reference=getattr(args, "reference", None), progress=False, options=options, dry_run=True)
        complete, planned, recorded = checked.complete, checked.planned, checked.recorded
    else:
        from chillfl.experiment import check_config

        with _checking():
            complete = check_config(config)
    if not complete:
        from chillfl.experiment import absent_data_note

        say(f"chillfl: {absent_data_note(config)}")
    if planned:  # the runs --grid, --seeds and --tune make: opening comments, so the output stays the config's TOML
        print("# compare (not part of the config): " + planned[0])
        for line in planned[1:]:
            print(textwrap.fill(line, width=100, initial_indent="#   ", subsequent_indent="#     ", break_on_hyphens=False))
    if not planned:  # a comparison's recorded TOML opens with it (comparison_toml)
        print(unset_comment(config.to_dict()), end="")  # as a run folder's config.toml has it, above the tables
    # one run: as its folder's config.toml will hold it (empty tables left out); a comparison: as its folder's will
    print(recorded if planned else to_toml(config.to_saved_dict()), end="")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    if args.config is not None and _is_override(args.config):  # `chillfl run client.lr=0.1`: the demo, as the usage says
        args.config, args.overrides = None, [args.config, *args.overrides]
    if args.dry_run:
        _shard(args)
        rows = _demo_rows(args.config)  # what the demo runs: its temperatures too (--variant: some of them)
        demo = bool(rows)
        with _before_writing(None):  # a dry run writes nothing, stopped or not
            config = _load(str(demo_file()) if args.config is None else args.config, args.overrides, args, args.variant or (), rows)
            if not (demo and (config.variants or not args.variant)) and not _compares(config, args):  # one run, as below
                _refuse_shard(config, args)
                _say_made_by(args)
            return _dry_run(config, [] if args.variant else rows, args=args)
    rows = _demo_rows(args.config)
    demo = bool(rows)
    with _before_writing("run"):  # start-up: importing the runner (torch) is most of a run's first seconds, and nothing is written yet
        config = _load(str(demo_file()) if args.config is None else args.config, args.overrides, args, args.variant or (), rows)
        if demo and args.variant and not config.variants:  # one of its rows at one seed (--variant T=0.25 --seed 0): a plain run
            demo = False
        if demo:
            _check_seed_flag(config, args, rows)  # before the banner: a refusal stays its one line
            _check_overrides_replaced(config, args, [] if args.variant else rows, _compare_options(args))
            if config.dataset.get("name") == "digits":  # the demo's data: a missing extra is its one line, before the banner
                package_file("sklearn", "datasets", "the digits data")  # found, not imported (its import is a second of start-up)
            say("chillfl demo: FedAvg on sklearn digits, 20 clients with Dirichlet(0.1) label skew;\n"
                "training temperature T = 1 (standard softmax) vs logit chilling T = 0.25 and 0.05,\n"
                "3 seeds, each temperature at its own learning rate tuned on a validation split.")
        with _signals_held():
            from chillfl.runner import run_experiment
    if demo:
        return _compare(config, [] if args.variant else rows, None, _progress(args), args)  # --variant: the rows kept as [variants]
    if _compares(config, args):  # a comparison: run it as `compare` would, saying so in one info line (none under -q)
        if config.variants:
            why = f"defines {len(config.variants)} variants: running the comparison"
        else:  # seeds or a tuning grid, no variants: the method alone, over them
            asked = " and ".join(what for what, given in (("a [compare] table", bool(config.compare)), ("a [tune] grid", bool(config.tune))) if given)
            why = f"sets {asked}: running it as a comparison of one variant"
        one_row = "; one of its runs: --variant LABEL --seed N" if config.variants else ""  # a user who meant a single run
        said = None if args.quiet else f"chillfl: {config.name} {why} (`chillfl compare {args.config}`{one_row})"
        return _compare(config, [], None, _progress(args), args, said)
    _refuse_shard(config, args)
    check_out_dir(config.out_dir)
    _say_made_by(args)
    return _report(run_experiment(config, progress=_progress(args)))


def _say_made_by(args: argparse.Namespace) -> None:
    """The note of :func:`_made_by_another_command`, unless ``-q``."""
    if not args.quiet and (made_by := _made_by_another_command(args.config)):
        say(f"chillfl: note: {made_by}")


def _made_by_another_command(name: str | None) -> str | None:
    """What to say when ``name`` is a bundled experiment whose figure another command makes (``_catalogue.toml``'s
    ``[commands]``): ``chillfl run fedchill/fig1-digits`` trained a plain FedChill run and drew no heat map, without a word."""
    from chillfl.catalogue import commands

    if name is None:
        return None
    stem = name.removesuffix(".toml")
    made = commands().get(stem)
    if made is None or Path(name).exists():  # a file of the user's own that happens to share the name: theirs
        return None
    return f"{stem}'s figure is made by `chillfl {made.command} {stem}`; this runs its config as one plain run"


def _refuse_shard(config: RunConfig, args: argparse.Namespace) -> None:
    """``--shard`` on what runs as one run is refused, by ``chillfl run`` and its dry run alike (the dry run said 0)."""
    if args.shard is not None:
        _shard(args)  # a malformed K/N is named first
        raise ConfigError("shard", f"{config.name} is one run: --shard splits a comparison's runs (its variants, seeds, tuning grid) over several processes")


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """A stop signal that comes while the block runs is acted on once it is done (:class:`HeldSignals`).

    Why: around a third-party import (torch's is seconds of a command's start). A signal's exception raised inside it
    can be dropped by the package's own code (Python 3.11 reports one raised in a ``__set_name__`` as a RuntimeError,
    which an ``except Exception`` takes): the command then ended in a traceback of a half-imported torch, or ran on
    to the end with the signal lost. Held, the import completes and the signal then stops the command as anywhere else.
    """
    held = HeldSignals()
    try:
        yield
    finally:
        held.release()


def _before_writing(what: str | None) -> "AbstractContextManager[None]":
    """A command's start, before it writes anything: a stop signal here ends it with :class:`RunNotStarted` (``what``),
    whose line says nothing was written. Without it the line was the generic one, which for ``compare`` and
    ``reproduce`` sent the user to "*.partial folders" of which there was none. A signal's exception that a package
    wrapped (:func:`~chillfl.errors.signal_in`) is the signal too (:func:`~chillfl.errors.stopped_as`)."""
    return stopped_as(lambda: RunNotStarted(what))


def _compares(config: RunConfig, args: argparse.Namespace) -> bool:
    """Whether ``chillfl run`` runs ``config`` as a comparison: it has variants, or a ``[compare]`` table or ``[tune]``
    grid (:func:`~chillfl.sweeps.plan.repeats`) and ``--seed`` asks for no one seed (``--seed N``: one run at N)."""
    from chillfl.sweeps.plan import repeats

    return bool(config.variants) or (repeats(config) and args.seed is None)


def _refuse_empty_path(field: str, *paths: str) -> None:
    """One line on an empty path argument, as ``--out ""`` gets. Why: ``Path("")`` is the current folder, so
    ``status ""`` said ". is not a chillfl result folder" and ``run ""`` said "'' is a folder", naming no argument."""
    if "" in paths:
        raise ConfigError(field, "must be a non-empty path, got ''")


def cmd_resume(args: argparse.Namespace) -> int:
    _refuse_empty_path("run_dir", args.run_dir)
    with _signals_held():  # torch: most of the start
        from chillfl.sweeps.record import is_sweep
        from chillfl.sweeps.run import resume_compare
        from chillfl.runner import resume_experiment

    if is_sweep(Path(args.run_dir)):  # an interrupted comparison: its finished runs kept, the stopped one resumed, the rest run
        result = resume_compare(args.run_dir, progress=_progress(args), force=args.force)
        strict = result.folder is not None and load_config(result.folder / "config.toml").strict  # the comparison's own setting
        return _compare_result(result, strict)
    return _report(resume_experiment(args.run_dir, progress=_progress(args), force=args.force))


def cmd_status(args: argparse.Namespace) -> int:
    """Each named folder's status, one after another (a folder of result folders: each of theirs); one that cannot be
    read is one line naming it and the others are still shown, exit 2. ``chillfl status par/*`` was an argparse error."""
    if len(args.run_dirs) == 1:
        _refuse_empty_path("run_dir", *args.run_dirs)
    with _signals_held():  # torch
        from chillfl.status import status_folders, status_table

    code, shown = 0, False
    if "" in args.run_dirs:  # among others: its one line, and the others are still shown
        say("chillfl: error: run_dir: must be a non-empty path, got ''")
        code = 2
    folders = [f for path in args.run_dirs if path for f in status_folders(path)]
    for folder in folders:
        try:
            table = status_table(folder)
        except ConfigError as exc:
            if len(folders) == 1 and code == 0:
                raise
            said = str(exc)
            name = one_line(folder)  # escaped, as the error itself is: a folder named with ESC sequences drove the terminal
            say(f"chillfl: error: {said}" if name in said else f"chillfl: error: {name}: {said}")  # which one, among several
            code = 2
            continue
        print(("\n" if shown else "") + table)
        shown = True
    return code


def _compare_options(args: argparse.Namespace) -> "CompareOptions":
    from chillfl.sweeps.plan import CompareOptions, parse_seeds, parse_tune_items

    return CompareOptions(
        seeds=parse_seeds(args.seeds) if getattr(args, "seeds", None) is not None else None,  # `--seeds ""`: its own line, not --grid's
        tune=parse_tune_items(args.tune) if getattr(args, "tune", None) else None,
        controls=True if getattr(args, "controls", False) else None,
        select=getattr(args, "select", None),
    )


def _check_seed_flag(config: RunConfig, args: argparse.Namespace, grid: Sequence[str], asked: Sequence[int] | None = None) -> None:
    """``--seed N`` (or a ``seed=N`` override) on a comparison whose seeds come from ``--seeds`` (``asked``) or its
    ``[compare] seeds``: one line on that field, not a silent run of the other seeds (``chillfl run --seed 0`` ran the
    demo's 27 runs at seeds 0, 1 and 2). Where the comparison has no seeds of its own, the seed is the one it runs at."""
    seeds = asked if asked is not None else config.compare.get("seeds")
    written = parse_overrides(list(args.overrides)).get("seed")  # a seed=N override, as _load applied it
    field, seed = ("--seed", str(args.seed)) if args.seed is not None else ("seed", str(written)) if written is not None else ("", "")
    if not field or not seeds:
        return
    if asked is not None:
        given = f"--seed {seed}" if field == "--seed" else f"seed={seed}"
        raise ConfigError(field, f"--seeds {','.join(map(str, asked))} sets the comparison's seeds; drop {given}, or give --seeds {seed}")
    shown = ", ".join(map(str, seeds)) if isinstance(seeds, list) else str(seeds)
    target = DEMO if args.config is None else shlex.quote(args.config)
    grids = "".join(f" --grid {shlex.quote(g)}" for g in grid)
    one_run = f"; one run: chillfl run {target} --variant LABEL --seed {seed}" if config.variants or grid else ""  # the demo's rows too
    raise ConfigError(field, f"{config.name} compares at the seeds of its [compare] table ({shown}), which {field} does not change; "
                             f"at seed {seed} alone: chillfl compare {target}{grids} --seeds {seed}{one_run}")


def _check_command_line(config: RunConfig, args: argparse.Namespace, grid: Sequence[str], options: "CompareOptions") -> None:
    """The command line's seed and overrides, checked against the comparison they are given to (one line each)."""
    _check_seed_flag(config, args, grid, options.seeds)
    _check_overrides_replaced(config, args, grid, options)


def _check_overrides_replaced(config: RunConfig, args: argparse.Namespace, grid: Sequence[str], options: "CompareOptions") -> None:
    """An override that every run of a comparison replaces (its tuning grid's axis, or every variant's value): one line on
    its key (:func:`chillfl.sweeps.replaced.check_overrides_replaced`, which :func:`chillfl.compare` calls too), as
    :func:`_check_seed_flag` does for the seed. ``grid``: the rows the comparison runs as its variants (the demo's
    temperatures, ``--grid``); a grid that does not parse is left to the planning, which names it."""
    from chillfl.sweeps.plan import parse_grid, typed_comparison
    from chillfl.sweeps.replaced import AskedBy, check_overrides_replaced

    try:
        variants = parse_grid(grid, typed_comparison(config)) if grid else None
    except ConfigError:
        return
    asked = AskedBy(target=DEMO if args.config is None else shlex.quote(args.config), grid_rows=args.command == "compare" and bool(args.grid),
                    tune_given=options.tune is not None)  # the demo's temperatures are variants to `chillfl run`
    check_overrides_replaced(config, parse_overrides(list(args.overrides)), variants, options.tune if options.tune is not None else config.tune, asked)


def _compare(
    config: RunConfig, grid: Sequence[str], reference: str | None, progress: "ProgressMode", args: argparse.Namespace | None = None, said: str | None = None,
) -> int:
    """Run the comparison; ``said``: an info line printed once every run is checked (a config error stays one line)."""
    with _before_writing("comparison"):  # run_compare says so too, up to its folder
        with _signals_held():  # torch, when `chillfl compare` starts
            from chillfl.sweeps.plan import CompareOptions, check_select_used
            from chillfl.sweeps.run import run_compare

        options = _compare_options(args) if args is not None else CompareOptions()
        if args is not None:
            _check_command_line(config, args, grid, options)
            check_select_used(config, options)
        shard = _shard(args) if args is not None else None
        check_out_dir(config.out_dir)
    announce = None if said is None else (lambda: say(said))
    result = run_compare(config, grid, reference=reference, progress=progress, options=options, on_checked=announce, shard=shard)
    return _compare_result(result, config.strict, shard)


def _shard(args: argparse.Namespace) -> "Shard | None":
    """``--shard K/N`` of ``run`` or ``compare``, parsed (a ConfigError on ``shard``); None without it."""
    from chillfl.sweeps.shard import Shard

    return None if args.shard is None else Shard.parse(args.shard)


def _compare_result(result: "CompareResult", strict: bool, shard: "Shard | None" = None) -> int:
    if result.pending:  # a shard whose comparison other shards have not finished: no table yet
        from chillfl.sweeps.resume import has_ended

        shared = "OUT/NAME-compare.partial" if result.folder is None else shell_path(result.folder)
        own = [name for name in result.failures if result.folder is None or not has_ended(result.folder, name)]  # failed here, not diverged: unfinished
        if own:  # its own runs keep the table from being written: not "other shards", and not exit 0
            others = result.pending - len(own)
            rest = f", {others} more in other shards (running, or failed there)" if others > 0 else ""
            say(f"chillfl: shard {shard}: {counted(len(own), 'run')} failed in this shard ({', '.join(own)}), so {counted(result.pending, 'run')} "
                f"of the comparison {'is' if result.pending == 1 else 'are'} not finished{rest}; once every shard has ended, "
                f"`chillfl resume {shared}` reruns them and writes the table")
            print(f"results: {_absolute(result.folder)}")
            _failed_runs(result, strict)
            return 1
        ended = f"its {counted(result.runs, 'run')} ended" if result.runs else "it has no runs (said above)"
        say(f"chillfl: shard {shard}: {ended}; {counted(result.pending, 'run')} of the comparison "
            f"{'is' if result.pending == 1 else 'are'} not finished yet (other shards). "
            f"The last shard to end writes the table; if a shard failed, `chillfl resume {shared}` runs what is missing once the others ended")
        print(f"results: {_absolute(result.folder)}")
        return _failed_runs(result, strict)
    if result.table:  # empty for a shard that ended beside the one that wrote the table (it logs so)
        print(result.table)
    print(f"results: {_absolute(result.folder)}")
    return _failed_runs(result, strict)


def _failed_runs(result: "CompareResult", strict: bool) -> int:
    """Exit code for the runs that did not finish: 0 (3 with ``strict``), one line naming them; 3 when nothing was compared."""
    if result.failures:  # partly failed: exit 0 (3 with --strict), one line naming them; nothing compared: exit 3
        runs = ", ".join(f"{name} ({why})" for name, why in result.failures.items())
        failed = f"{len(result.failures)} of {counted(result.runs, 'run')}" if result.runs else counted(len(result.failures), "run")
        say(f"chillfl: {failed} did not finish: {runs}")
        nothing = result.no_comparison()
        if nothing is not None:
            say(f"chillfl: every comparison failed: {nothing}")
            return DIVERGED_EXIT
        return DIVERGED_EXIT if strict else 0
    return 0


def _demo_rows(name: str | None, grid: Sequence[str] = ()) -> list[str]:
    """The demo's temperature rows where the command names the demo (or nothing) and no ``--grid`` replaces them. Why one
    helper for ``run`` and ``compare``: ``chillfl compare demo`` loaded demo.toml alone and ran 9 plain-FedAvg runs into
    the demo's folder name, and refused ``--variant T=0.25``, which ``chillfl run demo`` takes."""
    return list(DEMO_GRID) if (name is None or name == DEMO) and not grid else []


def cmd_compare(args: argparse.Namespace) -> int:
    rows = _demo_rows(args.config, args.grid)
    grid = args.grid or ([] if args.variant else rows)  # --variant: the demo's rows kept as [variants]
    if args.dry_run:
        _shard(args)
        with _before_writing(None):  # a dry run writes nothing, stopped or not
            config = _load(args.config, args.overrides, args, args.variant or (), rows)
            _say_grid_replaces(config, args.grid)
            with _flags_in_sweep(args.config, config, args.grid):
                return _dry_run(config, grid, args)
    with _before_writing("comparison"):
        config = _load(args.config, args.overrides, args, args.variant or (), rows)
    _say_grid_replaces(config, args.grid)
    with _flags_in_sweep(args.config, config, args.grid):
        return _compare(config, grid, args.reference, _progress(args), args)


@contextlib.contextmanager
def _flags_in_sweep(path: str | None, config: RunConfig, grid: Sequence[str]) -> Iterator[None]:
    """An older chillfl's comparison config (no variants; its flags in the ``sweep.json`` beside it) compared without
    flags: the "--grid" line names what that record holds (:func:`chillfl.sweeps.record.recorded_flags`)."""
    try:
        yield
    except ConfigError as exc:
        if exc.field != "--grid" or grid or config.variants or path is None:
            raise
        from chillfl.sweeps.record import recorded_flags

        hint = recorded_flags(path, config)
        if hint is None:
            raise
        raise ConfigError("--grid", hint) from None


def _say_grid_replaces(config: RunConfig, grid: Sequence[str]) -> None:
    """A note when ``--grid`` sets aside the config's own ``[variants]``: the comparison ran the grid's rows alone, and a
    ``controls = true`` of the config then said no variant was chilled, though the config has one."""
    if grid and config.variants:
        labels = list(config.variants)
        shown = ", ".join(map(repr, labels[:4])) + (f" and {len(labels) - 4} more" if len(labels) > 4 else "")
        say(f"chillfl: note: --grid replaces the config's [variants] ({shown}): the comparison runs the grid's rows alone")


def cmd_reproduce(args: argparse.Namespace) -> int:
    with _before_writing(None), _signals_held():  # torch: most of the start
        from chillfl.sweeps.plan import parse_seeds
        from chillfl.reproduce import format_outcomes, reproduce, seed_warnings, write_verdicts
        from chillfl.runner import RunInterrupted

    seeds = parse_seeds(args.seeds)
    if args.out_dir is not None:
        args.out_dir = home_path(args.out_dir)  # --out=~/r (no shell expands it): home, as a run's out_dir is
        check_out_dir(args.out_dir)
    if args.calibrate and not args.dry_run:
        raise ConfigError("--calibrate", "scales the CPU minutes of `chillfl reproduce --dry-run`; it goes with --dry-run only")
    if args.dry_run:
        from chillfl.reproduce import format_plan, plan

        with _checking():
            planned = plan(args.paper, seeds, out_dir=args.out_dir, resume=args.resume)
        found = _calibrated(args.quiet) if args.calibrate else None
        if isinstance(found, int):
            return found
        print(format_plan(args.paper, seeds, planned, None if found is None else found.factor))
        return 0
    # finished claims read back, the stopped one resumed; from any folder: without --out, each config's relative out_dir is
    # found from this one (cd), and --out is made absolute
    out = f" --out {shell_path(args.out_dir)}" if args.out_dir is not None else ""
    here = "" if args.out_dir is not None else f"cd {shell_path(os.getcwd())} && "
    again = f"{here}chillfl reproduce {args.paper} --seeds {','.join(map(str, seeds))}{out} --resume"
    try:
        outcomes = reproduce(args.paper, seeds, out_dir=args.out_dir, progress=_progress(args), resume=args.resume)
    except RunInterrupted as exc:
        exc.resume_command = again
        raise
    except KeyboardInterrupt as exc:  # between two runs: nothing was stopped half-way
        say(f"chillfl: interrupted; resume with: {again}")
        return _signal_exit(exc)
    print(format_outcomes(outcomes))
    for warning in seed_warnings(outcomes):  # the comparisons' tables say so; the verdicts drawn from them said nothing
        say(f"chillfl: {warning}")
    written = write_verdicts(args.paper, outcomes)
    if written is not None:  # its figure beside it, where the plots extra drew one
        figure = written.with_suffix(".png")
        shown = f" (figure: {figure})" if figure.is_file() else ""
        say(f"chillfl reproduce: verdicts and their evidence folders in {written}{shown}")
    return 0


def data_show_path(config: RunConfig) -> Path:
    """``data show``'s default heat map: ``<out_dir>/data-show/<name>-partition.png`` (``results/`` by default), beside the runs."""
    return Path(config.out_dir) / "data-show" / f"{config.name}-partition.png"


def cmd_data_show(args: argparse.Namespace) -> int:
    with _before_writing(None):
        with _signals_held():  # torch: most of the start
            from chillfl.data.show import DESCRIBE_MAX_CLIENTS, describe, plot_class_heatmap
            from chillfl.experiment import build_data, say_notes, unused_rows_note
        # the demo's variants are its temperature rows, as `run demo --variant` takes them (they were "no [variants]" here)
        config = _load(args.config, args.overrides, args, [args.variant] if args.variant else (), _demo_rows(args.config) if args.variant else ())
    if args.dry_run:
        return _dry_run(config, writes=False)
    if not args.variant and (other := _other_partitions(config)):
        which = f"the variant {other[0]!r} partitions" if len(other) == 1 else f"the variants {', '.join(map(repr, other))} partition"
        say(f"chillfl: note: this is the base config's partition; {which} otherwise (`--variant LABEL` shows one)")
    # a comparison draws at these: seed (0 unset) may be none of them. A variant's one run drops [compare]: its base's say
    compared = _load(args.config, [o for o in args.overrides if o.strip().startswith("compare.")], args) if args.variant else config
    seeds = compared.compare.get("seeds") or []
    if seeds and config.seed not in seeds and args.seed is None and "seed" not in parse_overrides(list(args.overrides)):
        say(f"chillfl: note: this is seed {config.seed}'s partition, not among the [compare] seeds ({', '.join(map(str, seeds))}); "
            f"`--seed {seeds[0]}` shows one")
    need("matplotlib", "plots", "heat maps")  # before any work: the heat map is this command's output
    from chillfl.plots.figure import figure_file

    out = figure_file(args.output, "output") if args.output else data_show_path(config)  # default under out_dir, never the current folder
    check_out_dir(str(out.parent), "output")
    if out.is_dir():  # the default path, taken by a folder
        raise ConfigError("output", f"{out} is a folder; give a PNG file path")
    data = build_data(config)
    say_notes([unused_rows_note(config, data)])  # what the run would say of the split: this command shows it
    out.parent.mkdir(parents=True, exist_ok=True)
    print(describe(data, None if args.all else DESCRIBE_MAX_CLIENTS))
    plot_class_heatmap(data.class_counts(), out, title=f"{config.name}: class counts per client")
    print(f"heat map: {out}")
    return 0


def _other_partitions(config: RunConfig) -> list[str]:
    """The ``[variants]`` whose data differ from the base config's (another partition, seed-free): ``data show`` showed the
    base's without a word, for a comparison whose variants vary ``partition.alpha``."""
    from chillfl.resolve import resolved
    from chillfl.sweeps.plan import data_key

    base = data_key(config)  # resolved by _load: every default written, as the variants' are here
    return [label for label, table in config.variants.items() if data_key(resolved(variant_config(config, label, table))) != base]


def cmd_data_download(args: argparse.Namespace) -> int:
    """Fetch a real dataset; every failure is one line: exit status 1 when it could not finish (the network, the disk, a file
    failing its check), 2 for bad input (a :class:`~chillfl.data.download.DownloadRequestError`, or an
    :class:`~chillfl.data.download.ArchiveError`: vouched-for bytes that do not unpack); the error's class says which."""
    with _signals_held():  # torch (chillfl.data)
        from chillfl.data.download import DownloadError, download_dataset, read_checksums
    from chillfl.progress import mode_for

    if not args.data_dir or "\0" in args.data_dir:  # "" was the current folder: datasets unpacked beside the user's files
        raise ConfigError("--data-dir", f"must be a non-empty path without NUL characters, got {short_repr(args.data_dir)}")
    args.data_dir = home_path(args.data_dir)  # --data-dir=~/data (no shell expands it): home, as a run's data_dir is
    if not args.names:
        return _download_status(args.data_dir)
    name = args.names[0]
    try:
        checksums = read_checksums(args.checksums) if args.checksums else None
        for name in args.names:
            folder = download_dataset(name, args.data_dir, mirror=args.mirror, checksums=checksums, progress=mode_for(args.quiet), force=args.force)
            print(f"{name}: {folder}")
    except DownloadError as exc:
        say(f"chillfl: error: download {name}: {exc}")
        return exc.exit_status
    except KeyboardInterrupt:
        say("chillfl: interrupted; the same command resumes the download")
        return 130
    return 0


def _download_status(data_dir: str) -> int:
    """``chillfl data download`` without names: every downloadable dataset and whether ``data_dir`` has it."""
    from chillfl.data.download import dataset_status

    for name, folder, size, state in dataset_status(data_dir):
        print(f"{name:16} {folder:26} {size:>12}  {state}")
    return 0


LIST_SECTIONS = {
    "datasets": ("datasets",), "partitioners": ("partitioners",), "models": ("models",), "temperatures": ("temperatures",),
    "methods": ("algorithms", "distillation", "prototypes"), "algorithms": ("algorithms",), "distillation": ("distillation",),
    "prototypes": ("prototypes",), "terms": ("terms",), "attacks": ("attacks",), "privacy": ("privacy",),
}
"""``chillfl list WHAT`` -> the sections of the registered names it prints (``methods``: every family's methods)."""


def _calibrated(quiet: bool) -> "Calibration | int":
    """This machine's factor on the cost model's CPU minutes (``--calibrate``: a timed probe run), or the exit status of
    a stop signal that ended the probe (said in one line: the probe writes nothing, so there is nothing to resume)."""
    with _signals_held():  # the probe runs chillfl: torch
        from chillfl.machine_speed import PROBE_ROUNDS, calibrate
        from chillfl.runner import RunInterrupted
    if not quiet:
        say(f"chillfl: calibrating: timing a {PROBE_ROUNDS}-round FedAvg run of the demo's setting 3 times (a few seconds)")
    try:
        return calibrate()
    except RunInterrupted as exc:
        say(f"chillfl: calibration {exc} of its probe; nothing was written")
        return exc.exit_code


def cmd_list(args: argparse.Namespace) -> int:
    if args.calibrate and args.what != "experiments":
        raise ConfigError("--calibrate", "scales the CPU minutes of `chillfl list experiments`; it goes with `experiments` only")
    if args.options is not None and args.what:  # it printed every option of every part, or (experiments) the catalogue, ignoring one of the two
        example = f"chillfl list --options {args.options[0]}" if args.options else "chillfl list --options NAME"
        raise ConfigError("--options", f"lists options by part name, not with a kind of part ({args.what!r}): `{example}` for one "
                                       f"part's, `chillfl list --options` for all, `chillfl list {args.what}` for the names")
    if args.what == "experiments":
        with _signals_held():  # what the catalogue imports
            from chillfl.catalogue import catalogue, format_catalogue

        if not args.calibrate:
            print(format_catalogue(catalogue()))
            return 0
        found = _calibrated(bool(args.quiet))
        if isinstance(found, int):
            return found
        print(format_catalogue(catalogue(), found.factor, found.describe()))
        return 0
    if args.options is not None:
        with _signals_held():  # the registries: torch
            from chillfl.report.reference import render_reference

        print(render_reference(only=args.options or None), end="")
        return 0
    with _signals_held():  # the registries: torch
        from chillfl.aggregation.registry import algorithm_names
        from chillfl.data import dataset_names, partitioner_names
        from chillfl.models import model_names
        from chillfl.plugins import unusable_plugins
        from chillfl.settings.attack import kind_names
        from chillfl.settings.distillation import method_names
        from chillfl.settings.privacy import mechanism_names
        from chillfl.settings.prototypes import method_names as prototype_method_names
        from chillfl.temperature import policy_names
        from chillfl.training.terms import term_names

    sections = {  # WHAT -> (title, the names, the config part whose specs give their summaries; objective: the loss terms)
        "datasets": ("datasets", dataset_names, "dataset"),
        "partitioners": ("partitioners", partitioner_names, "partition"),
        "models": ("models", model_names, "model"),
        "temperatures": ("temperature policies", policy_names, "temperature"),
        "algorithms": ("algorithms", algorithm_names, "algorithm"),
        "distillation": ("distillation methods", method_names, "distillation"),
        "prototypes": ("prototype methods", prototype_method_names, "prototypes"),
        "terms": ("loss terms", term_names, "objective"),
        "attacks": ("attacks", kind_names, "attack"),
        "privacy": ("privacy mechanisms", mechanism_names, "privacy"),
    }
    if args.what:  # one kind: a name a line, with its summary
        # cut to the terminal's width on a terminal; whole in a pipe or a file (grep, a reader's own wrapping), where no width holds
        columns = max(40, shutil.get_terminal_size().columns) if sys.stdout.isatty() else None
        with _signals_held():
            from chillfl.report.reference import summaries

        for key in LIST_SECTIONS[args.what]:
            title, _, part = sections[key]
            rows = summaries(part)
            width = max(len(name) for name, _ in rows)
            print(f"{title}:")
            for name, summary in rows:
                line = f"  {name:<{width}}  {summary}".rstrip()
                print(line if columns is None or len(line) <= columns else line[: columns - 4].rstrip() + " ...")
        return 0
    listed = {title: names() for title, names, _ in sections.values()}
    for title, part_names in listed.items():
        print(textwrap.fill(f"{title}: {', '.join(part_names)}", width=100, subsequent_indent="    "))
    unusable = unusable_plugins(set().union(*listed.values()))  # an entry point no part takes was left out without a word
    if unusable:
        print("unusable plugins (chillfl.plugins entry points that no part can use, and why):")
        for name, why in unusable:
            print(f"  {name}: {why}")
    print("experiments (`chillfl list experiments`: paper, data, minutes):")
    groups: dict[str, list[str]] = {}
    for name in bundled_experiments():
        folder, _, stem = name.rpartition("/")
        groups.setdefault(folder, []).append(stem)
    for folder, stems in groups.items():
        print(textwrap.fill(f"{folder or '(top)'}: {', '.join(stems)}", width=100, initial_indent="    ", subsequent_indent="        ", break_on_hyphens=False))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    _refuse_empty_path("RUN_DIR", *args.run_dirs)
    _refuse_empty_path("--output", args.output)
    with _before_writing(None), _signals_held():  # torch: most of the start
        from chillfl.report.html import write_report
        from chillfl.status import not_there

    for given in args.run_dirs:  # a path that is not there: where a finished .partial went, as `chillfl status` says
        if not os.path.lexists(given):
            raise ConfigError("RUN_DIR", not_there(Path(given), "report"))
    path = write_report(args.run_dirs, args.output, args.title, models=not args.no_models, partitions=not args.no_partitions)
    print(f"report: {path}")
    return 0


def _verbosity(p: argparse.ArgumentParser, trains: bool = True) -> None:
    """``-q`` / ``-v``; ``trains``: the command runs rounds, so they also set its progress (``data show`` has none)."""
    if trains:
        p.add_argument("-q", "--quiet", action="count", default=0, help="-q: no progress and no info lines (warnings and errors only); -qq: errors only")
        p.add_argument("-v", "--verbose", action="count", default=0, help="debug lines, and a progress line every round")
    else:
        p.add_argument("-q", "--quiet", action="count", default=0, help="-q: no info lines (warnings and errors only); -qq: errors only")
        p.add_argument("-v", "--verbose", action="count", default=0, help="debug lines")


def _progress(args: argparse.Namespace) -> "ProgressMode":
    """A bar on a terminal, periodic plain lines in logs (no \\r pile-up), nothing with -q."""
    from chillfl.progress import mode_for

    return mode_for(bool(args.quiet) and not getattr(args, "verbose", 0))


class _Parser(argparse.ArgumentParser):
    """argparse's parser with its errors on one line (exit 2), like every other chillfl error: the usage it prints
    before the message is a wrapped block of several lines; ``--help`` still prints it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Abbreviations off, here and in every subcommand's parser (they are made of this class): ``--data cifar10``
        was taken as ``--data-dir cifar10`` with no word said; unknown, it is named with the option meant."""
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {one_line(message)}{self._hint(message)}; `{self.prog} --help` shows the usage\n")

    def _hint(self, message: str) -> str:
        """For an unknown command: the closest one (``analysis`` -> ``analyze``), or where a command another FL tool (or
        chillfl's own design notes) names lives here (``tune``, ``sweep``: inside ``compare``). argparse before Python 3.14
        lists the choices without a suggestion."""
        found = re.match(r"argument \w+: invalid choice: '([^']*)' \(choose from (.*)\)$", message)
        if not found:
            return ""
        typed, choices = found[1], [c.strip().strip("'") for c in found[2].split(",")]  # quoted or not (Python >= 3.12.8)
        if self.prog == "chillfl" and typed in COMMAND_HINTS:
            return f" ({COMMAND_HINTS[typed]})"
        return did_you_mean(typed, choices)


COMMAND_HINTS = {
    "tune": "tuning runs inside a comparison: chillfl compare CONFIG --tune client.lr=0.01,0.1 eval.validation=0.2",
    "sweep": "a sweep is a comparison: chillfl compare CONFIG --grid KEY=V1,V2",
    "grid": "a grid is a comparison: chillfl compare CONFIG --grid KEY=V1,V2",
}
"""Commands a newcomer types that chillfl spells otherwise: the line says where they live."""

COMPARE_FLAGS = ("--grid", "--reference", "--seeds", "--tune", "--select", "--controls")
"""``chillfl compare``'s own flags: typed after ``chillfl run`` (``run CONFIG --seeds 0,1,2``), the line says they are
``compare``'s, as ``run`` takes the same config (and runs a ``[compare]`` table's seeds as a comparison)."""


def _subparser(parser: argparse.ArgumentParser, words: Sequence[str]) -> argparse.ArgumentParser:
    """The parser of the (sub)command ``words`` names (``["data", "show"]``: ``data show``'s), found through ``parser``'s
    subcommands; ``parser`` itself where a word names none."""
    for word in words:
        found = next((a.choices[word] for a in parser._actions if isinstance(a, argparse._SubParsersAction) and word in a.choices), None)
        if found is None:
            break
        parser = found
    return parser


def _stray_flags_hint(parser: argparse.ArgumentParser, args: argparse.Namespace, extra: Sequence[str], argv: Sequence[str] = (),
                      skip: Sequence[str] = ()) -> str:
    """For each unknown flag among ``extra`` (what ``parser``, a subcommand's, did not take; ``skip``: flags another hint
    names): the flag whose value it spells (``--out-dir``: ``--out``), for a command that takes overrides the override of
    the config option it names (``--rounds 5``: ``federation.rounds=5``, found as a flat ``rounds=5`` is:
    :func:`~chillfl.options.flat_key_fields`), else the flag meant (``--sed``, ``--dryrun``: ``--seed``, ``--dry-run``).
    The config option comes before a flag guess: ``--dataset cifar10`` was told it meant ``--data-dir``, which pasted
    ran with ``data_dir = "cifar10"``. ``argv``: the command line, for a value argparse took as the config
    (``run --rounds 5 demo``: config ``5``). Every other slip in chillfl was named with a suggestion; a flag's was not."""
    overrides = hasattr(args, "overrides")
    notes: list[tuple[str, str]] = []
    for i, item in enumerate(extra):
        if not item.startswith("-") or item == "-" or item.partition("=")[0] in skip:
            continue
        flag, eq, given = item.partition("=")
        following = extra[i + 1] if i + 1 < len(extra) else "-"
        value = given if eq else None if (following.startswith("-") and not is_number(following)) or "=" in following else following  # an override is no flag's value
        taken = _taken_as_config(args, argv, item) if overrides and value is None and not _is_switch(flag) else None
        note = _flag_spelt(parser, flag)
        if not note and overrides:
            note = _option_override(flag, value if taken is None else taken)
            if note and taken is not None:
                note += f"; {taken!r} was read as the config"
            if not note and (prefixed := _table_prefixed(flag, value)):  # `--data cifar10`: the dataset, or --data-dir
                note = "; or ".join(n for n in (prefixed, _flag_meant(parser, flag, value)) if n)
        note = note or _flag_meant(parser, flag, value)
        if note:
            notes.append((flag, note))
    if len(notes) == 1 and not skip:
        return f" ({notes[0][1]})"
    return "".join(f" ({flag}: {note})" for flag, note in notes)


def _taken_as_config(args: argparse.Namespace, argv: Sequence[str], flag: str) -> str | None:
    """The word after ``flag`` on the command line when argparse read it as the config (``run --rounds 5 demo``: ``5``,
    and ``demo`` became an override), else None."""
    where = next((i for i, word in enumerate(argv) if word == flag), None)
    word = argv[where + 1] if where is not None and where + 1 < len(argv) else None
    return word if word is not None and word == getattr(args, "config", None) and "=" not in word else None


def is_number(text: str) -> bool:
    """Whether ``text`` reads as a number (``-0.1``: a flag's value, not another flag)."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def _flags(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """``parser``'s long flags, by their names without the dashes."""
    return {o.lstrip("-"): a for a in parser._actions for o in a.option_strings if o.startswith("--")}


def _flag_spelt(parser: argparse.ArgumentParser, flag: str) -> str:
    """``"did you mean '--out'?"`` for a ``flag`` that spells one of ``parser``'s flags' destination (``--out-dir``: ``--out``,
    whose value is ``out_dir``) or a flag one dash short (``-seed``), else ``""``: no guess, so it goes before the config option."""
    bare = flag.lstrip("-")
    dests = {a.dest: a.option_strings[-1] for a in parser._actions if a.option_strings and a.option_strings[-1].startswith("--")}
    found = _flags(parser).get(bare)
    meant = dests.get(bare.replace("-", "_")) or (found.option_strings[-1] if found else None)
    return f"did you mean {meant!r}?" if meant is not None and meant != flag else ""


def _flag_meant(parser: argparse.ArgumentParser, flag: str, value: str | None = None) -> str:
    """``"did you mean '--seed'?"`` for a mistyped ``flag`` of ``parser``: :func:`_flag_spelt`, or the flag sharing its longest
    start (``--outfile``: ``--output``), or the closest by :func:`~chillfl.errors.did_you_mean`'s measure, compared without
    the dashes (which every flag shares: ``--rounds`` was "close" to ``--out``); else ``""``. Given a ``value``, a flag
    that takes none is no guess (``--held 5``: ``--help``)."""
    spelt = _flag_spelt(parser, flag)
    if spelt:
        return spelt
    bare = flag.lstrip("-")
    flags = {name: a for name, a in _flags(parser).items() if value is None or a.nargs != 0}
    prefixed = _longest_prefixed(bare, flags)  # `--outfile`: --output (difflib's measure found --title closer)
    name = (closest_name(bare, prefixed) or prefixed[0]) if prefixed else closest_name(bare, flags)
    return "" if name is None else f"did you mean {'--' + name!r}?"


def _longest_prefixed(bare: str, names: Iterable[str]) -> list[str]:
    """The ``names`` sharing the longest common start with ``bare``, of 3 characters or more (none: an empty list)."""
    def common(name: str) -> int:
        return next((i for i, (a, b) in enumerate(zip(bare, name)) if a != b), min(len(bare), len(name)))

    best = max((common(n) for n in names), default=0)
    return [n for n in names if common(n) == best] if best >= 3 else []


def _is_switch(flag: str) -> bool:
    """Whether ``flag`` names a config option that is true or false (``--compile``: ``compile``): given alone, it means true."""
    key = flag.lstrip("-").replace("-", "_")
    return key in flat_key_fields(RunConfig, key) and isinstance(getattr(RunConfig(), key, None), bool)


def _option_override(flag: str, value: str | None) -> str:
    """``"config options are overrides: federation.rounds=5"`` for ``--rounds 5``: the config option the flag names, as
    an override, found as a flat ``rounds=5`` is (:func:`~chillfl.options.flat_key_fields`), and as ``num_KEY``
    (``--clients 3``: ``federation.num_clients=3``, as Flower spells it); of those, the ones whose type takes the value
    (``eval.clients`` takes no 3): every one given, pasted, is read; else ``""``."""
    key = flag.lstrip("-").replace("-", "_")
    if key == "temperature" and (value is None or is_number(value)):  # a fixed T is two keys, as a flat temperature=T is told (config._refuse_bare_temperature)
        return f"config options are overrides: temperature.policy=fixed temperature.value={value or 'T'}"
    fields = [*flat_key_fields(RunConfig, key), *([] if key.startswith("num_") else flat_key_fields(RunConfig, "num_" + key))]
    if value is not None:
        try:
            parsed: object = parse_value(value)
        except ConfigError:  # nested too deeply, an integer of thousands of digits: the override's own refusal says so
            parsed = value
        fields = [f for f in fields if option_takes(RunConfig, f, parsed)] or fields  # none takes it: each one's refusal says what it takes
    shown = "true" if value is None and _is_switch(flag) else "VALUE" if value is None else override_value(value)  # --compile alone: a switch, compile=true
    return "config options are overrides: " + " or ".join(f"{field}={shown}" for field in fields) if fields else ""


def _table_prefixed(flag: str, value: str | None) -> str:
    """``"config options are overrides: dataset.name=cifar10"`` for ``--data cifar10``: a flag of 4 characters or more
    that starts a table chosen by a key (``dataset``, ``algorithm``) names that key; else ``""``. (argparse took
    ``--data`` as ``--data-dir`` before abbreviations were turned off, with no word said.)"""
    key = flag.lstrip("-").replace("-", "_")
    tables = [f"{f.name}.{chooser}" for f in dataclasses.fields(RunConfig) if len(key) >= 4 and f.name.startswith(key)
              and (chooser := table_chooser(RunConfig, f.name))]
    return "config options are overrides: " + " or ".join(f"{t}={'VALUE' if value is None else override_value(value)}" for t in tables) if tables else ""


def _compare_flags_hint(command: str, stray: Sequence[str]) -> str:
    """``"; --seeds is chillfl compare's: ..."`` for ``run`` given a comparison's flags, else ``""``."""
    flags = sorted({s.partition("=")[0] for s in stray if s.partition("=")[0] in COMPARE_FLAGS}, key=COMPARE_FLAGS.index)
    if command != "run" or not flags:
        return ""
    which = f"{flags[0]} is" if len(flags) == 1 else f"{', '.join(flags)} are"
    return f"; {which} chillfl compare's, not chillfl run's (chillfl compare CONFIG {flags[0]} ...; chillfl run runs a config's [compare] and [tune] tables as a comparison)"


RUN_WRITES = (
    "Run one experiment (a TOML config or a bundled experiment's name; none: the demo) and write its result folder "
    "OUT_DIR/NAME/ (results/NAME/ by default; NAME-2, NAME-3, ... when the name is taken): config.toml (the resolved config), "
    "metrics.jsonl (one record a round), summary.json (final and best values), accuracy_loss.png, model.safetensors (the final "
    "global model, where the method has one), partition.json (each client's training indices), and the figures a method or "
    "table adds (temperatures.png, accuracy_vs_bytes.png, clp.png, privacy.png, attack.png). While it runs the folder is "
    "NAME.partial/ with checkpoint.safetensors, renamed NAME/ when the run completes; `chillfl resume` continues an "
    "interrupted one. A config with [compare] or [tune] tables runs as `chillfl compare` does. docs/usage.md lists every file."
)
COMPARE_WRITES = (
    "Run every variant (at each seed and tuning point) on the same partition and write OUT_DIR/NAME-compare/ (results/ by "
    "default; -2, -3, ... when taken): table.md and table.json (the table it prints), curves.png, accuracy_vs_bytes.png, over "
    "seeds differences.png (and local_curves.png with [compare] local), with [privacy] privacy_utility.png, config.toml, "
    "sweep.json (what resume reads) and one run folder per run (the files `chillfl run` writes). While it runs the folder is "
    "NAME-compare.partial/, which `chillfl resume` continues and --shard jobs share; it is renamed when the last run ends."
)
RESUME_WRITES = (
    "Continue an interrupted run from its last checkpoint in its folder NAME.partial/ (metrics.jsonl goes on from that round; "
    "the files are those `chillfl run` writes) and rename the folder NAME/ when the run completes (NAME-2, ... when NAME is "
    "taken). A comparison's NAME-compare.partial/: its finished runs are read back, the stopped one resumed, the others run, "
    "and the folder becomes NAME-compare/ with its table and figures."
)
REPRODUCE_WRITES = (
    "Run a paper's claims as comparisons (one NAME-compare/ folder each, as `chillfl compare` writes, under --out's folder, "
    "else results/PAPER/), print the table of paper vs measured with a verdict per claim, and write it beside them as "
    "reproduce-PAPER.md with its figure reproduce-PAPER.png (with the plots extra) and each claim's evidence folder."
)

STATUS_READS = (
    "Say where each run or comparison stands, read from its folder (metrics.jsonl, its checkpoint, a comparison's sweep.json): "
    "finished, diverged, running, stopped (and the round it resumes after) or not started, with the rounds done. A folder "
    "of result folders: each one's status, one after another. The folders are read as data; nothing is written."
)
REPORT_WRITES = (
    "Write one self-contained HTML page (-o, report.html by default; missing parent folders are made) of run and comparison "
    "folders: their tables, curves with seed bands, reliability diagrams (from model.safetensors) and partition heat maps. "
    "The folders are read as data: nothing in them is changed, and no plugin their configs name is imported."
)
DATA_DOES = (
    "Inspect a config's federated partition (`chillfl data show CONFIG`: each client's size and class counts, and a heat map "
    "PNG under OUT_DIR/data-show/), or fetch real datasets into the folder their loaders read (`chillfl data download NAME`)."
)


def build_parser(analyses: bool = True) -> argparse.ArgumentParser:
    """The whole command line; ``analyses=False`` leaves out the analysis subcommands' own parsers (they import torch)."""
    parser: argparse.ArgumentParser = _Parser(prog="chillfl", description="Federated learning on non-IID data: logit chilling, FedChill, PA3Fed, SCARLET.")
    parser.add_argument("--version", action="version", version=f"chillfl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser, config_required: bool, trains: bool = True) -> None:
        """The options of a command that reads a config; ``trains``: it runs training (``--device``, ``--strict``, ``--shard``), not ``data show``."""
        if config_required:
            p.add_argument("config", help="TOML config file or bundled experiment name")
        else:
            p.add_argument("config", nargs="?", help="TOML config file or bundled experiment name (default: the demo)")
        p.add_argument("overrides", nargs="*", default=[], help="section.option=value overrides, e.g. client.lr=0.05")
        _verbosity(p, trains)
        if trains:  # the partition is drawn on the CPU, the same on every device: `data show` has no device to choose
            p.add_argument("--device", help="cpu | cuda | cuda:N | auto (the config's `device`; mps is not supported yet)")
        seed_help = "the run seed (the config's `seed`; a comparison with seeds of its own: --seeds)" if trains else "the seed the partition is drawn with (the config's `seed`)"
        p.add_argument("--seed", type=int, help=seed_help)
        out = "parent folder of the result folder" if trains else "the heat map goes to OUT_DIR/data-show/"  # data show writes no result folder
        p.add_argument("--out", dest="out_dir", help=f"{out} (the config's `out_dir`{'' if trains else '; -o names the file itself'})")
        p.add_argument("--data-dir", dest="data_dir", help="where datasets live (the config's `data_dir`)")
        p.add_argument("--dry-run", action="store_true", help="print the resolved config as TOML and exit (nothing is run or written)")
        if not trains:
            return
        p.add_argument("--strict", action="store_true", default=None, help="warnings are errors (the config's `strict`): an exploding loss stops the run (exit 3); compare exits 3 if any run failed")
        p.add_argument("--variant", action="append", metavar="LABEL",
                       help="run only this variant of the config's [variants] (repeatable; its label as written, e.g. 'Per-FedAvg (FO)'); "
                            "`run --variant LABEL --seed N`: that variant's one run at seed N, the overrides applied after it")
        p.add_argument("--shard", metavar="K/N", help="run the K-th of N shares of a comparison's runs into its shared folder OUT/NAME-compare.partial "
                                                      "(one per job of a cluster's array job); the last shard to end writes the table")

    p = sub.add_parser("run", help="run one experiment", description=RUN_WRITES)
    common(p, False)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("resume", help="continue an interrupted run (a results/NAME.partial folder) from its checkpoint, or an interrupted comparison",
                       description=RESUME_WRITES)
    p.add_argument("run_dir", help="the interrupted run's folder, or a comparison's (results/NAME-compare.partial): its finished runs are kept")
    p.add_argument("--force", action="store_true", help="resume although config.toml or metrics.jsonl changed since the checkpoint was written, "
                                                        "or the run diverged; a checkpoint whose bytes do not match its checksum (torn or corrupt) "
                                                        "is refused all the same")
    _verbosity(p)
    p.set_defaults(func=cmd_resume)

    p = sub.add_parser("status", help="where a run or a comparison stands (each run: finished, diverged, running, stopped, not started), from its folder",
                       description=STATUS_READS)
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="a run's folder, or a comparison's (results/NAME-compare.partial, or its shards' "
                                                               "shared folder), or a folder of them (each one's status); several, one after another")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("compare", help="run variants on the same partition and seed and tabulate", description=COMPARE_WRITES)
    common(p, True)
    p.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2", help="a swept option (repeatable: cartesian product); 'temperature' is shorthand for the fixed policy's value")
    p.add_argument("--reference", help="variant label whose best accuracy (at each seed) is the target of 'rounds to target' ([compare] reference; default: "
                                       "the variant with the highest set temperature, else the first); "
                                       "differences are to [compare] baseline (default: the variant that sets T = 1, else the first)")
    p.add_argument("--seeds", metavar="S1,S2", help="run every variant at each seed, e.g. 0,1,2 or 0-4 ([compare] seeds); tables report mean ± std, 95 %% CI and paired differences")
    p.add_argument("--tune", action="append", default=[], metavar="KEY=V1,V2", help="tune an option per variant on the validation split (the [tune] table; needs eval.validation > 0); repeatable")
    p.add_argument("--select", choices=SELECT_RULES,
                   help="tuning rule: final-round or best-round validation accuracy, global (final, best) or the clients' local one "
                        "(local_final, local_best) ([compare] select; default final)")
    p.add_argument("--controls", action="store_true", help="add step-size controls for every T != 1 variant: T = 1 at lr x 1/T, magnitude-only, direction-only ([compare] controls)")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("reproduce", help="a paper's headline claims at CPU scale over seeds: paper vs measured, with a verdict", description=REPRODUCE_WRITES)
    p.add_argument("paper", choices=PAPERS, help="the paper whose claims run (docs/comparisons.md, `chillfl reproduce`)")
    p.add_argument("--seeds", default="0,1,2", help="seeds (default 0,1,2)")
    p.add_argument("--out", dest="out_dir", help="parent folder of the comparisons' result folders (default: a folder PAPER in each config's out_dir: results/PAPER)")
    p.add_argument("--resume", action="store_true",
                   help="read back the claims whose comparison this code finished before (same config, seeds, --out), resume an interrupted one, run the rest")
    p.add_argument("--dry-run", action="store_true",
                   help="check every claim's comparison and print what would run: variants, runs, estimated CPU minutes, and (with --resume) what is read back or resumed; nothing runs or is written")
    p.add_argument("--calibrate", action="store_true", help="with --dry-run: time a short run on this machine (a few seconds) and scale the CPU minutes to it")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_reproduce)

    p = sub.add_parser("data", help="inspect the federated partition; download real datasets", description=DATA_DOES)
    dsub = p.add_subparsers(dest="data_command", required=True)
    ds = dsub.add_parser("show", help="per-client sizes and class counts, and a heat map PNG")
    common(ds, True, trains=False)
    shown = "heat map PNG path; another image suffix (.pdf, .svg) writes that format, none adds .png"
    ds.add_argument("-o", "--output", type=home_path, help=f"{shown} (default: <out_dir>/data-show/<name>-partition.png, e.g. results/data-show/demo-partition.png)")
    ds.add_argument("--variant", metavar="LABEL", help="the partition of this variant of the config's [variants] (its label as written; the demo's: T=1, T=0.25, T=0.05); the overrides apply after it")
    ds.add_argument("--all", action="store_true", help="print every client's row (default: the first and last 20 past 40 clients; the totals count all)")
    ds.set_defaults(func=cmd_data_show)
    dd = dsub.add_parser("download", help="fetch a real dataset (checked, resumable) into the folder its loader reads")
    dd.add_argument("names", nargs="*", metavar="NAME", help="dataset names, e.g. cifar10 (see docs/datasets.md); fetched in turn; none: list them and what data_dir holds")
    dd.add_argument("--data-dir", default="data", help="where datasets live (the config's `data_dir`; default: data)")
    dd.add_argument("--mirror", help="base URL replacing the official ones: MIRROR/<name>/<file> (default: $CHILLFL_DATA_MIRROR)")
    dd.add_argument("--checksums", help="manifest of '<md5|sha256>  <name>/<file>' lines that replace the built-in checksums")
    dd.add_argument("--force", action="store_true", help="replace an existing folder that the downloader did not complete")
    dd.add_argument("-q", "--quiet", action="store_true", help="no progress: no bar on a terminal, no 'fetching FILE (SIZE) from URL' lines otherwise")
    dd.set_defaults(func=cmd_data_download)

    p = sub.add_parser("report", help="one self-contained HTML page (tables, curves with seed bands, calibration, partitions) of result folders",
                       description=REPORT_WRITES)
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run folders, or folders of run folders (e.g. a compare folder)")
    p.add_argument("-o", "--output", default="report.html", type=home_path, help="the HTML file to write (default: report.html)")
    p.add_argument("--title", help="page title (default: the folders' names and the run count, e.g. 'chillfl report: demo-compare, 27 runs'; the groups follow the heading)")
    p.add_argument("--no-models", action="store_true", help="skip the reliability diagrams (they rebuild the test set and read model.safetensors)")
    p.add_argument("--no-partitions", action="store_true", help="skip the partition heat maps (they rebuild the partition)")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("list", help="registered datasets, models, methods and bundled experiments")
    p.add_argument("what", nargs="?", choices=("experiments", *LIST_SECTIONS),
                   help="experiments: a table of the bundled experiments (paper, run or compare, data, expected minutes); "
                        "any other: only those registered names (methods: algorithms, distillation and prototype methods); "
                        "none: every registered name and the experiments' names")
    _verbosity(p, trains=False)
    p.add_argument("--calibrate", action="store_true",
                   help="with experiments: time a short run on this machine (a few seconds) and scale the CPU minutes to it")
    p.add_argument("--options", nargs="*", metavar="NAME",
                   help="print every part's options with types and defaults (markdown), the chillfl.plugins entry points' included; "
                        "NAME: only these: a part (ditto, dp-sgd), a table (client, privacy) or a plugin's 'pkg.module:Name' on sys.path")
    p.set_defaults(func=cmd_list)

    try:
        from chillfl.analysis_cli import add_analyze_parser
    except ImportError:
        pass
    else:
        add_analyze_parser(sub, load=analyses)
    return parser


class _StderrHandler(logging.Handler):
    """Writes to whatever ``sys.stderr`` is at the time (not the stream of when it was made)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            print(self.format(record), file=sys.stderr)
        except Exception:  # noqa: BLE001 - logging must never raise
            self.handleError(record)


QUIETED_LIBRARIES = ("matplotlib",)
"""Libraries whose warnings ``-qq`` ("errors only") keeps off stderr: matplotlib's two lines about a temporary config
folder when ``~/.config`` is not writable (a read-only HOME) were printed at every ``-qq`` run that drew a figure."""


def _log_to_stderr(level: int) -> None:
    """Our own log lines on stderr; other libraries' (matplotlib's font cache, ...) are not configured by us, except that
    at ``-qq`` (``level`` ERROR) the :data:`QUIETED_LIBRARIES`' warnings are held back too, as "errors only" says."""
    logger = logging.getLogger("chillfl")
    if not any(isinstance(h, _StderrHandler) for h in logger.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("chillfl: %(message)s"))
        logger.addHandler(handler)
    logger.setLevel(level)
    if level >= logging.ERROR:
        for name in QUIETED_LIBRARIES:
            library = logging.getLogger(name)
            if library.getEffectiveLevel() < logging.ERROR:  # a caller's quieter setting is kept
                library.setLevel(logging.ERROR)


@contextlib.contextmanager
def _logger_kept() -> Iterator[None]:
    """The ``chillfl`` logger's level and handlers, and the :data:`QUIETED_LIBRARIES`' levels, as they were before
    :func:`_log_to_stderr` set them for the command."""
    logger = logging.getLogger("chillfl")
    level, handlers = logger.level, list(logger.handlers)
    libraries = [(library, library.level) for library in map(logging.getLogger, QUIETED_LIBRARIES)]
    try:
        yield
    finally:
        logger.setLevel(level)
        logger.handlers[:] = handlers
        for library, library_level in libraries:
            library.setLevel(library_level)


PRINTABLE = "chillfl.printable"
"""The output streams' error handler while a command runs (:func:`_printable_output`)."""

_RAISING_HANDLERS = frozenset({"strict", "surrogateescape"})
"""Stream error handlers under which a character the encoding lacks raises (surrogateescape: every one but a path's escaped byte)."""


def _escape_unprintable(exc: UnicodeError) -> tuple[str | bytes, int]:
    """A lone surrogate (a path's non-UTF-8 byte, escaped by Python) written back as that byte, as ``surrogateescape``
    does; any other character the stream's encoding lacks (``†``, ``±``, ``—`` on an ASCII or Latin-1 stdout) as
    ``\\u2020``, as ``backslashreplace`` does."""
    if isinstance(exc, UnicodeEncodeError) and all(0xDC80 <= ord(c) <= 0xDCFF for c in exc.object[exc.start:exc.end]):
        return codecs.lookup_error("surrogateescape")(exc)
    return codecs.lookup_error("backslashreplace")(exc)


@contextlib.contextmanager
def _printable_output() -> Iterator[None]:
    """stdout and stderr, while the command runs, print every character their encoding has and escape the others.

    Why: a stdout in ASCII or Latin-1 (``PYTHONIOENCODING=latin-1``, ``LC_ALL=C`` without UTF-8 mode, an older cluster's
    ``LANG=de_DE``) raised UnicodeEncodeError at the comparison table's ``†`` or a non-ASCII results path: a finished
    run or comparison ended with a traceback and exit 1, and its table never reached the log. The encoding is kept;
    a stream without ``reconfigure`` (a caller's StringIO) or with a handler of its own choosing is left alone, and the
    handlers are put back after, for an in-process caller."""
    codecs.register_error(PRINTABLE, _escape_unprintable)
    changed: list[tuple[io.TextIOWrapper, str]] = []
    try:
        for stream in (sys.stdout, sys.stderr):
            if isinstance(stream, io.TextIOWrapper) and stream.errors in _RAISING_HANDLERS:  # not None (no stream), not a StringIO
                changed.append((stream, stream.errors))
                stream.reconfigure(errors=PRINTABLE)
        yield
    finally:
        for stream, errors in changed:
            with contextlib.suppress(OSError, ValueError):  # closed meanwhile (a closed pipe): nothing left to print to
                stream.reconfigure(errors=errors)


def _command(argv: Sequence[str] | None) -> str | None:
    """The subcommand the arguments name (the first one not starting with ``-``), if any."""
    return next((a for a in (sys.argv[1:] if argv is None else argv) if not a.startswith("-")), None)


def _starting(argv: Sequence[str] | None) -> str | None:
    """What a stop signal during :func:`main`'s start-up (torch's import) had not started: ``"run"`` for ``chillfl run``,
    ``"comparison"`` for ``chillfl compare``, as their own start-up says it (:func:`cmd_run`, :func:`cmd_compare`); None
    for another command, a dry run or a help text, which write nothing in any case."""
    words = list(sys.argv[1:] if argv is None else argv)
    if {"--dry-run", "-h", "--help"} & set(words):
        return None
    return {"run": "run", "compare": "comparison"}.get(_command(words) or "")


_TRAINING_COMMANDS = frozenset({"run", "resume", "compare", "reproduce"})
"""The commands that import torch and train: the ones whose start-up the GC freeze shortens."""


def _own_process(command: str | None) -> None:
    """The ``chillfl`` command owns its process: import the run's modules (torch with the GC paused), then freeze them
    (:func:`chillfl._freeze_import_objects`), so no full collection walks them again. Not in :func:`main`, which a
    notebook may call: a freeze there would keep the caller's reference cycles alive for good."""
    if command in _TRAINING_COMMANDS:
        import chillfl.runner  # noqa: F401
        from chillfl import _freeze_import_objects

        _freeze_import_objects()


def entry() -> NoReturn:
    """The ``chillfl`` command (the console script and ``python -m chillfl``): :func:`main`, then its exit status.

    The command has finished and said its one line: a late SIGINT/SIGTERM/SIGHUP (a second Ctrl-C, a supervisor's repeated
    TERM, ``timeout -s INT`` just as it ends) must not turn the exit into a kill by signal, or a KeyboardInterrupt of
    Python's own handler, while the interpreter tears down. Before, only ``python -m chillfl`` ignored them; the console
    script, which called :func:`main` directly, exited 130 with nothing said after writing all its output."""
    code = main(own_process=True)
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    raise SystemExit(code)


def main(argv: Sequence[str] | None = None, *, own_process: bool = False) -> int:
    """The command line's command, its exit status returned. Called in-process (a notebook, a test) it leaves the
    ``chillfl`` logger as it found it, and its notes are said once this command (:func:`chillfl.once.said_once`).
    ``own_process``: :func:`entry`'s (the command owns its process: :func:`_own_process`), done under the held signals
    of the start-up, as torch's import must be (a Ctrl-C there was a traceback from inside torch's import)."""
    refuse_in_worker_start("chillfl.cli.main")  # a script without the __main__ guard, re-run by a spawned worker
    with _printable_output(), _logger_kept(), said_once(), _CommandSignals() as signals:
        try:
            with _before_writing(_starting(argv)):
                signals.started()  # the command's start-up hold (command_start) released: a signal it held is raised here
                with _signals_held():  # `analyze`: its subcommands' modules import torch
                    if own_process:
                        _own_process(_command(argv))
                    parser = build_parser(analyses=_command(argv) == "analyze")
            args = _parse(parser, argv)
        except KeyboardInterrupt as exc:
            return _said_interrupted(exc, None)
        return _dispatch(args)


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line's arguments (a mistake in them: one line, exit 2), with our log lines set to its -q / -v."""
    _refuse_flags_before_command(parser, sys.argv[1:] if argv is None else list(argv))
    # Overrides may come before or after options (``run cfg -q a.b=1``): argparse stops
    # filling the positional list at the first option, so collect the stragglers here.
    args, extra = parser.parse_known_args(argv)
    after: list[str] = []
    if "--" in extra:  # `run demo --dry-run -- a.b=1`: the usual end of the options; what follows is overrides, not flags
        at = extra.index("--")
        extra, after = extra[:at], extra[at + 1:]
    stray = [e for e in extra if e.startswith("-") or "=" not in e or not hasattr(args, "overrides")]
    stray += [] if hasattr(args, "overrides") else after  # a command without overrides takes nothing after it
    words = [args.command, *([args.data_command] if args.command == "data" else []), *([args.analysis] if args.command == "analyze" else [])]
    prog = " ".join(["chillfl", *words])
    if stray:  # named as the subcommand's: its --help lists its flags (`chillfl --help` lists only the commands)
        compare = _compare_flags_hint(args.command, stray)  # and every other flag's own hint beside it (`--seeds 3 --rounds 5`)
        argv_given = sys.argv[1:] if argv is None else list(argv)
        hint = _stray_flags_hint(_subparser(parser, words), args, extra, argv_given, COMPARE_FLAGS if compare else ()) + compare
        parser.exit(2, f"{prog}: error: {one_line('unrecognized arguments: ' + ' '.join(stray))}{hint}; `{prog} --help` shows the usage\n")
    if extra or after:
        args.overrides = [*args.overrides, *extra, *after]
    if getattr(args, "quiet", 0) and getattr(args, "verbose", 0):  # they cancelled out: `-q -v` printed a progress line every round
        parser.exit(2, f"{prog}: error: -q/--quiet and -v/--verbose: give one (-q: fewer lines, -v: more), not both\n")
    level = int(getattr(args, "verbose", 0) or 0) - int(getattr(args, "quiet", 0) or 0)
    _log_to_stderr({-1: logging.WARNING, 0: logging.INFO, 1: logging.DEBUG}.get(max(-2, min(1, level)), logging.ERROR))
    return args


TOP_FLAGS = ("-h", "--help", "--version")
"""The options of ``chillfl`` itself, before any command: every other flag is a command's."""


def _refuse_flags_before_command(parser: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    """One line on a flag typed before the command, which the top-level parser does not take. Why: ``chillfl -q list``
    was blamed on ``list`` (whose --help lists -q: the flag's place was wrong, not the flag), ``chillfl --versio list``
    got ``--verbose`` suggested, and ``chillfl --verison`` was not named at all (only "required: command")."""
    lead = list(itertools.takewhile(lambda a: a.startswith("-") and a != "--", argv))
    rest = argv[len(lead):]
    command = rest[0] if rest and rest[0] != "--" else None
    for given in lead:
        flag = given.split("=", 1)[0]
        if given in TOP_FLAGS:  # chillfl's own (no abbreviations: the parsers are built with allow_abbrev=False)
            continue
        sub = _subparser(parser, [command]) if command is not None else parser
        if sub is not parser and any(flag in a.option_strings for a in sub._actions):
            parser.exit(2, f"chillfl: error: {given} is an option of `chillfl {command}`: it goes after the command "
                           f"(`chillfl {command} {given}`)\n")
        hint = did_you_mean(flag, TOP_FLAGS[1:])
        parser.exit(2, f"chillfl: error: unrecognized argument before the command: {given}{hint}; `chillfl --help` shows the usage\n")


class Terminated(KeyboardInterrupt):
    """SIGTERM outside a run's own handling (start-up, between a comparison's runs): handled as Ctrl-C is, exit 143."""

    signum = signal.SIGTERM


class HungUp(Terminated):
    """SIGHUP (the terminal or ssh session went away) outside a run's own handling: handled as SIGTERM is, exit 129."""

    signum = signal.SIGTERM if SIGHUP is None else SIGHUP  # never raised where there is no SIGHUP (Windows)


RESEND_S = 0.05
"""How long after a stop signal was dropped in a finaliser it is sent again (:meth:`_CommandSignals.unraisable`): a finaliser
or a garbage collection's callbacks take far less."""


class _CommandSignals:
    """SIGINT/SIGTERM/SIGHUP while a command runs and no run holds them: the first raises (KeyboardInterrupt, or
    :class:`Terminated` / :class:`HungUp`), later ones are ignored, so that the exception's one line is always said.
    An ignored SIGHUP (``nohup``) is left ignored (:func:`~chillfl.stop_signals.stop_signals`).

    A run installs its own handlers (stop after the round, or at once) and gives these back when it ends,
    also when it ends interrupted: a further signal then lands here while that exception unwinds, and is
    either ignored or raised with the run's exception as its context (:func:`_dispatch` says the run's line).
    Without this, SIGTERM's default killed the process in that window with nothing said (exit -15).

    In the ``chillfl`` command they take over the hold of its start-up (:class:`~chillfl.stop_signals.StartHold`), which
    :meth:`started` releases into them: a signal from its imports to here is then raised where :func:`main` says its line.
    """

    def __init__(self) -> None:
        self.raised = False
        self.signum: int | None = None
        self.previous: dict[int, object] = {}
        self.hook: Callable[[sys.UnraisableHookArgs], object] | None = None
        self.start: StartHold | None = None

    def __enter__(self) -> _CommandSignals:
        import threading

        if threading.current_thread() is threading.main_thread():  # chillfl.cli.main called from a thread: Python refuses handlers
            self.start = StartHold.in_place()
            if self.start is not None:  # still held until started(): the inherited handlers are the ones given back
                self.previous = self.start.hand_over(self.handle)
            else:
                self.previous = {sig: signal.signal(sig, self.handle) for sig in stop_signals()}
            self.hook, sys.unraisablehook = sys.unraisablehook, self.unraisable
        return self

    def started(self) -> None:
        """These handlers in place of the start-up's hold, if one was handed over; the signal it held, if one came, raised
        into them here (inside :func:`main`'s ``try``, so that it is said as any other there)."""
        start, self.start = self.start, None
        if start is not None:
            start.release()

    def handle(self, signum: int, frame: object) -> None:
        if self.raised:
            return
        self.raised, self.signum = True, signum
        raise {signal.SIGTERM: Terminated, SIGHUP: HungUp}.get(signal.Signals(signum), KeyboardInterrupt)()

    def unraisable(self, info: sys.UnraisableHookArgs) -> None:
        """A signal that landed in a finaliser or a garbage-collection callback (matplotlib's): Python drops the exception
        there with an "Exception ignored in" traceback, and the command went on to exit 0 with the stop lost. Send it
        again instead, from a thread a moment later: the main thread is back in the command's own code by then, where its
        handler raises and the command says its one line (sent from here, the handler would run in this hook, and be
        dropped again; should it land in another finaliser, this repeats). A command that ends first exits as it would."""
        if isinstance(info.exc_value, KeyboardInterrupt) and self.raised and self.signum is not None:
            import _thread
            import threading

            self.raised = False
            resend = threading.Timer(RESEND_S, _thread.interrupt_main, (self.signum,))
            resend.daemon = True
            resend.start()
            return
        assert self.hook is not None
        self.hook(info)

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        if self.hook is not None:
            sys.unraisablehook = self.hook


def _dispatch(args: argparse.Namespace) -> int:
    """Run the command; every way it can end that is not a bug is one line on stderr and an exit status."""
    try:
        return _call(args)
    except MissingExtra as exc:  # an optional package is missing: one line naming the extra
        say(f"chillfl: {exc}")
        return 2
    except ConfigError as exc:
        say(f"chillfl: error: {exc}{override_hint(exc.field, exc.message, getattr(args, 'overrides', None) or [])}")
        return 2
    except KeyboardInterrupt as exc:
        if args.command == "analyze":
            return _analysis_interrupted(exc, getattr(args, "analysis", None))
        return _said_interrupted(exc, args.command, getattr(args, "shard", None))
    except BrokenPipeError:
        if not _stdout_closed():  # another pipe's: a bug to see
            raise
        return BROKEN_PIPE_EXIT
    except SweepFailed as exc:
        say(f"chillfl: {exc}" + (f"; partial results in {exc.folder}" if exc.folder else ""))
        return DIVERGED_EXIT
    except StorageError as exc:  # disk full: one line saying which checkpoint is kept
        say(f"chillfl: error: {exc}")
        return 1
    except Unreachable as exc:  # no network to the hub: not bad input, exit 1 as `chillfl data download`'s
        say(f"chillfl: error: {exc}")
        return 1
    except Diverged as exc:
        folder = getattr(exc, "folder", None)
        say(f"chillfl: diverged: {exc}" + (f"; partial results in {folder}" if folder else ""))
        return DIVERGED_EXIT
    except Exception as exc:
        from chillfl.executors.processes import ClientCodeError, WorkerError
        from chillfl.runner import RunInterrupted

        signalled = signal_in(exc)
        if signalled is not None:  # a signal's exception that a package wrapped (Python 3.11's __set_name__ RuntimeError)
            if args.command == "analyze":
                return _analysis_interrupted(signalled, getattr(args, "analysis", None))
            return _said_interrupted(signalled, args.command, getattr(args, "shard", None))
        if isinstance(exc, ClientCodeError):  # the client's own code raised in a worker: its error, with the worker's traceback
            say(f"chillfl: error: the client's code raised in {exc.ran_in} (no worker was lost): {exc}")  # where it ran: a process, a Ray actor
            return 1
        if isinstance(exc, WorkerError):  # a lost worker (processes, ray): the round was not aggregated, the last checkpoint kept
            run = f"run {exc.run}: " if exc.run else ""
            said = (_go_on(exc.folder, getattr(args, "shard", None)) if exc.folder is not None
                    else "; it stopped before its first checkpoint: nothing to resume, run it again")
            say(f"chillfl: worker failed: {run}{exc}{said}")
            return 1
        if not isinstance(exc, RunInterrupted):
            raise
        if args.command == "analyze" and exc.folder is None:  # a run of the analysis's own, held in memory
            return _analysis_interrupted(exc, getattr(args, "analysis", None))
        return _interrupted(exc, getattr(args, "shard", None))


def _go_on(folder: Path, shard: str | None) -> str:
    """``"; resume with: chillfl resume FOLDER"``; a shard's (``shard``: its ``--shard K/N``) says to restart it first,
    since ``chillfl resume`` of the shared folder is refused while any other shard holds it."""
    if shard is None:
        return f"; resume with: chillfl resume {shell_path(folder)}"
    return f"; restart this shard with the same command (--shard {shard}), or once every shard has ended: chillfl resume {shell_path(folder)}"


def _said_interrupted(exc: KeyboardInterrupt, command: str | None, shard: str | None = None) -> int:
    """The one line of a command (``command``; None: before one was parsed; ``shard``: its ``--shard K/N``) that a stop
    signal ended, and its exit status."""
    runner = sys.modules.get("chillfl.runner")  # no run without it: a Ctrl-C at start-up imports nothing more
    if runner is not None and isinstance(exc.__context__, runner.RunInterrupted):  # a late signal while the run's interruption unwound
        return _interrupted(exc.__context__, shard)
    leaves = command in PARTIAL_FOLDERS  # an analysis, a report, a listing: nothing to resume
    if isinstance(exc, ComparisonInterrupted):  # a comparison stopped between runs: its folder is known
        said = _go_on(exc.folder, shard)
    elif isinstance(exc, InterruptedAfterRun):  # one run, stopped once its results were written: nothing is partial
        said = "; the run had completed" + (f": its results are in {_absolute(exc.folder)}" if exc.folder is not None else "")  # as `results:` says it
    elif isinstance(exc, RunNotStarted):  # its folder, if made, was removed again; a report, an analysis: nothing written yet
        said = f"; the {exc.what} had not started: nothing was written, nothing to resume" if exc.what else "; nothing was written"
    else:
        said = "; unfinished results are left in *.partial folders (`chillfl resume FOLDER` goes on with a run or a comparison)" if leaves else ""
    say("chillfl: interrupted" + said)
    return _signal_exit(exc)


def _analysis_interrupted(exc: "KeyboardInterrupt | RunInterrupted", analysis: str | None) -> int:
    """The one line of ``chillfl analyze ANALYSIS`` that a stop signal ended, and its exit status: the signal, the
    analysis, and that it does not resume (one that says nothing was written, :class:`RunNotStarted`: that line). Before,
    a temperature sweep of minutes ended in a bare "chillfl: interrupted", and the in-memory runs of scarlet-deficit in
    "no checkpoint had been written yet" (no run of it writes one)."""
    runner = sys.modules.get("chillfl.runner")
    if runner is not None and isinstance(exc, KeyboardInterrupt) and isinstance(exc.__context__, runner.RunInterrupted):
        exc = exc.__context__  # a late signal while its run's interruption unwound: the run's line
    command = " ".join(["chillfl analyze", *([analysis] if analysis else [])])
    if isinstance(exc, RunNotStarted):  # its own word that nothing was written: the line every command says so with
        return _said_interrupted(exc, "analyze")
    if isinstance(exc, KeyboardInterrupt):
        code = _signal_exit(exc)
        stopped = f"interrupted by {signal.Signals(code - 128).name}; {command}"
    else:
        code, stopped = exc.exit_code, f"{exc} of a run that {command} holds in memory; it"
    say(f"chillfl: {stopped} does not resume: the same command runs it again")
    return code


def _call(args: argparse.Namespace) -> int:
    """The command's function; an analysis of run folders reads them as data (no plugin a saved config names is imported)
    unless ``--import-plugins`` says they are the user's own. ``report`` and ``status`` read folders as data in the library."""
    if args.command != "analyze" or getattr(args, "run_dirs", None) is None or getattr(args, "import_plugins", False):
        return int(args.func(args) or 0)
    from chillfl.plugins import reading_data

    with reading_data(f"chillfl analyze {args.analysis}", f"; `chillfl analyze {args.analysis} --import-plugins ...` imports it, for a run of your own"):
        return int(args.func(args) or 0)


PARTIAL_FOLDERS = frozenset({"run", "compare", "resume", "reproduce"})
"""The commands whose interruption can leave ``.partial`` run or comparison folders for ``chillfl resume``."""

BROKEN_PIPE_EXIT = 141
"""Exit status when stdout's reader went away (``chillfl list | head -1``): 128 + SIGPIPE, what a shell reports for a
filter that signal stopped. Nothing is said: the reader asked for no more. A run writes its results before it prints
its table, so they are complete."""


def _stdout_closed() -> bool:
    """Whether stdout is a pipe whose reader went away (its write end polls as an error). If so, stdout is pointed at
    /dev/null, so that Python's flush at exit of anything still buffered raises nothing more (it would print a
    traceback of its own). A failed write does not keep its bytes buffered, so trying a flush would not tell."""
    import select

    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, OSError):  # a replaced stdout (captured): not the pipe that broke
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    if not any(events & select.POLLERR for _, events in poller.poll(0)):
        return False
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)
    return True


def _signal_exit(exc: KeyboardInterrupt) -> int:
    """128 + the signal that stopped the command: SIGINT's 130, SIGTERM's 143, SIGHUP's 129 (ComparisonInterrupted,
    InterruptedAfterRun and RunNotStarted carry the signal's own exception as their cause, maybe one through another)."""
    received: BaseException = exc
    while not isinstance(received, Terminated) and received.__cause__ is not None:  # ComparisonInterrupted from InterruptedAfterRun from ...
        received = received.__cause__
    return 128 + (received.signum if isinstance(received, Terminated) else signal.SIGINT)


def _interrupted(exc: RunInterrupted, shard: str | None = None) -> int:
    """The interrupted run's one line: the round it stopped at and how to resume (``shard``: a shard's ``--shard K/N``)."""
    if exc.folder is not None:
        kept = ""
        if exc.at_once:  # a comparison's run stopped in its first rounds has no checkpoint: the comparison runs it again
            kept = f"; the checkpoint of round {exc.checkpoint} is kept" if exc.checkpoint is not None else "; that run had no checkpoint yet: resuming runs it again"
        again = f"; resume with: {exc.resume_command}" if exc.resume_command else _go_on(exc.folder, shard)
        say(f"chillfl: {exc}{kept}{again}")
    else:
        kept = "" if exc.kept is None else (f"; its rounds so far are kept in {shell_path(exc.kept)} (remove it before running the config again, "
                                             "or that run is written under the next free name, NAME-2)")  # it holds the name; said, not hidden
        say(f"chillfl: {exc}; no checkpoint had been written yet, so there is nothing to resume{kept}")
    return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
