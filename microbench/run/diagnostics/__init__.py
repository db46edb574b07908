"""Diagnostics of ``microbench run``: the pairwise link test (``pairs``), bisection (``bisection``), soak cycles
(``soak``), straggler attribution (``stragglers``), the outlier rule they share (``outliers``) and their lines in the
run's table (``terminal``)."""
