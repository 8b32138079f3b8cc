"""`ddpdoctor lint --fix`: write the safe fixes back with LibCST.

LibCST keeps the concrete syntax tree (whitespace, comments, quotes), so a fix changes only the
call it is about; Python's `ast` would lose the formatting on the way back (docs/lint.md).
Each fix edits the call the finding points at (line and column from `ast`, matched against
LibCST's PositionProvider); a file that changed on disk since it was linted is left alone.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from ddpdoctor.lint.registry import LintFinding

FIXERS = {"DL002", "DL006", "DL009"}


def apply(findings: list[LintFinding], *, unsafe: bool = False) -> dict[str, list[LintFinding]]:
    """Apply fixes; returns {file: findings fixed}. Notebooks are never rewritten."""
    import libcst as cst
    from libcst.metadata import MetadataWrapper, PositionProvider

    todo = defaultdict(list)
    for f in findings:
        if f.rule in FIXERS and (f.fix_kind == "safe" or (unsafe and f.fix_kind == "unsafe")) \
                and f.file.endswith(".py"):
            todo[f.file].append(f)
    done: dict[str, list[LintFinding]] = {}
    for file, fs in todo.items():
        path = Path(file)
        try:
            text = path.read_text(encoding="utf-8")
            wrapper = MetadataWrapper(cst.parse_module(text))
        except (OSError, UnicodeDecodeError, cst.ParserSyntaxError):
            continue
        want = {(f.line, f.col - 1): f for f in fs}
        applied: list[LintFinding] = []

        class Fixer(cst.CSTTransformer):
            METADATA_DEPENDENCIES = (PositionProvider,)

            def leave_Call(self, original, updated):
                pos = self.get_metadata(PositionProvider, original).start
                f = want.get((pos.line, pos.column))
                if f is None:
                    return updated
                new = _fix_call(cst, f.rule, updated)
                if new is not updated:
                    applied.append(f)
                return new

        new_mod = wrapper.visit(Fixer())
        if applied and new_mod.code != text:
            path.write_text(new_mod.code, encoding="utf-8")
            done[file] = applied
    return done


def _fix_call(cst, rule: str, call):
    if rule == "DL006":  # drop shuffle=True; the sampler shuffles
        args = [a for a in call.args if not (a.keyword and a.keyword.value == "shuffle")]
        if len(args) == len(call.args):
            return call
        if args:  # the new last argument keeps the closing layout of the one removed
            last = call.args[-1]
            args[-1] = args[-1].with_changes(comma=last.comma if args[-1] is not call.args[-1] else args[-1].comma)
        return call.with_changes(args=args)
    if rule == "DL009":  # "--local_rank" -> "--local-rank", "--local_rank"
        for i, a in enumerate(call.args):
            if a.keyword is None and isinstance(a.value, cst.SimpleString) and a.value.evaluated_value == "--local_rank":
                q = a.value.value[0]
                new = cst.Arg(cst.SimpleString(f"{q}--local-rank{q}"),
                              comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
                return call.with_changes(args=[*call.args[:i], new, *call.args[i:]])
        return call
    if rule == "DL002":  # torch.load(p) -> torch.load(p, map_location="cpu")
        if any(a.keyword and a.keyword.value == "map_location" for a in call.args):
            return call
        args = list(call.args)
        kw = cst.Arg(keyword=cst.Name("map_location"), value=cst.SimpleString('"cpu"'),
                     equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                           whitespace_after=cst.SimpleWhitespace("")))
        if args:
            last = args[-1]
            kw = kw.with_changes(comma=last.comma)
            args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        return call.with_changes(args=[*args, kw])
    return call
