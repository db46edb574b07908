"""The ``replay`` verb: one training iteration's communication issued through the benchmark table on real
communicators, with its compute, timed and set beside its prediction (docs/replay.md)."""
