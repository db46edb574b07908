"""The tests' process runner makes again a launch whose mpiexec did not start at all (conftest.run_process), and
nothing else: a launcher that fails once with Open MPI's PMIx listener message, then works, is seen working; any
other failure is returned as it came."""

from __future__ import annotations

import sys

from conftest import LAUNCHER_DID_NOT_START, run_process

FLAKY = """import pathlib, sys
count = pathlib.Path(sys.argv[1])
n = int(count.read_text()) if count.exists() else 0
count.write_text(str(n + 1))
if n < int(sys.argv[2]):
    sys.stderr.write("-----\\n{message} We cannot\\ncontinue.\\n")
    sys.exit(213)
print("ranks ran")
"""


def _launcher(tmp_path, failures: int, message: str = LAUNCHER_DID_NOT_START):
    script = tmp_path / "launcher.py"
    script.write_text(FLAKY.replace("{message}", message))
    count = tmp_path / "count"
    return run_process([sys.executable, str(script), str(count), str(failures)], timeout=60), count


def test_a_launcher_that_did_not_start_is_tried_again(tmp_path):
    done, count = _launcher(tmp_path, failures=1)
    assert done.returncode == 0 and done.stdout.strip() == "ranks ran" and count.read_text() == "2"


def test_three_tries_at_most_then_the_failure_stands(tmp_path):
    done, count = _launcher(tmp_path, failures=5)
    assert done.returncode == 213 and count.read_text() == "3"


def test_any_other_failure_is_not_retried(tmp_path):
    done, count = _launcher(tmp_path, failures=1, message="MPI_Init failed.")
    assert done.returncode == 213 and count.read_text() == "1"
