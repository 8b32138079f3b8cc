"""`ddpdoctor run -- torchrun ...`: check the launch command, the script and the rendezvous, then exec.

The pre-flight is cheap by construction (the budget is 0.3 s before exec, measured by
benchmarks/bench_lint.py): torchrun's parser is read from torch's source without importing torch,
lint reads the script with `ast`, and the network checks are those that need no peer (DNS of the
endpoint, NIC choice, environment: no connect to a master that may not be listening yet).
When nothing is at error level the command is exec'd unchanged (`os.execvp`: same argv, same
environment, same pid, so signals and the exit code are the job's own).
"""
from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass

from ddpdoctor.model import CheckResult, Finding, Fix, Report, Severity, Status, status_from_findings

# Network checks that need a peer or a listener (ping, connect to the master) or run on the master
# only: before the job starts there is nothing to connect to yet.
NETWORK_NEEDS_PEER = ("DD101", "DD102", "DD103")


@dataclass
class Preflight:
    report: Report
    spec: object
    lint_files: int = 0


def preflight(argv: list[str], *, network: bool = True, lint: bool = True, deadline: float = 2.0,
              select=(), ignore=(), gpu_probe=None, env=None) -> Preflight:
    from ddpdoctor import registry, runner
    from ddpdoctor.runcmd.facts import LaunchFacts
    from ddpdoctor.runcmd.parse import split

    t0 = time.monotonic()
    spec = split(argv)  # NotALaunch -> caller prints one line, exit 2
    facts = LaunchFacts(spec, env=dict(os.environ if env is None else env), gpu_probe=gpu_probe)
    checks = registry.select("run", select=select, ignore=ignore)
    results = list(runner.run_checks(checks, facts, deadline=deadline))
    n_lint = 0
    if lint and facts.script_path is not None and facts.script_path.is_file():
        lint_results, n_lint = _lint(str(facts.script_path), select, ignore, single_node=_single_node(facts))
        results += lint_results
    if network and facts.endpoint is not None and not facts.endpoint.problem and facts.endpoint.port:
        results += _network(facts, select, ignore, deadline)
    return Preflight(Report("run", socket.gethostname(), tuple(results), time.monotonic() - t0,
                            extra={"command": list(argv)}), spec, n_lint)


def _single_node(facts) -> bool:
    """The launch runs on one node: `torchrun --standalone`, or --nnodes whose maximum is 1."""
    a = facts.args
    if a is None:
        return False
    return bool(getattr(a, "standalone", False)) or not facts.multi_node


def _lint(path: str, select, ignore, single_node: bool = False) -> tuple[list[CheckResult], int]:
    from ddpdoctor.lint import lint_paths
    from ddpdoctor.lint.registry import all_rules

    sel = [s for s in select if s.upper().startswith("DL")]
    ign = [s for s in ignore if s.upper().startswith("DL")]
    res = lint_paths([path], sel, ign)
    by_rule: dict[str, list[Finding]] = {}
    for f in res.findings:
        sev, msg = f.severity, f.message
        if f.rule == "DL003" and single_node:
            # one node: the global rank *is* the local rank, so this launch works; it breaks on the
            # second node. Judge with what the command says, and do not refuse a working launch.
            sev, msg = Severity.WARNING, msg + "; this launch is single-node (rank == local rank): fine here"
        by_rule.setdefault(f.rule, []).append(
            Finding(sev, f"{f.where or f'{f.path}:{f.line}'}: {msg}",
                    fix=Fix(f.fix, code=f.code) if f.fix else None,
                    evidence={"path": f.path, "line": f.line, "rule": f.rule}))
    rules = all_rules()
    out = []
    for rid, fs in sorted(by_rule.items()):
        out.append(CheckResult(rid, rules[rid].title, "lint", status_from_findings(tuple(fs)), 0.0, tuple(fs)))
    for p in res.problems:
        out.append(CheckResult("DL000", "the script parses", "lint", Status.FAIL, 0.0,
                               (Finding(Severity.ERROR, str(p)),)))
    return out, res.files


def _network(facts, select, ignore, deadline) -> list[CheckResult]:
    from ddpdoctor import registry, runner
    from ddpdoctor.facts.network import NetworkFacts

    ep = facts.endpoint
    ctx = NetworkFacts(ep.host, ep.port, env=facts.env, probe_timeout=min(1.0, deadline))
    checks = registry.select("network", select=[s for s in select if not s.upper().startswith("DL")],
                             ignore=[*ignore, *NETWORK_NEEDS_PEER])
    return list(runner.run_checks(checks, ctx, deadline=deadline))


def exec_command(argv: list[str]) -> None:
    """Replace this process with the command: same argv, environment, pid (signals), exit code."""
    os.execvp(argv[0], argv)
