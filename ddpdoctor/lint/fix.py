"""`ddpdoctor lint --fix`: write the safe fixes back with LibCST.

LibCST keeps the concrete syntax tree (whitespace, comments, quotes), so a fix changes only the
call it is about; Python's `ast` would lose the formatting on the way back (docs/lint.md).
Each fix edits the call the finding points at (line and column from `ast`, matched against
LibCST's PositionProvider); a file that changed on disk since it was linted is left alone (its
findings are stale: their positions point into another text), and so is a file reached through a
symbolic link or lying outside the trees given on the command line (a link in a tree must not let
`--fix` rewrite /etc or another user's file).
"""
from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

from ddpdoctor.lint.registry import LintFinding

FIXERS = {"DL002", "DL006", "DL009"}


# mtimes come from the kernel's coarse clock (one tick, up to 10 ms, behind time.time_ns): a file
# written in the last ticks before the lint started counts as changed during it (a rerun fixes it)
_CLOCK_SLACK_NS = 50_000_000


def _inside(real: str, roots: list[str]) -> bool:
    return any(real == r or real.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


def _refusal(file: str, roots: list[str] | None, linted_since_ns: int | None) -> str:
    """Why `file` must not be rewritten ('' when it may)."""
    try:
        st = os.lstat(file)
    except OSError as e:
        return f"cannot read: {e.strerror or e}"
    if os.path.islink(file):
        return "not fixed: a symbolic link (fix the file it points to directly)"
    if roots is not None:  # a file given names its directory: lint follows its local imports there
        real_roots = [os.path.realpath(r if os.path.isdir(r) else os.path.dirname(os.path.abspath(r))) for r in roots]
        if not _inside(os.path.realpath(file), real_roots):
            return "not fixed: reached through a symbolic link, outside the paths given"
    if linted_since_ns is not None and st.st_mtime_ns >= linted_since_ns - _CLOCK_SLACK_NS:
        return "not fixed: the file changed while it was linted (rerun lint --fix)"
    return ""


def _write_in_place(file: str, text: str) -> None:
    # O_NOFOLLOW: a symlink swapped in after the checks above is refused, not written through
    fd = os.open(file, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)


def apply(findings: list[LintFinding], *, unsafe: bool = False, roots: list[str] | None = None,
          linted_since_ns: int | None = None, skipped: list | None = None) -> dict[str, list[LintFinding]]:
    """Apply fixes; returns {file: findings fixed}. Notebooks are never rewritten.

    `roots`: the paths given to lint (files outside them are not written); `linted_since_ns`:
    time.time_ns() before the lint read the files (a file modified since keeps its text);
    `skipped` collects (file, reason) for each file left alone."""
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
        why = _refusal(file, roots, linted_since_ns)
        if why:
            if skipped is not None:
                skipped.append((file, why))
            continue
        try:
            text = path.read_text(encoding="utf-8")
            wrapper = MetadataWrapper(cst.parse_module(text))
        except (OSError, UnicodeDecodeError, cst.ParserSyntaxError, RecursionError, MemoryError):
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

        try:
            new_mod = wrapper.visit(Fixer())
        except RecursionError:
            continue
        if applied and new_mod.code != text:
            why = _refusal(file, roots, linted_since_ns)  # again: it may have changed while LibCST worked
            try:
                if not why:
                    _write_in_place(file, new_mod.code)
            except OSError as e:  # read-only, a full disk: this file stays as it was, the others go on
                why = f"cannot write: {e.strerror or e}"
            if why:
                if skipped is not None:
                    skipped.append((file, why))
                continue
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
