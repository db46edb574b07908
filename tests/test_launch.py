"""Rank discovery from each launcher's environment."""

import pytest

from microbench.cluster.launch import discover


def test_alone():
    info = discover({})
    assert (info.launcher, info.rank, info.size, info.under_launcher) == (None, 0, 1, False)


def test_open_mpi_mpiexec():
    env = {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
           "OMPI_COMM_WORLD_LOCAL_SIZE": "4", "PMIX_RANK": "3"}
    info = discover(env)
    assert (info.launcher, info.rank, info.size, info.local_rank, info.local_size) == ("openmpi", 3, 8, 1, 4)


def test_mpich_hydra():
    info = discover({"PMI_RANK": "2", "PMI_SIZE": "4", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "2"})
    assert (info.launcher, info.rank, info.size, info.local_rank) == ("mpich", 2, 4, 0)


def test_srun_with_pmix_and_pmi2():
    slurm = {"SLURM_PROCID": "5", "SLURM_NTASKS": "6", "SLURM_LOCALID": "1", "SLURM_STEP_ID": "0", "SLURM_JOB_ID": "7"}
    assert discover({**slurm, "PMIX_RANK": "5"}).launcher == "srun"
    info = discover({**slurm, "PMI_RANK": "5", "PMI_SIZE": "6"})
    assert (info.launcher, info.rank, info.size, info.local_rank) == ("srun", 5, 6, 1)
    assert discover(slurm).rank == 5


def test_sbatch_batch_script_is_not_a_launch():
    # the batch step has SLURM_PROCID=0 but is a single shell, not a task of an srun step
    assert discover({"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_JOB_ID": "7"}).launcher is None


def test_mpirun_inside_an_allocation_uses_the_mpi_rank():
    env = {"OMPI_COMM_WORLD_RANK": "9", "OMPI_COMM_WORLD_SIZE": "16", "SLURM_PROCID": "1", "SLURM_STEP_ID": "0",
           "SLURM_NTASKS": "2"}
    info = discover(env)
    assert (info.launcher, info.rank, info.size) == ("openmpi", 9, 16)


def test_torchrun():
    env = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "x",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    info = discover(env)
    assert (info.launcher, info.rank, info.size, info.local_rank) == ("torchrun", 1, 2, 1)


def test_torchrun_inside_srun_takes_the_workers_rank_not_the_srun_tasks():
    # `srun -N 2 --ntasks-per-node=1 torchrun --nproc-per-node 4 ...`: worker 6 of 8, task 1 of srun's 2
    env = {"SLURM_PROCID": "1", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0", "PMIX_RANK": "1",
           "RANK": "6", "WORLD_SIZE": "8", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "4", "TORCHELASTIC_RUN_ID": "j1",
           "MASTER_ADDR": "node0", "MASTER_PORT": "29500"}
    info = discover(env)
    assert (info.launcher, info.rank, info.size, info.local_rank, info.local_size) == ("torchrun", 6, 8, 2, 4)


def test_rank_and_world_size_by_hand_are_read_after_every_launcher():
    env = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1"}
    assert (discover(env).launcher, discover(env).rank) == ("torchrun", 1)
    env_srun = {**env, "SLURM_PROCID": "0", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0"}
    assert (discover(env_srun).launcher, discover(env_srun).rank) == ("srun", 0)  # not torchrun's: Slurm's


@pytest.mark.parametrize("variable", ["PALS_LOCAL_RANKID", "PMI_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_RANK",
                                      "FLUX_TASK_LOCAL_ID", "JSM_NAMESPACE_LOCAL_RANK"])
def test_local_rank_of_other_launchers(variable):
    # a PMIx or PMI launcher (Cray PALS, MVAPICH's mpirun_rsh, Flux, LSF jsrun) that names the local rank its own way
    env = {"PMI_RANK": "5", "PMI_SIZE": "8", variable: "3"}
    assert discover(env).local_rank == 3
    assert discover({"PMIX_RANK": "5", variable: "1"}).local_rank == 1


def test_a_device_rank_without_a_local_rank_is_refused_where_several_gpus_are_visible():
    from microbench.errors import RunError
    from microbench.measure.device import index_for_rank

    assert index_for_rank(5, 4, None) == 1 and index_for_rank(5, 8, 4) == 1
    assert index_for_rank(None, 1, None) == 0  # one GPU per rank (CUDA_VISIBLE_DEVICES): GPU 0 is right
    with pytest.raises(RunError, match="cannot tell this rank's GPU: 4 GPUs are visible"):
        index_for_rank(None, 4, None)


def test_ranks_sharing_a_gpu_are_found_by_host_and_uuid():
    from microbench.measure.device import shared_gpus

    gpus = [("a", "GPU-0"), ("a", "GPU-1"), ("b", "GPU-0"), ("a", "GPU-0"), ("b", None), ("b", None)]
    assert shared_gpus(gpus) == {("a", "GPU-0"): [0, 3]}  # the same UUID on two hosts is two GPUs
    assert shared_gpus([("a", "GPU-0"), ("a", "GPU-1")]) == {}


def test_the_memory_check_keeps_room_for_nccls_own_buffers():
    from microbench.errors import RunError
    from microbench.options import RunOptions
    from microbench.run.preflight import NCCL_RESERVE_BYTES, MemorySpace, check_memory

    opts = RunOptions(benchmarks=["allreduce"], sizes=[1 << 30])  # 1 GiB send + 1 GiB receive per rank
    fits = MemorySpace(free_bytes=4 << 30, sharing_ranks=1, cache_bytes=0, where="GPU 0")
    check_memory(opts, 2, fits)
    with pytest.raises(RunError, match="less 1.0 GiB kept for NCCL"):
        check_memory(opts, 2, MemorySpace(free_bytes=3 << 30, sharing_ranks=1, cache_bytes=0, where="GPU 0",
                                          reserved_bytes=NCCL_RESERVE_BYTES))
    check_memory(opts, 2, MemorySpace(free_bytes=3 << 30, sharing_ranks=1, cache_bytes=0, where="GPU 0"))


def test_a_time_budget_is_refused_with_cuda_graphs():
    from microbench.cli import build_parser
    from microbench.errors import UsageError
    from microbench.options import RunOptions

    argv = ["run", "allreduce", "--backend", "torch", "--device", "cuda", "--cuda-graph", "--time-budget", "1"]
    with pytest.raises(UsageError, match="--time-budget sizes the timed iterations from the eager warmup"):
        RunOptions.from_args(build_parser(argv).parse_args(argv))
