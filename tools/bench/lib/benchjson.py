#!/usr/bin/env python3
"""Reads rdmablk-perf --json and fio --output-format=json reports for tools/bench/*.

  benchjson.py point FILE          -> "iops p50_us p99_us errors" of one report (or "ERR why")
  benchjson.py soft-vs-local DIR   -> the soft-vs-local tables (markdown) from DIR/manifest
  benchjson.py rxe-vs-kernel DIR   -> the rxe-vs-kernel tables (markdown) from DIR/manifest
                                      (both also write DIR/ratios.tsv, the IOPS ratios for
                                      rdmablk-chart)
  benchjson.py rusage FILE CMD...  -> runs CMD, writes the CPU time of CMD and everything it
                                      waited for ("user_us sys_us") to FILE, exits as CMD did

A manifest line is tab-separated: key, workload, column, report file (relative to DIR),
exit status of the command. A workload and column may appear once per repeat; the
soft-vs-local table shows medians over the repeats. Beside a report REP.json, REP.cpu holds
"host_us target_us": the command's own CPU time (all its threads and child processes, set-up
included) and the target process's over the same span (utime + stime from /proc). Latency is the completion latency as each tool reports it:
rdmablk-perf's clat (from just before submit to the completion) and fio's total latency
(lat_ns, submit + completion: the same span; fio must run with --lat_percentiles=1).
"""
import json
import os
import sys


def load(path):
    """Returns (iops, p50_us, p99_us, errors) or raises ValueError with a reason."""
    return load_full(path)[:4]


def load_full(path):
    """Returns (iops, p50_us, p99_us, errors, ios) or raises ValueError with a reason."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise ValueError(f"no report ({e.strerror})")
    # fio may print warnings before its JSON; rdmablk-perf prints only JSON on stdout.
    start = text.find("{")
    if start < 0:
        raise ValueError("report has no JSON")
    try:
        doc = json.loads(text[start:])
    except json.JSONDecodeError as e:
        raise ValueError(f"bad JSON: {e}")
    if "rdmablk-perf_version" in doc:
        job = doc.get("total") or doc["jobs"][0]
        lat_key = "clat_ns"
    elif "fio version" in doc:
        job = doc["jobs"][0]
        lat_key = "lat_ns"
    else:
        raise ValueError("neither an rdmablk-perf nor a fio report")
    op = max(("read", "write"), key=lambda o: job.get(o, {}).get("total_ios", 0))
    o = job[op]
    if o.get("total_ios", 0) == 0:
        raise ValueError("no I/O completed")
    pct = o.get(lat_key, {}).get("percentile", {})

    def p(name):
        v = pct.get(name)
        return None if v is None else v / 1000.0

    # failed I/Os: rdmablk-perf counts them per op and per job (the same I/Os); fio per job
    errors = max(int(job.get("error", 0) or 0), int(o.get("errors", 0) or 0))
    return o["iops"], p("50.000000"), p("99.000000"), errors, o["total_ios"]


def fmt_iops(v):
    if v is None:
        return "-"
    if v >= 100000:
        return f"{v / 1000:.0f}k"
    if v >= 10000:
        return f"{v / 1000:.1f}k"
    return f"{v:.0f}"


def fmt_us(v):
    if v is None:
        return "-"
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}"


def fmt_lat(pt):
    if pt is None or isinstance(pt, str):
        return "-"
    return f"{fmt_us(pt[1])} / {fmt_us(pt[2])}"


def ratio(a, b):
    if a is None or b is None or isinstance(a, str) or isinstance(b, str) or not b[0]:
        return "-"
    return f"{a[0] / b[0]:.2f}"


def read_manifest(d):
    """{(workload, column): (iops, p50, p99, errors) | "ERR ..."} and the workload order.
    A point measured more than once keeps its last measurement."""
    runs, order, notes = read_runs(d)
    return {k: v[-1] for k, v in runs.items()}, order, notes


def load_cpu(report_path, ios):
    """(host us/IO, target us/IO) from the .cpu file beside a report; None where unknown."""
    try:
        with open(report_path[: -len(".json")] + ".cpu") as f:
            host_us, target_us = (float(x) for x in f.read().split())
    except (OSError, ValueError):
        return None, None
    if not ios:
        return None, None
    return host_us / ios, target_us / ios


# tools/bench/spdk-tcp's manifest fields (one line a point, host and target per round).
SPDK_TCP_FIELDS = ("round", "target", "host", "point", "rc", "iops", "p50", "p99", "ios",
                   "errors", "tgt_us", "host_us", "tgt_whole_us", "host_whole_us", "report")


def spdk_tcp_point(r):
    """(workload, column, point) of one spdk-tcp record: the workload names the point and
    the host, the column the target."""
    workload, column = f"{r['point']} ({r['host']})", r["target"]
    if r["rc"] != "0" or r["iops"] == "-" or r["errors"] not in ("0", "-"):
        return workload, column, f"ERR exit {r['rc']}, {r['errors']} I/O errors ({r['report']})"
    num = lambda k: None if r[k] == "-" else float(r[k])
    return workload, column, (num("iops"), num("p50"), num("p99"), 0, num("host_us"),
                              num("tgt_us"))


def read_runs(d):
    """{(workload, column): [point per repeat]}, the workload order and notes. A point is
    (iops, p50, p99, errors, host_us_per_io, target_us_per_io) or "ERR ..."."""
    points, order, notes = {}, [], []
    with open(os.path.join(d, "manifest")) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            fields = line.split("\t")
            if len(fields) == len(SPDK_TCP_FIELDS):
                # tools/bench/spdk-tcp's record: the figures are in the manifest itself.
                workload, column, pt = spdk_tcp_point(dict(zip(SPDK_TCP_FIELDS, fields)))
                if workload not in order:
                    order.append(workload)
                if isinstance(pt, str):
                    notes.append(f"{workload} / {column}: {pt}")
                points.setdefault((workload, column), []).append(pt)
                continue
            _key, workload, column, report, rc = fields
            if workload not in order:
                order.append(workload)
            try:
                iops, p50, p99, errors, ios = load_full(os.path.join(d, report))
                pt = (iops, p50, p99, errors) + load_cpu(os.path.join(d, report), ios)
                if rc != "0":
                    notes.append(f"{workload} / {column}: exit status {rc} ({report})")
                if pt[3]:
                    notes.append(f"{workload} / {column}: {pt[3]} I/O errors ({report})")
            except ValueError as e:
                pt = f"ERR {e}"
                notes.append(f"{workload} / {column}: FAILED, exit status {rc}: {e} ({report})")
            points.setdefault((workload, column), []).append(pt)
    return points, order, notes


def read_reports(d):
    """{(workload, column): report file name} from DIR/manifest."""
    out = {}
    with open(os.path.join(d, "manifest")) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) == 5:
                out[(parts[1], parts[2])] = parts[3]
    return out


def rxe_counter(d, report, name):
    """A counter's change over one point, from REPORT's .rxe file ("-" if none)."""
    if not report:
        return "-"
    path = os.path.join(d, report[: -len(".json")] + ".rxe")
    try:
        with open(path) as f:
            for line in f:
                k, _, v = line.partition(" ")
                if k == name:
                    return v.strip()
        return "0"
    except OSError:
        return "-"


def cell_iops(pt):
    if isinstance(pt, str):
        return "ERR"
    return "-" if pt is None else fmt_iops(pt[0])


def median(xs):
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    m = len(xs) // 2
    return xs[m] if len(xs) % 2 else (xs[m - 1] + xs[m]) / 2


def combine(runs):
    """One point from a point's repeats: the median of each field over the runs that
    worked; "ERR ..." if none did; None if never measured."""
    if not runs:
        return None
    ok = [r for r in runs if not isinstance(r, str)]
    if not ok:
        return runs[-1]
    return tuple(median([r[i] for r in ok]) for i in range(len(ok[0])))


def ratio_stats(a_runs, b_runs, field=0):
    """(median, min, max) of the per-repeat ratios a/b of a point's FIELD (0: IOPS; 5: target
    us/IO) (repeat k of a against repeat k of b, measured seconds apart), and how many there
    were; None if none could be formed."""
    rs = [a[field] / b[field] for a, b in zip(a_runs or [], b_runs or [])
          if not isinstance(a, str) and not isinstance(b, str)
          and a[field] is not None and b[field]]
    return (median(rs), min(rs), max(rs), len(rs)) if rs else None


def ratio_runs(a_runs, b_runs, field=0):
    """ratio_stats as the table shows it, with the range when there are several repeats:
    "1.02 (0.95-1.10)"."""
    st = ratio_stats(a_runs, b_runs, field)
    if st is None:
        return "-"
    m, lo, hi, n = st
    return f"{m:.2f}" if n == 1 else f"{m:.2f} ({lo:.2f}-{hi:.2f})"


def write_ratios(d, rows):
    """DIR/ratios.tsv for rdmablk-chart: (label, ratio_stats or None) per bar; rows without a
    ratio are left out."""
    with open(os.path.join(d, "ratios.tsv"), "w") as f:
        f.write("# label\tratio\tlow\thigh (rdmablk-chart draws this)\n")
        for label, st in rows:
            if st is None:
                continue
            m, lo, hi, n = st
            rng = f"{lo:.4f}\t{hi:.4f}" if n > 1 else "-\t-"
            f.write(f"{label}\t{m:.4f}\t{rng}\n")


def fmt_cpu(pt, i):
    if pt is None or isinstance(pt, str) or pt[i] is None:
        return "-"
    return f"{pt[i]:.1f}"


def soft_vs_local(d):
    runs, order, notes = read_runs(d)
    cols = ("soft", "tcp", "local", "fio", "fio-rdmablk", "fio-rdmablk-tcp", "soft-nostats")
    have = {c for (_, c) in runs}
    shown = [c for c in cols if c in ("soft", "local") or c in have]
    label = {"soft": "rdmablk soft", "tcp": "rdmablk tcp", "local": "local", "fio": "fio",
             "fio-rdmablk": "fio+rdmablk", "fio-rdmablk-tcp": "fio+rdmablk tcp",
             "soft-nostats": "soft, no stats"}
    ratios = [("soft / local", "soft", "local")]
    if "tcp" in have:
        ratios += [("tcp / local", "tcp", "local"), ("tcp / soft", "tcp", "soft")]
    if "fio" in have:
        ratios.append(("local / fio", "local", "fio"))
    if "fio-rdmablk" in have:
        ratios.append(("fio+rdmablk / soft", "fio-rdmablk", "soft"))
    if "fio-rdmablk-tcp" in have:
        ratios.append(("fio+rdmablk tcp / tcp", "fio-rdmablk-tcp", "tcp"))
    if "soft-nostats" in have:
        ratios.append(("stats on / off", "soft", "soft-nostats"))
    head = ["workload"] + [f"{label[c]} IOPS" for c in shown] + [r[0] for r in ratios]
    head += [f"{label[c]} p50/p99 us" for c in shown]
    rows = [head]
    bars = []
    for w in order:
        pts = {c: combine(runs.get((w, c))) for c in shown}
        row = [w] + [cell_iops(pts[c]) for c in shown]
        row += [ratio_runs(runs.get((w, a)), runs.get((w, b))) for _, a, b in ratios]
        row += [fmt_lat(pts[c]) for c in shown]
        rows.append(row)
        bars += [(f"{w}: {name}", ratio_stats(runs.get((w, a)), runs.get((w, b))))
                 for name, a, b in ratios]
    print_table(rows)
    write_ratios(d, bars)
    # CPU per I/O: the tool's whole process (host) and the target (soft and fio+rdmablk).
    print()
    head = ["workload"] + [f"{label[c]} host us/IO" for c in shown]
    tcols = [c for c in shown if c in ("soft", "tcp", "fio-rdmablk", "fio-rdmablk-tcp", "soft-nostats")]
    head += [f"{label[c]} target us/IO" for c in tcols]
    cpu_ab = "soft-nostats" in have
    if cpu_ab:
        head.append("target us/IO stats on / off")
    rows = [head]
    for w in order:
        pts = {c: combine(runs.get((w, c))) for c in shown}
        row = [w] + [fmt_cpu(pts[c], 4) for c in shown] + [fmt_cpu(pts[c], 5) for c in tcols]
        if cpu_ab:
            row.append(ratio_runs(runs.get((w, "soft")), runs.get((w, "soft-nostats")), 5))
        rows.append(row)
    print_table(rows)
    print_notes(notes)


def rxe_vs_kernel(d):
    points, order, notes = read_manifest(d)
    reports = read_reports(d)
    # workload keys are "BACKING TOOL WORKLOAD" (e.g. "null fio 4k-randread-qd1")
    rows = [["backing", "host", "workload", "rdmablk IOPS", "nvmet IOPS", "rdmablk / nvmet",
             "rdmablk p50/p99 us", "nvmet p50/p99 us", "RNR rdmablk/nvmet"]]
    bars = []
    for w in order:
        backing, tool, workload = w.split(" ", 2)
        r, n = points.get((w, "rdmablk")), points.get((w, "nvmet"))
        host = {"fio": "Linux nvme-rdma + fio", "perf": "rdmablk-perf",
                "perfpush": "rdmablk-perf, push writes"}.get(tool, tool)
        rnr = "/".join(rxe_counter(d, reports.get((w, c)), "rcvd_rnr_err")
                       for c in ("rdmablk", "nvmet"))
        rows.append([backing, host, workload, cell_iops(r), cell_iops(n), ratio(r, n),
                     fmt_lat(r), fmt_lat(n), rnr])
        bars.append((f"{backing} {tool} {workload}: rdmablk / nvmet",
                     ratio_stats([r] if r else [], [n] if n else [])))
    print_table(rows)
    write_ratios(d, bars)
    print_notes(notes)


def print_table(rows):
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for k, r in enumerate(rows):
        print("| " + " | ".join(c.ljust(widths[i]) for i, c in enumerate(r)) + " |")
        if k == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")


def print_notes(notes):
    for n in notes:
        print(f"\nnote: {n}", end="")
    if notes:
        print()


def rusage(out, argv):
    """Runs argv; writes "user_us sys_us" of it and its waited-for descendants to OUT; returns
    its exit status (128 + signal if killed)."""
    import resource
    import subprocess

    try:
        rc = subprocess.call(argv)
    except OSError as e:
        print(f"benchjson.py rusage: {argv[0]}: {e.strerror}", file=sys.stderr)
        return 127
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(out, "w") as f:
        f.write(f"{ru.ru_utime * 1e6:.0f} {ru.ru_stime * 1e6:.0f}\n")
    return rc if rc >= 0 else 128 - rc


def main():
    if len(sys.argv) < 3 or (len(sys.argv) != 3 and sys.argv[1] != "rusage"):
        sys.exit(__doc__)
    cmd, arg = sys.argv[1], sys.argv[2]
    if cmd == "point":
        try:
            iops, p50, p99, errors = load(arg)
            print(f"{iops:.0f} {fmt_us(p50)} {fmt_us(p99)} {errors}")
        except ValueError as e:
            print(f"ERR {e}")
    elif cmd == "rusage":
        sys.exit(rusage(sys.argv[2], sys.argv[3:]))
    elif cmd == "soft-vs-local":
        soft_vs_local(arg)
    elif cmd == "rxe-vs-kernel":
        rxe_vs_kernel(arg)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
