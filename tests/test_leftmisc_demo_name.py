"""``demo`` on the command line is the built-in demo, and its temperature rows are added only to it: with a file
``./demo`` in the folder, ``chillfl run demo`` / ``compare demo`` loaded that file and ran the demo's rows over it
(its own variants replaced, into the demo's folder name). Now ``demo`` is refused there as ambiguous (exit 2, one
line saying how to pick each), ``./demo`` is the file as written, and ``chillfl run`` with no config is the demo
wherever it is typed."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import main

MINE = """name = "mine"
[dataset]
name = "digits"
[model]
name = "mlp"
[variants.a]
client.lr = 0.1
[variants.b]
client.lr = 0.2
"""


@pytest.fixture
def own_demo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder holding the user's own config file named ``demo``, as the current folder."""
    (tmp_path / "demo").write_text(MINE, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("command", [["compare", "demo"], ["run", "demo"], ["data", "show", "demo"]], ids=["compare", "run", "data-show"])
def test_demo_beside_a_file_named_demo_is_refused_as_ambiguous(own_demo: Path, capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    assert main([*command, "--dry-run"]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert captured.out == "" and len(lines) == 1 and "Traceback" not in captured.err
    assert lines[0].startswith("chillfl: error: config: 'demo' is ambiguous here: it names the file ./demo and the built-in demo; give ./demo for the file")
    assert "`chillfl run` with no config runs the demo anywhere" in lines[0]


def test_the_file_is_run_as_written_and_the_demo_with_no_config(own_demo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "./demo", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# compare (not part of the config): 2 runs: 2 variants x seeds 0\n") and 'name = "mine"' in out  # its own variants
    assert main(["run", "--dry-run"]) == 0  # the built-in demo, not the file named demo here
    out = capsys.readouterr().out
    assert out.startswith("# compare (not part of the config): 27 runs: 3 variants x seeds 0, 1, 2") and 'name = "demo"' in out and "mine" not in out


def test_without_such_a_file_demo_is_the_demo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "demo").mkdir()  # a folder named demo (a result folder, say) is no config: no ambiguity
    assert main(["compare", "demo", "--dry-run"]) == 0
    assert capsys.readouterr().out.startswith("# compare (not part of the config): 27 runs: 3 variants x seeds 0, 1, 2")


def test_a_papers_claim_on_the_demo_runs_the_bundled_demo_beside_a_file_named_demo(own_demo: Path) -> None:
    # `chillfl reproduce flexchill` in such a folder ran its demo claim on the user's file (name "mine", an MLP)
    from chillfl.reproduce import claim_config, claims_of

    claim = next(c for c in claims_of("flexchill") if c.config == "demo")
    config = claim_config(claim, [0], None)
    assert config.name == "demo" and config.model["name"] == "flexchill_cnn"
