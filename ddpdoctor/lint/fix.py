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


def _drop_arg(cst, call, name: str):
    """The call without keyword `name`; a comment on the dropped argument's line moves to the line before."""
    idx = [i for i, a in enumerate(call.args) if a.keyword and a.keyword.value == name]
    if not idx:
        return call
    i = idx[0]
    gone = call.args[i]
    args = list(call.args[:i]) + list(call.args[i + 1:])
    if args and i == len(call.args) - 1:  # the new last argument keeps the closing layout of the one removed
        args[-1] = args[-1].with_changes(comma=gone.comma)
    elif i > 0 and isinstance(gone.comma, cst.Comma) and isinstance(args[i - 1].comma, cst.Comma) \
            and _has_comment(cst, gone.comma.whitespace_after):
        args[i - 1] = args[i - 1].with_changes(
            comma=args[i - 1].comma.with_changes(whitespace_after=gone.comma.whitespace_after))
    return call.with_changes(args=args)


def _has_comment(cst, ws) -> bool:
    return isinstance(ws, cst.ParenthesizedWhitespace) and ws.first_line.comment is not None


def _kw(cst, name: str, value: str):
    return cst.Arg(keyword=cst.Name(name), value=cst.parse_expression(value),
                   equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                         whitespace_after=cst.SimpleWhitespace("")))


def _fix_local_rank(cst, call):
    """add_argument("--local_rank", type=int, default=0) ->
    add_argument("--local-rank", "--local_rank", type=int, default=int(os.environ.get("LOCAL_RANK", 0))):
    torch >= 2.0's launch spelling, and torchrun's variable as the default (the old default is the fallback)."""
    names = [a.value.evaluated_value for a in call.args
             if a.keyword is None and isinstance(a.value, cst.SimpleString)]
    args = list(call.args)
    if "--local-rank" not in names:
        for i, a in enumerate(args):
            if a.keyword is None and isinstance(a.value, cst.SimpleString) and a.value.evaluated_value == "--local_rank":
                q = a.value.value[0]
                args.insert(i, cst.Arg(cst.SimpleString(f"{q}--local-rank{q}"),
                                       comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))))
                break
    call = call.with_changes(args=args)
    call = _drop_arg(cst, call, "required")  # a default is what torchrun needs; required=True ignores it
    old = next((a for a in call.args if a.keyword and a.keyword.value == "default"), None)
    fallback = "0"
    if old is not None:
        code = cst.Module([]).code_for_node(old.value)
        if "LOCAL_RANK" in code:
            return call
        if code not in ("None",):
            fallback = code
    value = f'int(os.environ.get("LOCAL_RANK", {fallback}))'
    if old is not None:
        return call.with_changes(args=[a.with_changes(value=cst.parse_expression(value)) if a is old else a
                                       for a in call.args])
    args = list(call.args)
    kw = _kw(cst, "default", value)
    last = args[-1]
    kw = kw.with_changes(comma=last.comma)
    args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    return call.with_changes(args=[*args, kw])


def _fix_call(cst, rule: str, call):
    if rule == "DL006":  # drop shuffle=True; the sampler shuffles
        return _drop_arg(cst, call, "shuffle")
    if rule == "DL009":
        return _fix_local_rank(cst, call)
    if rule == "DL002":  # torch.load(p) -> torch.load(p, map_location="cpu")
        if any(a.keyword and a.keyword.value == "map_location" for a in call.args):
            return call
        args = list(call.args)
        kw = _kw(cst, "map_location", '"cpu"')
        if args:
            last = args[-1]
            kw = kw.with_changes(comma=last.comma)
            args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        return call.with_changes(args=[*args, kw])
    return call
