"""``git_commit`` names chillfl's own checkout only: an installed chillfl inside the user's repository (a virtual
environment in their project) records no commit, since the user's HEAD says nothing of chillfl's code and would make
``chillfl resume`` warn of another set-up after every commit of theirs."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Callable, Iterator

import pytest

from chillfl import environment

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs the git command")


def git(repo: Path, *args: str) -> str:
    """One git command in ``repo`` (an identity of its own: the machine may have none)."""
    cmd = ["git", "-c", "user.name=chillfl-test", "-c", "user.email=test@chillfl", "-c", "commit.gpgsign=false", *args]
    return subprocess.run(cmd, cwd=repo, capture_output=True, text=True, check=True).stdout.strip()


def fake_package(folder: Path) -> Path:
    """A chillfl package folder (``__init__.py`` and ``environment.py``); the path ``environment.__file__`` takes."""
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text('"""chillfl."""\n', encoding="utf-8")
    (folder / "environment.py").write_text("# environment\n", encoding="utf-8")
    return folder / "environment.py"


@pytest.fixture
def imported_from(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Path], str | None]]:
    """Point ``environment.__file__`` at another package folder; ``git_commit``'s cache is cleared around it."""

    def point(module_file: Path) -> str | None:
        monkeypatch.setattr(environment, "__file__", str(module_file))
        environment.git_commit.cache_clear()
        return environment.git_commit()

    yield point
    environment.git_commit.cache_clear()


def user_repo(tmp_path: Path) -> tuple[Path, str]:
    """The user's own repository with one commit of theirs."""
    repo = tmp_path / "project"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "train.py").write_text("print('mine')\n", encoding="utf-8")
    git(repo, "add", "train.py")
    git(repo, "commit", "-q", "-m", "mine")
    return repo, git(repo, "rev-parse", "HEAD")


def test_an_installed_chillfl_in_a_venv_inside_the_users_repository_records_no_commit(tmp_path: Path, imported_from: Callable[[Path], str | None]) -> None:
    repo, _ = user_repo(tmp_path)
    module = fake_package(repo / ".venv" / "lib" / "python3.11" / "site-packages" / "chillfl")
    assert imported_from(module) is None
    (repo / "train.py").write_text("print('mine, changed')\n", encoding="utf-8")  # the user's next commit changes nothing
    git(repo, "commit", "-q", "-am", "mine again")
    assert imported_from(module) is None


def test_an_ignored_venv_inside_the_users_repository_records_no_commit(tmp_path: Path, imported_from: Callable[[Path], str | None]) -> None:
    repo, _ = user_repo(tmp_path)
    (repo / ".gitignore").write_text(".venv/\n", encoding="utf-8")
    module = fake_package(repo / ".venv" / "lib" / "python3.11" / "site-packages" / "chillfl")
    assert imported_from(module) is None


def test_chillfls_own_checkout_records_its_commit_and_its_local_changes(tmp_path: Path, imported_from: Callable[[Path], str | None]) -> None:
    repo = tmp_path / "chillfl"
    repo.mkdir()
    git(repo, "init", "-q")
    module = fake_package(repo / "src" / "chillfl")
    git(repo, "add", "src")
    git(repo, "commit", "-q", "-m", "chillfl")
    head = git(repo, "rev-parse", "HEAD")
    assert imported_from(module) == head
    module.write_text("# environment, changed\n", encoding="utf-8")
    assert imported_from(module) == head + "+dirty"


def test_outside_any_repository_there_is_no_commit(tmp_path: Path, imported_from: Callable[[Path], str | None]) -> None:
    if any((p / ".git").exists() for p in tmp_path.parents):
        pytest.skip("the temporary folder lies inside a git repository")
    assert imported_from(fake_package(tmp_path / "site-packages" / "chillfl")) is None
