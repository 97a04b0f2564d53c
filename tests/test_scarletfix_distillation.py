"""[distillation] fixes found by exploring SCARLET on digits: a switched method's cache, the cache hit ratio under the
authors' request rule, a public pool from the run's own dataset, and public_dataset_options without a public_dataset."""

from __future__ import annotations

from chillfl.config import tomllib  # tomli on Python 3.10
from pathlib import Path

import pytest
import torch

from chillfl.cli import main
from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.protocols.softlabels import ServerCache
from chillfl.runner import run_experiment


pytestmark = pytest.mark.usefixtures("one_thread")

SCARLET_D2 = """seed = 0
name = "sc"
out_dir = "{out}"
[dataset]
name = "digits"
[model]
name = "mlp"
[federation]
num_clients = 2
rounds = 2
[distillation]
method = "scarlet"
public_size = 40
subset_size = 20
cache_duration = 2
"""


def base(tmp_path: Path) -> Path:
    path = tmp_path / "base.toml"
    path.write_text(SCARLET_D2.format(out=(tmp_path / "out").as_posix()), encoding="utf-8")
    return path


def resolved_distillation(capsys: pytest.CaptureFixture[str], path: Path, *overrides: str) -> dict:
    assert main(["run", str(path), "--dry-run", *overrides]) == 0
    return tomllib.loads(capsys.readouterr().out).get("distillation", {})


# ---------------------------------------------------------------- 1. a switched method runs at its own cache_duration


def test_a_switched_method_runs_at_its_own_cache_duration(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``distillation.method="dsfl"`` over a SCARLET file with D = 2 ran DS-FL with SCARLET's cache: D's default is
    the method's (SCARLET 50, the others 0), so a switch drops it as it drops the old method's own options."""
    path = base(tmp_path)
    assert load_config(path, {"distillation.method": "dsfl"}).distillation_setup.cache_duration == 0  # type: ignore[union-attr]
    assert "cache_duration" not in resolved_distillation(capsys, path, 'distillation.method="dsfl"')  # unset: DS-FL's 0
    # set in the same overrides: kept, whatever order they come in
    for overrides in (['distillation.method="dsfl"', "distillation.cache_duration=3"], ["distillation.cache_duration=3", 'distillation.method="dsfl"']):
        assert resolved_distillation(capsys, path, *overrides)["cache_duration"] == 3
    # the file's own method, named again, is no switch: its D stays
    assert resolved_distillation(capsys, path, 'distillation.method="scarlet"')["cache_duration"] == 2
    # back to SCARLET from a D = 0 DS-FL table: SCARLET's own 50, not DS-FL's 0
    dsfl = tmp_path / "dsfl.toml"
    dsfl.write_text(SCARLET_D2.replace('"scarlet"', '"dsfl"').replace("cache_duration = 2", "cache_duration = 0"), encoding="utf-8")
    assert load_config(dsfl, {"distillation.method": "scarlet"}).distillation_setup.cache_duration == 50  # type: ignore[union-attr]


def test_a_table_override_to_individual_is_not_refused_for_the_files_cache(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``'distillation={method="individual"}'`` stopped on cache_duration, which the user never set in the override."""
    assert main(["run", str(base(tmp_path)), "--dry-run", 'distillation={method="individual"}']) == 0
    assert tomllib.loads(capsys.readouterr().out).get("distillation", {}).get("cache_duration") in (None, 0)


def test_a_comparison_notes_the_cache_duration_a_switch_dropped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = base(tmp_path)
    assert main(["compare", str(path), "--grid", "distillation.method=dsfl,scarlet", "--dry-run"]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if "switches distillation.method" in line]
    assert notes == ["chillfl: note: variant 'distillation.method=dsfl' switches distillation.method, so it runs dsfl at its own "
                     "distillation.cache_duration = 0, not the base's 2: the comparison differs in it too (set "
                     "distillation.cache_duration in the variant, or grid it, to compare at one setting)"]
    assert main(["compare", str(path), "--grid", "distillation.method=dsfl,scarlet", "--grid", "distillation.cache_duration=2", "--dry-run"]) == 0
    assert "switches distillation.method" not in capsys.readouterr().err


# ---------------------------------------------------------------- 2. cache_hit_ratio under cache_request = "authors"


def test_num_cached_counts_the_authors_edge_rows_on_hand_values() -> None:
    """D = 1 under "authors": an entry stored at t_c is requested again at t_c + 1 (t_c + D > t fails) and still
    signalled CACHED (t - t_c <= D): every row is requested every round, yet round 2 serves both from the cache."""
    cache = ServerCache(duration=1, request_rule="authors")
    row = lambda n: torch.full((n, 2), 0.5)  # noqa: E731
    got = []
    for t in range(1, 6):
        assert cache.request(t, [0, 1]).tolist() == [0, 1]  # all of P^t requested, every round
        got.append(cache.update(t, [0, 1], row(2)).num_cached)
    assert got == [0, 2, 0, 0, 2]  # stored 1, cached 2, expired (dropped) 3, stored 4, cached 5


def test_cache_hit_ratio_is_the_share_served_from_the_cache_under_authors() -> None:
    """The explorer's case: cache_duration = 1, cache_request = "authors", 5 rounds, P^t = P: the metric read 0.0 every
    round (1 - |I_req^t| / |P^t|, and every row is requested) while rounds 2 and 5 serve all of P^t from the cache."""
    cfg = load_config(None, {
        "dataset.name": "digits", "model.name": "mlp", "federation.num_clients": 2, "federation.rounds": 5,
        "client.batch_size": 32, "eval.client_split_size": 10, "distillation.method": "scarlet", "distillation.public_size": 20,
        "distillation.subset_size": 20, "distillation.cache_duration": 1, "distillation.cache_request": "authors",
    })
    records = run_experiment(cfg, write=False, progress=False).records
    assert [r["public_requested"] for r in records] == [20] * 5
    assert [r["cache_hit_ratio"] for r in records] == [0.0, 1.0, 0.0, 0.0, 1.0]


# ---------------------------------------------------------------- 3. a public pool from the run's own dataset


@pytest.mark.parametrize("options", [[], ["distillation.public_dataset_options={split_seed=3}"]])
def test_the_runs_own_dataset_as_public_dataset_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], options: list[str]) -> None:
    """``public_dataset = "digits"`` on digits drew the pool from the clients' training rows again (with another
    split_seed, from the test set too), silently: refused in one line, nothing written."""
    path = base(tmp_path)
    assert main(["run", str(path), "-q", 'distillation.public_dataset="digits"', *options]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("chillfl: error: distillation.public_dataset: 'digits' is the run's own dataset"), err
    assert "leave public_dataset unset to carve a disjoint pool from the training split" in err[0]
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


# ---------------------------------------------------------------- 4. public_dataset_options without public_dataset


def test_public_dataset_options_without_a_public_dataset_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(base(tmp_path)), "--dry-run", "distillation.public_dataset_options={seed=3,bogus_key=5}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("chillfl: error: distillation.public_dataset_options: apply to public_dataset, which is unset"), err
    with pytest.raises(ConfigError) as info:
        load_config(None, {"distillation.method": "dsfl", "distillation.public_size": 40, "distillation.subset_size": 20,
                           "distillation.public_dataset_options": {"seed": 3}})
    assert info.value.field == "distillation.public_dataset_options"


# ---------------------------------------------------------------- 5. a public_size that leaves a client no row says so


def test_a_public_size_that_leaves_a_client_no_row_names_the_bound_it_may_take(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """digits has 1438 training rows; with 4 clients the pool may take 1434 of them. 1437 (inside public_size's range,
    [0, 1437]) was refused on federation.num_clients with no word of public_size."""
    path = base(tmp_path)
    over = ["federation.num_clients=4", "federation.clients_per_round=4"]
    assert main(["run", str(path), "--dry-run", *over, "distillation.public_size=1434"]) == 0
    capsys.readouterr()
    assert main(["run", str(path), "--dry-run", *over, "distillation.public_size=1437"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("chillfl: error: federation.num_clients: must be <= the 1 training samples left after the public pool of 1437 rows"), err
    assert err[0].endswith("(or lower distillation.public_size to at most 1434)"), err
