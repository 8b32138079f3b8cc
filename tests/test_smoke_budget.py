"""Smoke's time limits come from one budget (ddpdoctor/smoke/budget.py): the margins keep their order
whatever --timeout is, and no module adds a margin of its own to --timeout (issue 20: six files each
added one: +30, +10, +GRACE_S, min 5, max 60)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

import ddpdoctor
from ddpdoctor.smoke import budget as B
from ddpdoctor.smoke.plan import INIT, START, SmokeConfig

PKG = Path(ddpdoctor.__file__).parent


@pytest.mark.parametrize("timeout", [1.0, 5.0, 30.0, 59.0, 60.0, 600.0, 3600.0])
def test_the_watchdog_names_the_culprit_before_anyone_else_gives_up(timeout):
    b = SmokeConfig(timeout=timeout).budget
    # rank 0's watchdog fires at the phase limit; a rank's own supervisor only after a grace
    assert b.phase < b.phase + b.kill_grace
    # torch's process-group timeout outlasts the watchdog, rank 0's report and the supervisors' grace
    assert b.process_group > b.report_wait > b.phase
    assert b.process_group > b.phase + b.kill_grace
    # a dead rank holds its slot until rank 0's watchdog (at the phase limit) has named it
    assert b.hold_slot > b.phase
    # the watchdog thread's store calls return within the limits it judges
    assert b.monitor_store <= b.phase and b.monitor_store <= B.MONITOR_STORE_MAX_S
    assert b.after_error <= B.AFTER_ERROR_S


def test_start_up_gets_at_least_the_floor_and_later_phases_get_timeout():
    short, long_ = SmokeConfig(timeout=5).budget, SmokeConfig(timeout=120).budget
    assert short.startup == B.STARTUP_FLOOR_S and long_.startup == 120
    assert SmokeConfig(timeout=5).limit_for(START) == B.STARTUP_FLOOR_S
    assert SmokeConfig(timeout=5).limit_for(INIT) == 5


def test_the_budget_is_not_part_of_the_config_ranks_are_sent():
    cfg = SmokeConfig(timeout=7)
    assert "budget" not in cfg.to_json()
    assert SmokeConfig.from_json(cfg.to_json()).budget == cfg.budget  # every rank derives the same one


def _smoke_sources():
    yield from sorted((PKG / "smoke").glob("*.py"))
    yield PKG / "cli" / "smoke.py"


def _margins(src: str, name: str = "<src>") -> list[str]:
    """Places where `.timeout` is an operand of arithmetic or of min()/max()."""
    out = []
    for node in ast.walk(ast.parse(src, name)):
        parts = []
        if isinstance(node, ast.BinOp):
            parts = [node.left, node.right]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("min", "max"):
            parts = list(node.args)
        if any(isinstance(p, ast.Attribute) and p.attr == "timeout" for p in parts):
            out.append(f"{name}:{node.lineno}: {ast.unparse(node)}")
    return out


def test_no_smoke_module_derives_a_limit_from_timeout_but_the_budget():
    """`cfg.timeout` may be read as itself (the report's --timeout), never inside arithmetic or
    min()/max(): a margin written there is one the budget does not name."""
    bad = [m for path in _smoke_sources() if path.name not in ("budget.py", "plan.py")
           for m in _margins(path.read_text(), path.name)]
    assert not bad, bad


def test_the_rule_above_sees_a_margin():
    src = "deadline = time.monotonic() + self.cfg.timeout + 10\nx = min(5.0, cfg.timeout)\ny = cfg.timeout\n"
    assert sorted(m.split(":")[1] for m in _margins(src)) == ["1", "2"]
