"""`cluster --html FILE`: the reachability matrix as a heatmap people look at instead of read.

A renderer: it draws the cell codes `ClusterView.cell()` already decided, and judges nothing.
Cells are absolutely positioned squares of CELL px (row = the node that probed, column = the
node probed), so a cell's place on the page is known exactly: tests/test_cluster_scale_html.py
renders the page in headless Chromium and compares the pixel colours of a bad and a good cell.
One self-contained file: no script, no external resources.
"""
from __future__ import annotations

import html
from typing import Sequence

CELL = 18          # px per cell
LABEL_W = 180      # px for the row labels
TOP = 96           # px above the first row (title, legend)
MAX_DRAWN = 400    # beyond this, only the nodes involved in a failure are drawn

# code -> (colour, meaning); colours chosen to be told apart with red-green colour blindness too
# (blue vs orange/red, with letters in the cells).
COLOURS = {
    "ok": ("#2b6cb0", "both ports answer"),
    "R": ("#c53030", "rendezvous port fails"),
    "E": ("#dd6b20", "ephemeral port fails"),
    "X": ("#742a2a", "both ports fail"),
    "N": ("#6b46c1", "name does not resolve"),
    "W": ("#d53f8c", "another host answers"),
    "·": ("#e2e8f0", "not probed"),
    "?": ("#a0aec0", "node never reported"),
    "-": ("#ffffff", "itself"),
}


def _cell_style(x: int, y: int, colour: str) -> str:
    return f"left:{x}px;top:{y}px;background:{colour}"


def heatmap_html(names: Sequence[str], cell, *, title: str, subtitle: str = "",
                 failing: Sequence[int] = (), tooltip=None) -> str:
    """`cell(i, j)` -> a code of COLOURS; `tooltip(i, j)` -> extra text for the cell's title."""
    n = len(names)
    idx = list(range(n))
    note = ""
    if n > MAX_DRAWN:
        involved = sorted({k for i in range(n) for j in range(n) if i != j and cell(i, j) not in ("ok", "·", "-")
                           for k in (i, j)} | set(failing))
        idx = involved[:MAX_DRAWN]
        note = f"{n} nodes: only the {len(idx)} involved in a failure are drawn"
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title><style>",
        "body{margin:0;font:12px/1.3 sans-serif;background:#fff;color:#1a202c}",
        f".c{{position:absolute;width:{CELL - 1}px;height:{CELL - 1}px;font-size:10px;text-align:center;"
        f"line-height:{CELL - 1}px;color:#fff}}",
        f".r{{position:absolute;left:4px;width:{LABEL_W - 8}px;height:{CELL}px;line-height:{CELL}px;"
        "overflow:hidden;white-space:nowrap;text-align:right}",
        ".bad{color:#c53030;font-weight:bold}",
        ".h{position:absolute;left:8px}.lg{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px;"
        "vertical-align:middle}",
        "</style></head><body>",
        f"<div class='h' style='top:6px;font-size:15px;font-weight:bold'>{html.escape(title)}</div>",
        f"<div class='h' style='top:28px'>{html.escape(subtitle)} {html.escape(note)}</div>",
        "<div class='h' style='top:48px'>rows probe columns:"
        + "".join(f"<span class='lg' style='background:{c};border:1px solid #cbd5e0'></span>{html.escape(t)}"
                  for code, (c, t) in COLOURS.items() if code != "-") + "</div>",
    ]
    bad = set(failing)
    for col, j in enumerate(idx):
        parts.append(f"<div class='c' style='{_cell_style(LABEL_W + col * CELL, TOP - CELL, '#fff')};color:#4a5568'>"
                     f"{j + 1 if n < 1000 else ''}</div>")
    for row, i in enumerate(idx):
        y = TOP + row * CELL
        cls = "r bad" if i in bad else "r"
        parts.append(f"<div class='{cls}' style='top:{y}px'>{i + 1} {html.escape(names[i])}</div>")
        for col, j in enumerate(idx):
            code = cell(i, j)
            colour, meaning = COLOURS.get(code, COLOURS["?"])
            tip = f"{names[i]} → {names[j]}: {meaning}"
            if tooltip and i != j:
                extra = tooltip(i, j)
                if extra:
                    tip += f" ({extra})"
            letter = code if code in ("R", "E", "N", "W") else ("✗" if code == "X" else "")
            parts.append(f"<div class='c' style='{_cell_style(LABEL_W + col * CELL, y, colour)}' "
                         f"title='{html.escape(tip, quote=True)}'>{letter}</div>")
    height = TOP + len(idx) * CELL + 16
    parts.append(f"<div style='position:absolute;top:{height}px;height:1px;width:1px'></div></body></html>")
    return "\n".join(parts)


def cell_center(row: int, col: int) -> tuple[int, int]:
    """Pixel centre of the drawn cell at (row, col) (positions in the drawn order)."""
    return LABEL_W + col * CELL + CELL // 2, TOP + row * CELL + CELL // 2
