"""The soft-label protocol end to end: DS-FL, SCARLET, CFD, COMET, Selective-FD, individual.

Hand-worked values are in the comments. The runs are tiny (digits, 4 clients,
a 120-image public pool, |P^t| = 40) so the whole file stays well under 30 s.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from chillfl.cli import main
from chillfl.config import load_config
from chillfl.protocols.softlabels import CacheOutOfSyncError, CacheSyncDelta, ServerCache, SoftLabelUplink
from chillfl.protocols.softlabels import NoState, make_client_half, make_method
from chillfl.protocols.softlabels import ClientState, ClientStore, soft_target_kl
from chillfl.runner import rounds_for, run_experiment
from chillfl.experiment import build_data, build_experiment
from chillfl.errors import ConfigError
from chillfl.experiments import bundled_experiments, resolve_config
from chillfl.metrics.communication import bytes_to_reach, communication_summary
from chillfl.sweeps.plan import apply_variant, variants_from_config
from chillfl.sweeps.run import run_compare
from chillfl.settings.distillation import parse_distillation

from float_paths import assert_records_close
from lent_pools import pools

K, N_PUB, N_SUB, C = 4, 120, 40, 10


pytestmark = pytest.mark.usefixtures("one_thread")


def tiny(method: str = "scarlet", **extra) -> dict:
    """Overrides for a tiny run of ``method``."""
    over = {
        "dataset.name": "digits",
        "partition.name": "dirichlet",
        "partition.alpha": 0.3,
        "model.name": "flexchill_cnn",
        "federation.num_clients": K,
        "federation.rounds": 3,
        "client.epochs": 1,
        "client.batch_size": 32,
        "client.lr": 0.05,
        "eval.client_split_size": 20,
        "distillation.method": method,
        "distillation.public_size": N_PUB,
        "distillation.subset_size": N_SUB,
        "distillation.server_epochs": 1,
        "distillation.distill_batch_size": 32,
    }
    over.update({k if "." in k else f"distillation.{k}": v for k, v in extra.items()})
    return over


def run(method: str = "scarlet", **extra) -> list[dict]:
    cfg = load_config(None, tiny(method, **extra))
    return run_experiment(cfg, write=False, progress=False).records


def test_distillation_table_is_parsed_once_per_config(monkeypatch):
    """[distillation] is parsed when the config is validated, and only then: building and running read ``config.distillation_setup``."""
    from chillfl.settings import distillation as settings

    made: list[str] = []
    real = settings.DistillationSetup

    def counted(common, options):
        made.append(common.method)
        return real(common, options)

    monkeypatch.setattr(settings, "DistillationSetup", counted)  # parse_distillation builds every setup through this name
    cfg = load_config(None, tiny("scarlet", **{"federation.rounds": 1}))
    assert made == ["scarlet"] and isinstance(cfg.distillation_setup, real)
    exp = build_experiment(cfg)
    records = list(rounds_for(exp)(exp))
    assert len(records) == 1
    assert made == ["scarlet"], f"[distillation] parsed again while building and running: {made}"
    assert cfg.distillation_setup is cfg.distillation_setup


def test_every_built_in_method_is_registered_once_by_its_modules_spec():
    """A built-in's name is its module's; the module's SPEC (loaded like a plugin's) names the same method."""
    import importlib

    from chillfl.protocols.softlabels import SoftLabelSpec
    from chillfl.settings.distillation import built_in_names, method_names, method_settings

    assert set(built_in_names()) <= set(method_names()) and "scarlet" in built_in_names()
    for name in built_in_names():
        spec = importlib.import_module(f"chillfl.distillation.methods.{name}").SPEC
        assert isinstance(spec, SoftLabelSpec) and spec.name == name and method_settings(name) is spec


# ---------------------------------------------------------------- formulas


def test_soft_target_kl_value_and_gradient():
    # z = [0, ln 3] -> softmax = [1/4, 3/4]; target [1/2, 1/2]:
    # KL = 1/2 ln(2) + 1/2 ln(2/3) = 1/2 ln(4/3) = 0.1438410; dKL/dz = softmax - target = [-1/4, 1/4]
    z = torch.tensor([[0.0, math.log(3.0)]], requires_grad=True)
    loss = soft_target_kl(z, torch.tensor([[0.5, 0.5]]))
    loss.backward()
    assert float(loss.detach()) == pytest.approx(0.5 * math.log(4 / 3), abs=1e-6)
    assert z.grad.tolist()[0] == pytest.approx([-0.25, 0.25], abs=1e-6)
    # a one-hot target (zeros allowed): KL([1, 0] || [1/4, 3/4]) = ln 4
    assert float(soft_target_kl(z.detach(), torch.tensor([[1.0, 0.0]]))) == pytest.approx(math.log(4.0), abs=1e-6)


def uplinks(values: list[list[list[float]]], indices: list[list[int]] | None = None) -> list[SoftLabelUplink]:
    out = []
    for k, rows in enumerate(values):
        idx = torch.tensor(indices[k] if indices else list(range(len(rows))), dtype=torch.long)
        out.append(SoftLabelUplink(k, 1, idx, torch.tensor(rows, dtype=torch.float32).reshape(len(idx), -1)))
    return out


def method_for(name: str, **options):
    setup = parse_distillation({"method": name, "public_size": 10, "subset_size": 2, **options})
    return make_method(setup, 2, 0)


def client_for(name: str, **options):
    setup = parse_distillation({"method": name, "public_size": 10, "subset_size": 2, **options})
    return make_client_half(setup, 2, 0)


def test_aggregation_rules_on_hand_values():
    # two clients, one public sample: z1 = [0.8, 0.2], z2 = [0.4, 0.6] -> zbar = [0.6, 0.4]
    ups = uplinks([[[0.8, 0.2]], [[0.4, 0.6]]])
    idx = torch.tensor([0])
    # DS-FL, ERA (Eq. 2), T = 0.1: softmax([6, 4]) = [1, e^-2] / (1 + e^-2) = [0.8807971, 0.1192029]
    rows = method_for("dsfl", temperature=0.1).aggregate(1, idx, ups).rows
    assert rows[0].tolist() == pytest.approx([0.8807971, 0.1192029], abs=1e-6)
    # SCARLET, Enhanced ERA (Eq. 4), beta = 2: [0.36, 0.16] / 0.52 = [0.6923077, 0.3076923]
    rows = method_for("scarlet", beta=2.0).aggregate(1, idx, ups).rows
    assert rows[0].tolist() == pytest.approx([0.6923077, 0.3076923], abs=1e-6)
    # beta = 1 is the plain mean
    assert method_for("scarlet", beta=1.0).aggregate(1, idx, ups).rows[0].tolist() == pytest.approx([0.6, 0.4], abs=1e-6)
    # CFD, 1 bit per element (code = floor(x + 1/2)): z1 -> [1, 0], z2 -> [0, 1]; mean [0.5, 0.5]; b_down = 32
    cfd = method_for("cfd")
    sent = [client_for("cfd").upload(k, 1, idx, u.soft_labels, NoState()) for k, u in enumerate(ups)]
    assert sent[0].soft_labels.tolist() == [[1.0, 0.0]] and sent[1].soft_labels.tolist() == [[0.0, 1.0]]
    assert cfd.uplink_bytes(sent[0]) == {"soft_labels": 1}  # 1 sample x 2 classes x 1 bit -> ceil(2 / 8) = 1 byte
    assert cfd.aggregate(1, idx, sent).rows[0].tolist() == [0.5, 0.5]
    # CFD with 2-bit delta coding (L = 3): [0.8, 0.2] -> codes [floor(2.9), floor(1.1)] = [2, 1], both changed
    # from the all-zero start: bitmap ceil(2/8) = 1 byte + 2 codes x 2 bits = 1 byte; resent unchanged: 1 + 0
    delta, delta_client = method_for("cfd", bits_up=2, delta_coding=True), client_for("cfd", bits_up=2, delta_coding=True)
    first = delta_client.upload(0, 1, idx, ups[0].soft_labels, NoState())
    assert first.soft_labels.tolist()[0] == pytest.approx([2 / 3, 1 / 3], abs=1e-6)
    assert delta.uplink_bytes(first) == {"soft_labels": 2}
    assert delta.uplink_bytes(delta_client.upload(0, 2, idx, ups[0].soft_labels, NoState())) == {"soft_labels": 1}


def test_cfd_server_downlink_on_hand_values():
    # downlink = "server": the server trains on the plain mean of the uploads (b_down applies to what goes down, not to
    # its target) and what goes down is its own prediction quantised to b_down bits. b_down = 2 (L = 3):
    # [0.1, 0.9] -> codes floor([0.8, 3.2]) = [0, 3] -> [0, 1]; [0.5, 0.5] -> floor(2.0) = 2 -> [2/3, 2/3]
    ups = uplinks([[[0.7, 0.3]], [[0.4, 0.6]]])
    idx = torch.tensor([0])
    cfd = method_for("cfd", bits_up=32, bits_down=2, downlink="server")
    assert cfd.downlink_from_server and cfd.separate_server_rows is False
    agg = cfd.aggregate(1, idx, ups)
    assert agg.server_rows[0].tolist() == pytest.approx([0.55, 0.45], abs=1e-6)  # not quantised to 2 bits ([2/3, 1/3])
    down = cfd.server_downlink(torch.tensor([[0.1, 0.9], [0.5, 0.5]]))
    assert torch.allclose(down, torch.tensor([[0.0, 1.0], [2 / 3, 2 / 3]]), atol=1e-6)
    # the default ("mean") sends the quantised mean: [0.55, 0.45] -> floor([2.15, 1.85]) = [2, 1] -> [2/3, 1/3]
    mean = method_for("cfd", bits_up=32, bits_down=2)
    assert not mean.downlink_from_server
    assert mean.aggregate(1, idx, ups).rows[0].tolist() == pytest.approx([2 / 3, 1 / 3], abs=1e-6)


@pytest.mark.parametrize("cache", [0, 2])
def test_cfd_server_downlink_sends_the_trained_server_models_predictions(monkeypatch, cache):
    """CFD's two-way distillation (``downlink = "server"``): the fresh rows every client distils towards in round t + 1
    are the server model's softmax outputs on P^t after its round-t distillation (b_down = 32: unquantised); with the
    cache, a row served from it is the prediction of the round that cached it. Three rounds: the clients' rebuilt
    rows are checked against the server's (``sync_verified``)."""
    from chillfl.protocols.softlabels import predict_proba
    from chillfl.protocols.softlabels.messages import CacheSignal
    from chillfl.protocols.softlabels.server import SoftLabelProtocol

    seen = []
    real = SoftLabelProtocol._server_round

    def spy(self, t, ups):
        out = real(self, t, ups)
        b = out[0]
        seen.append((b, predict_proba(self.model, self.server_state, self.x_public[b.indices]), torch.stack([u.soft_labels for u in ups]).mean(dim=0)))
        return out

    monkeypatch.setattr(SoftLabelProtocol, "_server_round", spy)
    records = run("cfd", downlink="server", cache_duration=cache)
    first, probs, mean = seen[0]
    assert first.indices.numel() == N_SUB
    assert torch.allclose(first.rows, probs, atol=1e-5) and torch.allclose(first.downlink.soft_labels, probs, atol=1e-5)
    assert not torch.allclose(first.rows, mean, atol=1e-2)  # the "mean" downlink: the uploads' mean
    earlier = {int(i): row for i, row in zip(first.indices, first.rows)}
    second, probs, _ = seen[1]
    fresh = torch.ones(len(second.indices), dtype=torch.bool) if not cache else second.downlink.signals != CacheSignal.CACHED
    assert torch.allclose(second.rows[fresh], probs[fresh], atol=1e-5)
    assert torch.allclose(second.downlink.soft_labels, probs[fresh], atol=1e-5)
    for i, row, hit in zip(second.indices.tolist(), second.rows, (~fresh).tolist()):
        if hit:
            assert torch.equal(row, earlier[i])
    assert (not cache) or (bool((~fresh).any()) and records[-1]["sync_verified"] == K)


def test_selective_fd_masked_mean_and_server_selector():
    # samples 0 and 1; client 0 sends both, client 1 only sample 1:
    # sample 0 -> [0.9, 0.1] (one client); sample 1 -> mean([0.5, 0.5], [0.7, 0.3]) = [0.6, 0.4].
    # L1 distance to one-hot = 2 (1 - max p): 0.2 and 0.8; tau_server = 0.5 keeps only sample 0.
    ups = uplinks([[[0.9, 0.1], [0.5, 0.5]], [[0.7, 0.3]]], [[0, 1], [1]])
    agg = method_for("selective_fd", tau_server=0.5).aggregate(1, torch.tensor([0, 1]), ups)
    assert agg.keep.tolist() == [True, False]
    assert agg.rows.tolist() == [pytest.approx([0.9, 0.1], abs=1e-6)]
    agg = method_for("selective_fd", tau_server=2.0).aggregate(1, torch.tensor([0, 1]), ups)  # 2.0 disables it
    assert agg.keep.tolist() == [True, True] and agg.rows[1].tolist() == pytest.approx([0.6, 0.4], abs=1e-6)


def test_communication_summary_and_cost_to_target():
    records = [
        {"round": 1, "bytes_up": 60, "bytes_down": 40, "bytes_cumulative": 100, "global_acc": 0.5, "local_acc": 0.8},
        {"round": 2, "bytes_up": 90, "bytes_down": 60, "bytes_cumulative": 250, "global_acc": 0.8, "local_acc": 0.9},
    ]
    s = communication_summary(records, target=0.75)
    assert s == {"bytes_total": 250, "bytes_up_total": 150, "bytes_down_total": 100, "bytes_to_target": 250, "local_bytes_to_target": 100}
    assert bytes_to_reach(records, "global_acc", 0.9) is None


# ---------------------------------------------------------------- protocol runs


def test_dsfl_bytes_exact_and_scarlet_sends_fewer_with_verified_rebuilds(tmp_path):
    cfg = load_config(None, {**tiny("dsfl"), "federation.rounds": 4, "out_dir": str(tmp_path), "name": "dvs"})
    cfg = cfg.with_overrides(
        {
            "variants": {
                "DS-FL": {"distillation": dict(cfg.distillation)},
                "SCARLET": {"distillation": {**cfg.distillation, "method": "scarlet", "cache_duration": 3}},
            },
            "compare": {"reference": "DS-FL", "baseline": "DS-FL"},
        }
    )
    result = run_compare(cfg, [], progress=False)
    dsfl, scarlet = result.outputs["DS-FL"].records, result.outputs["SCARLET"].records
    # DS-FL, K = 4 clients, n = |P^t| = 40, C = 10, float32 soft-labels, int32 indices:
    #   up per round   = K * n * C * 4               = 6,400
    #   down round 1   = K * n * 4 (I^1)             =   640
    #   down round >=2 = K * (n*4 + n*4 + n*C*4)     = 7,680  (I^t, I^{t-1}, zhat^{t-1})
    assert [r["bytes_up"] for r in dsfl] == [6400] * 4
    assert [r["bytes_down"] for r in dsfl] == [640, 7680, 7680, 7680]
    assert dsfl[-1]["bytes_cumulative"] == 4 * 6400 + 640 + 3 * 7680
    # same data, seed, public draws and private training: round 1 (no distillation yet) is identical
    assert scarlet[0]["local_acc"] == dsfl[0]["local_acc"]
    for r in scarlet:
        assert r["bytes_detail"]["up.soft_labels"] == K * r["public_requested"] * C * 4
    assert [r["sync_verified"] for r in scarlet] == [0, K, K, K]  # every rebuild checked against the server
    assert all(r["bytes_detail"].get("down.sync", 0) == 0 for r in scarlet)  # full participation: nothing to catch up
    assert scarlet[-1]["bytes_cumulative"] < dsfl[-1]["bytes_cumulative"]
    assert all(0.0 <= r["global_acc"] <= 1.0 and r["server_acc"] == r["global_acc"] for r in scarlet)
    # compare table and Fig. 7 style plots
    assert "cumulative MB" in result.table and result.rows[1]["cumulative_mb"] == scarlet[-1]["bytes_cumulative"] / 1e6
    assert (result.folder / "accuracy_vs_bytes.png").is_file()
    assert (result.folder / "SCARLET" / "accuracy_vs_bytes.png").is_file()
    summary = json.loads((result.folder / "SCARLET" / "summary.json").read_text())
    assert summary["communication"]["bytes_total"] == scarlet[-1]["bytes_cumulative"]


def test_partial_participation_sync_counted_stores_identical(tmp_path):
    extra = {"cache_duration": 5, "federation.clients_per_round": 2, "federation.rounds": 5}
    memory = run("scarlet", client_store="memory", **extra)
    disk = run("scarlet", client_store="disk", state_dir=str(tmp_path), **extra)
    assert memory == disk  # bit-identical whichever store holds the client states
    assert list(tmp_path.iterdir()) == []  # the per-run state directory is removed
    # rounds >= 2: every sampled client rebuilt zhat^{t-1} and it matched the server's
    assert [r["sync_verified"] for r in memory] == [0] + [2] * 4
    sync = [r["bytes_detail"].get("down.sync", 0) for r in memory]
    assert sum(sync) > 0  # clients that missed rounds were sent the difference, and it was counted
    assert all(r["bytes_down"] >= s for r, s in zip(memory, sync))


def test_missing_catch_up_is_detected(monkeypatch):
    def no_delta(self, client_id, round):  # a server that forgets to send the difference
        self._synced[int(client_id)] = round
        empty = torch.zeros(0, dtype=torch.long)
        return CacheSyncDelta(int(client_id), round - 1, empty, torch.zeros((0, 0)), empty)

    monkeypatch.setattr(ServerCache, "sync", no_delta)
    with pytest.raises(CacheOutOfSyncError):
        run("scarlet", cache_duration=5, **{"federation.clients_per_round": 2, "federation.rounds": 5})


@pytest.mark.parametrize(
    "method, extra",
    [
        ("cfd", {}),
        ("comet", {}),
        ("comet", {"granularity": "sample", "cache_duration": 2}),
        ("selective_fd", {"kernel_width": 2.0, "cache_duration": 2}),
        ("individual", {}),
    ],
)
def test_other_methods_run(method, extra):
    records = run(method, **extra)
    assert [r["round"] for r in records] == [1, 2, 3]
    assert all(0.0 <= r["local_acc"] <= 1.0 for r in records)
    if method == "individual":
        assert all(r["bytes_cumulative"] == 0 and "global_acc" not in r for r in records)
        return
    assert all(0.0 <= r["global_acc"] <= 1.0 for r in records)
    if method == "cfd":  # 1 bit per element: ceil(40 * 10 / 8) = 50 bytes per client
        assert [r["bytes_up"] for r in records] == [K * 50] * 3
    if method == "comet":
        assert all(1 <= r["comet_clusters"] <= 2 for r in records)
    if "cache_duration" in extra:
        assert [r["sync_verified"] for r in records] == [0, K, K]
    if method == "selective_fd":
        assert all(0.0 <= r["selective_client_kept"] <= 1.0 for r in records)
        assert all(r["bytes_detail"]["up.indices"] > 0 for r in records)  # kept samples' indices travel up


def test_separate_public_dataset():
    over = {
        **tiny("scarlet"),
        "dataset.name": "mnist1d",
        "dataset.num_samples": 600,
        "model.name": "mlp",
        "federation.rounds": 2,
        "distillation.public_dataset": "mnist1d",
        "distillation.public_dataset_options": {"seed": 7, "num_samples": 400},
    }
    cfg = load_config(None, over)
    assert len(build_data(cfg).public_indices) == 0  # nothing carved from the private set
    records = run_experiment(cfg, write=False, progress=False).records
    assert records[-1]["public_drawn"] == N_SUB and 0.0 <= records[-1]["global_acc"] <= 1.0
    bad = load_config(None, {**over, "distillation.public_dataset": "digits", "distillation.public_dataset_options": {}})  # 1x8x8 vs 1x40
    with pytest.raises(ConfigError) as info:
        build_experiment(bad)
    assert info.value.field == "distillation.public_dataset"


def test_client_state_round_trip():
    from chillfl.distillation.methods.selective_fd import SelectorState

    state = ClientState({"w": torch.arange(3.0)}, None, SelectorState(torch.tensor([True, False])))
    store = ClientStore(on_disk=True)
    store.save(2, state)
    back = store.load(2)
    assert torch.equal(back.model["w"], state.model["w"]) and back.method is not None
    typed = client_for("selective_fd").resume(2, back.method, torch.zeros(0), torch.zeros(0))  # made typed again, not refitted
    assert isinstance(typed, SelectorState) and typed.in_distribution.tolist() == [True, False]
    assert store.load(3) is None
    root = store.root
    store.close()
    assert not root.exists()


@pytest.mark.parametrize(
    "extra, field",
    [
        ({"distillation.method": "fedmimic"}, "distillation.method"),  # not a method (fedmd now is one)
        ({"distillation.beta": 2.0, "distillation.method": "dsfl"}, "distillation.beta"),
        ({"distillation.subset_size": 500}, "distillation.public_size"),
        ({"distillation.method": "comet", "distillation.cache_duration": 5}, "distillation.cache_duration"),
        ({"distillation.method": "individual", "distillation.cache_duration": 5}, "distillation.cache_duration"),
        ({"distillation.method": "cfd", "distillation.delta_coding": True, "distillation.bits_up": 32}, "distillation.delta_coding"),
        ({"algorithm.name": "fedprox"}, "algorithm.name"),
    ],
)
def test_config_errors_name_the_field(extra, field):
    with pytest.raises(ConfigError) as info:
        build_experiment(load_config(None, {**tiny("scarlet"), **extra}))
    assert info.value.field == field


def test_run_checks_options_on_call():
    exp = build_experiment(load_config(None, tiny("scarlet")))
    gen = rounds_for(exp)(exp)
    assert next(gen)["round"] == 1
    gen.close()


def test_bundled_scarlet_configs_parse():
    names = [n for n in bundled_experiments() if n.startswith("scarlet/")]
    assert "scarlet/dsfl-vs-scarlet-digits" in names
    for name in names:
        cfg = load_config(resolve_config(name))
        parse_distillation(cfg.distillation)
        for variant in variants_from_config(cfg):
            parse_distillation(apply_variant(cfg, variant).distillation)


# ---------------------------------------------------------------- analyses


def test_analyze_cache_ratio_and_entropy(tmp_path, capsys):
    png = tmp_path / "ratio.png"
    assert main(["analyze", "cache-ratio", "--public-size", "100", "--subset-size", "10", "--durations", "0,5", "--rounds", "30", "-o", str(png)]) == 0
    out = capsys.readouterr().out
    assert "| 0 | 0.000 |" in out and png.is_file()  # D = 0: nothing is ever served from the cache
    # two clients, one sample: mean [0.5, 0.5] -> entropy ln 2 = 0.693 for every beta; ERA keeps it uniform too
    soft = tmp_path / "soft.pt"
    torch.save(torch.tensor([[[0.8, 0.2]], [[0.2, 0.8]]]), soft)
    assert main(["analyze", "soft-label-entropy", "--soft-labels", str(soft), "--betas", "1,3", "--temps", "0.1", "--out-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "b=1: 0.693" in out and "b=3: 0.693" in out and "T=0.1: 0.693" in out
    assert (tmp_path / "entropy_vs_beta.png").is_file() and (tmp_path / "entropy_vs_temperature.png").is_file()
    assert main(["analyze", "cache-ratio", "--subset-size", "0"]) == 2


# ---------------------------------------------------------------- every executor runs the soft-label protocol


def _numbers(records: list[dict]) -> list[tuple[str, int, float]]:
    """Every float metric of every round, flattened (for a tolerance comparison)."""
    out = []
    for r in records:
        for key, value in sorted(r.items()):
            if isinstance(value, float) and not math.isnan(value):
                out.append((key, r["round"], value))
    return out


@pytest.mark.slow  # a worker pool per method; the vectorized equivalence below stays in the fast loop
@pytest.mark.parametrize(("method", "extra"), [("scarlet", {"cache_duration": 2}), ("dsfl", {}), ("comet", {}), ("selective_fd", {}), ("cfd", {"delta_coding": True, "bits_up": 2})])
def test_processes_executor_is_bitwise_sequential_for_soft_labels(method, extra):
    over = {**tiny(method, **extra), "federation.clients_per_round": 3, "federation.rounds": 3}
    seq = run_experiment(load_config(None, over), write=False, progress=False).records
    proc = run_experiment(load_config(None, {**over, "executor": "processes"}), write=False, progress=False, pools=pools()).records  # lent workers
    assert seq == proc
    assert seq[-1]["global_acc"] is not None and seq[-1]["bytes_cumulative"] > 0


@pytest.mark.parametrize(("method", "extra"), [("scarlet", {"cache_duration": 2}), ("comet", {"granularity": "sample"})])
def test_vectorized_executor_matches_sequential_for_soft_labels(method, extra):
    over = {**tiny(method, **extra), "model.name": "mlp", "federation.rounds": 3}
    seq = run_experiment(load_config(None, over), write=False, progress=False).records
    vec = run_experiment(load_config(None, {**over, "executor": "vectorized"}), write=False, progress=False).records
    assert [r["clients"] for r in seq] == [r["clients"] for r in vec]
    assert [r["bytes_cumulative"] for r in seq] == [r["bytes_cumulative"] for r in vec]  # same traffic, message for message
    assert_records_close(seq, vec)  # accuracies: only between bitwise runs (tests/float_paths.py)
    assert vec == run_experiment(load_config(None, {**over, "executor": "vectorized"}), write=False, progress=False).records  # deterministic


def test_vectorized_executor_batches_the_distillation_jobs(batch_sizes):
    """The distillation and private-training stages of a round's clients each train as one vmapped batch."""
    from chillfl.executors.vectorized import VectorizedExecutor

    calls = batch_sizes(VectorizedExecutor, "_run_vectorized")
    over = {**tiny("scarlet"), "model.name": "mlp", "federation.rounds": 2, "executor": "vectorized"}
    run_experiment(load_config(None, over), write=False, progress=False)
    assert calls == [K, K, K]  # round 1: private training; round 2: distillation, then private training


def test_a_separate_public_dataset_reaches_the_models_in_the_private_standardisation():
    """SCARLET / DS-FL put public and private images through one Normalize; chillfl standardises each dataset with
    its own train statistics, so the public pool is re-expressed in the private data's (by hand, then end to end)."""
    from types import SimpleNamespace

    from chillfl.data import load_dataset
    from chillfl.protocols.softlabels.public import _load_public_dataset, in_private_scale, public_inputs

    # public x = (raw - 0.5) / 0.25, private (raw - 0.4) / 0.1: x = 1 is raw 0.75 -> 3.5; x = -1 is raw 0.25 -> -1.5
    pub = SimpleNamespace(channel_mean=(0.5,), channel_std=(0.25,))
    priv = SimpleNamespace(channel_mean=(0.4,), channel_std=(0.1,))
    x = torch.tensor([1.0, -1.0]).view(2, 1, 1, 1)
    assert torch.allclose(in_private_scale(x, pub, priv).flatten(), torch.tensor([3.5, -1.5]))
    assert in_private_scale(x, pub, SimpleNamespace(channel_mean=None, channel_std=None)) is x  # nothing recorded: as loaded

    private = load_dataset("digits")
    public = load_dataset("digits", {"test_fraction": 0.5})  # another train split: other statistics
    assert public.channel_mean != private.channel_mean
    setup = SimpleNamespace(common=SimpleNamespace(public_dataset="digits", public_dataset_options={"test_fraction": 0.5}, public_size=public.x_train.shape[0]))
    _load_public_dataset.cache_clear()
    try:
        pool = public_inputs(setup, SimpleNamespace(dataset=private), 0, "data")
    finally:
        _load_public_dataset.cache_clear()
    raw = public.x_train * public.channel_std[0] + public.channel_mean[0]  # every row of the public train split, x / 16
    assert torch.allclose(pool, (raw - private.channel_mean[0]) / private.channel_std[0], atol=1e-5)
