"""``[attack] kind = "dba"`` (Xie et al. 2020): the local triggers and their union on tiny images worked out by hand,
each attacker's poisoned rows, the probe and its success replayed on a run's model, option errors, executors, resume."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from chillfl.analysis.replay import build_run, load_model_state
from chillfl.attacks.kinds.dba import SPEC, DbaOptions, global_cells, local_cells, parts_of, resolve
from chillfl.attacks.poison import Pattern, poisoned
from chillfl.cli import main
from chillfl.config import load_config
from chillfl.data import ArrayDataset, FederatedData
from chillfl.errors import ConfigError
from chillfl import runner
from chillfl.seeds import derive_seed
from chillfl.settings.attack import AttackConfig
from methods_e2e import assert_executors_agree
from methods_e2e import config as tiny_config
from resume_cases import check_resume
from test_attack_runs import DIGITS, records


@pytest.fixture(autouse=True)
def _no_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "_plots", lambda *args: None)


def attack(**options: Any) -> AttackConfig:
    return AttackConfig.from_table({"kind": "dba", **options}, "attack")


# ---------------------------------------------------------------- the triggers, by hand


def test_each_attackers_local_trigger_by_hand() -> None:
    # 4 parts, default bars of 2, gap 1, two a row: rows 0 and 0 + (1 + 1) = 2, columns 0-1 and 0 + (2 + 1) = 3-4
    d = DbaOptions(parts=4)
    assert local_cells(d, 0) == ((0, 0), (0, 1))
    assert local_cells(d, 1) == ((0, 3), (0, 4))
    assert local_cells(d, 2) == ((2, 0), (2, 1))
    assert local_cells(d, 3) == ((2, 3), (2, 4))
    # 3 bars of 3, gap 0: rows 0, 0, 1; columns 0-2, 3-5, 0-2
    o = DbaOptions(parts=3, bar_length=3, gap=0)
    assert [local_cells(o, k) for k in range(3)] == [((0, 0), (0, 1), (0, 2)), ((0, 3), (0, 4), (0, 5)), ((1, 0), (1, 1), (1, 2))]
    # the j-th attacker by id plants part j mod K: ids 2 < 5 < 7 < 9 < 11 with K = 4 -> 2 and 11 part 0, 5 part 1, ...
    assert parts_of(d, frozenset({11, 5, 9, 2, 7})) == [frozenset({2, 11}), frozenset({5}), frozenset({7}), frozenset({9})]


def test_the_local_triggers_stamped_one_after_another_are_the_global_trigger() -> None:
    x = torch.zeros((1, 1, 4, 6))
    each = x
    for k in range(4):
        each = Pattern(local_cells(DbaOptions(parts=4), k), 7.0).apply(each)
    whole = Pattern(global_cells(DbaOptions(parts=4)), 7.0).apply(x)
    expected = torch.tensor(
        [
            [7, 7, 0, 7, 7, 0],
            [0, 0, 0, 0, 0, 0],
            [7, 7, 0, 7, 7, 0],
            [0, 0, 0, 0, 0, 0],
        ],
        dtype=torch.float32,
    )
    assert torch.equal(each[0, 0], expected) and torch.equal(whole[0, 0], expected)
    assert x.sum() == 0  # a new tensor
    part1 = Pattern(local_cells(DbaOptions(), 1), 7.0).apply(torch.zeros((1, 2, 4, 6)))  # every channel, only its bar
    assert part1[:, :, 0, 3:5].eq(7.0).all() and part1.sum() == 2 * 2 * 7.0


def test_parts_left_unset_are_one_per_attacker_at_most_four_by_hand() -> None:
    # the default federation's 2 attackers (ids 3 < 7): 2 parts, 3 plants T_0 = (0,0),(0,1), 7 plants T_1 = (0,3),(0,4);
    # the global trigger is those 4 pixels (a default of 4 parts was refused: "the run has 2 attackers")
    two = resolve(DbaOptions(), frozenset({7, 3}))
    assert two == DbaOptions(parts=2) and parts_of(two, frozenset({7, 3})) == [frozenset({3}), frozenset({7})]
    assert global_cells(two) == ((0, 0), (0, 1), (0, 3), (0, 4))
    assert resolve(DbaOptions(), frozenset({5})).parts == 1
    assert resolve(DbaOptions(), frozenset({0, 2, 3})).parts == 3
    assert resolve(DbaOptions(), frozenset({0, 1, 2, 3})).parts == 4  # the paper's K, one attacker each
    # 5 attackers: still 4 parts, the fifth by id (11) plants part 0 again
    five = resolve(DbaOptions(), frozenset({11, 5, 9, 2, 7}))
    assert five.parts == 4 and parts_of(five, frozenset({11, 5, 9, 2, 7}))[0] == frozenset({2, 11})
    # an explicit value is kept, even above the attackers (refused where the parts are handed out)
    assert resolve(DbaOptions(parts=3), frozenset({3, 7})).parts == 3
    assert resolve(DbaOptions(parts=1), frozenset({0, 1, 2, 3, 4})).parts == 1


def _toy() -> FederatedData:
    # 4 clients of 4 rows (client c: rows 4c..4c+3), 3x6 images of zeros but one 5.0 (row 13, pixel (2, 5)): the
    # trigger value is the largest training input, 5.0. Test set: labels 0, 1, 2, 1 with distinct inputs.
    x = torch.zeros((16, 1, 3, 6))
    x[13, 0, 2, 5] = 5.0
    y = torch.tensor([0, 1, 2, 3] * 4)
    xt = torch.arange(4 * 18, dtype=torch.float32).reshape(4, 1, 3, 6) / 100
    ds = ArrayDataset("toy", x, y, xt, torch.tensor([0, 1, 2, 1]), 4)
    return FederatedData(ds, [np.arange(4 * c, 4 * c + 4) for c in range(4)], [np.zeros(0, np.int64)] * 4, None, np.zeros(0, np.int64))


def test_each_attacker_poisons_its_share_with_its_own_bar_from_the_seed_stream() -> None:
    data, seed = _toy(), 11
    out = poisoned(data, attack(parts=2, target=3, poison_fraction=0.5), frozenset({0, 2, 3}), seed)
    # attackers 0 < 2 < 3: parts 0, 1, 0 -> bars (0,0),(0,1) for 0 and 3; (0,3),(0,4) for 2
    bars = {0: [(0, 0), (0, 1)], 2: [(0, 3), (0, 4)], 3: [(0, 0), (0, 1)]}
    for cid, bar in bars.items():
        # round(0.5 * 4) = 2 rows, drawn from (seed, "attack", "poison", client) as the backdoor's: re-drawn here
        chosen = set(np.random.default_rng(derive_seed(seed, "attack", "poison", cid)).choice(4, size=2, replace=False).tolist())
        for i in range(4):
            row = 4 * cid + i
            want = data.dataset.x_train[row, 0].clone()
            if i in chosen:
                for r, c in bar:
                    want[r, c] = 5.0
            assert torch.equal(out.client_train(cid)[0][i, 0], want), (cid, i)  # the rows as every read sees them
            assert int(out.dataset.y_train[row]) == (3 if i in chosen else int(data.dataset.y_train[row]))
    assert torch.equal(out.client_train(1)[0], data.dataset.x_train[4:8]) and torch.equal(out.dataset.y_train[4:8], data.dataset.y_train[4:8])
    assert int(data.dataset.x_train.sum()) == 5 and int(out.dataset.x_train.sum()) == 5  # the stored inputs stay clean: the trigger is a mark


def test_the_probe_is_the_other_labels_test_inputs_with_the_global_trigger() -> None:
    data = _toy()
    x, y = SPEC.probe(DbaOptions(parts=2, target=1), data)  # type: ignore[misc]
    # test labels 0, 1, 2, 1: rows 0 and 2 stay, with (0,0),(0,1),(0,3),(0,4) = 5.0, labelled 1
    want = data.dataset.x_test[[0, 2]].clone()
    for r, c in [(0, 0), (0, 1), (0, 3), (0, 4)]:
        want[:, 0, r, c] = 5.0
    assert torch.equal(x, want) and y.tolist() == [1, 1]


def test_fewer_attackers_than_parts_and_a_trigger_larger_than_the_image_are_refused() -> None:
    with pytest.raises(ConfigError) as err:
        poisoned(_toy(), attack(parts=4), frozenset({0, 2, 3}), 0)  # 4 parts, 3 attackers: part 3 never planted
    assert err.value.field == "attack.parts" and "3 attackers" in err.value.message
    with pytest.raises(ConfigError) as err:  # 3 rows of bars need 5 rows of pixels (0, 2, 4); the toy has 3
        poisoned(_toy(), attack(parts=5), frozenset({0, 1, 2, 3, 4}), 0)
    # the layout is what to change, not the kind: the error names the layout's field and says what fits
    assert err.value.field == "attack.parts" and "5x" in err.value.message and "3x" in err.value.message
    with pytest.raises(ConfigError) as err:  # a gap of 2 puts the second row of bars in row 3 of the 3x6 toy; 1 fits
        poisoned(_toy(), attack(gap=2), frozenset({0, 1, 2, 3}), 0)
    assert err.value.field == "attack.gap" and "the default 1 fits" in err.value.message
    with pytest.raises(ConfigError) as err:  # 2 bars of 3 with a gap of 2: 8 columns; with the default gap still 7 > 6
        poisoned(_toy(), attack(parts=2, bar_length=3, gap=2), frozenset({0, 1}), 0)
    assert err.value.field == "attack.bar_length"


# ---------------------------------------------------------------- end to end


@pytest.mark.parametrize("parts", [{"attack.parts": 2}, {}])  # written, or left unset: 2 attackers, 2 parts
def test_its_success_is_the_global_models_accuracy_on_the_global_trigger(tmp_path: Path, parts: dict[str, int]) -> None:
    lines = records(tmp_path, "dba", **{"federation.rounds": 2, "attack.kind": "dba", **parts, "attack.fraction": 0.2, "checkpoint.every": 0})
    assert all(len(r["attackers"]) == 2 and 0.0 <= r["attack_success_rate"] <= 1.0 for r in lines)
    folder = tmp_path / "dba"
    exp = build_run(folder)
    model = exp.model
    model.load_state_dict(load_model_state(folder))
    model.eval()
    x, y = exp.data.test()
    x = x[y != 0].clone()  # target 0 left out
    x[:, :, 0, [0, 1, 3, 4]] = exp.data.dataset.x_train.max()  # the 2-part global trigger: bars (0,0-1) and (0,3-4)
    with torch.no_grad():
        hit = (model(x).argmax(1) == 0).double().mean().item()
    assert lines[-1]["attack_success_rate"] == hit  # the same inputs through the same model: the same logits


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("attack.parts=0", "attack.parts"),
        ("attack.parts=3", "attack.parts"),  # 3 local triggers for the 2 attackers of 10 clients
        ("attack.bar_length=0", "attack.bar_length"),
        ("attack.gap=-1", "attack.gap"),
        ("attack.gap=7", "attack.gap"),  # a 9x11 trigger on 8x8 digits, where the default gap fits
        ("attack.poison_fraction=0", "attack.poison_fraction"),
        ("attack.target=-1", "attack.target"),
        ("attack.target=10", "attack.target"),  # digits: classes 0..9
        ("attack.trigger_size=2", "attack.trigger_size"),  # the backdoor's option
    ],
)
def test_bad_options_exit_2_with_one_line_naming_the_field(override: str, field: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run.toml"
    run.write_text(f'out_dir = "{tmp_path / "results"}"\ndevice = "cpu"\n[dataset]\nname = "digits"\n[model]\nname = "mlp"\n[federation]\nrounds = 1\n', encoding="utf-8")
    code = main(["run", str(run), "attack.kind=dba", override])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and field in err[0], err
    assert not (tmp_path / "results").exists()


def test_the_default_federation_runs_dba_with_its_default_parts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """10 clients, 2 attackers (fraction 0.2): the default of 4 parts was refused there, exit 2 on attack.parts."""
    run = tmp_path / "run.toml"
    run.write_text(f'out_dir = "{tmp_path / "results"}"\nname = "dba"\ndevice = "cpu"\n[dataset]\nname = "digits"\n[model]\nname = "mlp"\n'
                   '[federation]\nrounds = 1\n[checkpoint]\nevery = 0\n', encoding="utf-8")
    code = main(["run", str(run), "attack.kind=dba"])
    assert code == 0, capsys.readouterr().err
    folder = next((tmp_path / "results").glob("dba*"))
    lines = (folder / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 1 and '"attack_success_rate"' in lines[0]
    assert "parts" not in (folder / "config.toml").read_text().split("[attack]")[1].split("\n[")[0]  # unset: derived again on resume


def test_executors_agree() -> None:
    assert_executors_agree(tiny_config(**{"attack.kind": "dba", "attack.parts": 2, "attack.fraction": 0.5}))


def test_a_dba_run_resumes_bitwise(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # 5 attackers of 10 and 4 parts: the fifth plants part 0 again
    check_resume("algorithm.fedavg", "sequential", 1, tmp_path, monkeypatch, **{"attack.kind": "dba", "attack.fraction": 0.5, "federation.clients_per_round": 4})


def test_dba_under_fedavg_differs_from_a_clean_run(tmp_path: Path) -> None:
    base = {**DIGITS, "federation.rounds": 2}
    clean = records(tmp_path, "clean", base)
    dba = records(tmp_path, "dba2", base, **{"attack.kind": "dba", "attack.parts": 2})
    assert [r["global_loss"] for r in dba] != [r["global_loss"] for r in clean]  # the poisoned rows reached training
    assert load_config(None, {"attack.kind": "dba"}).attack.options == DbaOptions()
