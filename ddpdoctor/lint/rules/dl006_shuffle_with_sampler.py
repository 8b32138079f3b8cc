"""DL006: DataLoader(shuffle=True, sampler=...) raises ValueError."""
from __future__ import annotations

import ast

from ddpdoctor.lint.context import Context
from ddpdoctor.lint.module import kwarg
from ddpdoctor.lint.registry import rule
from ddpdoctor.model import Severity


@rule("DL006", "DataLoader with shuffle=True and a sampler", severity=Severity.ERROR, fix="safe")
def shuffle_with_sampler(ctx: Context):
    """## What it checks
    `DataLoader(..., shuffle=True, sampler=...)` (or `batch_sampler=`) with a sampler that is not
    the literal `None`.

    ## Why it matters
    DataLoader refuses the combination: `ValueError: sampler option is mutually exclusive with
    shuffle` as soon as the sampler is set — typically only on the multi-GPU path, so the
    single-GPU test passes and the distributed job dies at start.

    ## Fix
    Drop `shuffle=True` (the DistributedSampler shuffles), or `shuffle=(sampler is None)`.
    `--fix` removes the `shuffle=True` argument.
    """
    for mod, call, q in ctx.group.calls:
        if not q.endswith("DataLoader"):
            continue
        sh = kwarg(call, "shuffle")
        if not (isinstance(sh, ast.Constant) and sh.value is True):
            continue
        for name in ("sampler", "batch_sampler"):
            s = kwarg(call, name)
            if s is not None and not (isinstance(s, ast.Constant) and s.value is None):
                yield ctx.finding("DL006", mod, call,
                                  f"DataLoader(shuffle=True, {name}={mod.source(s, 40)}) raises ValueError "
                                  "(sampler option is mutually exclusive with shuffle)",
                                  "drop shuffle=True: the sampler shuffles")
                break
