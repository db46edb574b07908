"""microbench: collective-communication microbenchmarks for MPI and torch.distributed."""

__version__ = "0.1.0"
