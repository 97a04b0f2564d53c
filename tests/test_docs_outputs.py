"""``python -m chillfl.docs_outputs``: the block-replacement logic on a small fake doc."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.docs_outputs import clean_output, default_files, find_blocks, main, replace_blocks, run_command

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
<!-- /output -->
Trailing text.
"""


def test_find_blocks() -> None:
    blocks = find_blocks(DOC)
    assert [b.command for b in blocks] == ["chillfl run -q", "chillfl compare x --seeds 0,1"]
    assert blocks[0].body == "old table\nold line\n" and blocks[1].body == "| a | b |\n"


def test_replace_blocks_changes_only_the_bodies() -> None:
    calls = []

    def fake(command: str) -> str:
        calls.append(command)
        return f"NEW {command}\nresults: /tmp/somewhere\n\n"

    new = replace_blocks(DOC, fake)
    assert calls == ["chillfl run -q", "chillfl compare x --seeds 0,1"]
    expected = (
        DOC.replace("old table\nold line\n", "NEW chillfl run -q\n").replace("| a | b |\n", "NEW chillfl compare x --seeds 0,1\n")
    )
    assert new == expected  # markers, fences (with their language and length) and all other text byte for byte
    assert replace_blocks(new, fake) == new  # idempotent


def test_clean_output() -> None:
    assert clean_output("a  \nresults: x/y\nb\n\n\n") == "a\nb\n"
    assert clean_output("") == "\n"


def test_main_writes_and_checks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(DOC)
    monkeypatch.setattr("chillfl.docs_outputs.run_command", lambda cmd: "fresh\n")
    assert main([str(doc), "--check"]) == 1 and doc.read_text() == DOC  # stale, nothing written
    assert main([str(doc)]) == 0 and doc.read_text().count("fresh\n") == 2
    assert main([str(doc), "--check"]) == 0


def test_run_command_runs_python_in_a_temporary_folder(tmp_path: Path) -> None:
    out = run_command("python -c \"import os; print('hi'); print(os.path.basename(os.getcwd())[:13])\"")
    assert out == "hi\nchillfl-docs-\n"
    with pytest.raises(ValueError):
        run_command("rm -rf /")
    with pytest.raises(RuntimeError, match="exited with 3"):
        run_command("python -c 'raise SystemExit(3)'")


def test_readme_demo_table_is_a_generated_block() -> None:
    readme = next(p for p in default_files() if p.name == "README.md")
    assert "chillfl run -q" in [b.command for b in find_blocks(readme.read_text(encoding="utf-8"))]
