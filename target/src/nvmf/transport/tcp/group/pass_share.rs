//! A host's share of a pass: how much of a worker's pass one host's NVMe/TCP connections may
//! take (`target.tcp_pass_bytes_per_host`), so a host streaming data into many deep queues
//! cannot hold the worker in one pass while another host's command waits for the next.
//!
//! Before this, a pass read each ready socket until the kernel had nothing more; a host that
//! sent as fast as the worker read (32 queues of 128 KiB writes) kept one pass reading for up
//! to 65 ms, and a light host's 4K reads, their responses sent only at the pass's end, waited
//! all that while (`tools/bench/fairness`; `docs/benchmarks.md`). Now each host may read
//! about its share in a pass: a visit stops reading once the host has had it, and a ready
//! socket of a host that has had it is not visited. Neither loses anything: what is left is
//! the kernel's, and the epoll set is level-triggered, so the next pass hears of it again. A
//! connection whose unread data may lie in user space (TLS in OpenSSL's record layer) is
//! never cut short: nothing would tell the next pass it has more.
//!
//! The visits of a pass start one ready socket later each pass, so the sockets of a host
//! that has had its share are not always the same ones.

/// One pass's reading, per host (a handful of hosts a pass: a linear list, its capacity kept).
#[derive(Debug, Default)]
pub struct PassShare {
    /// (host key, bytes read this pass).
    read: Vec<(u64, u64)>,
    turn: usize,
}

impl PassShare {
    /// Begins a pass over `ready` sockets: where its visits start (0..ready).
    pub fn begin(&mut self, ready: usize) -> usize {
        self.read.clear();
        self.turn = self.turn.wrapping_add(1);
        if ready == 0 {
            0
        } else {
            self.turn % ready
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
    fn each_pass_starts_one_socket_later() {
        let mut p = PassShare::default();
        let starts: Vec<usize> = (0..5).map(|_| p.begin(3)).collect();
        assert_eq!(starts, [1, 2, 0, 1, 2]);
        assert_eq!(p.begin(0), 0, "no socket ready");
    }
}
