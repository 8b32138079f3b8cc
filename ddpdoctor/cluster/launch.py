"""Where this process sits in a `cluster` run, from srun's or torchrun's variables."""
from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Mapping

from ddpdoctor.validate import BadInput


@dataclass(frozen=True)
class Launch:
    mode: str                 # "srun" or "torchrun"
    index: int                # this node's position (0 = the first node, which gathers)
    world: int                # number of nodes
    node: str                 # this node's name as the job names it (Slurm node name, else hostname)
    names: tuple[str, ...]    # every node's name by index when the launcher says (srun); else ()
    store_host: str
    store_port: int
    host_store: bool          # this process creates the TCPStore (else a client)
    run_id: str               # keys are prefixed with it: several runs may share a store
    representative: bool = True  # False: another task on this node speaks for it (exit at once)


def detect_launch(env: Mapping[str, str], *, store_port: int, hostname: str | None = None) -> Launch:
    """Where this process sits in the run, from srun's or torchrun's variables."""
    from ddpdoctor.launch import srun_step

    host = hostname or socket.gethostname()
    st = srun_step(env, host)
    if st is not None:
        return Launch("srun", st.index, len(st.names), st.node, st.names, st.names[0], store_port, st.index == 0,
                      st.run_id, representative=st.representative)
    if "TORCHELASTIC_RUN_ID" in env or ("GROUP_RANK" in env and "MASTER_ADDR" in env):
        try:
            group = int(env.get("GROUP_RANK", "0"))
            local = int(env.get("LOCAL_RANK", "0"))
            world = int(env.get("GROUP_WORLD_SIZE") or 0) or int(env["WORLD_SIZE"]) // max(1, int(env.get("LOCAL_WORLD_SIZE", "1")))
            master = env["MASTER_ADDR"]
            mport = int(env["MASTER_PORT"])
        except (KeyError, ValueError) as e:
            raise BadInput(f"torchrun's variables are incomplete or malformed ({e}); run one process per node") from None
        agent_store = env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
        run = f"{env.get('TORCHELASTIC_RUN_ID', 'run')}.{env.get('TORCHELASTIC_RESTART_COUNT', '0')}"
        return Launch("torchrun", group, world, host, (), master, mport, group == 0 and not agent_store,
                      run, representative=local == 0)
    if env.get("SLURM_JOB_NODELIST"):
        raise BadInput("this is the job script, not a step on every node: run "
                       "`srun --ntasks-per-node=1 ddpdoctor cluster` inside it")
    raise BadInput("run it on every node at once: `srun -N <nodes> --ntasks-per-node=1 ddpdoctor cluster`, "
                   "or under torchrun with --nproc-per-node=1")
