"""`ddpdoctor inspect`: where every rank of a running job is, from outside, without disturbing it."""
