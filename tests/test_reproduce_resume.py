"""``chillfl reproduce PAPER --resume``: an interrupted reproduction goes on where it stopped.

Claims whose comparison this code finished before are read back from their
``table.json``, the stopped comparison resumes (``chillfl.sweeps``), the
rest run; the printed verdicts equal an uninterrupted run's, byte for byte (one
machine, one torch build). A comparison is reused only when its ``sweep.json``
says it is this very one: same config, seeds, grid, code and torch.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest

import chillfl.reproduce as reproduce
import chillfl.sweeps.record as record  # where sweep.json is made
import chillfl.sweeps.run as sweep  # where the comparison's runs start
from chillfl.cli import HungUp, Terminated, main
from chillfl.config import RunConfig
from chillfl.sweeps.plan import CompareOptions, plan_runs
from chillfl.sweeps.record import find_compare
from chillfl.reproduce import Claim, claim_config
from test_sweep_resume import _interrupt

pytestmark = pytest.mark.slow  # whole reproductions, interrupted and resumed; `pytest -m "not slow"` leaves it out

SMALL = {"federation.num_clients": 4, "federation.clients_per_round": 2, "federation.rounds": 3, "eval.clients": "none"}
CLAIMS = (
    Claim("flexchill", "T = 0.05 beats T = 1 (small)", "demo", "T=0.05", "T=1", grid=("temperature=1,0.05",), overrides={**SMALL, "client.lr": 0.01}),
    Claim("flexchill", "the same at lr 0.05 (small)", "demo", "T=0.05", "T=1", grid=("temperature=1,0.05",), overrides={**SMALL, "client.lr": 0.05}),
)
"""Two claims of two comparisons each of 2 variants x 2 seeds (8 runs of 3 rounds)."""


@pytest.fixture(autouse=True)
def _small_claims(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reproduce, "CLAIMS", CLAIMS)


def _reproduce(out: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str, str]:
    code = main(["reproduce", "flexchill", "--seeds", "0,1", "--out", str(out), "-q", *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@dataclass(frozen=True)
class Whole:
    """An uninterrupted reproduction: its folder (read, never written, by the tests that share it), stdout and stderr."""

    out: Path
    printed: str
    err: str


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> Whole:
    """The uninterrupted reproduction two tests compare with, made once for the module (8 runs), not once a test."""
    out, printed, err = tmp_path_factory.mktemp("whole") / "whole", io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch, redirect_stdout(printed), redirect_stderr(err):
        patch.setattr(reproduce, "CLAIMS", CLAIMS)
        code = main(["reproduce", "flexchill", "--seeds", "0,1", "--out", str(out), "-q"])
    assert code == 0, err.getvalue()
    return Whole(out, printed.getvalue(), err.getvalue())


def _folders(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir() if p.is_dir())


def test_an_interrupted_reproduction_resumes_to_the_uninterrupted_verdicts(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                                                           whole: Whole) -> None:
    expected = whole.printed
    assert expected.count("| flexchill |") == 2
    verdicts = whole.out / "reproduce-flexchill.md"  # the table and each claim's evidence folder
    assert f"in {verdicts}" in whole.err and expected in verdicts.read_text()
    two = "warning: 2 seeds: the 95 % intervals are uninformative"  # as the claims' comparison tables say; the verdicts said nothing
    assert f"chillfl: {two}" in whole.err and verdicts.read_text().splitlines()[2].startswith(two)
    assert f"- {CLAIMS[1].text}: `{whole.out / 'demo-compare-2'}`" in verdicts.read_text()

    out = tmp_path / "stopped"
    calls = _interrupt(monkeypatch, run=6, after_round=2)  # the second claim's second run
    code, _, err = _reproduce(out, capsys)
    assert code == 130 and calls == {"run": 6, "resume": 0} and not (out / "reproduce-flexchill.md").exists()
    assert f"resume with: chillfl reproduce flexchill --seeds 0,1 --out {out} --resume" in err
    assert _folders(out) == ["demo-compare", "demo-compare-2.partial"]

    calls["run"] = 0
    code, resumed, err = _reproduce(out, capsys, "--resume")
    assert code == 0 and resumed == expected
    assert f"read back {out / 'demo-compare'} (finished before" in err and f"resuming {out / 'demo-compare-2.partial'}" in err
    assert calls == {"run": 2, "resume": 1}  # claim 1 read back; claim 2: its first run read back, the second resumed, two more run
    assert _folders(out) == ["demo-compare", "demo-compare-2"]
    assert (out / "reproduce-flexchill.md").read_text() == verdicts.read_text().replace(str(whole.out), str(out))

    calls["run"] = 0
    code, again, _ = _reproduce(out, capsys, "--resume")  # both finished: nothing runs
    assert code == 0 and again == expected and calls["run"] == 0 and _folders(out) == ["demo-compare", "demo-compare-2"]


def test_only_the_same_comparison_made_by_the_same_code_is_reused(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "r"
    assert _reproduce(out, capsys)[0] == 0
    config, options = claim_config(CLAIMS[0], [0, 1], str(out)), CompareOptions(seeds=[0, 1])

    def found(config: RunConfig, grid: Sequence[str], options: CompareOptions) -> Path | None:
        return find_compare(config, plan_runs(config, grid, options))

    assert found(config, CLAIMS[0].grid, options) == out / "demo-compare"
    assert found(claim_config(CLAIMS[1], [0, 1], str(out)), CLAIMS[1].grid, options) == out / "demo-compare-2"
    assert found(config, CLAIMS[0].grid, CompareOptions(seeds=[0])) is None  # other seeds
    assert found(config, ("temperature=1,0.25",), options) is None  # another grid
    assert found(config.with_overrides({"federation.rounds": 4}), CLAIMS[0].grid, options) is None  # another config
    monkeypatch.setattr(record, "code_sha256", lambda: "0" * 64)  # chillfl's code changed since
    assert found(config, CLAIMS[0].grid, options) is None

    calls = _interrupt(monkeypatch, run=99, after_round=1)  # never fires: counts the runs
    code, _, err = _reproduce(out, capsys, "--resume")
    assert code == 0 and calls["run"] == 8 and "read back" not in err  # nothing reused: every run again, in new folders
    assert _folders(out) == ["demo-compare", "demo-compare-2", "demo-compare-3", "demo-compare-4"]


def test_without_resume_every_claim_runs_again(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "r"
    assert _reproduce(out, capsys)[0] == 0
    calls = _interrupt(monkeypatch, run=99, after_round=1)
    assert _reproduce(out, capsys)[0] == 0 and calls["run"] == 8


def test_ctrl_c_between_runs_names_the_resume_command(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A KeyboardInterrupt outside a run's rounds (here: as the second claim's first run starts) says how to go on."""
    real = sweep.run_experiment
    starts = [0]

    def run_experiment(cfg: object, **kw: object) -> object:
        starts[0] += 1
        if starts[0] == 5:
            raise KeyboardInterrupt
        return real(cfg, **kw)

    monkeypatch.setattr(sweep, "run_experiment", run_experiment)
    out = tmp_path / "r"
    code, _, err = _reproduce(out, capsys)
    assert code == 130 and err.strip().endswith(f"chillfl: interrupted; resume with: chillfl reproduce flexchill --seeds 0,1 --out {out} --resume")
    monkeypatch.setattr(sweep, "run_experiment", real)
    code, _, err = _reproduce(out, capsys, "--resume")
    assert code == 0 and f"read back {out / 'demo-compare'}" in err


@pytest.mark.parametrize("out", ["r", None])
def test_the_resume_command_works_from_any_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, out: str | None) -> None:
    """A relative ``--out r`` was printed as given, and without ``--out`` the command found each config's relative
    ``out_dir`` only from the folder it started in: ``--out`` is made absolute, and without it the line says ``cd`` there."""
    import shlex

    def run_experiment(cfg: object, **kw: object) -> object:
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep, "run_experiment", run_experiment)
    work = tmp_path / "my runs"
    work.mkdir()
    monkeypatch.chdir(work)
    assert main(["reproduce", "flexchill", "--seeds", "0,1", "-q", *(["--out", out] if out else [])]) == 130
    again = capsys.readouterr().err.strip().splitlines()[-1].split("resume with: ", 1)[1]
    if out:
        assert again == f"chillfl reproduce flexchill --seeds 0,1 --out '{work / out}' --resume"
    else:
        assert again == f"cd '{work}' && chillfl reproduce flexchill --seeds 0,1 --resume"
        assert shlex.split(again)[:2] == ["cd", str(work)]


@pytest.mark.parametrize(("signal_exc", "code"), [(Terminated, 143), (HungUp, 129)])
def test_a_signal_between_runs_exits_with_its_own_code(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                                       signal_exc: type[KeyboardInterrupt], code: int) -> None:
    """SIGTERM / SIGHUP outside a run's rounds (the CLI raises them as KeyboardInterrupt's kin) end as the signal says,
    143 / 129, as a comparison's would, not as Ctrl-C's 130."""
    def run_experiment(cfg: object, **kw: object) -> object:
        raise signal_exc

    monkeypatch.setattr(sweep, "run_experiment", run_experiment)
    out = tmp_path / "r"
    got, _, err = _reproduce(out, capsys)
    assert got == code and "chillfl: interrupted; resume with: chillfl reproduce flexchill" in err


def test_dry_run_checks_and_prints_the_plan_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "r"
    code, plan, _ = _reproduce(out, capsys, "--dry-run")
    assert code == 0 and not out.exists()  # nothing written
    assert plan.startswith("chillfl reproduce flexchill --seeds 0,1: 2 comparisons, 8 runs to do, about ")
    rows = [line for line in plan.splitlines() if line.startswith("| demo |")]
    assert [r.split(" | ")[3:6] for r in rows] == [["1", "2", "4"], ["1", "2", "4"]] and all(r.endswith("| run |") for r in rows)

    calls = _interrupt(monkeypatch, run=6, after_round=2)
    assert _reproduce(out, capsys)[0] == 130 and calls["run"] == 6  # the plan's 8 runs: 6 started, then stopped
    before = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    code, plan, _ = _reproduce(out, capsys, "--dry-run", "--resume")
    assert code == 0 and sorted(str(p.relative_to(out)) for p in out.rglob("*")) == before
    rows = [line for line in plan.splitlines() if line.startswith("| demo |")]
    assert rows[0].endswith(f"| read back {out / 'demo-compare'} |") and rows[1].endswith(f"| resume {out / 'demo-compare-2.partial'} |")
    assert "2 comparisons, 4 runs to do" in plan  # the comparison read back costs nothing


def test_dry_run_of_a_bad_config_exits_2_with_one_line(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    bad = Claim("flexchill", "bad", "demo", "T=0.05", "T=1", grid=("temperature=1,0.05",), overrides={**SMALL, "client.lr": -1.0})
    monkeypatch.setattr(reproduce, "CLAIMS", (bad,))
    code = main(["reproduce", "flexchill", "--dry-run"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("chillfl: error: client.lr")


def test_the_python_api_reproduces_and_resumes_as_the_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, whole: Whole) -> None:
    import chillfl
    from chillfl.errors import ConfigError
    from chillfl.reproduce import format_outcomes

    out = tmp_path / "api"
    outcomes = chillfl.reproduce_paper("flexchill", seeds=[0, 1], out_dir=out, progress=False)
    assert format_outcomes(outcomes) + "\n" == whole.printed  # the CLI prints exactly this table (the CLI's run: the fixture)
    assert [o.folder for o in outcomes] == [out / "demo-compare", out / "demo-compare-2"] and (out / "reproduce-flexchill.md").is_file()
    assert all(o.verdict in ("reproduces", "opposite", "does not at this scale") and len(o.per_seed) == 2 for o in outcomes)
    calls = _interrupt(monkeypatch, run=99, after_round=1)
    again = chillfl.reproduce_paper("flexchill", seeds=[0, 1], out_dir=out, progress=False, resume=True)
    assert calls["run"] == 0 and format_outcomes(again) == format_outcomes(outcomes)  # both read back
    with pytest.raises(ConfigError) as err:
        chillfl.reproduce_paper("flexchill", seeds=[], out_dir=out)
    assert err.value.field == "seeds"
    with pytest.raises(ConfigError) as err:
        chillfl.reproduce_paper("nopaper")
    assert err.value.field == "paper"
