"""Self-contained HTML: inline CSS, images as base64 data URIs, no scripts, no external links."""

from __future__ import annotations

import base64
import html
import io
import math
from typing import Any

import polars as pl
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

__all__ = ["fmt_cell", "frame_html", "frame_markdown", "page", "png_bytes", "png_img"]

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,Helvetica,Arial,sans-serif;
 margin:1.5em;color:#222;max-width:1700px}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}
th,td{border:1px solid #ccc;padding:.2em .5em;text-align:right;vertical-align:top}
th{background:#f3f3f3}td.l,th.l{text-align:left}
.pass{color:#1a7f37;font-weight:600}.fail{color:#b42318;font-weight:600}
.muted{color:#777}img{max-width:100%;height:auto;border:1px solid #eee}
code{font-size:.9em}
"""


def png_bytes(fig: Figure, dpi: float = 110) -> bytes:
    """Render a Figure (no pyplot, no global state) to PNG bytes."""
    if not isinstance(fig.canvas, FigureCanvasAgg):
        FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def png_img(data: bytes, alt: str) -> str:
    b64 = base64.b64encode(data).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{b64}">'


def fmt_cell(v: Any, pct: bool = False, digits: int = 1) -> str:
    """Text of one table cell: percentages, floats, None as an em dash."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if pct:
            return f"{v * 100:.{digits}f}"
        if v.is_integer() or abs(v) >= 1000:
            return f"{v:.{digits}f}"
        return f"{v:.4g}"
    return str(v)


def _is_pct(col: str, pct_cols: set[str] | None) -> bool:
    return pct_cols is not None and col in pct_cols


def frame_markdown(df: pl.DataFrame, pct_cols: set[str] | None = None) -> str:
    """GitHub-flavoured Markdown table (rates in ``pct_cols`` shown as percentages)."""
    cols = df.columns
    head = [f"{c} (%)" if _is_pct(c, pct_cols) else c for c in cols]
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in cols) + " |"]
    for row in df.iter_rows():
        cells = [
            fmt_cell(v, _is_pct(c, pct_cols)).replace("|", "\\|")
            for c, v in zip(cols, row, strict=True)
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def frame_html(df: pl.DataFrame, pct_cols: set[str] | None = None, max_rows: int = 500) -> str:
    cols = df.columns
    numeric = {c for c, t in zip(cols, df.dtypes, strict=True) if t.is_numeric()}
    out = ["<table><thead><tr>"]
    for c in cols:
        cls = "" if c in numeric else ' class="l"'
        label = f"{c} (%)" if _is_pct(c, pct_cols) else c
        out.append(f"<th{cls}>{html.escape(label)}</th>")
    out.append("</tr></thead><tbody>")
    for row in df.head(max_rows).iter_rows():
        out.append("<tr>")
        for c, v in zip(cols, row, strict=True):
            cls = "" if c in numeric else ' class="l"'
            if isinstance(v, bool):
                cls = ' class="l pass"' if v else ' class="l fail"'
            out.append(f"<td{cls}>{html.escape(fmt_cell(v, _is_pct(c, pct_cols)))}</td>")
        out.append("</tr>")
    out.append("</tbody></table>")
    if df.height > max_rows:
        out.append(f'<p class="muted">… {df.height - max_rows} more rows</p>')
    return "".join(out)


def page(title: str, body: str) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head>"
        f"<body><h1>{html.escape(title)}</h1>\n{body}\n</body></html>\n"
    )
