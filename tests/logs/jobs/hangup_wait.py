"""A healthy job that trains until its launcher goes away (LAUNCHER_HANGUP_SIGHUP): each rank joins the
group, prints a step, and rank 0 touches JOB_READY_FILE so the capture knows when to hang the launcher up
(the SIGHUP a closing terminal or SSH session sends); nothing in the job fails."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import init  # noqa: E402

rank, world = init()
print(f"rank {rank}/{world} step 0 loss 2.31", flush=True)
if rank == 0 and os.environ.get("JOB_READY_FILE"):
    open(os.environ["JOB_READY_FILE"], "w").close()
time.sleep(float(os.environ.get("JOB_TRAIN_S", "60")))
