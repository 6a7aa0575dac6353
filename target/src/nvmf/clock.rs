//! The clocks a worker reads on the I/O path, read as seldom as the figures they feed allow.
//!
//! Where the system's clocksource has no vDSO (HPET or the ACPI PM timer: some virtual
//! machines, qemu's TCG, hosts whose TSC the kernel distrusts), every `clock_gettime` of
//! `CLOCK_MONOTONIC` is a system call and a device register read. A worker used to read it
//! about three times per command (the keep-alive stamp, and the received and completed stamps
//! of the latency statistics) and three more times per pass; in a TCG VM `read_hpet` was an
//! eighth of the worker's time. Now:
//!
//! - keep-alive reads the coarse clock ([`coarse_ms`]: the kernel's last tick, which the vDSO
//!   answers without a device read; 1-4 ms resolution, for timeouts of seconds);
//! - everything else of a pass shares one reading per phase ([`PassClock`]): commands read
//!   in one pass get one "received" stamp, responses sent at the end of a pass one "sent"
//!   stamp, and the housekeeping tick and the idle accounting use what was read last.

use std::cell::Cell;
use std::time::Instant;

/// Milliseconds on the coarse monotonic clock (`CLOCK_MONOTONIC_COARSE`).
pub fn coarse_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write; CLOCK_MONOTONIC_COARSE exists on every Linux
    // this runs on (2.6.32 and later).
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

/// A worker's reading of the monotonic clock for the phase of a pass it is in: read at the
/// first use after [`PassClock::invalidate`], the same reading until the next.
#[derive(Debug, Default)]
pub struct PassClock {
    read: Cell<Option<Instant>>,
}

impl PassClock {
    /// The phase's reading (read now if it has none).
    #[inline]
    pub fn now(&self) -> Instant {
        match self.read.get() {
            Some(t) => t,
            None => self.fresh(),
        }
    }

    /// Reads the clock for the phase, whether it had a reading or not.
    pub fn fresh(&self) -> Instant {
        let t = Instant::now();
        self.read.set(Some(t));
        t
    }

    /// A new phase: the next [`PassClock::now`] reads the clock.
    #[inline]
    pub fn invalidate(&self) {
        self.read.set(None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_phase_shares_one_reading_and_a_new_phase_reads_again() {
        let c = PassClock::default();
        let a = c.now();
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert_eq!(c.now(), a, "the same phase");
        c.invalidate();
        assert!(c.now() > a, "a new phase reads the clock");
    }

    #[test]
    fn the_coarse_clock_moves_with_the_precise_one() {
        let (c0, t0) = (coarse_ms(), Instant::now());
        std::thread::sleep(std::time::Duration::from_millis(50));
        let (c1, t1) = (coarse_ms(), Instant::now());
        let coarse = c1 - c0;
        let precise = (t1 - t0).as_millis() as u64;
        // Within two ticks of the slowest kernel tick (HZ=100: 10 ms each).
        assert!(
            coarse.abs_diff(precise) <= 20,
            "coarse {coarse} ms, precise {precise} ms"
        );
    }
}
