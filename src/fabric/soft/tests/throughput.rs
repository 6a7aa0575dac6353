//! Throughput of RDMA WRITE and READ over loopback. Prints MiB/s; asserts nothing about time.
//!
//! Quote numbers from a release build:
//! `cargo test -p rdmablk --release --lib soft::tests::throughput -- --ignored --nocapture`

use super::*;

fn run(a: &Side, p: &Side, read: bool, size: usize, total: usize) -> f64 {
    const DEPTH: usize = 32;
    let remote = p.mr(size * DEPTH, RW);
    let local = a.mr(size * DEPTH, Access::LOCAL_WRITE);
    let (ra, rk) = (remote.addr(), remote.rkey());
    let n = total / size;
    let start = Instant::now();
    let (mut posted, mut done) = (0usize, 0usize);
    let mut wcs = [Wc::default(); 32];
    while done < n {
        while posted < n && posted - done < DEPTH {
            let slot = posted % DEPTH;
            let off = (slot * size) as u64;
            let op = if read {
                WrOp::RdmaRead {
                    remote_addr: ra + off,
                    rkey: rk,
                }
            } else {
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
            assert_eq!(w.status, WcStatus::Success);
        }
        done += k;
        if k == 0 {
            std::thread::yield_now();
        }
    }
    let secs = start.elapsed().as_secs_f64();
    (n * size) as f64 / secs / (1024.0 * 1024.0)
}

/// A short run that always executes (keeps the benchmark path tested).
#[test]
fn throughput_smoke() {
    let (a, p) = pair();
    let mibs = run(&a, &p, false, 4096, 4 << 20);
    eprintln!("soft RDMA WRITE 4 KiB (debug build, 4 MiB total): {mibs:.0} MiB/s");
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
