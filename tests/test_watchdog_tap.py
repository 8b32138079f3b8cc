"""The watchdog Tap that `explain --log` reads through must see each log as reading it line by line does,
however the reader cuts the stream into blocks (it no longer splits blocks into lines: issue 23's speed)."""
import os
import random

from ddpdoctor.flightrec.watchdog import Tap, _Acc, feed

ROOT = os.path.dirname(__file__)


def _watchdog_logs() -> list[bytes]:
    out = []
    for top in ("logs", "corpus"):
        for d, _, names in sorted(os.walk(os.path.join(ROOT, top))):
            for n in sorted(names):
                data = open(os.path.join(d, n), "rb").read()
                if b"WorkNCCL(" in data or b"ork: " in data:
                    out.append(data)
    return out


def _line_by_line(data: bytes) -> _Acc:
    acc = _Acc()
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    for n, raw in enumerate(lines, 1):
        feed(acc, raw.decode("utf-8", "replace"), f"t:{n}")
    return acc


def test_tap_reads_every_watchdog_line_with_its_number_whatever_the_block_cuts():
    logs = _watchdog_logs()
    assert len(logs) >= 5
    rnd = random.Random(23)
    noise = b"".join(b"step %d loss 0.1 network ok\n" % i for i in range(300))
    seen = 0
    for data in logs:
        data = noise + data + noise[:5000] + b"tail without newline WorkNCCL(SeqNum=1"
        want = _line_by_line(data)
        seen += want.lines
        for _ in range(8):
            tap, i = Tap("t"), 0
            while i < len(data):
                k = rnd.choice([1, 7, 100, 4096, 1 << 16, len(data)])
                tap.feed_bytes(data[i:i + k])
                i += k
            tap.close()
            assert tap._acc == want
            assert tap._n == len(data.split(b"\n"))
    assert seen >= 10  # the logs do hold watchdog lines for the Tap to find
