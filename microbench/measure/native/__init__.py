"""The native timing loop (``mbloop.c``) and the Python loop's C call shim (``mbcall.c``, a Python
extension module that includes mbloop.c), both compiled with the mpicc of the MPI that mpi4py loaded.

Built at first use and cached (``$MICROBENCH_CACHE_DIR``, else ``$XDG_CACHE_HOME/microbench``, else
``~/.cache/microbench``) under a key of the source, the compiler and the library, so a new MPI gets a
new build. Concurrent ranks serialise on a lock file and publish the library by atomic rename. The
compiler is ``$MICROBENCH_MPICC`` if set, else ``<prefix>/bin/mpicc`` beside the loaded libmpi, else the
mpicc mpi4py was built with, else ``mpicc`` on PATH. After loading, the library's MPI version string
must equal the one mpi4py reports, so a build against another MPI is never used. The shim's cache key
also holds the Python version and its include folder, and it needs that folder's Python.h.

``toolchain`` builds and caches (it imports nothing of microbench); ``loops`` loads what it built and
holds the two loops and the call descriptions (``NativeCall``) the MPI backend fills.
"""
