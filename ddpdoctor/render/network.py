"""`network`'s own section: the environment fixes as lines to paste. Report in, text out."""
from __future__ import annotations

import shlex
from typing import Mapping

from ddpdoctor.model import Report


def env_footer(env: Mapping[str, str]) -> list[str]:
    """Values shell-quoted: an interface may be named `a;b`, which Linux allows."""
    if not env:
        return []
    return ["To apply the environment fixes on this host:"] + [f"  export {k}={shlex.quote(v)}" for k, v in env.items()]


def lines(report: Report) -> list[str]:
    return env_footer(report.fix_env())
