"""tools/bench/spdk-tcp's helper (the script runs it as python3 tools/bench/lib/spdk_tcp.py ...).

  point MANIFEST KEYS HOST TPID RUNTIME GUARD REPORT -- CMD...
      runs CMD (a host) with stdout to REPORT, stderr to REPORT.err; samples the target's and
      the host's utime + stime every 0.1 s; appends one record to MANIFEST; prints a summary
  idle TPID PORT NQN HOSTS SETTLE SECONDS
      HOSTS silent NVMe/TCP hosts (admin queue + 2 I/O queues each, Keep Alive only); prints
      the target's CPU over SECONDS after SETTLE, in % of one core
  table DIR LIBDIR
      the markdown tables from DIR/manifest and DIR/idle
"""
import json
import os
import re
import signal
import socket
import struct
import sys
import time
import uuid

HZ = os.sysconf("SC_CLK_TCK")
MANIFEST_FIELDS = ("round", "target", "host", "point", "rc", "iops", "p50", "p99", "ios",
                   "errors", "tgt_us", "host_us", "tgt_whole_us", "host_whole_us", "report")


def ticks(pid):
    """utime + stime of a process (every thread), in clock ticks; None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return None
    fields = s[s.rfind(")") + 2:].split()
    return int(fields[11]) + int(fields[12])


def now_us():
    return time.time_ns() // 1000


# ------------------------------------------------------------------------------ one point
def parse_perf(path):
    """rdmablk-perf --json: (iops, p50_us, p99_us, ios, errors, (start_us, end_us))."""
    text = open(path).read()
    d = json.loads(text[text.find("{"):])
    j = d.get("total") or d["jobs"][0]
    ops = [j[o] for o in ("read", "write") if j.get(o, {}).get("total_ios", 0)]
    if not ops:
        raise ValueError("no I/O completed")
    main = max(ops, key=lambda o: o["total_ios"])  # the mix: the reads' latency
    pct = main.get("clat_ns", {}).get("percentile", {})
    p = lambda k: pct[k] / 1000.0 if k in pct else None
    errors = max(int(j.get("error", 0) or 0), sum(int(o.get("errors", 0) or 0) for o in ops))
    end = d["timestamp_ms"] * 1000
    return (sum(o["iops"] for o in ops), p("50.000000"), p("99.000000"),
            sum(o["total_ios"] for o in ops), errors, (end - j["elapsed_ms"] * 1000, end))


def parse_spdk(path, runtime, marks):
    """spdk_nvme_perf -L: (iops, p50_us, p99_us, ios, errors, (start_us, end_us) or None)."""
    text = open(path, errors="replace").read()
    iops = None
    for line in text.splitlines():
        f = line.split()
        if f[:2] == ["Total", ":"] and len(f) >= 7:
            iops = float(f[2])
    if not iops:
        raise ValueError("no Total line with I/O")
    pct = dict(re.findall(r"^\s*([\d.]+)% :\s*([\d.]+)us", text, re.M))
    p = lambda k: float(pct[k]) if k in pct else None
    errors = len(re.findall(r"completed with error|I/O failed|starting I/O failed", text))
    # its workers run -t seconds from "Launching workers" (their qpairs' connect included, left
    # out with the first second); the result table is printed after
    window = (marks["launch"], marks["launch"] + runtime * 1e6) if "launch" in marks else None
    return iops, p("50.00000"), p("99.00000"), iops * runtime, errors, window


def steady(samples, window, idx, iops):
    """CPU us per I/O of column IDX of SAMPLES (t_us, target, host) inside WINDOW, less its
    first second (a quarter of it if shorter) and last 0.3 s."""
    if not window or not iops:
        return None
    start, end = window
    start += min(1e6, (end - start) / 4)
    end -= 3e5
    w = [s for s in samples if start <= s[0] <= end and s[idx] is not None]
    if len(w) < 2 or w[-1][0] <= w[0][0]:
        return None
    rate = (w[-1][idx] - w[0][idx]) / HZ / ((w[-1][0] - w[0][0]) / 1e6)
    return rate * 1e6 / iops


def point(args):
    manifest, keys, host, tpid, runtime, guard, report = args[:7]
    cmd = args[8:]
    tpid, runtime, guard = int(tpid), float(runtime), float(guard)
    base = report.rsplit(".", 1)[0]
    marks, samples = {}, []
    tg0 = ticks(tpid)
    with open(report, "w") as out, open(base + ".err", "w") as err:
        try:
            pid = os.posix_spawnp(cmd[0], cmd, os.environ, file_actions=[
                (os.POSIX_SPAWN_DUP2, out.fileno(), 1), (os.POSIX_SPAWN_DUP2, err.fileno(), 2)])
        except OSError as e:
            pid, status, ru = None, 127 << 8, None
            err.write(f"{cmd[0]}: {e.strerror}\n")

    def stop(signum, _frame):
        if pid:
            os.kill(pid, signal.SIGKILL)
        sys.exit(128 + signum)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    deadline = time.monotonic() + guard
    timed_out = False
    while pid:
        t = now_us()
        samples.append((t, ticks(tpid), ticks(pid)))
        if host == "spdk_nvme_perf" and "launch" not in marks:
            if "Launching workers" in open(report, errors="replace").read():
                marks["launch"] = t
        time.sleep(0.1)
        got, status, ru = os.wait4(pid, os.WNOHANG)
        if got:
            break
        if time.monotonic() > deadline:
            timed_out = True
            os.kill(pid, signal.SIGKILL)
            _, status, ru = os.wait4(pid, 0)
            break
    tg1 = ticks(tpid)
    rc = 124 if timed_out else os.waitstatus_to_exitcode(status)
    rc = 128 - rc if rc < 0 else rc
    rec = dict(zip(MANIFEST_FIELDS[:4], keys.split(",")))
    rec.update(rc=str(rc), report=os.path.basename(report))
    why = ""
    try:
        if host == "rdmablk-perf":
            iops, p50, p99, ios, errors, window = parse_perf(report)
        else:
            iops, p50, p99, ios, errors, window = parse_spdk(report, runtime, marks)
        f = lambda v, n=1: "-" if v is None else f"{v:.{n}f}"
        whole_t = None if tg0 is None or tg1 is None else (tg1 - tg0) / HZ * 1e6 / ios
        whole_h = None if ru is None else (ru.ru_utime + ru.ru_stime) * 1e6 / ios
        rec.update(iops=f(iops, 0), p50=f(p50), p99=f(p99), ios=f(ios, 0), errors=str(errors),
                   tgt_us=f(steady(samples, window, 1, iops), 2),
                   host_us=f(steady(samples, window, 2, iops), 2),
                   tgt_whole_us=f(whole_t, 2), host_whole_us=f(whole_h, 2))
    except (OSError, ValueError, KeyError, IndexError) as e:
        why = f"{type(e).__name__}: {e}"
    if timed_out:
        why = f"killed after {guard:.0f} s " + why
    with open(manifest, "a") as m:
        m.write("\t".join(rec.get(k, "-") for k in MANIFEST_FIELDS) + "\n")
    with open(base + ".samples", "w") as s:
        s.write(f"# t_us target_ticks host_ticks (HZ {HZ}); marks {marks}\n")
        s.writelines(f"{t} {a} {b}\n" for t, a, b in samples)
    ok = rc == 0 and not why and rec.get("errors") == "0"
    print(f"  = {'ok' if ok else 'FAILED'} exit {rc}: {rec.get('iops', '-')} IOPS, p50/p99 "
          f"{rec.get('p50', '-')}/{rec.get('p99', '-')} us, CPU us/IO target "
          f"{rec.get('tgt_us', '-')} host {rec.get('host_us', '-')} (whole run "
          f"{rec.get('tgt_whole_us', '-')} / {rec.get('host_whole_us', '-')})"
          f"{', errors ' + rec['errors'] if rec.get('errors', '0') != '0' else ''} {why}")


# --------------------------------------------------------------- silent NVMe/TCP hosts
class Queue:
    """One NVMe/TCP connection from the host's side: ICReq, then one command at a time."""

    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.cid = 0
        # ICReq: CH (type 0, hlen 128, pdo 0, plen 128), PFV 0, HPDA 0, no digests, MAXR2T 0
        self.s.sendall(struct.pack("<BBBBIHBBI", 0, 0, 128, 0, 128, 0, 0, 0, 0).ljust(128, b"\0"))
        if self.pdu()[0] != 0x01:
            raise RuntimeError("no ICResp")

    def recv(self, n):
        b = b""
        while len(b) < n:
            c = self.s.recv(n - len(b))
            if not c:
                raise RuntimeError("the target closed the connection")
            b += c
        return b

    def pdu(self):
        typ, _flags, _hlen, _pdo, plen = struct.unpack("<BBBBI", self.recv(8))
        return typ, self.recv(plen - 8)

    def cmd(self, sqe, data=b""):
        """Sends SQE (bytearray(64)) with DATA in the capsule; returns (dw0, status)."""
        self.cid = (self.cid + 1) & 0xFFFF
        struct.pack_into("<BH", sqe, 1, 0x40, self.cid)  # PSDT: SGL; CID
        # SGL: in-capsule data block (offset 0) or a transport data block of no data
        struct.pack_into("<QI3xB", sqe, 24, 0, len(data), 0x01 if data else 0x5A)
        self.s.sendall(struct.pack("<BBBBI", 0x04, 0, 72, 72 if data else 0, 72 + len(data))
                       + bytes(sqe) + data)
        while True:
            typ, body = self.pdu()
            if typ == 0x05:  # CapsuleResp: the CQE
                dw0, = struct.unpack_from("<I", body, 0)
                cid, status = struct.unpack_from("<HH", body, 12)  # CQE: DW0, DW1, SQHD, SQID, CID, status
                if cid == self.cid:
                    return dw0, status >> 1

    def connect(self, qid, sqsize, cntlid, kato_ms, hostid, subnqn, hostnqn):
        sqe = bytearray(64)
        sqe[0], sqe[4] = 0x7F, 0x01  # Fabrics, Connect
        struct.pack_into("<HHHBxI", sqe, 40, 0, qid, sqsize, 0, kato_ms)
        data = bytearray(1024)
        data[0:16] = hostid
        struct.pack_into("<H", data, 16, cntlid)
        data[256:256 + len(subnqn)] = subnqn.encode()
        data[512:512 + len(hostnqn)] = hostnqn.encode()
        dw0, st = self.cmd(sqe, bytes(data))
        if st:
            raise RuntimeError(f"Connect qid {qid}: status 0x{st:x}")
        return dw0 & 0xFFFF

    def prop(self, offset, value=None):
        sqe = bytearray(64)
        sqe[0], sqe[4] = 0x7F, 0x04 if value is None else 0x00  # Property Get / Set
        struct.pack_into("<I", sqe, 44, offset)
        if value is not None:
            struct.pack_into("<Q", sqe, 48, value)
        dw0, st = self.cmd(sqe)
        if st:
            raise RuntimeError(f"Property {'Get' if value is None else 'Set'} 0x{offset:x}: status 0x{st:x}")
        return dw0

    def keep_alive(self):
        sqe = bytearray(64)
        sqe[0] = 0x18
        if self.cmd(sqe)[1]:
            raise RuntimeError("Keep Alive failed")


def idle(args):
    tpid, port, nqn, n, settle, seconds = int(args[0]), int(args[1]), args[2], *map(int, args[3:6])
    kato_ms, io_queues = 5000, 2
    admins, queues = [], []
    for i in range(n):
        hostid = uuid.uuid4()
        hostnqn = f"nqn.2014-08.org.nvmexpress:uuid:{hostid}"
        a = Queue(port)
        cntlid = a.connect(0, 31, 0xFFFF, kato_ms, hostid.bytes, nqn, hostnqn)
        a.prop(0x14, 0x00460001)  # CC: EN, IOSQES 6, IOCQES 4
        for _ in range(100):
            if a.prop(0x1C) & 1:  # CSTS.RDY
                break
            time.sleep(0.05)
        else:
            raise RuntimeError("CSTS.RDY did not come")
        for qid in range(1, io_queues + 1):
            q = Queue(port)
            q.connect(qid, 31, cntlid, 0, hostid.bytes, nqn, hostnqn)
            queues.append(q)
        admins.append(a)
    print(f"connected {n} host(s)", file=sys.stderr)
    t_end = time.monotonic() + settle + seconds
    next_ka = time.monotonic() + kato_ms / 2000
    t0 = w0 = None
    while True:
        now = time.monotonic()
        if t0 is None and now >= t_end - seconds:
            t0, w0 = ticks(tpid), time.monotonic()
        if now >= t_end:
            break
        if now >= next_ka:
            for a in admins:
                a.keep_alive()
            next_ka += kato_ms / 2000
        wake = min(next_ka, t_end) if t0 is not None else min(next_ka, t_end - seconds)
        time.sleep(max(0.0, wake - time.monotonic()))
    t1, w1 = ticks(tpid), time.monotonic()
    if t0 is None or t1 is None:
        raise RuntimeError("the target is gone")
    print(f"{100.0 * (t1 - t0) / HZ / (w1 - w0):.2f}")
    for q in admins + queues:
        q.s.close()


# ------------------------------------------------------------------------------ the table
def table(d, lib):
    sys.path.insert(0, lib)
    import benchjson as bj
    targets = os.environ["TABLE_TARGETS"].split()
    hosts = os.environ["TABLE_HOSTS"].split()
    label = {"rdmablk": "rdmablk-target", "spdk": "SPDK polling", "spdk-intr": "SPDK interrupt",
             "spdk-intr-aio": "SPDK interrupt, aio", "rdmablk-tls": "rdmablk-target TLS",
             "spdk-tls": "SPDK polling TLS"}
    recs, order, fails, tried = {}, [], [], {}
    path = os.path.join(d, "manifest")
    for line in open(path) if os.path.exists(path) else []:
        r = dict(zip(MANIFEST_FIELDS, line.rstrip("\n").split("\t")))
        key = (r["point"], r["host"], r["target"])
        if r["point"] not in order:
            order.append(r["point"])
        tried[key] = tried.get(key, 0) + 1
        if r["rc"] == "0" and r["iops"] != "-" and r["errors"] == "0":
            num = lambda k: None if r[k] == "-" else float(r[k])
            recs.setdefault(key, {})[r["round"]] = {k: num(k) for k in MANIFEST_FIELDS[5:14]}
        else:
            why = f"exit {r['rc']}" + (f", {r['errors']} I/O errors" if r["errors"] not in ("-", "0") else "")
            fails.append(f"{r['point']} / {r['host']} -> {label[r['target']]}, round {r['round']}: "
                         f"FAILED ({why}; {r['report']}, .err beside it)")

    def vals(key, k):
        return [v[k] for v in recs.get(key, {}).values() if v[k] is not None]

    def med(key, k):
        return bj.median(vals(key, k))

    def fails_note(key):
        ok, n = len(recs.get(key, {})), tried.get(key, 0)
        return "" if ok == n else f" ({n - ok} of {n} FAILED)"

    def iops(key):
        xs = vals(key, "iops")
        if not xs:
            return "FAILED" if tried.get(key) else "-"
        s = bj.fmt_iops(bj.median(xs))
        if len(xs) > 1:
            s += f" ({bj.fmt_iops(min(xs))}-{bj.fmt_iops(max(xs))})"
        return s + fails_note(key)

    def ratio_stats(ka, kb, k="iops"):
        a, b = recs.get(ka, {}), recs.get(kb, {})
        rs = [a[r][k] / b[r][k] for r in a if r in b and a[r][k] is not None and b[r][k]]
        return (bj.median(rs), min(rs), max(rs), len(rs)) if rs else None

    def fx(v):
        """A ratio: two decimals, or two significant digits below 0.1 (SPDK's TLS at 128 KiB)."""
        return f"{v:.2f}" if v >= 0.1 else f"{v:.2g}"

    def ratio(ka, kb, k="iops"):
        st = ratio_stats(ka, kb, k)
        if st is None:
            return "-"
        m, lo, hi, n = st
        return f"{fx(m)}x" if n == 1 else f"{fx(m)}x ({fx(lo)}-{fx(hi)})"

    def lat(key):
        return f"{bj.fmt_us(med(key, 'p50'))} / {bj.fmt_us(med(key, 'p99'))}"

    def cpu(key, k="tgt_us"):
        v = med(key, k)
        return "-" if v is None else f"{v:.2f}" if v < 10 else f"{v:.1f}"

    bars = []
    # The clear-text targets in one table per host, the TLS ones (rdmablk-tls, spdk-tls) in
    # another: their ratio to each other and what TLS costs each against its clear text.
    plain = [t for t in targets if not t.endswith("-tls")]
    tls = [t for t in targets if t.endswith("-tls")]
    others = [t for t in plain if t != "rdmablk"]
    for h in hosts:
        if not plain:
            break
        print(f"Host {h}: the targets (IOPS median (range over rounds); ratios round by round)")
        print()
        head = ["point"] + [f"{label[t]} IOPS" for t in plain]
        if "rdmablk" in plain:
            head += [f"rdmablk / {label[t]}" for t in others]
        head += [f"{label[t]} p50 / p99 us" for t in plain]
        head += [f"{label[t]} CPU us/IO" for t in plain]
        rows = [head]
        for p in order:
            k = {t: (p, h, t) for t in plain}
            row = [p] + [iops(k[t]) for t in plain]
            if "rdmablk" in plain:
                row += [ratio(k["rdmablk"], k[t]) for t in others]
                bars += [(f"{p} {h}: rdmablk / {label[t]}", ratio_stats(k["rdmablk"], k[t]))
                         for t in others]
            row += [lat(k[t]) for t in plain] + [cpu(k[t]) for t in plain]
            rows.append(row)
        bj.print_table(rows)
        print()
    both = {"rdmablk-tls", "spdk-tls"} <= set(tls)
    costs = [t for t in ("rdmablk-tls", "spdk-tls") if t in tls and t[:-4] in targets]
    for h in hosts:
        if not tls:
            break
        print(f"Host {h}: TLS 1.3, PSK (IOPS median (range over rounds); ratios round by round;")
        print("TLS / clear: the same target and host with TLS and in clear text, IOPS and CPU us/IO)")
        print()
        head = ["point"] + [f"{label[t]} IOPS" for t in tls]
        head += ["rdmablk TLS / SPDK TLS"] if both else []
        head += [f"{label[t]} p50 / p99 us" for t in tls]
        head += [f"{label[t]} CPU us/IO" for t in tls]
        for t in costs:
            who = "rdmablk" if t == "rdmablk-tls" else "SPDK"
            head += [f"{who} TLS / clear {x}" for x in ("IOPS", "target CPU", "host CPU")]
        rows = [head]
        for p in order:
            k = {t: (p, h, t) for t in targets}
            row = [p] + [iops(k[t]) for t in tls]
            if both:
                row.append(ratio(k["rdmablk-tls"], k["spdk-tls"]))
                bars.append((f"{p} {h}: rdmablk TLS / SPDK TLS",
                             ratio_stats(k["rdmablk-tls"], k["spdk-tls"])))
            row += [lat(k[t]) for t in tls] + [cpu(k[t]) for t in tls]
            for t in costs:
                row += [ratio(k[t], k[t[:-4]], x) for x in ("iops", "tgt_us", "host_us")]
                bars.append((f"{p} {h}: {label[t]} / clear", ratio_stats(k[t], k[t[:-4]])))
            rows.append(row)
        bj.print_table(rows)
        print()
    if len(hosts) == 2:
        a, b = hosts
        print(f"Hosts: {a} / {b} against the same target (IOPS ratio round by round; the hosts' own")
        print("CPU us/IO, the host process in its I/O phase: spdk_nvme_perf polls, so it is charged its core)")
        print()
        rows = [["point", "target", f"IOPS {a} / {b}", f"p50 {a} / {b}",
                 f"{a} CPU us/IO", f"{b} CPU us/IO"]]
        for p in order:
            for t in targets:
                ka, kb = (p, a, t), (p, b, t)
                pa, pb = med(ka, "p50"), med(kb, "p50")
                rows.append([p, label[t], ratio(ka, kb),
                             "-" if pa is None or not pb else f"{fx(pa / pb)}x",
                             cpu(ka, "host_us"), cpu(kb, "host_us")])
                bars.append((f"{p} -> {label[t]}: {a} / {b}", ratio_stats(ka, kb)))
        bj.print_table(rows)
        print()
    ipath = os.path.join(d, "idle")
    if os.path.exists(ipath):
        print("Idle: the target's CPU with connected, silent hosts (admin queue, KATO 5 s and a Keep Alive")
        print("every 2.5 s, 2 I/O queues of 32 entries each, no I/O)")
        print()
        rows = [["target", "hosts", "target CPU, % of one core"]]
        for line in open(ipath):
            t, n, pct = line.split()
            rows.append([label.get(t, t), n, "FAILED" if pct == "-" else pct])
        bj.print_table(rows)
        print()
    bj.write_ratios(d, bars)
    for f in fails:
        print(f"note: {f}")


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "point":
        point(sys.argv[2:])
    elif cmd == "idle":
        try:
            idle(sys.argv[2:])
        except (OSError, RuntimeError) as e:
            print(f"idle hosts: {e}", file=sys.stderr)
            sys.exit(1)
    elif cmd == "table":
        table(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
