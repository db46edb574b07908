"""Other tools' results as microbench records: OSU Micro-Benchmarks (omb) and nccl-tests (nccl_tests, nccl_text).

Each parser turns a file into tool runs (parsed.ToolRun); to_records.imported_records writes them in
microbench's record format with their source; cli is the ``microbench import`` verb.
"""
