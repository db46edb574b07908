"""JUnit XML for CI systems: one testsuite per spec, one testcase per rule, a failure per failing rule.

Layout (what Jenkins, GitLab and GitHub reporters read)::

    <testsuites name="microbench check" tests=N failures=F errors=0 skipped=0 time=0>
      <testsuite name=SPEC tests=N failures=F errors=0 skipped=0 time=0 timestamp=...>
        <properties><property name="spec" value=.../> ...</properties>
        <testcase classname="microbench.check.SPEC" name="rule 1: ..." time="0">
          <failure type="threshold" message="first reason">every reason, one a line</failure>
          <system-out>every judgement of the rule, one a line</system-out>
        </testcase>

An INCONCLUSIVE rule (judged on fewer runs than it asks for) is a ``<failure type="inconclusive">`` when the
check's INCONCLUSIVE fails the job (exit 1 or 4), and a ``<skipped>`` when the site lets it pass
(``--inconclusive-exit 0``), so that a CI reading the XML agrees with the exit status. With ``--strict``,
results no rule judged are one more failing testcase, ``not judged``.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

from microbench.gate.check import RuleOutcome
from microbench.gate.spec import Spec
from microbench.output_files import write_output

#: Characters XML 1.0 cannot hold (control characters other than tab and newlines).
_INVALID_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f]")


def _text(value: str) -> str:
    return _INVALID_XML.sub("?", value)


def build(spec: Spec, outcomes: list[RuleOutcome], properties: dict[str, str], unjudged: str | None = None,
          inconclusive_fails: bool = True) -> ET.ElementTree:
    """The JUnit document for one spec's outcomes; ``properties`` go on the testsuite (files, runs); ``unjudged``
    (with --strict) what no rule judged, as a failing testcase; ``inconclusive_fails``: INCONCLUSIVE rules are
    failures (else skipped)."""
    suite_name = Path(spec.path).stem
    unsure = sum(o.outcome == "INCONCLUSIVE" for o in outcomes)
    failures = sum(o.outcome == "FAIL" for o in outcomes) + (unsure if inconclusive_fails else 0) + bool(unjudged)
    counts = {"tests": str(len(outcomes) + bool(unjudged)), "failures": str(failures), "errors": "0",
              "skipped": "0" if inconclusive_fails else str(unsure), "time": "0"}
    root = ET.Element("testsuites", {"name": "microbench check", **counts})
    suite = ET.SubElement(root, "testsuite", {
        "name": suite_name, **counts,
        "timestamp": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S"),
        "hostname": os.uname().nodename if hasattr(os, "uname") else "localhost",
    })
    props = ET.SubElement(suite, "properties")
    for name, value in {"spec": spec.path, **properties}.items():
        ET.SubElement(props, "property", {"name": name, "value": _text(str(value))})
    for outcome in outcomes:
        case = ET.SubElement(suite, "testcase", {
            "classname": f"microbench.check.{suite_name}",
            "name": _text(f"rule {outcome.rule.index}: {outcome.rule.title()}"),
            "time": "0",
        })
        reasons = outcome.failures()
        if reasons:
            kind = "fail-closed" if outcome.problems else "threshold"
            failure = ET.SubElement(case, "failure", {
                "type": kind,
                "message": _text(f"{reasons[0]}" + (f" (and {len(reasons) - 1} more)" if len(reasons) > 1 else "")),
            })
            failure.text = _text("\n".join(reasons))
        elif outcome.outcome == "INCONCLUSIVE":
            unsure_reasons = outcome.inconclusive()
            message = _text("INCONCLUSIVE: judged on fewer runs than the rule asks for: " + unsure_reasons[0]
                            + (f" (and {len(unsure_reasons) - 1} more)" if len(unsure_reasons) > 1 else ""))
            element = ET.SubElement(case, "failure" if inconclusive_fails else "skipped",
                                    {"type": "inconclusive", "message": message})
            element.text = _text("\n".join(unsure_reasons))
        lines = [f"{j.state}  {j.message()}" for j in outcome.judgements]
        if lines:
            ET.SubElement(case, "system-out").text = _text("\n".join(lines))
    if unjudged:
        case = ET.SubElement(suite, "testcase", {"classname": f"microbench.check.{suite_name}",
                                                 "name": "not judged (--strict)", "time": "0"})
        ET.SubElement(case, "failure", {"type": "not-judged", "message": _text(f"measured, judged by no rule: "
                                                                               f"{unjudged}")})
    ET.indent(root)
    return ET.ElementTree(root)


def write(path: str | os.PathLike, spec: Spec, outcomes: list[RuleOutcome], properties: dict[str, str],
          unjudged: str | None = None, inconclusive_fails: bool = True) -> None:
    """Write the JUnit XML file (parent folders are created; never through a link planted on the name:
    ``output_files.write_output``)."""
    tree = build(spec, outcomes, properties, unjudged, inconclusive_fails)
    write_output(path, lambda f: tree.write(f, encoding="utf-8", xml_declaration=True), what="JUnit XML to ")
