"""Reading many records by column: what check, compare, history, plot, report, ReFrame and the importers read.

A results folder is decoded one file at a time (``scan``, ``parts``), cached per file (``index``), assembled into a
columnar ``Table`` (``columns``, ``tablebuild``) by ``load``; ``selection`` picks runs, ``keys`` defines once what
makes two results comparable and ``metrics`` what number is read from a record."""
