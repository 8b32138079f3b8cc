"""A Gloo job that hangs on purpose, then dumps its flight recorder (run under torchrun by the tests).

SCENARIO (env): "skip"  - rank 2 skips collective #4 (an all_reduce) and stays out past the timeout;
                "bcast" - rank 2 calls broadcast where the others call all_reduce;
                "barrier" - rank 2 calls barrier where the others call all_reduce.
Each rank writes <FR_OUT>/fr_rank<rank> with torch._C._distributed_c10d._dump_fr_trace() (needs
TORCH_FR_BUFFER_SIZE > 0), the same bytes torch writes on a timeout with TORCH_FR_DUMP_TEMP_FILE.
"""
import datetime
import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=float(os.environ.get("PG_TIMEOUT", "3"))))
rank = dist.get_rank()
scenario = os.environ["SCENARIO"]
t = torch.ones(16)
for _ in range(3):
    dist.all_reduce(t)
try:
    if rank != 2:
        dist.all_reduce(t)
    elif scenario == "bcast":
        dist.broadcast(torch.ones(8), 0)
    elif scenario == "barrier":
        dist.barrier()
    else:  # skip: rank 2 is busy elsewhere (a rank-dependent branch) while the others wait
        time.sleep(float(os.environ.get("PG_TIMEOUT", "3")) + 2)
except RuntimeError as e:  # the Gloo timeout (or a peer gone): expected
    print(f"rank {rank}: {type(e).__name__}: {str(e)[:120]}", flush=True)
with open(os.path.join(os.environ["FR_OUT"], f"fr_rank{rank}"), "wb") as f:
    f.write(torch._C._distributed_c10d._dump_fr_trace())
if os.environ.get("FR_OUT_JSON"):  # the JSON form of the same dump (torch >= 2.6)
    with open(os.path.join(os.environ["FR_OUT_JSON"], f"fr_rank{rank}.json"), "wb") as f:
        f.write(torch._C._distributed_c10d._dump_fr_trace_json())
