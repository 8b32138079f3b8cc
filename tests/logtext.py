"""explain on a few log lines, as the explain tests write them (one line each, a final newline), and the two
readings of its answer they assert on."""
import io

from ddpdoctor.logscan import explain_stream


def explain(lines):
    return explain_stream(io.BytesIO(("\n".join(lines) + "\n").encode()), "t")


def ids(ex):
    return [d.failure.id for d in ex.diagnoses]


def by_id(ex, fid):
    return next(d for d in ex.diagnoses if d.failure.id == fid)
