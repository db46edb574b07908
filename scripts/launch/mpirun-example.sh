#!/bin/bash
# microbench under mpirun/mpiexec on a set of hosts (no scheduler), with the site's MPI.
# The mpirun must belong to the MPI that mpi4py loads (`microbench info` shows the library and its mpiexec).
#
#   HOSTS=node01,node02 scripts/launch/mpirun-example.sh
set -eu
HOSTS=${HOSTS:-localhost}
NP=${NP:-2}
OUT=${OUT:-mpirun-$(date -u +%Y%m%dT%H%M%S)}
mkdir -p "$OUT"
# Open MPI: one rank per node, ranks bound to cores; MPICH's hydra takes -hosts and -ppn instead.
mpirun -n "$NP" --host "$HOSTS" --map-by ppr:1:node --bind-to core \
  python3 -m microbench run latency bw allreduce allgather -c -m 1:64M --out "$OUT/mpi.jsonl"
mpirun -n "$NP" --host "$HOSTS" --map-by ppr:1:node python3 -m microbench run pairs --out "$OUT/pairs.jsonl"
python3 -m microbench plot "$OUT"/*.jsonl -o "$OUT/plots"
