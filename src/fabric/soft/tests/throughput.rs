//! Throughput of RDMA WRITE and READ over loopback. Prints MiB/s; asserts nothing about time,
//! but checks every completion and the data moved.
//!
//! Quote numbers from a release build:
//! `cargo test -p rdmablk --release --lib soft::tests::throughput -- --ignored --nocapture`

use super::*;

/// A slot's first 8 bytes: the index of the operation that last moved it (WRITE), or the
/// slot's own mark (READ).
fn stamp(v: u64) -> [u8; 8] {
    v.to_le_bytes()
}

/// `total` bytes in `size`-byte RDMA WRITEs (or READs) from `a` to `p`, 32 in flight through 32
/// slots on each side; returns MiB/s. What is timed is also checked, outside the timing:
/// one successful completion per operation, in order, and none more; every operation moved its
/// slot (a WRITE stamps its index into its source slot before it is posted; a READ's
/// destination stamp is cleared before it is posted and must hold the remote slot's mark at
/// its completion); at the end every slot is the same on both sides.
fn run(a: &Side, p: &Side, read: bool, size: usize, total: usize) -> f64 {
    const DEPTH: usize = 32;
    let remote = p.mr(size * DEPTH, RW);
    let local = a.mr(size * DEPTH, Access::LOCAL_WRITE);
    let mark = |slot: usize| u64::MAX - slot as u64;
    let (src, dst) = if read {
        (&remote, &local)
    } else {
        (&local, &remote)
    };
    for slot in 0..DEPTH {
        let mut data = pattern(size, slot as u8 + 1);
        data[..8].copy_from_slice(&stamp(mark(slot)));
        src.write_at(slot * size, &data).unwrap();
    }
    let (ra, rk) = (remote.addr(), remote.rkey());
    let n = total / size;
    assert!(n > 0);
    let start = Instant::now();
    let (mut posted, mut done) = (0usize, 0usize);
    let mut wcs = [Wc::default(); 32];
    while done < n {
        while posted < n && posted - done < DEPTH {
            let slot = posted % DEPTH;
            let off = (slot * size) as u64;
            // The slot's previous operation has completed (completions come in order).
            let op = if read {
                local.write_at(slot * size, &[0; 8]).unwrap();
                WrOp::RdmaRead {
                    remote_addr: ra + off,
                    rkey: rk,
                }
            } else {
                local.write_at(slot * size, &stamp(posted as u64)).unwrap();
                WrOp::RdmaWrite {
                    remote_addr: ra + off,
                    rkey: rk,
                }
            };
            let sge = [local.sge(slot * size, size as u32)];
            a.qp.post_send(&[sw(posted as u64, op, &sge)]).unwrap();
            posted += 1;
        }
        let k = a.cq.poll(&mut wcs).unwrap();
        for w in &wcs[..k] {
            assert_eq!(
                (w.wr_id, w.status),
                (done as u64, WcStatus::Success),
                "completion {done} of {n}"
            );
            if read {
                let slot = done % DEPTH;
                let mut got = [0; 8];
                local.read_at(slot * size, &mut got).unwrap();
                assert_eq!(got, stamp(mark(slot)), "READ {done} did not fill its slot");
            }
            done += 1;
        }
        if k == 0 {
            std::thread::yield_now();
        }
    }
    let secs = start.elapsed().as_secs_f64();
    assert_eq!(
        a.cq.poll(&mut wcs).unwrap(),
        0,
        "completions beyond the {n}"
    );
    assert_eq!(
        p.cq.poll(&mut wcs).unwrap(),
        0,
        "completions at the responder"
    );
    let (mut s, mut d) = (vec![0; size], vec![0; size]);
    for slot in 0..DEPTH.min(n) {
        src.read_at(slot * size, &mut s).unwrap();
        dst.read_at(slot * size, &mut d).unwrap();
        assert!(s == d, "slot {slot} differs after {n} operations");
        if !read {
            // The last WRITE through this slot is the one that landed.
            let last = slot + (n - 1 - slot) / DEPTH * DEPTH;
            assert_eq!(d[..8], stamp(last as u64), "slot {slot}");
        }
    }
    (n * size) as f64 / secs / (1024.0 * 1024.0)
}

/// A short run of each direction that always executes: keeps the benchmark path tested, and
/// checks what it moves (no speed is asserted).
#[test]
fn throughput_smoke() {
    let (a, p) = pair();
    for (name, read) in [("WRITE", false), ("READ", true)] {
        let mibs = run(&a, &p, read, 4096, 4 << 20);
        eprintln!("soft RDMA {name} 4 KiB (debug build, 4 MiB total): {mibs:.0} MiB/s");
    }
}

#[test]
#[ignore = "benchmark: run in release with --ignored --nocapture"]
fn throughput() {
    let (a, p) = pair();
    for (name, read) in [("WRITE", false), ("READ", true)] {
        for size in [4096usize, 128 << 10] {
            let mibs = run(&a, &p, read, size, 1 << 30);
            eprintln!(
                "soft RDMA {name} {:>4} KiB, 32 deep: {mibs:>7.0} MiB/s",
                size >> 10
            );
        }
    }
}
