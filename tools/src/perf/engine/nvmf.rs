//! The NVMe-oF engine: I/O through the rdmablk-initiator library's asynchronous queue, to any
//! NVMe-oF/RDMA target (`rdma://`) or NVMe/TCP target (`tcp://`), to rdmablk-target on the
//! soft provider (`soft://`), or to an in-process target (`--embedded`, over soft, tcp or
//! loop), or to one subsystem through several paths (a `MultipathController`: the queue moves
//! requests between paths, [`Engine::paths`] says how many each carried).
//!
//! Zero copy: the job's buffers are the initiator's registered buffers. Each perf [`IoBuf`]
//! handle is paired (by its index) with the initiator buffer over the same bytes; the worker
//! gives its handle up at submit and gets it back in the completion, exactly when the
//! initiator buffer comes back from the queue, so the two never are in use at once.

use std::ptr::NonNull;
use std::sync::Arc;

use rdmablk_initiator as ini;

use super::embedded::EmbeddedTarget;
use super::{
    BufRegion, Completion, Engine, EngineError, IoBuf, IoError, IoReq, Op, OpenOptions, PathIo,
};
use super::{QueueFull, BUF_ALIGN};

/// One job's connection: its own controller (or multipath controller) with one I/O queue.
pub struct NvmfEngine {
    name: String,
    ctrl: Handle,
    queue: ini::IoQueue,
    /// The initiator buffer of each job buffer while the job holds it (index = IoBuf::index).
    idle: Vec<Option<ini::IoBuf>>,
    /// The job's handle of each buffer while its I/O is in flight, with the job's tag.
    in_flight: Vec<Option<(IoBuf, u64)>>,
    /// Requests refused by the initiator at submit: they complete at the next poll.
    refused: Vec<Completion>,
    done: Vec<ini::Completion>,
    /// Keeps an embedded target up while this engine lives.
    _embedded: Option<Arc<EmbeddedTarget>>,
}

/// What the engine is connected through.
enum Handle {
    One(ini::Controller),
    Paths(ini::MultipathController),
}

impl Handle {
    fn buffers(&self) -> &ini::BufPool {
        match self {
            Handle::One(c) => c.buffers(),
            Handle::Paths(m) => m.buffers(),
        }
    }
}

/// Initiator options for a job with `opts.queue_depth` requests in flight.
fn connect_options(opts: &OpenOptions) -> ini::ConnectOptions {
    // The NVMe queue holds one entry more than the commands in flight.
    let queue_size = (opts.queue_depth + 1).clamp(2, u32::from(u16::MAX)) as u16;
    ini::ConnectOptions {
        io_queues: 1,
        queue_size,
        // Room for the job's buffers (queue depth x the largest transfer) and then some.
        buffer_pool_bytes: (opts.queue_depth as usize + 8) * (1 << 20),
        ..ini::ConnectOptions::default()
    }
}

/// A URL that names the discovery NQN becomes the URL of the first NVM subsystem the
/// target's discovery log lists (said on stderr); any other URL is returned as it is.
pub fn resolve(url: &str) -> Result<String, EngineError> {
    let Some(base) = url.strip_suffix(&format!("/{}", crate::perf::args::DISCOVERY_NQN)) else {
        return Ok(url.to_string());
    };
    let err = |e: String| EngineError::Connect {
        target: url.to_string(),
        err: e.into(),
    };
    let entries = ini::discover(base).map_err(|e| err(format!("discovery: {e}")))?;
    let found = entries
        .iter()
        .filter(|e| e.kind == ini::EntryKind::Subsystem)
        .find_map(|e| e.url())
        .ok_or_else(|| {
            err(format!(
                "the discovery log lists no subsystem ({entries:?})"
            ))
        })?;
    eprintln!("rdmablk-perf: {base}: discovered {found}");
    Ok(found)
}

impl NvmfEngine {
    /// Connects to `url` with one I/O queue of `opts.queue_depth` entries.
    pub fn connect(
        url: &str,
        opts: &OpenOptions,
        embedded: Option<Arc<EmbeddedTarget>>,
    ) -> Result<NvmfEngine, EngineError> {
        let connect_err = |err: ini::Error| EngineError::Connect {
            target: url.to_string(),
            err: Box::new(err),
        };
        let ctrl =
            ini::Controller::connect_with(url, connect_options(opts)).map_err(connect_err)?;
        let nsid = first_nsid(url, &ctrl.namespace_ids())?;
        let queue = ctrl.io_queue(nsid).map_err(connect_err)?;
        Ok(Self::with(url, Handle::One(ctrl), queue, embedded))
    }

    /// Connects the paths `urls` of one subsystem as a multipath controller.
    pub fn connect_paths(urls: &[String], opts: &OpenOptions) -> Result<NvmfEngine, EngineError> {
        let target = urls.join(",");
        let connect_err = |err: ini::Error| EngineError::Connect {
            target: target.clone(),
            err: Box::new(err),
        };
        let mp = ini::MultipathController::connect_with(urls, connect_options(opts))
            .map_err(connect_err)?;
        let nsid = first_nsid(&target, &mp.namespace_ids())?;
        let queue = mp.io_queue(nsid).map_err(connect_err)?;
        let mut e = Self::with(&urls[0], Handle::Paths(mp), queue, None);
        e.name = format!("{} multipath x{}", e.name, urls.len());
        Ok(e)
    }

    fn with(
        url: &str,
        ctrl: Handle,
        queue: ini::IoQueue,
        embedded: Option<Arc<EmbeddedTarget>>,
    ) -> NvmfEngine {
        NvmfEngine {
            name: format!("nvmf({})", url.split("://").next().unwrap_or("?")),
            ctrl,
            queue,
            idle: Vec::new(),
            in_flight: Vec::new(),
            refused: Vec::new(),
            done: Vec::new(),
            _embedded: embedded,
        }
    }

    fn finish(&mut self, c: ini::Completion) -> Completion {
        let index = c.tag as usize;
        let (buf, tag) = self.in_flight[index]
            .take()
            .expect("a completion for a buffer in flight");
        self.idle[index] = Some(c.buf);
        Completion {
            tag,
            op: if c.op == ini::Op::Read {
                Op::Read
            } else {
                Op::Write
            },
            offset: c.offset,
            len: c.len,
            buf,
            result: c.result.map_err(io_error),
        }
    }
}

fn first_nsid(target: &str, ids: &[u32]) -> Result<u32, EngineError> {
    ids.first().copied().ok_or_else(|| EngineError::Connect {
        target: target.to_string(),
        err: "the subsystem has no namespace".into(),
    })
}

fn io_error(e: ini::Error) -> IoError {
    match e {
        ini::Error::Nvme { status, .. } => IoError::Nvme {
            sct: status.sct.bits(),
            sc: status.sc,
        },
        other => IoError::Transport(other.to_string()),
    }
}

impl Engine for NvmfEngine {
    fn name(&self) -> &str {
        &self.name
    }

    fn block_size(&self) -> u32 {
        self.queue.block_size()
    }

    fn capacity(&self) -> u64 {
        self.queue.capacity_bytes()
    }

    fn queue_depth(&self) -> u32 {
        self.queue.depth() as u32
    }

    fn alloc_buffers(&mut self, count: usize, len: usize) -> Result<Vec<IoBuf>, EngineError> {
        let fail = || EngineError::Alloc { count, len };
        if len > self.queue.max_transfer_bytes() as usize {
            return Err(EngineError::Connect {
                target: self.name.clone(),
                err: format!(
                    "--bs {len} is over the controller's largest transfer of {} bytes",
                    self.queue.max_transfer_bytes()
                )
                .into(),
            });
        }
        let pool = self.ctrl.buffers().clone();
        let base = NonNull::new(pool.as_ptr()).ok_or_else(fail)?;
        let pool_len = pool.capacity();
        // SAFETY: the pool's memory stays mapped while the pool lives, which the region keeps
        // alive (`owner`); its bytes are reached only through handles made below, each over a
        // distinct initiator buffer.
        let region = unsafe { BufRegion::external(base, pool_len, Box::new(pool.clone())) };
        let mut bufs = Vec::with_capacity(count);
        for index in 0..count {
            let ib = pool
                .alloc(len.next_multiple_of(BUF_ALIGN))
                .map_err(|_| fail())?;
            let offset = ib.as_slice().as_ptr() as usize - base.as_ptr() as usize;
            // SAFETY: `ib` is a unique allocation of the pool inside `region`; the job's
            // handle and `ib` are never used at once (see the module doc).
            bufs.push(unsafe { region.buf(offset, len, index as u32) });
            self.idle.push(Some(ib));
            self.in_flight.push(None);
        }
        Ok(bufs)
    }

    fn submit(&mut self, req: IoReq) -> Result<(), QueueFull> {
        let index = req.buf.index() as usize;
        let ib = self.idle[index].take().expect("the job holds this buffer");
        let op = match req.op {
            Op::Read => ini::Op::Read,
            Op::Write => ini::Op::Write,
        };
        match self.queue.submit(op, req.offset, req.len, ib, index as u64) {
            Ok(()) => {
                self.in_flight[index] = Some((req.buf, req.tag));
                Ok(())
            }
            Err(ini::SubmitError::QueueFull(ib)) => {
                self.idle[index] = Some(ib);
                Err(QueueFull(req))
            }
            Err(ini::SubmitError::Failed(err, ib)) => {
                self.idle[index] = Some(ib);
                self.refused.push(Completion {
                    tag: req.tag,
                    op: req.op,
                    offset: req.offset,
                    len: req.len,
                    buf: req.buf,
                    result: Err(io_error(err)),
                });
                Ok(())
            }
        }
    }

    fn poll(
        &mut self,
        out: &mut Vec<Completion>,
        min_complete: usize,
    ) -> Result<usize, EngineError> {
        let mut got = self.refused.len();
        out.append(&mut self.refused);
        let poll_err = |e: ini::Error| EngineError::Poll(std::io::Error::other(e.to_string()));
        if got < min_complete {
            self.queue
                .wait(&mut self.done, min_complete - got)
                .map_err(poll_err)?;
        } else {
            self.queue.poll(&mut self.done).map_err(poll_err)?;
        }
        let mut done = std::mem::take(&mut self.done);
        for c in done.drain(..) {
            out.push(self.finish(c));
            got += 1;
        }
        self.done = done;
        Ok(got)
    }

    fn paths(&self) -> Vec<PathIo> {
        let Handle::Paths(mp) = &self.ctrl else {
            return Vec::new();
        };
        mp.paths()
            .into_iter()
            .map(|p| PathIo {
                url: p.url,
                ios: p.commands,
                failures: p.failures,
                live: p.live,
            })
            .collect()
    }
}
