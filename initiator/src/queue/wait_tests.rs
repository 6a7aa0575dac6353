//! [`Queue::wait`]'s spin before it sleeps, over a scripted transport: at least 64 polls,
//! and `poll_spin` since the last progress, a poll that moved bytes counting as progress.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rdmablk::nvme::{Cqe, Sqe, Status};

use super::Queue;
use crate::transport::{Dir, Event, QueueTransport};

/// Answers the one command sent after `quiet` empty polls; reports `moved` for each of them.
struct Scripted {
    cid: Option<u16>,
    quiet: usize,
    moved: bool,
    polls: Arc<AtomicUsize>,
    sleeps: Arc<AtomicUsize>,
}

impl QueueTransport for Scripted {
    fn send(&mut self, sqe: Sqe, _: Dir) -> Result<(), crate::error::Error> {
        self.cid = Some(sqe.cid);
        Ok(())
    }

    fn poll(&mut self, events: &mut Vec<Event>) -> Result<(), String> {
        let n = self.polls.fetch_add(1, Ordering::Relaxed);
        let Some(cid) = self.cid else {
            return Ok(());
        };
        if n == 0 {
            events.push(Event::Sent(cid));
        } else if n > self.quiet {
            events.push(Event::Response(Cqe::error(cid, 1, 0, Status::SUCCESS)));
            self.cid = None;
        }
        Ok(())
    }

    fn moved(&self) -> bool {
        self.moved
    }

    fn check(&mut self) -> Result<(), String> {
        Ok(())
    }

    fn arm(&mut self) -> bool {
        true
    }

    fn wait(&mut self, _: Duration, _: bool) {
        self.sleeps.fetch_add(1, Ordering::Relaxed);
    }

    fn disconnect(&mut self) {}

    fn set_in_capsule_bytes(&mut self, _: u32) {}
}

/// Posts one command to a queue whose transport answers it after `quiet` empty polls, waits
/// for it with `spin`, and returns how often the transport was asked to sleep.
fn sleeps_before_the_answer(quiet: usize, moved: bool, spin: Duration) -> usize {
    let sleeps = Arc::new(AtomicUsize::new(0));
    let link = Scripted {
        cid: None,
        quiet,
        moved,
        polls: Arc::new(AtomicUsize::new(0)),
        sleeps: sleeps.clone(),
    };
    let mut q = Queue::new(1, 4, Box::new(link), Duration::from_secs(30));
    q.set_poll_spin(spin);
    q.post(Sqe::default(), Dir::None, None, 7, None)
        .unwrap_or_else(|_| panic!("posted"));
    let mut out = Vec::new();
    while out.is_empty() {
        q.wait(&mut out, Duration::from_secs(30));
    }
    assert_eq!(out[0].tag, 7);
    assert!(out[0].result.is_ok());
    sleeps.load(Ordering::Relaxed)
}

#[test]
fn without_a_spin_window_a_wait_sleeps_after_64_empty_polls() {
    assert_eq!(sleeps_before_the_answer(10, false, Duration::ZERO), 0);
    assert!(sleeps_before_the_answer(1_000, false, Duration::ZERO) > 0);
}

#[test]
fn polls_that_move_bytes_keep_a_wait_from_sleeping() {
    assert_eq!(sleeps_before_the_answer(10_000, true, Duration::ZERO), 0);
}

#[test]
fn a_wait_polls_through_its_spin_window_before_it_sleeps() {
    // 10,000 scripted polls take far less than a minute.
    assert_eq!(
        sleeps_before_the_answer(10_000, false, Duration::from_secs(60)),
        0
    );
}
