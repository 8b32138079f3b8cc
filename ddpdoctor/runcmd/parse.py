"""Split a launch command into its launcher(s), the torchrun arguments, and the training script.

    torchrun ARGS script.py ...                     torchrun's own parser (torchrun_parser.py)
    python -m torch.distributed.run ARGS ...        the same parser
    python -m torch.distributed.launch ARGS ...     the same parser (launch.py wraps run.py's)
    srun [srun options] <one of the above>          srun options skipped, the rest parsed again
    python script.py ...                            a plain script (lint only)

srun has no parser we could reuse; we only need to find where its options end. An option that
takes a value as a separate word is listed in SRUN_VALUE_OPTS (from `man srun`); `--opt=value`
and flags need no table. An option we do not know is taken as a flag: at worst the command is
not recognised and `run` says so (it never guesses a script).
"""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field

# srun options whose value may follow as a separate word (man srun, Slurm 23).
SRUN_VALUE_OPTS = {
    "-A", "--account", "-b", "--begin", "-c", "--cpus-per-task", "-d", "--dependency", "-D", "--chdir",
    "-e", "--error", "-i", "--input", "-J", "--job-name", "-L", "--licenses", "-m", "--distribution",
    "-N", "--nodes", "-n", "--ntasks", "-o", "--output", "-p", "--partition", "-q", "--qos", "-t", "--time",
    "-w", "--nodelist", "-x", "--exclude", "-C", "--constraint", "-G", "--gpus", "-K", "--kill-on-bad-exit",
    "-r", "--relative", "-T", "--threads", "-W", "--wait", "--mem", "--mem-per-cpu", "--mem-per-gpu",
    "--gres", "--gpus-per-node", "--gpus-per-task", "--ntasks-per-node", "--cpu-bind", "--mpi", "--export",
    "--reservation", "--signal", "--gpu-bind", "--cpus-per-gpu", "--het-group", "--container-image",
    "--container-mounts", "--container-workdir", "--network", "--het-group", "--switches", "--time-min",
}
TORCHRUN_MODULES = ("torch.distributed.run", "torch.distributed.launch")


class NotALaunch(ValueError):
    """The command is not one `run` understands (said in one line)."""


@dataclass
class LaunchSpec:
    argv: list[str]  # the whole command, unchanged: what exec runs
    wrappers: list[str] = field(default_factory=list)  # "srun" when the command goes through srun
    srun_opts: dict[str, str] = field(default_factory=dict)
    kind: str = ""  # "torchrun" | "python"
    launcher: str = ""  # how torchrun was named: "torchrun", "python -m torch.distributed.run"
    torchrun: argparse.Namespace | None = None
    torchrun_error: str = ""  # torchrun's own parser refused the arguments
    script: str | None = None  # the training script path (None with -m module or --no-python)
    script_args: list[str] = field(default_factory=list)
    module: str | None = None
    legacy_launch: bool = False


def _is_python(word: str) -> bool:
    base = os.path.basename(word)
    return base.startswith("python") and all(c.isdigit() or c in ".m" for c in base[6:])


def split(argv: list[str]) -> LaunchSpec:
    if not argv:
        raise NotALaunch("no command after `--`: want torchrun, srun or python with its arguments")
    spec = LaunchSpec(list(argv))
    rest = list(argv)
    while rest and os.path.basename(rest[0]) == "srun":
        spec.wrappers.append("srun")
        rest = _skip_srun(rest[1:], spec)
    if not rest:
        raise NotALaunch("srun with no command to run")
    word = os.path.basename(rest[0])
    if word == "torchrun":
        spec.launcher = rest[0]
        _torchrun(spec, rest[1:])
        return spec
    if _is_python(word):
        i = 1
        while i < len(rest) and rest[i].startswith("-") and rest[i] not in ("-m", "-c"):
            i += 1  # interpreter flags: -u, -O, -X opt...
            if rest[i - 1] in ("-X", "-W") and i < len(rest):
                i += 1
        if i < len(rest) and rest[i] == "-m" and i + 1 < len(rest):
            mod = rest[i + 1]
            if mod in TORCHRUN_MODULES:
                spec.launcher = f"{word} -m {mod}"
                spec.legacy_launch = mod.endswith("launch")
                _torchrun(spec, rest[i + 2:])
                return spec
            spec.kind, spec.module, spec.script_args = "python", mod, rest[i + 2:]
            return spec
        if i < len(rest) and rest[i] == "-c":
            raise NotALaunch("python -c: no script to check; give the script file")
        if i < len(rest):
            spec.kind, spec.script, spec.script_args = "python", rest[i], rest[i + 1:]
            return spec
        raise NotALaunch("python with no script")
    raise NotALaunch(f"{rest[0]!r} is not torchrun, python -m torch.distributed.run, srun or python")


def _skip_srun(args: list[str], spec: LaunchSpec) -> list[str]:
    i = 0
    while i < len(args) and args[i].startswith("-"):
        a = args[i]
        if a == "--":
            return args[i + 1:]
        if "=" in a and a.startswith("--"):
            k, v = a.split("=", 1)
            spec.srun_opts[k] = v
        elif a in SRUN_VALUE_OPTS and i + 1 < len(args):
            spec.srun_opts[a] = args[i + 1]
            i += 1
        elif len(a) > 2 and a[:2] in SRUN_VALUE_OPTS and not a.startswith("--"):  # -N2
            spec.srun_opts[a[:2]] = a[2:]
        else:
            spec.srun_opts[a] = ""
        i += 1
    return args[i:]


def _torchrun(spec: LaunchSpec, args: list[str]) -> None:
    from ddpdoctor.runcmd import torchrun_parser

    spec.kind = "torchrun"
    try:
        ns = torchrun_parser.parse(args)
    except ValueError as e:
        spec.torchrun_error = str(e)
        return
    spec.torchrun = ns
    if ns.module:
        spec.module = ns.training_script
    elif not ns.no_python:
        spec.script = ns.training_script
    spec.script_args = list(ns.training_script_args)
