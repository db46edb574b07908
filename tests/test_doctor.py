"""microbench doctor on one host: its judges on known reports, then real launches of 2 ranks (--np), healthy and
with one rank stalled at a layer (the test hook MICROBENCH_TEST_DOCTOR_STALL), its record in the model, and the
gate tools skipping that record. The faults of several nodes are tests/test_emulated_doctor.py."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from microbench.doctor import bandwidth, hosts, launch_check, mpi_check, network, pairs, software
from microbench.doctor.job import Job, RankInfo
from microbench.doctor.layers import LAYERS, parse_skip
from microbench.errors import UsageError

from conftest import REPO, microbench, read_jsonl, run_process
from fixtures.gate.synth import result, write_run

RUN_LIMIT_S = 120  #: a hang guard for one doctor launch (a passing one takes 5 to 15 s here)
STALL_TIMEOUT_S = 6  #: --timeout of the stalled launches: a layer's silence before the ranks are named


def microbench_script(name: str, *args: str):
    return run_process([sys.executable, str(REPO / "scripts" / name), *args], timeout=RUN_LIMIT_S)


def job_of(hosts_by_rank: list[str], size: int | None = None) -> Job:
    job = Job(expected=size or len(hosts_by_rank))
    per_host: dict[str, int] = {}
    for rank, host in enumerate(hosts_by_rank):
        local = per_host.get(host, 0)
        per_host[host] = local + 1
        job.add(RankInfo(rank, host, 1000 + rank, rank, local, hosts_by_rank.count(host), len(hosts_by_rank),
                         "openmpi"))
    return job


FOUR = [f"node{i}" for i in range(4)]


# ------------------------------------------------------------------------------ the rounds and host lists
@pytest.mark.parametrize("n", range(1, 18))
def test_the_rounds_meet_every_node_pair_once_with_one_partner_a_round(n):
    met = []
    for r in range(pairs.rounds(n)):
        partners = {node: pairs.partner(node, r, n) for node in range(n)}
        for node, other in partners.items():
            if other is not None:
                assert partners[other] == node and other != node
                met.append((min(node, other), max(node, other)))
    assert set(met) == {(a, b) for a in range(n) for b in range(a + 1, n)}
    assert len(met) == n * (n - 1)  # each pair met once, seen from both ends
    assert pairs.rounds(n) <= n  # O(n) rounds


def test_host_lists_of_the_launchers(tmp_path):
    assert hosts.expand_hostlist("n[01-03,7],login") == ["n01", "n02", "n03", "n7", "login"]  # as Slurm
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# the rack\nnodeA slots=4\nnodeB:4\n\n")
    assert hosts.from_command(["mpirun", "-np", "8", "--hostfile", str(hostfile)]) == ["nodeA", "nodeB"]
    assert hosts.from_command(["mpirun", "--host", "a:2,b:2", "-np", "4"]) == ["a", "b"]
    assert hosts.from_command(["srun", "-w", "gpu[1-3]", "-N", "3"]) == ["gpu1", "gpu2", "gpu3"]
    assert hosts.from_command(["torchrun", "--nproc-per-node", "4"]) == []
    with pytest.raises(UsageError, match="cannot read"):
        hosts.expand_hostlist("n[a-b]")


def test_skip_takes_names_or_numbers_but_never_the_launch_or_the_software():
    assert parse_skip("torch,7") == {"torch", "bandwidth"}
    for bad in ("launch", "2", "nonsense"):
        with pytest.raises(UsageError):
            parse_skip(bad)


# ------------------------------------------------------------------------------ the judges on known reports
def software_report(**differ) -> dict:
    rep = {"microbench": "0.1.0", "microbench_path": "/opt/mb", "python": "3.11.7", "python_executable": "/opt/py",
           "numpy": "2.4.6", "mpi4py": "4.1.2", "torch": None, "nccl": None, "gpu_driver": None,
           "memlock": "unlimited", "nofile": "1024", "mpi_library_path": "/opt/lib/libmpi.so.40",
           "mpi_library": "Open MPI v5.0.11, package: Open MPI, ident: 5.0.11, repo rev: v5.0.11, Sep 16, 2026"}
    return {**rep, **differ}


def test_software_names_the_node_with_another_mpi_and_only_notes_another_path():
    job = job_of(FOUR)
    reports = {r: software_report() for r in range(4)}
    reports[2] = software_report(mpi_library="Open MPI v4.1.6, package: Open MPI, ident: 5.0.11, repo rev: v5.0.11, "
                                             "Sep 16, 2026")
    reports[3] = software_report(python_executable="/other/py")
    judged = software.judge(reports, job)
    assert judged.status == "fail"
    assert [(f.host, f.ranks) for f in judged.failures] == [("node2", [2])]
    assert judged.summary == "node2: MPI library Open MPI v4.1.6 where the other ranks have Open MPI v5.0.11"
    assert [f.host for f in judged.findings if f.note] == ["node3"]


def test_software_names_a_node_whose_clock_is_off():
    job = job_of(FOUR)
    job.ranks[1].clock_offset_s = -7.5
    judged = software.judge({r: software_report() for r in range(4)}, job)
    assert judged.status == "fail" and judged.failures[0].host == "node1" and "-7.5 s" in judged.summary


def iface(name: str, address: str | None, up: bool = True, loopback: bool = False) -> dict:
    return {"name": name, "up": up, "loopback": loopback, "ipv4": [f"{address}/24"] if address else [], "ipv6": []}


def node_network(k: int, ifname: str = "emu0", settings: dict | None = None, rendezvous: str = "ok") -> dict:
    address = f"10.77.0.{k + 1}"
    return {"settings": settings or {}, "interfaces": [iface("lo", "127.0.0.1", loopback=True),
                                                       iface(ifname, address)],
            "ib": [], "hostname_address": address, "hostname_interface": ifname,
            "rendezvous": {"result": rendezvous, "address": "10.77.0.1", "source": address if rendezvous == "ok"
                           else None, "seconds": 5.0 if rendezvous == "timeout" else 0.01, "interface": ifname}}


def test_network_passes_a_healthy_cluster_and_names_the_node_of_each_fault():
    job, store = job_of(FOUR), ("node0", 29500)
    healthy = network.judge({k: node_network(k) for k in range(4)}, job, store, "emu0")
    assert healthy.status == "pass", healthy.summary
    # the rendezvous port dropped on node2's way out
    blocked = network.judge({k: node_network(k, rendezvous="timeout" if k == 2 else "ok") for k in range(4)},
                            job, store, None)
    assert [f.host for f in blocked.failures] == ["node2"] and "firewall" in blocked.summary
    # node2's interface has another name than the one the bootstrap is told to use
    wrong = {"GLOO_SOCKET_IFNAME": "emu0"}
    renamed = network.judge({k: node_network(k, "ens3" if k == 2 else "emu0", wrong) for k in range(4)}, job, store,
                            None)
    assert [f.host for f in renamed.failures] == ["node2"]
    assert renamed.summary == "node2: GLOO_SOCKET_IFNAME=emu0 names no interface there (it has lo, ens3)"
    # loopback named for the bootstrap of a job that spans nodes: every node is wrong
    lo = network.judge({k: node_network(k, settings={"NCCL_SOCKET_IFNAME": "lo"}) for k in range(4)}, job, store,
                       None)
    assert sorted(f.host for f in lo.failures) == FOUR and "loopback" in lo.summary
    # ... while on one host it is right
    one = job_of(["vm", "vm"])
    assert network.judge({0: node_network(0, settings={"GLOO_SOCKET_IFNAME": "lo"}), 1: {"settings": {}}}, one,
                         ("vm", 29500), None).status == "pass"


def test_mpi_names_the_node_that_answers_none_of_its_partners():
    job = job_of(FOUR)
    reports = {r: {"mpi_size": 4, "mpi_rank": r, "init_s": 0.1, "barrier_s": 0.01} for r in range(4)}
    failed = [{"rank": 0, "pair": [0, 2], "stage": "ring"}, {"rank": 1, "pair": [1, 2], "stage": "ring"},
              {"rank": 3, "pair": [3, 2], "stage": "ring"}]
    judged = mpi_check.judge(reports, job, 4, failed, FOUR)
    assert judged.status == "fail" and [f.host for f in judged.failures] == ["node2"]
    assert judged.summary.startswith("node2 answers none of its partners (node0, node1, node3)")
    singleton = {**reports, 3: {"mpi_size": 1, "mpi_rank": 0, "init_s": 0.1}}
    assert "does not match its launcher" in mpi_check.judge(singleton, job, 4, [], FOUR).summary


def test_bandwidth_names_the_slow_node_even_when_half_the_pairs_are_its_own():
    slow = [[None, 1.0, 0.006, 1.1], [1.0, None, 0.006, 0.9], [0.006, 0.006, None, 0.006], [1.1, 0.9, 0.006, None]]
    nodes, pairs_, _ = bandwidth.far_below(slow, FOUR)
    assert [i for i, _ in nodes] == [2] and pairs_ == []
    even = [[None, 1.0, 0.5, 1.1], [1.0, None, 0.7, 0.9], [0.5, 0.7, None, 0.6], [1.1, 0.9, 0.6, None]]
    assert bandwidth.far_below(even, FOUR)[:2] == ([], [])
    one_link = [[None, 1.0, 1.0, 1.1], [1.0, None, 0.9, 0.05], [1.0, 0.9, None, 1.2], [1.1, 0.05, 1.2, None]]
    assert [(i, j) for i, j, _ in bandwidth.far_below(one_link, FOUR)[1]] == [(1, 3)]


def test_the_leaders_list_every_node_receives_packs_a_regular_layout_into_one_run():
    assert pairs.pack_ranks(list(range(0, 131072, 8))) == [[0, 16384, 8]]
    for ranks in ([], [5], [0, 8, 16, 17, 30, 31, 32, 100], list(range(7))):
        assert pairs.unpack_ranks(pairs.pack_ranks(ranks)) == ranks


def test_rows_above_the_full_rows_limit_are_summarised_and_still_name_the_slow_node_and_link():
    n = bandwidth.FULL_ROWS + 44
    matrix = [[None if i == j else 1.0 + 0.01 * ((i * 7 + j * 3) % 11) for j in range(n)] for i in range(n)]
    for j in range(n):
        if j != 7:
            matrix[7][j] = matrix[j][7] = 0.006  # node 7's link throttled
    matrix[3][5] = matrix[5][3] = 0.05  # one bad cable between nodes 3 and 5
    reports = {i: {**bandwidth.summarised({str(j): v for j, v in enumerate(row) if j != i}), "size": 1 << 20}
               for i, row in enumerate(matrix)}
    assert max(len(rep["row"]) for rep in reports.values()) < n // 4  # outliers only, not whole rows
    job = job_of([f"n{i:03d}" for i in range(n)])
    judged = bandwidth.judge(reports, job, [], 1 << 20)
    assert [f.host for f in judged.failures] == ["n007", None], judged.summary
    assert judged.failures[1].what.startswith("n003 - n005: 0.05 GB/s")
    assert judged.details["matrix_gbps"] is None and judged.details["labels"] is None
    again = bandwidth.suspects(reports, job)  # measured again: the slow node with its strongest partners, the link
    assert [3, 5] in again and sum(7 in pair for pair in again) == bandwidth.RECHECK_PARTNERS
    assert len(again) == bandwidth.RECHECK_PARTNERS + 1


def test_launch_names_the_node_the_launchers_message_names():
    state = launch_check.LauncherState(command=["mpirun", "--host", "node0,node1,node2,node3"], status=213,
                                       seconds=0.2, expected_hosts=FOUR, local_host="node0",
                                       tail=["A daemon failed to report back", "  Local host:    node0",
                                             "  Remote host:   node2"])
    judged = launch_check.judge(Job(expected=None), state, 0.5, [])
    assert judged.status == "fail" and judged.failures[0].host == "node2"
    assert [f.host for f in judged.failures] == ["node2", "node2"]  # the exit (its message names node2), the node


# ------------------------------------------------------------------------------ real launches of 2 ranks
def doctor(tmp_path, *args, env: dict | None = None, stall: str | None = None):
    extra = dict(env or {})
    if stall:
        extra.update(MICROBENCH_TESTING="1", MICROBENCH_TEST_DOCTOR_STALL=stall)
    out = tmp_path / "doctor.jsonl"
    done = microbench("doctor", "--np", "2", "--out", str(out), *args, timeout=RUN_LIMIT_S, env=extra)
    records = read_jsonl(out) if out.exists() else []
    return done, (records[-1] if records else None)


@pytest.fixture(scope="module")
def healthy(tmp_path_factory):
    return doctor(tmp_path_factory.mktemp("doctor"))


def test_a_healthy_launch_passes_every_layer(healthy):
    done, rec = healthy
    assert done.returncode == 0, done.output
    assert rec["type"] == "doctor" and rec["verdict"] == "pass" and rec["failed_layer"] is None
    assert rec["ranks"] == rec["ranks_expected"] == 2 and rec["launcher"] == "openmpi"
    statuses = {layer["name"]: layer["status"] for layer in rec["layers"]}
    torch_ok = "pass" if importlib.util.find_spec("torch") else "skipped"
    assert statuses == {**{layer.name: "pass" for layer in LAYERS}, "torch": torch_ok}, statuses
    lines = done.stdout.splitlines()
    layer_lines = [line.split()[:3] for line in lines if line[:1].isdigit()]
    assert layer_lines == [[str(layer.number), layer.name, "PASS" if statuses[layer.name] == "pass" else "SKIP"]
                           for layer in LAYERS]
    assert lines[-1].startswith("doctor: PASS")
    bw = rec["layers"][6]["details"]
    assert bw["size_bytes"] == 1 << 20 and bw["matrix_gbps"][0][1] > 0


def test_json_prints_the_record(tmp_path):
    done = microbench("doctor", "--np", "2", "--skip", "torch,bandwidth", "--json", timeout=RUN_LIMIT_S)
    assert done.returncode == 0, done.output
    rec = json.loads(done.stdout)
    assert rec["verdict"] == "pass" and [layer["status"] for layer in rec["layers"]][5:] == ["skipped", "skipped"]


@pytest.mark.parametrize("point, layer, words", [
    ("mpi_init", 3, "rank 1 stopped at the start of layer 3 (mpi) for"),  # the other rank waits inside MPI_Init
    ("software", 2, "while the 1 other rank(s) finished layer 2"),
    ("bandwidth", 7, "rank 1 said nothing in layer 7 (bandwidth) for"),  # its partner got no answer
])
def test_a_stalled_rank_is_named_at_its_layer(tmp_path, point, layer, words):
    done, rec = doctor(tmp_path, "--timeout", str(STALL_TIMEOUT_S), "--skip", "torch", stall=f"1:{point}")
    assert done.returncode == 1, done.output
    assert rec["verdict"] == "fail" and rec["failed_layer"] == layer, done.output
    failed = rec["layers"][layer - 1]
    first = next(f for f in failed["findings"] if not f["note"])
    assert words in first["what"] and first["ranks"] == [1], failed
    assert "pid " in failed["next"]  # where to look: the stuck rank's pid
    assert [layer_["status"] for layer_ in rec["layers"][layer:]] == ["not_run"] * (7 - layer)
    assert rec["layers"][5]["status"] in ("skipped", "not_run")  # torch's import, slow on a loaded node, left out
    assert f"doctor: FAIL at layer {layer}" in done.stdout


def test_a_rank_behind_the_others_is_named_before_the_layers_timeout(tmp_path):
    """Rank 1 never reaches MPI_Init while rank 0 waits inside it: named after a third of --timeout."""
    done, rec = doctor(tmp_path, "--timeout", "30", stall="1:mpi_init")
    assert done.returncode == 1 and rec["failed_layer"] == 3, done.output
    assert rec["layers"][2]["seconds"] < 30, rec["layers"][2]  # the behind rule, not the layer's timeout


def test_a_rank_that_never_checks_in_fails_the_launch(tmp_path):
    done, rec = doctor(tmp_path, "--launch-timeout", str(STALL_TIMEOUT_S), stall="1:launch")
    assert done.returncode == 1 and rec["failed_layer"] == 1, done.output
    assert rec["ranks"] == 1 and rec["ranks_expected"] == 2
    assert "1 of 2 ranks checked in" in rec["layers"][0]["summary"]


def test_ctrl_c_during_a_hang_says_what_was_known_and_exits_130(tmp_path):
    """Rank 1 stalls in layer 2; a SIGINT to the doctor (as Ctrl-C sends) ends it with the stalled rank named."""
    out = tmp_path / "doctor.jsonl"
    env = {**os.environ, "MICROBENCH_TESTING": "1", "MICROBENCH_TEST_DOCTOR_STALL": "1:software",
           "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "microbench", "doctor", "--np", "2", "--timeout", "60", "--out",
                             str(out)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)
    try:
        for line in proc.stdout:  # layer 1's line: the ranks are in layer 2, rank 1 asleep
            if line.startswith("1 launch"):
                break
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=RUN_LIMIT_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, rest
    rec = read_jsonl(out)[-1]
    assert rec["verdict"] == "interrupted" and rec["failed_layer"] == 2
    assert "doctor: INTERRUPTED by SIGINT during layer 2 (software)" in rest, rest
    first = next(f for f in rec["layers"][1]["findings"] if not f["note"])
    assert 1 in first["ranks"] and "stopped at the start of layer 2" in first["what"], first  # rank 0 may be busy


@pytest.mark.parametrize("args, words", [
    ((), "give --np N, put your launcher command after --"),
    (("--np", "2", "--", "mpirun"), "give --np N or a launcher command after --, not both"),
    (("--np", "2", "--skip", "launch"), "layers 1 and 2"),
    (("--np", "2", "--timeout", "0"), "--timeout 0: expected seconds above 0"),
    (("--np", "2", "--coordinator", "nohost"), "expected HOST[,HOST...]:PORT"),
    (("--np", "0"), "--np must be at least 1 (got 0)"),
    (("--", "/nonexistent/launcher", "-n", "2"), "cannot start the launcher /nonexistent/launcher"),
])
def test_bad_input_is_one_line_and_status_2(args, words):
    done = microbench("doctor", *args, timeout=60)
    assert done.returncode == 2, done.output
    assert done.stderr.strip().splitlines() == [done.stderr.strip()] and words in done.stderr, done.output


def test_out_in_a_folder_that_cannot_be_written_is_refused_before_any_rank(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    done = microbench("doctor", "--np", "2", "--out", str(blocker / "doctor.jsonl"), timeout=60)
    assert done.returncode == 2 and "cannot write there" in done.stderr and "microbench doctor:" not in done.stdout


# ------------------------------------------------------------------------------ the record
def test_the_model_refuses_a_doctor_record_whose_verdict_contradicts_its_layers(healthy):
    import msgspec

    from microbench.records import model, relations

    rec = dict(healthy[1])
    assert relations.problems(msgspec.convert(rec, model.DoctorRecord)) is None
    rec["failed_layer"] = 3
    assert "first failed layer is None" in relations.problems(msgspec.convert(rec, model.DoctorRecord))
    layers = [dict(layer) for layer in rec["layers"]]
    layers[4]["status"] = "fail"
    bad = {**healthy[1], "layers": layers, "failed_layer": 5}
    assert "verdict pass" in relations.problems(msgspec.convert(bad, model.DoctorRecord))


def test_check_compare_and_history_skip_doctor_lines_silently(healthy, tmp_path):
    doctor_line = json.dumps(healthy[1])
    env = {"MICROBENCH_INDEX": str(tmp_path / "index")}
    spec = tmp_path / "spec.toml"
    spec.write_text('[[rule]]\nbenchmark = "allreduce"\nmax_latency_us = 20\n')
    outputs = {}
    for kind in ("plain", "with-doctor"):
        folder = tmp_path / kind
        folder.mkdir()
        for k, p50 in enumerate((10.0, 10.5, 10.2)):
            path = folder / f"run{k}.jsonl"
            write_run(path, [result("allreduce", 8, p50, run_id=f"r{k}")], run_id=f"r{k}",
                      time_utc=f"2026-11-2{k}T07:00:00Z")
            if kind == "with-doctor":
                with open(path, "a") as f:
                    f.write(doctor_line + "\n")
        outputs[kind] = [microbench("check", str(folder), "--spec", str(spec), timeout=60, env=env),
                         microbench("compare", "--baseline", str(folder / "run0.jsonl"), str(folder / "run1.jsonl"),
                                    "--new", str(folder / "run2.jsonl"), timeout=60, env=env),
                         microbench("history", str(folder), timeout=60, env=env)]
    for plain, mixed in zip(outputs["plain"], outputs["with-doctor"]):
        assert mixed.returncode == plain.returncode and plain.returncode in (0, 1, 4), mixed.output  # 4: INCONCLUSIVE
        assert mixed.stdout.replace("with-doctor", "plain") == plain.stdout
        assert "skipped" not in mixed.stderr and mixed.stderr.replace("with-doctor", "plain") == plain.stderr


def test_the_costs_script_measures_and_models_every_scale(tmp_path):
    """scripts/doctor_costs.py (docs/doctor.md's table): behaviour only, a row per scale with positive figures."""
    figures = tmp_path / "costs.json"
    done = microbench_script("doctor_costs.py", "--judge-nodes", "16", "--exchanges", "20", "--connects", "64",
                             "--json", str(figures))
    assert done.returncode == 0, done.output
    rows = json.loads(figures.read_text())["model"]
    assert [r["nodes"] for r in rows] == [16, 64, 256, 1024, 4096, 16384]
    assert all(r["total_s"] > 0 and r["coordinator_in_bytes"] > 0 for r in rows)
    assert rows[-1]["layer7_one_slow_node_s"] > rows[-1]["layer7_s"]
    assert done.stdout.count("\n| ") == 7  # the header and six rows
