"""A flag a comparison would not use is one line naming it, not a silent run without it.

``--seed N`` on a comparison with seeds of its own: before, ``chillfl run --seed 0`` ran the demo's 27 runs at seeds 0, 1
and 2, and ``chillfl compare CONFIG --seed 5`` ran the config's ``[compare] seeds`` (``--seed`` is the base config's
seed, which a comparison's seeds replace). ``--select RULE`` on a comparison that tunes nothing: it picks among tuning
points, and there were none; ``select`` in a config's ``[compare]`` table likewise."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import main
from test_variant_flag import CONFIG, _config


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_the_demo_with_seed_is_refused_before_its_banner_with_the_command_that_runs_one_seed(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--seed", "0"]) == 2
    assert _one_line(capsys) == ("chillfl: error: --seed: demo compares at the seeds of its [compare] table (0, 1, 2), which --seed does not "
                                 "change; at seed 0 alone: chillfl compare demo --grid temperature=1,0.25,0.05 --seeds 0; "
                                 "one run: chillfl run demo --variant LABEL --seed 0")


@pytest.mark.parametrize("command", [["compare"], ["compare", "--dry-run"], ["run"], ["run", "--dry-run"]])
def test_a_comparison_with_compare_seeds_refuses_seed(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    path = _config(tmp_path)  # [compare] seeds = [1, 2], three variants
    assert main([command[0], path, *command[1:], "--seed", "5"]) == 2
    said = _one_line(capsys)
    assert said == (f"chillfl: error: --seed: late compares at the seeds of its [compare] table (1, 2), which --seed does not change; "
                    f"at seed 5 alone: chillfl compare {path} --seeds 5; one run: chillfl run {path} --variant LABEL --seed 5")
    assert not (tmp_path / "out").exists()  # nothing written


def test_seed_beside_seeds_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", _config(tmp_path), "--seeds", "3,4", "--seed", "5"]) == 2
    assert _one_line(capsys) == "chillfl: error: --seed: --seeds 3,4 sets the comparison's seeds; drop --seed 5, or give --seeds 5"


def test_seed_still_sets_the_seed_of_a_comparison_without_seeds_and_one_variants_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "unseeded.toml"
    path.write_text(CONFIG.format(out=(tmp_path / "out").as_posix()).replace("seeds = [1, 2]\n", ""))
    assert main(["compare", str(path), "--seed", "5", "--dry-run"]) == 0
    assert "3 runs: 3 variants x seeds 5" in capsys.readouterr().out  # its one seed is the config's, which --seed sets
    assert main(["run", _config(tmp_path), "--variant", "plain", "--seed", "5", "--dry-run"]) == 0  # one row's run at seed 5
    assert 'name = "late-plain"' in capsys.readouterr().out


def test_the_python_api_refuses_seed_beside_the_comparisons_seeds(tmp_path: Path) -> None:
    import chillfl
    from chillfl.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^seed: the comparison runs at seeds \[1, 2\], which seed=5 does not change; pass seeds=\[5\]"):
        chillfl.compare(config=_config(tmp_path), seed=5, progress=False, write=False)
    with pytest.raises(ConfigError, match=r"^seed: the comparison runs at seeds \[3\]"):
        chillfl.compare(config=_config(tmp_path), seeds=[3], seed=5, progress=False, write=False)


def test_a_seed_override_is_refused_as_the_flag_is(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _config(tmp_path)
    assert main(["compare", path, "seed=5"]) == 2
    assert _one_line(capsys).startswith("chillfl: error: seed: late compares at the seeds of its [compare] table (1, 2), which seed does not change; "
                                        f"at seed 5 alone: chillfl compare {path} --seeds 5")
    assert main(["compare", path, "--seeds", "3", "seed=5", "--dry-run"]) == 2
    assert _one_line(capsys) == "chillfl: error: seed: --seeds 3 sets the comparison's seeds; drop seed=5, or give --seeds 5"


def test_select_on_a_comparison_that_tunes_nothing_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import chillfl
    from chillfl.errors import ConfigError

    path = _config(tmp_path)  # variants and seeds, no [tune]
    assert main(["compare", path, "--select", "best", "--dry-run"]) == 2
    assert _one_line(capsys) == ("chillfl: error: --select: 'best' picks each variant's tuning point, and this comparison tunes nothing; "
                                 "give a tuning grid (--tune KEY=V1,V2 or a [tune] table), or drop --select")
    with pytest.raises(ConfigError, match=r"^select: 'best' picks .* tunes nothing; give a tuning grid \(tune= or a \[tune\] table\), or drop select$"):
        chillfl.compare(config=path, select="best", progress=False, write=False)
    assert main(["compare", path, "--select", "best", "--tune", "client.momentum=0,0.5", "eval.validation=0.2", "--dry-run"]) == 0  # with a grid: used


@pytest.mark.parametrize("command", [["compare", "--dry-run"], ["run"]])
def test_a_compare_select_in_the_config_with_nothing_to_tune_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    import chillfl
    from chillfl.errors import ConfigError

    path = Path(_config(tmp_path))
    path.write_text(path.read_text().replace('baseline = "plain"\n', 'baseline = "plain"\nselect = "local_final"\n'))
    assert main([command[0], str(path), *command[1:]]) == 2
    assert _one_line(capsys) == ("chillfl: error: compare.select: 'local_final' picks each variant's tuning point, and this comparison tunes nothing; "
                                 "give a tuning grid (a [tune] table or --tune KEY=V1,V2), or drop select from [compare]")
    assert not (tmp_path / "out").exists()
    with pytest.raises(ConfigError, match=r"^compare\.select: 'local_final' picks"):
        chillfl.compare(config=str(path), progress=False, write=False)
    assert main(["compare", str(path), "--tune", "client.momentum=0,0.5", "eval.validation=0.2", "eval.client_split=proportional", "--dry-run"]) == 0  # with a grid: used
