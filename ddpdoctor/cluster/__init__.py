"""`ddpdoctor cluster`: every node probes its peers; the first node gathers and judges.

One process per node (srun -N N --ntasks-per-node=1, or torchrun with one process per node):

1. listen on the rendezvous port and on a port from this node's ephemeral range, answering the
   ddpdoctor handshake (ddpdoctor/probes/handshake.py), before anything slow happens;
2. connect to torch's c10d TCPStore on the first node (store.py) and publish `hello/<i>`: name,
   addresses, ephemeral port;
3. probe a bounded set of peers (peers.py: everyone for small N; else ring neighbours, the first
   node and a seeded random sample; above PAIRS_ABOVE nodes two pairing rounds, pairing.py) while
   the node-local checks (those `ddpdoctor prolog` runs) run;
4. publish `result/<i>` with this node's fingerprint (node_facts.py); keep listening until the
   first node says `done` (peers still probe us).

The first node gathers every record (node.py) into the ClusterView (ddpdoctor/facts/cluster.py)
that the DD71x checks judge; render/cluster.py and render/heatmap.py draw it. Only
store.connect_store imports torch.
"""
