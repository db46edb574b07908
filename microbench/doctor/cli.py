"""When a multi-node launch hangs or crawls, name the layer that is broken, in seconds (docs/doctor.md).

  microbench doctor --np 4                                  # 4 local ranks under the installed MPI's mpiexec
  microbench doctor -- mpirun -np 64 --hostfile hosts       # outside the launcher: also sees the launcher fail
  mpirun -np 64 --hostfile hosts microbench doctor          # launched as the benchmark is (rank 0 coordinates)
  srun -N 16 --ntasks-per-node 8 --mpi=pmix microbench doctor --out doctor.jsonl
  torchrun --nnodes 2 --nproc-per-node 4 --rdzv-endpoint HOST:29400 -m microbench doctor

Walks the layers bottom-up, a timeout at each, and stops at the first that fails, naming it in one line with what
to check next: 1 launch (a process on every node), 2 software (same versions everywhere), 3 mpi (MPI_Init, a
barrier, 8 bytes between every node pair), 4 network (interfaces, the bootstrap's, IB ports, the rendezvous port),
5 placement (no core or GPU shared), 6 torch (init and a tiny allreduce), 7 bandwidth (no node pair far below the
rest). A rank that does not finish a layer in time is named (host, rank, layer, pid) from the other ranks' reports:
after --timeout seconds without progress, or a third of it when some ranks stand at a step the others passed.
Exit status 0 when every layer that ran passed; 1 when one failed; 2 bad input; 128 + N when signal N ended it.
"""

from __future__ import annotations

import argparse
import threading
import uuid

from microbench.cluster import launch
from microbench.doctor.coordinator import Coordinator
from microbench.doctor.launch_check import LauncherState
from microbench.doctor.rendezvous import DEFAULT_DIR
from microbench.doctor.settings import DEFAULT_LAUNCH_TIMEOUT_S, DEFAULT_TIMEOUT_S, Settings, settings_of
from microbench.errors import UsageError


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("launch")
    g.add_argument("--np", type=int, metavar="N", help="start N local ranks under the installed MPI's mpiexec")
    g.add_argument("launcher", nargs=argparse.REMAINDER, metavar="-- LAUNCHER ARGS",
                   help="run this launcher command (mpirun, srun, torchrun ...) with the doctor's ranks appended; "
                        "the doctor then also sees the launcher itself fail or hang")
    g.add_argument("--hosts", metavar="H1,H2", help="the nodes the launch should reach (default: the launcher's "
                                                     "--host, --hostfile or -w)")
    g = p.add_argument_group("layers")
    g.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="S",
                   help=f"seconds a layer may go without progress before the ranks that have not finished it are "
                        f"named (default {DEFAULT_TIMEOUT_S:g})")
    g.add_argument("--launch-timeout", type=float, default=DEFAULT_LAUNCH_TIMEOUT_S, metavar="S",
                   help=f"seconds for every rank to start and check in (layer 1; default {DEFAULT_LAUNCH_TIMEOUT_S:g}: "
                        f"thousands of Python processes starting at once can take a minute)")
    g.add_argument("--skip", metavar="LAYER[,LAYER]", help="layers not to run, by name or number (mpi, network, "
                                                           "placement, torch, bandwidth; 3 to 7)")
    g.add_argument("--iface", metavar="NAME", help="the interface you expect the bootstrap and the rendezvous to use: "
                                                   "every node must have it up, and the settings must choose it")
    g.add_argument("--store-port", type=int, metavar="PORT",
                   help="the torch.distributed rendezvous port checked in layer 4 and used in layer 6 (default "
                        "MASTER_PORT, else 29500)")
    g.add_argument("--torch-backend", choices=("auto", "gloo", "nccl"), default="auto",
                   help="layer 6's backend; auto: nccl where every rank has a GPU and NCCL, else gloo")
    g.add_argument("--size", default="1M", metavar="BYTES",
                   help="layer 7's message size, each way per node pair (default 1M)")
    g = p.add_argument_group("where the ranks meet (launched without a parent)")
    g.add_argument("--rendezvous", default=DEFAULT_DIR, metavar="DIR",
                   help=f"a folder every node sees (home, scratch) where rank 0 publishes the doctor's address "
                        f"(default {DEFAULT_DIR})")
    g.add_argument("--coordinator", metavar="HOST:PORT",
                   help="without a shared folder: rank 0 (on HOST) listens on PORT and the ranks connect there")
    g.add_argument("--token", help=argparse.SUPPRESS)  # set by a parent: its ranks' proof of belonging
    g = p.add_argument_group("output")
    g.add_argument("--out", metavar="FILE.jsonl", help="append the 'doctor' record (every layer's verdict, findings "
                                                        "and figures) to this JSON Lines file")
    g.add_argument("--json", action="store_true", help="print the doctor record as JSON instead of lines")


def main(args) -> int:
    settings = settings_of(args)
    command = args.launcher[1:] if args.launcher[:1] == ["--"] else list(args.launcher)
    if command:
        if args.np is not None:
            raise UsageError("give --np N or a launcher command after --, not both")
        return _parent(args, settings, command)
    if launch.is_np_parent(args.np):
        return _parent(args, settings, None)
    if not launch.discover().under_launcher:
        raise UsageError("microbench doctor examines a launch: give --np N, put your launcher command after -- "
                         "(microbench doctor -- mpirun -np 8 --hostfile hosts), or start it under mpirun, srun or "
                         "torchrun")
    from microbench.doctor import agent

    return agent.run(args)


def _parent(args, settings: Settings, command: list[str] | None) -> int:
    """The coordinator in this process, the ranks started beside it (``--np`` or the launcher after ``--``)."""
    from microbench.doctor import hosts, launcher, record, rendezvous
    from microbench.doctor.plane import Server

    if args.out:
        record.check_writable(args.out)
    local = command is None
    server = Server(host="127.0.0.1" if local else "0.0.0.0")
    token = uuid.uuid4().hex[:16]
    addresses = ["127.0.0.1"] if local else rendezvous.local_addresses()
    ours = ["--coordinator", f"{','.join(addresses)}:{server.port}", "--token", token]
    expected_hosts = (hosts.expand_hostlist(args.hosts) if args.hosts else
                      [] if local else hosts.from_command(command))
    state = LauncherState(command=list(command or ["mpiexec"]), expected_hosts=expected_hosts)
    coordinator = Coordinator(server, token, settings, expected=args.np if local else None, launcher=state)
    outcome: list[int] = []
    thread = threading.Thread(target=lambda: outcome.append(coordinator.run()), name="microbench-doctor",
                              daemon=True)
    try:
        if local:
            def launched(proc) -> None:
                coordinator.end_launcher = lambda: launcher.end_process_group(proc, 5.0)

            status = launch.start_ranks([*args._argv, *ours], args.np, check=thread.start, launched=launched,
                                        on_signal=lambda name: coordinator.post("signal", name))
            coordinator.post("launcher", status)
        else:
            before = args._argv[:len(args._argv) - len(args.launcher)]
            rank_args = [a for a in before if a != "doctor"] + ours
            running = launcher.Launched(launcher.rank_command(command, rank_args),
                                        on_exit=lambda st: coordinator.post("launcher", st),
                                        on_signal=lambda name: coordinator.post("signal", name))
            state.tail = running.tail  # the live deque: layer 1 quotes what the launcher said
            coordinator.end_launcher = running.end
            coordinator.on_verdict = running.mute  # what it says about the ranks the doctor then ends is noise
            thread.start()
            try:
                while thread.is_alive():
                    thread.join(0.2)
            finally:
                running.restore()
        if thread.is_alive() or thread.ident is not None:
            thread.join()
    finally:
        server.close()
    return outcome[0] if outcome else 1
