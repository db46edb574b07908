#!/usr/bin/env python3
"""Build ``microbench.pyz``: the package as one file of compiled bytecode, for launches from a shared file system.

Each rank of a launch imports about fifty microbench modules; from an installed package that is a stat of the
folder, a stat of the source, an open and a read of its ``.pyc`` per module, every one a metadata operation on
the parallel file system's server when the install lives there. From a zipapp the package is one file: each
module is read from the archive the rank already found (docs/startup.md has the counts). numpy, mpi4py and the
other dependencies still come from the environment the ranks run (``python microbench.pyz run ...``).

The archive holds every module as sourceless bytecode for *this* interpreter's version (``.pyc`` beside where
the ``.py`` was, as ``compileall -b`` writes it), the package's data files (the C sources of the native loop,
the JSON Schema, the expected-values table) and a ``__main__`` that runs the command line. The native loop is
compiled from the C sources copied out of the archive into the cache folder, once, as from an install.

    python scripts/build_zipapp.py [-o microbench.pyz]
    sbcast microbench.pyz /tmp/microbench.pyz    # optional: a node-local copy (Slurm)
    srun python /tmp/microbench.pyz run allreduce -m 8:1M
"""

from __future__ import annotations

import argparse
import compileall
import shutil
import sys
import tempfile
import zipapp
from pathlib import Path

import microbench

MAIN = "from microbench.cli import main\n\nraise SystemExit(main())\n"


def build(target: Path) -> Path:
    """Write the archive to ``target``; returns it."""
    package = Path(microbench.__file__).parent
    with tempfile.TemporaryDirectory(prefix="microbench-pyz-") as tmp:
        root = Path(tmp)
        copy = root / "microbench"
        shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "*.lock"))
        if not compileall.compile_dir(copy, quiet=1, legacy=True, optimize=0):
            raise SystemExit("build_zipapp: a module did not compile")
        for source in copy.rglob("*.py"):
            source.unlink()  # sourceless: one entry per module, no source to check the bytecode against
        (root / "__main__.py").write_text(MAIN)
        target.parent.mkdir(parents=True, exist_ok=True)
        zipapp.create_archive(root, target, interpreter=None)
    return target


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("-o", "--output", type=Path, default=Path("microbench.pyz"), help="the archive (default %(default)s)")
    args = p.parse_args(argv)
    path = build(args.output)
    print(f"{path}: {path.stat().st_size / 1e6:.2f} MB, microbench {microbench.__version__} for Python "
          f"{sys.version_info.major}.{sys.version_info.minor}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
