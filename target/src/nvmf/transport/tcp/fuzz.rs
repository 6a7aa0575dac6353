//! The fuzz target `tcp_queue`'s entry point (fuzz/fuzz_targets/): one worker's NVMe/TCP
//! poll group, driven from the calling thread, one pass at a time, over real loopback
//! sockets. The harness plays the host on the other end of each socket; a pass does what a
//! worker's loop does (`worker::Worker::run`): the group's events, the backend's completions,
//! the backlog, the data buffers freed, the end of the pass, and the housekeeping (every pass
//! here, not every few milliseconds, so a closed queue is gone when the pass returns).
//!
//! Single-threaded and without timers that matter, so an input does the same thing every
//! time it runs. Not for anything but fuzzing and tests.

use std::collections::VecDeque;
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::ptr::NonNull;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::group::TcpGroup;
use super::TcpPending;
use rdmablk::nvme::fabrics::CONNECT_DATA_LEN;
use rdmablk::nvme::{Connect, ConnectData, InCapsuleSgl, Nqn, Sgl, Sqe};

use crate::arena::pool::{DataPool, PoolStats};
use crate::backend::{BackendQueue, Completion, IoBuf, IoOp, IoRequest};
use crate::config::Config;
use crate::nvmf::request::Tag;
use crate::nvmf::request_flow::Ctx;
use crate::nvmf::runtime::port::Port;
use crate::nvmf::transport::PollGroup;
use crate::nvmf::worker::ns_queues::NsQueues;
use crate::nvmf::worker::pass_stats::PassStats;
use crate::nvmf::{open_shared, Shared};
use crate::ring::WorkerIo;

/// The subsystem of [`CONFIG`].
pub const SUBNQN: &str = "nqn.2026-12.io.rdmablk:fuzz";
/// The host [`CONFIG`] allows.
pub const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:5a5a5a5a-5a5a-5a5a-5a5a-5a5a5a5a5a5a";

/// A target for the harness: 64 KiB of ram namespace in 512-byte blocks; a data pool of 16
/// pages (64 KiB), so that commands wait for buffers too; I/O of 32 KiB at most, 4 KiB of it
/// in the capsule; H2CData of 8 KiB or more placed when its data comes in pieces
/// (`receive.rs`), smaller PDUs copied.
pub const CONFIG: &str = r#"
[[listener]]
transport = "tcp"
address = "127.0.0.1"
port = 4420

[target]
worker_threads = 1
io_statistics = false
tcp_place_from = 8192

[control]
socket = ""

[arena]
bytes = "4MiB"
data_bytes = "64KiB"
lock = false

[limits]
max_queue_depth = 32
max_io_size = 32768
in_capsule_data_size = 4096
max_queues_per_controller = 4

[[subsystem]]
nqn = "nqn.2026-12.io.rdmablk:fuzz"
hosts = ["nqn.2014-08.org.nvmexpress:uuid:5a5a5a5a-5a5a-5a5a-5a5a-5a5a5a5a5a5a"]

[[subsystem.namespace]]
nsid = 1
block_size = 512
backend = { kind = "ram", size = "64KiB" }
"#;

/// The Fabrics Connect of queue `qid` (`sqsize`, controller `cntlid`) of [`CONFIG`]'s
/// subsystem by its host, without keep-alive, its data to send in the capsule.
pub fn connect_command(qid: u16, sqsize: u16, cntlid: u16) -> (Sqe, [u8; CONNECT_DATA_LEN]) {
    let data = ConnectData {
        hostid: [0x5a; 16],
        cntlid,
        subnqn: Nqn::new(SUBNQN).expect("an NQN"),
        hostnqn: Some(Nqn::new(HOSTNQN).expect("an NQN")),
    }
    .encode();
    let c = Connect {
        qid,
        sqsize,
        cattr: 0,
        kato_ms: 0,
    };
    let sgl = Sgl::InCapsule(InCapsuleSgl {
        offset: 0,
        len: data.len() as u32,
    });
    (c.to_sqe(0, &sgl), data)
}

/// A worker of a target with one NVMe/TCP listener (never bound) and one namespace, which the
/// harness drives ([`FuzzWorker::pass`]) and whose namespace it fills and reads directly.
#[doc(hidden)]
pub struct FuzzWorker {
    shared: Arc<Shared>,
    group: TcpGroup,
    nsq: NsQueues,
    pool: DataPool,
    stats: PassStats,
    backlog: VecDeque<u64>,
    comps: Vec<Completion>,
    done: Vec<Completion>,
    /// The harness's own queue to the first namespace's backend.
    ns: Box<dyn BackendQueue>,
    block_size: u32,
    /// Where the harness's connections come in.
    listener: TcpListener,
    /// The id of the port they count as coming through.
    port_id: u64,
    /// Dropped after everything that may have opened a queue on it.
    _io: WorkerIo,
}

impl FuzzWorker {
    /// A worker of the target `config` describes (one worker thread, a `tcp` listener first,
    /// a first namespace the harness may fill and read). Panics if it cannot be set up.
    pub fn new(config: &str) -> FuzzWorker {
        let cfg = Config::from_str(config).expect("the harness's configuration");
        let shared = open_shared(cfg).expect("the harness's target");
        let depth = shared.fixed.limits.max_queue_depth * 2;
        let io = WorkerIo::new(depth * 4, Some(Arc::clone(&shared.arena)));
        let mut nsq = NsQueues::default();
        for ns in shared.namespaces.all() {
            nsq.open(&ns, &io, depth).expect("a namespace queue");
        }
        let first = shared.namespaces.all().into_iter().next();
        let first = first.expect("a namespace");
        let ns = first
            .backend()
            .open_queue(&io, 4)
            .expect("the harness's queue");
        let pool = DataPool::new(&shared.arena, shared.fixed.data_pool_bytes_per_worker())
            .expect("the data pool");
        let group = TcpGroup::new(shared.fixed.limits.max_queue_depth, Default::default())
            .expect("an epoll set");
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("a loopback listener");
        // The port the connections come through, as a Connect looks it up; drained at once,
        // so its thread ends and the harness's own listener is the only way in.
        let mut cfg = shared.fixed.listeners[0].clone();
        cfg.port = 0;
        let port = Port::start(&shared, &cfg, 0).expect("the harness's port");
        port.drain();
        let port_id = port.id;
        shared.lock_ports().push(port);
        FuzzWorker {
            group,
            nsq,
            pool,
            stats: PassStats::default(),
            backlog: VecDeque::new(),
            comps: vec![Completion::EMPTY; 64],
            done: Vec::new(),
            ns,
            block_size: first.block_size(),
            listener,
            port_id,
            _io: io,
            shared,
        }
    }

    /// A new connection: the host's end, whose other end the poll group now serves (as if
    /// a listener had handed it over).
    pub fn connect(&mut self) -> TcpStream {
        let addr = self.listener.local_addr().expect("the listener's address");
        let host = TcpStream::connect(addr).expect("a loopback connection");
        // What the harness writes arrives before its next pass (no Nagle delay behind a
        // delayed ACK).
        host.set_nodelay(true).expect("TCP_NODELAY");
        let (stream, peer) = self.listener.accept().expect("the loopback connection");
        self.shared.queues_open.fetch_add(1, Ordering::AcqRel);
        let pending = Box::new(TcpPending {
            stream,
            peer,
            listener: self.port_id,
            over_limit: false,
            tls: None,
        });
        self.with_ctx(|group, ctx| group.add(pending, ctx));
        host
    }

    /// Runs `f` on the poll group with the worker's context for its requests.
    fn with_ctx<R>(&mut self, f: impl FnOnce(&mut TcpGroup, &mut Ctx<'_>) -> R) -> R {
        let shared = Arc::clone(&self.shared);
        let mut ctx = Ctx {
            shared: &shared,
            group: 0,
            counters: &[],
            nsq: &mut self.nsq,
            backlog: &mut self.backlog,
            pool: &mut self.pool,
            stats: &mut self.stats,
        };
        f(&mut self.group, &mut ctx)
    }

    /// One pass of the worker's loop; true if anything happened.
    pub fn pass(&mut self) -> bool {
        let mut busy = self.with_ctx(|group, ctx| {
            group.begin_pass();
            group.poll(ctx)
        });
        let mut done = std::mem::take(&mut self.done);
        busy |= self.nsq.poll(&mut self.comps, |c| done.push(c));
        busy |= self.with_ctx(|group, ctx| {
            for c in done.drain(..) {
                group.on_backend(Tag::decode(c.tag), &c, ctx);
            }
            for _ in 0..ctx.backlog.len() {
                let Some(tag) = ctx.backlog.pop_front() else {
                    break;
                };
                group.resume(Tag::decode(tag), ctx);
            }
            let mut busy = false;
            while let Some((w, data)) = ctx.pool.next_ready() {
                busy = true;
                group.on_buffer(w.queue, w.slot, data, ctx);
            }
            busy |= group.end_pass(ctx);
            let _ = ctx.stats.end_pass(ctx.counters);
            group.housekeeping(ctx);
            busy
        });
        self.done = done;
        busy
    }

    /// Passes until one finds nothing to do and no backend operation is left (the next would
    /// find the same: nothing comes in but what the harness sends).
    pub fn settle(&mut self) {
        for _ in 0..10_000 {
            if !self.pass() && self.nsq.in_flight() == 0 && self.backlog.is_empty() {
                return;
            }
        }
        panic!("the worker never settled: it keeps finding work with no input");
    }

    /// The data pool's counts (buffers in use, commands waiting for one).
    pub fn pool_stats(&self) -> PoolStats {
        self.pool.stats()
    }

    /// Queues open (connections counted against `limits.max_connections`).
    pub fn queues_open(&self) -> usize {
        self.shared.queues_open.load(Ordering::Acquire)
    }

    /// The first namespace's block size.
    pub fn block_size(&self) -> u32 {
        self.block_size
    }

    /// Writes `data` (whole blocks) to the first namespace at block `lba`.
    pub fn ns_write(&mut self, lba: u64, data: &mut [u8]) {
        let blocks = (data.len() / self.block_size as usize) as u32;
        let buf = io_buf(data);
        self.ns_io(IoOp::Write {
            lba,
            blocks,
            buf,
            fua: false,
        });
    }

    /// Reads whole blocks of the first namespace at block `lba` into `data`.
    pub fn ns_read(&mut self, lba: u64, data: &mut [u8]) {
        let blocks = (data.len() / self.block_size as usize) as u32;
        let buf = io_buf(data);
        self.ns_io(IoOp::Read { lba, blocks, buf });
    }

    fn ns_io(&mut self, op: IoOp) {
        self.ns
            .submit(IoRequest { tag: 0, op })
            .expect("the harness's namespace I/O");
        let mut c = [Completion::EMPTY];
        while self.ns.in_flight() > 0 {
            if self.ns.poll(&mut c) == 1 {
                c[0].result.expect("the harness's namespace I/O");
            }
        }
    }
}

fn io_buf(data: &mut [u8]) -> IoBuf {
    let ptr = NonNull::new(data.as_mut_ptr()).expect("a buffer");
    // SAFETY: `data` is borrowed mutably until `ns_io` returns, and `ns_io` returns only once
    // the request completed: the memory stays valid and nothing else touches it meanwhile.
    unsafe { IoBuf::from_raw_parts(ptr, data.len() as u32) }
}

#[cfg(test)]
mod tests {
    use std::io::{ErrorKind, Read, Write};

    use rdmablk::nvme::fabrics::CNTLID_DYNAMIC;
    use rdmablk::nvme::opcodes::io;
    use rdmablk::nvme::properties::{self, PropertySize};
    use rdmablk::nvme::transport::tcp::{
        encode_capsule_cmd, flags, pdu_type, CommonHeader, DataHeader, IcReq, Negotiated, R2t,
        CAPSULE_CMD_HLEN, CH_LEN, DATA_HLEN,
    };
    use rdmablk::nvme::{Cqe, PropertySet, ReadWrite, TransportSgl, CQE_LEN};

    use super::*;

    /// A host's end of a connection: writes, and reads whole PDUs once the worker settled.
    struct Host(TcpStream, Vec<u8>);

    impl Host {
        fn new(w: &mut FuzzWorker) -> Host {
            let s = w.connect();
            s.set_nonblocking(true).unwrap();
            let mut h = Host(s, Vec::new());
            let req = IcReq {
                pfv: 0,
                hpda: 0,
                hdgst: false,
                ddgst: false,
                maxr2t: 0,
            };
            h.send(w, &req.encode());
            assert_eq!(h.pdu().0, pdu_type::IC_RESP);
            h
        }

        fn send(&mut self, w: &mut FuzzWorker, b: &[u8]) {
            self.0.write_all(b).unwrap();
            w.settle();
            let mut buf = [0u8; 65536];
            loop {
                match self.0.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => self.1.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) => panic!("{e}"),
                }
            }
        }

        /// The next PDU received: its type and bytes.
        fn pdu(&mut self) -> (u8, Vec<u8>) {
            let ch = CommonHeader::decode(self.1[..CH_LEN].try_into().unwrap());
            let p = self.1.drain(..ch.plen as usize).collect();
            (ch.pdu_type, p)
        }

        fn capsule(&mut self, w: &mut FuzzWorker, sqe: &Sqe, data: &[u8]) {
            let mut h = [0u8; CAPSULE_CMD_HLEN];
            let l = encode_capsule_cmd(sqe, data.len(), &Negotiated::default(), &mut h);
            let mut pdu = h.to_vec();
            pdu.resize(if data.is_empty() { pdu.len() } else { l.pdo }, 0);
            pdu.extend_from_slice(data);
            self.send(w, &pdu);
        }

        fn exec(&mut self, w: &mut FuzzWorker, sqe: &Sqe, data: &[u8]) -> Cqe {
            self.capsule(w, sqe, data);
            let (t, p) = self.pdu();
            assert_eq!(t, pdu_type::CAPSULE_RESP);
            Cqe::decode(p[CH_LEN..CH_LEN + CQE_LEN].try_into().unwrap())
        }

        fn connect(&mut self, w: &mut FuzzWorker, qid: u16, cntlid: u16) -> Cqe {
            let (sqe, data) = connect_command(qid, 31, cntlid);
            self.exec(w, &sqe, &data)
        }
    }

    fn h2c(cccid: u16, ttag: u16, data: &[u8]) -> Vec<u8> {
        let h = DataHeader {
            cccid,
            ttag,
            datao: 0,
            datal: data.len() as u32,
        };
        let mut b = [0u8; DATA_HLEN];
        let l = h.encode(
            pdu_type::H2C_DATA,
            flags::DATA_LAST,
            &Negotiated::default(),
            &mut b,
        );
        let mut pdu = b.to_vec();
        pdu.resize(l.pdo, 0);
        pdu.extend_from_slice(data);
        pdu
    }

    /// A write that waited for a data buffer got one after its queue began closing (a
    /// protocol error closed it while another write, its data just in, was executing): it was
    /// prepared and sent an R2T on the closed socket, which never left, so the queue did not
    /// drain for `DRAIN_TIMEOUT` (5 s) and kept its buffers, while the worker spun on the
    /// closed socket's readiness. Found by the fuzz target `tcp_queue`.
    #[test]
    fn buffer_handed_to_a_closing_queue_goes_back() {
        let mut w = FuzzWorker::new(CONFIG);
        let mut admin = Host::new(&mut w);
        let c = admin.connect(&mut w, 0, CNTLID_DYNAMIC);
        assert!(c.status.is_success(), "{}", c.status);
        let cc = PropertySet {
            size: PropertySize::Four,
            offset: properties::CC,
            value: 0x0046_0001,
        };
        assert!(admin.exec(&mut w, &cc.to_sqe(1), &[]).status.is_success());
        let mut host = Host::new(&mut w);
        assert!(host.connect(&mut w, 1, c.dw0 as u16).status.is_success());
        // Writes of 16 KiB until one waits for a buffer (the pool has 64 KiB).
        let mut r2ts = Vec::new();
        for cid in 1..=6 {
            let rw = ReadWrite {
                nsid: 1,
                slba: u64::from(cid % 4) * 32,
                nlb: 31,
                fua: false,
                lr: false,
                dsm: 0,
            };
            let mut sqe = rw.to_sqe(io::WRITE, cid);
            sqe.set_sgl(&Sgl::Transport(TransportSgl { len: 16384 }));
            host.capsule(&mut w, &sqe, &[]);
        }
        while !host.1.is_empty() {
            let (t, p) = host.pdu();
            assert_eq!(t, pdu_type::R2T);
            r2ts.push(R2t::decode(p[..DATA_HLEN].try_into().unwrap()));
        }
        assert!(w.pool_stats().waiting > 0 && !r2ts.is_empty(), "{r2ts:?}");
        // The first write's data, and in the same segment H2CData for no R2T (fatal).
        let mut seg = h2c(r2ts[0].cccid, r2ts[0].ttag, &[0x42; 16384]);
        seg.extend_from_slice(&h2c(r2ts[0].cccid, 999, &[0x42; 512]));
        host.0.write_all(&seg).unwrap();
        for _ in 0..100 {
            w.pass();
        }
        assert_eq!(w.queues_open(), 1, "the closed I/O queue is still draining");
        assert_eq!(w.pool_stats().pages_in_use, 0, "{:?}", w.pool_stats());
    }
}
