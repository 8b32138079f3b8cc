"""Failure modes of the network between ranks: firewalls, address families, MTU, interface choice."""
from __future__ import annotations

from ddpdoctor.catalog import shared as S
from ddpdoctor.catalog.model import CLUE, CONSEQUENCE, SYMPTOM, FailureMode, Signature, fix

# A port in Linux's default ephemeral range (32768-60999, rounded up to 65535): after a c10d rendezvous,
# torchrun's master agent picks such a free port for MASTER_PORT and hands it to the workers through the
# rendezvous store, so a worker that times out on it did reach the rendezvous port.
_EPHEMERAL = r"(?:3[2-9]\d{3}|[4-5]\d{4}|6[0-5]\d{3})"

_NCCL_VIRTUAL_NIC = r"(?:docker|veth|virbr|br-|cni|flannel|vxlan|tun|tailscale|lo\b)[\w.-]*"

MODES = (
    FailureMode(
        id="FIREWALL_BLOCKS_PORTS",
        title="A firewall blocks the ports ranks use between nodes",
        category="network",
        summary="The rendezvous may work, but connections on other ports fail: `No route to host` (a REJECT "
                "rule), or connects that time out (a DROP rule) from Gloo, NCCL or the c10d store.",
        cause="A host firewall (firewalld, ufw, iptables) or a cloud security group lets through only some ports. "
              "Besides the rendezvous port, NCCL and Gloo connect every pair of ranks on random high ports, and "
              "torchrun's c10d rendezvous hands out a random MASTER_PORT; none of these can be pinned to a "
              "small range.",
        fix=fix("Allow all TCP between the training nodes (a security-group rule that admits its own members, or "
                "a trusted zone for the cluster subnet), or bind NCCL/Gloo to an interface that is not filtered.",
                "sudo firewall-cmd --state; sudo ufw status; sudo iptables -S | grep -E 'REJECT|DROP'",
                "sudo firewall-cmd --permanent --zone=trusted --add-source=<cluster subnet> && sudo firewall-cmd --reload"),
        signatures=(
            Signature(r"socketPollConnect: connect returned No route to host", 0.85,
                      example="NCCL INFO socketPollConnect: connect returned No route to host, retrying (26/34) after "
                              "sleep for 2600 msec"),
            Signature(r"(?i)No route to host", 0.7, trigger="no route to host",
                      example="RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:799] connect "
                              "[10.0.0.2]:40511: No route to host",
                      note="the peer answered with an ICMP rejection (a REJECT rule) or there is no route"),
            Signature(S.STORE_CONNECT_TIMEOUT.replace(r"(?P<port>\d+)", rf"(?P<port>{_EPHEMERAL})"), 0.7,
                      trigger="client socket has timed out",
                      example="[E1121 05:30:10.776171414 socket.cpp:1028] [c10d] The client socket has timed out after "
                              "10000ms while trying to connect to (node1, 45705).",
                      note="port {port} is the MASTER_PORT torchrun chose after the rendezvous succeeded: the "
                           "rendezvous port is open, other ports to {host} are not"),
            Signature(r"Gloo connectFullMesh failed with [^\n]*(?:Connect timeout|timed out connecting(?!: SO_ERROR: "
                      r"Connection refused))", 0.35, SYMPTOM,
                      trigger="connectfullmesh failed",
                      example="RuntimeError: Gloo connectFullMesh failed with [/pytorch/third_party/gloo/gloo/"
                              "transport/tcp/pair.h:311] Connect timeout [none]"),
            Signature(S.CONNECT_TIMED_OUT, 0.35, SYMPTOM, example=S.CONNECT_TIMED_OUT_EX),
            Signature(S.STORE_CONNECT_TIMEOUT, 0.2, SYMPTOM, example=S.STORE_CONNECT_TIMEOUT_EX),
            Signature(S.NCCL_SYSTEM_ERROR, 0.15, SYMPTOM, example=S.NCCL_SYSTEM_ERROR_EX,
                      trigger=S.NCCL_SYSTEM_ERROR_TRIGGER),
        ),
        checks=("DD102", "DD103", "DD713", "DD714", "DD501"),
        confirm="ddpdoctor network --master {master} --port {port}   (with `ddpdoctor network --listen` on the master)",
        preflight="DD102 probes the rendezvous port and DD103 an ephemeral port of the master, the two paths a "
                  "firewall treats differently; DD713/DD714 do the same between every pair of nodes of an allocation.",
        related=("RDZV_ENDPOINT_UNREACHABLE", "NCCL_WRONG_INTERFACE_AUTOSELECTED"),
        sources=("NVIDIA/nccl#352", "NVIDIA/nccl#388", "hiyouga/LlamaFactory#8045", "huggingface/transformers#14878"),
    ),
    FailureMode(
        id="IPV6_ADDRESS_FAMILY",
        title="IPv6 disabled, or nodes resolve to different address families",
        category="network",
        summary="c10d warns `errno: 97 - Address family not supported by protocol` (usually harmless: it falls "
                "back to IPv4), or Gloo refuses to pair an IPv4 with an IPv6 peer (`ss_family` / `address family "
                "mismatch`).",
        cause="IPv6 is disabled on a host, or names resolve to IPv4 on some nodes and IPv6 on others, and Gloo "
              "cannot connect sockets of different families.",
        fix=fix("Make names resolve to one family on all nodes (usually IPv4), or set GLOO_SOCKET_IFNAME / "
                "NCCL_SOCKET_IFNAME to an interface with the intended family. Alone, errno-97 warnings are noise: "
                "look for the real error.",
                "getent ahosts $(hostname)", "cat /proc/sys/net/ipv6/conf/all/disable_ipv6"),
        signatures=(
            Signature(r"ss1\.ss_family == ss2\.ss_family", 0.9,
                      example="RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/device.cc:276] "
                              "ss1.ss_family == ss2.ss_family. 2 vs 10"),
            Signature(r"address family mismatch", 0.9,
                      example="RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:210] address family "
                              "mismatch"),
            Signature(r"errno: 97 - Address family not supported by protocol", 0.3, CLUE,
                      example="[W socket.cpp:436] [c10d] The server socket cannot be initialized on [::]:29500 "
                              "(errno: 97 - Address family not supported by protocol).",
                      note="IPv6 is off on this host; c10d falls back to IPv4, so this alone is not the failure"),
        ),
        checks=("DD201", "DD203", "DD715"),
        confirm="ddpdoctor network --master {master}   (compare the addresses each node resolves)",
        preflight="DD201/DD203 show what the hostname resolves to; comparing families across nodes is proposed "
                  "(DD2xx).",
        sources=("pytorch/pytorch#74316", "pytorch/gloo#268", "pytorch/gloo#399"),
    ),
    FailureMode(
        id="MTU_MISMATCH",
        title="Nodes or switch ports use different MTUs",
        category="network",
        summary="Small messages work and large ones hang (nccl-tests pass at 8 B, stall at 128 MB), or RDMA "
                "reports `IBV_WC_LOC_LEN_ERR`.",
        cause="Jumbo frames on some NICs or switch ports but not others (or different RoCE active MTUs): large "
              "packets are dropped and recent NCCL does not negotiate the MTU down.",
        fix=fix("Configure the same MTU on every node and switch port (RoCE: port MTU 4200 gives active MTU 4096).",
                "ip -o link | awk '{print $2, $4, $5}'", "ping -M do -s $((MTU - 28)) <peer>"),
        signatures=(
            Signature(r"Got completion [^\n]*IBV_WC_LOC_LEN_ERR", 0.7,
                      example="NCCL WARN NET/IB : Got completion from peer 10.0.0.2<51220> with status=IBV_WC_LOC_LEN_ERR"),
            Signature(r"local length error", 0.6, example="NET/IB : Got completion with error 1 (local length error)"),
        ),
        checks=("DD305", "DD502"),
        confirm="ping -M do -s 8972 <peer>   # fails where a path does not carry 9000-byte frames",
        preflight="DD305 warns when the interface to the master has a different MTU from others on the node; "
                  "comparing across nodes is proposed (DD3xx).",
        related=("IB_ROCE_GID_MISMATCH",),
        sources=("NVIDIA/nccl#1524", "NVIDIA/nccl-tests#236", "NVIDIA/nccl#1957"),
    ),
    FailureMode(
        id="NCCL_WRONG_INTERFACE_AUTOSELECTED",
        title="NCCL picked a network interface peers cannot reach",
        category="nic",
        summary="NCCL bootstraps on loopback, a docker/veth bridge or a link-local address (`Bootstrap : Using "
                "docker0:...`) and connections between nodes time out.",
        cause="With NCCL_SOCKET_IFNAME unset, NCCL prefers ib*, then any interface but docker*/lo; virtual "
              "bridges, management NICs or interfaces named differently per node can come first.",
        fix=fix("Set NCCL_SOCKET_IFNAME to the interface that routes between the nodes (a prefix like `eth`, "
                "`^docker,lo` to exclude, `=eth0` for an exact name); `ddpdoctor network` prints the value for "
                "this node.",
                "ip -o route get {master}",
                "export NCCL_SOCKET_IFNAME=<the dev shown above>"),
        signatures=(
            Signature(rf"(?:Bootstrap|NET/Socket) : Using (?:\[\d+\])?(?P<nic>{_NCCL_VIRTUAL_NIC}):", 0.5, CLUE,
                      trigger=" : using ",
                      example="node1:1234:1234 [0] NCCL INFO Bootstrap : Using docker0:172.17.0.1<0>",
                      note="NCCL uses {nic}, a virtual or loopback interface"),
            Signature(r"(?:Bootstrap|NET/Socket) : Using (?:\[\d+\])?(?P<nic>[\w.-]+):fe80:", 0.5, CLUE,
                      trigger=" : using ",
                      example="NCCL INFO Bootstrap : Using [0]veth25f2e72:fe80::380d:bfff:fe5b:54d2%veth25f2e72<0>",
                      note="NCCL uses a link-local IPv6 address on {nic}"),
            Signature(r"NCCL INFO Call to connect returned Connection (?:timed out|refused), retrying", 0.4, SYMPTOM,
                      trigger=("timed out", "refused"),
                      example="node2:88:88 [0] NCCL INFO Call to connect returned Connection timed out, retrying"),
            Signature(S.NCCL_SYSTEM_ERROR, 0.15, SYMPTOM, example=S.NCCL_SYSTEM_ERROR_EX,
                      trigger=S.NCCL_SYSTEM_ERROR_TRIGGER),
        ),
        checks=("DD304", "DD301", "DD305"),
        confirm="ddpdoctor network --master {master}",
        preflight="DD304 predicts NCCL's default interface and compares it with the route to the master.",
        related=("CONTAINER_BRIDGE_NETWORK", "NCCL_SOCKET_IFNAME_NOT_FOUND", "FIREWALL_BLOCKS_PORTS"),
        sources=("horovod/horovod#584", "NVIDIA/nccl#913", "NVIDIA/nccl#286", "pytorch/pytorch#14870"),
    ),
    FailureMode(
        id="GLOO_ADDRESS_UNREACHABLE",
        title="A rank advertised an address its peers cannot reach",
        category="nic",
        summary="Right after rendezvous, a rank fails in Gloo with `connect: Network is unreachable` or "
                "`No route to host`: it dialled the address a peer advertised, and no route leads there.",
        cause="Without GLOO_SOCKET_IFNAME, Gloo binds the address the node's hostname resolves to. When that is "
              "the address of another interface (a docker or VPN bridge, a management NIC, a stale /etc/hosts "
              "line), peers cannot reach it. Measured with torch 2.13: of each pair the rank with the higher "
              "address connects and the lower one listens, so only peers above the stray address fail, and a "
              "2-node test can pass where a larger job fails.",
        fix=fix("Export GLOO_SOCKET_IFNAME (and NCCL_SOCKET_IFNAME) for the interface that routes to the master on "
                "the node whose hostname points elsewhere, or map its hostname to that interface's address; "
                "`ddpdoctor network` (DD303) names the node and the interface.",
                "getent hosts $(hostname)",
                "ip -o route get {master}",
                "export GLOO_SOCKET_IFNAME=<the dev shown above>"),
        signatures=(
            Signature(r"connect: (?:Network is unreachable|No route to host)", 0.85,
                      trigger=("network is unreachable", "no route to host"),
                      example="RuntimeError: [enforce fail at /__w/pytorch/pytorch/third_party/gloo/gloo/transport/"
                              "tcp/socket.cc:142] rv != -1. -1 vs -1. connect: Network is unreachable",
                      note="Gloo could not route to the address a peer advertised"),
            Signature(r"SO_ERROR: (?:Network is unreachable|No route to host), remote=\[(?P<addr>[^\]]+)\]", 0.85,
                      trigger="remote=[",
                      example="error=SO_ERROR: No route to host, remote=[198.18.0.2]:41234",
                      note="a peer advertised {addr}, which this rank cannot reach"),
        ),
        checks=("DD303", "DD302", "DD203"),
        confirm="ddpdoctor network --master {master}   (on every node; DD303 names the stray interface)",
        preflight="DD303 predicts the address Gloo will bind and compares its interface with the route to the master.",
        related=("HOSTNAME_RESOLVES_TO_LOOPBACK", "CONTAINER_BRIDGE_NETWORK", "NCCL_WRONG_INTERFACE_AUTOSELECTED"),
        sources=("measured in the ddpdoctor lab (tests/test_lab_network.py)",),
        origin="ddpdoctor",
    ),
    FailureMode(
        id="NCCL_SOCKET_IFNAME_NOT_FOUND",
        title="NCCL_SOCKET_IFNAME names no interface on this node",
        category="nic",
        summary="`Bootstrap : no socket interface found`, or `ncclSocketInit: ... family N is neither AF_INET(2) "
                "nor AF_INET6(10)` after `NCCL_SOCKET_IFNAME set by environment to ...`.",
        cause="The value names an interface this node does not have (copied `eth0`, pod vs host names) or uses "
              "syntax the bundled NCCL does not know (`=name` before NCCL 2.?), so NCCL has no address to bind.",
        fix=fix("Set NCCL_SOCKET_IFNAME to an interface present on every node, or a prefix / exclusion list "
                "(`^docker,lo`); `ddpdoctor network` checks the value (DD301).",
                "ip -o link show", "echo $NCCL_SOCKET_IFNAME"),
        signatures=(
            Signature(r"Bootstrap : no socket interface found", 0.9,
                      example="node1:99:99 [0] NCCL INFO Bootstrap : no socket interface found"),
            Signature(r"NET/Socket : no interface found", 0.8, example="NCCL WARN NET/Socket : no interface found"),
            Signature(S.NCCL_BAD_FAMILY, 0.45, SYMPTOM, example=S.NCCL_BAD_FAMILY_EX),
        ),
        checks=("DD301", "DD505", "DD717"),
        confirm="ddpdoctor network --select DD301",
        preflight="DD301 matches the value against this node's interfaces with NCCL's grammar.",
        related=("NCCL_VERSION_MISMATCH_ACROSS_NODES", "NCCL_WRONG_INTERFACE_AUTOSELECTED"),
        sources=("NVIDIA/nccl#1837", "NVIDIA/nccl-tests#219", "marin-community/marin#6940"),
    ),
    FailureMode(
        id="GLOO_SOCKET_IFNAME_INVALID",
        title="GLOO_SOCKET_IFNAME is not one existing interface name",
        category="gloo",
        summary="Gloo fails at init with `ifa != nullptr. Unable to find address for: <value>`; the other ranks "
                "then wait for it and time out.",
        cause="Gloo takes one concrete interface name (a comma list since torch 1.x means several devices). NCCL "
              "syntax (`^lo`, `=eth0`), an IP address, or a name missing on that node matches nothing. A purely "
              "numeric hostname also resolves to a bogus address such as 0.0.8.34.",
        fix=fix("Export one interface name that exists on each node, e.g. the one that routes to the master.",
                "export GLOO_SOCKET_IFNAME=$(ip -o route get {master} | sed -n 's/.* dev \\([^ ]*\\).*/\\1/p')"),
        signatures=(
            Signature(r"Unable to find address for: (?P<value>\S+)", 0.9,
                      example="RuntimeError: [enforce fail at /pytorch/third_party/gloo/gloo/transport/tcp/device.cc:84] "
                              "ifa != nullptr. Unable to find address for: eth9",
                      note="no interface called {value} on this node"),
            Signature(r"Unable to find interface for: (?P<value>\S+)", 0.85,
                      example="RuntimeError: [enforce fail at /opt/conda/conda-bld/pytorch_1595629416375/work/third_party/"
                              "gloo/gloo/transport/tcp/device.cc:208] ifa != nullptr. Unable to find interface for: "
                              "[0.0.8.34]"),
        ),
        checks=("DD302",),
        confirm="ddpdoctor network --select DD302   (on every node)",
        preflight="DD302 validates the value against this node's interfaces and Gloo's grammar.",
        related=("HOSTNAME_RESOLVES_TO_LOOPBACK",),
        sources=("aws-samples/aws-do-eks#51", "AMD-AGI/Primus#1063", "horovod/horovod#2431"),
    ),
    FailureMode(
        id="GLOO_COLLECTIVE_TIMEOUT",
        title="A Gloo collective timed out",
        category="gloo",
        kind=CONSEQUENCE,
        origin="ddpdoctor",
        summary="A Gloo operation gives up: `Timed out waiting 1800000ms for recv operation to complete`.",
        cause="A symptom, like the NCCL watchdog: a peer was not in the same collective in time (it works alone "
              "on something else, ran fewer steps, called another collective, or died).",
        fix=fix("Find the rank that was elsewhere (py-spy dump every rank; compare their last log lines); raise "
                "init_process_group(timeout=) only when one rank legitimately works longer alone.",
                "py-spy dump --pid <pid of each rank>"),
        signatures=(
            Signature(r"Timed out waiting (?P<ms>\d+)ms for (?P<op>recv|send) operation to complete", 0.6, SYMPTOM,
                      example="RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed "
                              "out waiting 1800000ms for recv operation to complete"),
        ),
        checks=("DD501",),
        confirm="py-spy dump --pid <each rank's pid>   # while it hangs",
        preflight="DD501 (smoke) names ranks that hang in a collective; the script's own collectives are only "
                  "visible in its logs.",
        related=("UNEVEN_INPUTS_HANG", "COLLECTIVE_MISMATCH_ACROSS_RANKS", "GLOO_PEER_EXITED"),
    ),
    FailureMode(
        id="GLOO_PEER_EXITED",
        title="A Gloo peer closed its connection (the other rank died)",
        category="gloo",
        kind=CONSEQUENCE,
        origin="ddpdoctor",
        summary="A rank fails with `Connection closed by peer` or `Connection reset by peer` in a Gloo collective.",
        cause="A symptom: the rank at the other end exited, crashed or finished early. Its own log holds the "
              "cause.",
        fix=fix("Read the log of the peer named in the message (or of every rank): its first error is the cause. "
                "A peer that finished normally ran fewer steps (see UNEVEN_INPUTS_HANG)."),
        signatures=(
            Signature(r"Error: \[[^\]]*gloo/transport/tcp/[\w.]+:\d+\] Connection (?:closed|reset) by peer "
                      r"\[(?P<peer>[^\]]+)\]", 0.55, SYMPTOM,
                      example="RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by "
                              "peer [10.0.0.2]:61535",
                      note="the peer at {peer} went away"),
            Signature(r"Error: \[[^\]]*gloo/transport/tcp/[\w.]+:\d+\] Read error \[(?P<peer>[^\]]+)\]:\d+: "
                      r"Connection (?:closed|reset) by peer", 0.55, SYMPTOM,
                      example="RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error "
                              "[10.0.0.1]:14043: Connection reset by peer. This is typically caused by a remote worker "
                              "hanging or bugs in the application.",
                      note="the peer at {peer} went away"),
        ),
        checks=("DD501",),
        confirm="ddpdoctor explain --log <the peer's log>",
        preflight="DD501 (smoke) names a rank that dies; a peer that finishes early is a property of the script.",
        related=("UNEVEN_INPUTS_HANG", "GLOO_COLLECTIVE_TIMEOUT"),
    ),
)
