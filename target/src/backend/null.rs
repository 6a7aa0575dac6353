//! The null backend: no storage at all, for measuring the fabric path.
//!
//! Every request succeeds at once. Writes are discarded. Reads complete **without touching
//! the buffer**: the host receives whatever the data slot held (not zeroes); use the ram
//! backend where read data matters.

use super::{
    check_request, Backend, BackendError, BackendQueue, Completion, DoneQueue, IoRequest,
    SubmitError,
};
use crate::ring::WorkerIo;

/// Capacity only.
#[derive(Debug)]
pub struct NullBackend {
    block_size: u32,
    num_blocks: u64,
}

impl NullBackend {
    /// `size_bytes` of capacity (rounded down to whole blocks).
    pub fn new(size_bytes: u64, block_size: u32) -> Self {
        NullBackend {
            block_size,
            num_blocks: size_bytes / u64::from(block_size),
        }
    }
}

impl Backend for NullBackend {
    fn block_size(&self) -> u32 {
        self.block_size
    }

    fn num_blocks(&self) -> u64 {
        self.num_blocks
    }

    fn read_only(&self) -> bool {
        false
    }

    fn open_queue(
        &self,
        _io: &WorkerIo,
        depth: u32,
    ) -> Result<Box<dyn BackendQueue>, BackendError> {
        Ok(Box::new(NullQueue {
            block_size: self.block_size,
            num_blocks: self.num_blocks,
            done: DoneQueue::new(depth),
        }))
    }
}

struct NullQueue {
    block_size: u32,
    num_blocks: u64,
    done: DoneQueue,
}

impl BackendQueue for NullQueue {
    fn submit(&mut self, req: IoRequest) -> Result<(), SubmitError> {
        if self.done.is_full() {
            return Err(SubmitError::Busy);
        }
        check_request(&req.op, self.block_size, self.num_blocks)?;
        self.done.push(Completion {
            tag: req.tag,
            op: req.op.kind(),
            result: Ok(()),
        });
        Ok(())
    }

    fn poll(&mut self, out: &mut [Completion]) -> usize {
        self.done.drain_into(out)
    }

    fn in_flight(&self) -> u32 {
        self.done.len()
    }
}
