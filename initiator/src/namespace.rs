//! The synchronous block-device API over one namespace.
//!
//! Every call checks its offset and length against the block size and capacity, splits the
//! I/O into commands of at most the controller's transfer size, borrows one I/O queue from
//! the controller's pool, pipelines the commands on it and waits for all of them.
//!
//! Failure handling: on a transport failure the controller reconnects and the call is sent
//! again in full (reads always; writes, Write Zeroes and Deallocate when
//! `ConnectOptions::retry_writes`, which is the default: re-writing the same data to the same
//! blocks is idempotent). An `Ok` means every command of the call was acknowledged by the
//! controller; nothing is reported written that was not.
//!
//! A namespace of a [`crate::MultipathController`] has the same API; its calls go to the path
//! the multipath layer chooses and move to another path on failure (`crate::multipath`).

use std::sync::{Arc, Mutex};

use rdmablk::nvme::identify::oncs;
use rdmablk::nvme::io::{encode_dsm_ranges, flush_sqe, DSM_MAX_RANGES};
use rdmablk::nvme::opcodes::io as op;
use rdmablk::nvme::{Dsm, DsmRange, ReadWrite, WriteZeroes};

use crate::buf::IoBuf;
use crate::error::{Error, Result};
use crate::io_path::{Cmd, IoPath};
use crate::queue::{Dir, Seg};
use crate::session::NamespaceInfo;

pub mod reservation;

/// Bytes a slice I/O bounces through the pool at a time.
const BOUNCE_BYTES: usize = 1 << 20;

/// One namespace of a controller. Cheap to clone; `Send + Sync`: see the controller's
/// threading model.
#[derive(Clone)]
pub struct Namespace {
    path: Arc<dyn IoPath>,
    info: NamespaceInfo,
    max_transfer_bytes: u32,
    oncs: u16,
    flush_failed: Arc<Mutex<Option<String>>>,
}

impl Namespace {
    pub(crate) fn new(
        path: Arc<dyn IoPath>,
        info: NamespaceInfo,
        max_xfer: u32,
        oncs: u16,
    ) -> Self {
        Namespace {
            path,
            info,
            max_transfer_bytes: max_xfer,
            oncs,
            flush_failed: Arc::new(Mutex::new(None)),
        }
    }

    pub fn nsid(&self) -> u32 {
        self.info.nsid
    }

    /// Logical block size in bytes.
    pub fn block_size(&self) -> u32 {
        self.info.block_size
    }

    pub fn capacity_bytes(&self) -> u64 {
        self.info.blocks * u64::from(self.info.block_size)
    }

    /// Largest data one command carries; bigger calls are split.
    pub fn max_transfer_bytes(&self) -> u32 {
        self.max_transfer_bytes
    }

    /// Global identifiers (NGUID, EUI-64, UUID) and ANA group.
    pub fn info(&self) -> NamespaceInfo {
        self.info
    }

    /// What its calls go through (`Namespace::controller`, in `crate::controller`, looks
    /// for a controller there).
    pub(crate) fn path(&self) -> &dyn IoPath {
        &*self.path
    }

    /// Checks `offset`/`len` against the block size and capacity.
    pub fn check_range(&self, offset: u64, len: u64) -> Result<()> {
        let bs = self.info.block_size;
        for (what, v) in [("offset", offset), ("length", len)] {
            if v % u64::from(bs) != 0 {
                return Err(Error::Unaligned {
                    what,
                    value: v,
                    block_size: bs,
                });
            }
        }
        let cap = self.capacity_bytes();
        if offset.checked_add(len).map_or(true, |end| end > cap) {
            return Err(Error::OutOfRange {
                offset,
                len,
                capacity: cap,
            });
        }
        Ok(())
    }

    fn check_writable(&self) -> Result<()> {
        match &*self.flush_failed.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(first) => Err(Error::FlushFailed {
                first: first.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Reads `buf.len()` bytes at `offset` (bounced through the registered pool).
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.check_range(offset, buf.len() as u64)?;
        for (i, chunk) in buf.chunks_mut(BOUNCE_BYTES).enumerate() {
            let mut bounce = self.path.alloc(chunk.len())?;
            let off = offset + (i * BOUNCE_BYTES) as u64;
            self.read_into(off, &mut bounce, chunk.len())?;
            chunk.copy_from_slice(&bounce.as_slice()[..chunk.len()]);
            self.path.stats().add_bounce(chunk.len());
        }
        Ok(())
    }

    /// Writes `data` at `offset` (bounced through the registered pool).
    pub fn write_at(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.check_range(offset, data.len() as u64)?;
        self.check_writable()?;
        for (i, chunk) in data.chunks(BOUNCE_BYTES).enumerate() {
            let mut bounce = self.path.alloc(chunk.len())?;
            bounce.as_mut_slice()[..chunk.len()].copy_from_slice(chunk);
            self.path.stats().add_bounce(chunk.len());
            let off = offset + (i * BOUNCE_BYTES) as u64;
            self.write_from(off, &bounce, chunk.len())?;
        }
        Ok(())
    }

    /// Zero-copy read of `buf.len()` bytes at `offset` straight into a registered buffer.
    pub fn read_buf(&self, offset: u64, buf: &mut IoBuf) -> Result<()> {
        self.check_range(offset, buf.len() as u64)?;
        let len = buf.len();
        self.read_into(offset, buf, len)
    }

    /// Zero-copy write of a registered buffer at `offset`.
    pub fn write_buf(&self, offset: u64, buf: &IoBuf) -> Result<()> {
        self.check_range(offset, buf.len() as u64)?;
        self.check_writable()?;
        self.write_from(offset, buf, buf.len())
    }

    fn read_into(&self, offset: u64, buf: &mut IoBuf, len: usize) -> Result<()> {
        let cmds = self.rw_cmds(op::READ, offset, buf, len);
        // `buf` is borrowed mutably for the whole call, so nothing else can read or write it
        // while the target writes into it.
        self.run(&cmds, "read", true)
    }

    fn write_from(&self, offset: u64, buf: &IoBuf, len: usize) -> Result<()> {
        let cmds = self.rw_cmds(op::WRITE, offset, buf, len);
        self.run(&cmds, "write", self.path.opts().retry_writes)
    }

    fn rw_cmds(&self, opcode: u8, offset: u64, buf: &IoBuf, len: usize) -> Vec<Cmd> {
        let bs = self.info.block_size as usize;
        let step = (self.max_transfer_bytes as usize / bs).clamp(1, 1 << 16) * bs;
        (0..len)
            .step_by(step)
            .map(|at| {
                let n = step.min(len - at);
                let rw = ReadWrite {
                    nsid: self.info.nsid,
                    slba: (offset + at as u64) / bs as u64,
                    nlb: (n / bs - 1) as u16,
                    fua: false,
                    lr: false,
                    dsm: 0,
                };
                let seg = Seg::of(buf, at, n as u32);
                Cmd {
                    sqe: rw.to_sqe(opcode, 0),
                    dir: if opcode == op::READ {
                        Dir::ToHost(seg)
                    } else {
                        Dir::ToCtrl(seg)
                    },
                }
            })
            .collect()
    }

    /// Makes everything written so far durable (NVMe Flush). A failed flush makes the
    /// namespace handle (and its clones) refuse writes: reopen it after dealing with the error.
    pub fn flush(&self) -> Result<()> {
        let cmds = [Cmd {
            sqe: flush_sqe(self.info.nsid, 0),
            dir: Dir::None,
        }];
        let r = self.run(&cmds, "flush", true);
        if let Err(e) = &r {
            let mut f = self.flush_failed.lock().unwrap_or_else(|p| p.into_inner());
            f.get_or_insert_with(|| e.to_string());
        }
        r
    }

    /// Writes zeroes over `len` bytes at `offset` (NVMe Write Zeroes), no data transferred.
    pub fn write_zeroes(&self, offset: u64, len: u64) -> Result<()> {
        self.check_range(offset, len)?;
        self.check_writable()?;
        self.need(oncs::WRITE_ZEROES, "Write Zeroes")?;
        let bs = u64::from(self.info.block_size);
        let step = (1u64 << 16) * bs;
        let cmds: Vec<Cmd> = (0..len)
            .step_by(step as usize)
            .map(|at| {
                let n = step.min(len - at);
                let wz = WriteZeroes {
                    nsid: self.info.nsid,
                    slba: (offset + at) / bs,
                    nlb: (n / bs - 1) as u16,
                    deallocate: false,
                    fua: false,
                };
                Cmd {
                    sqe: wz.to_sqe(0),
                    dir: Dir::None,
                }
            })
            .collect();
        self.run(&cmds, "write zeroes", self.path.opts().retry_writes)
    }

    /// Deallocates (trims) `len` bytes at `offset` (Dataset Management, AD). The blocks'
    /// contents are then unspecified (the controller's DLFEAT says what reads return).
    pub fn discard(&self, offset: u64, len: u64) -> Result<()> {
        self.check_range(offset, len)?;
        self.check_writable()?;
        self.need(oncs::DSM, "Dataset Management")?;
        let bs = u64::from(self.info.block_size);
        let per_range = u64::from(u32::MAX) * bs;
        let ranges: Vec<DsmRange> = (0..len)
            .step_by(per_range.min(usize::MAX as u64) as usize)
            .map(|at| DsmRange {
                cattr: 0,
                nlb: (per_range.min(len - at) / bs) as u32,
                slba: (offset + at) / bs,
            })
            .collect();
        if ranges.is_empty() {
            return Ok(());
        }
        for group in ranges.chunks(DSM_MAX_RANGES) {
            let bytes = encode_dsm_ranges(group);
            let mut buf = self.path.alloc(bytes.len())?;
            buf.as_mut_slice()[..bytes.len()].copy_from_slice(&bytes);
            let dsm = Dsm {
                nsid: self.info.nsid,
                nr: (group.len() - 1) as u8,
                idr: false,
                idw: false,
                deallocate: true,
            };
            let cmds = [Cmd {
                sqe: dsm.to_sqe(0),
                dir: Dir::ToCtrl(Seg::of(&buf, 0, bytes.len() as u32)),
            }];
            self.run(&cmds, "discard", true)?;
        }
        Ok(())
    }

    fn need(&self, bit: u16, what: &'static str) -> Result<()> {
        if self.oncs & bit == 0 {
            return Err(Error::Unsupported {
                what,
                oncs: self.oncs,
            });
        }
        Ok(())
    }

    /// Runs `cmds` (whose data memory the caller keeps alive for the call) through the
    /// namespace's path, sending them again after a transport failure if `retry`.
    fn run(&self, cmds: &[Cmd], what: &'static str, retry: bool) -> Result<()> {
        self.path.run(self.info.nsid, cmds, what, retry)
    }
}
