"""``python -m chillfl.docs_outputs``: the block-replacement logic on a small fake doc."""

from __future__ import annotations

from pathlib import Path

import pytest

import re

from chillfl.docs_outputs import (
    check_blocks,
    clean_output,
    default_files,
    find_blocks,
    is_session,
    main,
    output_shape,
    replace_blocks,
    run_command,
    split_keep,
    summary_mismatches,
    this_machine,
    unmarked_result_tables,
)
from procs import alive

DOC = """# Title

Text before.

<!-- output: chillfl run -q -->
```text
old table
old line
```
<!-- /output -->

A fenced block without markers stays:

```
chillfl run -q
untouched
```

<!-- output: chillfl compare x --seeds 0,1 -->
````
| a | b |
````
Made on: Old CPU (AVX2), 2 CPUs, Linux x86_64, Python 3.11.7, torch 2.13.0+cpu, numpy 2.4.6
<!-- /output -->
Trailing text.
"""


def test_find_blocks() -> None:
    blocks = find_blocks(DOC)
    assert [b.command for b in blocks] == ["chillfl run -q", "chillfl compare x --seeds 0,1"]
    assert blocks[0].body == "old table\nold line\n" and blocks[1].body == "| a | b |\n"
    assert blocks[0].machine is None and blocks[1].machine == "Old CPU (AVX2), 2 CPUs, Linux x86_64, Python 3.11.7, torch 2.13.0+cpu, numpy 2.4.6"


def test_replace_blocks_changes_only_the_bodies() -> None:
    calls = []

    def fake(command: str) -> str:
        calls.append(command)
        return f"NEW {command}\nresults: /tmp/somewhere\n\n"

    new = replace_blocks(DOC, fake, "New CPU")
    assert calls == ["chillfl run -q", "chillfl compare x --seeds 0,1"]
    expected = (
        DOC.replace("old table\nold line\n```\n", "NEW chillfl run -q\n```\nMade on: New CPU\n")
        .replace("| a | b |\n", "NEW chillfl compare x --seeds 0,1\n")
        .replace("Made on: Old CPU (AVX2), 2 CPUs, Linux x86_64, Python 3.11.7, torch 2.13.0+cpu, numpy 2.4.6", "Made on: New CPU")
    )
    assert new == expected  # markers, fences (with their language and length) and all other text byte for byte
    assert replace_blocks(new, fake, "New CPU") == new  # idempotent


def test_only_rewrites_the_blocks_whose_command_holds_it() -> None:
    """``--only x``: the matching block is rerun and takes this machine; the other keeps its body and its machine."""
    ran: list[str] = []

    def fake(command: str) -> str:
        ran.append(command)
        return "NEW\n"

    new = replace_blocks(DOC, fake, "New CPU", only="compare x")
    assert ran == ["chillfl compare x --seeds 0,1"]
    assert new == DOC.replace("| a | b |\n", "NEW\n").replace("Made on: Old CPU (AVX2), 2 CPUs, Linux x86_64, Python 3.11.7, torch 2.13.0+cpu, numpy 2.4.6", "Made on: New CPU")
    assert replace_blocks(DOC, fake, "New CPU", only="no such command") == DOC


def test_only_with_check_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--check", "--only", "x", "README.md"]) == 2
    assert capsys.readouterr().err == "--only: rewrites blocks; --check and --list take every block\n"


def test_check_reruns_only_blocks_made_on_this_machine() -> None:
    calls = []

    def fake(command: str) -> str:
        calls.append(command)
        return "| a | b |\n"

    old = "Old CPU (AVX2), 2 CPUs, Linux x86_64, Python 3.11.7, torch 2.13.0+cpu, numpy 2.4.6"
    assert check_blocks(DOC, fake, old) == (["chillfl run -q: names no machine (no 'Made on:' line)"], [])
    assert calls == ["chillfl compare x --seeds 0,1"]  # the unnamed block is stale without a run; the other one is rerun
    elsewhere = f"chillfl compare x --seeds 0,1: made on {old}; this machine is New CPU (AVX512), 2 CPUs, ...: not checked"
    problems, skipped = check_blocks(DOC, fake, "New CPU (AVX512), 2 CPUs, ...")
    assert problems[1] == elsewhere and skipped == []
    assert calls == ["chillfl compare x --seeds 0,1"]  # a block made elsewhere is not rerun: its bytes are promised only there
    problems, skipped = check_blocks(DOC, fake, "New CPU (AVX512), 2 CPUs, ...", other_machines="skip")
    assert len(problems) == 1 and skipped == [elsewhere]  # listed, not failed; the unnamed block still fails
    assert check_blocks(DOC, lambda cmd: "changed\n", old)[0][1] == "chillfl compare x --seeds 0,1: its output differs"


def test_output_shape_masks_numbers_and_column_widths() -> None:
    intel = "T = 1     91.75 ± 0.88  (2/3 hold)\nlaunches 1,354, diverged: 6\n"
    amd = "T = 1     9.41 ± 1.12   (1/3 hold)\nlaunches 987, diverged: 6\n"
    assert output_shape(intel) == output_shape(amd) == "T = # # ± # (#/# hold)\nlaunches #, diverged: #\n"
    assert output_shape("acc -0.58 at 12:30\n") == "acc # at #\n"
    assert output_shape("a line\n") != output_shape("a line\nanother\n")  # a line more is a difference
    assert output_shape("fedavg 0.91\n") != output_shape("fedprox 0.91\n")  # so is a label


def test_output_shape_takes_an_outcome_cell_for_a_value() -> None:
    """A rounds-to-target cell reads ``never`` on one CPU and ``12.5 (2/3)`` on another when tuning breaks a near-tie
    the other way (docs/baselines.md, AVX-512 against AVX2); a tuning cell reads ``diverged`` or an accuracy. Only a
    whole cell is taken: the same words elsewhere in a line stay words."""
    made = "| FedDyn | 0.03 | never | 45.7 |\n| FedDyn | 91.20 | diverged |\n"
    here = "| FedDyn | 0.1 | 12.5 (2/3) | 45.7 |\n| FedDyn | 91.20   | 90.74    |\n"
    assert output_shape(made) == output_shape(here) == "| FedDyn | # | # | # |\n| FedDyn | # | # |\n"
    assert output_shape("| it never ended |\n") != output_shape("| it # ended |\n")  # a word inside a cell stays
    assert output_shape("| never mind |\n") == "| never mind |\n"
    assert output_shape("| a | never |\n") != output_shape("| a | sometimes |\n")  # only outcomes, not any word


def test_a_block_made_elsewhere_is_checked_numbers_aside_with_shape() -> None:
    """``--other-machines shape`` (CI's): a block made on another CPU is rerun and compared with its numbers masked."""
    calls = []

    def rounded_elsewhere(command: str) -> str:
        calls.append(command)
        return "| a 0.5   | b |\n" if command.startswith("chillfl compare") else "x\n"

    doc = DOC.replace("| a | b |", "| a 0.25 | b |")
    here = "New CPU (AVX512), 2 CPUs, ..."
    problems, notes = check_blocks(doc, rounded_elsewhere, here, other_machines="shape")
    assert calls == ["chillfl compare x --seeds 0,1"]  # the unnamed block fails without a run, as in every mode
    assert problems == ["chillfl run -q: names no machine (no 'Made on:' line)"] and len(notes) == 1 and notes[0].endswith("masked")
    problems, _ = check_blocks(doc, lambda command: "| a 0.25 | c |\n", here, other_machines="shape")
    assert problems[1].endswith("here its output differs beyond its numbers")  # a label changed: stale on any machine


def test_clean_output() -> None:
    assert clean_output("a  \nresults: x/y\nb\n\n\n") == "a\nb\n"
    assert clean_output("") == "\n"


def test_main_writes_and_checks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(DOC)
    monkeypatch.setattr("chillfl.docs_outputs.run_command", lambda cmd, figures_to=None: "fresh\n")
    monkeypatch.setattr("chillfl.docs_outputs.this_machine", lambda: "This CPU (AVX512)")
    assert main([str(doc), "--check"]) == 1 and doc.read_text() == DOC  # stale, nothing written
    assert main([str(doc)]) == 0 and doc.read_text().count("fresh\n") == 2 and doc.read_text().count("Made on: This CPU (AVX512)\n") == 2
    assert main([str(doc), "--check"]) == 0
    monkeypatch.setattr("chillfl.docs_outputs.this_machine", lambda: "Other CPU (AVX2)")
    assert main([str(doc), "--check"]) == 1  # the same bytes, but this machine did not make them
    assert main([str(doc), "--check", "--other-machines", "skip"]) == 0  # ... which CI elsewhere may leave unchecked
    capsys.readouterr()
    assert main([str(doc), "--check", "--other-machines", "shape"]) == 0  # ... or rerun, numbers aside (the same output here)
    assert "(0 of 2 block(s) rerun, byte-identical; 2 rerun, the same but for their numbers)" in capsys.readouterr().err
    monkeypatch.setattr("chillfl.docs_outputs.run_command", lambda cmd, figures_to=None: "fresh\nand more\n")
    assert main([str(doc), "--check", "--other-machines", "shape"]) == 1  # a line more: stale whatever the machine


def test_run_command_runs_python_in_a_temporary_folder(tmp_path: Path) -> None:
    out = run_command("python -c \"import os; print('hi'); print(os.path.basename(os.getcwd())[:13])\"")
    assert out == "hi\nchillfl-docs-\n"
    with pytest.raises(ValueError):
        run_command("rm -rf /")
    with pytest.raises(RuntimeError, match="exited with 3"):
        run_command("python -c 'raise SystemExit(3)'")


def test_steps_run_in_one_folder_and_the_block_shows_the_last() -> None:
    """``A && B``: the Table 1 block reads a comparison the step before wrote (it was a plain block the tool could not rerun)."""
    write = "python -c \"open('made.txt', 'w').write('42'); print('first')\""
    read = "python -c \"print(open('made.txt').read())\""
    assert run_command(f"{write} && {read}") == "42\n"
    with pytest.raises(RuntimeError, match="exited with 3"):
        run_command(f"python -c 'raise SystemExit(3)' && {read}")
    for bad in ("&& python -c 1", "python -c 1 &&", "python -c 1 && rm -rf /"):
        with pytest.raises(ValueError):
            run_command(bad)


DRAWS = "python -c \"import os; os.makedirs('results/r-compare'); open('results/r-compare/d.png', 'wb').write(b'PNG'); print('table')\""


def test_a_block_keeps_the_figure_its_command_draws(tmp_path: Path) -> None:
    """``; keep: PATTERN as DEST``: the one match is copied beside the markdown file, only when not checking."""
    assert split_keep(f"{DRAWS} ; keep: results/*/d.png as img/d.png, a.png as b.png") == (DRAWS, [("results/*/d.png", "img/d.png"), ("a.png", "b.png")])
    assert split_keep("chillfl run -q") == ("chillfl run -q", [])
    assert run_command(f"{DRAWS} ; keep: results/*/d.png as img/d.png", figures_to=tmp_path) == "table\n"
    assert (tmp_path / "img" / "d.png").read_bytes() == b"PNG"
    assert run_command(f"{DRAWS} ; keep: results/*/d.png as img/e.png") == "table\n"  # --check: nothing copied
    assert not (tmp_path / "img" / "e.png").exists()
    with pytest.raises(RuntimeError, match="matched 0 files"):
        run_command(f"{DRAWS} ; keep: results/*/none.png as img/n.png", figures_to=tmp_path)
    with pytest.raises(ValueError, match="PATTERN as DESTINATION"):
        split_keep("chillfl run ; keep: results/x.png")


MACHINE = re.compile(r".+ \([A-Z][A-Z0-9_]*\), \d+ CPUs, \S+ \S+, Python \d+\.\d+\.\d+\S*, torch \S+, numpy \S+")


def test_this_machine_names_cpu_kernels_and_versions() -> None:
    assert MACHINE.fullmatch(this_machine())


@pytest.mark.parametrize("page", default_files(), ids=lambda p: p.name)
def test_every_docs_block_is_well_formed_and_names_its_machine(page: Path) -> None:
    """Every output marker of README.md and docs/*.md opens a block the tool can regenerate, with a "Made on:" line."""
    text = page.read_text(encoding="utf-8")
    blocks = find_blocks(text)
    opens, closes = re.findall(r"^<!-- output(?: session)?:", text, re.M), re.findall(r"^<!-- /output -->$", text, re.M)
    assert len(blocks) == len(opens) == len(closes)  # no marker line the regex misses (prose may quote a marker)
    for b in blocks:
        assert b.machine is not None, f"{page.name}: {b.command!r} names no machine; regenerate it with python -m chillfl.docs_outputs {page.name}"
        assert MACHINE.fullmatch(b.machine), f"{page.name}: {b.command!r}: 'Made on: {b.machine}' is not what this_machine() writes"
        assert b.body.endswith("\n") and b.body.strip(), f"{page.name}: {b.command!r} has an empty body"


TABLE_OUTPUT = re.compile(r"^(\| variant |target = best |seeds \d)", re.M)


@pytest.mark.parametrize("page", default_files(), ids=lambda p: p.name)
def test_no_command_table_is_pasted_outside_the_markers(page: Path) -> None:
    """A results table printed by compare/reproduce is regenerated, never remembered: it sits between output markers."""
    text = page.read_text(encoding="utf-8")
    for b in find_blocks(text):
        text = text.replace(b.body, "")
    pasted = [m.group(1) for m in re.finditer(r"^```[^\n]*\n(.*?)^```", text, re.M | re.S) if TABLE_OUTPUT.search(m.group(1))]
    assert not pasted, f"{page.name}: a command's table outside <!-- output: COMMAND --> markers: {pasted[0][:120]!r}"


TWO_ROWS = """<!-- output: chillfl compare x -q -->
```
| FedAvg | 61.97 ± 2.66 | +0.00 ± 0.00 | 0.0253 | 47 |
| PA3Fed | 61.97 ± 2.27 | -0.17 ± 0.62 | 0.9504 | 3 |
```
Made on: Some CPU
<!-- /output -->
"""
"""A block of two compare rows that the summary and paragraph tests quote."""

SUMMARISED = TWO_ROWS + """
<!-- summary of the output blocks -->
| setting | acc | diff | shift | CLP |
|---|---|---|---|---|
| base | {acc} | {diff} ± 0.62 | {shift} | {clp} % |
"""


def test_a_summary_table_holds_only_numbers_its_blocks_print() -> None:
    """By hand: each decimal must equal a block's number to the table's precision, each integer before "%" a block's integer."""
    assert summary_mismatches(SUMMARISED.format(acc="61.97", diff="-0.17", shift="0.025", clp="47")) == []
    assert summary_mismatches(SUMMARISED.format(acc="61.97", diff="-0.17", shift="0.95", clp="47")) == []  # 0.9504 to 2 places
    assert summary_mismatches(SUMMARISED.format(acc="61.97", diff="+0.00", shift="0.025", clp="47")) == []  # +0.00 is the block's +0.00
    assert summary_mismatches(SUMMARISED.format(acc="62.97", diff="+0.17", shift="0.026", clp="48")) == [
        f"the summary table at line 10: {n} is in no output block" for n in ("62.97", "+0.17", "0.026", "48")
    ]  # a changed digit, a flipped sign, a wrong rounding, a percent no block prints
    assert summary_mismatches(SUMMARISED.format(acc="61.97", diff="-0.17", shift="0.025", clp="3.0")) == [
        "the summary table at line 10: 3.0 is in no output block"
    ]  # a decimal needs a decimal: the block's integer 3 does not print "3.0"


QUOTED = TWO_ROWS + """
An unmarked paragraph may quote anything: 12.34 and 99 %.

PA3Fed is level with FedAvg ({acc} % both, a difference of {diff}),
its shift {shift} at `beta=2.5` in 47 % of rounds. <!-- numbers from the output blocks -->
"""


def test_a_marked_paragraph_quotes_only_numbers_its_blocks_print() -> None:
    """By hand: the summary tables' rule for a paragraph ending in the mark; numbers in `code` (options) are not quotes."""
    assert summary_mismatches(QUOTED.format(acc="61.97", diff="-0.17", shift="0.95")) == []
    assert summary_mismatches(QUOTED.format(acc="61.96", diff="+0.17", shift="0.95")) == [
        f"the paragraph ending at line 12: {n} is in no output block" for n in ("61.96", "+0.17")
    ]  # a changed digit, a flipped sign; the unmarked paragraph's 12.34 and 99 % are not checked
    assert summary_mismatches(QUOTED.format(acc="61.97", diff="-0.17", shift="0.95").replace("47 %", "48 %")) == [
        "the paragraph ending at line 12: 48 is in no output block"
    ]


def test_a_number_ending_a_sentence_is_read_and_a_version_is_not() -> None:
    """By hand: "61.96." ends a sentence and is checked; "2.13.0" is a version, none of its parts a quote."""
    ends = QUOTED.format(acc="61.97", diff="-0.17", shift="0.95").replace("47 % of rounds.", "47 % of rounds; PA3Fed 61.96. Torch 2.13.0.")
    assert summary_mismatches(ends) == ["the paragraph ending at line 12: 61.96 is in no output block"]


TIES = """<!-- output: chillfl compare x -q -->
```
| FedAvg | 2.65 ± 0.985 | -10.85 |
```
Made on: Some CPU
<!-- /output -->

The gain is {gain} ± {std}, the interval's end {end}. <!-- numbers from the output blocks -->
"""


def test_a_printed_tie_supports_the_prose_rounding_it_half_up() -> None:
    """By hand: a reader rounds the block's "2.65" to 2.7, "-10.85" to -10.9 (the float 2.65 formats as 2.6: both pass); 2.8 fails."""
    assert summary_mismatches(TIES.format(gain="2.7", std="0.99", end="-10.9")) == []
    assert summary_mismatches(TIES.format(gain="2.6", std="0.98", end="-10.8")) == []
    assert summary_mismatches(TIES.format(gain="2.8", std="0.97", end="-11.0")) == [
        f"the paragraph ending at line 8: {n} is in no output block" for n in ("2.8", "0.97", "-11.0")
    ]


PAPER = QUOTED.format(acc="61.97", diff="-0.17", shift="0.95").replace(
    " in 47 % of rounds. <!-- numbers from the output blocks -->", "\nin 47 % of rounds (paper: +9.5, 12 % up; 0.78 worked out). <!-- numbers from the output blocks{list} -->"
)


def test_a_marked_paragraph_lists_the_numbers_not_from_its_blocks() -> None:
    """By hand: a listed number is exempt, an unlisted paper number fails, a listed number the paragraph lacks is a stale list."""
    assert summary_mismatches(PAPER.format(list="; not from them: 9.5 (paper), 12 (paper), 0.78 (61.97 - 61.19)")) == []
    assert summary_mismatches(PAPER.format(list="; not from them: +9.5 (paper),\n 0.78 (61.97 - 61.19)")) == [
        "the paragraph ending at line 13: 12 is in no output block"
    ]  # the sign may be written or not, the list may wrap; the paper's 12 % is not listed
    assert summary_mismatches(PAPER.format(list="")) == [f"the paragraph ending at line 13: {n} is in no output block" for n in ("+9.5", "0.78", "12")]
    assert summary_mismatches(PAPER.format(list="; not from them: 9.5 (paper), 12 (paper), 0.78 (61.97 - 61.19), 4.2 (paper)")) == [
        "the paragraph ending at line 13: 4.2 is listed as not from the blocks but the paragraph does not print it"
    ]  # the prose no longer says 4.2: the list is stale
    assert summary_mismatches(PAPER.format(list="; not from them: 9.5 (paper), 12 (paper), 0.78 (61.97 - 61.19)").replace("(paper: +9.5", "(paper: +9.6")) == [
        "the paragraph ending at line 13: 9.5 is listed as not from the blocks but the paragraph does not print it",
        "the paragraph ending at line 13: +9.6 is in no output block",
    ]  # a listed number exempts only itself
    unreadable = summary_mismatches(PAPER.format(list="; not from them: 9.5, 12 (paper), 0.78 (61.97 - 61.19)"))
    assert len(unreadable) == 4 and "cannot be read" in unreadable[0]  # an item without its why: the list exempts nothing
    misspelt = summary_mismatches(PAPER.format(list="; not from blocks: 9.5 (paper), 12 (paper), 0.78 (61.97 - 61.19)"))
    assert len(misspelt) == 4 and "cannot be read" in misspelt[0]
    shown = QUOTED.format(acc="61.97", diff="-0.17", shift="0.95") + "\nThe docs show a mark: `<!-- numbers from the output blocks; not from them: 1.5 (paper) -->` 2.5\n"
    assert summary_mismatches(shown) == []  # a mark in inline code marks nothing (the docs page describing the mark)


def test_check_fails_on_a_stale_list_of_numbers_not_from_the_blocks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--check`` (blocks of another machine: not rerun) holds a marked paragraph's list to the paragraph, as the docs tests do."""
    doc = tmp_path / "doc.md"
    doc.write_text(PAPER.format(list="; not from them: 9.5 (paper), 12 (paper), 0.78 (61.97 - 61.19)"))
    assert main(["--check", "--other-machines", "skip", str(doc)]) == 0
    doc.write_text(PAPER.format(list="; not from them: 9.5 (paper), 12 (paper), 0.87 (61.97 - 61.10)"))
    assert main(["--check", "--other-machines", "skip", str(doc)]) == 1
    err = capsys.readouterr().err
    assert f"stale: {doc}: the paragraph ending at line 13: 0.87 is listed as not from the blocks but the paragraph does not print it" in err
    assert f"stale: {doc}: the paragraph ending at line 13: 0.78 is in no output block" in err


def test_a_result_table_outside_the_blocks_must_be_a_marked_summary() -> None:
    marked = SUMMARISED.format(acc="61.97", diff="-0.17", shift="0.025", clp="47")
    assert unmarked_result_tables(marked) == []  # the block's rows and the marked summary's
    pasted = marked.replace("<!-- summary of the output blocks -->\n", "")
    assert unmarked_result_tables(pasted) == ["line 11: a result table outside <!-- output: COMMAND --> markers and not after <!-- summary of the output blocks -->"]


@pytest.mark.parametrize("page", default_files(), ids=lambda p: p.name)
def test_every_summary_table_matches_its_blocks_and_no_result_table_is_pasted(page: Path) -> None:
    """docs/pa3fed.md's study summary and the like stay in step with the regenerated blocks they condense."""
    text = page.read_text(encoding="utf-8")
    assert summary_mismatches(text) == []
    assert unmarked_result_tables(text) == []


def test_check_fails_on_a_summary_its_blocks_no_longer_support(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(SUMMARISED.format(acc="61.96", diff="-0.17", shift="0.025", clp="47"))  # the block is another machine's: not rerun
    assert main(["--check", "--other-machines", "skip", str(doc)]) == 1
    assert "stale: " + str(doc) + ": the summary table at line 10: 61.96 is in no output block" in capsys.readouterr().err


def test_the_analysis_example_is_a_session_block_not_a_pasted_one() -> None:
    """docs/analysis.md's runs-then-analyses example was a shell session pasted by hand; it is a session block the tool reruns."""
    text = next(p for p in default_files() if p.name == "analysis.md").read_text(encoding="utf-8")
    sessions = [b for b in find_blocks(text) if is_session(b.command)]
    assert any("chillfl analyze cka" in b.command and "$ chillfl analyze cka" in b.body for b in sessions)
    for b in find_blocks(text):
        text = text.replace(b.body, "")
    assert not re.findall(r"^\$ (?:chillfl|python) ", text, re.M), "a command's output pasted outside <!-- output session: --> markers"


def test_readme_demo_table_is_a_generated_block() -> None:
    readme = next(p for p in default_files() if p.name == "README.md")
    assert "chillfl run -q" in [b.command for b in find_blocks(readme.read_text(encoding="utf-8"))]


def test_sigterm_stops_the_running_command_and_removes_its_folder(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    marker = tmp_path / "child.pid"
    doc = tmp_path / "doc.md"
    command = f"python -c \"import os, time; open({str(marker)!r}, 'w').write(str(os.getpid())); time.sleep(120)\""
    doc.write_text(f"<!-- output: {command} -->\n```\nold\n```\nMade on: {this_machine()}\n<!-- /output -->\n")  # made here, so --check reruns it
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    tool = subprocess.Popen([sys.executable, "-m", "chillfl.docs_outputs", "--check", str(doc)], env=env, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not marker.exists() or not marker.read_text():
        assert time.monotonic() < deadline and tool.poll() is None, "the block's command never started"
        time.sleep(0.05)
    child = int(marker.read_text())
    tool.send_signal(signal.SIGTERM)
    assert tool.wait(timeout=60) == 128 + signal.SIGTERM
    deadline = time.monotonic() + 10
    while alive(child):  # the command stopped with the tool (a zombie of an exited tool is reaped by init)
        assert time.monotonic() < deadline, f"the block's command {child} outlived the tool"
        time.sleep(0.05)
    assert not list(tmp_path.glob("chillfl-docs-*"))  # its temporary folder is gone
    assert doc.read_text().count("old") == 1  # nothing written



SESSION_DOC = """Before.

<!-- output session:
silent: python -c "open('made.txt', 'w').write('42'); print('setup noise')"
python -c "print('read', open('made.txt').read()); print('results: somewhere')"
python -c "print(1)"
python -c "open('made.txt', 'a').write('!')"
python -c "print(open('made.txt').read())"
-->
```text
old
```
<!-- /output -->
After.
"""

SESSION_BODY = """$ python -c "print('read', open('made.txt').read()); print('results: somewhere')"
read 42
$ python -c "print(1)"
1
$ python -c "open('made.txt', 'a').write('!')"
$ python -c "print(open('made.txt').read())"
42!
"""


def test_a_session_block_runs_its_commands_in_one_folder_and_shows_each_with_a_prompt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/analysis.md's session (runs, then analyses reading their folders) is regenerated, not pasted: a later command
    reads what an earlier one wrote; a ``silent:`` step runs and shows neither its command nor its output."""
    doc = tmp_path / "doc.md"
    doc.write_text(SESSION_DOC)
    monkeypatch.setattr("chillfl.docs_outputs.this_machine", lambda: "This CPU (AVX512)")
    (block,) = find_blocks(SESSION_DOC)
    assert block.body == "old\n" and block.command.startswith("silent: python -c") and block.command.count("\n") == 5
    assert main([str(doc)]) == 0
    assert doc.read_text() == SESSION_DOC.replace("old\n```\n", SESSION_BODY + "```\nMade on: This CPU (AVX512)\n")
    assert "setup noise" not in doc.read_text().split("-->\n", 1)[1]  # the silent step's output is not shown
    assert main([str(doc), "--check"]) == 0


def test_a_session_block_whose_output_changed_is_stale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    doc = tmp_path / "doc.md"
    monkeypatch.setattr("chillfl.docs_outputs.this_machine", lambda: "This CPU (AVX512)")
    current = SESSION_DOC.replace("old\n```\n", SESSION_BODY + "```\nMade on: This CPU (AVX512)\n")
    doc.write_text(current.replace("read 42\n", "read 43\n"))  # one remembered digit
    assert main([str(doc), "--check"]) == 1
    err = capsys.readouterr().err
    assert "its output differs" in err and f"stale: {doc}: session of 5 commands" in err
    doc.write_text(current.replace("Made on: This CPU (AVX512)\n", ""))
    assert main([str(doc), "--check"]) == 1 and "names no machine" in capsys.readouterr().err
    doc.write_text(current)
    monkeypatch.setattr("chillfl.docs_outputs.this_machine", lambda: "Other CPU (AVX2)")
    assert main([str(doc), "--check", "--other-machines", "skip"]) == 0 and "not checked" in capsys.readouterr().err


def test_a_failing_session_command_fails_the_regeneration_with_its_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = tmp_path / "doc.md"
    failing = SESSION_DOC.replace("python -c \"print(1)\"\n", "python -c 'raise SystemExit(3)'\n")
    doc.write_text(failing)
    monkeypatch.setattr("chillfl.docs_outputs.this_machine", lambda: "This CPU (AVX512)")
    with pytest.raises(RuntimeError, match=r"^\"python -c 'raise SystemExit\(3\)'\" exited with 3"):
        main([str(doc)])
    assert doc.read_text() == failing  # nothing written


@pytest.fixture
def ran(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The commands the tool would run, recorded instead of run (each "prints" fresh), on a machine named "This CPU (AVX512)"."""
    commands: list[str] = []
    monkeypatch.setattr("chillfl.docs_outputs.run_command", lambda cmd, figures_to=None: commands.append(cmd) or "fresh\n")
    monkeypatch.setattr("chillfl.docs_outputs.this_machine", lambda: "This CPU (AVX512)")
    return commands


BAD_MARKUP = [
    ("<!-- output session:\nrm -rf /\n-->\n", "only chillfl and python commands are run, got 'rm'"),
    ("<!-- output session:\nsilent: python -c 1\n-->\n", "a session shows no command: every one is silent"),
    ("<!-- output session:\npython -c 1 ; keep: a.png as b.png\n-->\n", "keeps no figures"),
    ("<!-- output session:\npython -c \"print('a --> b')\"\n-->\n", "'-->'"),  # the page's comment would end inside the command
    ("<!-- output: python -c \"print('-->')\" -->\n", "'-->'"),
    ("<!-- output: ls -l -->\n", "only chillfl and python commands are run, got 'ls'"),
    ("<!-- output: chillfl run ; keep: x.png -->\n", "PATTERN as DESTINATION"),
    ("<!-- output: python -c 'unclosed -->\n", "No closing quotation"),
    ("<!-- output session:\npython -c 1\n--> trailing\n", "its markers do not form a block"),
]


@pytest.mark.parametrize(("opening", "why"), BAD_MARKUP)
def test_bad_block_markup_is_one_line_naming_the_page_and_the_block_and_nothing_is_written(
    opening: str, why: str, tmp_path: Path, ran: list[str], capsys: pytest.CaptureFixture[str],
) -> None:
    """A non-chillfl command, an all-silent session, a '-->' in a command (it would end the page's HTML comment early):
    exit 2, one line ``page.md: block at line N: ...``, no command run and no page written (not even an earlier, good one)."""
    good, page = tmp_path / "good.md", tmp_path / "page.md"
    good.write_text(DOC)
    page.write_text(f"# Page\n\nText.\n{opening}```\nold\n```\n<!-- /output -->\n")
    for mode in ([], ["--check"], ["--list"]):
        assert main([str(good), str(page), *mode]) == 2
        captured = capsys.readouterr()
        err = captured.err.strip()
        assert "\n" not in err and err.startswith(f"{page}: block at line 4: ") and why in err and "Traceback" not in err
        assert captured.out == "" and ran == [] and good.read_text() == DOC and page.read_text().endswith("old\n```\n<!-- /output -->\n")


def test_a_page_that_does_not_exist_is_one_line_and_nothing_runs(tmp_path: Path, ran: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    good, missing = tmp_path / "good.md", tmp_path / "nope.md"
    good.write_text(DOC)
    for mode in ([], ["--check"], ["--list"]):
        assert main([str(good), str(missing), *mode]) == 2
        captured = capsys.readouterr()
        assert captured.err.strip() == f"{missing}: no such file" and captured.out == "" and ran == [] and good.read_text() == DOC
