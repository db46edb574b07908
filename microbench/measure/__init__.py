"""How one size is timed on one rank: the transport a run measures through (``transport``, over ``backends/``),
its buffers (``buffers``, ``device``, ``cache``), the timed loops (``loops``, ``gpu_loops``, ``native/``), one size's
measurement (``engine``: first call, warmup, timed iterations, check), its statistics (``stats``), the overlap of
non-blocking calls with compute (``overlap``, ``overlap_stats``, ``compute_kernels``) and the injected faults tests
use (``testhooks``)."""
