"""tools/bench/rbd's table (the script runs it as python3 tools/bench/lib/rbd_table.py DIR).

Reads DIR/manifest (tools/bench/lib/spdk_tcp.py's records: one per point, round and column;
the rbd bench rows written by the script in the same fields) and prints the markdown table:
IOPS and MB/s medians, the ratios rdmablk / rbd bench and rdmablk / SPDK formed round by round
with their range, rdmablk-perf's p50 against each target, and CPU per I/O of each target and
of rbd bench. Writes DIR/ratios.tsv for rdmablk-chart. SPDK_WHY in the environment: why the
SPDK column did not run (its build's error), printed in the column and below the table.
"""
import os
import sys

import benchjson as bj
from spdk_tcp import MANIFEST_FIELDS

BS = {"4k-randwrite-qd32": 4096, "4k-randread-qd32": 4096, "128k-seqread-qd32": 131072}
LABEL = {"rbd": "rbd bench", "rdmablk": "rdmablk", "spdk": "SPDK bdev_rbd"}


def main(d):
    recs, order, fails = {}, [], []
    for line in open(os.path.join(d, "manifest")):
        r = dict(zip(MANIFEST_FIELDS, line.rstrip("\n").split("\t")))
        if r["point"] not in order:
            order.append(r["point"])
        if r["rc"] == "0" and r["iops"] != "-" and r["errors"] == "0":
            num = lambda k: None if r[k] == "-" else float(r[k])
            recs.setdefault((r["point"], r["target"]), {})[r["round"]] = {
                k: num(k) for k in ("iops", "p50", "tgt_us")}
        else:
            fails.append(f"{r['point']} / {LABEL[r['target']]}, round {r['round']}: FAILED "
                         f"(exit {r['rc']}; {r['report']}, .err beside it)")
    why = os.environ.get("SPDK_WHY", "")

    def vals(key, k):
        return [v[k] for v in recs.get(key, {}).values() if v[k] is not None]

    def cell(p, t, fmt):
        xs = vals((p, t), "iops")
        if not xs:
            return "not built" if t == "spdk" and why else "FAILED" if any(
                f.startswith(f"{p} / {LABEL[t]},") for f in fails) else "-"
        s = fmt(bj.median(xs))
        return s + (f" ({fmt(min(xs))}-{fmt(max(xs))})" if len(xs) > 1 and fmt is bj.fmt_iops else "")

    def stats(p, a, b):
        ra, rb = recs.get((p, a), {}), recs.get((p, b), {})
        rs = [ra[k]["iops"] / rb[k]["iops"] for k in ra if k in rb and rb[k]["iops"]]
        return (bj.median(rs), min(rs), max(rs), len(rs)) if rs else None

    def ratio(p, a, b):
        st = stats(p, a, b)
        if st is None:
            return "-"
        m, lo, hi, n = st
        return f"{m:.2f}x" if n == 1 else f"{m:.2f}x ({lo:.2f}-{hi:.2f})"

    def med(p, t, k, fmt="{:.1f}"):
        v = bj.median(vals((p, t), k))
        return "-" if v is None else fmt.format(v)

    cols = ("rbd", "rdmablk", "spdk")
    head = (["workload"] + [f"{LABEL[t]} IOPS" for t in cols] + [f"{LABEL[t]} MB/s" for t in cols]
            + ["rdmablk / rbd bench", "rdmablk / SPDK", "p50 us rdmablk / SPDK"]
            + [f"{LABEL[t]} CPU us/IO" for t in cols])
    rows, bars = [head], []
    for p in order:
        mb = lambda t: cell(p, t, lambda v: f"{v * BS.get(p, 0) / 1e6:.0f}")
        rows.append([p] + [cell(p, t, bj.fmt_iops) for t in cols] + [mb(t) for t in cols]
                    + [ratio(p, "rdmablk", "rbd"), ratio(p, "rdmablk", "spdk"),
                       f"{med(p, 'rdmablk', 'p50', '{:.0f}')} / {med(p, 'spdk', 'p50', '{:.0f}')}"]
                    + [med(p, t, "tgt_us") for t in cols])
        bars += [(f"{p}: rdmablk / rbd bench", stats(p, "rdmablk", "rbd")),
                 (f"{p}: rdmablk / SPDK bdev_rbd", stats(p, "rdmablk", "spdk"))]
    bj.print_table(rows)
    print()
    print("IOPS: median (range over rounds); ratios formed round by round: median (range). p50:")
    print("rdmablk-perf's completion latency against each target. CPU us/IO: the target process's")
    print("utime + stime (every thread, librbd's included) over the host's I/O phase less its first")
    print("second, per I/O (a polling reactor is charged its whole core); rbd bench: its whole process.")
    if why:
        print(f"SPDK bdev_rbd not built: {why}")
    bj.write_ratios(d, bars)
    for f in fails:
        print(f"note: {f}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
