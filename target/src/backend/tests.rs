//! Backend tests: every backend's operations with data verification, fault injection, and the
//! namespace's write fence.

use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdmablk::fabric::MemBuf;

use super::*;
use crate::arena::{Arena, ParcelLayout};
use crate::config::{
    ByteSize, ErrorBackendConfig, FaultConfig, FileBackendConfig, SizedBackendConfig,
};
use crate::namespace::Namespace;

const BS: u32 = 4096;

/// Page-aligned test memory that outlives every request naming it.
pub(crate) struct TestMem(MemBuf);

impl TestMem {
    pub(crate) fn new(len: usize) -> Self {
        TestMem(MemBuf::zeroed(len).unwrap())
    }

    /// `len` bytes at `off`.
    pub(crate) fn buf(&self, off: usize, len: usize) -> IoBuf {
        assert!(off + len <= self.0.len());
        // SAFETY: inside the live mapping; each test keeps the TestMem alive until every
        // request naming it completed, and reads it only after completions.
        unsafe {
            IoBuf::from_raw_parts(NonNull::new(self.0.as_ptr().add(off)).unwrap(), len as u32)
        }
    }

    pub(crate) fn bytes(&self, off: usize, len: usize) -> &[u8] {
        &self.0.as_slice()[off..off + len]
    }

    pub(crate) fn fill(&mut self, off: usize, len: usize, f: impl Fn(usize) -> u8) {
        for (i, b) in self.0.as_mut_slice()[off..off + len].iter_mut().enumerate() {
            *b = f(off + i);
        }
    }
}

/// Polls until `n` completions arrived (or panics after 10 s).
fn wait_for(q: &mut dyn FnMut(&mut [Completion]) -> usize, n: usize) -> Vec<Completion> {
    let mut got = Vec::new();
    let mut out = [Completion::EMPTY; 8];
    let start = Instant::now();
    while got.len() < n {
        let k = q(&mut out);
        got.extend_from_slice(&out[..k]);
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "timed out: {got:?}"
        );
        if k == 0 {
            std::thread::yield_now();
        }
    }
    got
}

fn run(q: &mut dyn BackendQueue, req: IoRequest) -> Result<(), IoError> {
    match q.submit(req) {
        Ok(()) => {}
        Err(SubmitError::Rejected(e)) => return Err(e),
        Err(SubmitError::Busy) => panic!("busy with nothing in flight"),
    }
    let c = wait_for(&mut |out| q.poll(out), 1);
    assert_eq!(c[0].tag, req.tag);
    assert_eq!(c[0].op, req.op.kind());
    c[0].result
}

fn pattern(i: usize) -> u8 {
    (i * 7 + i / 4096) as u8
}

/// Writes, reads back, flushes, zeroes and deallocates through `q`, checking the data.
fn exercise(q: &mut dyn BackendQueue, mem: &mut TestMem, num_blocks: u64) {
    exercise_with(q, mem, num_blocks, true)
}

/// As [`exercise`]; `dealloc_zeroes`: whether deallocated blocks must read back as zeroes.
fn exercise_with(
    q: &mut dyn BackendQueue,
    mem: &mut TestMem,
    num_blocks: u64,
    dealloc_zeroes: bool,
) {
    let bs = BS as usize;
    mem.fill(0, 8 * bs, pattern);
    let w = IoOp::Write {
        lba: 3,
        blocks: 8,
        buf: mem.buf(0, 8 * bs),
        fua: false,
    };
    run(q, IoRequest { tag: 1, op: w }).unwrap();
    let r = IoOp::Read {
        lba: 3,
        blocks: 8,
        buf: mem.buf(8 * bs, 8 * bs),
    };
    run(q, IoRequest { tag: 2, op: r }).unwrap();
    assert!(mem
        .bytes(8 * bs, 8 * bs)
        .iter()
        .enumerate()
        .all(|(i, &b)| b == pattern(i)));

    run(
        q,
        IoRequest {
            tag: 3,
            op: IoOp::Flush,
        },
    )
    .unwrap();
    let fua = IoOp::Write {
        lba: 20,
        blocks: 1,
        buf: mem.buf(0, bs),
        fua: true,
    };
    run(q, IoRequest { tag: 4, op: fua }).unwrap();

    // Zero blocks 4 and 5 (the 2nd and 3rd written), deallocate block 9 (the 7th).
    run(
        q,
        IoRequest {
            tag: 5,
            op: IoOp::WriteZeroes { lba: 4, blocks: 2 },
        },
    )
    .unwrap();
    run(
        q,
        IoRequest {
            tag: 6,
            op: IoOp::Deallocate { lba: 9, blocks: 1 },
        },
    )
    .unwrap();
    run(q, IoRequest { tag: 7, op: r }).unwrap();
    let got = mem.bytes(8 * bs, 8 * bs);
    for (blk, data) in got.chunks(bs).enumerate() {
        if blk == 6 && !dealloc_zeroes {
            continue;
        }
        let zero = matches!(blk, 1 | 2 | 6);
        let want = |i: usize| if zero { 0 } else { pattern(blk * bs + i) };
        assert!(
            data.iter().enumerate().all(|(i, &b)| b == want(i)),
            "block {} has the wrong contents (zeroed: {zero})",
            3 + blk
        );
    }

    // Out of range, and a buffer that does not match the block count.
    let past = IoOp::Read {
        lba: num_blocks - 1,
        blocks: 2,
        buf: mem.buf(0, 2 * bs),
    };
    assert_eq!(
        q.submit(IoRequest { tag: 8, op: past }),
        Err(SubmitError::Rejected(IoError::new(IoErrorKind::OutOfRange)))
    );
    let short = IoOp::Read {
        lba: 0,
        blocks: 2,
        buf: mem.buf(0, bs),
    };
    assert_eq!(
        q.submit(IoRequest { tag: 9, op: short }),
        Err(SubmitError::Rejected(IoError::new(
            IoErrorKind::InvalidRequest
        )))
    );
    assert_eq!(q.in_flight(), 0);
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A fresh file path under `dir`, removed on drop.
struct TempPath(PathBuf);

impl TempPath {
    fn new(dir: &Path) -> TempPath {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        TempPath(dir.join(format!("rdmablk-backend-{}-{n}.img", std::process::id())))
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn file_cfg(path: &Path, direct: bool) -> FileBackendConfig {
    FileBackendConfig {
        path: path.to_owned(),
        create_size: Some(ByteSize(1 << 20)),
        direct,
    }
}

fn file_roundtrip(dir: &Path, direct: bool) -> bool {
    let p = TempPath::new(dir);
    let f = file::UringFile::open_file(&file_cfg(&p.0, direct), BS, false).unwrap();
    assert_eq!(f.num_blocks(), 256);
    let is_direct = f.is_direct();
    let io = WorkerIo::new(64, None);
    let mut q = f.open_queue(&io, 16).unwrap();
    let mut mem = TestMem::new(16 * BS as usize);
    exercise(q.as_mut(), &mut mem, 256);
    drop(q);
    // The data is in the file itself.
    let on_disk = std::fs::read(&p.0).unwrap();
    assert_eq!(on_disk.len(), 1 << 20);
    assert_eq!(on_disk[3 * 4096 + 5], pattern(5));
    assert!(on_disk[4 * 4096..6 * 4096].iter().all(|&b| b == 0));
    is_direct
}

#[test]
fn file_backend_roundtrip_in_tmp() {
    let direct = file_roundtrip(&std::env::temp_dir(), true);
    eprintln!("/tmp file backend direct I/O: {direct}");
    file_roundtrip(&std::env::temp_dir(), false);
}

#[test]
fn file_backend_roundtrip_on_tmpfs() {
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() {
        eprintln!("SKIP: /dev/shm (tmpfs) is missing");
        return;
    }
    // tmpfs refuses O_DIRECT before Linux 6.6 (buffered fallback) and ZERO_RANGE always
    // (the punch-hole fallback).
    let direct = file_roundtrip(shm, true);
    eprintln!("/dev/shm file backend direct I/O: {direct}");
}

#[test]
fn file_backend_uses_the_arena_as_fixed_buffers() {
    let p = TempPath::new(&std::env::temp_dir());
    let f = file::UringFile::open_file(&file_cfg(&p.0, true), BS, false).unwrap();
    let layout = ParcelLayout::new(32, 4096, 64 << 10);
    let arena = Arc::new(Arena::unpinned(layout.total_bytes).unwrap());
    let io = WorkerIo::new(64, Some(Arc::clone(&arena)));
    let mut q = f.open_queue(&io, 16).unwrap();
    let win = arena.carve(layout).unwrap();
    let (a, b) = (win.data_slot(0), win.data_slot(1));
    let ring = io.ring().unwrap();
    assert!(
        ring.borrow().fixed_index(a.as_ptr(), a.len).is_some(),
        "arena not registered"
    );
    // SAFETY: the slots are in the live arena, the parcel lives until the end of the test,
    // and nothing else touches them while requests run.
    let (wbuf, rbuf) = unsafe {
        std::ptr::write_bytes(a.as_ptr(), 0x5A, 8 * 4096);
        (
            IoBuf::from_raw_parts(NonNull::new(a.as_ptr()).unwrap(), 8 * 4096),
            IoBuf::from_raw_parts(NonNull::new(b.as_ptr()).unwrap(), 8 * 4096),
        )
    };
    let w = IoOp::Write {
        lba: 0,
        blocks: 8,
        buf: wbuf,
        fua: true,
    };
    run(q.as_mut(), IoRequest { tag: 1, op: w }).unwrap();
    run(
        q.as_mut(),
        IoRequest {
            tag: 2,
            op: IoOp::Read {
                lba: 0,
                blocks: 8,
                buf: rbuf,
            },
        },
    )
    .unwrap();
    // SAFETY: the read completed; nothing else accesses the slot.
    let back = unsafe { std::slice::from_raw_parts(b.as_ptr(), 8 * 4096) };
    assert!(back.iter().all(|&x| x == 0x5A));
    drop(q);
    drop(ring);
    drop(io);
    drop(win);
    assert_eq!(arena.stats().bytes_in_use, 0);
}

#[test]
fn misaligned_direct_io_is_a_clean_error() {
    let p = TempPath::new(&std::env::temp_dir());
    let f = file::UringFile::open_file(&file_cfg(&p.0, true), BS, false).unwrap();
    if !f.is_direct() || f.mem_align() <= 1 {
        eprintln!(
            "SKIP: {} has no O_DIRECT alignment to violate",
            p.0.display()
        );
        return;
    }
    let io = WorkerIo::new(8, None);
    let mut q = f.open_queue(&io, 4).unwrap();
    let mem = TestMem::new(3 * BS as usize);
    let r = IoOp::Read {
        lba: 0,
        blocks: 1,
        buf: mem.buf(1, BS as usize),
    };
    assert_eq!(
        q.submit(IoRequest { tag: 1, op: r }),
        Err(SubmitError::Rejected(IoError::new(
            IoErrorKind::InvalidRequest
        )))
    );
    assert_eq!(q.in_flight(), 0);
    // The queue still works afterwards.
    let ok = IoOp::Read {
        lba: 0,
        blocks: 1,
        buf: mem.buf(0, BS as usize),
    };
    run(q.as_mut(), IoRequest { tag: 2, op: ok }).unwrap();
}

#[test]
fn file_backend_refuses_missing_and_non_regular_files() {
    let p = TempPath::new(&std::env::temp_dir());
    let cfg = FileBackendConfig {
        path: p.0.clone(),
        create_size: None,
        direct: true,
    };
    let e = file::UringFile::open_file(&cfg, BS, false).unwrap_err();
    assert!(e.to_string().contains(&p.0.display().to_string()), "{e}");
    let cfg = FileBackendConfig {
        path: std::env::temp_dir(),
        create_size: None,
        direct: false,
    };
    assert!(file::UringFile::open_file(&cfg, BS, false).is_err());
}

#[test]
fn read_only_file_refuses_writes() {
    let p = TempPath::new(&std::env::temp_dir());
    drop(file::UringFile::open_file(&file_cfg(&p.0, false), BS, false).unwrap());
    let f = file::UringFile::open_file(&file_cfg(&p.0, false), BS, true).unwrap();
    let io = WorkerIo::new(8, None);
    let mut q = f.open_queue(&io, 4).unwrap();
    let mem = TestMem::new(BS as usize);
    let w = IoOp::Write {
        lba: 0,
        blocks: 1,
        buf: mem.buf(0, BS as usize),
        fua: false,
    };
    assert_eq!(
        q.submit(IoRequest { tag: 1, op: w }),
        Err(SubmitError::Rejected(IoError::new(IoErrorKind::ReadOnly)))
    );
}

#[test]
fn ram_backend_roundtrip_and_busy() {
    let ram = ram::RamBackend::new(1 << 20, BS).unwrap();
    let io = WorkerIo::new(8, None);
    let mut q = ram.open_queue(&io, 2).unwrap();
    let mut mem = TestMem::new(16 * BS as usize);
    exercise(q.as_mut(), &mut mem, 256);
    assert!(!io.has_ring(), "memory backends do not need io_uring");
    let r = IoOp::Read {
        lba: 0,
        blocks: 1,
        buf: mem.buf(0, BS as usize),
    };
    q.submit(IoRequest { tag: 1, op: r }).unwrap();
    q.submit(IoRequest { tag: 2, op: r }).unwrap();
    assert_eq!(
        q.submit(IoRequest { tag: 3, op: r }),
        Err(SubmitError::Busy)
    );
    assert_eq!(wait_for(&mut |o| q.poll(o), 2).len(), 2);
    assert_eq!(q.in_flight(), 0);
}

#[test]
fn ram_backend_is_shared_between_queues() {
    let ram = ram::RamBackend::new(1 << 20, 512).unwrap();
    let io = WorkerIo::new(8, None);
    let mut q1 = ram.open_queue(&io, 4).unwrap();
    let mut q2 = ram.open_queue(&io, 4).unwrap();
    let mut mem = TestMem::new(2048);
    mem.fill(0, 1024, |i| i as u8);
    let w = IoOp::Write {
        lba: 7,
        blocks: 2,
        buf: mem.buf(0, 1024),
        fua: false,
    };
    run(q1.as_mut(), IoRequest { tag: 1, op: w }).unwrap();
    let r = IoOp::Read {
        lba: 7,
        blocks: 2,
        buf: mem.buf(1024, 1024),
    };
    run(q2.as_mut(), IoRequest { tag: 2, op: r }).unwrap();
    assert_eq!(mem.bytes(0, 1024), mem.bytes(1024, 1024));
}

#[test]
fn null_backend_completes_without_touching_data() {
    let null = null::NullBackend::new(1 << 30, BS);
    assert_eq!(null.num_blocks(), (1 << 30) / 4096);
    let io = WorkerIo::new(8, None);
    let mut q = null.open_queue(&io, 4).unwrap();
    let mut mem = TestMem::new(BS as usize);
    mem.fill(0, BS as usize, |_| 0xAA);
    let r = IoOp::Read {
        lba: 5,
        blocks: 1,
        buf: mem.buf(0, BS as usize),
    };
    run(q.as_mut(), IoRequest { tag: 1, op: r }).unwrap();
    assert!(mem.bytes(0, BS as usize).iter().all(|&b| b == 0xAA));
    for op in [
        IoOp::Write {
            lba: 5,
            blocks: 1,
            buf: mem.buf(0, BS as usize),
            fua: true,
        },
        IoOp::Flush,
        IoOp::WriteZeroes {
            lba: 0,
            blocks: 100,
        },
        IoOp::Deallocate {
            lba: 0,
            blocks: 100,
        },
    ] {
        run(q.as_mut(), IoRequest { tag: 2, op }).unwrap();
    }
    let past = IoOp::WriteZeroes {
        lba: null.num_blocks(),
        blocks: 1,
    };
    assert!(q.submit(IoRequest { tag: 3, op: past }).is_err());
}

fn error_cfg(reads: FaultConfig, writes: FaultConfig, flushes: FaultConfig) -> ErrorBackendConfig {
    ErrorBackendConfig {
        inner: crate::config::BackendConfig::Ram(SizedBackendConfig {
            size: ByteSize(1 << 20),
        }),
        seed: 1,
        latency_us: 0,
        fail_reads: reads,
        fail_writes: writes,
        fail_flushes: flushes,
    }
}

fn nth(n: u64, sticky: bool) -> FaultConfig {
    FaultConfig {
        rate: 0.0,
        nth: Some(n),
        sticky,
    }
}

#[test]
fn error_backend_fails_the_nth_op_of_a_kind() {
    let inner: Arc<dyn Backend> = Arc::new(ram::RamBackend::new(1 << 20, BS).unwrap());
    let cfg = error_cfg(nth(3, false), nth(2, true), FaultConfig::default());
    let eb = error::ErrorBackend::new(inner, &cfg);
    let io = WorkerIo::new(8, None);
    let mut q = eb.open_queue(&io, 4).unwrap();
    let mut mem = TestMem::new(2 * BS as usize);
    mem.fill(0, BS as usize, |_| 0x11);
    let r = IoOp::Read {
        lba: 0,
        blocks: 1,
        buf: mem.buf(BS as usize, BS as usize),
    };
    let w = IoOp::Write {
        lba: 0,
        blocks: 1,
        buf: mem.buf(0, BS as usize),
        fua: false,
    };
    let results: Vec<_> = (0..5)
        .map(|t| run(q.as_mut(), IoRequest { tag: t, op: r }))
        .collect();
    let failed: Vec<bool> = results.iter().map(Result::is_err).collect();
    assert_eq!(failed, [false, false, true, false, false]);
    assert_eq!(
        results[2].unwrap_err(),
        IoError {
            kind: IoErrorKind::MediaRead,
            errno: libc::EIO
        }
    );

    run(q.as_mut(), IoRequest { tag: 10, op: w }).unwrap();
    // The 2nd write fails and, sticky, every later one; a failed write changes nothing.
    mem.fill(0, BS as usize, |_| 0x22);
    for t in 11..14 {
        let e = run(q.as_mut(), IoRequest { tag: t, op: w }).unwrap_err();
        assert_eq!(e.kind, IoErrorKind::WriteFault);
    }
    let e = run(
        q.as_mut(),
        IoRequest {
            tag: 14,
            op: IoOp::WriteZeroes { lba: 0, blocks: 1 },
        },
    );
    assert_eq!(e.unwrap_err().kind, IoErrorKind::WriteFault);
    run(q.as_mut(), IoRequest { tag: 15, op: r }).unwrap();
    assert!(mem
        .bytes(BS as usize, BS as usize)
        .iter()
        .all(|&b| b == 0x11));
    run(
        q.as_mut(),
        IoRequest {
            tag: 16,
            op: IoOp::Flush,
        },
    )
    .unwrap();
    assert_eq!(
        eb.injected(),
        error::InjectedFaults {
            reads: 1,
            writes: 4,
            flushes: 0
        }
    );
}

#[test]
fn error_backend_rate_is_deterministic_per_seed() {
    let pattern_of = |seed: u64| -> Vec<bool> {
        let inner: Arc<dyn Backend> = Arc::new(null::NullBackend::new(1 << 20, BS));
        let mut cfg = error_cfg(
            FaultConfig {
                rate: 0.3,
                nth: None,
                sticky: false,
            },
            FaultConfig::default(),
            FaultConfig::default(),
        );
        cfg.seed = seed;
        let eb = error::ErrorBackend::new(inner, &cfg);
        let io = WorkerIo::new(8, None);
        let mut q = eb.open_queue(&io, 4).unwrap();
        let mem = TestMem::new(BS as usize);
        let r = IoOp::Read {
            lba: 0,
            blocks: 1,
            buf: mem.buf(0, BS as usize),
        };
        (0..1000)
            .map(|t| run(q.as_mut(), IoRequest { tag: t, op: r }).is_err())
            .collect()
    };
    let a = pattern_of(42);
    assert_eq!(a, pattern_of(42));
    assert_ne!(a, pattern_of(43));
    let fails = a.iter().filter(|&&f| f).count();
    assert!(
        (200..400).contains(&fails),
        "{fails} failures of 1000 at rate 0.3"
    );
}

#[test]
fn error_backend_adds_latency() {
    let inner: Arc<dyn Backend> = Arc::new(null::NullBackend::new(1 << 20, BS));
    let mut cfg = error_cfg(
        FaultConfig::default(),
        FaultConfig::default(),
        FaultConfig::default(),
    );
    cfg.latency_us = 30_000;
    let eb = error::ErrorBackend::new(inner, &cfg);
    let io = WorkerIo::new(8, None);
    let mut q = eb.open_queue(&io, 4).unwrap();
    let start = Instant::now();
    q.submit(IoRequest {
        tag: 1,
        op: IoOp::Flush,
    })
    .unwrap();
    let mut out = [Completion::EMPTY; 4];
    assert_eq!(q.poll(&mut out), 0);
    assert_eq!(q.in_flight(), 1);
    let c = wait_for(&mut |o| q.poll(o), 1);
    assert!(start.elapsed() >= Duration::from_millis(30));
    assert_eq!(c[0].tag, 1);
    assert_eq!(q.in_flight(), 0);
}

#[test]
fn failed_flush_fences_writes_until_reopened() {
    let inner: Arc<dyn Backend> = Arc::new(ram::RamBackend::new(1 << 20, BS).unwrap());
    let cfg = error_cfg(
        FaultConfig::default(),
        FaultConfig::default(),
        nth(2, false),
    );
    let ns = Namespace::new(1, Arc::new(error::ErrorBackend::new(inner, &cfg)), false);
    let io = WorkerIo::new(8, None);
    let mut q = ns.open_queue(&io, 4).unwrap();
    let mut other_worker = ns.open_queue(&io, 4).unwrap();
    let mem = TestMem::new(BS as usize);
    let w = IoOp::Write {
        lba: 0,
        blocks: 1,
        buf: mem.buf(0, BS as usize),
        fua: false,
    };
    let r = IoOp::Read {
        lba: 0,
        blocks: 1,
        buf: mem.buf(0, BS as usize),
    };
    let go = |q: &mut crate::namespace::NamespaceQueue, tag, op| -> Result<(), IoError> {
        match q.submit(IoRequest { tag, op }) {
            Err(SubmitError::Rejected(e)) => Err(e),
            Err(SubmitError::Busy) => panic!("busy"),
            Ok(()) => wait_for(&mut |o| q.poll(o), 1)[0].result,
        }
    };
    go(&mut q, 1, w).unwrap();
    go(&mut q, 2, IoOp::Flush).unwrap();
    go(&mut q, 3, w).unwrap();
    assert!(!ns.is_fenced());
    assert_eq!(
        go(&mut q, 4, IoOp::Flush).unwrap_err().kind,
        IoErrorKind::WriteFault
    );
    assert!(ns.is_fenced());
    // Writes, zeroes, deallocates and flushes are refused on every queue; reads go on.
    let fenced = IoError::new(IoErrorKind::WritesFenced);
    assert_eq!(go(&mut q, 5, w), Err(fenced));
    assert_eq!(go(&mut other_worker, 6, w), Err(fenced));
    assert_eq!(
        go(
            &mut other_worker,
            7,
            IoOp::WriteZeroes { lba: 0, blocks: 1 }
        ),
        Err(fenced)
    );
    assert_eq!(
        go(&mut q, 8, IoOp::Deallocate { lba: 0, blocks: 1 }),
        Err(fenced)
    );
    assert_eq!(
        go(&mut q, 9, IoOp::Flush),
        Err(fenced),
        "a later flush must not succeed"
    );
    go(&mut q, 10, r).unwrap();
    // Reopening (a new namespace over the storage) clears the fence.
    let reopened = Namespace::new(1, Arc::clone(ns.backend()), false);
    let mut q2 = reopened.open_queue(&io, 4).unwrap();
    go(&mut q2, 11, w).unwrap();
}

#[test]
fn failed_fua_write_fences_too() {
    let inner: Arc<dyn Backend> = Arc::new(ram::RamBackend::new(1 << 20, BS).unwrap());
    let cfg = error_cfg(
        FaultConfig::default(),
        nth(1, false),
        FaultConfig::default(),
    );
    let ns = Namespace::new(1, Arc::new(error::ErrorBackend::new(inner, &cfg)), false);
    let io = WorkerIo::new(8, None);
    let mut q = ns.open_queue(&io, 4).unwrap();
    let mem = TestMem::new(BS as usize);
    let w = IoOp::Write {
        lba: 0,
        blocks: 1,
        buf: mem.buf(0, BS as usize),
        fua: true,
    };
    q.submit(IoRequest { tag: 1, op: w }).unwrap();
    assert!(wait_for(&mut |o| q.poll(o), 1)[0].result.is_err());
    assert!(ns.is_fenced());
}

#[test]
fn read_only_namespace_refuses_modifications() {
    let ns = Namespace::new(
        3,
        Arc::new(ram::RamBackend::new(1 << 20, BS).unwrap()),
        true,
    );
    assert!(ns.read_only());
    let io = WorkerIo::new(8, None);
    let mut q = ns.open_queue(&io, 4).unwrap();
    let ro = Err(SubmitError::Rejected(IoError::new(IoErrorKind::ReadOnly)));
    assert_eq!(
        q.submit(IoRequest {
            tag: 1,
            op: IoOp::WriteZeroes { lba: 0, blocks: 1 }
        }),
        ro
    );
    assert_eq!(
        q.submit(IoRequest {
            tag: 2,
            op: IoOp::Deallocate { lba: 0, blocks: 1 }
        }),
        ro
    );
    q.submit(IoRequest {
        tag: 3,
        op: IoOp::Flush,
    })
    .unwrap();
}

#[test]
fn namespaces_open_from_config() {
    let text = r#"
[[listener]]
provider = "soft"
address = "127.0.0.1"
[arena]
bytes = "32MiB"
lock = false
[[subsystem]]
nqn = "nqn.2026-11.io.rdmablk:t"
allow_any_host = true
[[subsystem.namespace]]
nsid = 1
uuid = "f81d4fae-7dec-11d0-a765-00a0c91e6bf6"
backend = { kind = "ram", size = "1MiB" }
[[subsystem.namespace]]
nsid = 2
block_size = 512
[subsystem.namespace.backend]
kind = "error"
inner = { kind = "null", size = "1MiB" }
"#;
    let cfg = crate::config::Config::from_str(text).unwrap();
    let nss: Vec<Namespace> = cfg.subsystems[0]
        .namespaces
        .iter()
        .map(|n| Namespace::open(n).unwrap())
        .collect();
    assert_eq!(nss[0].num_blocks(), 256);
    assert_eq!(nss[0].uuid().unwrap()[0], 0xf8);
    assert_eq!(
        (nss[1].nsid(), nss[1].block_size(), nss[1].num_blocks()),
        (2, 512, 2048)
    );
}

#[test]
fn io_error_kinds_map_to_nvme_statuses() {
    assert_eq!(IoErrorKind::MediaRead.nvme_status(), (2, 0x81));
    assert_eq!(IoErrorKind::WriteFault.nvme_status(), (2, 0x80));
    assert_eq!(IoErrorKind::Internal.nvme_status(), (0, 0x06));
    assert_eq!(
        IoError::from_errno(OpKind::Read, libc::EIO).kind,
        IoErrorKind::MediaRead
    );
    assert_eq!(
        IoError::from_errno(OpKind::Flush, libc::EIO).kind,
        IoErrorKind::WriteFault
    );
    assert_eq!(
        IoError::from_errno(OpKind::Write, libc::EINVAL).kind,
        IoErrorKind::InvalidRequest
    );
}

#[test]
fn block_device_roundtrip() {
    // Hardware-gated: needs a scratch block device whose contents may be destroyed.
    let Some(dev) = std::env::var_os("RDMABLK_TEST_BLOCKDEV") else {
        eprintln!("SKIP: set RDMABLK_TEST_BLOCKDEV=/dev/... (a scratch device: it is overwritten)");
        return;
    };
    let cfg = crate::config::BlockBackendConfig {
        path: PathBuf::from(dev),
        // RDMABLK_TEST_BLOCKDEV_POLL=1: reads and writes on a polled ring.
        poll: std::env::var_os("RDMABLK_TEST_BLOCKDEV_POLL").is_some(),
    };
    let b = file::UringFile::open_block(&cfg, BS, false).unwrap();
    assert!(b.is_direct());
    let io = WorkerIo::new(64, None);
    let mut q = b.open_queue(&io, 16).unwrap();
    let mut mem = TestMem::new(16 * BS as usize);
    let n = b.num_blocks();
    exercise_with(q.as_mut(), &mut mem, n, false);
}
