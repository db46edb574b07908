"""The document: one HTML file with its style and script inline, nothing fetched (no CDN, no font, no image).

A Content-Security-Policy meta tag forbids every network load (``default-src 'none'``), so a report that
someone edits to point at a remote resource still loads nothing; the inline style and script are allowed by
its hash (style attributes on swatches and meters need 'unsafe-inline' for styles; styles fetch nothing).
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
from importlib import resources

from microbench import __version__
from microbench.report.markup import Section, badge, el, esc, table, text_el


def asset(name: str) -> str:
    """The text of a file in ``microbench/report/assets``."""
    return resources.files("microbench.report").joinpath("assets", name).read_text()


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def summary_table(sections: list[Section]) -> str:
    rows = [[el("a", esc(s.title), href=f"#{s.anchor}"),
             (badge(s.status, s.good) if s.good is not None else esc(s.status))]
            for s in sections if s.status]
    return table(["part", "status"], rows, class_="summary")


def document(title: str, inputs: list[str], sections: list[Section], shown: str = "") -> str:
    """The whole page: header, what it shows of the runs (``shown``), summary, sections in order, style and
    script inline."""
    css, js = asset("report.css"), asset("report.js")
    csp = f"default-src 'none'; style-src 'unsafe-inline'; script-src {_sha256(js)}"
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")
    nav = el("nav", "".join(el("a", esc(s.title), href=f"#{s.anchor}") for s in sections))
    head = (text_el("h1", title)
            + text_el("p", f"microbench {__version__} report, made {now} from {' '.join(inputs)}", class_="how")
            + (text_el("p", shown, class_="how aggregated") if shown else "")
            + nav + summary_table(sections))
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{esc(csp)}">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{esc(title)}</title><style>{css}</style></head>\n<body>"
            + head + "\n".join(s.render() for s in sections)
            + f"<script>{js}</script></body></html>\n")
