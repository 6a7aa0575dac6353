//! What every rdmablk test suite shares, in one place instead of a copy per suite: the data
//! patterns written and checked, the environment that picks the fabric the end-to-end tests
//! run on, free ports and scratch directories. Plain `std`, no rdmablk dependency, so the
//! root crate's unit tests use it as well as the target's, the initiator's and `tests/`.

use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

/// Deterministic pseudo-random bytes (xorshift64*) from `seed`, so a misplaced, shifted or
/// stale copy never matches: the same `(seed, len)` always gives the same bytes.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let v = x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes();
        let take = (len - out.len()).min(8);
        out.extend_from_slice(&v[..take]);
    }
    out
}

/// Bytes for device offset `offset` onward, written in pass `pass`: each byte depends on its
/// absolute offset and the pass, so a block written to the wrong place, or an older pass's
/// block, never matches.
pub fn block_pattern(offset: u64, len: usize, pass: u8) -> Vec<u8> {
    (0..len)
        .map(|i| {
            let x = offset + i as u64;
            (x ^ (x >> 9) ^ (x >> 17)) as u8 ^ pass.wrapping_mul(0x5B)
        })
        .collect()
}

/// The fabric the end-to-end tests run on: `RDMABLK_E2E_PROVIDER` (`soft`, the default, or
/// `verbs`) at `RDMABLK_E2E_ADDR` (default 127.0.0.1; in the Soft-RoCE VM, rxe0's 10.0.2.15).
pub fn e2e_fabric() -> (String, String) {
    let kind = std::env::var("RDMABLK_E2E_PROVIDER").unwrap_or_else(|_| "soft".into());
    let addr = std::env::var("RDMABLK_E2E_ADDR").unwrap_or_else(|_| "127.0.0.1".into());
    (kind, addr)
}

/// The lowest port tests pick: above the services a test machine may run (Ceph's 3300, 6789
/// and 6800-7568 among them).
const TEST_PORTS_FROM: u16 = 20000;

/// The first port of the kernel's ephemeral range (the local ports `connect` takes).
fn ephemeral_from() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768)
}

/// A TCP port on `ip` that nobody listens on right now (targets refuse port 0 in their
/// configuration, so tests pick one).
///
/// It is picked below the kernel's ephemeral range (`net.ipv4.ip_local_port_range`, from
/// 32768 by default), where no connection's local port can take it between the pick and the
/// target's bind: port 0 handed out ephemeral ports, and a parallel test's `connect` once took
/// one first (EADDRINUSE). Each process starts at its own place in the band and each pick
/// moves on, so parallel tests and test processes rarely try the same port; one that is taken
/// is skipped.
pub fn free_port(ip: &str) -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    if let Some(len) = ephemeral_from()
        .checked_sub(TEST_PORTS_FROM)
        .filter(|&l| l >= 1000)
    {
        let len = u32::from(len);
        let start = std::process::id().wrapping_mul(2_654_435_761) % len;
        for _ in 0..512 {
            // A prime step: the picks of one process walk the whole band before any repeats
            // (unless the band's length is a multiple of it, which the default's is not).
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let port = TEST_PORTS_FROM + ((start + n.wrapping_mul(7919) % len) % len) as u16;
            if TcpListener::bind((ip, port)).is_ok() {
                return port;
            }
        }
    }
    TcpListener::bind((ip, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("a free port on {ip}: {e}"))
}

/// A fresh, empty scratch directory `$TMPDIR/rdmablk-NAME-PID` for one test.
pub fn tmp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rdmablk-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("create {}: {e}", d.display()));
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_below_the_ephemeral_range_and_differ() {
        let a = free_port("127.0.0.1");
        let b = free_port("127.0.0.1");
        assert_ne!(a, b);
        let held = TcpListener::bind(("127.0.0.1", a)).expect("the picked port is free");
        if ephemeral_from() >= TEST_PORTS_FROM + 1000 {
            assert!((TEST_PORTS_FROM..ephemeral_from()).contains(&a), "{a}");
        }
        drop(held);
    }

    #[test]
    fn patterns_are_deterministic_and_tell_places_apart() {
        assert_eq!(pattern(7, 100), pattern(7, 100));
        assert_eq!(&pattern(7, 100)[..50], &pattern(7, 50)[..]);
        assert_ne!(pattern(7, 64), pattern(8, 64));
        assert_eq!(block_pattern(4096, 8, 1), block_pattern(4096, 8, 1));
        assert_ne!(block_pattern(4096, 512, 1), block_pattern(8192, 512, 1));
        assert_ne!(block_pattern(4096, 512, 1), block_pattern(4096, 512, 2));
    }
}
