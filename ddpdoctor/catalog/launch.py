"""Failure modes of launching: ports, torchrun options, the rendezvous, Windows builds."""
from __future__ import annotations

from ddpdoctor.catalog import shared as S
from ddpdoctor.catalog.model import CAUSE, CLUE, CONSEQUENCE, SYMPTOM, FailureMode, Signature, fix

MODES = (
    FailureMode(
        id="MASTER_PORT_IN_USE",
        title="The master port is already taken on the master",
        category="port",
        summary="The rank-0 process (or the torchrun agent that hosts the rendezvous store) cannot bind "
                "MASTER_PORT / the rendezvous port and exits with EADDRINUSE, often on a shared node.",
        cause="Something already listens on that port: another job that uses the same default (29500), a "
              "tool that hard-codes it, or a process left over from a crashed run that still holds the socket.",
        fix=fix("Give every job its own port (`--master-port` / `--rdzv-endpoint host:PORT`, or `torchrun "
                "--standalone` for a single node) and stop stale processes that still hold the port.",
                "ss -ltnp 'sport = :{port}'",
                "torchrun --rdzv-endpoint={master}:$((29500 + RANDOM % 1000)) ..."),
        signatures=(
            Signature(r"server socket has failed to (?:bind|listen)[^\n]*(?:errno: 98|EADDRINUSE|Address already in use)",
                      0.95, trigger="server socket has failed to",
                      example="[W socket.cpp:426] [c10d] The server socket has failed to bind to [::]:29500 "
                              "(errno: 98 - Address already in use)."),
            Signature(r"The server socket has failed to listen on any local network address", 0.85,
                      example="RuntimeError: The server socket has failed to listen on any local network address. "
                              "port: 29500, useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use"),
            Signature(r"(?i)(?:error|fail)[^\n]*address already in use", 0.6, SYMPTOM, trigger=("error", "fail"),
                      example="RuntimeError: Address already in use"),
        ),
        checks=("DD105",),
        confirm="ddpdoctor network --port {port}   (on the master)",
        preflight="On the master, DD105 binds the port and names the process that holds it.",
        related=("NODE_RANK_DUPLICATED", "STORE_BARRIER_WORKER_COUNT_MISMATCH"),
        sources=("pytorch/pytorch#126510", "pytorch/pytorch#72816", "hao-ai-lab/FastVideo#575",
                 "meta-pytorch/torchtune#1025"),
    ),
    FailureMode(
        id="NODE_RANK_DUPLICATED",
        title="Two nodes were launched with the same node rank",
        category="launcher",
        summary="With the static rendezvous (`--master-addr --node-rank`), two nodes claim the same node rank: "
                "both try to be rank 0 (one fails to bind, or each waits for clients that went elsewhere) and the "
                "job never completes its first barrier.",
        cause="Each node computes its global ranks from `--node-rank`; duplicates leave ranks missing and the "
              "store waits for them until it times out. Typical in hand-written launch scripts that hard-code 0.",
        fix=fix("Pass a unique `--node-rank` (0 .. nnodes-1) on every node, e.g. `$SLURM_NODEID`, or use the c10d "
                "rendezvous (`--rdzv-backend=c10d`), which assigns node ranks itself.",
                "torchrun --nnodes=$NNODES --node-rank=$SLURM_NODEID --master-addr={master} --master-port={port} ..."),
        signatures=(
            Signature(S.CLIENTS_JOINED, 0.3, SYMPTOM, example=S.CLIENTS_JOINED_EX),
            Signature(r"(?i)(?:error|fail)[^\n]*address already in use", 0.25, SYMPTOM, trigger=("error", "fail"),
                      example="RuntimeError: Address already in use"),
        ),
        confirm="compare the --node-rank each node was started with (they must be 0 .. nnodes-1, no repeats)",
        preflight="Needs the launch options of every node at once: no check covers it yet (proposed: DD7xx "
                  "'node ranks are unique across the allocation').",
        related=("MASTER_PORT_IN_USE", "RDZV_NODES_MISSING"),
        sources=("pytorch/pytorch#76367", "narumiruna/pytorch-distributed-example#19", "facebookresearch/dora#60"),
    ),
    FailureMode(
        id="RDZV_ENDPOINT_UNREACHABLE",
        title="Workers cannot connect to the rendezvous store",
        category="rendezvous",
        summary="Agents or ranks time out (or are refused) while connecting to the C10d store at "
                "`--rdzv-endpoint` / MASTER_ADDR:MASTER_PORT.",
        cause="No TCP connection reaches the store: the address is wrong or not routable from the workers, the "
              "master's agent has not started or has crashed, or a firewall drops the port.",
        fix=fix("Use an address of the master that every worker can route to, start the master first, and open "
                "the port between the nodes. Run `ddpdoctor network --listen` on the master and "
                "`ddpdoctor network --master <master>` on a worker to test exactly that path.",
                "ddpdoctor network --listen --port {port}    # on the master",
                "ddpdoctor network --master {master} --port {port}    # on each worker"),
        signatures=(
            Signature(S.STORE_CONNECT_TIMEOUT, 0.6, example=S.STORE_CONNECT_TIMEOUT_EX,
                      note="the store at {host}:{port} did not answer"),
            Signature(S.RDZV_CONNECTION_ERROR, 0.55, example=S.RDZV_CONNECTION_ERROR_EX),
            Signature(S.CONNECT_TIMED_OUT, 0.4, SYMPTOM, example=S.CONNECT_TIMED_OUT_EX),
            Signature(r"client socket has failed to connect to \[?(?P<host>[^\]\s]+?)\]?:(?P<port>\d+) "
                      r"\((?:errno: 111|system error: 10061)[^)]*\)", 0.55,
                      trigger="client socket has failed to connect to",
                      example="[W socket.cpp:601] [c10d] The client socket has failed to connect to [node1]:29400 "
                              "(errno: 111 - Connection refused).",
                      note="nothing accepted connections on {host}:{port}"),
            Signature(r"client socket has failed to connect to \[?(?P<host>[^\]\s]+?)\]?:(?P<port>\d+) "
                      r"\(errno: 110 - Connection timed out\)", 0.55, trigger="client socket has failed to connect to",
                      example="[W socket.cpp:601] [c10d] The client socket has failed to connect to [node1]:29400 "
                              "(errno: 110 - Connection timed out).",
                      note="connections to {host}:{port} got no answer (dropped by a firewall, or the host is down)"),
        ),
        checks=("DD102", "DD104", "DD205", "DD101", "DD803", "DD713"),
        confirm="ddpdoctor network --master {master} --port {port}",
        preflight="DD102 connects to the rendezvous port from a worker; DD104 checks the route and DD205 the name.",
        related=("RDZV_HOST_NOT_SELF_RECOGNIZED", "FIREWALL_BLOCKS_PORTS", "K8S_DNS_NOT_READY", "HOSTNAME_UNRESOLVABLE"),
        sources=("pytorch/pytorch#107021", "pytorch/pytorch#69197", "pytorch/pytorch#67547", "pytorch/pytorch#121944"),
    ),
    FailureMode(
        id="RDZV_HOST_NOT_SELF_RECOGNIZED",
        title="No node recognises the rendezvous endpoint as itself, so nobody hosts the store",
        category="rendezvous",
        summary="Every node, including the intended master, times out connecting to the C10d store; no node "
                "logs that it hosts the TCP store.",
        cause="With `--rdzv-backend=c10d` each agent starts the store only if the endpoint's host matches its own "
              "hostname or one of its addresses (torch `_matches_machine_hostname`). A service name, virtual IP, "
              "NAT or load-balancer address matches no node, so every agent becomes a client of a store that "
              "nobody runs.",
        fix=fix("Put the master's own hostname (or an address on one of its interfaces) in `--rdzv-endpoint`, or "
                "start the master's agent with `--rdzv-conf is_host=1` (and `--local-addr`).",
                "torchrun --rdzv-backend=c10d --rdzv-endpoint=$(hostname):{port} ...   # the value as the master "
                "sees itself",
                "torchrun ... --rdzv-conf is_host=1   # on the master only"),
        signatures=(
            Signature(S.STORE_CONNECT_TIMEOUT, 0.3, SYMPTOM, example=S.STORE_CONNECT_TIMEOUT_EX),
            Signature(S.RDZV_CONNECTION_ERROR, 0.3, SYMPTOM, example=S.RDZV_CONNECTION_ERROR_EX),
        ),
        checks=("DD205", "DD203"),
        confirm="python -c \"from torch.distributed.elastic.rendezvous.utils import _matches_machine_hostname as m; "
                "print(m('{master}'))\"   # True on exactly one node",
        preflight="DD203/DD205 check the names resolve; whether exactly one node matches the endpoint needs every "
                  "node's answer (proposed: DD5xx 'exactly one node hosts the rendezvous store').",
        related=("RDZV_ENDPOINT_UNREACHABLE",),
        sources=("pytorch/pytorch#79388", "kubeflow/trainer#1504", "pytorch/pytorch#73656", "pytorch/pytorch#81691"),
    ),
    FailureMode(
        id="RDZV_ID_MISMATCH",
        title="Nodes joined different rendezvous (the --rdzv-id differs)",
        category="rendezvous",
        summary="Every node waits in the rendezvous for peers that never come and ends with "
                "RendezvousTimeoutError; the logs show different run ids per node.",
        cause="When `--rdzv-id` is empty torchrun invents a random run id, and `$RANDOM` or an unset shell "
              "variable gives each node its own value. Nodes sharing one store but not one id never meet.",
        fix=fix("Pass the same non-empty `--rdzv-id` on every node, e.g. the scheduler's job id.",
                "torchrun --rdzv-id=$SLURM_JOB_ID --rdzv-backend=c10d --rdzv-endpoint={master}:{port} ..."),
        signatures=(
            Signature(r"config has no run_id, generated a random run_id: (?P<run_id>\S+)", 0.7,
                      example="config has no run_id, generated a random run_id: 9f2b4d7c-1c1a-4a8b-9c57-3f5d2e1a0b6c",
                      note="torchrun invented run id {run_id}: another node will invent a different one"),
            Signature(S.RDZV_TIMEOUT, 0.25, SYMPTOM, example=S.RDZV_TIMEOUT_EX),
        ),
        confirm="compare --rdzv-id (torchrun prints it as run_id at LOGLEVEL=INFO) on every node",
        preflight="Needs every node's launch command: proposed DD7xx 'the same --rdzv-id on every node'.",
        related=("STANDALONE_WITH_MULTINODE", "RDZV_NODES_MISSING"),
        sources=("ymcui/Chinese-LLaMA-Alpaca-2#274", "pytorch/examples#1254"),
    ),
    FailureMode(
        id="STANDALONE_WITH_MULTINODE",
        title="`torchrun --standalone` used for a multi-node job",
        category="launcher",
        summary="Each node waits for the other nodes and times out (RendezvousTimeoutError), although all of them "
                "were started.",
        cause="`--standalone` makes a private rendezvous on localhost with a random id, meant for one node. With "
              "--nnodes > 1 every node waits alone in its own rendezvous. A launch script that falls back to "
              "`localhost` as endpoint on every node does the same.",
        fix=fix("Drop `--standalone` for multi-node jobs; give all nodes the same `--rdzv-backend=c10d "
                "--rdzv-endpoint=<master>:<port> --rdzv-id=<job id>`.",
                "torchrun --nnodes=2 --rdzv-backend=c10d --rdzv-endpoint={master}:{port} --rdzv-id=$SLURM_JOB_ID ..."),
        signatures=(
            Signature(r"--rdzv-endpoint=(?:localhost|127\.0\.0\.1):0\b", 0.45, CLUE,
                      example="--rdzv-backend=c10d --rdzv-endpoint=localhost:0 --rdzv-id=2f0e3c9e-6c07-4c8e-8d6c-1f2a3b4c5d6e",
                      note="torchrun ran with --standalone (a private rendezvous on this node)"),
            Signature(r"rdzv_endpoint\s*: (?:localhost|127\.0\.0\.1):", 0.3, CLUE,
                      example="  rdzv_endpoint    : localhost:0"),
            Signature(S.RDZV_TIMEOUT, 0.25, SYMPTOM, example=S.RDZV_TIMEOUT_EX),
        ),
        confirm="look for --standalone or a localhost endpoint in each node's torchrun command",
        preflight="A static look at the launch command: proposed DD8xx/DD7xx '--standalone (or a localhost "
                  "endpoint) with nnodes > 1'.",
        related=("RDZV_ID_MISMATCH", "RDZV_NODES_MISSING"),
        sources=("openvla/openvla#175", "mlc-ai/pith-train#91"),
    ),
    FailureMode(
        id="RDZV_NODES_MISSING",
        title="Not every node (or rank) joined in time",
        category="rendezvous",
        kind=CONSEQUENCE,
        origin="ddpdoctor",
        summary="The rendezvous or the store gives up waiting for the others: RendezvousTimeoutError, "
                "`k/n clients joined`, or init_process_group's `wait timeout ... keys: /default_pg/...`.",
        cause="A consequence: some node or rank never started, crashed before joining, joined another "
              "rendezvous (different --rdzv-id, --standalone, another endpoint) or cannot reach the store. The "
              "log of the missing one holds the reason.",
        fix=fix("Find the node that did not join: check that every node started torchrun with the same "
                "--nnodes, --rdzv-endpoint and --rdzv-id, and read the log of the node that is missing."),
        signatures=(
            Signature(S.RDZV_TIMEOUT, 0.5, SYMPTOM, example=S.RDZV_TIMEOUT_EX),
            Signature(S.CLIENTS_JOINED, 0.55, SYMPTOM, example=S.CLIENTS_JOINED_EX,
                      note="only {joined} of {expected} processes reached the store"),
            Signature(r"Error: wait timeout after \d+ms, keys: /default_pg/", 0.45, SYMPTOM,
                      example="torch.distributed.DistStoreError: wait timeout after 10000ms, keys: "
                              "/default_pg/0//cpu//0/1",
                      note="init_process_group waited for a rank that never registered in the store"),
        ),
        checks=("DD102", "DD501"),
        confirm="ddpdoctor network --master {master} --port {port}   (on the node that did not join)",
        preflight="DD102 proves each worker reaches the store; DD501 (smoke) names a rank that never reaches a "
                  "phase. The launch options need comparing across nodes.",
        related=("RDZV_ID_MISMATCH", "STANDALONE_WITH_MULTINODE", "NODE_RANK_DUPLICATED", "K8S_DNS_NOT_READY"),
    ),
    FailureMode(
        id="RDZV_STORE_HOST_EXITED",
        title="The node that hosted the rendezvous store went away",
        category="rendezvous",
        kind=CONSEQUENCE,
        origin="ddpdoctor",
        summary="A worker's agent loses its connection to the store (`Connection was likely closed. Did the remote "
                "server shutdown or crash?`, broken pipe, reset by peer) and shuts down.",
        cause="A consequence seen on workers: the agent on the master (which runs the TCP store) exited, usually "
              "because its own worker failed first. Its log holds the cause; this node's log only shows the "
              "connection closing.",
        fix=fix("Read the master's log (the node in --rdzv-endpoint / MASTER_ADDR): the first error there is the "
                "cause. `ddpdoctor explain --log` on that log names it."),
        signatures=(
            Signature(r"Failed to recv, got 0 bytes\. Connection was likely closed\. Did the remote server shutdown or "
                      r"crash\?", 0.55, SYMPTOM,
                      example="torch.distributed.DistNetworkError: Failed to recv, got 0 bytes. Connection was likely "
                              "closed. Did the remote server shutdown or crash?"),
            Signature(r"has failed to shutdown the rendezvous '(?P<run_id>[^']+)' due to an error of type "
                      r"RendezvousConnectionError", 0.4, SYMPTOM,
                      example="The node 'node2_9220_0' has failed to shutdown the rendezvous 'job-42' due to an "
                              "error of type RendezvousConnectionError."),
            Signature(r"\[c10d\] sendBytes failed on SocketImpl\([^)]*\): Broken pipe", 0.3, SYMPTOM,
                      example="[W1121 05:20:53.048419506 TCPStore.cpp:106] [c10d] sendBytes failed on "
                              "SocketImpl(fd=4, addr=[::ffff:10.0.0.2]:36676, remote=[::ffff:10.0.0.1]:29400): "
                              "Broken pipe"),
        ),
        confirm="ddpdoctor explain --log <the master's log>",
        preflight="Nothing to catch on this node: the cause is on the master. `ddpdoctor smoke` across the nodes "
                  "(DD501) names the rank that fails first.",
        related=("RDZV_ENDPOINT_UNREACHABLE",),
    ),
    FailureMode(
        id="STORE_BARRIER_WORKER_COUNT_MISMATCH",
        title="More (or fewer) processes joined the store than WORLD_SIZE",
        category="launcher",
        summary="init_process_group times out in the store-based barrier and reports a worker_count different "
                "from world_size.",
        cause="Processes were created twice (the script calls mp.spawn while torchrun or `srun -n` also start "
              "one per GPU), a stale file:// init file or another job on the same port added registrations, or "
              "some ranks never started (worker_count < world_size).",
        fix=fix("Use exactly one way to start processes (torchrun or mp.spawn or srun tasks), give every job its "
                "own port or init file, and delete init files left by earlier runs.",
                "rm -f <path of the file:// init_method>"),
        signatures=(
            Signature(r"Timed out initializing process group in store based barrier on rank:? ?(?P<rank>\d+), for key: "
                      r"\S+ \(world_size=(?P<world>\d+), (?:worker_count|num_workers_joined)=(?P<count>\d+)", 0.9,
                      example="RuntimeError: Timed out initializing process group in store based barrier on rank: 2, "
                              "for key: store_based_barrier_key:1 (world_size=2, worker_count=4, timeout=0:30:00)",
                      note="{count} processes registered for a world of {world}"),
            Signature(r"Error: File already exists: \S*", 0.3, SYMPTOM,
                      example="RuntimeError: File already exists: output.tmp/dist_init"),
        ),
        checks=("DD105",),
        confirm="ps -ef | grep -c '[t]rain'   # on each node: processes per node must equal nproc-per-node",
        preflight="DD105 finds another job on the port; nested spawning needs a look at the script (proposed: "
                  "DD5xx 'one process per rank').",
        related=("MASTER_PORT_IN_USE", "SLURM_NTASKS_MISMATCH"),
        sources=("ultralytics/yolov5#4409", "epfml/powersgd#21", "NVIDIA/Megatron-LM#782"),
    ),
    FailureMode(
        id="NPROC_EXCEEDS_GPUS",
        title="More processes per node than GPUs visible",
        category="launcher",
        summary="Ranks with a high local rank fail in `torch.cuda.set_device(local_rank)` with `invalid device "
                "ordinal`.",
        cause="`--nproc-per-node` is larger than the GPUs the processes can see (a README written for 8 GPUs, or "
              "CUDA_VISIBLE_DEVICES / the scheduler gave fewer).",
        fix=fix("Start one process per visible GPU: `--nproc-per-node=gpu` (torchrun counts them) or the real "
                "number; check CUDA_VISIBLE_DEVICES.",
                "python -c 'import torch; print(torch.cuda.device_count())'",
                "torchrun --nproc-per-node=gpu ..."),
        signatures=(
            Signature(S.CUDA_INVALID_ORDINAL, 0.55, example=S.CUDA_INVALID_ORDINAL_EX, trigger="invalid device ordinal"),
            Signature(r"cuda runtime error \(101\)", 0.55,
                      example="RuntimeError: cuda runtime error (101) : invalid device ordinal at "
                              "/pytorch/torch/csrc/cuda/Module.cpp:59"),
            Signature(r"set_device\(\s*(?:args\.|opt\.|self\.)?local_rank\s*\)", 0.2, CLUE,
                      example="    torch.cuda.set_device(args.local_rank)"),
        ),
        checks=("DD403",),
        confirm="torchrun --nproc-per-node=<same N> -m ddpdoctor smoke --quick   (DD403: each rank has a GPU of its own)",
        preflight="DD403 (smoke) checks that every local rank selects a GPU that exists.",
        related=("GLOBAL_RANK_USED_AS_DEVICE",),
        sources=("tatsu-lab/stanford_alpaca#67", "meta-llama/llama#946", "HRNet/HRNet-Semantic-Segmentation#171"),
    ),
    FailureMode(
        id="LOCAL_RANK_ARG_MISMATCH",
        title="The script rejects the --local-rank argument the launcher passes",
        category="launcher",
        summary="Every worker exits at once with `error: unrecognized arguments: --local-rank=0` and torchrun "
                "reports exit code 2.",
        cause="`python -m torch.distributed.launch` passes `--local-rank` (with a hyphen since torch 2.0) to the "
              "script; old scripts declare only `--local_rank`. torchrun passes no argument at all and sets "
              "LOCAL_RANK instead.",
        fix=fix("Read the local rank from the environment (and accept both spellings while old launchers are "
                "around), or switch to torchrun.",
                code="parser.add_argument('--local-rank', '--local_rank', type=int, "
                     "default=int(os.environ.get('LOCAL_RANK', 0)))"),
        signatures=(
            Signature(r"error: unrecognized arguments: .*--local[-_]rank(?:=\d+)?", 0.95,
                      example="main.py: error: unrecognized arguments: --local-rank=0"),
            Signature(S.TORCHRUN_EXIT.replace(r"(?P<code>-?\d+)", "2"), 0.25, SYMPTOM,
                      example="ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 2) local_rank: 0 "
                              "(pid: 4211) of binary: /usr/bin/python3"),
        ),
        confirm="grep -n 'local.rank' <your script>",
        preflight="A look at the script's argparse (proposed: DD5xx lint).",
        sources=("huggingface/pytorch-image-models#1724", "microsoft/LoRA#79", "bigcode-project/starcoder#145"),
    ),
    FailureMode(
        id="LAUNCHER_NOT_ON_PATH",
        title="The launcher or the training environment is missing where the job starts",
        category="launcher",
        summary="`torchrun: not found` / `command not found`, or `No module named 'torch'`, on a remote node or "
                "under sudo, although it works in your shell.",
        cause="The launch context is not your interactive shell: sudo resets PATH, and non-interactive ssh/srun "
              "shells do not activate conda or a virtualenv.",
        fix=fix("Call the environment's interpreter explicitly (`/path/to/env/bin/python -m torch.distributed.run`) "
                "or activate the environment inside the remote command; do not launch under sudo.",
                "srun bash -c 'command -v torchrun; python -c \"import torch; print(torch.__file__)\"'"),
        signatures=(
            Signature(r"\b(?:torchrun|accelerate|deepspeed|python3?|torch\.distributed\.run)\b[^\n]{0,3}: (?:command )?"
                      r"not found", 0.9, trigger="not found",
                      example="/bin/sh: 1: torchrun: not found"),
            Signature(r"command not found: (?:torchrun|accelerate|deepspeed|python3?)\b", 0.9,
                      example="zsh: command not found: torchrun"),
            Signature(r"error: execve\(\): (?:torchrun|accelerate|deepspeed|python3?): No such file or directory", 0.9,
                      example="slurmstepd: error: execve(): torchrun: No such file or directory"),
            Signature(r"Error: No module named '?torch'?$", 0.6,
                      example="ModuleNotFoundError: No module named 'torch'"),
        ),
        confirm="srun bash -c 'command -v torchrun'   (or ssh <node> 'command -v torchrun')",
        preflight="Proposed DD6xx 'torchrun and torch resolve in the launch context'.",
        sources=("hiyouga/LlamaFactory#5217", "hiyouga/LlamaFactory#5216"),
    ),
    FailureMode(
        id="HOST_OOM_SIGKILL",
        title="A worker was killed by the out-of-memory killer",
        category="launcher",
        summary="torchrun reports `exitcode: -9` / `Signal 9 (SIGKILL)` for a worker without a Python traceback.",
        cause="The kernel OOM killer (or a cgroup, Slurm or Kubernetes memory limit) killed the process: "
              "every rank loads a full copy of the model or data set into host memory.",
        fix=fix("Lower host memory per rank (load on rank 0 or on the meta device, mmap checkpoints, fewer "
                "DataLoader workers) or raise the memory limit; the kernel log confirms the kill.",
                "dmesg -T | grep -i -E 'out of memory|oom-kill'",
                "sacct -j <jobid> -o JobID,State,MaxRSS,ReqMem"),
        signatures=(
            Signature(S.TORCHRUN_EXIT.replace(r"(?P<code>-?\d+)", "-9"), 0.85,
                      example="ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 0 "
                              "(pid: 6914) of binary: /usr/bin/python3"),
            Signature(r"exitcode\s+: -9\b", 0.8, example="  exitcode  : -9 (pid: 6914)"),
            Signature(r"Signal 9 \(SIGKILL\) received by PID", 0.8,
                      example="  traceback : Signal 9 (SIGKILL) received by PID 10398"),
            Signature(r"error: Detected \d+ oom[-_]kill events?", 0.95,
                      example="slurmstepd: error: Detected 1 oom_kill event in StepId=42.0. Some of the step tasks "
                              "have been OOM Killed."),
        ),
        confirm="dmesg -T | grep -i -E 'out of memory|oom-kill'",
        preflight="Proposed DD6xx 'host memory vs nproc-per-node x expected RSS and the cgroup limit'.",
        related=("DATALOADER_SHM_BUS_ERROR", "GPU_OUT_OF_MEMORY"),
        sources=("hpcaitech/ColossalAI#3677", "meta-llama/llama#608", "AkariAsai/self-rag#83"),
    ),
    FailureMode(
        id="WINDOWS_NO_NCCL_BACKEND",
        title="NCCL requested on a build without NCCL (Windows, macOS)",
        category="windows",
        summary="init_process_group('nccl') fails with `Distributed package doesn't have NCCL built in`.",
        cause="Windows and macOS wheels of PyTorch ship without NCCL; the script hard-codes backend='nccl'.",
        fix=fix("Use the Gloo backend on Windows/macOS (or run on Linux / WSL2).",
                code="dist.init_process_group('nccl' if dist.is_nccl_available() else 'gloo')"),
        signatures=(
            Signature(r"Error: Distributed package doesn't have NCCL built in", 0.95,
                      example="RuntimeError: Distributed package doesn't have NCCL built in"),
        ),
        checks=("DD507",),
        confirm="python -c 'import torch.distributed as d; print(d.is_nccl_available())'",
        preflight="DD507 (smoke) reports which backend every rank can use.",
        sources=("pytorch/pytorch#116080", "meta-llama/llama3#127", "modelscope/modelscope#334"),
    ),
    FailureMode(
        id="WINDOWS_LIBUV_UNSUPPORTED",
        title="TCPStore asks for libuv on a Windows build without it",
        category="windows",
        summary="Any torchrun / env:// rendezvous on Windows fails with `use_libuv was requested but PyTorch was "
                "build without libuv support` (torch 2.4 and later).",
        cause="Since torch 2.4 the TCPStore uses the libuv backend by default, but Windows wheels are built "
              "without libuv.",
        fix=fix("Set USE_LIBUV=0 before launching (or pass use_libuv=False / `?use_libuv=0` in the init URL), or run "
                "under WSL2.", "set USE_LIBUV=0", env={"USE_LIBUV": "0"}),
        signatures=(
            Signature(r"Error: use_libuv was requested but PyTorch was buil[dt] without libuv support", 0.95,
                      example="RuntimeError: use_libuv was requested but PyTorch was build without libuv support"),
        ),
        confirm="echo %USE_LIBUV%   (must print 0 on Windows with torch >= 2.4)",
        preflight="Proposed DD8xx 'Windows + torch >= 2.4 without USE_LIBUV=0'.",
        sources=("pytorch/pytorch#139990", "pytorch/pytorch#148283", "hiyouga/LlamaFactory#7124"),
    ),
)
