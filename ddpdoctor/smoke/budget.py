"""Every time limit of a smoke run, derived from one number: `--timeout` (SmokeConfig.timeout).

Each rank, each supervisor and rank 0's watchdog read their limits here, so the margins between
them are named once and their order holds: a rank's own supervisor waits longer than rank 0's
watchdog (which names the culprit), and torch's own process-group timeout waits longer than both
(else torch's error, raised on the *waiting* ranks, would come first and name nobody).

    phase           --timeout: a rank may stay this long in one phase from `init` on
    startup         at least STARTUP_FLOOR_S: `import torch`, the store, the backend, a --preamble
    start_lag       --timeout: once one rank has started, one that has not is late after this
    after_error     once a rank failed, the survivors' limit drops to this (they wait for nobody)
    monitor_store   the watchdog thread's store calls: short, so its heartbeat stays on time
    lost_store      the watchdog thread gives up on a store that failed this long
    kill_grace      beyond a phase's limit, before a rank's own supervisor kills its worker; and
                    (standalone) how long the other ranks get to exit after rank 0's report
    hold_slot       how long a dead non-zero rank's supervisor keeps its launcher slot open
    report_wait     how long a non-zero rank waits for rank 0's report after posting its own
    process_group   init_process_group(timeout=...): outlasts everything above

Every value is a function of `timeout` only, so all ranks compute the same budget from the
config they were sent (ddpdoctor/smoke/plan.py SmokeConfig.to_json).
"""
from __future__ import annotations

import dataclasses

# Importing torch from a cold network filesystem, or waiting for the last rank's launcher to start
# it, can take this long on a healthy cluster; --timeout below it would name a rank that is merely slow.
STARTUP_FLOOR_S = 60.0
# Heartbeats come every 0.25 s (smoke/watchdog.py BEAT_S): after a rank reported an error or died,
# a few seconds without progress means the others wait for a rank that will never arrive.
AFTER_ERROR_S = 3.0
# The watchdog thread's store calls must return well inside the limits it judges, or a frozen store
# host would also freeze the thread that is to report it.
MONITOR_STORE_MAX_S = 5.0
# A rank's own supervisor waits this long past the phase limit before it ends its worker: rank 0's
# watchdog, which sees every rank, fires at the limit and must get to report first.
KILL_GRACE_S = 5.0
# After rank 0's watchdog fires at --timeout it reads every rank's record and publishes its report:
# a non-zero rank waiting for `done` gives it this long beyond --timeout before giving up on rank 0.
REPORT_MARGIN_S = 10.0
# torch's process-group timeout must not fire before our watchdog named the culprit (--timeout),
# rank 0 reported (REPORT_MARGIN_S) and the supervisors acted (KILL_GRACE_S): 30 s covers all three.
PROCESS_GROUP_MARGIN_S = 30.0


@dataclasses.dataclass(frozen=True)
class SmokeBudget:
    """The limits of one smoke run, in seconds (see the module docstring for why each exists)."""

    timeout: float

    @property
    def phase(self) -> float:
        return self.timeout

    @property
    def startup(self) -> float:
        return max(self.timeout, STARTUP_FLOOR_S)

    @property
    def start_lag(self) -> float:
        return self.timeout

    @property
    def after_error(self) -> float:
        return AFTER_ERROR_S

    @property
    def monitor_store(self) -> float:
        return min(MONITOR_STORE_MAX_S, self.timeout)

    @property
    def lost_store(self) -> float:
        return self.timeout

    @property
    def kill_grace(self) -> float:
        return KILL_GRACE_S

    @property
    def hold_slot(self) -> float:
        return self.timeout + KILL_GRACE_S

    @property
    def report_wait(self) -> float:
        return self.timeout + REPORT_MARGIN_S

    @property
    def process_group(self) -> float:
        return self.timeout + PROCESS_GROUP_MARGIN_S
