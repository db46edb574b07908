"""What is measured: the benchmark table (``table``: one declarative ``Collective`` entry per benchmark, as
nccl-tests' testColl), the types its entries are built from (``base``), their check data (``checkdata``), the
element types and reductions (``dtypes``), and the sizes a workload file asks of each benchmark
(``workload_sizes``). Imports nothing above ``errors`` and ``units``."""
