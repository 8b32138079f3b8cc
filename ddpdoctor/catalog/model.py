"""The shape of a failure mode: what a user sees in the log, why it happens, how to fix it,
and which pre-flight checks catch it before the next job.

Plain frozen data, like ddpdoctor.model: the catalog modules only declare, `ddpdoctor.logscan`
matches, `ddpdoctor.catalog.pages` renders.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ddpdoctor.model import Fix

try:  # the regex parser moved in 3.11; both expose the same parse()
    import re._parser as _sre_parse  # type: ignore[import-not-found]
    from re._constants import LITERAL as _LITERAL  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - Python < 3.11
    import sre_parse as _sre_parse  # type: ignore[no-redef]
    from sre_constants import LITERAL as _LITERAL  # type: ignore[no-redef]

FAILURE_ID_RE = re.compile(r"^[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+$")

# What a matching line says about its failure mode.
CAUSE = "cause"      # the line names this failure (a specific error message)
SYMPTOM = "symptom"  # an error several failure modes produce; alone it decides nothing
CLUE = "clue"        # not an error by itself (an INFO line, a config echo); supports other evidence
ROLES = (CAUSE, SYMPTOM, CLUE)

# Kinds of failure mode.
ROOT = "root"            # a cause you can fix
CONSEQUENCE = "consequence"  # itself the effect of something else (a collective timeout, a dead peer)

CATEGORIES = ("port", "launcher", "rendezvous", "dns", "network", "nic", "gloo", "container",
              "nccl", "gpu", "slurm", "code", "windows")

MIN_TRIGGER = 4

# Shared gate words: the log scanner searches for each with bytes.find, one pass over the lowercased
# log (see ddpdoctor/logscan/matcher.py), and only looks again at lines a gate occurs in. A trigger
# that contains one of these words shares its pass; any other trigger becomes a gate of its own (one
# more pass, no edit needed here: benchmarks/bench_explain.py measures the cost, and tests/test_catalog.py
# keeps gates rare in healthy logs). Words frequent in healthy logs ('nccl', 'rank', 'warning', 'cuda')
# would make every line a candidate.
GATES = ("error", "fail", "timed out", "timeout", "refused", "found", "unable", "invalid", "denied", "mismatch",
         "exitcode", "signal", "rendezvous", "rdzv", "route", "family", " : using ", "remote=[", "completion",
         "run_id", "group_rank", "nccl version", "      : ", "srcvalid+", "geforce",
         "set_device", "srun", "master", "unreachable",
         # issue 23: one Aho-Corasick automaton keeps its SIMD prefilter (Teddy) up to 64 gate words; past 64 the
         # line-finding pass runs two automatons of even sizes (logscan/gatefind.groups), no dearer than one of 64
         # (benchmarks/bench_gates.py). A word shared by several rare triggers still saves a gate; never a 3-byte
         # word (Teddy's fingerprints are min(4, shortest word) bytes long)
         "no cuda", "cuda_visible_devices", "wsl2", "out of memory",
         # words that several rare triggers share (the DeepSpeed launcher's and the shell's kill reports, NCCL's
         # "Could not find ..." WARNs, the driver's version lines, launchers' ssh failures)
         "kill", "could not find", "driver", " ssh", "is not comp",
         # torch's `environment variable RANK expected, but not set` and NCCL's `NCCL_X set by environment to V`
         "environment",
         # tools that say they cannot do something (`python: can't open file`, busybox nslookup's `can't resolve`,
         # `** server can't find`): one gate for what were separate ones
         "can't ",
         # CUDA's fork error in either of its sentences (torch/cuda/__init__.py _lazy_init): what was the
         # "in forked subprocess" gate
         "cuda ")


@dataclass(frozen=True)
class Emitted:
    """Where a signature's line comes from: the format string in the emitting code, per range of releases.

    `source` is the repository (NVIDIA/nccl, pytorch/pytorch, pytorch/gloo), `file` and `function` where the
    message is built, `versions` the releases that print it this way ("v2.16.2-1 .. v2.23.4-1"; for code
    without release tags, the commits), `template` the format string as written there (printf `%s`/`%d`,
    or the pieces a C++ stream concatenates, with `%s` for each value), and `values` what to put in its
    `%s` fields to make a realistic line (tests/test_catalog_templates.py renders every template and the
    signature must match it)."""

    source: str
    file: str
    versions: str
    template: str
    function: str = ""
    prefix: str = ""              # what the emitting macro puts before the message (NCCL's WARN line head)
    values: tuple[str, ...] = ()


@dataclass(frozen=True)
class Signature:
    """One log line pattern and how strongly it points at its failure mode.

    `name` (UPPER_SNAKE) is how rules and docs refer to a signature, never by a piece of its pattern.
    `pattern` is a Python regular expression searched in one log line (ANSI colours removed,
    no line ending). `weight` (0-1) is the confidence one match gives on its own; matches of
    several signatures of one failure mode combine. `example` is a real or template line the
    pattern must match (a test enforces it). `note` is a sentence shown with the evidence; it
    may use the pattern's named groups (`{addr}`). `trigger` is a lowercase literal (or a tuple
    of literals, one of which) every matching line contains; the scanner looks for it before
    running the regex, and it must contain one of GATES. When empty it is derived from the
    pattern: its longest top-level literal run that contains a gate word.
    """

    pattern: str
    weight: float
    role: str = CAUSE
    example: str = ""
    note: str = ""
    trigger: str | tuple[str, ...] = ""
    name: str = ""  # unique within its failure mode: the ranker's cross-line rules refer to it by name
    emitted: tuple[Emitted, ...] = ()  # the code that prints it, per release range (provenance)
    shared: bool = False  # its pattern is one of catalog/shared.toml's: a line several modes print, never decisive
    # why no `emitted` template is recorded: no code of a public project prints the line as matched (a clue read from
    # the job's own config echo, a poster's wording, several programs' shared phrase); issue 23 §1 wants one or the other
    unemitted: str = ""

    def __post_init__(self):
        if self.role not in ROLES:
            raise ValueError(f"signature role {self.role!r} not in {ROLES}")
        if not 0 < self.weight <= 1:
            raise ValueError(f"signature weight {self.weight} out of (0, 1]")
        if not self.trigger:
            object.__setattr__(self, "trigger", required_literal(self.pattern))

    @property
    def triggers(self) -> tuple[str, ...]:
        return (self.trigger,) if isinstance(self.trigger, str) else tuple(self.trigger)

    @property
    def regex(self) -> re.Pattern:
        return _compiled(self.pattern)


_CACHE: dict[str, re.Pattern] = {}


def _compiled(pattern: str) -> re.Pattern:
    rx = _CACHE.get(pattern)
    if rx is None:
        rx = _CACHE[pattern] = re.compile(pattern)
    return rx


def literal_runs(pattern: str) -> list[str]:
    """The runs of literal characters at the top level of `pattern`, lowercased: every line the
    pattern matches contains each of them (case-insensitively)."""
    try:
        parsed = _sre_parse.parse(pattern)
    except re.error as e:
        raise ValueError(f"bad pattern {pattern!r}: {e}") from None
    runs, run = [], []
    for op, arg in list(parsed) + [(None, None)]:
        if op == _LITERAL:
            run.append(chr(arg))
            continue
        if run:
            runs.append("".join(run).lower())
        run = []
    return runs


def required_literal(pattern: str, gates: tuple[str, ...] = GATES) -> str:
    """The trigger of `pattern`: its longest literal run that contains a gate word, else its
    longest literal run; "" when it has none (top-level alternation): name the trigger then."""
    runs = literal_runs(pattern)
    gated = [r for r in runs if any(g in r for g in gates)]
    pool = gated or runs
    return max(pool, key=lambda r: len(r.strip()), default="")


@dataclass(frozen=True)
class FailureMode:
    """A way distributed PyTorch set-ups fail, as one catalog entry.

    `checks` are registered check ids (DDnnn) that detect or confirm it before a job runs
    (a test asserts each exists). `confirm` is the command to run to confirm it, with
    `{master}` / `{port}` filled from the log when it shows them. `preflight` says in prose how
    to catch it before launch, including what no check covers yet. `related` names failure
    modes that produce the same symptoms. `sources` are public reports of it.
    """

    id: str
    title: str
    category: str
    summary: str          # what the user sees
    cause: str            # why it happens
    fix: Fix
    signatures: tuple[Signature, ...]
    checks: tuple[str, ...] = ()
    confirm: str = ""
    preflight: str = ""
    kind: str = ROOT
    related: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    origin: str = "reference"  # "reference" (shared/failure-catalog.md) or "ddpdoctor" (found while building it)
    # The most confidence a log can give this mode: below 1 for a mode that names what happened but never why (a
    # worker killed by SIGSEGV, a hung watchdog thread); `undecided` says what would decide (issue 23).
    ceiling: float = 1.0
    undecided: str = ""

    def __post_init__(self):
        if not FAILURE_ID_RE.match(self.id):
            raise ValueError(f"failure id {self.id!r} is not UPPER_SNAKE")
        if self.category not in CATEGORIES:
            raise ValueError(f"{self.id}: category {self.category!r} not in {CATEGORIES}")
        if self.kind not in (ROOT, CONSEQUENCE):
            raise ValueError(f"{self.id}: kind {self.kind!r}")
        if not 0 < self.ceiling <= 1:
            raise ValueError(f"{self.id}: ceiling {self.ceiling} out of (0, 1]")


@dataclass(frozen=True)
class Confirm:
    """Placeholders a confirm command may use, with the values shown when the log is silent."""

    master: str = "<master>"
    port: str = "<port>"

    def fill(self, template: str) -> str:
        return template.replace("{master}", self.master).replace("{port}", self.port)


def fix(summary: str, *commands: str, env: dict[str, str] | None = None, code: str = "") -> Fix:
    """Shorthand for the catalog modules."""
    return Fix(summary, tuple(commands), dict(env or {}), code)


__all__ = ["Signature", "Emitted", "FailureMode", "Confirm", "fix", "required_literal", "literal_runs", "GATES", "CAUSE", "SYMPTOM", "CLUE",
           "ROOT", "CONSEQUENCE", "CATEGORIES", "FAILURE_ID_RE", "MIN_TRIGGER"]
