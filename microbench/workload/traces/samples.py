"""Synthetic trace lines and events in each format the readers read, built from the formats' own sources.

For the tests and scripts/bench_traces.py: every input they read is made here, never copied from anyone's
logs. Each builder cites what it imitates (file and version); docs/workload-traces.md has the list.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator


def nccl_call(op: str, count: int, dtype: int, comm: str, nranks: int, *, host: str = "node1", pid: int = 100,
              tid: int | None = None, dev: int = 0, opcount: int = 0, globalrank: int | None = None,
              prefix: bool = True, root: int = 0) -> str:
    """An NCCL_DEBUG=INFO call line (NCCL enqueue.cc 2.4-2.30; with ``globalrank``, RCCL's); for Send and Recv
    ``root`` is the peer (ncclSend/ncclRecv pass it as the ncclInfo's root)."""
    head = f"{host}:{pid}:{tid if tid is not None else pid} [{dev}] " if prefix else ""
    tail = f" task 0 globalrank {globalrank}" if globalrank is not None else ""
    return (f"{head}NCCL INFO {op}: opCount {opcount:x} sendbuff 0x7f00{dev}000 recvbuff 0x7f00{dev}800 count "
            f"{count} datatype {dtype} op 0 root {root} comm {comm} [nranks={nranks}] stream 0x5600{dev}{tail}")


def nccl_init(comm: str, rank: int, nranks: int, *, host: str = "node1", pid: int = 100, dev: int = 0) -> str:
    """An NCCL 2.18+ "Init COMPLETE" line (init.cc): names the communicator's rank and CUDA device."""
    return (f"{host}:{pid}:{pid} [{dev}] NCCL INFO ncclCommInitRank comm {comm} rank {rank} nranks {nranks} "
            f"cudaDev {dev} nvmlDev {dev} busId {dev + 1}0000 commId 0x1f2e3d4c5b6a7988 - Init COMPLETE")


def profiler_event(name: str, count: int, datatype, *, cat: str = "COLL", pid: int = 4242, comm: int = 8513,
                   rank: int = 0, peer: int | None = None, ident: int = 0) -> str:
    """A begin event line of NCCL's example profiler plugin (print_event.cc; datatype a code in 2.23)."""
    dt = json.dumps(datatype)
    if cat == "P2P":
        args = f'"CommHash": {comm}, "Rank": {rank}, "Peer": {peer or 0}, "Count": {count}, "Datatype": {dt}'
    else:
        args = (f'"SeqNum": {ident}, "CommHash": {comm}, "Rank": {rank}, "Count": {count}, "Datatype": {dt}, '
                f'"Algorithm": "RING", "Protocol": "SIMPLE", "nChannels": 2')
    return (f'{{"name": "{name}", "cat": "{cat}", "ph": "b", "id": {ident}, "pid": {pid}, "tid": 1, '
            f'"ts": {ident}.500000, "args": {{{args}}}}},')


def profiler_end(name: str, *, cat: str = "COLL", pid: int = 4242, ident: int = 0) -> str:
    return f'{{"name": "{name}", "cat": "{cat}", "ph": "e", "id": {ident}, "pid": {pid}, "tid": 1, "ts": {ident}.9}},'


def profiler_api_event_228(name: str, count: int, *, pid: int = 4242, ident: int = 0) -> str:
    """A COLL_API event as NCCL 2.28's example prints it: datatype and stream unquoted (not JSON)."""
    return (f'{{"name": "{name}", "cat": "COLL_API", "ph": "b", "id": {ident}, "pid": {pid}, "tid": 1, '
            f'"ts": {ident}.1, "args": {{"count": {count}, "datatype": ncclFloat32, "root": 0, '
            f'"GraphCaptured":0, "Stream": 0x5617e2a0}}}},')


def kineto_comms(name: str, nelems: int, dtype: str, group: int, *, cat: str = "cpu_op", pid: int = 7,
                 ts: int = 0, in_split: str = "[]", out_split: str = "[]") -> dict:
    """A record_param_comms CPU op (or, with cat "kernel", an NCCL kernel) with collective metadata; the split
    sizes as torch/csrc/profiler/util.cpp saveNcclMeta writes them (format_list: "[4, 2, 2]", text)."""
    return {"ph": "X", "cat": cat, "name": "record_param_comms" if cat != "kernel" else "ncclDevKernel_Generic",
            "pid": pid, "tid": pid, "ts": ts, "dur": 5,
            "args": {"External id": ts, "Collective name": name, "In msg nelems": nelems, "Out msg nelems": nelems,
                     "Group size": group, "dtype": dtype, "In split size": in_split, "Out split size": out_split,
                     "Process Group Name": "0", "Process Group Description": "default_pg",
                     "Process Group Ranks": str(list(range(group)))}}


def kineto_op(name: str, dims: list, types: list, *, cat: str = "cpu_op", pid: int = 7, ts: int = 0) -> dict:
    """An op recorded with record_shapes=True: a ProcessGroup annotation ("nccl:all_reduce", cat
    user_annotation, as PyTorch 2.0 writes them and gloo still does) or any op ("symm_mem::...")."""
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": pid, "ts": ts, "dur": 3,
            "args": {"External id": ts, "Record function id": ts, "Input Dims": dims, "Input type": types,
                     "Ev Idx": ts}}


def kineto_kernel(name: str, *, ts: int = 0) -> dict:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": 2,
            "args": {"External id": ts, "device": 0, "stream": 7, "correlation": ts, "grid": [8, 1, 1]}}


def et_comms_node(ident: int, name: str, nelems: int, dtype: str, pg_size: int, in_split: str = "[]") -> dict:
    """An execution-trace record_param_comms node with the collective attributes of PyTorch 2.4+."""
    attrs = [("rf_id", "uint64", ident), ("fw_parent", "uint64", 0), ("seq_id", "int64", -1),
             ("scope", "uint64", 7), ("tid", "uint64", 1), ("fw_tid", "uint64", 0), ("op_schema", "string", ""),
             ("collective_name", "string", name), ("dtype", "string", dtype), ("in_msg_nelems", "uint64", nelems),
             ("out_msg_nelems", "uint64", nelems), ("in_split_size", "string", in_split),
             ("out_split_size", "string", "[]"), ("pg_name", "string", "0"), ("pg_desc", "string", "default_pg"),
             ("pg_size", "uint64", pg_size)]
    return {"id": ident, "name": "record_param_comms", "ctrl_deps": 2,
            "inputs": {"values": [], "shapes": [], "types": [], "strides": []},
            "outputs": {"values": [], "shapes": [], "types": [], "strides": []},
            "attrs": [{"name": n, "type": t, "value": v} for n, t, v in attrs]}


def et_op_node(ident: int, name: str, shapes: list, types: list) -> dict:
    """An execution-trace op node (``nccl:all_reduce``, ``symm_mem::...``, ``aten::mm``) with its inputs."""
    return {"id": ident, "name": name, "ctrl_deps": 2,
            "inputs": {"values": [[ident, ident, 0, 1, 4, "cuda:0"]] * len(shapes), "shapes": shapes, "types": types,
                       "strides": [[1] for _ in shapes]},
            "outputs": {"values": [], "shapes": [], "types": [], "strides": []},
            "attrs": [{"name": "rf_id", "type": "uint64", "value": ident},
                      {"name": "op_schema", "type": "string", "value": ""}]}


def json_document(head: dict, key: str, items: Iterable[dict], tail: dict | None = None) -> Iterator[str]:
    """A JSON object written in pieces: the ``head`` keys, then ``key`` as an array of ``items``, then ``tail``."""
    opening = json.dumps(head)[:-1]
    yield (opening + ", " if head else "{") + json.dumps(key) + ": [\n"
    first = True
    for item in items:
        yield ("" if first else ",\n") + json.dumps(item)
        first = False
    closing = json.dumps(tail or {})[1:]
    yield "\n]" + (", " + closing if tail else "}") + "\n"


def deepspeed_verbose(name: str, size: str, *, rank: int | None = None, caller: str | None = None) -> str:
    """A comms-logger verbose line through log_dist (``rank=N | `` as DeepSpeed printed it until mid-2023)."""
    who = f"rank={rank} | " if rank is not None else ""
    op = f"{name} | [Caller Func: {caller}]" if caller else name
    return (f"[2024-05-01 10:00:01,000] [INFO] [logging.py:96:log_dist] [Rank 0] {who}comm op: {op} | "
            f"time (ms): 9.46 | msg size: {size} | algbw (Gbps): 1204.52 | busbw (Gbps): 1129.23")


def deepspeed_summary(rows: dict[str, list[tuple[str, int]]]) -> list[str]:
    """A log_summary() table (comms_logging.py log_all): header, op-name lines, indented size rows."""
    cols = ("Comm. Op", "Message Size", "Count", "Total Latency(ms)", "Avg Latency(ms)", "tput_avg (Gbps)",
            "busbw_avg (Gbps)")
    lines = ["".join(f"{c: <20}" for c in cols)]
    for name, sizes in rows.items():
        lines.append(name)
        lines += [f"{' ': <20}{size: <20}{count: <20}{1.5: <20.2f}{0.5: <20.2f}{10.0: <20.2f}{9.0: <20.2f}"
                  for size, count in sizes]
    return lines
