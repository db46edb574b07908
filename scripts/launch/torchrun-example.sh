#!/bin/bash
# microbench on torch.distributed under torchrun: gloo on CPUs, NCCL on GPUs (one GPU per local rank).
#
#   scripts/launch/torchrun-example.sh                     # this node, 2 processes, gloo, 8 B..16 MiB (minutes)
#   NPROC=8 DEVICE=cuda scripts/launch/torchrun-example.sh # 8 GPUs, NCCL, eager and CUDA-graph timings
#   # several nodes: run on each with NNODES, NODE_RANK and MASTER_ADDR set (torchrun's rendezvous)
set -eu
NPROC=${NPROC:-2}
DEVICE=${DEVICE:-cpu}
# checked sizes to 256 MiB on GPUs; on CPUs to 16 MiB unless SIZES says (gloo, checked, on 2 shared cores had
# reached only allgather at 32 MiB after 5 minutes of 8:256M)
SIZES=${SIZES:-$([ "$DEVICE" = cuda ] && echo 8:256M || echo 8:16M)}
NNODES=${NNODES:-1}
OUT=${OUT:-torchrun-$(date -u +%Y%m%dT%H%M%S)}
mkdir -p "$OUT"
RDZV=(--standalone)
[ "$NNODES" -gt 1 ] && RDZV=(--nnodes "$NNODES" --node-rank "${NODE_RANK:?}" --rdzv-backend c10d \
                              --rdzv-endpoint "${MASTER_ADDR:?}:${MASTER_PORT:-29500}")
torchrun "${RDZV[@]}" --nproc-per-node "$NPROC" --no-python \
  microbench run --backend torch --device "$DEVICE" allreduce allgather reduce_scatter broadcast latency -c \
  -m "$SIZES" --out "$OUT/torch.jsonl"
if [ "$DEVICE" = cuda ]; then  # graph launches change small-message numbers several-fold: record both
  torchrun "${RDZV[@]}" --nproc-per-node "$NPROC" --no-python \
    microbench run --backend torch --device cuda --cuda-graph allreduce allgather -m 8:1M --out "$OUT/torch-graph.jsonl"
fi
python3 -m microbench plot "$OUT"/*.jsonl -o "$OUT/plots"
