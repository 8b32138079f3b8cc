"""The listener of the peer-probe protocol shared by `network --listen` and `cluster`: server.py
(ProbeServer: the bounded listener). The probing side, and how a line is read and checked, is probe
work: ddpdoctor/probes/handshake.py."""
