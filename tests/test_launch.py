"""Rank discovery from each launcher's environment."""

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
