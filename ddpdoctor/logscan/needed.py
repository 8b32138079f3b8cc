"""What a line's triggers narrow down to before any regex runs (matcher.py's `_rules_for`): per trigger of a gate,
each rule with the literals its pattern needs (linear.needs), checked with `bytes in`, or for a trigger many
patterns share (`error`: 40) with one Aho-Corasick pass over the line (ahocorasick_rs, as gatefind.py). Split from
matcher.py (module size)."""
from __future__ import annotations

from typing import Any, Protocol

from ddpdoctor.logscan.gatefind import _automaton
from ddpdoctor.logscan.linear import TRUE, needs


class Matcher(Protocol):
    """What a Row reads of matcher.Matcher (a structural type: matcher.py imports this module, not the reverse)."""
    _multi: bool


class Rule(Protocol):
    """What a Row reads of matcher.Rule: its compiled pattern (`.regex.py`, the re/re2 pattern's Python twin)."""
    regex: Any


class Row:
    """One trigger of a gate and its rules, each with what else its pattern needs (linear.needs; the trigger itself
    is known present), None when nothing more is known; built once matcher.BUILD_AFTER lines held the trigger."""
    __slots__ = ("matcher", "trigger", "rules", "checks", "many", "seen")

    def __init__(self, matcher: Matcher, trigger: bytes, rules: list[Rule]):
        self.matcher, self.trigger, self.rules = matcher, trigger, rules
        self.checks = self.many = None
        self.seen = 0

    def build(self):
        checks = []   # one (need, [rule]) per rule, in the rules' order: the order the line's matches come in
        for rule in self.rules:
            need = needs(rule.regex.py, (self.trigger.decode(),))
            checks.append((None if need == TRUE else tuple(tuple(x.encode() for x in t) for t in need), [rule]))
        self.many = literal_sets(checks) if self.matcher._multi else None
        self.checks = checks
        return checks, self.many


def probe(low: bytes, start: int, end: int, segment: bytes) -> bytes:
    """The lowercased line as the patterns see it (_search_line: NUL bytes dropped, then Markdown's `**`)."""
    if b"\x00" not in segment:
        return segment
    return low[start:end].replace(b"\x00", b"").replace(b"**", b"")


def literal_sets(checks) -> tuple | None:
    """For a trigger many patterns share (`error`): an automaton of all their needed literals (ahocorasick_rs, an
    overlapping search: it reports every literal the line holds) and each need as literal ids; None for a few."""
    if sum(need is not None for need, _ in checks) < 4:
        return None
    lits = list(dict.fromkeys(x for need, _ in checks if need is not None for t in need for x in t))
    auto = _automaton(lits)
    if auto is None:
        return None
    index = {x: i for i, x in enumerate(lits)}
    # literal id -> the needs with a term that starts with it (no term holds without its first); each need's terms
    starts: dict[int, set[int]] = {}
    terms: dict[int, tuple] = {}
    for k, (need, _) in enumerate(checks):
        if need is not None:
            terms[k] = tuple(frozenset(index[x] for x in t) for t in need)
            for t in need:
                starts.setdefault(index[t[0]], set()).add(k)
    always = [r for need, rules in checks if need is None for r in rules]
    needful = [r for need, rules in checks if need is not None for r in rules]
    return auto[1], starts, terms, always, needful


def all_of_one(terms, present: set) -> bool:
    for term in terms:
        if term <= present:
            return True
    return False


def holds(need, probe) -> bool:
    """Whether `probe` holds every literal of one of `need`'s terms (linear.needs)."""
    for term in need:
        for lit in term:
            if lit not in probe:
                break
        else:
            return True
    return False
