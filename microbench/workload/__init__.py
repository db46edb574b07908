"""LLM workload message distributions: models and schemes, trace readers, weighting by measured curves."""

from microbench.benchmarks.workload_sizes import sizes_for_benchmarks

__all__ = ["sizes_for_benchmarks"]
