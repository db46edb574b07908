"""What a run records about the machine (cluster/machine.py, run/machine_state.py) and which recorded values may
explain a step (cluster/conditions.py): issue 39."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from microbench.cluster import conditions, machine

from conftest import microbench, read_jsonl


def fake_proc(root: Path, *, busy: int, steal: int, load: str, running: int, processes: dict) -> Path:
    """A /proc with what machine.snapshot reads: loadavg, stat (2 CPUs) and PID/stat (name, parent, ticks)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "loadavg").write_text(f"{load} 3/120 999\n")
    # user nice system idle iowait irq softirq steal
    (root / "stat").write_text(f"cpu  {int(busy)} 0 0 5000 0 0 0 {int(steal)} 0 0\ncpu0 1 0 0 0\ncpu1 1 0 0 0\n"
                               f"procs_running {running}\n")
    for pid, (name, parent, ticks) in processes.items():
        (root / str(pid)).mkdir(exist_ok=True)
        # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime ...
        (root / str(pid) / "stat").write_text(f"{pid} ({name}) R {parent} 1 1 0 -1 0 0 0 0 0 {int(ticks)} 0 0 0\n")
    return root


def test_the_others_cpu_time_excludes_the_runs_own_processes(tmp_path, monkeypatch):
    hz = machine._HZ
    start = machine.snapshot(str(fake_proc(tmp_path / "a", busy=1000, steal=10, load="6.0 5.0 4.0", running=5,
                                           processes={10: ("prterun", 1, 0), 11: ("python3", 10, 0),
                                                      12: ("python3", 10, 0), 40: ("cc1 (a compiler)", 1, 0)})))
    monkeypatch.setattr(machine.time, "monotonic", lambda: start.wall + 2.0)  # two seconds later
    # the ranks 11 and 12 used 2 s each, the compiler 1.5 s; the CPUs' busy time grew by all of it
    end = machine.snapshot(str(fake_proc(tmp_path / "b", busy=1000 + 5.5 * hz, steal=10 + 0.2 * hz,
                                         load="7.5 5.0 4.0", running=4,
                                         processes={10: ("prterun", 1, 0), 11: ("python3", 10, 2 * hz),
                                                    12: ("python3", 10, 2 * hz), 40: ("cc1 (a compiler)", 1, 1.5 * hz)})))
    own = machine.own_processes({11, 12}, end)
    assert own == {10, 11, 12}  # the ranks and their launcher
    state = machine.state(start, end, own, "vm")
    assert state["cpus"] == 2 and state["load_avg"] == [7.5, 5.0, 4.0] and state["running"] == 4
    assert state["window_s"] == 2.0
    assert state["others_cpus"] == pytest.approx(0.75)  # 1.5 s of 5.5 s busy is not the run's, over 2 s
    assert state["steal_cpus"] == pytest.approx(0.1)
    assert state["busy"] == [{"pid": 40, "name": "cc1 (a compiler)", "cpus": 0.75}]
    assert machine.snapshot(str(tmp_path / "missing")) is None


def test_other_processes_on_the_gpus_are_read_from_nvidia_smi(tmp_path, monkeypatch):
    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nprintf '%s\\n' '111, python, 2048, GPU-aaa' '222, trainer, 512, GPU-bbb' "
                    "'333, ours, 10, GPU-aaa'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    found = machine.gpu_processes({333})
    assert found == [{"pid": 111, "name": "python", "gpu": "GPU-aaa", "used_bytes": 2048 << 20},
                     {"pid": 222, "name": "trainer", "gpu": "GPU-bbb", "used_bytes": 512 << 20}]
    assert [p["pid"] for p in machine.gpu_processes({333}, {"GPU-bbb"})] == [222]
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert machine.gpu_processes(set()) is None


def test_per_launch_values_are_not_conditions():
    env = {"MICROBENCH_SIGNAL_NOTE": "/tmp/microbench-signal-x", "OMPI_MCA_initial_wdir": "/stage/x",
           "OMPI_MCA_btl": "^ofi", "UCX_TLS": "rc", "OMPI_MCA_orte_hnp_uri": "1.2.3.4:5", "NCCL_COMM_ID": "h:1",
           "MICROBENCH_TIMER": "tsc", "HOME": "/root", "SLURM_JOB_ID": "7"}
    kept, apart = conditions.split_env(env)
    assert kept == {"MICROBENCH_TIMER": "tsc", "OMPI_MCA_btl": "^ofi", "UCX_TLS": "rc"}
    assert set(apart) == {"MICROBENCH_SIGNAL_NOTE", "OMPI_MCA_initial_wdir", "OMPI_MCA_orte_hnp_uri", "NCCL_COMM_ID"}
    text = "\n".join(conditions.table_lines())
    for pattern, why in conditions.PER_LAUNCH:
        assert f"{pattern}: {why}" in text  # one list, with the reason for each


def test_a_run_records_its_machine_state_and_keeps_per_launch_values_apart(tmp_path):
    # the busy loop the record must name, ahead of other work on the machine (other tests' ranks, a loaded CI
    # host): as root at nice -10, about nine times the CPU share of a nice-0 process, so it stays in the record's
    # list of the busiest processes and above 0.2 CPUs under load (at load 9 at nice 0 it got 0.18)
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"],
                           preexec_fn=(lambda: os.nice(-10)) if os.geteuid() == 0 else None)
    try:
        time.sleep(0.5)
        out = tmp_path / "r.jsonl"
        proc = microbench("run", "--np", "2", "allreduce", "-m", "8", "-i", "200000", "-x", "10", "--out", str(out),
                          timeout=180)
        assert proc.returncode == 0, proc.output
    finally:
        hog.kill()
        hog.wait()
    recs = read_jsonl(out)
    run, end = recs[0], recs[-1]
    assert "MICROBENCH_SIGNAL_NOTE" in run["per_launch"]["env"] and "OMPI_MCA_initial_wdir" in run["per_launch"]["env"]
    assert not {"MICROBENCH_SIGNAL_NOTE", "OMPI_MCA_initial_wdir"} & set(run["conditions"]["env"])
    start, = run["machine"]
    over, = end["machine"]
    assert start["host"] == over["host"] == run["hosts"][0] and over["cpus"] >= 1 and len(over["load_avg"]) == 3
    assert over["window_s"] > 0.1 and over["others_cpus"] > 0.3  # at least most of the busy loop's CPU
    hogged = [b for b in over["busy"] if b["pid"] == hog.pid]
    assert hogged and hogged[0]["cpus"] > 0.2, over["busy"]


def test_info_prints_the_list_with_its_reasons():
    proc = microbench("info", "--conditions", env={"MICROBENCH_SIGNAL_NOTE": "/tmp/x", "UCX_TLS": "rc"})
    assert proc.returncode == 0, proc.output
    assert "MICROBENCH_SIGNAL_NOTE: a temporary file each `run --np` launch makes" in proc.stdout
    last = proc.stdout.splitlines()[-1]
    assert "UCX_TLS" in last.split(";")[0] and "MICROBENCH_SIGNAL_NOTE" in last.split(";")[1], last
