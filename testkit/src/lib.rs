//! What every rdmablk test suite shares, in one place instead of a copy per suite: the data
//! patterns written and checked, the environment that picks the fabric the end-to-end tests
//! run on, free ports and scratch directories. Plain `std`, no rdmablk dependency, so the
//! root crate's unit tests use it as well as the target's, the initiator's and `tests/`.

use std::net::TcpListener;
use std::path::PathBuf;

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

/// A TCP port on `ip` that nobody listens on right now (targets refuse port 0 in their
/// configuration, so tests pick one).
pub fn free_port(ip: &str) -> u16 {
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
    fn patterns_are_deterministic_and_tell_places_apart() {
        assert_eq!(pattern(7, 100), pattern(7, 100));
        assert_eq!(&pattern(7, 100)[..50], &pattern(7, 50)[..]);
        assert_ne!(pattern(7, 64), pattern(8, 64));
        assert_eq!(block_pattern(4096, 8, 1), block_pattern(4096, 8, 1));
        assert_ne!(block_pattern(4096, 512, 1), block_pattern(8192, 512, 1));
        assert_ne!(block_pattern(4096, 512, 1), block_pattern(4096, 512, 2));
    }
}
