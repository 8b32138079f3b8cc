"""One rule for version drift, shared by `smoke` (DD504, across ranks) and `cluster` (DD716, across nodes).

The same condition must get the same verdict whichever command sees it (issue 9): a torch, NCCL or
CUDA build that differs between members of one job is an error, because the job fails in init or in
the first collective (NCCL's `version mismatch` check in its bootstrap, store values pickled by one
torch and read by another, collectives whose defaults changed between releases). A differing NVIDIA
driver, Python or ddpdoctor is a warning: jobs run across them, but it marks a node outside the image
everyone else runs.
"""
from __future__ import annotations

from ddpdoctor.model import Finding, Fix, Severity

VERSION_KEYS = ("torch", "cuda", "nccl", "driver", "python")
MUST_AGREE = frozenset({"torch", "nccl", "cuda"})
FIX = "install the same {key} everywhere (one image or environment for all nodes)"


def severity(key: str) -> Severity:
    """ERROR for what must agree within a job (MUST_AGREE), else WARNING."""
    return Severity.ERROR if key in MUST_AGREE else Severity.WARNING


def finding(key: str, across: str, where: str, evidence: dict) -> Finding:
    """`{key} differs across {across}: {where}` with the severity and fix of the rule."""
    return Finding(severity(key), f"{key} differs across {across}: {where}", fix=Fix(FIX.format(key=key)),
                   evidence={"key": key, **evidence})
