"""Failure modes of name resolution: hostnames, MASTER_ADDR, Kubernetes service names, Windows hosts files."""
from __future__ import annotations

from ddpdoctor.catalog import shared as S
from ddpdoctor.catalog.model import CLUE, SYMPTOM, FailureMode, Signature, fix

_GAI = r"The IPv6 network addresses of \((?P<host>{host}), (?P<port>\d+)\) cannot be retrieved \(gai error: (?P<gai>-?\d+)"

MODES = (
    FailureMode(
        id="HOSTNAME_RESOLVES_TO_LOOPBACK",
        title="A node's hostname resolves to a loopback address",
        category="dns",
        summary="Gloo (or c10d) connections between ranks are refused or time out on 127.0.0.1 / 127.0.1.1: "
                "a rank advertised a loopback address to its peers.",
        cause="Gloo and c10d find the address to advertise by resolving the hostname. Debian/Ubuntu /etc/hosts "
              "maps it to 127.0.1.1 (host-network pods to 127.0.0.1), so peers are told to connect to "
              "themselves.",
        fix=fix("Map the hostname to the node's LAN address in /etc/hosts, or tell Gloo and NCCL which interface "
                "to use: GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME = the interface that routes to the master "
                "(`ddpdoctor network` prints the values for this node).",
                "getent hosts $(hostname)",
                "export GLOO_SOCKET_IFNAME=$(ip -o route get {master} | sed -n 's/.* dev \\([^ ]*\\).*/\\1/p')"),
        signatures=(
            Signature(r"remote=\[(?:::ffff:)?(?P<addr>127\.\d+\.\d+\.\d+)\]", 0.85, trigger="remote=[",
                      example="[E1121 05:20:51.577886511 ProcessGroupGloo.cpp:67] Gloo connectFullMesh failed with "
                              "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:152] timed out connecting: "
                              "SO_ERROR: Connection refused, remote=[127.0.1.1]:57251",
                      note="a peer advertised the loopback address {addr}"),
            Signature(r"connect \[(?P<addr>127\.\d+\.\d+\.\d+)\]:\d+: Connection refused", 0.85,
                      trigger="connection refused", example="RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:769] "
                                            "connect [127.0.1.1]:25472: Connection refused",
                      note="a peer advertised the loopback address {addr}"),
            Signature(r"Gloo connectFullMesh failed with [^\n]*Connect timeout", 0.3, SYMPTOM,
                      trigger="connectfullmesh failed",
                      example="RuntimeError: Gloo connectFullMesh failed with [/pytorch/third_party/gloo/gloo/"
                              "transport/tcp/pair.h:311] Connect timeout [none]",
                      note="no peer connected to the address this rank advertised"),
        ),
        checks=("DD202", "DD303", "DD302", "DD715"),
        confirm="ddpdoctor network --master {master}   (on every node)",
        preflight="DD202 flags a hostname that resolves to loopback; DD303 predicts the address Gloo will bind.",
        related=("HOSTNAME_UNRESOLVABLE", "GLOO_SOCKET_IFNAME_INVALID"),
        sources=("pytorch/pytorch#15592", "pytorch/gloo#223", "ray-project/ray#37461", "pytorch/examples#812"),
    ),
    FailureMode(
        id="HOSTNAME_UNRESOLVABLE",
        title="A host name does not resolve on some node",
        category="dns",
        summary="c10d warns that `The IPv6 network addresses of (host, port) cannot be retrieved (gai error: -2 ...)`"
                ", or Python raises `socket.gaierror`; Gloo falls back to loopback when the node's own name does "
                "not resolve.",
        cause="The master's name, the node's own hostname or its FQDN is not in DNS or /etc/hosts on that node: "
              "cloud VM names without DNS, names known only on the master, containers with their own hostnames. "
              "torchrun also publishes rank 0's FQDN as MASTER_ADDR, which must resolve everywhere.",
        fix=fix("Make every name resolve on every node (DNS or /etc/hosts: `<LAN address> <hostname>`), or use IP "
                "addresses for MASTER_ADDR / --rdzv-endpoint and `--local-addr`.",
                "getent hosts {master} $(hostname) $(hostname -f)"),
        signatures=(
            Signature(_GAI.format(host=r"[^\s\[(),][^,()]*"), 0.75,
                      example="[W1121 05:25:02.834095400 socket.cpp:764] [c10d] The IPv6 network addresses of (node1, "
                              "29400) cannot be retrieved (gai error: -2 - Name or service not known).",
                      note="{host} does not resolve on this node"),
            Signature(r"Unable to resolve hostname to a \(local\) address", 0.7,
                      example="[W ProcessGroupGloo.cpp:524] Warning: Unable to resolve hostname to a (local) address. "
                              "Using the loopback address as fallback. Manually set the network interface to bind to "
                              "with GLOO_SOCKET_IFNAME.",
                      note="this node's own hostname does not resolve to one of its addresses, so Gloo binds loopback"),
            Signature(S.GAI_ERROR, 0.55, SYMPTOM, example=S.GAI_ERROR_EX),
            Signature(S.HOST_NOT_FOUND, 0.5, SYMPTOM, example=S.HOST_NOT_FOUND_EX),
            Signature(r"remote=\[(?:::ffff:)?127\.0\.0\.1\]", 0.4, SYMPTOM, trigger="remote=[",
                      example="timed out connecting: SO_ERROR: Connection refused, remote=[127.0.0.1]:20897",
                      note="a peer advertised 127.0.0.1, Gloo's fallback when a hostname does not resolve"),
        ),
        checks=("DD201", "DD204", "DD205", "DD207", "DD712", "DD715"),
        confirm="ddpdoctor network --master {master}   (or across the allocation: srun -N <n> ddpdoctor cluster)",
        preflight="DD201/DD204 resolve this node's hostname and FQDN, DD205 the master's name; DD712 resolves every "
                  "node's name on every node of a Slurm allocation.",
        related=("MASTER_ADDR_MALFORMED", "K8S_DNS_NOT_READY", "HOSTNAME_RESOLVES_TO_LOOPBACK"),
        sources=("hpcaitech/ColossalAI#2841", "pytorch/pytorch#150532", "zai-org/ChatGLM-6B#1372"),
    ),
    FailureMode(
        id="MASTER_ADDR_MALFORMED",
        title="MASTER_ADDR is not a bare host name or address",
        category="dns",
        summary="c10d cannot look up the master: `The IPv6 network addresses of ( 10.0.5.4, 8004) cannot be "
                "retrieved` with a leading space, brackets or a port inside the host part, repeated until the "
                "timeout.",
        cause="getaddrinfo takes a bare name or literal. Brackets belong only inside tcp://[v6]:port URLs; "
              "whitespace, a scheme or ':port' copied into MASTER_ADDR make the lookup fail every time.",
        fix=fix("Give MASTER_ADDR a bare hostname, IPv4 or IPv6 literal (no brackets, spaces, scheme or port); put "
                "the port in MASTER_PORT.", "echo \"[$MASTER_ADDR]\"   # shows stray spaces"),
        signatures=(
            Signature(_GAI.format(host=r"\s+[^,()]*|\[[^,()]*|[^,()]*://[^,()]*|[^,()\s]*\s+"), 0.9,
                      example="[W socket.cpp:697] [c10d] The IPv6 network addresses of ( 10.0.5.4, 8004) cannot be "
                              "retrieved (gai error: -2 - Name or service not known).",
                      note="the host part '{host}' has brackets, spaces or a scheme"),
            Signature(_GAI.format(host=r"[^,()\s:]+:\d+"), 0.85,
                      example="[W socket.cpp:697] [c10d] The IPv6 network addresses of (node1:29500, 29500) cannot be "
                              "retrieved (gai error: -2 - Name or service not known).",
                      note="the host part '{host}' carries a port"),
            Signature(S.GAI_ERROR, 0.2, SYMPTOM, example=S.GAI_ERROR_EX),
        ),
        checks=("DD801", "DD803"),
        confirm="ddpdoctor network --select DD8",
        preflight="DD801 and DD803 validate MASTER_ADDR and the rendezvous endpoint.",
        related=("HOSTNAME_UNRESOLVABLE",),
        sources=("pytorch/pytorch#121807", "verl-project/verl#2550", "THUDM/slime#2151"),
    ),
    FailureMode(
        id="K8S_DNS_NOT_READY",
        title="The rank-0 service name does not resolve yet (Kubernetes)",
        category="dns",
        summary="Worker pods fail at start-up with `host not found` / gai errors for the master's service name, "
                "or rank 0 ends in RendezvousTimeoutError while the others crash-loop.",
        cause="Kubernetes publishes a headless service's DNS record together with (or after) the pods; workers "
              "that start first cannot resolve rank 0 yet, and older TCPStore versions treat that as fatal.",
        fix=fix("Wait for the name before launching (an init container looping on `nslookup`), let the operator "
                "restart pods, or upgrade torch (newer TCPStore retries the lookup).",
                "until getent hosts {master}; do sleep 2; done"),
        signatures=(
            Signature(_GAI.format(host=r"[\w.-]+\.svc(?:\.cluster\.local)?"), 0.9,
                      example="[W socket.cpp:663] [c10d] The IPv6 network addresses of "
                              "(trainer-0.trainer.default.svc.cluster.local, 29500) cannot be retrieved (gai error: -2 - "
                              "Name or service not known).",
                      note="{host} is a Kubernetes service name"),
            Signature(_GAI.format(host=r"[\w.-]+-master-\d+"), 0.9,
                      example="[W socket.cpp:663] [c10d] The IPv6 network addresses of (pytorchjob-master-0, 23456) "
                              "cannot be retrieved (gai error: -2 - Name or service not known).",
                      note="{host} looks like the master pod's service name of a PyTorchJob"),
            Signature(S.HOST_NOT_FOUND, 0.3, SYMPTOM, example=S.HOST_NOT_FOUND_EX),
            Signature(S.RDZV_TIMEOUT, 0.15, SYMPTOM, example=S.RDZV_TIMEOUT_EX),
        ),
        checks=("DD205", "DD207"),
        confirm="ddpdoctor network --master {master}   (from a worker pod)",
        preflight="DD205 resolves the master's name from the pod.",
        related=("HOSTNAME_UNRESOLVABLE", "RDZV_ENDPOINT_UNREACHABLE"),
        sources=("pytorch/pytorch#73682", "pytorch/pytorch#80772", "meta-pytorch/torchx#541"),
    ),
    FailureMode(
        id="WINDOWS_HOSTS_FILE_REVERSE_NAME",
        title="Windows resolves the local address to a foreign name from the hosts file",
        category="windows",
        summary="c10d fails to connect to a name you never configured (`[kubernetes.docker.internal]`, a "
                "licence-server name) with `system error: 10049 - The requested address is not valid in its "
                "context`.",
        cause="Entries in the Windows hosts file (Docker Desktop, licence tools) map 127.0.0.1 or the LAN address "
              "to other names; c10d connects to the reverse-resolved name, which is not a valid destination "
              "(WSAEADDRNOTAVAIL).",
        fix=fix("Use an explicit IP for MASTER_ADDR / init_method, remove or reorder the offending entries in "
                "C:\\Windows\\System32\\drivers\\etc\\hosts, or run under WSL2.",
                "type C:\\Windows\\System32\\drivers\\etc\\hosts"),
        signatures=(
            Signature(r"system error: 10049", 0.85,
                      example="[W socket.cpp:697] [c10d] The client socket has failed to connect to "
                              "[kubernetes.docker.internal]:29500 (system error: 10049 - The requested address is not "
                              "valid in its context.)."),
        ),
        checks=("DD206", "DD204"),
        confirm="ddpdoctor network --master {master}",
        preflight="DD206 shows the name the master's address resolves back to; DD204 checks the FQDN.",
        sources=("pytorch/pytorch#80638", "pytorch/pytorch#77523", "meta-llama/llama3#127"),
    ),
)
