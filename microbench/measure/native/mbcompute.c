/*
 * microbench host compute kernels: the work a non-blocking benchmark overlaps with its collective.
 *
 * No MPI here: this file is compiled on its own with the C compiler (for the Python loops, through
 * ctypes) and included by mbloop.c (so the native loop runs the same code). One call runs `units` units:
 *
 * MB_KERNEL_FLOPS (compute-bound): per unit, 8 independent multiply-adds on doubles held in registers
 *   (16 floating-point operations), no memory traffic (0 bytes per unit).
 * MB_KERNEL_STREAM (memory-bandwidth-bound): per unit, one element of a triad a[i] = b[i] + s * c[i] on
 *   doubles: 16 bytes read and 8 bytes written (24 B per unit; 32 B with the write-allocate read of a[i]).
 *   The arrays are sized by the caller to at least twice the last-level cache and the position carries
 *   over between calls, so every call streams from memory, as a training step's bandwidth-bound kernels
 *   do while the MPI library copies its messages.
 *
 * State stays in the struct after each call, so the compiler cannot drop the work.
 */
#include <stdint.h>
#include <time.h>

enum { MB_KERNEL_FLOPS = 1, MB_KERNEL_STREAM = 2 };

typedef struct {
    int kernel;
    long long n;       /* stream: elements per array */
    long long pos;     /* stream: where the next call continues */
    double *a, *b, *c; /* stream arrays (n elements each) */
    double acc[8];     /* flops: the accumulators */
} mb_kernel;

static void mb_compute_flops(mb_kernel *k, long long units) {
    double a0 = k->acc[0], a1 = k->acc[1], a2 = k->acc[2], a3 = k->acc[3];
    double a4 = k->acc[4], a5 = k->acc[5], a6 = k->acc[6], a7 = k->acc[7];
    const double m = 0.999999, d = 1e-6; /* a fixed point at 1.0: no overflow, no denormals */
    for (long long u = 0; u < units; u++) {
        a0 = a0 * m + d; a1 = a1 * m + d; a2 = a2 * m + d; a3 = a3 * m + d;
        a4 = a4 * m + d; a5 = a5 * m + d; a6 = a6 * m + d; a7 = a7 * m + d;
    }
    k->acc[0] = a0; k->acc[1] = a1; k->acc[2] = a2; k->acc[3] = a3;
    k->acc[4] = a4; k->acc[5] = a5; k->acc[6] = a6; k->acc[7] = a7;
}

static void mb_compute_stream(mb_kernel *k, long long units) {
    const double s = 1.000001;
    while (units > 0) {
        long long left = k->n - k->pos, m = units < left ? units : left;
        double *a = k->a + k->pos;
        const double *b = k->b + k->pos, *c = k->c + k->pos;
        for (long long i = 0; i < m; i++) a[i] = b[i] + s * c[i];
        units -= m;
        k->pos += m;
        if (k->pos >= k->n) k->pos = 0;
    }
}

/* Run `units` units of the kernel. */
void mb_compute(mb_kernel *k, long long units) {
    if (units <= 0) return;
    if (k->kernel == MB_KERNEL_STREAM) mb_compute_stream(k, units);
    else mb_compute_flops(k, units);
}

static inline int64_t mb_compute_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Time `reps` calls of `chunks` x `units` units each (CLOCK_MONOTONIC, ns per call into out_ns). */
void mb_time_compute(mb_kernel *k, long long units, int chunks, int reps, int64_t *out_ns) {
    for (int r = 0; r < reps; r++) {
        int64_t t0 = mb_compute_now();
        for (int j = 0; j < chunks; j++) mb_compute(k, units);
        out_ns[r] = mb_compute_now() - t0;
    }
}
