"""A host's links and the peak of a path, from recorded hosts (tests/fixtures/links, cited in its README), NCCL's
own tuning lines (tests/fixtures/nccl) and this machine's own links."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest

from microbench.cluster import links, links_nvml, links_shaping, nccl_tuning, path_peak

from conftest import run_process

FIXTURES = Path(__file__).parent / "fixtures"
H100 = FIXTURES / "links" / "hgx-h100"
NODE1 = FIXTURES / "links" / "emulated-node1"
VM = FIXTURES / "links" / "vm"


def test_a_recorded_h100_node_gives_nvlink_450_gbps_per_direction_and_its_nics_rates():
    host = links.read_host(H100)
    gpus = {g["bus_id"]: g for g in host["gpus"]}
    assert sorted(gpus) == ["0000:18:00.0", "0000:d9:00.0"]
    for gpu in gpus.values():
        nv = gpu["nvlink"]
        assert (nv["active_links"], nv["version"], nv["gbps_per_link"], nv["gbps"]) == (18, 4, 25.0, 450.0)
        assert nv["nvml_gbps_per_link"] == 26.562 and nv["peers"] == {"switch": 18}
        assert gpu["pcie"]["generation"] == 5 and gpu["pcie"]["width"] == 16
        assert gpu["pcie"]["gbps"] == pytest.approx(32 * 128 / 130 / 8 * 16, rel=1e-3)  # 63.0 GB/s
    assert [(p["device"], p["rate_gbps"], p["state"], p["link_layer"]) for p in host["rdma"]] == \
        [("mlx5_0", 400.0, "ACTIVE", "InfiniBand"), ("mlx5_5", 400.0, "ACTIVE", "InfiniBand")]
    assert (gpus["0000:d9:00.0"]["nearest_nic"], gpus["0000:d9:00.0"]["nic_relation"]) == ("mlx5_5", "PIX")


def test_info_lists_a_recorded_hosts_links_with_their_speeds():
    proc = run_process([sys.executable, "-m", "microbench", "info", "--from", str(H100), "--from", str(NODE1)])
    assert proc.returncode == 0, proc.output
    text = proc.stdout
    assert "GPU 7 NVIDIA H100 80GB HBM3 0000:d9:00.0: NVLink4 x18 = 450 GB/s per direction" in text
    assert "nearest NIC mlx5_5 (PIX)" in text
    assert text.count("InfiniBand ACTIVE, 400 Gb/sec (4X NDR)") == 2
    assert "emu0: ethernet up, 10000 Mb/s, shaped to 200 Mbit/s (tc tbf rate (root qdisc))" in text
    proc = run_process([sys.executable, "-m", "microbench", "info", "--json", "--from", str(H100)])
    found = json.loads(proc.stdout)["links"][str(H100)]
    assert [g["nvlink"]["gbps"] for g in found["gpus"]] == [450.0, 450.0]


def test_info_on_this_host_lists_its_interfaces():
    proc = run_process([sys.executable, "-m", "microbench", "info", "--json"])
    assert proc.returncode == 0, proc.output
    (host, found), = json.loads(proc.stdout)["links"].items()
    here = {name for _, name in __import__("socket").if_nameindex()}
    assert {n["name"] for n in found["net"]} == here


def test_info_refuses_a_folder_that_is_no_recorded_host(tmp_path):
    proc = run_process([sys.executable, "-m", "microbench", "info", "--from", str(tmp_path)])
    assert proc.returncode == 2 and "no sys/ folder there" in proc.stderr, proc.output


def test_a_shaped_veth_counts_at_its_qdiscs_rate():
    host = links.read_host(NODE1)
    emu0 = next(n for n in host["net"] if n["name"] == "emu0")
    assert (emu0["speed_mbps"], emu0["shaped_mbps"], emu0["ipv4"]) == (10000, 200.0, "10.77.0.2")
    gbps, link = path_peak.host_network("node1", host)
    assert gbps == 0.025 and link == "node1 emu0 200 Mbit/s (tc tbf rate (root qdisc); sysfs says 10000 Mb/s)"


def test_an_interface_without_a_speed_leaves_the_peak_unknown_and_says_why():
    host = links.read_host(VM)
    peak = path_peak.path_peak(["vm", "other"], {"vm": host, "other": host})
    assert peak["gbps"] is None and peak["link"] == "vm eth0: speed unknown (sysfs gives none, nothing shapes it)"


def test_the_slowest_host_sets_the_network_peak_and_an_unread_host_leaves_it_unknown():
    fast, slow = links.read_host(NODE1), links.read_host(NODE1)
    next(n for n in fast["net"] if n["name"] == "emu0").pop("shaped_mbps")
    peak = path_peak.path_peak(["a", "b", "b"], {"a": fast, "b": slow})
    assert peak == {"tier": "network", "gbps": 0.025, "link": peak["link"]} and peak["link"].startswith("b emu0")
    assert path_peak.path_peak(["a", "a"], {"a": fast})["tier"] == "shared memory"
    assert path_peak.path_peak(["a", "c"], {"a": fast})["link"] == "c: its links were not read"


def test_the_environment_names_the_nics_a_run_uses():
    host = links.read_host(H100)
    host["selectors"] = {"NCCL_IB_HCA": "=mlx5_5:1"}
    assert path_peak.host_network("h", host) == (50.0, "h mlx5_5:1 400 Gb/sec (4X NDR)")
    host["selectors"] = {}
    assert path_peak.host_network("h", host)[0] == 100.0  # both active NDR ports


def test_gpu_ranks_use_nvlink_inside_a_node_and_their_nearest_nics_between_nodes():
    host = links.read_host(H100)
    gpus = [{"bus_id": "0000:18:00.0"}, {"bus_id": "0000:d9:00.0"}]
    inside = path_peak.path_peak(["h", "h"], {"h": host}, "cuda", gpus)
    assert (inside["tier"], inside["gbps"]) == ("nvlink", 450.0)
    across = path_peak.path_peak(["h1", "h2"], {"h1": host, "h2": host}, "cuda", [gpus[1], gpus[1]])
    assert (across["tier"], across["gbps"]) == ("network", 50.0)  # GPU 7's nearest NIC, mlx5_5, 400 Gb/s
    assert across["link"] == "h1 mlx5_5:1 400 Gb/sec (4X NDR)"


def test_a_gpu_without_nvlink_to_the_next_rank_falls_back_to_pcie():
    answers = json.loads((H100 / "nvml.json").read_text())
    for link in answers["gpus"][1]["nvlinks"]:
        link["active"] = False
    host = links.read_host(H100, answers)
    peak = path_peak.path_peak(["h", "h"], {"h": host}, "cuda", [{"bus_id": "0000:18:00.0"}, {"bus_id": "0000:d9:00.0"}])
    assert peak["tier"] == "pcie" and peak["gbps"] == pytest.approx(63.015, rel=1e-4)


def test_a_share_is_busbw_over_the_peak_and_none_where_nccl_reduced_in_a_switch():
    peak = {"tier": "nvlink", "gbps": 450.0, "link": "h GPU"}
    assert path_peak.peak_block(peak, 360.0)["share"] == 0.8
    assert path_peak.peak_block(peak, 720.0, directions=2)["share"] == 0.8  # bibw: both directions
    nvls = path_peak.peak_block(peak, 480.0, algorithm="NVLS")
    assert nvls["share"] is None and nvls["beyond_wire"].startswith("NVLS reduces inside the NVSwitch")
    assert path_peak.peak_block({"tier": "shared memory", "gbps": None, "link": "x"}, 3.0)["share"] is None


def test_shaping_is_read_from_tbf_and_htb():
    qdiscs = [{"kind": "tbf", "dev": "a0", "root": True, "options": {"rate": 25000000}},
              {"kind": "htb", "dev": "b0", "root": True, "options": {}},
              {"kind": "noqueue", "dev": "lo", "root": True, "options": {}}]
    classes = {"b0": "class htb 1:10 root prio 0 rate 100Mbit ceil 150Mbit burst 1600b cburst 1575b \n"}
    assert links_shaping.parse(qdiscs, classes) == {
        "a0": {"mbps": 200.0, "how": "tc tbf rate (root qdisc)"},
        "b0": {"mbps": 150.0, "how": "tc htb ceil of its root classes"}}


def test_nvml_without_a_driver_reads_no_gpu():
    found = links_nvml.answers()  # this machine: no NVIDIA driver, with or without nvidia-ml-py
    assert found["gpus"] == [] and found["about"] is None


@pytest.mark.parametrize("log, function, sizes, expected", [
    ("tuning-2.23.log", "AllGather", {37756928}, {("RING", "SIMPLE"): 1}),
    ("tuning-2.29.log", "Broadcast", {65536, 1048576}, {("RING", "SIMPLE"): 2}),
    ("tuning-2.29.log", "AllReduce", {65536}, {}),
])
def test_nccls_tuning_lines_give_its_algorithm_and_protocol(log, function, sizes, expected):
    assert nccl_tuning.tally((FIXTURES / "nccl" / log).read_bytes(), function, sizes) == Counter(expected)


def test_the_tuning_log_hands_each_size_only_what_nccl_appended_since(tmp_path):
    log = nccl_tuning.TuningLog(tmp_path / "nccl.log")
    lines = (FIXTURES / "nccl" / "tuning-2.29.log").read_bytes().splitlines(keepends=True)
    with open(log.path, "ab") as f:
        f.writelines(lines[:2])
    assert log.choice("broadcast", 32768, 2) == {"algorithm": "RING", "protocol": "SIMPLE", "calls": 1,
                                                  "source": nccl_tuning.SOURCE}
    assert log.choice("broadcast", 65536, 2) is None  # already read
    with open(log.path, "ab") as f:
        f.write(lines[1] + b"NCCL INFO Broadcast:    65536 Bytes -> Algo 1 proto 0 time 3.2\n")
    assert log.choice("broadcast", 65536, 2)["others"] == {"RING/LL": 1}


def test_the_inspector_plugins_file_gives_the_algorithm_when_the_run_loaded_it(tmp_path, monkeypatch):
    import os
    import socket

    monkeypatch.setenv("NCCL_PROFILER_PLUGIN", "/opt/nccl/libnccl-profiler-inspector.so")
    monkeypatch.setenv("NCCL_INSPECTOR_ENABLE", "1")
    monkeypatch.setenv("NCCL_INSPECTOR_DUMP_DIR", str(tmp_path))
    monkeypatch.setenv("NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS", "500")
    log = nccl_tuning.InspectorLog.find()
    assert log.path == tmp_path / f"{socket.gethostname()}-pid{os.getpid()}.log"
    lines = (FIXTURES / "nccl" / "inspector-v4.jsonl").read_text().splitlines(keepends=True)
    log.path.write_text(lines[4] + lines[1][:40])  # the v4.2 line, and a line the plugin is still writing
    assert log.choice("allreduce", 17179869184, 8) == {"algorithm": "RING", "protocol": "LL", "calls": 1,
                                                      "source": nccl_tuning.InspectorLog.SOURCE}
    assert log.choice("allreduce", 2360832, 3) is None  # v4.0 lines name no algorithm
    monkeypatch.setenv("NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS", "-1")  # dumps only at the end
    assert nccl_tuning.InspectorLog.find() is None


def test_a_host_whose_links_cannot_be_read_is_a_note_not_a_stopped_rank(monkeypatch):
    import msgspec

    from microbench.records import model
    from microbench.run import peaks

    def broken(*_args):
        raise PermissionError("/sys/class/net: permission denied")

    monkeypatch.setattr(peaks.host_links, "read_host", broken)
    found = peaks._read_links()
    assert found["notes"] == ["links not read: PermissionError: /sys/class/net: permission denied"]
    msgspec.convert(found, model.HostLinks)  # a block the record model takes
    msgspec.convert(path_peak.path_peak(["h", "g"], {"h": found, "g": found}), model.PathPeak)
    assert path_peak.path_peak(["h", "g"], {"h": found, "g": found})["gbps"] is None
