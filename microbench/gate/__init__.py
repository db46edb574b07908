"""Tools that read records: acceptance checks (check), regression comparison (compare), history.

The configuration key that makes two results comparable is defined once, in ``keys.py``; what number
is read from a record (a latency statistic, or a bandwidth from it) once, in ``metrics.py``.
"""
