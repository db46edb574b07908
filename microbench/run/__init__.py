"""The ``run`` verb, in the order it runs: its arguments (``cli``), the driver (``driver``), the shared context
(``context``), the checks before any measurement (``preflight``), the sweep over benchmarks and sizes (``sweep``),
the run's terminal table (``terminal``), the watchdog and signal guard (``watchdog``), and the diagnostics
(``diagnostics/``: the pairwise link test, bisection, soak, stragglers and their outlier rule)."""
