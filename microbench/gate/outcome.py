"""The three outcomes every gate verdict takes (compare, history's gate, check; the report, --json and JUnit show
the same), and the exit status each gives.

- ``PASS``: the gate judged everything it was asked to, found no failure, and could have seen a failure of the
  stated size (compare: each configuration would have flagged a change of the threshold with 90 % probability;
  history: every series was long enough to judge and steady enough for a step of --min-step to be found;
  check: every rule was judged on the runs it asks for). Exit 0.
- ``FAIL``: a failure the gate could see (a REGRESSION, a step for the worse that no recorded condition
  explains, a limit broken, a rule with nothing to judge). Exit 1.
- ``INCONCLUSIVE``: no failure found, but the gate could not have seen one (too few runs for the noise, a series
  too short, a rule judged on fewer runs than it asks for), or a change it saw coincided with a change of the
  machine's state (load), which it cannot tell from a change of code. The text says what it could see and what
  would settle it (how many runs a side, a rerun on a steady machine). Exit 4 by default; a site chooses
  (``--inconclusive-exit 0`` lets it pass a job, ``1`` fails it as a FAIL would).
"""

from __future__ import annotations

import argparse

from microbench.errors import EXIT_FAIL, EXIT_INCONCLUSIVE, EXIT_OK

PASS, FAIL, INCONCLUSIVE = "PASS", "FAIL", "INCONCLUSIVE"
OUTCOMES = (PASS, FAIL, INCONCLUSIVE)

#: The exit statuses of a gate verb, for its --help (docs/faults.md has the table for every verb).
EXIT_HELP = ("exit status: 0 PASS; 1 FAIL; 4 INCONCLUSIVE (the gate could not have seen a failure of the stated "
             "size, or the machine's state changed with the results; --inconclusive-exit chooses 0, 1 or 4); "
             "2 bad input; 3 an internal error (a bug, never a verdict)")


def add_argument(p: argparse.ArgumentParser) -> None:
    """``--inconclusive-exit``: the exit status an INCONCLUSIVE verdict gives (4 unless a site says 0 or 1)."""
    p.add_argument("--inconclusive-exit", type=int, choices=(0, 1, 4), default=EXIT_INCONCLUSIVE, metavar="{0,1,4}",
                   help="exit status of an INCONCLUSIVE verdict: 4 (default: neither PASS nor FAIL), 1 (fail the "
                        "job as a FAIL would) or 0 (let it pass)")


def combine(outcomes: list[str]) -> str:
    """FAIL if any is FAIL, else INCONCLUSIVE if any is, else PASS (PASS when there are none)."""
    return FAIL if FAIL in outcomes else INCONCLUSIVE if INCONCLUSIVE in outcomes else PASS


def exit_status(outcome: str, inconclusive_exit: int = EXIT_INCONCLUSIVE) -> int:
    """The exit status of a verdict: 0 PASS, 1 FAIL, ``inconclusive_exit`` (4 by default) INCONCLUSIVE."""
    return {PASS: EXIT_OK, FAIL: EXIT_FAIL}.get(outcome, inconclusive_exit)
