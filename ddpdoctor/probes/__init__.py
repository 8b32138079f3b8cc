"""Probes read the world (resolver, sockets, /proc, psutil, NVML) and return plain data; no judgement."""
