"""Verdicts on results read through ``microbench.results``: acceptance checks against a spec (``check``,
``spec``, ``junit``, ``check_cli``), regression comparison against baselines (``compare``, ``compare_text``,
``compare_cli``, with the statistics in ``ratiotest``, ``tdist``, ``family``), history and its steps (``history``,
``steps``, ``conditions``, ``history_cli``), and a spec written as ReFrame references (``reframe_references``).
"""
