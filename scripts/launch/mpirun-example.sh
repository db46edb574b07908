#!/bin/bash
# microbench under mpirun/mpiexec on a set of hosts (no scheduler), with the site's MPI.
# The mpirun must belong to the MPI that mpi4py loads (`microbench info` shows the library and its mpiexec).
#
#   HOSTS=node01,node02 scripts/launch/mpirun-example.sh      # one rank per host (PPN=1), 2 ranks
#   scripts/launch/mpirun-example.sh                          # a try on this machine: 2 ranks on localhost
#   HOSTS=node01,node02 PPN=4 OUT=acc scripts/launch/mpirun-example.sh
#
# PPN: ranks per host (default 1 on several hosts, 2 on one); NP: ranks in all (default hosts x PPN);
# OUT: the folder of records and figures (default mpirun-<UTC time>). The sweep is the OMB one (-m 1:64M,
# OMB's iteration counts, data checked): minutes on idle cores, most of it the large sizes; on 2 cores shared
# with other work (load 18) the latency sweep alone took over 15 minutes.
set -eu
HOSTS=${HOSTS:-localhost}
nhosts=$(tr ',' '\n' <<<"$HOSTS" | grep -c .)
PPN=${PPN:-$([ "$nhosts" = 1 ] && echo 2 || echo 1)}
NP=${NP:-$((nhosts * PPN))}
OUT=${OUT:-mpirun-$(date -u +%Y%m%dT%H%M%S)}
# Open MPI: each host offers PPN slots (host:PPN) and gets PPN ranks, bound to cores; MPICH's hydra takes
# -hosts and -ppn instead.
slots=$(tr ',' '\n' <<<"$HOSTS" | grep . | sed "s/\$/:$PPN/" | paste -sd, -)
mkdir -p "$OUT"
mpirun -n "$NP" --host "$slots" --map-by "ppr:$PPN:node" --bind-to core \
  python3 -m microbench run latency bw allreduce allgather -c -m 1:64M --out "$OUT/mpi.jsonl"
mpirun -n "$NP" --host "$slots" --map-by "ppr:$PPN:node" python3 -m microbench run pairs --out "$OUT/pairs.jsonl"
python3 -m microbench plot "$OUT"/*.jsonl -o "$OUT/plots"
