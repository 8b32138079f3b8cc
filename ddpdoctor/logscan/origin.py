"""Who wrote a log line: the prefixes launchers and log collectors put in front of it (a host, a rank), stripped
as a person skips them before reading the line. Split from matcher.py (module size); matcher.py re-exports it."""
from __future__ import annotations

import re
from functools import lru_cache

# Prefixes that launchers and log collectors put in front of each line: pdsh/clush `host: `, Slurm
# `srun -l` task numbers `3: `, mpirun `[1,3]<stderr>:`, torchrun `[rank3]:` and `--tee`
# `[<role><local rank>]:` (`[default3]:`, `[trainer3]:` with --role; elastic/multiprocessing/api.py), and Ray's
# `(RayTrainWorker pid=123, ip=10.0.0.5) `.
_PREFIX = re.compile(
    r"^(?:"
    # what a person skips before reading a line: a quote marker (`> `, GitHub comments), a timestamp a log
    # collector put first (`2024-12-04T07:19:22.472Z `, `[2026-04-22 21:34:20] `), a bare process number
    # (`[80746] `), accelerate's `stderr: ` and torchx's `trainer/0 [1]:`
    r">+ ?|\[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?Z?\]?[ \t]+|\[\d+\] (?=\S)|std(?:out|err): |"
    r"[\w-]+/\d+ \[(?P<torchx>\d+)\]:\s?|"
    # Open MPI's `mpirun --timestamp-output` (orte/mca/iof/base: ctime() without its newline, glued to the tag
    # "%s[%s,%s]<%s>:" with --tag-output, "%s<%s>:" without): the time goes, the tag is read below
    r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ \d]\d \d\d:\d\d:\d\d \d{4}"
    r"(?:<std(?:out|err|diag)>:\s?|(?=\[\d+,\d+\]<std))|"
    r"(?P<label>[A-Za-z0-9][A-Za-z0-9_.-]{0,62}): "
    r"|\[\d+,(?P<mpi>\d+)\]<std(?:out|err)>:\s?"
    r"|\[rank(?P<rank>\d+)\]:\s?"
    r"|\[[A-Za-z_][\w-]*?(?P<local>\d+)\]:\s?"
    r"|\(\w+ pid=\d+(?:, ip=(?P<ip>[\d.]+))?\)\s"
    r")"
)
# (a shared library's name is the dynamic loader's prefix, dlerror(3): `libtorch_cuda.so: undefined symbol: ...`)
_NOT_HOST = re.compile(r"(?i)(?:error|exception|warning|warn|info|debug|traceback|critical|fatal|notice)$|\.py$|"
                       r"\.so(?:\.\d+)*$")
# NCCL's debug prefix (src/debug.cc ncclDebugLog, src/misc/utils.cc before 2.5): "%s:%d:%d [%d] NCCL INFO ", and for
# WARN the file and line too, "%s:%d:%d [%d] %s:%d NCCL WARN " (v2.4.8 .. v2.29), "... %s:%d (%s) NCCL WARN " with the
# function (v2.30.7)
_NCCL_ORIGIN = re.compile(r"^(?P<host>[A-Za-z0-9][\w.-]*):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] "
                          r"(?:[\w./-]+:\d+ (?:\([^()\s]*\) )?)?NCCL ")
_MSG_RANK = re.compile(r"\[(?:PG [^\]]*?)?Rank (?P<r1>\d+)\]|(?<![\w-])rank[:=] ?(?P<r2>\d+)\b|\bon rank:? (?P<r3>\d+)")


def split_origin(text: str) -> tuple[str, str | None, int | None]:
    """(body, host, rank) of a log line: strips collector prefixes and reads who wrote the line."""
    host = rank = None
    body = _unmarked(text)
    for _ in range(6):
        m = _PREFIX.match(body)
        if not m:
            break
        label = m.group("label")
        if label is not None:
            if label.isdecimal():  # not isdigit(): int() refuses "²"
                rank = int(label) if rank is None else rank  # srun -l task number
            elif _not_host(label) or not any(c.isdigit() or c in "-." for c in label):
                break  # `RuntimeError: ...`, `INFO: ...`, `main.py: error: ...` are messages, not hosts
            elif host is None:
                host = label
        elif m.group("mpi") is not None:
            rank = int(m.group("mpi"))
        elif m.group("rank") is not None:
            rank = int(m.group("rank"))
        elif m.group("local") is not None:
            rank = int(m.group("local")) if rank is None else rank
        elif m.group("ip") is not None and host is None:
            host = m.group("ip")
        elif m.group("torchx") is not None:
            rank = int(m.group("torchx")) if rank is None else rank
        body = body[m.end():]
    # each search only where the line holds the literal every match of it holds (`NCCL `; `rank` or `Rank `):
    # re tries every alternative at every position of the line, ~5-15 us a line (issue 23's speed goal)
    m = _NCCL_ORIGIN.match(body) if host is None and "NCCL " in body else None
    if m:
        host = m.group("host")
    if rank is None and ("rank" in body or "Rank " in body):
        m = _MSG_RANK.search(body)
        if m:
            rank = int(next(g for g in m.groups() if g is not None))
    return body, host, rank


@lru_cache(maxsize=4096)
def _not_host(label: str) -> bool:
    """_NOT_HOST.search(label), kept per label (bounded): a log repeats its few labels (`RuntimeError`, `INFO`)."""
    return _NOT_HOST.search(label) is not None


def _unmarked(text: str) -> str:
    """The line as a person reads a log pasted into Markdown (GitHub issues, forums): bold markers (`**`) that the
    poster put around the words that matter, and the backticks that quote a line, removed. Neither is ever part of
    what the code printed in a way a signature reads (a `**kwargs` in a traceback's source line reads the same
    without them)."""
    if "**" in text:
        text = text.replace("**", "")
    if text[:1] == "`" or text[-1:] == "`":
        text = text.strip("`")
    return text
