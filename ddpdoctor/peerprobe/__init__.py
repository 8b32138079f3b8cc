"""The peer-probe protocol shared by `network --listen` and `cluster`: protocol.py (the hello line a
peer answers, how it is read and checked) and server.py (ProbeServer: the bounded listener)."""
