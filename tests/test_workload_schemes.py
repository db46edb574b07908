"""How the schemes cut the volume into calls: packing rules, message lists worked out by hand, and for
every scheme the wire volume of the messages against the equation, each difference named."""

from fractions import Fraction

import pytest

from microbench.errors import UsageError
from microbench.workload.buckets import close_when_reached, flush_before_overflow
from microbench.workload.distribution import SCHEMES, Workload
from microbench.workload.messages import Message, total_wire
from microbench.workload.model import Model, preset
from microbench.workload.schemes import build

P19 = 71_459_840  # Eq. 1 for 19M


def of(dist, phase, collective=None):
    return [m for m in dist.messages if m.phase == phase and (collective is None or m.collective == collective)]


def test_packing_rules():
    # DDP: close once a bucket reaches its limit; limits in turn, the last repeating
    assert close_when_reached([5, 5, 5, 20, 1, 1], [8, 10]) == [[0, 1], [2, 3], [4, 5]]
    # DeepSpeed: send the bucket before a tensor would overflow it; an oversized tensor travels alone
    assert flush_before_overflow([5, 5, 5, 20, 1], 10) == [[0, 1], [2], [3], [4]]


WORKLOADS = {
    "ddp": dict(dp=8), "fsdp2": dict(dp=6), "zero1": dict(dp=8), "zero2": dict(dp=6), "zero3": dict(dp=6), "zeropp": dict(dp=16),
    "tp": dict(tp=4, microbatches=2), "sp": dict(tp=4), "pp": dict(pp=2, dp=4, microbatches=4),
    "3d": dict(tp=2, pp=3, dp=2, microbatches=3), "cp": dict(cp=2, tp=2, dp=2),
}


@pytest.mark.parametrize("model", ["19M", "125M", "1.3B", "13B"])
@pytest.mark.parametrize("scheme", [s for s in SCHEMES if s != "moe"])  # moe needs experts: test_workload_moe.py
def test_messages_agree_with_the_equation(scheme, model):
    kw = dict(WORKLOADS[scheme])
    if scheme in ("pp", "3d") and preset(model).layers % kw["pp"]:
        kw["pp"] = 2
    dist = build(Workload(preset(model), scheme, **kw))
    check = dist.check()
    assert check["residual_bytes"] == 0
    # the messages' wire bytes worked out here, by the paper's per-call factors, not by the code under test
    factor = {"allreduce": lambda n: Fraction(2 * (n - 1), n), "allgather": lambda n: n - 1,
              "alltoall": lambda n: n - 1, "reduce_scatter": lambda n: Fraction(n - 1, n),
              "reduce": lambda n: Fraction(n - 1, n), "broadcast": lambda n: Fraction(n - 1, n),
              "send": lambda n: 1, "recv": lambda n: 0}
    counted = [m for m in dist.messages if m.phase not in dist.excluded_phases]
    wire = sum((m.bytes * factor[m.collective](m.group_size) * Fraction(m.count) for m in counted), Fraction(0))
    assert wire == check["message_bytes"] == dist.volume_bytes + sum(d.bytes for d in dist.departures)
    assert all(m.collective and m.bytes > 0 and m.count > 0 and m.group_size >= 2 for m in dist.messages)
    assert set(check["excluded_phases"]) <= set(dist.excluded_phases)
    # the start-of-training broadcast (FSDP2's fully_shard broadcasts nothing)
    assert ("setup" in check["excluded_phases"]) == (dist.workload.dp > 1 and scheme != "fsdp2")
    assert dist.assumptions


def test_ddp_buckets_of_19M_by_hand():
    dist = build(Workload(preset("19M"), "ddp", dp=8))
    # ready order starts with the output layer: 50304*512*2 B = 51,511,296 >= 1 MiB closes the first bucket;
    # then the final norm (2,048 B) and four layers of 6,299,648 B = 25,200,640 < 25 MiB; the fifth layer's
    # last bias (1,024 B) and MLP-out matrix (2,097,152 B) reach 27,298,816 >= 26,214,400; the rest is one bucket.
    sizes = [m.bytes for m in of(dist, "gradients")]
    assert sorted(sizes) == sorted([51_511_296, 27_298_816, 2 * P19 - 51_511_296 - 27_298_816])
    assert all(m.collective == "allreduce" and m.count == 1 and m.group_size == 8 for m in of(dist, "gradients"))
    assert dist.volume_elements == Fraction(2 * P19 * 7, 8)
    assert sum(m.bytes for m in of(dist, "setup")) == 2 * P19  # one 250 MiB group holds the whole 19M model


def test_ddp_setup_broadcast_groups_of_1_3B_by_hand():
    dist = build(Workload(preset("1.3B"), "ddp", dp=8))
    # c10d broadcast_coalesced closes a group once it holds 250 MiB = 262,144,000 B, in forward order (bf16):
    # word 206,045,184 + position 8,388,608 + layer 0 up to its MLP-in matrix (8,192 + 25,165,824 + 4,096 +
    # 8,388,608 + 4,096 + 8,192 + 33,554,432) = 281,567,232. Then the rest of layer 0 (33,562,624), layers 1-2
    # (2 x 100,696,064) and layer 3 up to its attention-out matrix (8,192 + 25,165,824 + 4,096 + 8,388,608)
    # = 268,521,472. (PyTorch's take_tensors rule would have closed the first group after the word embedding.)
    setup = of(dist, "setup")
    assert all(m.collective == "broadcast" for m in setup)
    sizes = {m.bytes for m in setup}
    assert 281_567_232 in sizes and 268_521_472 in sizes and 206_045_184 not in sizes
    assert sum(m.bytes * m.count for m in setup) == 2 * 1_418_596_352


def test_zero1_allreduces_the_bucket_and_allgathers_the_partition():
    dist = build(Workload(preset("19M"), "zero1", dp=8))
    # DeepSpeed 0.19.8's default (use_multi_rank_bucket_allreduce=True): the one 5e8-element bucket holding all
    # 71,459,840 elements is allreduced whole; then the fp32 gradient norm; 8 partitions of 8,932,480 elements
    assert of(dist, "gradients") == [Message("allreduce", 2 * P19, 1, 8, "gradients")]
    assert of(dist, "optimizer") == [Message("allreduce", 4, 1, 8, "optimizer"),
                                     Message("allgather", 17_864_960, 1, 8, "optimizer")]
    assert [d.bytes for d in dist.departures] == [P19 * 2 * Fraction(7, 8), Fraction(7)]


def test_zero2_padding_is_a_named_departure():
    dist = build(Workload(preset("19M"), "zero2", dp=6))
    # 71,459,840 is padded to a multiple of 12: 71,459,844; the allgather moves 4 extra elements * 2 B * 5/6
    assert Message("allgather", 71_459_844 // 6 * 2, 1, 6, "optimizer") in of(dist, "optimizer")
    assert [d.bytes for d in dist.departures] == [P19 * 2 * Fraction(5, 6), Fraction(20, 3), Fraction(20, 3)]
    assert sum(m.bytes * m.count for m in of(dist, "gradients")) == 2 * P19


def test_zero2_buckets_of_13B_stay_under_5e8_elements():
    dist = build(Workload(preset("13B"), "zero2", dp=8))
    grads = of(dist, "gradients", "allreduce")
    assert sum(m.bytes * m.count for m in grads) == 2 * 13_110_159_360
    assert max(m.bytes for m in grads) <= 500_000_000 * 2


def test_zero3_by_hand_for_19M():
    dist = build(Workload(preset("19M"), "zero3", dp=8))
    # the 26 matrices and embeddings (71,434,240 elements) reach the 5e7-element prefetch bucket only with the
    # output head, the last of them: one coalesced allgather of every rank's partitions in forward
    assert of(dist, "forward") == [Message("allgather", 71_434_240 // 8 * 2, 1, 8, "forward")]
    # within stage3_max_reuse_distance (1e9 elements) all stay gathered: no backward gather
    assert of(dist, "backward") == []
    # the fp64 gradient norm, and 50 vectors of 512 elements gathered once after the step (64 elements each)
    assert of(dist, "optimizer") == [Message("allreduce", 8, 1, 8, "optimizer"),
                                     Message("allgather", 128, 50, 8, "optimizer")]
    # one 5e8-element gradient bucket: a reduce_scatter of the whole model
    assert of(dist, "gradients") == [Message("reduce_scatter", 2 * P19, 1, 8, "gradients")]
    assert [d.bytes for d in dist.departures] == [-25_600 * 2 * Fraction(7, 8), Fraction(14),
                                                  -71_434_240 * 2 * Fraction(7, 8)]


def test_zero3_regathers_what_lies_beyond_the_reuse_distance():
    dist = build(Workload(preset("13B"), "zero3", dp=8))
    forward, backward = of(dist, "forward"), of(dist, "backward")
    # prefetch buckets of at least 5e7 elements (2 B each, 8 partitions), the last possibly smaller
    assert all(m.bytes * 8 // 2 >= 50_000_000 for m in forward[:-1])
    # the first layers are more than 1e9 trace elements from their backward use: gathered again, fewer bytes
    assert backward and sum(m.bytes * m.count for m in backward) < sum(m.bytes * m.count for m in forward)
    assert dist.check()["residual_bytes"] == 0


def test_fsdp2_by_hand():
    dist = build(Workload(Model(64, 2, 4, 32, 128), "fsdp2", dp=3))
    # dim 0 padded to a multiple of 3 rows: root = word 43x64 + position 11x64 + final norm 2 x 22 + head 43x64
    root = 2752 + 704 + 22 + 22 + 2752
    # a block: 2 norms (4 x 22), QKV 64x64, out 22x64, MLP in 86x64, MLP out 22x256, 4 biases of 22
    block = 4 * 22 + 4096 + 1408 + 5504 + 5632 + 4 * 22
    assert of(dist, "forward") == [Message("allgather", 2 * root, 1, 3, "forward"),
                                   Message("allgather", 2 * block, 2, 3, "forward")]
    assert of(dist, "backward") == [Message("allgather", 2 * block, 2, 3, "backward")]  # the root stays gathered
    assert of(dist, "gradients") == [Message("reduce_scatter", 3 * 2 * root, 1, 3, "gradients"),
                                     Message("reduce_scatter", 3 * 2 * block, 2, 3, "gradients")]
    assert of(dist, "setup") == []  # fully_shard broadcasts nothing
    assert dist.check()["residual_bytes"] == 0


def test_zeropp_by_hand_for_19M():
    dist = build(Workload(preset("19M"), "zeropp", dp=16, node_size=8))
    # equation: P * [15/16 * 1 B + 7/8 * 2 B + (7/16 + 1/32) B] = 3.15625 P
    assert dist.volume_bytes == Fraction(P19) * Fraction(101, 32) == 225_545_120
    persistent, fallback, scales = (d.bytes for d in dist.departures)
    assert persistent == 25_600 * (Fraction(15, 8) - Fraction(15, 16) - Fraction(7, 4))  # -20,800
    assert fallback == 25_600 * (Fraction(15, 8) - Fraction(15, 32))  # vectors via reduce_scatter: 36,000
    # qwZ scales 34,860 B + qgZ scales 523,200 B (worked out per matrix: ceil(n/16/8000)*4 B gathered over 16;
    # max(rows, cols, 16)*4 B over 8 peers inside the node and (that // 8)*4 B over 2 nodes)
    assert scales == 558_060
    assert dist.check()["message_bytes"] == 225_545_120 - 20_800 + 36_000 + 558_060
    qkv = 3 * 512 * 512
    assert Message("alltoall", qkv // 16, 6, 8, "gradients") in dist.messages       # int4, 8 peers in a node
    assert Message("alltoall", qkv // 32, 6, 2, "gradients") in dist.messages       # int4, 2 nodes
    assert Message("allgather", qkv // 16, 6, 16, "forward") in dist.messages       # int8 partition
    assert Message("allgather", qkv // 8 * 2, 6, 8, "backward") in dist.messages    # hpZ, bf16, in a node


def test_tensor_parallel_by_hand_for_1_3B():
    dist = build(Workload(preset("1.3B"), "tp", tp=8))
    a = 4 * 2048 * 2048 * 2  # b*s*h in bf16
    assert of(dist, "forward") == [Message("allreduce", a, 48, 8, "forward")]
    assert of(dist, "backward") == [Message("allreduce", a, 48, 8, "backward")]
    assert of(dist, "recompute") == [Message("allreduce", a, 48, 8, "recompute")]
    assert of(dist, "embedding") == [Message("allreduce", a, 1, 8, "embedding")]
    assert of(dist, "lm_head") == [Message("allreduce", a, 1, 8, "lm_head")]
    assert of(dist, "loss") == [Message("allreduce", 4 * 2048 * 4, 3, 8, "loss")]
    assert dist.volume_bytes == 2 * 4_257_218_560
    assert set(dist.excluded_phases) >= {"lm_head", "loss", "setup"}


def test_sequence_parallel_pairs_have_allreduce_volume():
    tp = build(Workload(preset("1.3B"), "tp", tp=8))
    sp = build(Workload(preset("1.3B"), "sp", tp=8))
    a = 4 * 2048 * 2048 * 2
    assert Message("allgather", a // 8, 48, 8, "forward") in sp.messages
    assert Message("reduce_scatter", a, 48, 8, "forward") in sp.messages
    assert of(sp, "backward_regather") == [Message("allgather", a // 8, 49, 8, "backward_regather")]
    phases = ["forward", "backward", "recompute", "embedding"]
    assert total_wire(sp.messages, phases) == total_wire(tp.messages, phases) == sp.volume_bytes


def test_pipeline_by_hand_for_13B():
    dist = build(Workload(preset("13B"), "pp", pp=4, microbatches=8))
    a = 4 * 2048 * 5120 * 2
    # 3 boundaries x 8 microbatches, activations forward and gradients backward, summed over stages
    assert dist.messages == [Message(c, a, 24, 2, ph) for ph in ("forward", "backward") for c in ("send", "recv")]
    assert total_wire(dist.messages) == 48 * a == 8 * 251_658_240 * 2


def test_data_parallel_part_of_3d():
    dist = build(Workload(preset("1.3B"), "3d", tp=2, pp=2, dp=2))
    # first stage, one of 2 tensor ranks: 25,152*2048 + 2048*2048 + 12*(12*2048^2/2 + 8*2048) = 357,892,096
    shard = 357_892_096
    grads = of(dist, "gradients")
    assert sum(m.bytes * m.count for m in grads) == shard * 2
    assert all(m.bytes >= 40_000_000 * 2 for m in grads[:-1])  # Megatron buckets: at least 4e7 elements
    eq5 = Fraction((12 * 12 + 2) * 4 * 2048 * 2048 * 1, 2)  # L/p = 12 layers, t = 2
    eq4 = 2 * 4 * 2048 * 2048 * 1                          # p - 1 = 1 boundary
    assert dist.volume_elements == eq5 + eq4 + shard


@pytest.mark.parametrize("kw,message", [
    (dict(scheme="ddp", dp=1), "needs --dp of at least 2"),
    (dict(scheme="zero3", dp=8, tp=2), "pure data parallelism"),
    (dict(scheme="ddp", dp=8, microbatches=4), "pipeline microbatches"),
    (dict(scheme="tp", tp=1), "--tp of at least 2"),
    (dict(scheme="pp", pp=4), "must divide --layers"),
    (dict(scheme="3d", tp=2, pp=1), "--tp and --pp of at least 2"),
    (dict(scheme="tp", tp=3), "must divide --hidden"),
    (dict(scheme="zeropp", dp=12, node_size=8), "multiple of --node-size"),
    (dict(scheme="nope", dp=2), "unknown scheme"),
])
def test_impossible_workloads_are_usage_errors(kw, message):
    model = Model(512, 6, 8)
    with pytest.raises(UsageError, match=message):
        build(Workload(model, **kw))
