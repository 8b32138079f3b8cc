"""Every pattern applied to a log line runs in time linear in the line (issue 21: the Kubernetes fact's
`\\b[a-z0-9][a-z0-9-]*-master-\\d+\\b` made a 4 MB log 190x slower than a plain one).

For each catalog signature, each fact and each pattern the log scan and the watchdog reader apply
to whole lines, hostile lines are built from the pattern's own example (a prefix of it repeated: a
near-match at every position) and from runs of the characters patterns repeat over. A pattern is
linear when the time on a line 4x longer grows about 4x, under 10x (quadratic: 16x); a search that stays
under 2 ms on the longer line cannot be quadratic at that length and is not timed further. Ratios on the
same machine, never absolute seconds.
"""
from __future__ import annotations

import re
import timeit

import pytest

from ddpdoctor import catalog
from ddpdoctor.flightrec import watchdog
from ddpdoctor.logscan import matcher
from ddpdoctor.logscan.facts import FACTS

N1, N2 = 4_000, 16_000
RUNS = ("a", "a-", "a ", "0", "1.", " ", "-", "/", "[", "a:", "\\", "'", "a.", "x=", ":0", "a_", "\t", "(")


def _patterns():
    for fm in catalog.failures().values():
        for i, sig in enumerate(fm.signatures):
            yield f"{fm.id}#{i}", sig.regex, sig.example or ""
    for i, f in enumerate(FACTS):
        yield f"fact#{i}:{f.name}", re.compile(f.pattern), f.example
    for name in ("_PREFIX", "_NOT_HOST", "_NCCL_ORIGIN", "_MSG_RANK"):
        rx = getattr(matcher, name)
        yield f"matcher.{name}", rx, ""
    for name in ("_PREFIX", "_GLOBAL", "_PROGRESS", "_AT", "_WORK"):
        yield f"watchdog.{name}", getattr(watchdog, name), ""


PATTERNS = list(_patterns())

# Catalog signatures of the shape `A[^\n]*B` (or `\S+: \S+:`) are quadratic on a line with many A and
# no B: Python's re retries the scan from every A. They belong to the catalog (catalog/*.toml, another
# area); listed here (xfail, not strict: a borderline one may pass on a quiet machine) so the suite
# shows them until the catalog is rewritten.
KNOWN_QUADRATIC = {  # (failure id, the pattern's first 40 characters)
    ('MASTER_PORT_IN_USE', '(?i)(?:error|fail)[^\\n]*address already '),
    ('LAUNCHER_SSH_UNREACHABLE', 'ssh\\b[^\\n]*PasswordAuthentication=no[^\\n'),
    ('LAUNCHER_SSH_UNREACHABLE', 'pdsh@\\S+: \\S+: ssh exited with exit code'),
    ('LOCAL_RANK_ARG_MISMATCH', 'error: unrecognized arguments: .*--local'),
    ('NODE_RANK_DUPLICATED', '(?i)(?:error|fail)[^\\n]*address already '),
    ('HOSTNAME_RESOLVES_TO_LOOPBACK', 'Gloo connectFullMesh failed with [^\\n]*C'),
    ('FIREWALL_BLOCKS_PORTS', 'Gloo connectFullMesh failed with [^\\n]*('),
    ('MTU_MISMATCH', 'Got completion [^\\n]*IBV_WC_LOC_LEN_ERR'),
    ('GLOO_ADDRESS_UNREACHABLE', 'SO_ERROR: (?:Network is unreachable|No r'),
    ('GLOO_COLLECTIVE_TIMEOUT', '\\[[^\\]]*gloo/transport/\\w+/[\\w.]+:\\d+\\] '),
    ('GLOO_PEER_EXITED', 'Error: \\[[^\\]]*gloo/transport/tcp/[\\w.]+'),
    ('NCCL_SHM_TOO_SMALL', '(?i)NCCL WARN[^\\n]*(?:unable to allocate'),
    ('NCCL_SYSTEM_ERROR', 'ncclInternalError|NCCL error[^\\n]*?\\bint'),
    ('FABRIC_MANAGER_NOT_RUNNING', '(?i)(?:error|fail)[^\\n]*system not yet i'),
    ('GPU0_EXTRA_MEMORY', 'Error: CUDA out of memory[^\\n]*GPU 0 has'),
    ('GPU0_EXTRA_MEMORY', 'Error: CUDA out of memory\\. Tried to all'),
}
PATTERNS = [pytest.param(*p, id=p[0], marks=[pytest.mark.xfail(reason="quadratic catalog pattern (catalog owner)")]
                         if (p[0].split("#")[0], p[1].pattern[:40]) in KNOWN_QUADRATIC else []) for p in PATTERNS]


def _hostile(example: str) -> list[str]:
    """Units to repeat into a long line: prefixes of the example (every cut of up to 40 chars, in
    steps), the example itself, and runs of one or two characters."""
    units = list(RUNS)
    ex = example.strip()
    for k in range(1, min(len(ex), 60), 3):
        units.append(ex[:k])
    if ex:
        units.append(ex + " ")
    return list(dict.fromkeys(u for u in units if u))


def _line(unit: str, n: int) -> str:
    return (unit * (n // len(unit) + 1))[:n]


def _t(rx, s: str) -> float:
    return min(timeit.repeat(lambda: rx.search(s), number=1, repeat=5))


@pytest.mark.parametrize("name,rx,example", PATTERNS)
def test_every_line_pattern_is_linear_on_hostile_lines(name, rx, example):
    for unit in _hostile(example):
        t2 = _t(rx, _line(unit, N2))
        if t2 < 0.002:
            continue
        t1 = _t(rx, _line(unit, N1))
        ratio = t2 / max(t1, 1e-6)
        if ratio >= 10:  # once more, on a quiet moment: the machine is shared
            t1, t2 = _t(rx, _line(unit, N1)), _t(rx, _line(unit, N2))
            ratio = t2 / max(t1, 1e-6)
        assert ratio < 10, f"{name} {rx.pattern[:60]!r}: {t1 * 1000:.1f} ms at {N1} chars, {t2 * 1000:.1f} ms at {N2} of {unit!r}"
