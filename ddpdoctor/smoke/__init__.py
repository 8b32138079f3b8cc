"""`ddpdoctor smoke`: a small torch.distributed smoke test that names hung ranks.

Layout (torch is imported only by `worker`, which always runs in a child process):

    (the click command lives in ddpdoctor/cli/smoke.py: parse -> run.py -> report.py -> render)
    run.py        one run from this process's side: start the ranks, the --fix re-run, a non-zero rank's exit
    budget.py     every time limit of the run, derived from --timeout, each margin named with its reason
    launch.py     torchrun / srun / mpirun / standalone: what each launcher tells a process
    supervise.py  runs worker processes in their own sessions, reads their progress, kills on timeout
    worker.py     the torch side: store, backend, init, collectives, bandwidth, NVML snapshots
    progress.py   phase progress of every rank and when a run counts as stalled (no torch)
    plan.py       the phases, sizes and dtypes every rank runs, identical on all ranks (no torch)
    bandwidth.py  nccl-tests' algbw/busbw definitions and medians (no torch)
    report.py     the world-wide report: checks DD4xx/DD5xx, the per-rank table
"""
