"""The context the `inspect` checks read: the job's facts as sampled from outside (/proc, py-spy, NVML)."""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class InspectContext:
    facts: object  # ddpdoctor.inspect.sample.InspectFacts (facts import no feature package)
