//! The ram backend: the namespace lives in anonymous memory (lost at exit).
//!
//! Requests complete at submit time with a memcpy. Workers share the memory; a reader-writer
//! lock over the whole backend keeps concurrent requests from racing on the same bytes (this
//! is a test and benchmark backend: simplicity over scalability).

use std::sync::{Arc, RwLock};

use rdmablk::fabric::{MemBuf, MemBufOptions};

use super::{
    check_request, Backend, BackendError, BackendQueue, Completion, DoneQueue, IoOp, IoRequest,
    SubmitError,
};
use crate::ring::WorkerIo;

/// Memory of `num_blocks * block_size` bytes, zero-filled at start.
#[derive(Debug)]
pub struct RamBackend(Arc<RamMemory>);

#[derive(Debug)]
struct RamMemory {
    mem: MemBuf,
    /// Guards the bytes of `mem`: shared for reads, exclusive for writes.
    lock: RwLock<()>,
    block_size: u32,
    num_blocks: u64,
}

impl RamBackend {
    /// `size_bytes` of memory (rounded down to whole blocks). Pages are committed on first
    /// write, so an idle 1 GiB namespace costs little.
    pub fn new(size_bytes: u64, block_size: u32) -> Result<Self, BackendError> {
        let num_blocks = size_bytes / u64::from(block_size);
        let bytes = num_blocks * u64::from(block_size);
        let len = usize::try_from(bytes).map_err(|_| BackendError::Memory {
            bytes,
            source: rdmablk::fabric::FabricError::InvalidArgument {
                what: "larger than the address space".into(),
            },
        })?;
        let mem = MemBuf::new(len.max(1), MemBufOptions::default())
            .map_err(|source| BackendError::Memory { bytes, source })?;
        Ok(RamBackend(Arc::new(RamMemory {
            mem,
            lock: RwLock::new(()),
            block_size,
            num_blocks,
        })))
    }
}

impl RamMemory {
    fn execute(&self, op: &IoOp) {
        let bs = u64::from(self.block_size);
        let at = |lba: u64| (lba * bs) as usize;
        let base = self.mem.as_ptr();
        match *op {
            IoOp::Read { lba, buf, .. } => {
                let _g = self.lock.read().unwrap_or_else(|p| p.into_inner());
                // SAFETY: the range was checked against the backend's size; `buf` is valid
                // and unshared by the IoBuf contract; writers are excluded by the lock.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        base.add(at(lba)),
                        buf.as_ptr(),
                        buf.len() as usize,
                    )
                };
            }
            IoOp::Write { lba, buf, .. } => {
                let _g = self.lock.write().unwrap_or_else(|p| p.into_inner());
                // SAFETY: as for reads; the write lock excludes every other access to `mem`.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        buf.as_ptr(),
                        base.add(at(lba)),
                        buf.len() as usize,
                    )
                };
            }
            IoOp::WriteZeroes { lba, blocks } | IoOp::Deallocate { lba, blocks } => {
                let _g = self.lock.write().unwrap_or_else(|p| p.into_inner());
                // SAFETY: the range was checked; the write lock makes this access exclusive.
                unsafe {
                    std::ptr::write_bytes(base.add(at(lba)), 0, (u64::from(blocks) * bs) as usize)
                };
            }
            IoOp::Flush => {}
        }
    }
}

impl Backend for RamBackend {
    fn block_size(&self) -> u32 {
        self.0.block_size
    }

    fn num_blocks(&self) -> u64 {
        self.0.num_blocks
    }

    fn read_only(&self) -> bool {
        false
    }

    fn deallocated_reads_zeroes(&self) -> bool {
        true
    }

    fn open_queue(
        &self,
        _io: &WorkerIo,
        depth: u32,
    ) -> Result<Box<dyn BackendQueue>, BackendError> {
        Ok(Box::new(RamQueue {
            ram: Arc::clone(&self.0),
            done: DoneQueue::new(depth),
        }))
    }
}

/// A worker's queue to a [`RamBackend`].
struct RamQueue {
    ram: Arc<RamMemory>,
    done: DoneQueue,
}

impl BackendQueue for RamQueue {
    fn submit(&mut self, req: IoRequest) -> Result<(), SubmitError> {
        if self.done.is_full() {
            return Err(SubmitError::Busy);
        }
        check_request(&req.op, self.ram.block_size, self.ram.num_blocks)?;
        self.ram.execute(&req.op);
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
