/*
 * A plain C reference for microbench's own-cost benchmarks (scripts/bench_overhead.py).
 *
 *   mpiexec -n 2 reference latency|allreduce|iallreduce SIZES ITERATIONS WARMUP
 *
 * SIZES: bytes, comma-separated (e.g. 8,1024,65536), measured in that order in one launch, as microbench
 * measures its sizes.
 * latency:   ping-pong between ranks 0 and 1 (blocking MPI_Send/MPI_Recv, uint8), timed on rank 0 as one
 *            interval over all iterations; prints half the round trip in microseconds.
 * allreduce: back-to-back MPI_Allreduce of SIZE bytes of float (sum), each rank timing one interval over
 *            all iterations; prints the mean across ranks of the per-rank mean latency in microseconds.
 * iallreduce: the same with MPI_Iallreduce + MPI_Wait back to back (a non-blocking benchmark's t_pure).
 * Per size: a barrier, WARMUP untimed iterations, then ITERATIONS timed ones back to back in the same loop.
 * Buffers are page-aligned (as OMB's and microbench's) and written before timing; the clock is CLOCK_MONOTONIC.
 * (Alignment matters: a 16-byte-aligned receive buffer made a 64 KiB shared-memory allreduce twice as slow.)
 * Output: one JSON line per size on rank 0.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

/* One size: returns the figure described above (meaningful on rank 0). Exported: same_launch.py calls it
 * from a shared build of this file (-Dmain=reference_main), in the same processes as microbench's loops. */
double reference_measure(const char *bench, long nbytes, int iters, int warmup, int rank, int size) {
    char *sbuf = NULL, *rbuf = NULL;
    if (posix_memalign((void **)&sbuf, 4096, nbytes ? nbytes : 1) || posix_memalign((void **)&rbuf, 4096, nbytes ? nbytes : 1)) {
        fprintf(stderr, "reference: cannot allocate %ld bytes\n", nbytes);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    memset(sbuf, 1, nbytes);
    memset(rbuf, 0, nbytes);
    double result = 0.0;
    if (strcmp(bench, "latency") == 0) {
        int peer = rank == 0 ? 1 : 0;
        double t0 = 0.0;
        MPI_Barrier(MPI_COMM_WORLD);
        for (int i = 0; i < warmup + iters; i++) {
            if (i == warmup) t0 = now_us();
            if (rank == 0) {
                MPI_Send(sbuf, (int)nbytes, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
                MPI_Recv(rbuf, (int)nbytes, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else if (rank == 1) {
                MPI_Recv(rbuf, (int)nbytes, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(sbuf, (int)nbytes, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
            }
        }
        result = (now_us() - t0) / (2.0 * iters);
    } else {
        int count = (int)(nbytes / sizeof(float));
        double t0 = 0.0, mine, sum = 0.0;
        MPI_Barrier(MPI_COMM_WORLD);
        int nonblocking = strcmp(bench, "iallreduce") == 0;
        MPI_Request req;
        for (int i = 0; i < warmup + iters; i++) {
            if (i == warmup) t0 = now_us();
            if (nonblocking) {
                MPI_Iallreduce(sbuf, rbuf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req);
                MPI_Wait(&req, MPI_STATUS_IGNORE);
            } else {
                MPI_Allreduce(sbuf, rbuf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            }
        }
        mine = (now_us() - t0) / iters;
        MPI_Reduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        result = sum / size;
    }
    free(sbuf);
    free(rbuf);
    return result;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc != 5 || (strcmp(argv[1], "latency") != 0 && strcmp(argv[1], "allreduce") != 0 &&
                      strcmp(argv[1], "iallreduce") != 0)) {
        if (rank == 0) fprintf(stderr, "usage: reference latency|allreduce|iallreduce SIZES ITERATIONS WARMUP\n");
        MPI_Finalize();
        return 2;
    }
    const char *bench = argv[1];
    int iters = atoi(argv[3]), warmup = atoi(argv[4]);
    for (char *item = strtok(argv[2], ","); item; item = strtok(NULL, ",")) {
        long nbytes = atol(item);
        double result = reference_measure(bench, nbytes, iters, warmup, rank, size);
        if (rank == 0) printf("{\"benchmark\": \"%s\", \"size_bytes\": %ld, \"avg_us\": %.6f}\n", bench, nbytes, result);
    }
    MPI_Finalize();
    return 0;
}
