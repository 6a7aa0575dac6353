//! Which of a worker's RDMA queues have connection-manager events (a host's disconnect, a
//! connection error): one epoll set over their CM event channels, asked once per
//! housekeeping tick, instead of a look at every queue's channel (a system call each: with a
//! thousand idle controllers, two thousand calls every tick kept the worker busy and the
//! keep-alives late). Level-triggered: a channel whose events are not all read stays ready.

use std::os::fd::RawFd;

use crate::nvmf::epoll::EpollSet;

/// Events taken per look; more ready channels are found at the next tick.
const EVENTS: usize = 64;

/// A look at every queue's channel at least this often anyway (ms), for an event a provider
/// read off the channel itself and kept for the next `cm_event` (verbs does, while a
/// disconnect waits for the handshake to settle), which leaves the channel unready.
pub const SWEEP_MS: u64 = 1000;

/// An epoll set over the CM channels of a worker's queues, each keyed by its queue's key.
pub struct CmWatch {
    epoll: EpollSet,
    events: Vec<libc::epoll_event>,
}

impl CmWatch {
    pub fn new() -> std::io::Result<CmWatch> {
        Ok(CmWatch {
            epoll: EpollSet::new()?,
            events: vec![libc::epoll_event { events: 0, u64: 0 }; EVENTS],
        })
    }

    /// Watches channel `fd` of queue `key`; false if epoll refused it (then the caller looks
    /// at that queue every tick).
    pub fn add(&self, fd: RawFd, key: u32) -> bool {
        self.epoll.ctl(
            libc::EPOLL_CTL_ADD,
            fd,
            libc::EPOLLIN as u32,
            u64::from(key),
        )
    }

    /// Stops watching `fd` (before its queue, which owns it, closes it).
    pub fn remove(&self, fd: RawFd) {
        self.epoll.ctl(libc::EPOLL_CTL_DEL, fd, 0, 0);
    }

    /// The keys of queues whose channels have events now (one epoll_wait, no waiting).
    pub fn ready(&mut self) -> impl Iterator<Item = u32> + '_ {
        let n = self.epoll.wait(&mut self.events, 0);
        self.events[..n].iter().map(|e| e.u64 as u32)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use rdmablk::fabric::{self, CmEvent, ConnParam, Device, ProviderKind, QpCaps, QpInit};

    use super::CmWatch;

    const WAIT: Duration = Duration::from_secs(10);

    /// The keys `w` finds ready within [`WAIT`] (empty if none).
    fn ready_within(w: &mut CmWatch) -> Vec<u32> {
        let deadline = Instant::now() + WAIT;
        loop {
            let keys: Vec<u32> = w.ready().collect();
            if !keys.is_empty() || Instant::now() > deadline {
                return keys;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn qp_init<'a>(pd: &'a fabric::Pd, cq: &'a fabric::Cq) -> QpInit<'a> {
        QpInit {
            pd,
            send_cq: cq,
            recv_cq: cq,
            caps: QpCaps::default(),
            srq: None,
        }
    }

    #[test]
    fn a_peers_disconnect_makes_its_queue_ready_and_reading_it_clears_it() {
        let dev = Device::open(ProviderKind::Soft, None).unwrap();
        let pd = dev.alloc_pd().unwrap();
        let cq = dev.create_cq(64).unwrap();
        let listener = dev.listen("127.0.0.1:0".parse().unwrap(), 4).unwrap();
        let addr = listener.local_addr();
        let client = std::thread::spawn(move || {
            let r = fabric::resolve(ProviderKind::Soft, addr, WAIT).unwrap();
            let dev = r.device();
            let pd = dev.alloc_pd().unwrap();
            let cq = dev.create_cq(64).unwrap();
            r.connect(&qp_init(&pd, &cq), &ConnParam::default(), WAIT)
                .unwrap()
        });
        let req = listener
            .get_request(Some(WAIT))
            .unwrap()
            .expect("a request");
        let qp = req.create_qp(&qp_init(&pd, &cq)).unwrap();
        qp.accept(&ConnParam::default()).unwrap();
        let connected = client.join().unwrap();

        let mut w = CmWatch::new().unwrap();
        assert!(w.add(qp.cm_fd(), 7));
        // The handshake's end (ESTABLISHED, which may come a moment after the accept) makes
        // the queue ready too; once it is read the channel is quiet.
        assert_eq!(ready_within(&mut w), vec![7], "ESTABLISHED");
        assert_eq!(
            qp.cm_event(Some(Duration::ZERO)).unwrap(),
            Some(CmEvent::Established)
        );
        assert_eq!(w.ready().count(), 0, "no event, no ready queue");

        drop(connected);
        assert_eq!(ready_within(&mut w), vec![7], "the peer's disconnect");
        assert_eq!(
            qp.cm_event(Some(Duration::ZERO)).unwrap(),
            Some(CmEvent::Disconnected)
        );
        while qp.cm_event(Some(Duration::ZERO)).unwrap().is_some() {}
        assert_eq!(w.ready().count(), 0, "read: not ready any more");
        w.remove(qp.cm_fd());
    }
}
