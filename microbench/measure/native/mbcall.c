/*
 * microbench C call shim: the Python loop's way into MPI without mpi4py's per-call argument handling.
 *
 * A CPython extension module (built, like mbloop.c, with the mpicc of the MPI mpi4py loaded, plus
 * Python's headers). bind(address) copies one mb_call (see mbloop.c; Python fills it through ctypes)
 * and returns a builtin callable with no arguments that runs exactly one iteration of it (mb_once, the
 * same code the native loop runs) and returns None. Between start(buffer, n) and stop(), each call also
 * writes the clock at its end into the next slot of the buffer (start writes slot 0 and returns the
 * stamps' ns per tick): the native loop's clock (the TSC where calibrate enabled it, else CLOCK_MONOTONIC
 * in ns), read in C and stored without making a Python object. So what a Python-loop figure adds to the
 * MPI call is CPython's loop, one Python-level call and the GIL. The GIL is released around the MPI call (as mpi4py does: about 50 ns
 * here), so the watchdog and signal threads can act while a call blocks. One thread uses the stamps.
 * For the non-blocking kinds, post(f.__self__), test(handle) and wait(handle) run the call's three parts
 * apart (the handle is the bound call's capsule, which holds its one request), for the overlap phase.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "mbloop.c"

typedef struct {
    mb_call call;
    MPI_Comm comm;
    MPI_Datatype dt;
    MPI_Op op;
    MPI_Request *reqs; /* room for 2 * window requests */
    MPI_Request req;   /* the non-blocking kinds' request between post() and wait() */
} mb_bound;

static const char *const CAPSULE_NAME = "microbench.mbcall.bound";

/* The stamp buffer between start() and stop(); the calls write slots 1.. while slots are left. */
static int64_t *stamps = NULL;
static Py_ssize_t stamp_next = 0, stamp_capacity = 0;

static inline int64_t mb_stamp(void) { return mb_use_tsc ? (int64_t)mb_ticks() : mb_now(); }

static void bound_free(PyObject *capsule) {
    mb_bound *b = (mb_bound *)PyCapsule_GetPointer(capsule, CAPSULE_NAME);
    if (b) {
        free(b->reqs);
        free(b);
    }
}

static PyObject *bound_call(PyObject *capsule, PyObject *Py_UNUSED(ignored)) {
    mb_bound *b = (mb_bound *)PyCapsule_GetPointer(capsule, CAPSULE_NAME);
    int rc;
    if (!b) return NULL;
    /* the slot is taken while the GIL is held: start() and stop() cannot change the buffer under the call */
    int64_t *slot = stamp_next < stamp_capacity ? &stamps[stamp_next++] : NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = mb_once(&b->call, b->comm, b->dt, b->op, b->reqs);
    if (slot) *slot = mb_stamp();
    Py_END_ALLOW_THREADS
    if (rc != MPI_SUCCESS) {
        PyErr_Format(PyExc_RuntimeError, "C call shim: MPI call failed with error code %d", rc);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef bound_def = {"mb_call", bound_call, METH_NOARGS,
                                "Run one iteration of the bound call; between start() and stop(), stamp its end."};

static PyObject *bind(PyObject *Py_UNUSED(module), PyObject *arg) {
    void *address = PyLong_AsVoidPtr(arg);
    if (!address) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "bind: NULL mb_call address");
        return NULL;
    }
    const mb_call *src = (const mb_call *)address;
    if (!src->comm_addr || !src->dtype_addr || src->window < 0) {
        PyErr_SetString(PyExc_ValueError, "bind: the mb_call has no communicator or datatype, or a negative window");
        return NULL;
    }
    mb_bound *b = (mb_bound *)calloc(1, sizeof(mb_bound));
    if (!b) return PyErr_NoMemory();
    memcpy(&b->call, src, sizeof(mb_call));
    b->comm = *(const MPI_Comm *)b->call.comm_addr;
    b->dt = *(const MPI_Datatype *)b->call.dtype_addr;
    b->op = b->call.op_addr ? *(const MPI_Op *)b->call.op_addr : MPI_OP_NULL;
    b->req = MPI_REQUEST_NULL;
    int window = b->call.window > 1 ? b->call.window : 1;
    b->reqs = (MPI_Request *)malloc(sizeof(MPI_Request) * 2 * (size_t)window);
    if (!b->reqs) {
        free(b);
        return PyErr_NoMemory();
    }
    PyObject *capsule = PyCapsule_New(b, CAPSULE_NAME, bound_free);
    if (!capsule) {
        free(b->reqs);
        free(b);
        return NULL;
    }
    PyObject *fn = PyCFunction_NewEx(&bound_def, capsule, NULL);
    Py_DECREF(capsule);
    return fn;
}

static mb_bound *bound_of(PyObject *capsule) {
    return (mb_bound *)PyCapsule_GetPointer(capsule, CAPSULE_NAME);
}

static PyObject *mpi_failed(const char *what, int rc) {
    PyErr_Format(PyExc_RuntimeError, "C call shim: %s failed with error code %d", what, rc);
    return NULL;
}

static PyObject *shim_post(PyObject *Py_UNUSED(module), PyObject *capsule) {
    mb_bound *b = bound_of(capsule);
    int rc;
    if (!b) return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = mb_post(&b->call, b->comm, b->dt, b->op, &b->req);
    Py_END_ALLOW_THREADS
    if (rc != MPI_SUCCESS) return mpi_failed("post", rc);
    Py_INCREF(capsule);
    return capsule;
}

static PyObject *shim_test(PyObject *Py_UNUSED(module), PyObject *capsule) {
    mb_bound *b = bound_of(capsule);
    int rc, flag = 0;
    if (!b) return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = MPI_Test(&b->req, &flag, MPI_STATUS_IGNORE);
    Py_END_ALLOW_THREADS
    if (rc != MPI_SUCCESS) return mpi_failed("MPI_Test", rc);
    return PyBool_FromLong(flag);
}

static PyObject *shim_wait(PyObject *Py_UNUSED(module), PyObject *capsule) {
    mb_bound *b = bound_of(capsule);
    int rc;
    if (!b) return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = MPI_Wait(&b->req, MPI_STATUS_IGNORE);
    Py_END_ALLOW_THREADS
    if (rc != MPI_SUCCESS) return mpi_failed("MPI_Wait", rc);
    Py_RETURN_NONE;
}

static PyObject *start(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *address;
    Py_ssize_t capacity;
    if (!PyArg_ParseTuple(args, "On", &address, &capacity)) return NULL;
    int64_t *buffer = (int64_t *)PyLong_AsVoidPtr(address);
    if (!buffer || capacity < 1) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "start: a NULL buffer or no room for a stamp");
        return NULL;
    }
    stamps = buffer;
    stamp_capacity = capacity;
    stamps[0] = mb_stamp();
    stamp_next = 1;
    return PyFloat_FromDouble(mb_use_tsc ? mb_ns_per_tick : 0.0);
}

static PyObject *stop(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored)) {
    Py_ssize_t written = stamp_next;
    stamps = NULL;
    stamp_next = stamp_capacity = 0;
    return PyLong_FromSsize_t(written);
}

static PyObject *calibrate(PyObject *Py_UNUSED(module), PyObject *args) {
    int want_tsc, ms;
    if (!PyArg_ParseTuple(args, "ii", &want_tsc, &ms)) return NULL;
    return PyFloat_FromDouble(mb_calibrate(want_tsc, ms));
}

static PyObject *library_version(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored)) {
    char buf[MPI_MAX_LIBRARY_VERSION_STRING];
    mb_library_version(buf, (int)sizeof(buf));
    return PyUnicode_DecodeUTF8(buf, (Py_ssize_t)strlen(buf), "replace");
}

static PyMethodDef methods[] = {
    {"bind", bind, METH_O, "bind(address of an mb_call) -> a callable running one iteration of it"},
    {"start", start, METH_VARARGS,
     "start(address of an int64 buffer, capacity) -> ns per tick of the stamps (0.0: they are CLOCK_MONOTONIC ns); "
     "stamps the clock into slot 0, and each call then stamps its end into the next slot"},
    {"stop", stop, METH_NOARGS, "stop stamping; returns the number of slots written"},
    {"calibrate", calibrate, METH_VARARGS,
     "calibrate(want_tsc, ms) -> ns per TSC tick, or 0.0 when the stamps are CLOCK_MONOTONIC ns (mb_calibrate)"},
    {"post", shim_post, METH_O, "post(capsule of a bound non-blocking call) -> its handle: start the collective"},
    {"test", shim_test, METH_O, "test(handle) -> whether the posted collective completed (MPI_Test)"},
    {"wait", shim_wait, METH_O, "wait(handle): MPI_Wait on the posted collective"},
    {"library_version", library_version, METH_NOARGS, "MPI_Get_library_version of the MPI this was built against"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "mbcall", NULL, -1, methods};

PyMODINIT_FUNC PyInit_mbcall(void) { return PyModule_Create(&module); }
