"""``microbench report``: one self-contained HTML page (inline SVG, a few KB of inline script, no network).

``cli`` reads the inputs and writes the page; each part of the page is one module: ``runs`` (metadata and
what the records lack), ``verdicts`` (check and compare), ``figures`` (curves and OMB-style tables),
``history``, ``heatmaps`` (pairwise link test), ``workload`` (pricing); ``svg`` draws line charts, ``markup``
builds HTML, ``page`` assembles the document. Verdicts are the gate's own functions; keys and loading are ``microbench.results``'.
"""
