"""Facts: the typed, plain data the checks read (probes and reports fill them; checks only judge)."""


class EnvContext:
    """Base of every context that carries the job's environment as `env` (a Mapping[str, str]) and may
    carry `master`/`port`: the checks of the launch variables (DD801-DD804) read only these, so one
    check runs under network, smoke and prolog (registry.check(context=EnvContext))."""
