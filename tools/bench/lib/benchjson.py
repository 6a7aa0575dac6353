#!/usr/bin/env python3
"""Reads rdmablk-perf --json and fio --output-format=json reports for tools/bench/*.

  benchjson.py point FILE          -> "iops p50_us p99_us errors" of one report (or "ERR why")
  benchjson.py soft-vs-local DIR   -> the soft-vs-local table (markdown) from DIR/manifest
  benchjson.py rxe-vs-kernel DIR   -> the rxe-vs-kernel tables (markdown) from DIR/manifest

A manifest line is tab-separated: key, workload, column, report file (relative to DIR),
exit status of the command. Latency is the completion latency as each tool reports it:
rdmablk-perf's clat (from just before submit to the completion) and fio's total latency
(lat_ns, submit + completion: the same span; fio must run with --lat_percentiles=1).
"""
import json
import os
import sys


def load(path):
    """Returns (iops, p50_us, p99_us, errors) or raises ValueError with a reason."""
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
    return o["iops"], p("50.000000"), p("99.000000"), errors


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
    """{(workload, column): (iops, p50, p99, errors) | "ERR ..."} and the workload order."""
    points, order, notes = {}, [], []
    with open(os.path.join(d, "manifest")) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            _key, workload, column, report, rc = line.split("\t")
            if workload not in order:
                order.append(workload)
            try:
                pt = load(os.path.join(d, report))
                if rc != "0":
                    notes.append(f"{workload} / {column}: exit status {rc} ({report})")
                if pt[3]:
                    notes.append(f"{workload} / {column}: {pt[3]} I/O errors ({report})")
            except ValueError as e:
                pt = f"ERR {e}"
                notes.append(f"{workload} / {column}: FAILED, exit status {rc}: {e} ({report})")
            points[(workload, column)] = pt
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


def soft_vs_local(d):
    points, order, notes = read_manifest(d)
    have_fio = any(c == "fio" for (_, c) in points)
    have_eng = any(c == "fio-rdmablk" for (_, c) in points)
    head = ["workload", "rdmablk soft IOPS", "local IOPS"]
    if have_fio:
        head.append("fio IOPS")
    if have_eng:
        head.append("fio+rdmablk IOPS")
    head.append("soft / local")
    if have_fio:
        head.append("local / fio")
    if have_eng:
        head.append("fio+rdmablk / soft")
    head += ["soft p50/p99 us", "local p50/p99 us"]
    if have_fio:
        head.append("fio p50/p99 us")
    if have_eng:
        head.append("fio+rdmablk p50/p99 us")
    rows = [head]
    for w in order:
        s, l, f, e = (points.get((w, c)) for c in ("soft", "local", "fio", "fio-rdmablk"))
        row = [w, cell_iops(s), cell_iops(l)]
        if have_fio:
            row.append(cell_iops(f))
        if have_eng:
            row.append(cell_iops(e))
        row.append(ratio(s, l))
        if have_fio:
            row.append(ratio(l, f))
        if have_eng:
            row.append(ratio(e, s))
        row += [fmt_lat(s), fmt_lat(l)]
        if have_fio:
            row.append(fmt_lat(f))
        if have_eng:
            row.append(fmt_lat(e))
        rows.append(row)
    print_table(rows)
    print_notes(notes)


def rxe_vs_kernel(d):
    points, order, notes = read_manifest(d)
    reports = read_reports(d)
    # workload keys are "BACKING TOOL WORKLOAD" (e.g. "null fio 4k-randread-qd1")
    rows = [["backing", "host", "workload", "rdmablk IOPS", "nvmet IOPS", "rdmablk / nvmet",
             "rdmablk p50/p99 us", "nvmet p50/p99 us", "RNR rdmablk/nvmet"]]
    for w in order:
        backing, tool, workload = w.split(" ", 2)
        r, n = points.get((w, "rdmablk")), points.get((w, "nvmet"))
        host = {"fio": "Linux nvme-rdma + fio", "perf": "rdmablk-perf",
                "perfpush": "rdmablk-perf, push writes"}.get(tool, tool)
        rnr = "/".join(rxe_counter(d, reports.get((w, c)), "rcvd_rnr_err")
                       for c in ("rdmablk", "nvmet"))
        rows.append([backing, host, workload, cell_iops(r), cell_iops(n), ratio(r, n),
                     fmt_lat(r), fmt_lat(n), rnr])
    print_table(rows)
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


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    cmd, arg = sys.argv[1], sys.argv[2]
    if cmd == "point":
        try:
            iops, p50, p99, errors = load(arg)
            print(f"{iops:.0f} {fmt_us(p50)} {fmt_us(p99)} {errors}")
        except ValueError as e:
            print(f"ERR {e}")
    elif cmd == "soft-vs-local":
        soft_vs_local(arg)
    elif cmd == "rxe-vs-kernel":
        rxe_vs_kernel(arg)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
