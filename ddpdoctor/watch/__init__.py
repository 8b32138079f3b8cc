"""`ddpdoctor watch`: beside a running job until it ends, one line per event (docs/watch.md)."""
