"""Entry point of `python -m ddpdoctor.dev`: bad input is one line on stderr and exit 2, never a traceback."""
from __future__ import annotations

import argparse
import sys


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse prints usage + message; the contract is one line
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(2)


def _parser() -> argparse.ArgumentParser:
    import ddpdoctor.dev
    ap = _Parser(prog="python -m ddpdoctor.dev", description=(ddpdoctor.dev.__doc__ or "").split("\n")[0])
    sub = ap.add_subparsers(dest="what", required=True, parser_class=_Parser)
    c = sub.add_parser("new-check", help="a check in ddpdoctor/checks/ and its unit test")
    c.add_argument("id", help="DD + 3 digits; the first digit is the category; never used before")
    c.add_argument("title", help="one line: what the check verifies")
    c.add_argument("--category", required=True, help="reachability, dns, nic, gpu, distributed, system, slurm, env, ddpdoctor")
    c.add_argument("--tags", help="comma-separated commands that run it (default: those of its category's checks)")
    c.add_argument("--module", help="module of ddpdoctor/checks/ to add it to (default: <category>.py, else the "
                                    "module holding most checks of the category)")
    m = sub.add_parser("new-mode", help="a failure mode (catalog/modes/ID.toml) and its test log")
    m.add_argument("id", help="UPPER_SNAKE, never used before")
    m.add_argument("--category", help="one of ddpdoctor.catalog.model.CATEGORIES (default: code)")
    r = sub.add_parser("new-rule", help="a lint rule and its fixtures (ddpdoctor.lint.new_rule)")
    r.add_argument("id")
    r.add_argument("name")
    r.add_argument("title", nargs="?")
    n = sub.add_parser("new-command", help="a subcommand: commands.py, cli/, facts/ and a test")
    n.add_argument("name")
    n.add_argument("--no-checks", action="store_true", help="a command that runs no registered checks")
    g = sub.add_parser("generate-all", help="every generated page and table (docs/reference, marked tables)")
    g.add_argument("--check", action="store_true", help="write nothing; exit 1 listing what is stale")
    return ap


def _new_rule(a) -> int:
    import importlib.util
    if importlib.util.find_spec("ddpdoctor.lint.new_rule") is None:
        print("new-rule: this tree has no ddpdoctor/lint/new_rule.py (the lint rule scaffold); "
              "see docs/lint.md", file=sys.stderr)
        return 2
    from ddpdoctor.lint import new_rule
    return new_rule.main([a.id, a.name, *([a.title] if a.title else [])])


def main(argv: list[str] | None = None) -> int:
    a = _parser().parse_args(argv)
    try:
        if a.what == "generate-all":
            from ddpdoctor.dev import generate
            if a.check:
                lines = generate.stale()
                for line in lines:
                    print(line)
                if lines:
                    print("run: python -m ddpdoctor.dev generate-all", file=sys.stderr)
                return 1 if lines else 0
            for path in generate.write():
                print(f"wrote {path}")
            return 0
        if a.what == "new-rule":
            return _new_rule(a)
        if a.what == "new-check":
            from ddpdoctor.dev.new_check import new_check
            paths = new_check(a.id, a.title, a.category, a.tags, a.module)
            step = "docs/writing-a-check.md"
        elif a.what == "new-mode":
            from ddpdoctor.dev.new_mode import new_mode
            paths = new_mode(a.id, a.category)
            step = "docs/writing-a-failure-mode.md"
        else:
            from ddpdoctor.dev.new_command import new_command
            paths = new_command(a.name, checks=not a.no_checks)
            step = "docs/writing-a-command.md"
    except ValueError as e:  # Refused; a marker naming no table; a registration refused while loading checks
        print(f"{a.what}: error: {e}", file=sys.stderr)
        return 2
    for p in paths:
        print(f"wrote {p}")
    print(f"next: fill every TODO in them ({step})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
