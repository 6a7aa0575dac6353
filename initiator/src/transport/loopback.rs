//! The loop transport: `loop://`, a target in this same process
//! (`rdmablk::nvme::transport::loopback`), opened for a controller with the buffer pool the
//! target may reach ([`LoopFabric`]). On one queue ([`LoopLink`]), capsules are written into the channel's slots and
//! handed over in one batch per poll; the target reaches the controller's buffer pool by the
//! keyed SGLs the commands carry, as over RDMA; responses come back in batches.
//!
//! Write data always goes keyed, never in the capsule: the target copies it once, straight
//! from the buffer, where in-capsule data would be copied three times (into the capsule slot,
//! the target's receive slot, its data slot) to save a round trip the loop does not have.

use std::sync::Arc;
use std::time::Duration;

use rdmablk::nvme::discovery::trtype;
use rdmablk::nvme::transport::loopback::{self, HostEnd, LoopError, Region, ToHost};
use rdmablk::nvme::{InCapsuleSgl, KeyedSgl, Sgl, SglNeed, Sqe};

use super::{Dir, Event, Fabric, QueueParams, QueueTransport, Transport, TransportOps};
use crate::buf::BufPool;
use crate::error::{Error, Result};
use crate::options::ConnectOptions;
use crate::stats::Stats;

/// The loop transport's row of the transport table (its buffer pool is plain memory).
pub(crate) struct Loop;

impl TransportOps for Loop {
    fn schemes(&self) -> &'static [&'static str] {
        &["loop"]
    }

    fn trtype(&self) -> u8 {
        trtype::LOOP
    }

    fn open(
        &self,
        _: Transport,
        _: &str,
        _: &ConnectOptions,
        pool: &BufPool,
    ) -> Result<Arc<dyn Fabric>> {
        Ok(Arc::new(LoopFabric { pool: pool.clone() }))
    }
}

/// The loop transport opened for one controller: the buffer pool the target reaches through
/// the channel (by the keyed SGLs the commands carry, as over RDMA).
struct LoopFabric {
    pool: BufPool,
}

impl Fabric for LoopFabric {
    fn sgl_need(&self) -> SglNeed {
        SglNeed::Keyed
    }

    fn connect(&self, p: &QueueParams, stats: Arc<Stats>) -> Result<Box<dyn QueueTransport>> {
        Ok(Box::new(LoopLink::connect(p, &self.pool, stats)?))
    }
}

/// One queue's loop channel.
pub(crate) struct LoopLink {
    qid: u16,
    end: HostEnd,
    in_capsule_bytes: u32,
    /// By capsule slot: the command ID it carries.
    cid_of: Vec<u16>,
    got: Vec<ToHost>,
    broken: Option<String>,
    stats: Arc<Stats>,
}

impl LoopLink {
    /// Opens queue `p.qid` to the loop listener at `p.addr`; the target may reach `pool`.
    fn connect(p: &QueueParams, pool: &BufPool, stats: Arc<Stats>) -> Result<LoopLink> {
        let qid = p.qid;
        // SAFETY: the pool's memory lives as long as the clone kept with it; the target
        // writes only into buffers of commands in flight, which the queue does not touch.
        let region = unsafe { Region::new(pool.as_ptr(), pool.capacity(), Box::new(pool.clone())) };
        let end =
            loopback::connect(p.addr, qid, u32::from(p.entries), region).map_err(|e| match e {
                LoopError::Refused(_) => Error::Refused {
                    qid,
                    addr: p.addr.to_string(),
                    hint: "no loop listener at that address in this process",
                },
                e => Error::Transport {
                    qid,
                    what: format!("loop connect to {}: {e}", p.addr),
                },
            })?;
        tracing::debug!(qid, entries = p.entries, "loop queue connected");
        Ok(LoopLink {
            qid,
            cid_of: vec![0; end.entries() as usize],
            got: Vec::with_capacity(2 * usize::from(p.entries)),
            end,
            in_capsule_bytes: p.in_capsule_bytes,
            broken: None,
            stats,
        })
    }
}

impl QueueTransport for LoopLink {
    fn send(&mut self, mut sqe: Sqe, dir: Dir) -> std::result::Result<(), Error> {
        // As over RDMA: in-capsule data only on I/O queues once Identify offered it (the
        // Connect data goes keyed).
        let limit = self.in_capsule_bytes;
        let key = self.end.key();
        let keyed = |addr, len| {
            Sgl::Keyed(KeyedSgl {
                addr,
                len,
                key,
                invalidate: false,
            })
        };
        let mut data: &[u8] = &[];
        let sgl = match dir {
            Dir::None => keyed(0, 0),
            Dir::ToCtrl(s) if s.len <= limit => {
                // SAFETY: the caller keeps the buffer alive and untouched while the command
                // is in flight; it is copied into the capsule right here.
                data = unsafe { std::slice::from_raw_parts(s.addr as *const u8, s.len as usize) };
                self.stats.add_in_capsule(s.len);
                Sgl::InCapsule(InCapsuleSgl {
                    offset: 0,
                    len: s.len,
                })
            }
            Dir::ToCtrl(s) => {
                self.stats.add_keyed_write(s.len);
                keyed(s.addr, s.len)
            }
            Dir::ToHost(s) => keyed(s.addr, s.len),
        };
        sqe.set_sgl(&sgl);
        let Some(slot) = self.end.queue(&sqe.to_bytes(), data) else {
            return Err(Error::protocol(format!(
                "queue {}: no capsule slot free for command {}",
                self.qid, sqe.cid
            )));
        };
        self.cid_of[slot as usize] = sqe.cid;
        Ok(())
    }

    fn poll(&mut self, events: &mut Vec<Event>) -> std::result::Result<(), String> {
        self.end.flush();
        self.got.clear();
        self.end.poll(&mut self.got);
        for m in &self.got {
            events.push(match *m {
                ToHost::Taken(slot) => Event::Sent(self.cid_of[slot as usize]),
                ToHost::Response(cqe) => Event::Response(cqe),
            });
        }
        self.check()
    }

    fn check(&mut self) -> std::result::Result<(), String> {
        if self.broken.is_none() && self.end.is_closed() {
            self.broken = Some("the target closed the loop queue".into());
        }
        match &self.broken {
            Some(why) => Err(why.clone()),
            None => Ok(()),
        }
    }

    fn arm(&mut self) -> bool {
        self.end.arm();
        true
    }

    fn wait(&mut self, timeout: Duration, _bulk: bool) {
        self.end.flush();
        self.end.wait(timeout);
    }

    fn disconnect(&mut self) {
        self.end.close();
        self.broken.get_or_insert_with(|| "disconnected".into());
    }

    /// Ignored: write data goes keyed (see the module's notes).
    fn set_in_capsule_bytes(&mut self, _n: u32) {}
}
