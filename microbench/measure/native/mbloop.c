/*
 * microbench native timing loop: the timed region of every MPI benchmark, in C.
 *
 * Python builds one mb_call per buffer slot (handles taken from mpi4py objects by address, so the
 * same source serves the Open MPI and MPICH ABIs) and calls mb_run, which performs `iters` iterations
 * and writes each iteration's duration in nanoseconds (CLOCK_MONOTONIC, the clock behind Python's
 * time.perf_counter_ns). Nothing else runs inside the timed region.
 *
 * Lean mode (sync == 0): one clock read between consecutive iterations, t[i+1] - t[i] (the ping-pong
 * initiator reads it between its send and its receive: see MB_LEAN_PINGPONG). Where the CPU has
 * an invariant TSC (x86-64 with constant_tsc and nonstop_tsc) and mb_calibrate enabled it, that read is
 * RDTSC (about 12 ns against about 29 ns for clock_gettime on the machines we measured: at 0.2 us per
 * ping-pong half round trip the difference is several percent); the ticks are converted to nanoseconds
 * after the loop with the rate mb_calibrate measured against CLOCK_MONOTONIC.
 * Barrier mode (sync == 1): MPI_Barrier before each iteration, outside the timing.
 * flush_bytes > 0: before each iteration, untimed, write flush_bytes of flush_buf (evicts caches).
 *
 * Non-blocking collectives (MB_I*): mb_run times post + MPI_Wait back to back (t_pure); mb_run_overlap times
 * post, a calibrated host compute kernel (mbcompute.c) cut into chunks with an MPI_Test after each, and
 * MPI_Wait, each part apart (see docs/overlap.md).
 */
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mbcompute.c"

enum {
    MB_NOTHING = 0,
    MB_ALLREDUCE = 1,
    MB_ALLGATHER = 2,
    MB_REDUCE_SCATTER = 3,
    MB_BCAST = 4,
    MB_REDUCE = 5,
    MB_ALLTOALL = 6,
    MB_PINGPONG = 7,
    MB_STREAM = 8,
    MB_BISTREAM = 9,
    MB_REDUCE_SCATTER_V = 10,
    MB_IALLREDUCE = 11,
    MB_IALLGATHER = 12,
    MB_IREDUCE_SCATTER = 13,
    MB_IBCAST = 14,
    MB_IREDUCE = 15,
    MB_IALLTOALL = 16,
    MB_IREDUCE_SCATTER_V = 17,
    MB_ALLTOALLV = 18,
    MB_IALLTOALLV = 19,
};

#define MB_TAG_DATA 1
#define MB_TAG_ACK 2

typedef struct {
    int kind;
    int count;       /* elements: see Python's NativeMPIBackend for the meaning per kind */
    int peer;        /* point to point partner */
    int root;
    int initiator;   /* point to point: starts the ping-pong / sends the window */
    int window;
    void *sbuf;      /* NULL means MPI_IN_PLACE for the collectives that allow it */
    void *rbuf;
    void *ack;
    const void *comm_addr;   /* address of an MPI_Comm (mpi4py's _addressof) */
    const void *dtype_addr;  /* address of an MPI_Datatype */
    const void *op_addr;     /* address of an MPI_Op */
    const int *counts;       /* MB_REDUCE_SCATTER_V: the n receive counts of MPI_Reduce_scatter; MB_ALLTOALLV:
                                send counts, send displacements, receive counts, receive displacements (count
                                = n of each) */
} mb_call;

static inline int64_t mb_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

#if defined(__x86_64__)
#include <x86intrin.h>
static inline uint64_t mb_ticks(void) { return __rdtsc(); }
#define MB_HAVE_TSC 1
#else
static inline uint64_t mb_ticks(void) { return (uint64_t)mb_now(); }
#define MB_HAVE_TSC 0
#endif

static inline int64_t mb_no_clock(void) { return 0; } /* for loops whose durations are not used */

static int mb_use_tsc = 0;
static double mb_ns_per_tick = 1.0;

/*
 * Enable (want_tsc != 0) or disable the TSC for the lean loop. With it, measure its rate against
 * CLOCK_MONOTONIC over about `ms` milliseconds. Returns nanoseconds per tick, or 0 when the clock is
 * CLOCK_MONOTONIC (no TSC asked for or none on this architecture).
 */
double mb_calibrate(int want_tsc, int ms) {
    mb_use_tsc = 0;
    mb_ns_per_tick = 1.0;
    if (!want_tsc || !MB_HAVE_TSC) return 0.0;
    int64_t c0 = mb_now();
    uint64_t t0 = mb_ticks();
    int64_t c1;
    do { c1 = mb_now(); } while (c1 - c0 < (int64_t)ms * 1000000LL);
    uint64_t t1 = mb_ticks();
    if (t1 <= t0) return 0.0;
    mb_ns_per_tick = (double)(c1 - c0) / (double)(t1 - t0);
    mb_use_tsc = 1;
    return mb_ns_per_tick;
}

int mb_abi_comm_size(void) { return (int)sizeof(MPI_Comm); }

int mb_library_version(char *out, int len) {
    char buf[MPI_MAX_LIBRARY_VERSION_STRING];
    int n = 0;
    MPI_Get_library_version(buf, &n);
    if (len <= 0) return n;
    strncpy(out, buf, (size_t)len - 1);
    out[len - 1] = '\0';
    return n;
}

/* Start the non-blocking collective of call c (an MB_I* kind) into *req. */
static inline int mb_post(const mb_call *c, MPI_Comm comm, MPI_Datatype dt, MPI_Op op, MPI_Request *req) {
    const void *s = c->sbuf ? c->sbuf : MPI_IN_PLACE;
    switch (c->kind) {
    case MB_IALLREDUCE:
        return MPI_Iallreduce(s, c->rbuf, c->count, dt, op, comm, req);
    case MB_IALLGATHER:
        return MPI_Iallgather(s, c->count, dt, c->rbuf, c->count, dt, comm, req);
    case MB_IREDUCE_SCATTER:
        return MPI_Ireduce_scatter_block(s, c->rbuf, c->count, dt, op, comm, req);
    case MB_IREDUCE_SCATTER_V:
        return MPI_Ireduce_scatter(s, c->rbuf, c->counts, dt, op, comm, req);
    case MB_IBCAST:
        return MPI_Ibcast(c->sbuf, c->count, dt, c->root, comm, req);
    case MB_IREDUCE:
        return MPI_Ireduce(s, c->rbuf, c->count, dt, op, c->root, comm, req);
    case MB_IALLTOALL:
        return MPI_Ialltoall(c->sbuf, c->count, dt, c->rbuf, c->count, dt, comm, req);
    case MB_IALLTOALLV:
        return MPI_Ialltoallv(c->sbuf, c->counts, c->counts + c->count, dt, c->rbuf, c->counts + 2 * c->count,
                              c->counts + 3 * c->count, dt, comm, req);
    default:
        return -1;
    }
}

/* One iteration of call c; reqs has room for 2 * window requests. */
static inline int mb_once(const mb_call *c, MPI_Comm comm, MPI_Datatype dt, MPI_Op op, MPI_Request *reqs) {
    const void *s = c->sbuf ? c->sbuf : MPI_IN_PLACE;
    int w, rc = MPI_SUCCESS;
    switch (c->kind) {
    case MB_NOTHING:
        return MPI_SUCCESS;
    case MB_ALLREDUCE:
        return MPI_Allreduce(s, c->rbuf, c->count, dt, op, comm);
    case MB_ALLGATHER:
        return MPI_Allgather(s, c->count, dt, c->rbuf, c->count, dt, comm);
    case MB_REDUCE_SCATTER:
        return MPI_Reduce_scatter_block(s, c->rbuf, c->count, dt, op, comm);
    case MB_REDUCE_SCATTER_V:
        return MPI_Reduce_scatter(s, c->rbuf, c->counts, dt, op, comm);
    case MB_BCAST:
        return MPI_Bcast(c->sbuf, c->count, dt, c->root, comm);
    case MB_REDUCE:
        return MPI_Reduce(s, c->rbuf, c->count, dt, op, c->root, comm);
    case MB_ALLTOALL:
        return MPI_Alltoall(c->sbuf, c->count, dt, c->rbuf, c->count, dt, comm);
    case MB_ALLTOALLV:
        return MPI_Alltoallv(c->sbuf, c->counts, c->counts + c->count, dt, c->rbuf, c->counts + 2 * c->count,
                             c->counts + 3 * c->count, dt, comm);
    case MB_PINGPONG:
        if (c->initiator) {
            rc = MPI_Send(c->sbuf, c->count, dt, c->peer, MB_TAG_DATA, comm);
            if (rc == MPI_SUCCESS) rc = MPI_Recv(c->rbuf, c->count, dt, c->peer, MB_TAG_DATA, comm, MPI_STATUS_IGNORE);
        } else {
            rc = MPI_Recv(c->rbuf, c->count, dt, c->peer, MB_TAG_DATA, comm, MPI_STATUS_IGNORE);
            if (rc == MPI_SUCCESS) rc = MPI_Send(c->sbuf, c->count, dt, c->peer, MB_TAG_DATA, comm);
        }
        return rc;
    case MB_STREAM:
        if (c->initiator) {
            for (w = 0; w < c->window; w++)
                MPI_Isend(c->sbuf, c->count, dt, c->peer, MB_TAG_DATA, comm, &reqs[w]);
            rc = MPI_Waitall(c->window, reqs, MPI_STATUSES_IGNORE);
            if (rc == MPI_SUCCESS) rc = MPI_Recv(c->ack, 1, dt, c->peer, MB_TAG_ACK, comm, MPI_STATUS_IGNORE);
        } else {
            for (w = 0; w < c->window; w++)
                MPI_Irecv(c->rbuf, c->count, dt, c->peer, MB_TAG_DATA, comm, &reqs[w]);
            rc = MPI_Waitall(c->window, reqs, MPI_STATUSES_IGNORE);
            if (rc == MPI_SUCCESS) rc = MPI_Send(c->ack, 1, dt, c->peer, MB_TAG_ACK, comm);
        }
        return rc;
    case MB_BISTREAM:
        for (w = 0; w < c->window; w++)
            MPI_Irecv(c->rbuf, c->count, dt, c->peer, MB_TAG_DATA, comm, &reqs[w]);
        for (w = 0; w < c->window; w++)
            MPI_Isend(c->sbuf, c->count, dt, c->peer, MB_TAG_DATA, comm, &reqs[c->window + w]);
        return MPI_Waitall(2 * c->window, reqs, MPI_STATUSES_IGNORE);
    case MB_IALLREDUCE: case MB_IALLGATHER: case MB_IREDUCE_SCATTER: case MB_IBCAST: case MB_IREDUCE:
    case MB_IALLTOALL: case MB_IREDUCE_SCATTER_V: case MB_IALLTOALLV:
        rc = mb_post(c, comm, dt, op, &reqs[0]);
        return rc == MPI_SUCCESS ? MPI_Wait(&reqs[0], MPI_STATUS_IGNORE) : rc;
    default:
        return -1;
    }
}

static void mb_flush(volatile unsigned char *buf, long long nbytes, int iteration) {
    for (long long k = 0; k < nbytes; k += 64) buf[k] = (unsigned char)(iteration + k);
}

/*
 * Run `iters` iterations; iteration i uses calls[(start + i) % ncalls]. Durations (ns) go to out_ns.
 * Returns 0, or the MPI error code of the first failing call.
 */
int mb_run(const mb_call *calls, int ncalls, int iters, int start, int sync, void *flush_buf,
           long long flush_bytes, int64_t *out_ns) {
    if (iters <= 0) return 0;
    int maxwin = 1;
    for (int k = 0; k < ncalls; k++)
        if (calls[k].window > maxwin) maxwin = calls[k].window;
    MPI_Request *reqs = (MPI_Request *)malloc(sizeof(MPI_Request) * 2 * (size_t)maxwin);
    if (!reqs) return -2;
    MPI_Comm comm = *(const MPI_Comm *)calls[0].comm_addr;
    MPI_Datatype dt = *(const MPI_Datatype *)calls[0].dtype_addr;
    MPI_Op op = calls[0].op_addr ? *(const MPI_Op *)calls[0].op_addr : MPI_OP_NULL;
    int rc = MPI_SUCCESS;
    int k = start % ncalls;
    /*
     * Lean loops: one clock read between iterations, nothing else. They are written out per clock (TSC or
     * CLOCK_MONOTONIC) and, for the benchmarks whose small messages cost least (allreduce, ping-pong), per
     * benchmark with the MPI calls inline, so that the timed loop holds no branch on either and no call
     * other than MPI's (in C, a dispatching call per iteration cost 1 to 2 % of an 8-byte ping-pong).
     */
#define MB_LEAN(NOW, TYPE, BODY)                                  \
    do {                                                          \
        TYPE prev = NOW();                                        \
        for (int i = 0; i < iters; i++) {                         \
            const mb_call *c = &calls[k];                         \
            BODY;                                                 \
            TYPE now = NOW();                                     \
            out_ns[i] = (int64_t)(now - prev);                    \
            prev = now;                                           \
            if (rc != MPI_SUCCESS) break;                         \
            if (++k == ncalls) k = 0;                             \
        }                                                         \
    } while (0)
    /*
     * The ping-pong initiator reads its clock between MPI_Send and MPI_Recv, while the message is in flight
     * and the peer is working, rather than between MPI_Recv and the next MPI_Send, where the read delays the
     * next ping (in C, in one launch: +1.3 % at 8 B against +3.1 %). Sample i is then the time from the end
     * of send i to the end of send i+1: one round trip (receive i, send i+1). The last iteration also reads
     * the clock before its send and its sample is that iteration's own round trip. A single iteration (the
     * first call, --check) is timed around both calls by MB_LEAN, with no read in between.
     */
#define MB_LEAN_PINGPONG(NOW, TYPE)                                                               \
    do {                                                                                          \
        TYPE sent_prev = 0, before_last = 0;                                                      \
        for (int i = 0; i < iters; i++) {                                                         \
            const mb_call *c = &calls[k];                                                         \
            if (i == iters - 1) before_last = NOW();                                              \
            rc = MPI_Send(c->sbuf, c->count, dt, c->peer, MB_TAG_DATA, comm);                     \
            TYPE sent = NOW();                                                                    \
            if (i > 0) out_ns[i - 1] = (int64_t)(sent - sent_prev);                               \
            sent_prev = sent;                                                                     \
            if (rc == MPI_SUCCESS)                                                                \
                rc = MPI_Recv(c->rbuf, c->count, dt, c->peer, MB_TAG_DATA, comm, MPI_STATUS_IGNORE); \
            if (rc != MPI_SUCCESS) break;                                                         \
            if (i == iters - 1) out_ns[i] = (int64_t)(NOW() - before_last);                       \
            if (++k == ncalls) k = 0;                                                             \
        }                                                                                         \
    } while (0)
#define MB_LEAN_ALL(NOW, TYPE)                                                                              \
    do {                                                                                                    \
        if (kind == MB_ALLREDUCE)                                                                           \
            MB_LEAN(NOW, TYPE, rc = MPI_Allreduce(c->sbuf ? c->sbuf : MPI_IN_PLACE, c->rbuf, c->count, dt, op, \
                                                  comm));                                                   \
        else if (kind == MB_IALLREDUCE)                                                                     \
            MB_LEAN(NOW, TYPE, rc = MPI_Iallreduce(c->sbuf ? c->sbuf : MPI_IN_PLACE, c->rbuf, c->count, dt, op,\
                                                   comm, &reqs[0]);                                         \
                    if (rc == MPI_SUCCESS) rc = MPI_Wait(&reqs[0], MPI_STATUS_IGNORE));                     \
        else if (kind == MB_PINGPONG && initiator && iters > 1)                                             \
            MB_LEAN_PINGPONG(NOW, TYPE);                                                                    \
        else                                                                                                \
            MB_LEAN(NOW, TYPE, rc = mb_once(c, comm, dt, op, reqs));                                       \
    } while (0)
    const int kind = calls[0].kind, initiator = calls[0].initiator;  /* the same for every call of one size */
    const int lean = sync == 0 && flush_bytes <= 0;
    if (lean && kind == MB_PINGPONG && !initiator) {
        /* The passive side of a ping-pong: its durations are never used (only the initiator times), and a
         * clock read here would still cost the round trip 1 to 2 % at 8 B, so it reads none (zeros). */
        MB_LEAN(mb_no_clock, int64_t,
                rc = MPI_Recv(c->rbuf, c->count, dt, c->peer, MB_TAG_DATA, comm, MPI_STATUS_IGNORE);
                if (rc == MPI_SUCCESS) rc = MPI_Send(c->sbuf, c->count, dt, c->peer, MB_TAG_DATA, comm));
    } else if (lean && mb_use_tsc) {
        MB_LEAN_ALL(mb_ticks, uint64_t);
        for (int i = 0; i < iters; i++) out_ns[i] = (int64_t)((double)out_ns[i] * mb_ns_per_tick + 0.5);
    } else if (lean) {
        MB_LEAN_ALL(mb_now, int64_t);
    } else {
        for (int i = 0; i < iters; i++) {
            if (flush_bytes > 0) mb_flush((volatile unsigned char *)flush_buf, flush_bytes, i);
            if (sync) MPI_Barrier(comm);
            int64_t t0 = mb_now();
            rc = mb_once(&calls[k], comm, dt, op, reqs);
            out_ns[i] = mb_now() - t0;
            if (rc != MPI_SUCCESS) break;
            if (++k == ncalls) k = 0;
        }
    }
    free(reqs);
    return rc;
}

static inline int64_t mb_stamp_raw(void) { return mb_use_tsc ? (int64_t)mb_ticks() : mb_now(); }

/*
 * The overlapped iterations of a non-blocking collective: per iteration, post; `chunks` calls of the compute
 * kernel of `units` units each, with an MPI_Test after each chunk when `tests` is set (the probes OMB's
 * --num_test makes); MPI_Wait. out_ns holds 5 durations per iteration (ns): overall (post to the end of the
 * wait), post, compute (the chunks, the tests' time taken out), test (the probes together), wait.
 * sync / flush as mb_run, before each iteration and outside the timing. Returns 0 or the first MPI error.
 */
int mb_run_overlap(const mb_call *calls, int ncalls, int iters, int start, int sync, void *flush_buf,
                   long long flush_bytes, mb_kernel *kern, long long units, int chunks, int tests, int64_t *out_ns) {
    if (iters <= 0) return 0;
    MPI_Comm comm = *(const MPI_Comm *)calls[0].comm_addr;
    MPI_Datatype dt = *(const MPI_Datatype *)calls[0].dtype_addr;
    MPI_Op op = calls[0].op_addr ? *(const MPI_Op *)calls[0].op_addr : MPI_OP_NULL;
    int rc = MPI_SUCCESS, k = start % ncalls, flag = 0;
    MPI_Request req = MPI_REQUEST_NULL;
    for (int i = 0; i < iters; i++) {
        if (flush_bytes > 0) mb_flush((volatile unsigned char *)flush_buf, flush_bytes, i);
        if (sync) MPI_Barrier(comm);
        int64_t t0 = mb_stamp_raw();
        rc = mb_post(&calls[k], comm, dt, op, &req);
        int64_t t1 = mb_stamp_raw(), tested = 0;
        for (int j = 0; j < chunks && rc == MPI_SUCCESS; j++) {
            mb_compute(kern, units);
            if (tests) {
                int64_t a = mb_stamp_raw();
                rc = MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
                tested += mb_stamp_raw() - a;
            }
        }
        int64_t t2 = mb_stamp_raw();
        if (rc == MPI_SUCCESS) rc = MPI_Wait(&req, MPI_STATUS_IGNORE);
        int64_t t3 = mb_stamp_raw();
        int64_t *o = &out_ns[5 * (long long)i];
        o[0] = t3 - t0; o[1] = t1 - t0; o[2] = (t2 - t1) - tested; o[3] = tested; o[4] = t3 - t2;
        if (rc != MPI_SUCCESS) break;
        if (++k == ncalls) k = 0;
    }
    if (mb_use_tsc)
        for (long long j = 0; j < 5 * (long long)iters; j++) out_ns[j] = (int64_t)((double)out_ns[j] * mb_ns_per_tick + 0.5);
    return rc;
}
