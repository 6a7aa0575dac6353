//! A host's share of a pass: how much of a worker's pass one host's NVMe/TCP connections may
//! take (`target.tcp_pass_bytes_per_host`), so a host streaming data into many deep queues
//! cannot hold the worker in one pass while another host's command waits for the next.
//!
//! Before this, a pass read each ready socket until the kernel had nothing more (with
//! placement on, the default); a host that
//! sent as fast as the worker read (32 queues of 128 KiB writes) kept one pass reading for up
//! to 65 ms, and a light host's 4K reads, their responses sent only at the pass's end, waited
//! all that while (`tools/bench/fairness`; `docs/benchmarks.md`). Now each host may read
//! about its share in a pass: a visit stops reading once the host has had it, and a ready
//! socket of a host that has had it is not visited. Neither loses anything: what is left is
//! the kernel's, and the epoll set is level-triggered, so the next pass hears of it again. A
//! connection whose unread data may lie in user space (TLS in OpenSSL's record layer) is
//! neither cut short nor counted: nothing would tell the next pass it has more.
//!
//! The visits of a pass start at a pseudo-random one of the ready sockets, so which of a
//! host's sockets get its share is a fair draw each pass. (Starting one socket later each
//! pass is not: with more sockets ready than one `epoll_wait` returns, the kernel rotates its
//! ready list too, and the two rotations in step left half of one host's 128 sockets never
//! read; `tests::every_socket_of_a_host_with_more_than_a_wait_returns_is_read`.)

/// One pass's reading, per host (a handful of hosts a pass: a linear list, its capacity kept).
#[derive(Debug)]
pub struct PassShare {
    /// (host key, bytes read this pass).
    read: Vec<(u64, u64)>,
    /// xorshift64 state for the passes' starts (never 0).
    draw: u64,
}

impl Default for PassShare {
    fn default() -> Self {
        PassShare {
            read: Vec::new(),
            draw: 0x9e37_79b9_7f4a_7c15,
        }
    }
}

impl PassShare {
    /// Begins a pass over `ready` sockets: where its visits start (0..ready).
    pub fn begin(&mut self, ready: usize) -> usize {
        self.read.clear();
        let mut x = self.draw;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.draw = x;
        if ready == 0 {
            0
        } else {
            (x % ready as u64) as usize
        }
    }

    /// How many more bytes `host` may read this pass with `per_host` a pass (0: a pass does
    /// not limit hosts): 0 when it has had its share.
    pub fn left(&self, host: u64, per_host: u64) -> u64 {
        if per_host == 0 {
            return u64::MAX;
        }
        let read = self.read.iter().find(|r| r.0 == host).map_or(0, |r| r.1);
        per_host.saturating_sub(read)
    }

    /// Counts `bytes` read for `host` this pass.
    pub fn spend(&mut self, host: u64, bytes: u64) {
        match self.read.iter_mut().find(|r| r.0 == host) {
            Some(r) => r.1 += bytes,
            None => self.read.push((host, bytes)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::PassShare;

    #[test]
    fn a_host_that_had_its_share_waits_for_the_next_pass_and_others_do_not() {
        let mut p = PassShare::default();
        p.begin(3);
        assert_eq!(p.left(1, 1000), 1000);
        p.spend(1, 600);
        assert_eq!(p.left(1, 1000), 400);
        p.spend(1, 600);
        assert_eq!(p.left(1, 1000), 0, "over its share: no more this pass");
        assert_eq!(p.left(2, 1000), 1000, "another host keeps its whole share");
        p.begin(3);
        assert_eq!(p.left(1, 1000), 1000, "a new pass, a new share");
    }

    #[test]
    fn no_limit_when_the_share_is_zero() {
        let mut p = PassShare::default();
        p.begin(1);
        p.spend(7, u64::MAX / 2);
        assert_eq!(p.left(7, 0), u64::MAX);
    }

    #[test]
    fn a_pass_starts_anywhere_among_the_ready_sockets() {
        let mut p = PassShare::default();
        let mut seen = [0u32; 7];
        for _ in 0..7000 {
            seen[p.begin(7)] += 1;
        }
        assert!(
            seen.iter().all(|&n| n > 700),
            "starts drawn unevenly: {seen:?}"
        );
        assert_eq!(p.begin(0), 0, "no socket ready");
    }

    /// A model of the worker's passes over one host's `sockets` sockets, all ready all the
    /// time, whose first visit a pass takes the host's whole share (as 128 KiB writes do),
    /// with epoll's level-triggered ready list as Linux keeps it: a wait returns the first
    /// `EVENTS` of the list, puts each one it returned back at the tail and leaves the rest
    /// at the head. Every socket must be read, and none wait much longer than its turn.
    #[test]
    fn every_socket_of_a_host_with_more_than_a_wait_returns_is_read() {
        const EVENTS: usize = 64;
        for sockets in [3usize, 64, 65, 100, 128, 256] {
            let mut p = PassShare::default();
            let mut ready: std::collections::VecDeque<usize> = (0..sockets).collect();
            let mut last = vec![0usize; sockets];
            let mut longest = 0;
            let passes = 400 * sockets;
            for pass in 1..=passes {
                let n = ready.len().min(EVENTS);
                let events: Vec<usize> = ready.drain(..n).collect();
                ready.extend(&events);
                let start = p.begin(n);
                let visited = events[start]; // the first visit takes the share
                longest = longest.max(pass - last[visited]);
                last[visited] = pass;
            }
            for (s, &l) in last.iter().enumerate() {
                longest = longest.max(passes - l);
                assert!(l > 0, "{sockets} sockets: socket {s} never read");
            }
            assert!(
                longest < 30 * sockets,
                "{sockets} sockets: a socket waited {longest} passes"
            );
        }
    }
}
