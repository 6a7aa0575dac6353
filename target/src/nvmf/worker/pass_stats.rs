//! I/O statistics (and keep-alive's signs of life) as a worker pass sees time: commands that
//! arrive in one pass share one clock reading, and those that finish in it are counted at its end with one more, when
//! their responses leave together ([`super::super::transport::PollGroup::end_pass`]). At
//! most two clock reads a pass, none per command: at queue depth 32 a pass takes in and
//! answers dozens of commands, and two reads each cost about 5 % of the worker's time.
//!
//! A command's latency so counted runs from the pass that took in its capsule to the end of
//! the pass that sent its response: it may be longer than the command's own time in the
//! worker by up to a pass (a few microseconds), never shorter.

use std::sync::Arc;
use std::time::Instant;

use rdmablk::nvme::Status;

use crate::metrics::{NsCounters, OpKind};

/// A command that finished this pass, counted at its end.
#[derive(Clone, Copy, Debug)]
struct Finished {
    ns: usize,
    op: OpKind,
    bytes: u32,
    status: Status,
    received: Instant,
    executed: bool,
}

/// One worker's pass clock and the commands finished in the pass.
#[derive(Debug)]
pub struct PassStats {
    arrived: Option<Instant>,
    finished: Vec<Finished>,
}

impl Default for PassStats {
    fn default() -> Self {
        PassStats {
            arrived: None,
            // A pass rarely finishes more than a queue depth's worth; the capacity is kept.
            finished: Vec::with_capacity(256),
        }
    }
}

impl PassStats {
    /// This pass's time (when it took in a capsule): the first call of a pass reads the
    /// clock, the others share its reading.
    pub fn now(&mut self) -> Instant {
        *self.arrived.get_or_insert_with(Instant::now)
    }

    /// This pass's time in milliseconds since `epoch` (keep-alive's clock: a command is a
    /// sign of life of its controller).
    pub fn now_ms(&mut self, epoch: Instant) -> u64 {
        self.now().saturating_duration_since(epoch).as_millis() as u64
    }

    /// An I/O command of namespace slot `ns` finished (its response is posted); counted at
    /// the end of the pass.
    pub fn finish(
        &mut self,
        ns: usize,
        op: OpKind,
        bytes: u32,
        status: Status,
        received: Instant,
        executed: bool,
    ) {
        self.finished.push(Finished {
            ns,
            op,
            bytes,
            status,
            received,
            executed,
        });
    }

    /// The end of a pass: counts the commands that finished in it in `counters` (by
    /// namespace slot) with one clock read, and starts the next pass's clock afresh. Returns
    /// the reading, if it made one (the worker's loop uses it for its own timing).
    pub fn end_pass(&mut self, counters: &[Option<Arc<NsCounters>>]) -> Option<Instant> {
        self.arrived = None;
        if self.finished.is_empty() {
            return None;
        }
        let now = Instant::now();
        for f in self.finished.drain(..) {
            if let Some(c) = counters.get(f.ns).and_then(|c| c.as_deref()) {
                let latency = now.saturating_duration_since(f.received);
                c.done(f.op, f.bytes, f.status, latency, f.executed);
            }
        }
        Some(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_shares_one_arrival_reading_and_the_next_reads_again() {
        let mut s = PassStats::default();
        let a = s.now();
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert_eq!(s.now(), a, "arrivals of one pass share its reading");
        s.end_pass(&[]);
        assert!(s.now() > a, "the next pass reads the clock again");
    }

    #[test]
    fn finished_commands_are_counted_at_the_end_of_the_pass() {
        let c = Arc::new(NsCounters::default());
        let counters = vec![None, Some(Arc::clone(&c))];
        let mut s = PassStats::default();
        let t = s.now();
        s.finish(1, OpKind::Read, 4096, Status::SUCCESS, t, true);
        s.finish(0, OpKind::Read, 4096, Status::SUCCESS, t, true); // no counters: skipped
        assert_eq!(
            c.reads_for_tests().0,
            0,
            "nothing counted before the pass ends"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
        s.end_pass(&counters);
        let (bytes, latency_ns) = c.reads_for_tests();
        assert_eq!(bytes, 4096);
        assert!(
            latency_ns >= 1_000_000,
            "latency runs to the end of the pass"
        );
        s.end_pass(&counters);
        assert_eq!(c.reads_for_tests().0, 4096, "counted once");
    }
}
