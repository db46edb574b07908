"""The replay's communicator layout (Megatron-Core's rank order) and its per-iteration call schedule."""

import pytest

from microbench.errors import UsageError
from microbench.replay.layout import Layout
from microbench.replay.schedule import calls
from microbench.workload.distribution import Workload
from microbench.workload.model import Model
from microbench.workload.schemes import build

TINY = Model(hidden=64, layers=2, heads=4, seq=32, vocab=128)


def test_megatron_core_order_tp_then_cp_then_dp_then_pp():
    # Megatron-Core's RankGenerator, order "tp-cp-ep-dp-pp": tensor-parallel ranks fastest, pipeline stages slowest
    layout = Layout(tp=2, pp=2, dp=2)
    assert layout.groups("tp") == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert layout.groups("dp") == [(0, 2), (1, 3), (4, 6), (5, 7)]
    assert layout.groups("pp") == [(0, 4), (1, 5), (2, 6), (3, 7)]
    assert layout.group_of(5, "pp") == (1, 5)
    assert layout.coordinates(7) == {"tp": 1, "cp": 0, "dp": 1, "pp": 1}
    assert layout.kinds == ("tp", "pp", "dp")


def test_context_and_expert_groups_follow_megatron_core():
    # 16 ranks: tp 2, cp 2, dp 2, pp 2; experts: etp 1, ep 4, so edp = 2*2*2 / 4 = 2
    layout = Layout(tp=2, pp=2, dp=2, cp=2, ep=4, etp=1)
    assert layout.groups("cp")[:2] == [(0, 2), (1, 3)]  # stride tp
    assert layout.groups("dp")[:2] == [(0, 4), (1, 5)]  # stride tp x cp
    assert layout.groups("dp_cp")[:2] == [(0, 2, 4, 6), (1, 3, 5, 7)]  # where dense gradients are reduced
    assert layout.groups("pp")[0] == (0, 8)
    # expert generator etp-ep-edp-pp: ep groups are 4 consecutive ranks, edp strides by 4, pp by 8 as above
    assert layout.groups("ep")[:2] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert layout.groups("edp")[:2] == [(0, 4), (1, 5)]
    assert layout.groups("tp_ep")[0] == (0, 1, 2, 3)
    assert set(layout.kinds) == {"tp", "pp", "dp", "cp", "dp_cp", "ep", "etp", "edp", "tp_ep"}
    with pytest.raises(UsageError, match="must divide"):
        Layout(dp=2, ep=4)


def test_layout_must_fill_the_job():
    with pytest.raises(UsageError, match="= 8 ranks, but the job has 4"):
        Layout(tp=2, pp=2, dp=2).check(4)
    Layout(tp=2, dp=2).check(4)


def test_ddp_schedule_is_the_gradient_buckets_overlapped():
    w = Workload(TINY, "ddp", dp=2)
    schedule = calls(w)
    buckets = [m for m in build(w).messages if m.phase == "gradients"]
    assert sum(c.bytes for c in schedule) == sum(m.bytes * m.count for m in buckets)
    assert {(c.collective, c.group, c.overlapped) for c in schedule} == {("allreduce", "dp", True)}
    assert max(c.bytes for c in schedule) == max(m.bytes for m in buckets)


def test_zero3_prefetch_allgathers_overlap_and_gradients_do_not():
    # matrices above ZeRO-3's persistence threshold (1e5 elements) are gathered in forward; a model this small
    # stays gathered into backward (stage3_max_reuse_distance), so only the forward prefetch is there to overlap
    schedule = calls(Workload(Model(hidden=256, layers=1, heads=4, seq=32, vocab=128), "zero3", dp=4))
    phases = {(c.collective, c.phase): c.overlapped for c in schedule}
    assert phases[("allgather", "forward")] and ("allgather", "backward") not in phases
    assert not phases[("reduce_scatter", "gradients")]
    assert {c.group for c in schedule} == {"dp"}


def test_tp_dp_and_pipeline_calls_go_to_their_groups():
    tp_dp = calls(Workload(TINY, "tp", dp=2, tp=2))
    assert {c.group for c in tp_dp if c.phase == "gradients"} == {"dp"}
    assert {c.group for c in tp_dp if c.phase == "forward"} == {"tp"}
    pp = calls(Workload(TINY, "pp", pp=2, microbatches=2))
    sends = [c for c in pp if c.collective == "send"]
    assert sends and {c.group for c in sends} == {"pp"}
    # Eq. 4's counts are summed over the p stages: one rank's share is count / p.
    model_sends = sum(m.count for m in build(Workload(TINY, "pp", pp=2, microbatches=2)).messages
                      if m.collective == "send")
    assert len(sends) == int(model_sends / 2 + 0.5)


def test_pipeline_of_more_than_two_stages_is_replayed():
    # the pipeline's send/recv pair two stages (group size 2) of the pp group, whatever its size
    schedule = calls(Workload(Model(hidden=64, layers=4, heads=4, seq=32, vocab=128), "pp", pp=4, microbatches=4))
    sends = [c for c in schedule if c.collective == "send"]
    assert sends and {c.group for c in sends} == {"pp"}
    assert len(sends) == 2 * 3  # (p-1) x microbatches per direction, over p stages: 3 each way per rank


def test_fsdp2_gathers_overlap_as_zero3s_do():
    schedule = calls(Workload(Model(hidden=256, layers=2, heads=4, seq=32, vocab=128), "fsdp2", dp=2))
    overlapped = {(c.collective, c.phase) for c in schedule if c.overlapped}
    assert overlapped == {("allgather", "forward"), ("allgather", "backward")}


MOE = Model(hidden=64, layers=2, heads=4, seq=64, vocab=128, family="llama", kv_heads=2, experts=4, top_k=2)


def test_moe_calls_run_on_the_expert_groups_with_their_splits():
    from microbench.benchmarks.splits import parse

    schedule = calls(Workload(MOE, "moe", dp=4, ep=2, routing=parse("zipf:1.2"), micro_batch=1))
    a2a = [c for c in schedule if c.collective == "alltoallv"]
    assert a2a and {c.group for c in a2a} == {"ep"} and not any(c.overlapped for c in a2a)
    assert {c.splits.text for c in a2a} == {"zipf:1.2", "zipf:1.2/T"}
    grads = {(c.group, c.phase, c.overlapped) for c in schedule if c.collective == "allreduce"}
    assert grads == {("dp", "gradients", True), ("edp", "expert_gradients", True)}
    assert len({c.key for c in a2a}) == len({(c.bytes, c.splits.text) for c in a2a})


def test_ring_attention_sends_run_on_the_cp_group_per_rank():
    schedule = calls(Workload(MOE, "cp", cp=4, micro_batch=1))
    sends = [c for c in schedule if c.collective == "send"]
    # per layer (2): forward cp-1 = 3, backward 2 + (cp-2) = 4: not divided by any pipeline size
    assert {c.group for c in sends} == {"cp"} and len(sends) == 2 * (3 + 4)


def test_layers_k_of_a_preset_is_recorded_and_bounded():
    import argparse

    from microbench.replay import arguments, cli

    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    model = arguments.model(parser.parse_args(["--model", "13B", "--layers", "2"]))
    assert (model.name, model.layers, model.hidden) == ("13B", 2, 5120)
    with pytest.raises(UsageError, match="between 1 and 40"):
        arguments.model(parser.parse_args(["--model", "13B", "--layers", "41"]))


def test_a_message_in_a_group_the_layout_does_not_build_is_refused():
    # ZeRO++'s hpZ and qgZ groups are node-local or across nodes (8 ranks a node by default), not all 16
    with pytest.raises(UsageError, match="runs in groups of [0-9]+, not on the dp group of 16 ranks"):
        calls(Workload(TINY, "zeropp", dp=16))
    assert calls(Workload(TINY, "zeropp", dp=4))  # a node holds the whole data-parallel group


def test_compute_slices_sit_between_the_calls_of_their_segment():
    from microbench.replay.schedule import Compute, steps

    schedule = calls(Workload(TINY, "ddp", dp=2))
    plan = steps(schedule, 0.3)
    forward = [s for s in plan if isinstance(s, Compute) and s.segment == "forward"]
    backward = [s for s in plan if isinstance(s, Compute) and s.segment == "backward"]
    assert len(forward) == 1 and abs(forward[0].seconds - 0.1) < 1e-12  # no forward calls: one slice of 1/3
    assert len(backward) == len(schedule) + 1  # k gradient buckets: k + 1 slices of 2/3
    assert abs(sum(s.seconds for s in backward) - 0.2) < 1e-12
    assert [s for s in plan if not isinstance(s, Compute)] == schedule
    assert steps(schedule, 0.0) == schedule
