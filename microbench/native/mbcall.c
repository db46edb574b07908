/*
 * microbench C call shim: the Python loop's way into MPI without mpi4py's per-call argument handling.
 *
 * A CPython extension module (built, like mbloop.c, with the mpicc of the MPI mpi4py loaded, plus
 * Python's headers). bind(address) copies one mb_call (see mbloop.c; Python fills it through ctypes)
 * and returns a builtin callable with no arguments that runs exactly one iteration of it (mb_once, the
 * same code the native loop runs) and returns CLOCK_MONOTONIC in ns read as the call returned: the
 * clock of time.perf_counter_ns, so the Python loop's stamps are `t0 = perf_counter_ns()` and then one
 * shim call per iteration, and what a Python-loop figure adds to the MPI call is CPython's loop, one
 * Python-level call and the GIL. The GIL is released around the MPI call (as mpi4py does: about 60 ns
 * here), so the watchdog and signal threads can act while a call blocks.
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
} mb_bound;

static const char *const CAPSULE_NAME = "microbench.mbcall.bound";

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
    int64_t done;
    if (!b) return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = mb_once(&b->call, b->comm, b->dt, b->op, b->reqs);
    done = mb_now();
    Py_END_ALLOW_THREADS
    if (rc != MPI_SUCCESS) {
        PyErr_Format(PyExc_RuntimeError, "C call shim: MPI call failed with error code %d", rc);
        return NULL;
    }
    return PyLong_FromLongLong((long long)done);
}

static PyMethodDef bound_def = {"mb_call", bound_call, METH_NOARGS,
                                "Run one iteration of the bound call; returns CLOCK_MONOTONIC (ns) at its end."};

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

static PyObject *library_version(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored)) {
    char buf[MPI_MAX_LIBRARY_VERSION_STRING];
    mb_library_version(buf, (int)sizeof(buf));
    return PyUnicode_DecodeUTF8(buf, (Py_ssize_t)strlen(buf), "replace");
}

static PyMethodDef methods[] = {
    {"bind", bind, METH_O, "bind(address of an mb_call) -> a callable running one iteration of it"},
    {"library_version", library_version, METH_NOARGS, "MPI_Get_library_version of the MPI this was built against"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "mbcall", NULL, -1, methods};

PyMODINIT_FUNC PyInit_mbcall(void) { return PyModule_Create(&module); }
