"""The record model: every record type microbench writes or reads, declared once as typed msgspec structs.

A record is one JSON object on one line of a JSON Lines file (docs/records.md). This module is the one place
that says what each type holds: field names, types, units, ranges, and which fields microbench's own records
always write (``own_required``). What the types cannot say, the relations physics requires between figures,
is ``records.relations`` (where ``make`` builds a record that has both). Everything else is derived from the two:

- the builders (``records.build``, ``importers.to_records``) fill these types (``relations.make``);
- the writer encodes only records that pass ``make``;
- both read paths decode with them: the row reader (``records.reader``) with the full types, the columnar
  reader (``results.scan``) with a projection of the same types (``records.projection``), so a field's type
  and range are the same in both, and the relations are checked on rows and on columns by the same code;
- the JSON Schema (``schema.json``, for other tools) is printed from it (``records.schema``;
  ``python -m microbench.records.schema`` rewrites the file, and a test keeps it current).

Readers skip fields they do not know (a newer microbench may add some) and refuse records of a schema newer
than ``SCHEMA_VERSION``.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Optional, Union

import msgspec
from msgspec import UNSET, Meta, UnsetType

SCHEMA_VERSION = 1
#: The shortest time any timer microbench uses can tell from zero (us): perf_counter_ns, MPI_Wtime and CUDA
#: events all count in nanoseconds or coarser. A latency below it is not a measurement.
CLOCK_FLOOR_US = 1e-3
#: The longest a measured call can take (us): about 116 days, longer than any batch job may run (a hung call is
#: ended by the watchdog or the job's limit long before). A duration above it is not a measurement.
MAX_DURATION_US = 1e13
MAX_COUNT = 2 ** 62  #: the largest size, count or rank number a record may hold (int64 columns)
#: The fastest a bus bandwidth or algorithm bandwidth can be (GB/s): a petabyte per second, about 500 times the
#: fastest per-GPU link of 2026. A record above it is refused; below it, a figure must agree with its size and time.
MAX_BANDWIDTH_GBPS = 1e6
#: Relative tolerance of the relations between stored figures (float rounding in the writer's arithmetic).
REL_TOL = 1e-6
#: The biggest run line a reader takes (bytes): a run on 16,384 hosts is under 1 MiB.
MAX_RUN_LINE_BYTES = 4 << 20

_ISO = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$"

# ------------------------------------------------------------------------------------------ field types
RunId = Annotated[str, Meta(min_length=1, description="the run's id (12 hex digits from microbench; a tool's hash for imports)")]
Time = Annotated[str, Meta(pattern=_ISO, description="ISO 8601 UTC time")]
Bytes = Annotated[int, Meta(ge=0, le=MAX_COUNT, description="bytes")]
Count = Annotated[int, Meta(ge=0, le=MAX_COUNT)]
Positive = Annotated[int, Meta(ge=1, le=MAX_COUNT)]
Seconds = Annotated[float, Meta(ge=0, description="seconds")]
Micros = Annotated[float, Meta(ge=0, le=MAX_DURATION_US, description="microseconds")]
Latency = Annotated[float, Meta(ge=CLOCK_FLOOR_US, le=MAX_DURATION_US,
                                description="microseconds, from the clock floor (1 ns) to about 116 days")]
Bandwidth = Annotated[float, Meta(ge=0, le=MAX_BANDWIDTH_GBPS, description="GB/s (1 GB = 1e9 B)")]
Percent = Annotated[float, Meta(ge=0, le=100, description="per cent")]
Share = Annotated[float, Meta(ge=0, le=1, description="a fraction from 0 to 1")]
#: a number of units that may be whole or not (kept as written: 8 stays 8, not 8.0)
Amount = Union[Annotated[int, Meta(ge=0, le=MAX_COUNT)], Annotated[float, Meta(ge=0, le=MAX_COUNT)]]
Unknown = Any  #: a block whose inside this model does not describe (kept as JSON values)


class Block(msgspec.Struct, kw_only=True, omit_defaults=False):
    """A nested object of a record (no type tag)."""


class Record(msgspec.Struct, kw_only=True, tag_field="type"):
    """A line of a records file. ``own_required``: fields microbench's own records always have (an imported
    record, which carries ``source``, may leave them out: the other tool did not say)."""

    own_required: ClassVar[tuple[str, ...]] = ()


# ------------------------------------------------------------------------------------------ shared blocks
class Source(Block, kw_only=True):
    """Where an imported record came from (``microbench import``, docs/import.md)."""

    tool: str
    version: Optional[str] | UnsetType = UNSET
    file: Optional[str] | UnsetType = UNSET
    sha256: Optional[str] | UnsetType = UNSET
    line: Optional[Count] | UnsetType = UNSET
    time_from: Optional[str] | UnsetType = UNSET
    start_time_local: Optional[str] | UnsetType = UNSET
    assumed: list[str] | UnsetType = UNSET
    definitions: dict[str, Unknown] | UnsetType = UNSET
    skipped: list[Unknown] | UnsetType = UNSET
    unknown: list[str] | UnsetType = UNSET
    values: dict[str, Unknown] | UnsetType = UNSET
    derived: dict[str, Unknown] | UnsetType = UNSET
    json_version: Optional[Unknown] | UnsetType = UNSET


class LatencyStats(Block, kw_only=True):
    """Latency statistics (us). avg, min, max: mean, minimum and maximum across ranks of each rank's mean
    (OMB -f); p10-p99: nearest-rank percentiles of every sample of every timing rank; fastest, slowest: the
    single fastest and slowest sample. Imported records have the statistics their tool printed."""

    avg: Latency | UnsetType = UNSET
    min: Latency | UnsetType = UNSET
    max: Latency | UnsetType = UNSET
    p10: Latency | UnsetType = UNSET
    p50: Latency | UnsetType = UNSET
    p90: Latency | UnsetType = UNSET
    p99: Latency | UnsetType = UNSET
    fastest: Latency | UnsetType = UNSET
    slowest: Latency | UnsetType = UNSET
    samples: Count | UnsetType = UNSET
    timing_ranks: Count | UnsetType = UNSET
    over: str | UnsetType = UNSET

    own_required: ClassVar[tuple[str, ...]] = ("avg", "min", "max")


LATENCY_STATS = ("avg", "min", "max", "p10", "p50", "p90", "p99", "fastest", "slowest")


class AcrossMaxima(Block, kw_only=True):
    values: list[Micros]
    min: Micros
    p50: Micros
    max: Micros


class FirstCall(Block, kw_only=True):
    """The first call on fresh buffers (us), across ranks."""

    max: Micros
    min: Micros
    avg: Micros
    samples: Positive | UnsetType = UNSET
    per_rank: dict[str, Micros] | UnsetType = UNSET
    max_across_ranks: AcrossMaxima | UnsetType = UNSET


class RankTime(Block, kw_only=True):
    rank: Count
    host: str
    mean_us: Micros


class StandingOut(Block, kw_only=True):
    label: str
    mean_us: Micros
    z: float
    side: Literal["slow", "fast"]


class Stragglers(Block, kw_only=True):
    """Straggler attribution of one size: the slowest and fastest rank by per-rank mean latency, their ratio,
    and per-node means (at most 16 listed)."""

    slowest: RankTime
    fastest: RankTime
    skew: Optional[Annotated[float, Meta(ge=1, description="slowest mean / fastest mean")]]
    unit: Literal["host", "rank"]
    nodes: Count
    node_means_us: Annotated[dict[str, Micros], Meta(max_length=16)]
    listed: Literal["all", "extremes"]
    node_skew: Optional[Annotated[float, Meta(ge=1)]]
    outliers: Annotated[list[StandingOut], Meta(max_length=16)]
    outlier_rule: dict[str, Unknown]


class CheckFailure(Block, kw_only=True):
    label: str
    mismatches: Positive


class GraphReplays(Block, kw_only=True):
    """CUDA graph replays of the timed iterations."""

    iterations_per_replay: Positive
    replays: Count
    graphs: Positive | UnsetType = UNSET


class LaunchTimes(Block, kw_only=True):
    """CUDA-event timing: host launch time and device time per call (us); ``bound``: the host's launch
    rate, not the collective, set the samples."""

    host_us_per_call: Micros
    device_us_per_call: Micros
    bound: bool
    # issue 44: the paired loop's gate (--sync barrier, --flush, --check on NCCL)
    gate_us: Annotated[float, Meta(ge=0, le=MAX_DURATION_US, description="paired timing: the median device spin "
                                   "each start event waited behind while the host launched the call (us)")] | UnsetType = UNSET
    ungated: Annotated[int, Meta(ge=0, le=MAX_COUNT, description="paired timing: samples whose launch outlasted "
                                 "their gate (they hold host launch time)")] | UnsetType = UNSET
    samples: Annotated[int, Meta(ge=0, le=MAX_COUNT, description="paired timing: samples timed")] | UnsetType = UNSET


class TimeBudget(Block, kw_only=True):
    """``--time-budget``: the budget (s) and the slowest rank's per-iteration time (s) the count came from."""

    seconds: Annotated[float, Meta(gt=0)]
    per_iteration_s: Optional[Seconds]


class Spread(Block, kw_only=True):
    """avg, min and max across ranks of per-rank means."""

    avg: Micros
    min: Micros
    max: Micros


class SignedSpread(Block, kw_only=True):
    avg: float
    min: float
    max: float


class OverlapFamily(Block, kw_only=True):
    """One overlap formula's figures (%): avg, min and max across ranks; ``of_means``: the formula on the
    cross-rank means; ``at_slowest_rank``; ``p50_based``: the mean across ranks of the formula on medians."""

    avg: Percent
    min: Percent
    max: Percent
    of_means: Percent | UnsetType = UNSET
    at_slowest_rank: Percent | UnsetType = UNSET
    p50_based: Percent | UnsetType = UNSET


class OverlapPct(Block, kw_only=True):
    omb: OverlapFamily
    imb: OverlapFamily


class Kernel(Block, kw_only=True):
    name: Literal["flops", "stream", "gemm"]
    what: str | UnsetType = UNSET
    units_per_chunk: Positive
    chunks: Positive
    flops_per_unit: Amount
    bytes_per_unit: Amount
    working_set_bytes: Count | UnsetType = UNSET
    matrix_order: Positive | UnsetType = UNSET


class Overlap(Block, kw_only=True):
    """Non-blocking benchmarks: the size's overlapped iterations (docs/overlap.md); times in microseconds."""

    kernel: Kernel
    compute_ratio: Optional[Annotated[float, Meta(ge=0)]] | UnsetType = UNSET
    compute_target_us: Micros
    num_tests: Count
    overall_us: LatencyStats
    compute_us: Spread
    post_us: Spread
    test_us: Spread
    wait_us: Spread
    pure_us: Spread
    calibrated_us: Spread
    calibration_error: SignedSpread
    overlap_pct: OverlapPct


class PairOutlier(Block, kw_only=True):
    pair: Annotated[list[Count], Meta(min_length=2, max_length=2)]
    labels: Annotated[list[str], Meta(min_length=2, max_length=2)]
    value: Annotated[float, Meta(ge=0)]
    z: float


class NodeOutlier(Block, kw_only=True):
    index: Count
    label: str
    row_median: Annotated[float, Meta(ge=0)]
    z: float


class OutlierRule(Block, kw_only=True):
    statistic: str
    direction: str
    z_limit: Annotated[float, Meta(gt=0)]
    median: Optional[float] | UnsetType = UNSET
    mad: Optional[float] | UnsetType = UNSET
    threshold: Optional[float] | UnsetType = UNSET
    cells: Count | UnsetType = UNSET
    nodes: Count | UnsetType = UNSET
    mad_of: str | UnsetType = UNSET
    # issue 39: a pairs test measured in repeated passes flags only what stands out in a majority of them
    passes: Count | UnsetType = UNSET
    passes_needed: Count | UnsetType = UNSET


# ------------------------------------------------------------------------------------------ issue 43: links and peaks
class PcieLink(Block, kw_only=True):
    """A PCIe link: speed (GT/s) and width now and at most, its generation, and the data rate per direction
    (GB/s) of the maximum speed at the current width (an idle device trains its speed down)."""

    speed_gts: Optional[float] | UnsetType = UNSET
    width: Optional[Count] | UnsetType = UNSET
    max_speed_gts: Optional[float] | UnsetType = UNSET
    max_width: Optional[Count] | UnsetType = UNSET
    generation: Optional[Count] | UnsetType = UNSET
    current_generation: Optional[Count] | UnsetType = UNSET
    gbps: Optional[Bandwidth] | UnsetType = UNSET


class NetInterface(Block, kw_only=True):
    """A network interface of a host (sysfs), its IPv4 address, and the rate a qdisc shapes it to (Mbit/s)."""

    name: str
    kind: Optional[str] | UnsetType = UNSET
    operstate: Optional[str] | UnsetType = UNSET
    speed_mbps: Optional[Annotated[int, Meta(ge=1, description="Mbit/s, as sysfs reports it")]] | UnsetType = UNSET
    shaped_mbps: Optional[Annotated[float, Meta(gt=0, description="Mbit/s, the root qdisc's rate")]] | UnsetType = UNSET
    shaping: Optional[str] | UnsetType = UNSET
    virtual: Optional[bool] | UnsetType = UNSET
    pci: Optional[str] | UnsetType = UNSET
    pcie: Optional[PcieLink] | UnsetType = UNSET
    ipv4: Optional[str] | UnsetType = UNSET


class RdmaPort(Block, kw_only=True):
    """An InfiniBand or RoCE port (``/sys/class/infiniband``): state, rate (Gbit/s), link layer, PCI, netdev."""

    device: str
    port: Count
    state: Optional[str] | UnsetType = UNSET
    phys_state: Optional[str] | UnsetType = UNSET
    rate: Optional[str] | UnsetType = UNSET
    rate_gbps: Optional[Annotated[float, Meta(gt=0, description="Gbit/s")]] | UnsetType = UNSET
    link_layer: Optional[str] | UnsetType = UNSET
    pci: Optional[str] | UnsetType = UNSET
    pcie: Optional[PcieLink] | UnsetType = UNSET
    netdev: Optional[str] | UnsetType = UNSET


class NvLinks(Block, kw_only=True):
    """A GPU's active NVLinks: count, version, the data rate per link and direction of that version (GB/s)
    and their total (the GPU's NVLink peak per direction), the signalling rate NVML reports per link, and
    how many links reach each far end (a PCI bus id, or ``switch``)."""

    active_links: Count
    version: Optional[Count] | UnsetType = UNSET
    gbps_per_link: Optional[Bandwidth] | UnsetType = UNSET
    gbps: Optional[Bandwidth] | UnsetType = UNSET
    nvml_gbps_per_link: Optional[Bandwidth] | UnsetType = UNSET
    peers: dict[str, Count] | UnsetType = UNSET


class GpuLinks(Block, kw_only=True):
    """A GPU of a host (NVML): PCIe and NVLinks, and the NIC nearest it (``nic_relation`` as nvidia-smi topo)."""

    index: Optional[Count] | UnsetType = UNSET
    name: Optional[str] | UnsetType = UNSET
    bus_id: Optional[str] | UnsetType = UNSET
    pcie: Optional[PcieLink] | UnsetType = UNSET
    nvlink: Optional[NvLinks] | UnsetType = UNSET
    nearest_nic: Optional[str] | UnsetType = UNSET
    nic_relation: Optional[str] | UnsetType = UNSET


class HostLinks(Block, kw_only=True):
    """One host's links, read once by its lowest rank (``microbench.cluster.links``)."""

    read_from: str | UnsetType = UNSET
    net: list[NetInterface] | UnsetType = UNSET
    rdma: list[RdmaPort] | UnsetType = UNSET
    gpus: list[GpuLinks] | UnsetType = UNSET
    selectors: dict[str, str] | UnsetType = UNSET
    nvml: Optional[str] | UnsetType = UNSET
    notes: list[str] | UnsetType = UNSET


class PathPeak(Block, kw_only=True):
    """The peak of the path a run's data crossed (``microbench.cluster.path_peak``): its tier, GB/s per
    direction (null: unknown), and the link that sets it (or why it is unknown)."""

    tier: Literal["shared memory", "nvlink", "pcie", "network"]
    gbps: Optional[Bandwidth]
    link: str


class ResultPeak(PathPeak, kw_only=True):
    """A result's busbw against its path's peak: ``gbps`` is the peak for this benchmark (twice the link's for
    a bidirectional one), ``share`` = busbw / gbps (null: no peak known, or ``beyond_wire``: NCCL's
    algorithm reduced inside a switch, so busbw can exceed the wire)."""

    share: Optional[Annotated[float, Meta(ge=0, le=1e6, description="busbw / the path's peak")]]
    beyond_wire: Optional[str] | UnsetType = UNSET


class NcclAlgorithm(Block, kw_only=True):
    """The algorithm and protocol NCCL chose for a result's calls (its own output: the TUNING lines of
    ``NCCL_DEBUG=INFO``, or the Inspector plugin): the most frequent, and every other one seen with its count."""

    algorithm: str
    protocol: Optional[str] | UnsetType = UNSET
    calls: Optional[Count] | UnsetType = UNSET
    others: dict[str, Count] | UnsetType = UNSET
    source: str


# ------------------------------------------------------------------------------------------ run
class MpiLibrary(Block, kw_only=True):
    """The MPI library the ranks loaded (``MPI_Get_library_version``), its standard and ABI."""

    library_version: str | UnsetType = UNSET
    standard: str | UnsetType = UNSET
    abi: str | UnsetType = UNSET
    library_path: Optional[str] | UnsetType = UNSET
    bundled_wheel: Optional[str] | UnsetType = UNSET
    thread_level: Optional[str] | UnsetType = UNSET


class TorchFacts(Block, kw_only=True):
    """torch's version and the benchmark's torch.distributed backend (and NCCL or RCCL behind ``nccl``)."""

    version: str | UnsetType = UNSET
    backend: str | UnsetType = UNSET
    available: dict[str, bool] | UnsetType = UNSET  #: the backends this build of torch has
    cuda: Optional[str] | UnsetType = UNSET  #: torch.version.cuda
    hip: Optional[str] | UnsetType = UNSET  #: torch.version.hip (a ROCm build), else null
    library: Optional[Literal["NCCL", "RCCL"]] | UnsetType = UNSET
    device: Optional[str] | UnsetType = UNSET
    nccl_version: Optional[str] | UnsetType = UNSET
    nccl_runtime_connect: str | UnsetType = UNSET
    device_count: Count | UnsetType = UNSET
    device_index: Optional[Count] | UnsetType = UNSET
    device_name: Optional[str] | UnsetType = UNSET


class RankGpu(Block, kw_only=True):
    host: str
    local_rank: Optional[Count]
    index: Optional[Count] | UnsetType = UNSET
    uuid: Optional[str]
    bus_id: Optional[str]
    # issue 44
    nccl_hostid: Annotated[str, Meta(description="the NCCL_HOSTID this rank ran under (NCCL takes it for the "
                                     "host: ranks with different ids may share a GPU)")] | UnsetType = UNSET


class DeviceFacts(Block, kw_only=True):
    """The run's device: ``kind`` cpu, cuda, or rocm (HIP behind torch.cuda; RCCL behind torch's nccl)."""

    kind: Literal["cpu", "cuda", "rocm"] | UnsetType = UNSET
    buffer: str | UnsetType = UNSET
    index: Optional[int] | UnsetType = UNSET
    name: Optional[str] | UnsetType = UNSET
    count: Count | UnsetType = UNSET
    l2_bytes: Optional[Bytes] | UnsetType = UNSET
    staged_through_host: bool | UnsetType = UNSET
    uuid: Optional[str] | UnsetType = UNSET
    bus_id: Optional[str] | UnsetType = UNSET
    selected_before_mpi_init: Optional[bool] | UnsetType = UNSET
    ranks: list[RankGpu] | UnsetType = UNSET


class Progress(Block, kw_only=True):
    """What lets a posted collective advance while the rank computes (docs/overlap.md)."""

    thread_level: Optional[str]
    variables: dict[str, str]
    asynchronous: Optional[bool]
    how: str


class Conditions(Block, kw_only=True):
    huge_pages: str | UnsetType = UNSET
    thp: Optional[str] | UnsetType = UNSET
    page_size: Count | UnsetType = UNSET
    timer: str | UnsetType = UNSET
    cpu: Optional[str] | UnsetType = UNSET
    cpus_per_rank: Count | UnsetType = UNSET
    percentile_rel_error: Annotated[float, Meta(ge=0)] | UnsetType = UNSET
    cache_bytes: Optional[Bytes] | UnsetType = UNSET
    cache_bytes_from: str | UnsetType = UNSET
    env: dict[str, str] | UnsetType = UNSET
    progress: Progress | UnsetType = UNSET


# ------------------------------------------------------------------------------------------ issue 39: machine state
CpuShare = Annotated[float, Meta(ge=0, le=MAX_COUNT, description="CPUs' worth of time (1.0 = one CPU busy throughout)")]


class BusyProcess(Block, kw_only=True):
    """A process other than the run's own that used CPU time during the window."""

    pid: Count
    name: str
    cpus: CpuShare


class GpuProcess(Block, kw_only=True):
    """A process other than the run's own with a context on one of the host's GPUs."""

    pid: Count
    name: str
    gpu: Optional[str]  #: the GPU's UUID (or index) as the driver names it
    used_bytes: Optional[Bytes]


class MachineState(Block, kw_only=True):
    """What else the host was doing (``cluster/machine.py``): load, steal and the other busy processes over a
    window (at the start: the run's setup; at the end: the whole run), and on GPUs the other processes on them."""

    host: str
    time_utc: Time
    cpus: Positive  #: CPUs online
    load_avg: Annotated[list[Annotated[float, Meta(ge=0)]], Meta(min_length=3, max_length=3,
                                                                 description="1, 5 and 15 minute load averages")]
    running: Count  #: runnable tasks at that moment (this run's ranks included)
    window_s: Seconds | UnsetType = UNSET  #: the window the CPU figures are over
    others_cpus: CpuShare | UnsetType = UNSET  #: CPU time of every process but the run's own over the window
    steal_cpus: CpuShare | UnsetType = UNSET  #: CPU time the hypervisor gave to other guests over the window
    busy: list[BusyProcess] | UnsetType = UNSET  #: the other processes that used the most CPU (at most 5)
    gpu_processes: list[GpuProcess] | UnsetType = UNSET  #: other processes on the host's GPUs (GPU runs)


class PerLaunch(Block, kw_only=True):
    """Values that differ between launches by construction, or only steer how microbench shows and reads things
    (``cluster/conditions.py`` lists them with reasons): kept apart from ``conditions``, never a cause of a step."""

    env: dict[str, str] | UnsetType = UNSET


class RunOptionsBlock(Block, kw_only=True):
    """The run's options as ``RunOptions`` holds them (``options.py``); only the two listed are typed here."""

    benchmarks: list[str] | UnsetType = UNSET
    sizes: list[Bytes] | UnsetType = UNSET


class RunRecord(Record, tag="run", kw_only=True):
    """The first line of a run: what ran where, on which libraries, under which conditions and options."""

    schema: Annotated[int, Meta(ge=1, le=SCHEMA_VERSION)]
    run_id: RunId
    microbench_version: str | UnsetType = UNSET
    time_utc: Time | UnsetType = UNSET
    command: str | UnsetType = UNSET
    backend: str
    ranks: Positive
    hosts: list[str] | UnsetType = UNSET
    ranks_per_host: dict[str, Positive] | UnsetType = UNSET
    launcher: Optional[str] | UnsetType = UNSET
    slurm: Optional[dict[str, str]] | UnsetType = UNSET
    mpi: Optional[MpiLibrary] | UnsetType = UNSET
    torch: Optional[TorchFacts] | UnsetType = UNSET
    device: DeviceFacts | UnsetType = UNSET
    versions: dict[str, str] | UnsetType = UNSET
    version_mismatch: list[str] | UnsetType = UNSET
    conditions: Conditions | UnsetType = UNSET
    options: dict[str, Unknown] | UnsetType = UNSET
    source: Source | UnsetType = UNSET
    # issue 43: each host's links and the peak of the path the run's data crossed
    links: dict[str, HostLinks] | UnsetType = UNSET
    path_peak: Optional[PathPeak] | UnsetType = UNSET
    # issue 39: what else each host was doing at the start, and the per-launch values kept apart from conditions
    machine: list[MachineState] | UnsetType = UNSET
    per_launch: PerLaunch | UnsetType = UNSET

    own_required: ClassVar[tuple[str, ...]] = (
        "microbench_version", "time_utc", "command", "hosts", "ranks_per_host", "launcher", "mpi", "torch",
        "device", "versions", "version_mismatch", "conditions", "options")


# ------------------------------------------------------------------------------------------ result
class ResultRecord(Record, tag="result", kw_only=True):
    """One measured (benchmark, size, configuration): latency statistics, bandwidths, the conditions.

    algbw = ``algbw_bytes`` / avg latency and busbw = algbw x ``busbw_factor`` (nccl-tests' definitions,
    docs/definitions.md); ``pairs`` records (the pairwise link test) add a matrix and its outliers."""

    run_id: RunId
    benchmark: str
    metric: Literal["latency", "bandwidth"] | UnsetType = UNSET
    backend: str
    size_bytes: Bytes
    send_bytes: Optional[Bytes] | UnsetType = UNSET
    recv_bytes: Optional[Bytes] | UnsetType = UNSET
    ranks: Positive
    dtype: Optional[str] | UnsetType = UNSET
    op: Optional[str] | UnsetType = UNSET
    in_place: Optional[bool] | UnsetType = UNSET
    iterations: Optional[Count] | UnsetType = UNSET
    warmup: Optional[Count] | UnsetType = UNSET
    latency_us: LatencyStats
    algbw_gbps: Optional[Bandwidth]
    busbw_gbps: Optional[Bandwidth]
    algbw_bytes: Optional[Amount] | UnsetType = UNSET
    busbw_factor: Optional[Annotated[float, Meta(ge=0, le=1e6)]] | UnsetType = UNSET
    check: Optional[Literal["pass", "fail"]] | UnsetType = UNSET
    first_call_us: Optional[FirstCall] | UnsetType = UNSET
    loop: Optional[str] | UnsetType = UNSET
    call_path: Optional[str] | UnsetType = UNSET
    timer: Optional[str] | UnsetType = UNSET
    device: Optional[str] | UnsetType = UNSET
    buffer: Optional[str] | UnsetType = UNSET
    cache: Optional[Literal["warm", "cold"]] | UnsetType = UNSET
    cache_bytes: Optional[Bytes] | UnsetType = UNSET
    pool_bytes: Bytes | UnsetType = UNSET
    pool_slots: Positive | UnsetType = UNSET
    cache_evicts: Optional[bool] | UnsetType = UNSET
    flush: Optional[bool] | UnsetType = UNSET
    sync: Optional[str] | UnsetType = UNSET
    huge_pages: Optional[str] | UnsetType = UNSET
    huge_page_bytes: Optional[Bytes] | UnsetType = UNSET
    # the pairwise link test (benchmark "pairs")
    unit: Literal["host", "rank"] | UnsetType = UNSET
    labels: list[str] | UnsetType = UNSET
    participant_ranks: list[Count] | UnsetType = UNSET
    matrix_unit: Literal["us", "GB/s"] | UnsetType = UNSET
    matrix: list[list[Optional[Annotated[float, Meta(ge=0, le=MAX_DURATION_US)]]]] | UnsetType = UNSET
    schedule: Literal["round-robin", "serial"] | UnsetType = UNSET
    rounds: Count | UnsetType = UNSET
    outliers: list[PairOutlier] | UnsetType = UNSET
    outlier_rule: OutlierRule | UnsetType = UNSET
    node_outliers: list[NodeOutlier] | UnsetType = UNSET
    node_outlier_rule: OutlierRule | UnsetType = UNSET
    # issue 39: each pass's matrix of a pairs test measured in repeated passes (``matrix`` is their cellwise median)
    repeats: list[list[list[Optional[Annotated[float, Meta(ge=0, le=MAX_DURATION_US)]]]]] | UnsetType = UNSET
    time_utc: Time | UnsetType = UNSET
    wall_s: Seconds | UnsetType = UNSET
    requested_bytes: Bytes | UnsetType = UNSET
    time_budget: TimeBudget | UnsetType = UNSET
    mpi_call: Annotated[str, Meta(description="the MPI function each iteration called (MPI backend)")] | UnsetType = UNSET
    cycle: Annotated[int, Meta(ge=1, description="the soak cycle (from 1) this record belongs to")] | UnsetType = UNSET
    cycle_started_utc: Time | UnsetType = UNSET
    stragglers: Stragglers | UnsetType = UNSET
    check_failures: Annotated[list[CheckFailure], Meta(max_length=16)] | UnsetType = UNSET
    torch_backend: str | UnsetType = UNSET
    staged: bool | UnsetType = UNSET
    cuda_graph: GraphReplays | UnsetType = UNSET
    launch: LaunchTimes | UnsetType = UNSET
    overlap: Overlap | UnsetType = UNSET
    root: Count | UnsetType = UNSET
    pairs: Count | UnsetType = UNSET
    window: Optional[Positive] | UnsetType = UNSET
    pairs_inter_node: Count | UnsetType = UNSET
    source: Source | UnsetType = UNSET
    # ---- issue 42: all-to-all-v (alltoallv, ialltoallv)
    splits: Annotated[str, Meta(description=(
        "the split pattern over destinations (--splits): uniform, zipf:S, hot:K or file:NAME#SHA256-8; send_bytes "
        "and recv_bytes are then the busiest rank's"))] | UnsetType = UNSET
    splits_recv_imbalance: Annotated[float, Meta(ge=1, le=1e9, description=(
        "the busiest rank's receive over the mean receive (1: every rank receives alike)"))] | UnsetType = UNSET
    # ---- end of issue 42
    # issue 43: busbw against the path's peak, and NCCL's algorithm and protocol
    peak: Optional[ResultPeak] | UnsetType = UNSET
    nccl_algo: Optional[NcclAlgorithm] | UnsetType = UNSET

    own_required: ClassVar[tuple[str, ...]] = (
        "send_bytes", "recv_bytes", "dtype", "op", "in_place", "iterations", "warmup", "algbw_bytes",
        "busbw_factor", "check", "first_call_us", "loop", "call_path", "cache", "sync", "time_utc", "wall_s")
    #: fields every ``pairs`` record has
    pairs_required: ClassVar[tuple[str, ...]] = (
        "metric", "unit", "labels", "participant_ranks", "matrix_unit", "matrix", "schedule", "rounds",
        "outliers", "outlier_rule", "node_outliers", "node_outlier_rule")
    #: fields every other result of microbench's own has
    harness_required: ClassVar[tuple[str, ...]] = (
        "timer", "device", "buffer", "cache_bytes", "pool_bytes", "pool_slots", "cache_evicts", "flush",
        "huge_pages", "huge_page_bytes")


# ------------------------------------------------------------------------------------------ end, samples
class EndRecord(Record, tag="end", kw_only=True):
    """The last line of a run: complete, incomplete (a signal) or failed (an error, a timeout)."""

    run_id: RunId
    status: Literal["complete", "incomplete", "failed"]
    reason: str
    time_utc: Time | UnsetType = UNSET
    results: Count
    # issue 39: what else the hosts were doing at the end (CPU figures over the whole run)
    machine: list[MachineState] | UnsetType = UNSET


class SamplesRecord(Record, tag="samples", kw_only=True):
    """One rank's raw per-iteration latencies (us) at one size and cache pass (``--samples``)."""

    run_id: RunId
    benchmark: str
    size_bytes: Bytes
    cache: Literal["warm", "cold"]
    rank: Count
    latency_us: list[Micros]


# ------------------------------------------------------------------------------------------ diagnostics
class FailedAt(Block, kw_only=True):
    benchmark: str
    metric: Optional[str] | UnsetType = UNSET
    size_bytes: Bytes
    cache: Optional[str] | UnsetType = UNSET
    at: list[str]


class CycleRecord(Record, tag="cycle", kw_only=True):
    """The end of one soak cycle (``--cycles``, ``--duration``)."""

    run_id: RunId
    cycle: Positive
    started_utc: Time
    ended_utc: Time
    wall_s: Seconds
    checked: bool
    results: Count
    check_failed: list[FailedAt]


class MinMedianMax(Block, kw_only=True):
    min: Annotated[float, Meta(ge=0)]
    median: Annotated[float, Meta(ge=0)]
    max: Annotated[float, Meta(ge=0)]


class FailedCycle(Block, kw_only=True):
    cycle: Positive
    at: list[str]


class SoakConfiguration(Block, kw_only=True):
    benchmark: str
    metric: Optional[str]
    size_bytes: Bytes
    cache: Optional[Literal["warm", "cold"]]
    cycles: Positive
    checked_cycles: Count
    avg_latency_us: MinMedianMax
    busbw_gbps: MinMedianMax
    failed_cycles: list[FailedCycle]


class SoakRecord(Record, tag="soak", kw_only=True):
    """A soak run's summary across its finished cycles, per configuration."""

    run_id: RunId
    time_utc: Time
    cycles: list[Positive]
    configurations: list[SoakConfiguration]


class BisectGroup(Block, kw_only=True):
    labels: list[str]
    ranks: list[Count]
    padded_with: list[str]


class BisectRound(Block, kw_only=True):
    round: Positive
    groups: Annotated[list[BisectGroup], Meta(min_length=2, max_length=2)]
    p50_us: Annotated[list[Micros], Meta(min_length=2, max_length=2)]
    stands_out: Optional[Literal[0, 1]]
    z: float
    threshold_us: float


class Suspect(Block, kw_only=True):
    label: str
    rank: Count


class BisectRecord(Record, tag="bisect", kw_only=True):
    """The bisection's rounds and suspects (``microbench run bisect``)."""

    run_id: RunId
    benchmark: str
    size_bytes: Positive
    dtype: str
    iterations: Positive
    warmup: Count
    loop: Optional[str]
    call_path: Optional[str]
    unit: Literal["host", "rank"]
    nodes: Annotated[int, Meta(ge=4)]
    participant_ranks: list[Count]
    rounds: list[BisectRound]
    verdict: Literal["found", "group", "none"]
    check: Optional[Literal["pass", "fail"]]
    suspects: list[Suspect]
    rule: dict[str, Unknown]
    time_utc: Time
    wall_s: Seconds
    cycle: Positive | UnsetType = UNSET
    cycle_started_utc: Time | UnsetType = UNSET


# ------------------------------------------------------------------------------------------ replay
class ReplayWorkload(Block, kw_only=True):
    model: str | UnsetType = UNSET
    scheme: str | UnsetType = UNSET
    layers_replayed: Positive | UnsetType = UNSET
    model_layers: Positive | UnsetType = UNSET
    dp: Positive | UnsetType = UNSET
    tp: Positive | UnsetType = UNSET
    pp: Positive | UnsetType = UNSET
    dtype: str | UnsetType = UNSET
    micro_batch: Positive | UnsetType = UNSET
    microbatches: Positive | UnsetType = UNSET
    # ---- issue 42: expert and context parallelism
    ep: Positive | UnsetType = UNSET
    cp: Positive | UnsetType = UNSET
    experts: Positive | UnsetType = UNSET
    top_k: Positive | UnsetType = UNSET
    routing: str | UnsetType = UNSET
    # ---- end of issue 42


class ReplayCall(Block, kw_only=True):
    """One (collective, group, bytes) of the replayed iteration: its calls in the schedule, what was issued for
    them (the benchmark table's entries, the group's ranks, the buffers moved per rank) and its times."""

    collective: str
    group: Literal["tp", "pp", "dp", "cp", "dp_cp", "ep", "etp", "edp", "tp_ep"]  # cp and after: issue 42
    bytes: Bytes
    calls: Positive
    overlapped: bool | UnsetType = UNSET
    issued: Count | UnsetType = UNSET  #: calls issued per iteration (the slowest rank's count)
    issued_as: list[str] | UnsetType = UNSET  #: the benchmark table's entries the calls went through
    group_ranks: Optional[Positive] | UnsetType = UNSET
    send_bytes: Optional[Bytes] | UnsetType = UNSET
    recv_bytes: Optional[Bytes] | UnsetType = UNSET
    in_place: Optional[bool] | UnsetType = UNSET
    replayed_s: Seconds
    isolated_s_per_call: Optional[Seconds] | UnsetType = UNSET
    concurrent_s_per_call: Optional[Seconds] | UnsetType = UNSET
    nonblocking_s_per_call: Optional[Seconds] | UnsetType = UNSET
    # ---- issue 42: an all-to-all-v's split pattern (its bytes: what the busiest sender sends)
    splits: str | UnsetType = UNSET


class ReplayPrediction(Block, kw_only=True):
    source: str
    rule: str
    iteration_s: Seconds
    communication_s: Seconds
    compute_s: Seconds
    exposed_s: float
    per_collective_s: dict[str, Seconds]
    per_group_s: dict[str, Seconds]
    outside_s: dict[str, Seconds] | UnsetType = UNSET
    priced: dict[str, Count]
    notes: list[str] | UnsetType = UNSET


class ReplayRow(Block, kw_only=True):
    what: str
    predicted_s: float
    replayed_s: Optional[float]
    ratio: Optional[Annotated[float, Meta(ge=0)]]
    explained_by: list[str]


# ---- issue 40: replay --check (each rank's log of the calls it issued, and their data checked)
GroupKind = Literal["tp", "pp", "dp", "cp", "dp_cp", "ep", "etp", "edp", "tp_ep"]


class ReplayLoggedCall(Block, kw_only=True):
    """Consecutive identical calls one rank issued in the checked iteration, as it issued them."""

    collective: str  #: the schedule's collective (send: the pipeline's or the ring's shift)
    issued_as: str  #: the benchmark table's entry the call went through, or shift
    group: GroupKind
    group_ranks: list[Count]  #: world ranks of the communicator the call ran on, in its rank order (asked of it)
    send_bytes: Bytes  #: bytes of the rank's send buffer (in place: the one buffer)
    recv_bytes: Bytes  #: bytes of its receive buffer (in place: the same buffer; broadcast: 0)
    dtype: str  #: element type of the buffers
    calls: Positive  #: consecutive calls this entry stands for
    wrong_elements: Count  #: elements of their results that differed from what the collective defines


class ReplayRankLog(Block, kw_only=True):
    rank: Count  #: world rank
    calls: list[ReplayLoggedCall]  #: in the order the rank issued them


class ReplayCheck(Block, kw_only=True):
    """``replay --check``: one iteration's calls run again after the timed ones with known data, and checked."""

    rule: str
    calls_checked: Count  #: calls run and checked, over all ranks
    failures: Count  #: of those, calls with a wrong result or on a communicator of other ranks
    failed: Annotated[list[str], Meta(max_length=16)]  #: the first failures, one line each
    ranks: list[ReplayRankLog]
# ---- end of issue 40


class ReplayRecord(Record, tag="replay", kw_only=True):
    """One replayed training iteration's communication against its prediction (``replay --out``)."""

    schema: Annotated[int, Meta(ge=1, le=SCHEMA_VERSION)]
    run_id: RunId
    microbench_version: str | UnsetType = UNSET
    time_utc: Time
    command: str
    backend: str
    ranks: Positive
    hosts: list[str]
    ranks_per_host: dict[str, Positive]
    launcher: Optional[str] | UnsetType = UNSET
    slurm: Optional[dict[str, str]] | UnsetType = UNSET
    mpi: Optional[MpiLibrary] | UnsetType = UNSET
    versions: dict[str, str] | UnsetType = UNSET
    version_mismatch: list[str] | UnsetType = UNSET
    conditions: Conditions
    workload: Optional[ReplayWorkload]
    iterations: Positive
    calls_per_iteration: Count
    bytes_per_iteration: Bytes
    first_iteration_s: Seconds
    wall_s: Seconds
    wall_min_s: Seconds
    wall_max_s: Seconds
    compute_only_s: Optional[Seconds]
    exposed_communication_s: float
    exposed_share: Annotated[float, Meta(ge=-1, le=1, description=(
        "exposed communication over the iteration's wall time; slightly below 0 when the compute-only "
        "iterations ran slower than the replayed ones (noise)"))]
    per_collective_s: dict[str, Seconds]
    per_group_s: dict[str, Seconds]
    per_call: list[ReplayCall]
    compute: Optional[dict[str, Unknown]]
    prediction: ReplayPrediction
    comparison: list[ReplayRow]
    comparison_threshold: Annotated[float, Meta(gt=0)]
    rules: list[str]
    notes: list[str]
    # issue 39: the per-launch values kept apart from conditions
    per_launch: PerLaunch | UnsetType = UNSET
    # issue 40: replay --check
    check: ReplayCheck | UnsetType = UNSET


# ------------------------------------------------------------------------------------------ doctor (issue 45)
class DoctorFinding(Block, kw_only=True):
    """One thing a layer found wrong (or noted): where (a host, ranks) and what, in a sentence."""

    what: str
    host: Optional[str]
    ranks: list[Count]
    note: bool  #: said, not a failure


class DoctorLayer(Block, kw_only=True):
    """One layer's verdict: pass, fail, skipped (and why), or not run (a layer below failed)."""

    layer: Annotated[int, Meta(ge=1, le=7)]
    name: Literal["launch", "software", "mpi", "network", "placement", "torch", "bandwidth"]
    status: Literal["pass", "fail", "skipped", "not_run"]
    seconds: Optional[Seconds]
    summary: str
    next: Optional[str]  #: what to check next, when it failed
    findings: list[DoctorFinding]
    details: dict[str, Unknown]  #: the layer's figures (versions, interfaces, the bandwidth matrix in GB/s)


class DoctorRecord(Record, tag="doctor", kw_only=True):
    """``microbench doctor --out``: each layer of a launch from the launcher up to a bandwidth round, and the
    first that failed (docs/doctor.md). Not a run: check, compare and history skip it."""

    schema: Annotated[int, Meta(ge=1, le=SCHEMA_VERSION)]
    run_id: RunId
    microbench_version: str
    time_utc: Time
    command: str
    launcher: Optional[str]
    launch_command: Optional[str]  #: the launcher command the doctor ran (``microbench doctor -- LAUNCHER``)
    ranks_expected: Optional[Positive]
    ranks: Count  #: ranks that checked in
    hosts: list[str]
    ranks_per_host: dict[str, Positive]
    timeout_s: Seconds  #: per layer
    verdict: Literal["pass", "fail", "interrupted"]
    failed_layer: Optional[Annotated[int, Meta(ge=1, le=7)]]
    layers: Annotated[list[DoctorLayer], Meta(min_length=7, max_length=7)]
    wall_s: Seconds


#: Every record type, by its ``type``.
RECORD_TYPES: dict[str, type[Record]] = {
    "run": RunRecord, "result": ResultRecord, "end": EndRecord, "samples": SamplesRecord, "cycle": CycleRecord,
    "soak": SoakRecord, "bisect": BisectRecord, "replay": ReplayRecord}
RECORD_TYPES["doctor"] = DoctorRecord  # issue 45
AnyRecord = Union[RunRecord, ResultRecord, EndRecord, SamplesRecord, CycleRecord, SoakRecord, BisectRecord,
                  ReplayRecord, DoctorRecord]


class ModelError(ValueError):
    """A record a builder made that breaks the model: a bug in microbench (an internal error), or for an
    import, figures in the other tool's file that no measurement can have (the importer names FILE:LINE)."""

    def __init__(self, kind: str, problem: str):
        super().__init__(f"microbench built a {kind} that breaks the record model: {problem}")
        self.kind, self.problem = kind, problem
