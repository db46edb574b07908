/* A slower MPI_Allreduce, for measuring how well `microbench compare` detects a slowdown.
 *
 * Loaded with LD_PRELOAD into every rank, this MPI_Allreduce calls the library's own (PMPI_Allreduce),
 * measures how long it took (CLOCK_MONOTONIC), then spins until the call has taken (1 + f) times that,
 * f = MICROBENCH_SLOW_FRACTION (e.g. 0.10 or 0.25; 0 or unset: no delay). The timed loop is untouched:
 * it sees an MPI_Allreduce that is f slower, as after a library regression. Both ranks spin by their own
 * measure, so the collective's completion moves by about f of its time.
 *
 *   mpicc -O2 -fPIC -shared -o slow_allreduce.so slow_allreduce.c
 */
#include <mpi.h>
#include <stdlib.h>
#include <time.h>

static double fraction = -1.0;

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm)
{
    if (fraction < 0) {
        const char *text = getenv("MICROBENCH_SLOW_FRACTION");
        fraction = text ? atof(text) : 0.0;
    }
    double start = now_ns();
    int rc = PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
    if (fraction > 0) {
        double until = start + (now_ns() - start) * (1.0 + fraction);
        while (now_ns() < until) {
        }
    }
    return rc;
}
