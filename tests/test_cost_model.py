"""The catalogue's time estimate prices what each run's method declares it adds to plain local SGD (its spec's ``Cost``).

Hand-worked on the config of ``test_catalogue.py``'s cost-model test: an MLP on digits (1,438 train, 359 test rows),
2 clients of 719 rows, 1 a round, 1 epoch, batch 100, 3 rounds: 3 x ceil(719 / 100) = 24 steps over 3 x 719 samples.
No wall time is asserted: the arithmetic is (docs/performance.md, "Time estimates").
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from chillfl.capabilities import FORWARD, ONE_BATCH_JOB, PARAMETER_TERM, Capabilities, Cost
from chillfl.catalogue import CPU_FLOPS, SMALL_FLOPS, STEP_S, _forward_flops, declared_cost, estimate_cpu_minutes, estimate_gpu_minutes, work
from chillfl.config import EvalConfig, RunConfig, config_from_dict
from user_modules import install

BASE: dict[str, Any] = {
    "dataset": {"name": "digits"},
    "model": {"name": "mlp"},
    "federation": {"num_clients": 2, "clients_per_round": 1, "rounds": 3},
    "client": {"batch_size": 100},
}
STEPS, SAMPLES, TEST = 24, 3 * 719, 3 * 359


def _config(**tables: dict[str, Any]) -> RunConfig:
    out = {k: dict(v) for k, v in BASE.items()}
    for key, table in tables.items():
        out[key] = {**out.get(key, {}), **table}
    return config_from_dict(out)


def _minutes(steps: float, trained: float, tested: float = TEST, overhead: float = 0.0, more_flops: float = 0.0, host: float = 0.0) -> float:
    """The cost model by hand: steps x overhead + (3 FLOPs a trained sample's forward + backward, 1 a tested one);
    ``overhead``: steps' overheads without FLOPs (a declared ``pass_overhead``); ``more_flops``: FLOPs on the parameters at the
    model's throughput; ``host``: seconds of declared host work."""
    flops = _forward_flops(_config())
    assert flops is not None
    return ((steps + overhead) * STEP_S + ((3 * trained + tested) * flops + more_flops) / SMALL_FLOPS + host) / 60


def _close(config: RunConfig, expected: float) -> None:
    got = estimate_cpu_minutes(config)
    assert got is not None and math.isclose(got, expected, rel_tol=1e-12), (got, expected)


def test_fedavg_declares_nothing_and_is_priced_as_before() -> None:
    assert declared_cost(_config()) == Cost()
    _close(_config(), _minutes(STEPS, SAMPLES))


def test_two_passes_a_step_double_the_training_not_the_evaluation() -> None:
    sam = _config(client={"sam_rho": 0.05})
    assert declared_cost(sam) == Cost(step_passes=2.0)
    _close(sam, _minutes(2 * STEPS, 2 * SAMPLES))
    fedavg = work(_config())
    doubled = work(sam)
    assert fedavg is not None and doubled is not None
    assert doubled.client_steps == 2 * fedavg.client_steps


def test_a_frozen_forward_a_step_adds_a_forward_pass() -> None:
    ntd = _config(objective={"terms": [{"name": "ntd"}]})  # the term's spec declares its teacher's forward
    assert declared_cost(ntd).step_passes == 1 + FORWARD == 1.5
    _close(ntd, _minutes(1.5 * STEPS, 1.5 * SAMPLES))
    moon = _config(algorithm={"name": "moon"})  # the global and the previous model's forwards
    _close(moon, _minutes(2 * STEPS, 2 * SAMPLES))


def test_extra_passes_add_up_across_the_parts_of_a_run() -> None:
    # MOON (1 + 2 x 0.5) with the NTD term (+0.5) and sharpness-aware steps (+1): 3.5 passes a step.
    both = _config(algorithm={"name": "moon"}, objective={"terms": [{"name": "ntd"}]}, client={"sam_rho": 0.05})
    assert declared_cost(both).step_passes == 3.5
    _close(both, _minutes(3.5 * STEPS, 3.5 * SAMPLES))


def test_a_personal_model_and_fine_tuning_add_local_epochs() -> None:
    # Ditto: a second training as long, its 24 passes with the proximal term (0.6 steps' overhead each): 14.4 overheads.
    _close(_config(algorithm={"name": "ditto"}), _minutes(2 * STEPS, 2 * SAMPLES, overhead=24 * 0.6))
    # personal_epochs = 3: 1 + 3 epochs, the term on the 3 x 24 = 72 personal passes alone: 43.2 overheads.
    _close(_config(algorithm={"name": "ditto", "personal_epochs": 3}), _minutes(4 * STEPS, 4 * SAMPLES, overhead=72 * 0.6))
    _close(_config(algorithm={"name": "fedavg_ft", "finetune_epochs": 2}), _minutes(3 * STEPS, 3 * SAMPLES))


def test_a_wrapper_is_priced_with_its_base() -> None:
    wrapped = _config(algorithm={"name": "pa3fed", "base": "moon"})
    assert declared_cost(wrapped) == declared_cost(_config(algorithm={"name": "moon"}))


def test_the_soft_label_protocol_prices_its_public_set_and_server_model() -> None:
    # DS-FL, |P^t| = 50 of |P| = 100: a client distils 2 epochs on 50 samples and labels 50 (0.5 each): 125 samples,
    # ceil(125 / 100) = 2 steps a round; the server trains its model 1 epoch (client.epochs) on 50: 50 samples, 1 step.
    dsfl = _config(distillation={"method": "dsfl", "public_size": 100, "subset_size": 50, "distill_epochs": 2})
    assert declared_cost(dsfl) == Cost(public_samples=125.0, server_samples=50.0)
    public = 3 * (1 * 125 + 50)  # 3 rounds, 1 client a round; the clients' own rows as without a public set (an estimate)
    _close(dsfl, _minutes(STEPS + 3 * (2 + 1), SAMPLES + public))


def test_a_prototype_method_prices_its_forward_and_test_passes() -> None:
    # FedProto keeps the models with the clients: the server measures each model kept so far on the test set, by its head
    # and by nearest prototype from that one pass, and runs no global model's pass. N = 2 clients, m = 1 a round: 2 (1 - (1/2)^t)
    # clients have trained by round t, 1, 1.5 and 1.75 in rounds 1-3: 4.25 passes in all, 4.25 / 3 - 1 = 5/12
    # further passes a round; and a forward over each client's rows (FORWARD of an epoch).
    proto = _config(prototypes={"method": "fedproto"})
    assert declared_cost(proto) == Cost(epochs=FORWARD, test_passes=pytest.approx(5 / 12, rel=1e-12))
    _close(proto, _minutes(1.5 * STEPS, 1.5 * SAMPLES, 4.25 * 359))


def test_prototype_test_passes_follow_the_evaluated_rounds_and_rows() -> None:
    # eval.every = 2 of 3 rounds: rounds 2 and 3 evaluate (and the last), 1.5 + 1.75 = 3.25 models, a pass each over 0.8
    # of the 359 test rows (eval.validation = 0.2 holds the rest out): 2.6 passes of the whole set; 2.6 / 2 - 1 = 0.3 a round.
    proto = _config(prototypes={"method": "fedproto"}, eval={"every": 2, "validation": 0.2})
    assert declared_cost(proto) == Cost(epochs=FORWARD, test_passes=pytest.approx(0.3, rel=1e-12))
    _close(proto, _minutes(1.5 * STEPS, 1.5 * SAMPLES, 2.6 * 359))
    # FedAvg evaluates the global model on those 2 rounds only: 2 x 359 rows.
    _close(_config(eval={"every": 2}), _minutes(STEPS, SAMPLES, 2 * 359))
    # Models shared (FedHKD's default): the global model's pass (the estimate's own, all 359 rows with the validation
    # split), whose test rows also give its accuracy by nearest prototype: no further pass, on rounds 2 and 3.
    shared = _config(prototypes={"method": "fedhkd"}, eval={"every": 2, "validation": 0.2})
    assert declared_cost(shared) == Cost(epochs=FORWARD)
    _close(shared, _minutes(1.5 * STEPS, 1.5 * SAMPLES, 2 * 359))


def test_evaluated_rounds_are_every_kth_and_the_last() -> None:
    # every = 3 of 10: 3, 6, 9 and the last, 10; of 9: 3, 6, 9 (the last already one); every = 1: each round.
    assert EvalConfig(every=3).evaluated_rounds(10) == [3, 6, 9, 10]
    assert EvalConfig(every=3).evaluated_rounds(9) == [3, 6, 9]
    assert EvalConfig(every=5).evaluated_rounds(2) == [2]
    assert EvalConfig().evaluated_rounds(3) == [1, 2, 3]
    assert [t for t in range(1, 11) if EvalConfig(every=3).due(t, 10)] == [3, 6, 9, 10]


def test_a_comparison_prices_each_run_with_its_own_method(tmp_path: Path) -> None:
    config = config_from_dict({**BASE, "out_dir": str(tmp_path), "compare": {"baseline": "FedAvg"},
                               "variants": {"FedAvg": {}, "FedSAM": {"client": {"sam_rho": 0.05}}}})
    _close(config, _minutes(STEPS, SAMPLES) + _minutes(2 * STEPS, 2 * SAMPLES))
    gpu, fedavg, sam = estimate_gpu_minutes(config), estimate_gpu_minutes(_config()), estimate_gpu_minutes(_config(client={"sam_rho": 0.05}))
    assert gpu is not None and fedavg is not None and sam is not None
    assert math.isclose(gpu[0], fedavg[0] + sam[0], rel_tol=1e-12) and math.isclose(gpu[1], fedavg[1] + sam[1], rel_tol=1e-12)


PUBLIC_PLUGIN = '''
from dataclasses import dataclass
from chillfl.extend import AlgorithmSpec, Capabilities, Cost, FedAvg


@dataclass(frozen=True)
class Options:
    pass


SPEC = AlgorithmSpec(Options, lambda o, ctx: (FedAvg(), []), "declares work over a public set", capabilities=Capabilities(cost=Cost(first_public_pair_flops=5.0)))
'''

PLUGIN = '''
from dataclasses import dataclass
from chillfl.extend import AlgorithmSpec, Capabilities, Cost, FedAvg


@dataclass(frozen=True)
class Options:
    passes: float = 3.0


SPEC = AlgorithmSpec(Options, lambda o, ctx: (FedAvg(), []), "a plugin that declares its cost",
                     capabilities_of=lambda o: Capabilities(takes_weights=True, cost=Cost(step_passes=o.passes, server_steps=10)))
'''


def test_a_plugin_declares_its_cost_through_its_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install(tmp_path, monkeypatch, "costly_rule", PLUGIN)
    config = _config(algorithm={"name": "costly_rule:SPEC", "passes": 2.5})
    assert declared_cost(config) == Cost(step_passes=2.5, server_steps=10)
    _close(config, _minutes(2.5 * STEPS + 3 * 10, 2.5 * SAMPLES))  # 10 server steps a round, at the step overhead alone


def test_costs_add_their_extras() -> None:
    a = Cost(step_passes=2.0, trainings=2.0, epochs=1.0, public_samples=10, server_samples=5, server_steps=3, test_passes=1, pass_overhead=0.5)
    a = replace(a, extra_pass_overhead=0.6, steps=1, first_epochs=2, first_pair_flops=8, step_parameter_flops=36, client_server_steps=20)
    a = replace(a, class_server_steps=0.07, server_parameter_flops=100, round_server_parameter_flops=2, first_public_pair_flops=3.6)
    a = replace(a, pair_server_steps=0.5, class_pair_server_steps=0.25)
    b = Cost(step_passes=1.5, epochs=0.5, test_passes=2, pass_overhead=0.25, steps=4, first_pair_flops=2, client_server_steps=2.4)
    b = replace(b, round_server_parameter_flops=3, first_public_pair_flops=1.4, pair_server_steps=0.25, class_pair_server_steps=0.5)
    total = Cost(step_passes=2.5, trainings=2.0, epochs=1.5, public_samples=10, server_samples=5, server_steps=3, test_passes=3, pass_overhead=0.75)
    total = replace(total, extra_pass_overhead=0.6, steps=5, first_epochs=2, first_pair_flops=10, step_parameter_flops=36, client_server_steps=22.4)
    total = replace(total, class_server_steps=0.07, server_parameter_flops=100, round_server_parameter_flops=5, first_public_pair_flops=5.0)
    assert a.plus(b) == replace(total, pair_server_steps=0.75, class_pair_server_steps=0.75)
    assert Cost().plus(Cost()) == Cost()
    assert Capabilities(cost=b).wrapping(Capabilities(cost=a)).cost == a.plus(b)


def test_two_models_trained_a_step_are_two_passes() -> None:
    # APFL: each step a forward + backward of w (f_i(w)) and of v_bar (f_i(v_bar)); FML: of the meme and the local model.
    for name in ("apfl", "fml"):
        config = _config(algorithm={"name": name})
        assert declared_cost(config) == Cost(step_passes=2.0), name
        _close(config, _minutes(2 * STEPS, 2 * SAMPLES))


def test_pfedme_takes_its_inner_steps_on_every_batch() -> None:
    # Each of the 24 batches is the inner problem's K steps, one job: K = 5 (the default) -> 5 x 24 = 120 passes, each with
    # the proximal term's 0.6 steps' overhead (72), and 24 jobs' set-up at 1 step each (24): 120 passes + 96 overheads.
    assert declared_cost(_config(algorithm={"name": "pfedme"})) == Cost(step_passes=5.0, pass_overhead=PARAMETER_TERM + ONE_BATCH_JOB / 5)
    _close(_config(algorithm={"name": "pfedme"}), _minutes(5 * STEPS, 5 * SAMPLES, overhead=5 * STEPS * 0.6 + STEPS * 1.0))
    # K = 3: 72 passes, 43.2 + 24 overheads.
    _close(_config(algorithm={"name": "pfedme", "inner_steps": 3}), _minutes(3 * STEPS, 3 * SAMPLES, overhead=3 * STEPS * 0.6 + STEPS * 1.0))


def test_head_epochs_body_frozen_are_priced_as_forward_epochs() -> None:
    # FedRep: head_epochs = 10 (default) epochs of the head alone, each a forward (0.5 of a pass): 1 + 10 x 0.5 = 6 epochs.
    _close(_config(algorithm={"name": "fedrep"}), _minutes(6 * STEPS, 6 * SAMPLES))
    _close(_config(algorithm={"name": "fedrep", "head_epochs": 2}), _minutes(2 * STEPS, 2 * SAMPLES))  # 1 + 2 x 0.5
    # FedPAC: head_epochs = 1 (0.5) and two forwards over the rows (statistics before, class means after): 1 + 3 x 0.5 = 2.5.
    # and its server's QP for each sampled client, qp_steps = 2000 iterations of 0.01 steps' overhead: 3 rounds x 1 client x 20.
    _close(_config(algorithm={"name": "fedpac"}), _minutes(2.5 * STEPS, 2.5 * SAMPLES, host=3 * 20 * STEP_S))
    _close(_config(algorithm={"name": "fedpac", "qp_steps": 500}), _minutes(2.5 * STEPS, 2.5 * SAMPLES, host=3 * 5 * STEP_S))


def test_fedbabu_prices_its_fine_tuning() -> None:
    # finetune_epochs = 5 (default), the whole model: 1 + 5 = 6 epochs; the head alone, 4 epochs: 1 + 4 x 0.5 = 3.
    _close(_config(algorithm={"name": "fedbabu"}), _minutes(6 * STEPS, 6 * SAMPLES))
    _close(_config(algorithm={"name": "fedbabu", "finetune": "head", "finetune_epochs": 4}), _minutes(3 * STEPS, 3 * SAMPLES))
    _close(_config(algorithm={"name": "fedbabu", "finetune_epochs": 0}), _minutes(STEPS, SAMPLES))


def test_forwards_over_the_rows_before_training_add_forward_epochs() -> None:
    # IFCA, k = 3: each cluster model forward over the rows to choose one: 1 + 3 x 0.5 = 2.5 epochs; k = 1 chooses nothing.
    _close(_config(algorithm={"name": "ifca", "clusters": 3}), _minutes(2.5 * STEPS, 2.5 * SAMPLES))
    assert declared_cost(_config(algorithm={"name": "ifca", "clusters": 1})) == Cost()
    # q-FFL: F_k, the received model's forward over the rows: 1 + 0.5 epochs.
    _close(_config(algorithm={"name": "qffl"}), _minutes(1.5 * STEPS, 1.5 * SAMPLES))


def test_ccvr_prices_its_statistics_and_calibration_when_it_calibrates_every_round() -> None:
    # Default: the last round's forward over the rows replaces that round's training: FedAvg's price (an upper bound).
    assert declared_cost(_config(algorithm={"name": "ccvr"})) == Cost()
    # every_round: the received model's forward over the rows (1 + 0.5 epochs) and calibration_steps head steps a round
    # on the server, priced at a step's overhead: 3 rounds x 100.
    _close(_config(algorithm={"name": "ccvr", "every_round": True}), _minutes(1.5 * STEPS + 3 * 100, 1.5 * SAMPLES))
    _close(_config(algorithm={"name": "ccvr", "every_round": True, "calibration_steps": 10}), _minutes(1.5 * STEPS + 3 * 10, 1.5 * SAMPLES))


def test_fedfomo_trains_on_the_rows_outside_its_validation_split() -> None:
    # val_ratio 0.2, m = 5: training on 0.8 of the rows, and 6 models (its own and the 5 sent) forward over the 0.2:
    # 0.8 + 6 x 0.2 x 0.5 = 1.4 epochs.
    assert declared_cost(_config(algorithm={"name": "fedfomo"})) == Cost(trainings=0.8, epochs=(5 + 1) * 0.2 * FORWARD)
    _close(_config(algorithm={"name": "fedfomo"}), _minutes(1.4 * STEPS, 1.4 * SAMPLES))


def test_fedala_prices_the_ala_epoch_over_its_random_share() -> None:
    # rand_percent = 80: an ALA epoch over 80 % of the rows before each training: 1 + 0.8 epochs a round (24 x 1.8 = 43.2
    # steps); and the first ALA, num_pre_loss = 10 epochs more once a client: N (1 - (1 - m/N)^R) = 2 (1 - 0.5^3) = 1.75
    # clients expected, 1.75 x 10 x 0.8 = 14 epochs of ceil(719 / 100) = 8 steps (112) over 14 x 719 rows.
    assert declared_cost(_config(algorithm={"name": "fedala"})) == Cost(epochs=0.8, first_epochs=8.0)
    _close(_config(algorithm={"name": "fedala"}), _minutes(1.8 * STEPS + 112, 1.8 * SAMPLES + 14 * 719))
    # rand_percent = 50, num_pre_loss = 4: 24 x 1.5 = 36 steps; 1.75 x 4 x 0.5 = 3.5 epochs once: 28 steps over 3.5 x 719 rows.
    _close(_config(algorithm={"name": "fedala", "rand_percent": 50, "num_pre_loss": 4}), _minutes(1.5 * STEPS + 28, 1.5 * SAMPLES + 3.5 * 719))


def test_fedphp_runs_its_inherited_model_forward_a_step() -> None:
    _close(_config(algorithm={"name": "fedphp"}), _minutes(1.5 * STEPS, 1.5 * SAMPLES))  # h_k's forward: 1 + 0.5 passes


def test_perfedavg_takes_a_one_batch_job_a_gradient() -> None:
    # FO: 24 // 2 = 12 steps of 2 one-batch gradients, the 24 batches once as FedAvg, but 24 jobs (1 step's overhead each);
    # then adapt_steps = 1 (default) one-batch step of the personalised model a client-round, a job too: 3 rounds x 1 client.
    assert declared_cost(_config(algorithm={"name": "perfedavg"})) == Cost(pass_overhead=ONE_BATCH_JOB, steps=1.0)
    _close(_config(algorithm={"name": "perfedavg"}), _minutes(STEPS + 3, SAMPLES + 3 * 100, overhead=(STEPS + 3) * 1.0))
    # HF: 8 steps of 4 gradients: 32 = 24 x 4/3 passes, 32 jobs; and the 3 adapt steps (not 4/3 each): 35 passes, 35 jobs.
    _close(_config(algorithm={"name": "perfedavg", "variant": "hf"}), _minutes(32 + 3, 4 / 3 * SAMPLES + 300, overhead=35 * 1.0))
    # adapt_steps = 5: 5 a client-round, 15 passes of 100 rows; adapt_steps = 0: none.
    _close(_config(algorithm={"name": "perfedavg", "adapt_steps": 5}), _minutes(STEPS + 15, SAMPLES + 1500, overhead=(STEPS + 15) * 1.0))
    _close(_config(algorithm={"name": "perfedavg", "adapt_steps": 0}), _minutes(STEPS, SAMPLES, overhead=STEPS * 1.0))


def test_scaffold_and_feddyn_price_their_terms_on_the_parameters() -> None:
    # SCAFFOLD option II: the correction term on each of the 24 passes, 0.4 steps' overhead each (CORRECTION_TERM): 9.6
    # overheads, FedAvg's FLOPs. Option I: + g_i(x) over the rows, an epoch: 48 passes, 19.2.
    assert declared_cost(_config(algorithm={"name": "scaffold"})) == Cost(pass_overhead=0.4)
    _close(_config(algorithm={"name": "scaffold"}), _minutes(STEPS, SAMPLES, overhead=24 * 0.4))
    _close(_config(algorithm={"name": "scaffold", "option": "I"}), _minutes(2 * STEPS, 2 * SAMPLES, overhead=48 * 0.4))
    # VRL-SGD: the same correction term (with its Delta_i): 9.6 overheads.
    assert declared_cost(_config(algorithm={"name": "vrl_sgd"})) == Cost(pass_overhead=0.4)
    _close(_config(algorithm={"name": "vrl_sgd"}), _minutes(STEPS, SAMPLES, overhead=24 * 0.4))
    # FedDyn: its linear term and its proximal term, 0.4 + 0.6 a pass: 24 x 1.0 = 24 overheads.
    assert declared_cost(_config(algorithm={"name": "feddyn"})) == Cost(pass_overhead=0.4 + PARAMETER_TERM)
    _close(_config(algorithm={"name": "feddyn"}), _minutes(STEPS, SAMPLES, overhead=24 * 1.0))


def test_apple_prices_its_mixture_per_parameter_and_client() -> None:
    # Each of the 24 passes mixes the N = 2 core models: 36 FLOPs x 4,810 parameters (the MLP: 64 x 64 + 64 + 64 x 10 + 10)
    # x 2 clients = 346,320 FLOPs a pass, 8,311,680 in all; and the calls a parameter tensor, 0.6 a pass: 14.4 overheads.
    _close(_config(algorithm={"name": "apple"}), _minutes(STEPS, SAMPLES, overhead=24 * 0.6, more_flops=24 * 36 * 4810 * 2))
    # N = 4 clients (still 1 a round) of 1,438 / 4 = 359.5 rows: ceil(359.5 / 100) = 4 steps a round, 12 passes over 3 x 359.5
    # rows, each mixing 4 models: 36 x 4,810 x 4 = 692,640 FLOPs a pass. The mixture's FLOPs grow with N, the model's with the rows.
    four = _config(algorithm={"name": "apple"}, federation={"num_clients": 4})
    w = work(four)
    assert w is not None and w.client_steps == 12 and math.isclose(w.overhead_steps, 12 * 0.6)
    flops = _forward_flops(_config())
    assert flops is not None and math.isclose(w.flops, (3 * 3 * 359.5 + TEST) * flops + 12 * 36 * 4810 * 4, rel_tol=1e-12)


def test_pfedhn_prices_its_hypernetwork_on_the_host() -> None:
    # For each sampled client (3 rounds x 1): 2.4 steps' overheads and 88 x hidden (100) x 4,810 parameters FLOPs at 11
    # GFLOP/s: 3 x 42,328,000 FLOPs; once a round the global model, 2 x 100 x 4,810 = 962,000 FLOPs, 3 x; the local
    # training is FedAvg's.
    host = 3 * 2.4 * STEP_S + 3 * 88 * 100 * 4810 / SMALL_FLOPS + 3 * 2 * 100 * 4810 / SMALL_FLOPS
    declared = Cost(client_server_steps=2.4, server_parameter_flops=8800.0, round_server_parameter_flops=200.0)
    assert declared_cost(_config(algorithm={"name": "pfedhn"})) == declared
    _close(_config(algorithm={"name": "pfedhn"}), _minutes(STEPS, SAMPLES, host=host))
    half = 3 * 2.4 * STEP_S + 3 * (88 + 2) * 50 * 4810 / SMALL_FLOPS  # hidden = 50: both FLOP counts halved
    _close(_config(algorithm={"name": "pfedhn", "hidden": 50}), _minutes(STEPS, SAMPLES, host=half))
    # The host work runs on the host in a GPU run too: both GPU ends are FedAvg's plus it.
    gpu, fedavg = estimate_gpu_minutes(_config(algorithm={"name": "pfedhn"})), estimate_gpu_minutes(_config())
    assert gpu is not None and fedavg is not None
    assert math.isclose(gpu[0], fedavg[0] + host / 60, rel_tol=1e-12) and math.isclose(gpu[1], fedavg[1] + host / 60, rel_tol=1e-12)


def test_fedgh_prices_its_header_steps_per_class() -> None:
    # The protocol's cost (a forward epoch) with one test pass a kept model, as every prototype method's:
    # 1 + 1.5 + 1.75 = 4.25 passes in all, 4.25 / 3 - 1 = 5/12 further a round
    # (test_a_prototype_method_prices_...). For each sampled client's class (10, all priced), server_epochs /
    # server_batch_size header steps of 0.07 steps' overhead: 3 rounds x 1 client x 10 x 0.07 = 2.1.
    fedgh = _config(prototypes={"method": "fedgh"})
    assert declared_cost(fedgh) == Cost(epochs=FORWARD, test_passes=pytest.approx(5 / 12, rel=1e-12), class_server_steps=0.07)
    _close(fedgh, _minutes(1.5 * STEPS, 1.5 * SAMPLES, 4.25 * 359, host=3 * 10 * 0.07 * STEP_S))
    # server_epochs = 20 in steps of 4 pairs: 5 steps a pair, 0.35 each class: 3 x 10 x 0.35 = 10.5.
    many = _config(prototypes={"method": "fedgh", "server_epochs": 20, "server_batch_size": 4})
    _close(many, _minutes(1.5 * STEPS, 1.5 * SAMPLES, 4.25 * 359, host=3 * 10 * 0.35 * STEP_S))


def test_a_one_off_fit_over_the_rows_is_priced_per_pair_of_rows() -> None:
    # PACFL: each client's signature once, 2 FLOPs a pair of its rows and a feature (per label): 1.75 clients expected x
    # 2 x 719^2 x 64 (8x8 digits) FLOPs at 50 GFLOP/s; all the rows at once: 31 instead of 2. The server's angles, 2.6e-4 x
    # p^2 (9) = 0.00234 steps' overheads a pair of blocks, for 1.75^2 = 3.0625 pairs of clients: per label, 10 x 10 pairs of
    # blocks a pair of clients (every class priced), 0.716625 steps; of all the rows, one, 0.00716625.
    once = 1.75 * 719**2 * 64 / CPU_FLOPS
    angles = 3.0625 * 0.00234
    assert declared_cost(_config(algorithm={"name": "pacfl"})) == Cost(first_pair_flops=2.0, class_pair_server_steps=pytest.approx(0.00234, rel=1e-12))
    _close(_config(algorithm={"name": "pacfl"}), _minutes(STEPS, SAMPLES, host=2 * once + 100 * angles * STEP_S))
    _close(_config(algorithm={"name": "pacfl", "signature": "all"}), _minutes(STEPS, SAMPLES, host=31 * once + angles * STEP_S))
    # p = 1: a ninth of the angles' work.
    _close(_config(algorithm={"name": "pacfl", "p": 1}), _minutes(STEPS, SAMPLES, host=2 * once + 100 * angles / 9 * STEP_S))
    # Selective-FD: its KuLSIF fit, 8 a pair and feature, on DS-FL's public-set work (test_the_soft_label_protocol_...), and
    # its scoring of the public set, 3.6 FLOPs a pair of one of its 719 rows and one of |P| = 100 samples and a feature:
    # 1.75 x 3.6 x 719 x 100 x 64 FLOPs at 50 GFLOP/s.
    sfd = _config(distillation={"method": "selective_fd", "public_size": 100, "subset_size": 50, "distill_epochs": 2})
    assert declared_cost(sfd) == Cost(public_samples=125.0, server_samples=50.0, first_pair_flops=8.0, first_public_pair_flops=3.6)
    scoring = 1.75 * 3.6 * 719 * 100 * 64 / CPU_FLOPS
    _close(sfd, _minutes(STEPS + 3 * (2 + 1), SAMPLES + 3 * (125 + 50), host=8 * once + scoring))


def test_work_over_a_public_set_is_none_without_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A plugin declaring work over the public set, in a run with none (parameter sharing): priced as FedAvg.
    install(tmp_path, monkeypatch, "public_cost_plugin", PUBLIC_PLUGIN)
    run = _config(algorithm={"name": "public_cost_plugin:SPEC"})
    assert declared_cost(run) == Cost(first_public_pair_flops=5.0)
    _close(run, _minutes(STEPS, SAMPLES))


def test_a_declared_pretraining_is_spread_over_the_rounds() -> None:
    # FedMD, transfer_epochs = 4 on |P| = 100: 400 samples at a client's first participation and once for the server model.
    # N = 2 clients, m = 1 a round, R = 3: 2 (1 - (1 - 1/2)^3) = 1.75 clients expected to take part, 1.75 x 400 / (3 x 1)
    # = 233.33 samples a client-round on top of DS-FL's 125 (2 x 50 distilled + 0.5 x 50 labelled); the server 400 / 3 =
    # 133.33 a round on top of its 50. Steps a round: ceil(358.33 / 100) = 4 and ceil(183.33 / 100) = 2.
    fedmd = _config(distillation={"method": "fedmd", "public_size": 100, "subset_size": 50, "distill_epochs": 2, "transfer_epochs": 4})
    cost = declared_cost(fedmd)
    assert math.isclose(cost.public_samples, 125 + 1.75 * 400 / 3) and math.isclose(cost.server_samples, 50 + 400 / 3)
    _close(fedmd, _minutes(STEPS + 3 * (4 + 2), SAMPLES + 3 * (125 + 1.75 * 400 / 3 + 50 + 400 / 3)))
    none = _config(distillation={"method": "fedmd", "public_size": 100, "subset_size": 50, "distill_epochs": 2, "transfer_epochs": 0})
    assert declared_cost(none) == Cost(public_samples=125.0, server_samples=50.0)  # DS-FL's, as test_the_soft_label_protocol...


def test_a_proximal_term_adds_overhead_but_no_flops() -> None:
    # FedProx: 24 steps, each with the term over every parameter tensor, 0.6 of a step's overhead: 24 + 14.4 steps' overheads,
    # FedAvg's FLOPs. The same term from [objective] (proximal_mu) on FedAvg, and FedAMP's term to its cloud models.
    for config in (_config(algorithm={"name": "fedprox"}), _config(objective={"proximal_mu": 0.01}), _config(algorithm={"name": "fedamp"})):
        assert declared_cost(config) == Cost(pass_overhead=0.6)
        _close(config, _minutes(STEPS, SAMPLES, overhead=24 * 0.6))
    # With sharpness-aware steps each of the 2 passes computes the term: 48 passes + 28.8 overheads.
    _close(_config(algorithm={"name": "fedprox"}, client={"sam_rho": 0.05}), _minutes(2 * STEPS, 2 * SAMPLES, overhead=48 * 0.6))


def test_fedalign_prices_its_reduced_final_stage_as_a_forward() -> None:
    # The final stage again at reduced width, forward + backward, and the power iterations: 1 + 0.5 passes a step.
    # (declared_cost reads the spec's options only: the model, which FedAlign's build checks, is not built.)
    config = _config(algorithm={"name": "fedalign"})
    assert declared_cost(config) == Cost(step_passes=1.5)
    _close(config, _minutes(1.5 * STEPS, 1.5 * SAMPLES))


def test_dp_sgd_prices_its_per_sample_step_as_overhead() -> None:
    # [privacy] mechanism = "dp-sgd": each of the 24 steps from clipped per-sample gradients, 8.5 steps' overheads more
    # (measured: a per-step cost, alike for an MLP and a CNN), the FLOPs a plain step's: 24 + 204 steps' overheads.
    config = _config(privacy={"mechanism": "dp-sgd", "clip_norm": 1.0, "noise_multiplier": 1.0})
    assert declared_cost(config) == Cost(pass_overhead=8.5)
    _close(config, _minutes(STEPS, SAMPLES, overhead=24 * 8.5))
    # A mechanism that noises the uploads alone declares nothing: priced as FedAvg.
    assert declared_cost(_config(privacy={"mechanism": "dp-fedavg", "clip_norm": 1.0, "noise_multiplier": 1.0})) == Cost()


def test_a_pass_overhead_is_priced_on_the_cpu_only() -> None:
    # Measured on the CPU alone: the GPU estimate of FedProx is FedAvg's (24 client steps at 0.064 ms either way).
    fedprox, fedavg = work(_config(algorithm={"name": "fedprox"})), work(_config())
    assert fedprox is not None and fedavg is not None
    assert fedprox.client_steps == fedavg.client_steps == STEPS and fedprox.overhead_steps == 24 * 0.6
    assert estimate_gpu_minutes(_config(algorithm={"name": "fedprox"})) == estimate_gpu_minutes(_config())
