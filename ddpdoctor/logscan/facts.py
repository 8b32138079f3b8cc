"""Log lines that are not failures but tell the ranker about the job: its rendezvous, run ids, node
ranks, NCCL versions, torchrun's failure summary, the first exception.

Same shape as catalog signatures (pattern + trigger, the trigger containing a gate word of
ddpdoctor.catalog.model.GATES), keyed by a fact name instead of a failure id.
"""
from __future__ import annotations

from dataclasses import dataclass

from ddpdoctor.catalog.model import required_literal


@dataclass(frozen=True)
class Fact:
    name: str
    pattern: str
    trigger: str | tuple[str, ...] = ""
    example: str = ""
    # lines after the match a person reads with it (a crash handler's backtrace under its signal line): given to
    # the rules as the value "after" (matcher.py _following)
    follow: int = 0

    def __post_init__(self):
        if not self.trigger:
            object.__setattr__(self, "trigger", required_literal(self.pattern))

    @property
    def triggers(self) -> tuple[str, ...]:
        return (self.trigger,) if isinstance(self.trigger, str) else tuple(self.trigger)


FACTS = (
    # torchrun's launch configuration (LOGLEVEL=INFO) and its --standalone banner.
    Fact("rdzv_endpoint", r"rdzv_endpoint\s*: (?P<host>[^\s:]+):(?P<port>\d+)", example="  rdzv_endpoint    : node1:29400"),
    Fact("rdzv_endpoint", r"--rdzv[-_]endpoint[= ](?P<host>[^\s:]+):(?P<port>\d+)", trigger="rdzv",
         example="--rdzv-backend=c10d --rdzv-endpoint=node1:29400 --rdzv-id=42"),
    Fact("run_id", r"\brun_id\s*: (?P<id>\S+)", trigger="run_id", example="  run_id           : 9f2b4d7c"),
    Fact("run_id", r"generated a random run_id: (?P<id>\S+)", example="generated a random run_id: 1b2c"),
    Fact("run_id", r"failed to [^']*the rendezvous '(?P<id>[^']+)'",
         example="The node 'node2_9220_0' has failed to shutdown the rendezvous 'job-42' due to an error"),
    Fact("store_hosted", r"hosts the TCP store for the C10d rendezvous backend",
         example="Process 1234 hosts the TCP store for the C10d rendezvous backend."),
    # The master as the job knows it: MASTER_ADDR printed by the script, torchrun's rendezvous result
    # (LOGLEVEL=INFO), its command line, or the address of the store a TCPStore socket talks to.
    Fact("master", r"\bMASTER_ADDR=(?P<host>[\w.-]+)", example="MASTER_ADDR=node1 MASTER_PORT=29500"),
    Fact("master_port", r"\bMASTER_PORT=(?P<port>\d+)", trigger="master", example="MASTER_ADDR=node1 MASTER_PORT=29500"),
    Fact("master", r"\bmaster_addr=(?P<host>[\w.-]+)", example="  master_addr=node1"),
    Fact("master_port", r"\bmaster_port=(?P<port>\d+)", example="  master_port=29500"),
    Fact("master", r"--master[-_]addr[= ](?P<host>[\w.-]+)", trigger="master",
         example="torchrun --master-addr=node1 --master-port=29500 train.py"),
    Fact("store_addr", r"SocketImpl\(fd=\d+, addr=[^,]*, remote=\[(?:::ffff:)?(?P<host>[^\]]+)\]:(?P<port>\d+)\)",
         example="[c10d] sendBytes failed on SocketImpl(fd=4, addr=[::ffff:10.0.0.2]:36676, "
                 "remote=[::ffff:10.0.0.1]:29400): Broken pipe"),
    # Static rendezvous (LOGLEVEL=INFO): every agent prints its node rank once the rendezvous completes.
    Fact("group_rank", r"\bgroup_rank=(?P<rank>\d+)", example="  group_rank=0"),
    # ... and its launch configuration the rank it was given (`--node-rank`).
    Fact("group_rank", r"rdzv_configs\s*: \{'rank': (?P<rank>\d+)", example="  rdzv_configs : {'rank': 0, 'timeout': 900}"),
    # NCCL announces its version at init (NCCL_DEBUG=INFO) and in every error message.
    # Its init line also names the CUDA it was built for (init.cc: "NCCL version %s" with NCCL_VERSION_STRING
    # "2.18.1+cuda12.1"); error messages print the bare version.
    Fact("nccl_version", r"NCCL version (?P<v>\d+\.\d+\.\d+)(?:\S*?\+cuda(?P<cuda>\d+\.\d+))?",
         example="node1:1:1 [0] NCCL INFO NCCL version 2.18.1+cuda12.1"),
    # ... and the CUDA version the driver supports (init.cc ncclInitEnv/initTransportsRank: "cudaDriverVersion %d",
    # cuDriverGetVersion: 1000 * major + 10 * minor; NCCL >= 2.12).
    Fact("cuda_driver_version", r"NCCL INFO cudaDriverVersion (?P<v>\d{4,6})", trigger="cudadriverversion",
         example="node1:1354:1354 [0] NCCL INFO cudaDriverVersion 11080"),
    # NCCL's echo of each NCCL_* variable it reads (NCCL_DEBUG=INFO, subsystem ENV): src/misc/param.cc ncclLoadParam
    # "%s set by environment to %lld." (v2.18+; "%s set by environment to %lu." in include/param.h before), and the
    # string settings' own INFO lines ("NCCL_SOCKET_IFNAME set by environment to %s", misc/socket.cc; NCCL_PROTO,
    # NCCL_ALGO in graph/tuning.cc). Compared across hosts by rules.py (NCCL_ENV_MISMATCH_ACROSS_NODES).
    Fact("nccl_env", r"\b(?P<var>NCCL_[A-Z0-9_]+) set by environment to (?P<val>[^\s]+)", trigger="set by environment to",
         example="node1:1234:1234 [0] NCCL INFO NCCL_BUFFSIZE set by environment to 8388608."),
    # torchrun's summary of a failed job (torch/distributed/elastic/multiprocessing/errors).
    Fact("root_cause", r"Root Cause \(first observed failure\)", example="Root Cause (first observed failure):"),
    Fact("summary_host", r"^\s*host\s{2,}: (?P<host>\S+)", trigger="      : ", example="  host      : node1"),
    Fact("summary_rank", r"^\s*rank\s{2,}: (?P<rank>\d+) \(local_rank: (?P<local_rank>\d+)\)", trigger="      : ",
         example="  rank      : 0 (local_rank: 0)"),
    Fact("summary_exit", r"^\s*exitcode\s{2,}: (?P<code>-?\d+)", example="  exitcode  : 1 (pid: 9240)"),
    Fact("torchrun_failed", r"failed \(exitcode: (?P<code>-?\d+)\)(?: for binary located at \S+ with)? local_rank: (?P<local_rank>\d+)",
         example="E1121 api.py:1002] failed (exitcode: 1) local_rank: 0 (pid: 9240) of binary: /usr/bin/python"),
    # Pasted tool output. nvidia-smi's process table (with or without the MIG GI/CI columns): which pid
    # holds memory on which GPU; one pid on several GPUs is a process touching a GPU not its own.
    Fact("gpu_process", r"^\|\s+(?P<gpu>\d+)(?:\s+(?:N/A|\d+)\s+(?:N/A|\d+))?\s+(?P<pid>\d+)\s+[CG](?:\+G)?\s+"
         r"(?P<name>\S+)\s+(?P<mem>\d+)\s?MiB\s*\|", trigger="mib |",
         example="|    0   N/A  N/A     12345      C   /usr/bin/python                  1234MiB |"),
    # Platform markers (they shift odds, never decide alone): Kubernetes - kubectl in a paste, service DNS
    # names (.svc, .svc.cluster.local), Kubeflow PyTorchJob pod names <job>-master-N (rides the 'master' gate).
    # (`(?<=[a-z0-9])-master-` and not `\b[a-z0-9][a-z0-9-]*-master-`: that one rescanned the name from
    # every position of a long run of "a-a-a-...", quadratic in the line: tests/test_hostile_regex.py)
    Fact("kubernetes", r"\bkubectl\s|\.svc(?:\.cluster\.local)?\b|(?<=[a-z0-9])-master-\d+\b",
         trigger=("kubectl", ".svc", "master"), example="$ kubectl logs optimizer-worker-0"),
    # Context for the differential of generic symptoms (differential.py). A frame of torch's own code in a
    # traceback names the call site of the error: communicator creation (init_process_group, barrier, the
    # DDP constructor's parameter checks), a collective, torch.load, a module moved with .cuda()/.to().
    Fact("call_site", r'(?P<ddp>parallel[/\\]distributed)\.py", line \d+, in __init__\s*$|\.py", line \d+, in '
         r"(?P<func>init_process_group|_new_process_group_helper|barrier|_store_based_barrier|all_reduce|broadcast|"
         r"all_gather\w*|reduce_scatter\w*|_verify_param_shape_across_processes|_sync_module_states|"
         r"_sync_params_and_buffers|load|cuda|_apply|to|set_device|_lazy_init|new_group|empty_cache)\s*$",
         trigger='.py", line ',
         example='  File "/opt/conda/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py", line 3696, '
                 'in barrier'),
    # NCCL INFO at communicator creation: which CUDA device (and PCI bus) each rank of each host uses.
    Fact("nccl_dev", r"(?i:\brank) (?P<rank>\d+) (?i:nranks) (?P<n>\d+) cudaDev (?P<dev>\d+)(?:.*?\bbusId (?P<bus>\w+))?",
         trigger="cudadev",
         example="node1:301:301 [0] NCCL INFO comm 0x5e0 rank 1 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE"),
    # The network NCCL uses between nodes (NCCL_DEBUG=INFO): InfiniBand/RoCE or plain sockets.
    Fact("nccl_net", r"\bNET/(?P<net>IB|Socket)\b[^:]*: Using", trigger=" : using ",
         example="node1:301:301 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.1<0>"),
    # torch's warning when a rank reaches barrier() without torch.cuda.set_device: the GPU it guessed.
    Fact("barrier_gpu", r"Rank (?P<rank>\d+)\]\s+using GPU (?P<gpu>\d+) to perform barrier", trigger="barrier",
         example="[rank1]:[W ProcessGroupNCCL.cpp:4115] [PG 0 Rank 1]  using GPU 0 to perform barrier as devices used "
                 "by this process are currently unknown."),
    # The size of /dev/shm as `df -h` prints it (containers get 64M by default).
    Fact("shm_size", r"\s(?P<size>\d+(?:\.\d+)?[KMGT])i?B?\s+\S+\s+\S+\s+\d+%\s+/dev/shm\b", trigger="/dev/shm",
         example="shm                 64M     0   64M   0% /dev/shm"),
    # The GPUs the job was given (a launch line or a printed environment).
    # On a launch line it may be followed by the launcher's processes per node (torchrun / torch.distributed.launch
    # `--nproc_per_node` / `--nproc-per-node`, run.py): more processes than the GPUs it names is the mistake itself.
    Fact("cuda_visible", r"CUDA_VISIBLE_DEVICES\s*[=:]\s*['\"]?(?P<devs>\d+(?:,\d+)*)"
         r"(?:.*?--nproc[-_]per[-_]node[= ](?P<nproc>\d+))?", trigger="cuda_visible_devices",
         example="CUDA_VISIBLE_DEVICES=0,1 torchrun --nproc-per-node=4 train.py"),
    # NCCL's socket connect to a peer failing (socketStartConnect / socketPollConnect, NCCL >= 2.19 and older).
    # Wordings (NVIDIA/nccl src/misc/socket.cc, src/os/linux.cc): "Connect to %s failed : %s" (2.4 - 2.26, after
    # "Net : ", "socketStartConnect: " or "%s: "), "socketPollConnect to %s failed with error %s" (2.27 - 2.28),
    # "ncclOsSocketPollConnect to %s failed with error %s" (2.29+).
    Fact("nccl_connect", r"Connect to (?P<addr>[\w.:\[\]%-]+)<(?P<port>\d+)> failed(?:\s*:\s*| with error )?(?P<why>[^\n]+)?",
         trigger="> failed",
         example="misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 10.0.0.2<45678> failed : "
                 "Software caused connection abort"),
    # A bare connection failure (Python's socket, c10d, Gloo, NCCL): refused or reset, and the address if it says.
    Fact("conn_error", r"(?i)\bconnection (?P<kind>refused|reset by peer)\b(?:[^\n]*?(?P<host>\b\d+\.\d+\.\d+\.\d+\b|"
         r"\blocalhost\b))?", trigger=("refused", "reset by peer"),
         example="ConnectionRefusedError: [Errno 111] Connection refused"),
    # c10d's error once every address of the store's name failed (socket.cpp SocketConnectOp, torch 1.12 - 2.13): the
    # single-address warnings before it (`failed to connect to [name]:port`) were not followed by a success
    Fact("connect_failed", r"failed to connect to any network address of \((?P<host>[^,()]+), (?P<port>\d+)\)",
         trigger="failed to connect to any network address",
         example="[E socket.cpp:610] [c10d] The client socket has failed to connect to any network address of "
                 "(192.168.1.99, 1234)."),
    # torchrun's failure summary when the worker wrote no error file (elastic/multiprocessing/errors/__init__.py
    # ProcessFailure: error_file `<N/A>`, and for an exit code >= 0 the message "To enable traceback see: ..."; torch
    # 1.9 .. 2.13): the worker's own traceback is only in its stderr (logscan/endings.py).
    Fact("error_file", r"^\s*error_file\s*: (?P<file>\S+)", trigger="error_file", example="  error_file: <N/A>"),
    # NCCL's CUDA checks, the CUDA error behind ncclUnhandledCudaError (`unhandled cuda error`): src/include/checks.h
    # CUDACHECK / CUDACHECKGOTO WARN("Cuda failure '%s'", cudaGetErrorString(err)) (v2.4 .. v2.30) and cudawrap.h
    # CUCHECK WARN("Cuda failure %d '%s'", err, errStr) (v2.18 .. v2.30); read by logscan/endings.py.
    Fact("nccl_cuda_failure", r"Cuda failure (?:(?P<code>\d+) )?'(?P<what>[^'\n]{1,120})'", trigger="cuda failure",
         example="transport.cc:154 NCCL WARN Cuda failure 'invalid argument'"),
    # ncclInvalidArgument as torch's C10D_NCCL_CHECK prints it ("NCCL error in: <file>:<line>, <ncclGetErrorString>",
    # "invalid argument" in NCCL v2.4 .. v2.18, "invalid argument (run with NCCL_DEBUG=WARN for details)" in later
    # releases: src/init.cc ncclGetErrorString) or torch's name of the code; read by logscan/endings.py.
    Fact("nccl_invalid_argument", r"NCCL error[^\n]{0,200}?, invalid argument\b|\bncclInvalidArgument\b",
         trigger=("invalid argument", "ncclinvalidargument"),
         example="RuntimeError: NCCL error in: /pytorch/torch/lib/c10d/../c10d/NCCLUtils.hpp:82, invalid argument, "
                 "NCCL version 2.4.8"),
    # srun's report of tasks that ended (SchedMD/slurm src/srun/launch.c, src/plugins/launch/slurm/launch_slurm.c
    # before 23.02: error("%s: %s %s: Exited with exit code %d", hosts, "task"/"tasks", task list, rc), slurm 17.11 ..
    # 26.05): an exit code that srun, not torchrun, saw.
    Fact("srun_exit", r"srun: error: (?P<host>[^:\s]+): tasks? (?P<tasks>[\d,-]+): Exited with exit code (?P<code>\d+)",
         trigger="srun: error: ",
         example="srun: error: slurm-job-compute-0-0: tasks 2-7: Exited with exit code 1"),
    # mp.spawn's report of a child that raised (torch/multiprocessing/spawn.py ProcessContext.join, torch 1.x .. 2.13:
    # "\n\n-- Process %d terminated with the following error:\n" + the child's traceback, in ProcessRaisedException's
    # message, whose class name no `...Error` exception line reads); read by logscan/endings.py.
    Fact("spawn_child_failed", r"-- Process (?P<index>\d+) terminated with the following error",
         trigger="terminated with the following error", example="-- Process 1 terminated with the following error:"),
    # A traceback is a failure even when the paste stops before its last line (users often cut it).
    Fact("traceback", r"Traceback \(most recent call last\)", trigger="traceback (most recent call last)",
         example="Traceback (most recent call last):"),
    # The last line of a Python traceback: `SomeError: message` (with or without a module path; indented
    # when a poster quoted it). CPython's traceback (TracebackException.format_exception_only) prefixes the
    # type's module unless it is builtins/__main__, so a lowercase class of a C module reads `socket.gaierror`,
    # `socket.herror`, `zlib.error`: a qualified name ending in `error` is an exception line too.
    Fact("exception", r"^\s*(?:\[rank\d+\]:\s*)?(?P<exc>(?:[A-Za-z_]\w*\.)*[A-Z]\w*Error|"
         r"(?:[A-Za-z_]\w*\.)+[a-z]\w*error)(?::\s*(?P<msg>.*)|\s*$)",
         trigger="error", example="RuntimeError: something went wrong"),
    # Every frame of a traceback (CPython traceback.py: '  File "{}", line {}, in {}'): user_error.py keeps the
    # last frame of the job's own code per rank, which names where an exception was raised. Same trigger as
    # call_site: no extra pass over the log.
    # The line under a frame is its quoted source line (`after`): the call a traceback cut there was making.
    Fact("frame", r'File "(?P<file>[^"]+\.py)", line (?P<lineno>\d+), in (?P<func>[\w.<>]+)', trigger='.py", line ', follow=1,
         example='  File "/home/me/train.py", line 88, in train_step'),
    # A native crash handler's report (UCX's, loaded in NGC/HPC-X containers: ucs/debug/debug.c
    # "Caught signal %d (%s)" then "==== backtrace (tid:%7d) ====" and frames "%2d 0x%016lx %s()  %s:%u"): the
    # signal and the lines under it, whose frames name the library that faulted (native.py).
    Fact("native_signal", r"Caught signal (?P<sig>\d+) \((?P<name>[^:)]+)", trigger="caught signal", follow=24,
         example="[09677202c889:5283 :0:5704] Caught signal 7 (Bus error: nonexistent physical address)"),
    # torchrun stopping the rest of the group after one worker failed (elastic/multiprocessing/api.py _close:
    # "Sending process %s closing signal %s"; torch 2.4+ keeps the wording, older logs add "the").
    Fact("stop_sent", r"Sending process (?P<pid>\d+) (?:the )?closing signal (?P<sig>SIG[A-Z]+)", trigger="closing signal sig",
         example="W1125 20:55:52.912000 11041 api.py:1028] Sending process 11422 closing signal SIGTERM"),
)
