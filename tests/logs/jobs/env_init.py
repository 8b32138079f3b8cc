"""init_process_group with env:// (no launcher): MASTER_ADDR/PORT, RANK and WORLD_SIZE come from the
environment as a hand-written launch script sets them (MASTER_ADDR_MALFORMED when they are wrong)."""
import datetime
import os

import torch
import torch.distributed as dist

print(f"MASTER_ADDR={os.environ.get('MASTER_ADDR')!r} MASTER_PORT={os.environ.get('MASTER_PORT')} "
      f"RANK={os.environ.get('RANK')} WORLD_SIZE={os.environ.get('WORLD_SIZE')}", flush=True)
dist.init_process_group("gloo", init_method="env://",
                        timeout=datetime.timedelta(seconds=float(os.environ.get("JOB_PG_TIMEOUT", "15"))))
t = torch.ones(1)
dist.all_reduce(t)
print(f"rank {dist.get_rank()} ok {t.item()}", flush=True)
