"""Facts: the typed, plain data the checks read (probes and reports fill them; checks only judge)."""
