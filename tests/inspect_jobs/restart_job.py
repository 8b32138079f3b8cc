"""An elastic job: in generation 0 (TORCHELASTIC_RESTART_COUNT=0) rank 1 exits 3, torchrun restarts every
worker as generation 1 (new pids), where rank 1 calls broadcast while rank 0 calls all_reduce."""
import os
import sys
import time

import torch
import torch.distributed as dist

gen = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
r, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
# each generation's keys under a prefix of its own: the agent's store outlives generation 0, whose Gloo
# addresses generation 1 would otherwise read and fail to connect to
agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world,
                      is_master=(r == 0 and not agent_store))
dist.init_process_group("gloo", store=dist.PrefixStore(f"gen{gen}", store), rank=r, world_size=world)
print(f"ready {r} gen {gen} pid {os.getpid()}", flush=True)
if gen == 0:
    if r == 1:
        sys.exit(3)
    time.sleep(3600)  # the agent stops it to restart the group
t = torch.ones(4)
if r == 1:
    dist.broadcast(t, 0)  # LINE_RESTART_ODD
dist.all_reduce(t)  # LINE_RESTART_WAIT
