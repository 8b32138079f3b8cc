"""`cluster --html`: the heatmap is checked as a person sees it, rendered by headless Chromium.

The page draws cells at known pixel positions (render/heatmap.py); the screenshot's colour at a
known-bad cell must be the failure red and at a good cell the pass blue.
"""
from __future__ import annotations

import os
import shutil
import struct
import subprocess
import tempfile
import zlib

import pytest

from ddpdoctor.cluster.report import write_heatmap
from ddpdoctor.render.heatmap import COLOURS, cell_center
from test_cluster_view import probe, record, view

pytestmark = pytest.mark.torchjob  # real processes: the CLI as a subprocess (tests/conftest.py)

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def read_png(path: str) -> tuple[int, int, list[bytes], int]:
    """(width, height, rows, bytes per pixel) of an 8-bit RGB/RGBA non-interlaced PNG."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and ctype in (2, 6) and interlace == 0
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride, rows, prev = w * bpp, [], bytearray(w * bpp)
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b, c = prev[x], (prev[x - bpp] if x >= bpp else 0)
            if f == 1:
                line[x] = (line[x] + a) & 255
            elif f == 2:
                line[x] = (line[x] + b) & 255
            elif f == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return w, h, rows, bpp


def pixel(png, x, y):
    w, h, rows, bpp = png
    return tuple(rows[y][x * bpp:x * bpp + 3])


def rgb(hex_colour):
    return tuple(int(hex_colour[k:k + 2], 16) for k in (1, 3, 5))


def near(a, b, tol=24):
    return all(abs(p - q) <= tol for p, q in zip(a, b))


@pytest.mark.skipif(CHROMIUM is None and os.environ.get("DDPDOCTOR_REQUIRE_LAB") != "1",
                    reason="chromium not installed (scripts/test.sh installs it)")
def test_heatmap_shows_the_dropped_pair_in_red_and_the_good_ones_in_blue():
    assert CHROMIUM, "chromium is required (apt-get install chromium)"
    n = 6
    recs = {i: record(i, n) for i in range(n)}
    recs[1]["probes"]["4"] = probe(4, rdzv="filtered")       # node2 -> node5: rendezvous port dropped
    v = view(recs, n)
    assert v.cell(1, 4) == "R"
    with tempfile.TemporaryDirectory() as tmp:
        page = os.path.join(tmp, "matrix.html")
        assert write_heatmap(page, v, failing=v.failing()) == ""
        shot = os.path.join(tmp, "shot.png")
        subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                        "--disable-component-update", "--disable-sync", "--no-first-run",
                        f"--user-data-dir={os.path.join(tmp, 'profile')}", "--hide-scrollbars",
                        "--window-size=800,400", f"--screenshot={shot}", "file://" + page],
                       capture_output=True, timeout=90, check=False, stdin=subprocess.DEVNULL)
        assert os.path.exists(shot), "chromium wrote no screenshot"
        if os.environ.get("DDPDOCTOR_KEEP_SHOT"):
            shutil.copy(shot, os.environ["DDPDOCTOR_KEEP_SHOT"])
        png = read_png(shot)
    # sample off-centre: the centre of a failed cell carries its letter
    bad = pixel(png, *(c - 5 for c in cell_center(1, 4)))
    good = pixel(png, *(c - 5 for c in cell_center(1, 3)))
    diag = pixel(png, *cell_center(2, 2))
    assert near(bad, rgb(COLOURS["R"][0])), bad
    assert near(good, rgb(COLOURS["ok"][0])), good
    assert near(diag, (255, 255, 255)), diag
