"""Expert and context parallelism in the workload model (issue 42): published shapes, dispatch and combine to the
byte, ring attention and Ulysses, Megatron-Core's groups, and every check's residual 0."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

from conftest import microbench
from microbench.benchmarks.splits import parse
from microbench.errors import UsageError
from microbench.workload.distribution import Workload
from microbench.workload.model import active_parameter_count, parameter_count, preset
from microbench.workload.schemes import build

# Published totals, and the sums worked out by hand from the published shapes:
# Mixtral-8x7B (arXiv 2401.04088 Table 1): per layer q 4096^2 + k, v 1024 x 4096 each + o 4096^2 = 41,943,040,
# experts 8 x 3 x 14336 x 4096 = 1,409,286,144, router 8 x 4096 = 32,768, two norms 8,192: 1,451,270,144;
# x 32 = 46,440,644,608; embeddings 2 x 32000 x 4096 = 262,144,000; final norm 4096: 46,702,792,704 ("46.7B").
# Active: the same with 2 of 8 experts: 46,702,792,704 - 32 x 6 x 176,160,768 = 12,879,925,248 ("12.9B").
# Llama 3 8B: per layer 41,943,040 + 3 x 14336 x 4096 = 176,160,768 + 8,192 = 218,112,000; x 32 = 6,979,584,000;
# embeddings 2 x 128256 x 4096 = 1,050,673,152; final norm 4096: 8,030,261,248 ("8B").
# DeepSeek-V3 (arXiv 2412.19437): "671B total, 37B activated".
PARAMS = {"mixtral-8x7b": (46_702_792_704, 12_879_925_248), "llama3-8b": (8_030_261_248, 8_030_261_248)}


@pytest.mark.parametrize("name", PARAMS)
def test_published_shapes_sum_to_their_published_sizes(name):
    total, active = PARAMS[name]
    assert parameter_count(preset(name)) == total and active_parameter_count(preset(name)) == active


def test_deepseek_v3_is_671b_with_37b_active():
    m = preset("deepseek-v3")
    # 671,026,404,352 and 37,552,282,624 (the report counts the 37B without saying how it rounds)
    assert round(parameter_count(m) / 1e9) == 671 and int(active_parameter_count(m) / 1e9) == 37
    assert m.mla is not None and m.dense_layers == 3 and m.shared_experts == 1 and m.experts == 256


def _workload_json(*args: str) -> dict:
    proc = microbench("workload", *args, "--json", timeout=120)
    assert proc.returncode == 0, proc.output
    return json.loads(proc.stdout)


def test_mixtral_dispatch_and_combine_match_the_hand_computation_to_the_byte():
    """microbench workload --model mixtral-8x7b --scheme moe --ep 8 --dp 8 (s = 4096, b = 1, bf16)."""
    out = _workload_json("--model", "mixtral-8x7b", "--scheme", "moe", "--ep", "8", "--dp", "8", "--seq", "4096",
                         "--micro-batch", "1")
    # T = b s = 4096 tokens per rank, each routed to k = 2 experts: 8192 token copies of h = 4096 bf16 values:
    # the dispatch sends 8192 x 4096 x 2 = 67,108,864 B; uniform over 8 ranks each receives 8 x 1024 copies and
    # sends back as much; the probabilities: 8192 x 2 = 16,384 B; the counts: 8 experts x 8 B = 64 B. One call per
    # MoE layer (32) and microbatch (1); backward runs the three all-to-alls again the other way.
    ep = [m for m in out["messages"] if m.get("dimension") == "ep"]
    assert sorted((m["phase"], m["collective"], m["bytes"], m["splits"] if "splits" in m else None, m["count"],
                   m["group_size"]) for m in ep) == sorted([
        ("forward", "allgather", 64, None, 32, 8),
        ("forward", "alltoallv", 67_108_864, "uniform", 32, 8),
        ("forward", "alltoallv", 16_384, "uniform", 32, 8),
        ("forward", "alltoallv", 67_108_864, "uniform/T", 32, 8),
        ("backward", "alltoallv", 67_108_864, "uniform", 32, 8),
        ("backward", "alltoallv", 67_108_864, "uniform/T", 32, 8),
        ("backward", "alltoallv", 16_384, "uniform/T", 32, 8)])
    assert out["parallel"]["expert_dp"] == 1  # 8 ranks, 8 experts on 8 ranks: no expert gradient to reduce
    assert not [m for m in out["messages"] if m.get("dimension") == "edp"]
    assert out["check"]["residual_bytes"] == 0


def test_zipf_routing_makes_the_combine_the_hot_ranks_receive():
    out = _workload_json("--model", "mixtral-8x7b", "--scheme", "moe", "--ep", "8", "--dp", "8", "--seq", "4096",
                         "--micro-batch", "1", "--routing", "zipf:1.2")
    # weights j^-1.2, j = 1..8, sum 2.333018: 8192 x weight / sum = 3511.33, 1528.40, 939.56, 665.27, 508.99,
    # 408.97, 339.90, 289.58; floors sum to 8187 and the 5 left go to the largest remainders (.99 .97 .90 .58
    # .56), none to rank 0: it gets 3511 of every rank's 8192 copies
    weights = [j ** -1.2 for j in range(1, 9)]
    to_rank0 = int(8192 * weights[0] / sum(weights))
    assert to_rank0 == 3511
    combine = {m["bytes"] for m in out["messages"] if m.get("splits") == "zipf:1.2/T"}
    assert combine == {8 * 3511 * 4096 * 2, 8 * 3511 * 2}
    assert {m["bytes"] for m in out["messages"] if m.get("splits") == "zipf:1.2"} == {67_108_864, 16_384}
    assert out["check"]["residual_bytes"] == 0


def test_capacity_factor_pads_to_uniform_all_to_alls():
    w = Workload(preset("mixtral-8x7b", seq=4096), "moe", dp=8, ep=8, micro_batch=1, capacity_factor=1.25)
    dist = build(w)
    # capacity = ceil(8192 / 8 x 1.25) = 1280 tokens per expert; one expert per rank: blocks of 1280 x 8192 B
    ep = {(m.collective, m.bytes) for m in dist.messages if m.dimension == "ep"}
    assert ep == {("alltoall", 1280 * 8192), ("alltoall", 1280 * 2)}  # no counts allgather with drop and pad
    assert dist.check()["residual_bytes"] == 0
    assert any("padded to its capacity of 1280" in d.reason for d in dist.departures)


def test_llama3_ring_attention_sends_kv_chunks_around_the_cp_ring():
    out = _workload_json("--model", "llama3-8b", "--scheme", "cp", "--cp", "4", "--dp", "2", "--seq", "32768",
                         "--micro-batch", "1")
    # 32768 / 4 = 8192 tokens per rank; K and V of 8 kv heads x 128: 2 x 1024 bf16 values a token: 32 MiB a chunk
    chunk = 8192 * 2 * 1024 * 2
    cp = sorted((m["phase"], m["collective"], m["bytes"], m["count"]) for m in out["messages"]
                if m.get("dimension") == "cp")
    # forward: cp-1 = 3 steps per layer (32 layers); backward: K,V first and dK,dV last, 2 middle steps with both
    assert cp == sorted([("forward", c, chunk, 96) for c in ("send", "recv")]
                        + [("backward", c, chunk, 64) for c in ("send", "recv")]
                        + [("backward", c, 2 * chunk, 64) for c in ("send", "recv")])
    assert out["check"]["residual_bytes"] == 0
    assert {m["group_size"] for m in out["messages"] if m.get("dimension") == "dp_cp"} == {8}  # dp x cp


def test_ulysses_all_to_alls_of_q_k_v_and_the_output():
    dist = build(Workload(preset("llama3-8b", seq=16384), "cp", dp=1, cp=8, cp_comm="a2a", micro_batch=1))
    # 2048 tokens per rank; q and the output 4096 values a token, k and v 1024; the block to each of 8 peers
    blocks = {(m.bytes, m.count) for m in dist.messages if m.dimension == "cp" and m.phase == "forward"}
    assert blocks == {(2048 * 4096 * 2 // 8, 2 * 32), (2048 * 1024 * 2 // 8, 2 * 32)}  # q and out; k and v
    assert {m.collective for m in dist.messages if m.dimension == "cp"} == {"alltoall"}
    assert dist.check()["residual_bytes"] == 0


@pytest.mark.parametrize("kw", [
    dict(scheme="moe", tp=2, dp=4, ep=4, pp=2, microbatches=4, routing="hot:3"),
    dict(scheme="moe", tp=2, dp=2, cp=2, ep=4, etp=1, routing="zipf:0.8"),
    dict(scheme="moe", tp=2, dp=2, ep=2, etp=2, capacity_factor=1.0),
    dict(scheme="moe", dp=4, ep=4, etp=1, recompute=True, routing="zipf:2"),
    dict(scheme="cp", dp=2, cp=2, ep=2, tp=1, cp_comm="a2a"),
])
def test_deepseek_v3_in_4d_and_5d_layouts_checks_to_zero(kw):
    kw = dict(kw)
    routing = parse(kw.pop("routing", "uniform"))
    m = preset("deepseek-v3", seq=4096)
    import dataclasses

    m = dataclasses.replace(m, layers=8, experts=32)  # eight layers, 32 experts: the same layer kinds, smaller
    dist = build(Workload(m, micro_batch=1, routing=routing, **kw))
    check = dist.check()
    assert check["residual_bytes"] == 0, check
    dims = {msg.dimension for msg in dist.messages}
    assert "ep" in dims and ({"dp", "dp_cp"} & dims)


def test_expert_gradients_go_to_the_expert_data_parallel_group():
    dist = build(Workload(preset("mixtral-8x7b", seq=4096), "moe", dp=8, ep=2, micro_batch=1))
    edp = [m for m in dist.messages if m.dimension == "edp" and m.phase == "expert_gradients"]
    # 4 of 8 experts per rank, 32 layers: 32 x 4 x 3 x 14336 x 4096 bf16 elements, over 8 / 2 = 4 ranks
    assert {m.group_size for m in edp} == {4}
    assert sum(m.bytes * m.count for m in edp) == 32 * 4 * 3 * 14336 * 4096 * 2
    assert dist.check()["residual_bytes"] == 0


@pytest.mark.parametrize("kw, why", [
    (dict(scheme="moe", dp=8, ep=3), "must divide the experts"),
    (dict(scheme="moe", dp=2, ep=8), "must divide --tp 1 x --cp 1 x --dp 2"),
    (dict(scheme="cp", dp=2, cp=1), "--cp of at least 2"),
    (dict(scheme="cp", dp=1, cp=64, cp_comm="a2a"), "must divide 32 query heads"),
    (dict(scheme="ddp", dp=2, ep=2), "apply to --scheme moe and cp"),
])
def test_layouts_no_framework_runs_are_refused(kw, why):
    with pytest.raises(UsageError, match=why):
        build(Workload(preset("mixtral-8x7b", seq=4096), micro_batch=1, **kw))


def test_a_dense_model_has_no_moe_scheme():
    with pytest.raises(UsageError, match="needs a mixture-of-experts model"):
        build(Workload(preset("llama3-8b"), "moe", dp=2))


def test_custom_moe_model_from_the_command_line_and_a_router_histogram(tmp_path):
    hist = tmp_path / "router.txt"
    hist.write_text("# tokens per expert of one step\n" + " ".join(str(x) for x in [8, 4, 2, 2, 1, 1, 1, 1]) + "\n")
    out = _workload_json("--hidden", "512", "--layers", "4", "--heads", "8", "--family", "llama", "--kv-heads", "2",
                         "--experts", "8", "--top-k", "2", "--seq", "1024", "--micro-batch", "2", "--scheme", "moe",
                         "--ep", "4", "--dp", "4", "--routing", f"file:{hist}")
    # 2048 tokens x 2 copies; experts (8+4), (2+2), (1+1), (1+1) of 20 on 4 ranks: 4096 x 12, 4, 2, 2 / 20 =
    # 2457.6, 819.2, 409.6, 409.6: floors 2457 819 409 409 leave 2 for the three remainders of .6, the ties going
    # to the ranks nearest after the sender: rank 0 gets 2458 from itself and rank 3, 2457 from ranks 1 and 2,
    # 9830 copies in all, which its combine sends back, 512 bf16 values each
    split = {m["splits"] for m in out["messages"] if "splits" in m}
    assert any(s.startswith("file:router.txt#") and not s.endswith("/T") for s in split)
    combine = {m["bytes"] for m in out["messages"] if m.get("splits", "").endswith("/T") and m["bytes"] > 100_000}
    assert combine == {9830 * 512 * 2}
    assert out["model"]["experts"] == 8 and out["parallel"]["routing"].startswith("file:router.txt#")


def test_a_seq_sweep_keeps_the_architecture():
    proc = microbench("workload", "--model", "mixtral-8x7b", "--scheme", "moe", "--ep", "4", "--dp", "4",
                      "--micro-batch", "1", "--seq", "1024,4096", timeout=120)
    assert proc.returncode == 0, proc.output
    assert "ep x4" in proc.stdout and "alltoallv" in proc.stdout


def test_wire_of_a_split_is_the_mean_off_rank_share():
    w = Workload(preset("mixtral-8x7b", seq=4096), "moe", dp=4, ep=4, micro_batch=1, routing=parse("hot:5"))
    dist = build(w)
    token = 4096 * 2
    # hot:5 on 4 ranks: 8192 copies as 5/8, 1/8, 1/8, 1/8 = 5120, 1024, 1024, 1024; the diagonal keeps 5120 +
    # 3 x 1024 of the 4 x 8192, so a rank sends (32768 - 8192) / 4 = 6144 copies to others on average
    dispatch = [m for m in dist.messages if m.splits == "hot:5" and m.bytes == 8192 * token]
    assert dispatch and all(m.wire == Fraction(6144 * token) for m in dispatch)


def test_distributed_optimizer_shards_dense_and_expert_buckets():
    from microbench.workload.megatron_core import sharded_buckets

    # tensors of 200 and 10 elements, buckets of 150, 4 ranks: the first closes at 200 and is padded to a multiple
    # of lcm(4, 128) = 128: 256; the second starts at 256 (a multiple of 64), ends at 266, padded to 384: 128
    assert sharded_buckets([200, 10], 4, 150) == [256, 128]
    assert sharded_buckets([100, 30], 4, 120) == [256]  # 100, then 30 from 128 (64-aligned): 158 -> 256
    w = Workload(preset("mixtral-8x7b", seq=4096), "moe", dp=8, ep=2, micro_batch=1, distributed_optimizer=True)
    dist = build(w)
    assert dist.check()["residual_bytes"] == 0
    by = {(m.collective, m.phase, m.dimension) for m in dist.messages if m.phase in ("gradients", "expert_gradients",
                                                                                      "optimizer")}
    assert by == {("reduce_scatter", "gradients", "dp"), ("reduce_scatter", "expert_gradients", "edp"),
                  ("allgather", "optimizer", "dp"), ("allgather", "optimizer", "edp")}
    scatter = [m for m in dist.messages if m.collective == "reduce_scatter" and m.dimension == "edp"]
    gather = [m for m in dist.messages if m.collective == "allgather" and m.dimension == "edp"]
    # every expert bucket's shard is what each of the 4 expert-data-parallel ranks gathers
    assert sorted(m.bytes // 4 for m in scatter for _ in range(int(m.count))) == sorted(
        m.bytes for m in gather for _ in range(int(m.count)))
    with pytest.raises(UsageError, match="--distributed-optimizer apply to"):
        build(Workload(preset("19M"), "ddp", dp=2, distributed_optimizer=True))


def test_moe_every_other_layer():
    # 4 layers, MoE every 2nd from layer 0 (Megatron-Core moe_layer_freq 2): layers 0 and 2 route, 1 and 3 are dense
    out = _workload_json("--hidden", "256", "--layers", "4", "--heads", "4", "--family", "llama", "--experts", "4",
                         "--top-k", "1", "--moe-every", "2", "--seq", "128", "--micro-batch", "1", "--scheme", "moe",
                         "--ep", "2", "--dp", "2")
    dispatch = [m for m in out["messages"] if m.get("splits") == "uniform" and m["phase"] == "forward"
                and m["bytes"] == 128 * 256 * 2]
    assert [m["count"] for m in dispatch] == [2] and out["check"]["residual_bytes"] == 0
