"""The JSON trace formats and DeepSpeed through launchers, on inputs the tests build (samples.py): NCCL's
profiler plugin, PyTorch profiler traces old and new, symmetric memory, execution traces."""

import json

import pytest

from microbench.workload.traces import read_trace, read_traces
from microbench.workload.traces.samples import (
    deepspeed_summary,
    deepspeed_verbose,
    et_comms_node,
    et_op_node,
    json_document,
    kineto_comms,
    kineto_kernel,
    kineto_op,
    profiler_api_event_228,
    profiler_end,
    profiler_event,
)
from microbench.workload.traces.torch_calls import NO_GROUP


def counts(report, iterations=1):
    return {(m.collective, m.bytes, m.group_size): m.count for m in report.messages(iterations)}


def write(path, pieces):
    path.write_text("".join(pieces))
    return str(path)


def profiler_file(tmp_path, lines, name="prof.json"):
    return write(tmp_path / name, ["[\n", *(line + "\n" for line in lines), "{}]\n"])


def test_nccl_profiler_224_names_and_group_size(tmp_path):
    lines = [profiler_event("AllReduce", 1024, "ncclFloat32", ident=0), profiler_end("AllReduce"),
             profiler_event("AllGather", 256, "ncclBfloat16", ident=1), profiler_end("AllGather", ident=1),
             profiler_event("ReduceScatter", 64, "ncclFloat32", ident=2),
             profiler_event("Send", 512, "ncclFloat16", cat="P2P", peer=1, ident=0),
             '{"name": "KernelCh", "cat": "GPU", "ph": "b", "id": 0, "pid": 4242, "tid": 1, "ts": 1.0, '
             '"args": {"Channel": 0}},']
    path = profiler_file(tmp_path, lines)
    report = read_trace(path)
    assert report.format == "nccl-profiler" and report.ranks == ["pid 4242"]
    assert counts(report) == {("allreduce", 4096, None): 1, ("allgather", 512, None): 1, ("send", 1024, None): 1}
    assert report.skipped["ReduceScatter without --trace-group-size (count is each rank's result)"] == 1
    with_group = read_trace(path, group_size=4)
    assert counts(with_group)[("reduce_scatter", 1024, 4)] == 1  # 64 float32 results x 4 ranks of input


def test_nccl_profiler_223_codes_and_228_api_events(tmp_path):
    lines = [profiler_api_event_228("AllReduce", 1024), profiler_event("ncclAllReduce", 1024, 7),
             profiler_event("ncclBroadcast", 10, 0, ident=1), profiler_event("Gather", 8, 7, ident=2)]
    report = read_trace(profiler_file(tmp_path, lines))
    assert counts(report) == {("allreduce", 4096, None): 1, ("broadcast", 10, None): 1}
    assert report.uncurved == {"Gather": 1}


def test_nccl_profiler_files_of_several_ranks(tmp_path):
    paths = [profiler_file(tmp_path, [profiler_event("AllReduce", 8, "ncclFloat32", pid=pid, rank=rank)] * calls,
                           name=f"p_{rank}.json") for pid, rank, calls in ((11, 0, 2), (12, 1, 3))]
    report = read_traces(paths)
    assert report.calls_per_rank() == {"pid 11": 2, "pid 12": 3}
    assert counts(report) == {("allreduce", 32, None): 2.5}


def kineto_file(tmp_path, events, rank=None, at_end=False, name="trace.json"):
    info = {"distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 4}} if rank is not None else {}
    head, tail = ({"schemaVersion": 1}, info) if at_end else ({"schemaVersion": 1, **info}, None)
    return write(tmp_path / name, json_document(head, "traceEvents", events, tail))


def test_kineto_metadata_counts_cpu_ops_once_and_reads_rank_at_the_end(tmp_path):
    events = [kineto_op("aten::mm", [[8, 8], [8, 8]], ["float", "float"]),
              kineto_comms("allreduce", 1024, "BFloat16", 4),
              kineto_comms("allreduce", 1024, "BFloat16", 4, cat="kernel"),
              kineto_op("nccl:all_reduce", [[1024]], ["c10::BFloat16"], cat="user_annotation"),
              kineto_comms("all_to_all", 1024, "Float", 4), kineto_comms("gather", 16, "Float", 4),
              kineto_comms("barrier", 0, "Float", 4)]
    report = read_trace(kineto_file(tmp_path, events, rank=3, at_end=True))
    assert report.ranks == ["rank 3"]
    assert counts(report) == {("allreduce", 2048, 4): 1, ("alltoall", 1024, 4): 1}
    assert report.uncurved == {"gather": 1}
    assert report.skipped["GPU kernel event (its CPU-side record_param_comms is counted)"] == 1
    assert report.skipped["ProcessGroup annotation (its record_param_comms event is counted)"] == 1


def test_kineto_kernels_alone(tmp_path):
    events = [kineto_comms("_allgather_base", 256, "Float", 8, cat="kernel")] * 2
    assert counts(read_trace(kineto_file(tmp_path, events, rank=0))) == {("allgather", 1024, 8): 2}


def test_kineto_pytorch_20_annotations(tmp_path):
    events = [kineto_op("nccl:all_reduce", [[1024]], ["c10::BFloat16"]),
              kineto_op("nccl:all_reduce", [[1024]], ["c10::BFloat16"], cat="gpu_user_annotation"),
              kineto_op("nccl:_all_gather_base", [[256]], ["float"]),
              kineto_op("nccl:_reduce_scatter_base", [[4096]], ["c10::Half"]),
              kineto_op("nccl:all_reduce_coalesced", [[10], [6]], ["float", "float"]),
              kineto_op("nccl:all_to_all", [[64]], ["long int"]),
              kineto_op("nccl:send", [[7]], ["double"]), kineto_op("nccl:barrier", [], []),
              kineto_op("record_param_comms", [[1024], [], [], []], ["c10::BFloat16", "Int", "Int", "String"])]
    report = read_trace(kineto_file(tmp_path, events))
    assert report.ranks == ["pid 7"]  # no distributedInfo: the process of the trace's CPU events
    assert counts(report) == {("allreduce", 2048, None): 1, ("allreduce", 64, None): 1, ("allgather", 1024, None): 1,
                              ("reduce_scatter", 8192, None): 1, ("send", 56, None): 1}
    assert report.skipped[NO_GROUP] == 1
    grouped = read_trace(kineto_file(tmp_path, events), group_size=4)
    assert counts(grouped)[("alltoall", 128, 4)] == 1  # 64 int64 over 4 peers


def test_kineto_symmetric_memory(tmp_path):
    events = [kineto_op("symm_mem::multimem_all_reduce_", [[4096], [], []], ["c10::BFloat16", "String", "String"]),
              kineto_op("symm_mem::one_shot_all_reduce_copy", [[4096], [512], [], []],
                        ["c10::BFloat16", "float", "String", "String"]),
              kineto_op("symm_mem::fused_all_gather_matmul", [[8, 8]], ["float"]),
              kineto_kernel("void c10d::symmetric_memory::multimem_all_reduce_kernel<c10::BFloat16, 16>()")]
    report = read_trace(kineto_file(tmp_path, events, rank=0))
    assert counts(report) == {("allreduce", 8192, None): 1, ("allreduce", 2048, None): 1}
    assert report.uncurved == {"symm_mem::fused_all_gather_matmul": 1}
    op_and_kernel = read_trace(kineto_file(tmp_path, [events[0], events[3]], rank=0))
    assert op_and_kernel.skipped["symmetric-memory kernel multimem_all_reduce_kernel (its op is counted)"] == 1


def test_kineto_symmetric_kernels_without_ops_are_reported(tmp_path):
    events = [kineto_comms("allreduce", 4, "Float", 2),
              kineto_kernel("void c10d::symmetric_memory::two_shot_all_reduce_kernel<float>()")]
    report = read_trace(kineto_file(tmp_path, events, rank=0))
    assert report.skipped["symmetric-memory kernel two_shot_all_reduce_kernel (no sized op in the trace: "
                          "not counted)"] == 1


def test_kineto_bare_event_list(tmp_path):
    path = write(tmp_path / "t.json", [json.dumps([kineto_comms("broadcast", 3, "Long", 2)])])
    assert counts(read_trace(path)) == {("broadcast", 24, 2): 1}


def et_file(tmp_path, nodes, name="et.json"):
    head = {"schema": "1.1.1-chakra.0.0.4", "pid": 5150, "time": "2025-01-01 00:00:00", "start_ts": 1}
    return write(tmp_path / name, json_document(head, "nodes", nodes, {"finish_ts": 2}))


def test_execution_trace_with_collective_attributes(tmp_path):
    nodes = [et_op_node(2, "[pytorch|profiler|execution_trace|thread]", [], []),
             et_op_node(3, "c10d::allreduce_", [[[1024]]], ["GenericList[Tensor(c10::BFloat16)]"]),
             et_comms_node(4, "allreduce", 1024, "BFloat16", 8),
             et_op_node(5, "nccl:all_reduce", [[1024]], ["Tensor(c10::BFloat16)"]),
             et_comms_node(6, "reduce_scatter_tensor_coalesced", 4096, "Float", 8),
             et_op_node(7, "symm_mem::two_shot_all_reduce_", [[256], [], []], ["Tensor(float)", "String", "String"])]
    report = read_trace(et_file(tmp_path, nodes))
    assert report.format == "execution-trace" and report.ranks == ["pid 5150"]
    assert counts(report) == {("allreduce", 2048, 8): 1, ("allreduce", 1024, None): 1, ("reduce_scatter", 16384, 8): 1}
    assert report.skipped["ProcessGroup annotation (its record_param_comms node is counted)"] == 1
    assert "execution trace schema '1.1.1-chakra.0.0.4'" in report.notes


def test_execution_trace_before_collective_attributes(tmp_path):
    nodes = [et_op_node(3, "c10d::allgather_", [[[[64], [64]]], [[64]]], ["GenericList[...]", "GenericList[...]"]),
             et_op_node(4, "nccl:all_gather", [[64]], ["Tensor(c10::Half)"])]
    assert counts(read_trace(et_file(tmp_path, nodes))) == {("allgather", 128, None): 1}


@pytest.mark.parametrize("prefix", ["worker-1: ", "[1,0]<stdout>:", "[1,0]<stdout>: ", "0: ", " 0: ",
                                    "[default0]:", "worker-1: [default0]:"])
def test_deepspeed_summary_through_launchers(tmp_path, prefix):
    table = deepspeed_summary({"all_reduce | [Caller Func: allreduce_bucket]": [("24.0 MB", 40)],
                               "all_gather_into_tensor": [("6.0 MB", 80)], "gather": [("1.0 KB", 3)]})
    path = write(tmp_path / "ds.log", [prefix + line + "\n" for line in ["step 1"] + table])
    report = read_trace(path)
    assert counts(report) == {("allreduce", 25_165_824, None): 40, ("allgather", 6_291_456, None): 80}
    assert report.uncurved == {"gather": 3}


def test_deepspeed_verbose_ranks(tmp_path):
    lines = [deepspeed_verbose("all_reduce", "24.0 MB", rank=0), deepspeed_verbose("all_reduce", "24.0 MB"),
             deepspeed_verbose("broadcast", "2.0 KB", caller="init")]
    report = read_trace(write(tmp_path / "ds.log", ["[1,0]<stdout>: " + line + "\n" for line in lines]))
    assert report.ranks == ["rank 0"]
    assert counts(report) == {("allreduce", 25_165_824, None): 2, ("broadcast", 2048, None): 1}


def test_odd_values_where_names_and_sizes_belong_are_unreadable(tmp_path):
    events = [kineto_comms("allreduce", 8, "Float", 2),
              {"ph": "X", "cat": "cpu_op", "name": "record_param_comms",
               "args": {"Collective name": {"x": [1]}, "In msg nelems": [8], "dtype": ["Float"], "Group size": 2}},
              kineto_op("nccl:all_reduce", {"dims": 1}, ["float"]), "not an event"]
    report = read_trace(kineto_file(tmp_path, events, rank=0))
    assert report.total_calls == 1 and report.unreadable == 2  # the object for a name, the string for an event
    assert report.skipped["ProcessGroup annotation (its record_param_comms event is counted)"] == 1
    annotations_only = read_trace(kineto_file(tmp_path, events[2:] + [kineto_op("nccl:send", [[2]], ["float"])]))
    assert annotations_only.total_calls == 1 and annotations_only.unreadable == 2  # the odd shape, the string


def test_nccl_profiler_odd_values_are_unreadable(tmp_path):
    odd = profiler_event("AllReduce", 8, "ncclFloat32").replace('"Count": 8', '"Count": [8]')
    report = read_trace(profiler_file(tmp_path, [odd, profiler_event("AllReduce", 8, "ncclFloat32")]))
    assert report.total_calls == 1 and report.unreadable == 1
