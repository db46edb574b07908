"""Every result against the link it ran on, end to end: 4 emulated nodes, node1's link shaped to 200 Mbit/s.

``microbench run allreduce -m 1M:16M`` with one rank per node: each node's lowest rank reads its links (its
emu0: a veth that sysfs says is 10000 Mb/s, shaped by tc tbf to 200 Mbit/s), rank 0 gathers them, and the path's
peak is the slowest host's network: node1's 200 Mbit/s, 0.025 GB/s. The table prints a Peak% column and the
line naming that link; ``check`` with ``min_peak_share`` passes or fails by the recorded shares.
"""

from __future__ import annotations

import re
import sys

import pytest

from conftest import read_jsonl, results_of, run_process

SLOW, RATE_MBIT = "node1", 200
PEAK_GBPS = RATE_MBIT / 8 / 1000
RUN_LIMIT_S = 240
pytestmark = pytest.mark.timeout(RUN_LIMIT_S + 120)


@pytest.fixture(scope="module")
def shaped_run(emulated_cluster, mpi_lib, tmp_path_factory):
    """(records file, stdout) of allreduce -m 1M:16M on node0..node3 with node1 at 200 Mbit/s."""
    if mpi_lib[1].abi != "openmpi":
        pytest.skip(f"the emulated cluster launches with Open MPI's prterun; this environment has {mpi_lib[1].abi}")
    out = tmp_path_factory.mktemp("peaks") / "shaped.jsonl"
    with emulated_cluster.throttled(SLOW, RATE_MBIT):
        cmd, env = emulated_cluster.microbench_command(
            ["run", "allreduce", "-m", "1M:16M", "-i", "3", "-x", "1", "--out", str(out)],
            per_node=1, hosts=emulated_cluster.hosts[:4])
        proc = run_process(cmd, env=env, timeout=RUN_LIMIT_S)
    assert proc.returncode == 0, proc.output
    return out, proc.stdout


def test_each_hosts_links_are_in_the_run_record(shaped_run):
    run = read_jsonl(shaped_run[0])[0]
    assert sorted(run["links"]) == ["node0", "node1", "node2", "node3"]
    for host, links in run["links"].items():
        emu0 = next(n for n in links["net"] if n["name"] == "emu0")
        assert emu0["speed_mbps"] == 10000 and emu0["ipv4"].startswith("10.77.0.")  # the veth's nominal speed
        assert emu0.get("shaped_mbps") == (RATE_MBIT if host == SLOW else None), (host, emu0)
    assert run["path_peak"] == {"tier": "network", "gbps": PEAK_GBPS, "link": run["path_peak"]["link"]}
    assert run["path_peak"]["link"].startswith(f"{SLOW} emu0 200 Mbit/s (tc tbf rate")


def test_the_table_names_the_200_mbit_link_and_prints_each_share(shaped_run):
    path, text = shaped_run
    assert re.search(rf"^# peak share: busbw / {PEAK_GBPS:g} GB/s, the path's peak \(network\): "
                     rf"{SLOW} emu0 200 Mbit/s \(tc tbf", text, re.M), text
    header = next(line for line in text.splitlines() if line.startswith("#    Size(B)"))
    assert header.split()[-1] == "Peak%"
    rows = {int(line.split()[0]): line.split()[-1] for line in text.splitlines() if re.match(r"^\s+\d+\s", line)}
    results = results_of(path)
    assert sorted(rows) == sorted(r["size_bytes"] for r in results) == [1 << k for k in range(20, 25)]
    for r in results:
        assert r["peak"]["gbps"] == PEAK_GBPS and r["peak"]["tier"] == "network"
        assert r["peak"]["share"] == pytest.approx(r["busbw_gbps"] / PEAK_GBPS, rel=1e-5)
        assert rows[r["size_bytes"]] == f"{r['peak']['share'] * 100:.1f}%"
        # the shaped link is what limits the allreduce: no size moves faster than it allows
        assert 0.05 < r["peak"]["share"] < 1.0, r


def _check(path, tmp_path, limit: float) -> tuple[int, str]:
    spec = tmp_path / f"share{limit}.toml"
    spec.write_text(f'[[rule]]\nbenchmark = "allreduce"\nmin_peak_share = {limit}\n')
    proc = run_process([sys.executable, "-m", "microbench", "check", str(path), "--spec", str(spec)], timeout=60)
    return proc.returncode, proc.stdout


def test_check_min_peak_share_passes_or_fails_by_the_shares(shaped_run, tmp_path):
    path = shaped_run[0]
    shares = [r["peak"]["share"] for r in results_of(path)]
    code, text = _check(path, tmp_path, 0.5)
    assert code == (0 if min(shares) >= 0.5 else 1), text
    assert f"rule 1 {'PASS' if min(shares) >= 0.5 else 'FAIL'}: allreduce all sizes: busbw share of the path's peak" \
           in text
    code, text = _check(path, tmp_path, round(min(shares) * 0.9, 4))
    assert code == 0 and "rule 1 PASS" in text, text
    code, text = _check(path, tmp_path, min(1.0, round(max(shares) * 1.1, 4)))
    assert code == 1 and "rule 1 FAIL" in text, text
