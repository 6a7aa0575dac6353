//! What a namespace's I/O goes through: one controller, or the paths of a multipath set.
//!
//! [`crate::Namespace`] (the sync API) is written against [`IoPath`] alone, and
//! [`crate::IoQueue`] (the async API) against `crate::ioqueue::Lanes`. A
//! [`crate::Controller`] and a [`crate::MultipathController`] are `IoPath`s, and their async
//! queues (`controller/queue.rs`, `multipath/queue.rs`) are `Lanes`, so the imports run one
//! way: controller and multipath above namespace and ioqueue, which know neither.

use std::any::Any;

use rdmablk::nvme::Sqe;

use crate::buf::IoBuf;
use crate::error::{Error, Result};
use crate::options::ConnectOptions;
use crate::queue::{Dir, Done, Queue, SubmitError};
use crate::stats::Stats;

/// One controller, or a multipath set: what a [`crate::Namespace`]'s calls go through.
pub(crate) trait IoPath: Send + Sync {
    /// A registered buffer of `len` bytes, which every queue of this path reaches.
    fn alloc(&self, len: usize) -> Result<IoBuf>;

    /// Counters of the calls through it (bounce bytes, calls sent again).
    fn stats(&self) -> &Stats;

    /// Its options (`retry_writes`, `io_timeout_ms`).
    fn opts(&self) -> &ConnectOptions;

    /// Runs one sync call's commands on namespace `nsid` (their data memory the caller keeps
    /// alive for the call): pipelined on one I/O queue and waited for, and after a transport
    /// failure sent again whole if `retry` (one controller: once it reconnected; multipath:
    /// on another path).
    fn run(&self, nsid: u32, cmds: &[Cmd], what: &'static str, retry: bool) -> Result<()>;

    /// The path itself, for `Namespace::controller` (which is defined beside the one type it
    /// can find there).
    fn as_any(&self) -> &dyn Any;
}

/// One command of a call.
pub(crate) struct Cmd {
    pub sqe: Sqe,
    pub dir: Dir,
}

/// Pipelines `cmds` on `q` and waits for all. The first NVMe error status is returned after
/// every command has finished; a transport failure returns at once (the queue has already
/// stopped its QP and failed every posted command).
pub(crate) fn drive(
    q: &mut Queue,
    cmds: &[Cmd],
    what: &'static str,
    timeout: std::time::Duration,
) -> Result<()> {
    let mut next = 0;
    let mut pending = 0;
    let mut first_err = None;
    let mut out: Vec<Done> = Vec::with_capacity(usize::from(q.entries()));
    while next < cmds.len() || pending > 0 {
        while next < cmds.len() {
            let c = &cmds[next];
            match q.submit(c.sqe, c.dir, None, next as u64) {
                Ok(()) => {
                    next += 1;
                    pending += 1;
                }
                Err(SubmitError::Full(_)) => break,
                Err(SubmitError::Failed(e, _)) => return Err(e),
            }
        }
        q.wait(&mut out, timeout);
        for d in out.drain(..) {
            pending -= 1;
            match d.result {
                Ok(cqe) if cqe.status.is_success() => {}
                Ok(cqe) => {
                    first_err.get_or_insert(Error::Nvme {
                        op: what,
                        status: cqe.status,
                    });
                }
                Err(e) => return Err(e),
            }
        }
        if let Some(why) = q.failure() {
            return Err(Error::Transport {
                qid: q.qid(),
                what: why.to_string(),
            });
        }
    }
    first_err.map_or(Ok(()), Err)
}
