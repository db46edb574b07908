"""Who and where the ranks are: launcher discovery and ``--np`` self-launch (``launch``), the world and its
control plane (``world``, ``agree``), nodes (``nodes``), system facts (``facts``, ``async_progress``), the MPI and
torch.distributed runtimes (``mpi_runtime``, ``torch_runtime``) and the ``info`` verb (``info_cli``)."""
