"""The allreduce rows of a bench-scaling.sh run against the cost model: which rows at 64 KiB and
above fall outside 1.25x, and, for a row faster than the model on links with a token bucket,
how much of the gap the bucket can explain: a section of the scaling report, and
`python3 scripts/reports allreduce-vs-model MODEL.json` for any simulate-scaling
--bench-allreduce output.
"""

import os
import re

from summaries import load

BAND = 1.25
BIG = 64 * 1024


def bucket_bytes(shaped_text):
    """The links' token bucket from cluster-emulate.sh's `up` or `reshape` line, or None (unshaped links)."""
    m = re.search(r"token bucket (?:of )?(\d+) bytes", shaped_text or "")
    return int(m.group(1)) if m else None


def bucket_floor(row, bucket, beta_ns_per_byte):
    """The lowest ratio a bucket of `bucket` bytes allows: at each of the model's messages (its
    `model_messages`, one after the other on the critical path), at most that many of the
    message's bytes pass at memory speed instead of at the link's rate. None where there is no
    bucket, no beta or the row has no message count."""
    turns = row.get("model_messages")
    if not turns or not bucket or not beta_ns_per_byte or not row.get("model_us"):
        return None
    fragments = max(1, row.get("fragments") or 1)
    credit_us = turns * min(bucket, row["bytes"] / fragments) * beta_ns_per_byte / 1000
    return max(0.0, (row["model_us"] - credit_us) / row["model_us"])


def size_text(n):
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}"
    return f"{n} B"


def outside_text(row, bucket, floor):
    head = f"{row['algorithm']}, {row['ranks']} ranks, {size_text(row['bytes'])}: {row['ratio']:.2f}x"
    if row["ratio"] > BAND:
        return head + ", slower than the model."
    if floor is None:
        return head + ", faster than the model."
    where = ("between that floor and the model" if row["ratio"] >= floor
             else "below even that floor: more than the bucket is at work")
    return (f"{head}, faster than the model. The links' token bucket ({bucket} bytes) lets up to that much of a "
            f"one-way message through at memory speed once a link direction has idled; over this row's "
            f"{row['model_messages']:g} message(s) that is at most {row['model_us'] * (1 - floor):.0f} us, a floor of "
            f"{floor:.2f}x, and the measured time lies {where} (docs/emulated-cluster.md, the links' token bucket).")


def section(model_rows, model_md, shaped_text, beta, cores, w):
    """Write the section; return (rows within the band, rows judged, rows outside as dicts)."""
    w("## Allreduce: measured against the cost model\n")
    w(model_md)
    big_all = [r for r in model_rows if r["bytes"] >= BIG and r["ratio"] is not None and r["algorithm"] != "auto"]
    # With more ranks than cores the ranks take turns on the cores: those timings measure the
    # scheduler, not the links. The target is judged where each rank has a core.
    big = [r for r in big_all if r["ranks"] <= cores]
    within = [r for r in big if 1 / BAND <= r["ratio"] <= BAND]

    def span(rows):
        return (f"{min((r['ratio'] for r in rows), default=float('nan')):.2f} to "
                f"{max((r['ratio'] for r in rows), default=float('nan')):.2f}")

    crowded = [r for r in big_all if r["ranks"] > cores]
    w(f"\nHand-written algorithms at 64 KiB and above, ranks <= {cores} cores: {len(within)} of {len(big)} rows within "
      f"{BAND}x of the model (ratios {span(big)})"
      + (f"; with more ranks than cores: ratios {span(crowded)}.\n" if crowded else ".\n"))
    bucket = bucket_bytes(shaped_text)
    outside = []
    for r in big:
        if r in within:
            continue
        floor = bucket_floor(r, bucket, beta) if r["ratio"] < 1 / BAND else None
        outside.append(dict(algorithm=r["algorithm"], ranks=r["ranks"], bytes=r["bytes"], ratio=r["ratio"],
                            bucket_bytes=bucket if floor is not None else None, bucket_floor=floor))
        if len(outside) == 1:
            w("Outside the band:\n")
        w(f"- {outside_text(r, bucket, floor)}")
    if outside:
        w("")
    return within, big, outside


def main(model, links, shaped, cores):
    """The section for one model file, printed: its table (MODEL.md beside it, if there), the
    rows judged, and those outside the band."""
    lines = []
    table = os.path.splitext(model)[0] + ".md"
    table = open(table).read() if os.path.exists(table) else ""
    beta = load(links)["beta_ns_per_byte"] if links else None
    shaped_text = open(shaped).read() if shaped else ""
    section(load(model).get("allreduce", []), table, shaped_text, beta, cores, lines.append)
    print("\n".join(lines))
