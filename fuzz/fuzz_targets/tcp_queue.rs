//! The target's NVMe/TCP receive state machine, stateful: an I/O queue of a real poll group
//! (`rdmablk_target::nvmf::transport::tcp::fuzz::FuzzWorker`, the worker's loop run from
//! this thread over loopback sockets, a 64 KiB ram namespace) fed a sequence of PDUs built
//! from the input, the harness playing the host and answering what the target sends (each R2T
//! it reads back gives the fields of the H2CData that follow, which the input then keeps or
//! mangles).
//!
//! Input: byte 0 the connection (bit 0 header digest, bit 1 data digest, bits 2-3 HPDA,
//! bits 4-6 SQSIZE - 1); then operations, each an opcode byte and its argument bytes (see
//! `Op` below; a missing byte reads 0): a Write (by R2T, or with its data in the capsule) or
//! a Read; H2CData answering an R2T received, its fields kept or one of them mangled (CCCID,
//! TTAG, DATAO, DATAL, LAST, a digest, PLEN), or sent in two parts; H2CData with fields of
//! the input's choosing; an H2CTermReq, a second ICReq, a PDU type the host never sends, a
//! capsule with an SQE of the input's (opcodes that change no data or state), raw bytes;
//! and "send the next operation with this one", so that several PDUs reach the target in one
//! segment. After each send the worker runs until it has nothing left to do.
//!
//! Asserts: no panic; everything the target sends is a well-formed PDU with correct digests;
//! an R2T only for a write sent and not answered, for at most its data; C2HData only for a
//! read sent, within its length, holding blocks the namespace could hold; a CapsuleResp only
//! for a command sent; after a C2HTermReq nothing more, and the connection closes; when the
//! connection is gone, so is the queue and every data buffer it held. And the one that matters:
//! each block of the namespace is either as it was or, byte for byte, the data of a write
//! sent in the capsule, or of H2CData PDUs that answered that write's R2T (its CCCID and
//! TTAG) at the block's offset, with their data digest right, sent before any PDU the target
//! declared fatal (no write of data the host did not send whole, nor after the error); a
//! write that succeeded left its data there. Every data byte the harness sends is a hash of
//! (input number, PDU number, data offset), so stale buffer contents never pass for data sent.
//! With raw bytes or a mangled PLEN the PDUs the target sees are not the harness's, and the
//! namespace and attribution checks are off for the rest of the input.
#![no_main]

use std::cell::RefCell;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};

use libfuzzer_sys::fuzz_target;
use rdmablk::nvme::fabrics::CNTLID_DYNAMIC;
use rdmablk::nvme::opcodes::io;
use rdmablk::nvme::properties::{self, PropertySize};
use rdmablk::nvme::transport::tcp::{
    digest, encode_capsule_cmd, flags, pdu_type, CommonHeader, DataHeader, Direction, IcReq,
    IcResp, Negotiated, PduLayout, R2t, TermReq, CAPSULE_CMD_HLEN, CH_LEN, DATA_HLEN, IC_LEN,
};
use rdmablk::nvme::{
    Cqe, InCapsuleSgl, PropertySet, ReadWrite, Sgl, Sqe, TransportSgl, CQE_LEN, SQE_LEN,
};
use rdmablk_target::nvmf::transport::tcp::fuzz::{connect_command, FuzzWorker, CONFIG};

/// What `CONFIG` gives: its block size, its blocks, its largest I/O, its in-capsule data.
const BS: usize = 512;
const BLOCKS: u64 = 128;
const MAX_IO: u32 = 32 * 1024;
const ICD: usize = 4096;
/// Operations per input at most.
const MAX_OPS: usize = 64;

/// The byte at `off` of the data of PDU `seq` of input `nonce` (seq 0: the namespace's
/// contents before the input).
fn pat(nonce: u64, seq: u32, off: u64) -> u8 {
    let mut x = nonce << 44 ^ u64::from(seq) << 28 ^ off;
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (x ^ (x >> 31)) as u8
}

/// The input, a byte at a time (0 once it is used up).
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }

    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    fn take(&mut self, n: usize) -> &[u8] {
        let (a, b) = self.0.split_at(n.min(self.0.len()));
        self.0 = b;
        a
    }
}

/// A command the harness sent.
#[derive(Clone, Copy, Debug)]
struct Cmd {
    cid: u16,
    /// Write (true), read (false), or another command (None).
    write: Option<bool>,
    slba: u64,
    blocks: u64,
    /// The length its SGL gives.
    len: u32,
    /// Its data came in the capsule: the data unit with this seq.
    capsule: Option<u32>,
    /// Its response came.
    done: bool,
    /// It succeeded.
    ok: bool,
}

/// Data the harness sent: a capsule's or an H2CData's.
#[derive(Clone, Copy, Debug)]
struct Unit {
    seq: u32,
    cid: u16,
    /// H2CData's TTAG (None: in-capsule data).
    ttag: Option<u16>,
    off: u64,
    len: u64,
    /// Its data digest was made wrong (by changing the data after the digest).
    corrupt: bool,
    /// Its offset in the stream sent.
    at: usize,
}

#[derive(Clone, Copy, Debug)]
struct R2tRec {
    cccid: u16,
    ttag: u16,
    len: u32,
    /// Bytes the harness has answered it with.
    sent: u32,
    open: bool,
}

/// A connection, from the host's side.
struct Conn {
    s: TcpStream,
    neg: Negotiated,
    rx: Vec<u8>,
    eof: bool,
}

impl Conn {
    fn new(w: &mut FuzzWorker, hdgst: bool, ddgst: bool, hpda: u8) -> Conn {
        let s = w.connect();
        s.set_nonblocking(true).expect("nonblocking");
        let mut c = Conn {
            s,
            neg: Negotiated {
                hdgst,
                ddgst,
                pda: hpda,
            },
            rx: Vec::new(),
            eof: false,
        };
        let req = IcReq {
            pfv: 0,
            hpda,
            hdgst,
            ddgst,
            maxr2t: 0,
        };
        c.send(w, &req.encode());
        w.settle();
        c.read();
        assert!(c.rx.len() >= IC_LEN, "no ICResp");
        let b: [u8; IC_LEN] = c.rx[..IC_LEN].try_into().expect("128");
        IcResp::decode(&b, &req).expect("an ICResp the Linux host accepts");
        c.rx.drain(..IC_LEN);
        c
    }

    /// Writes `b` (the worker reads as it goes); false if the target closed the connection.
    fn send(&mut self, w: &mut FuzzWorker, mut b: &[u8]) -> bool {
        while !b.is_empty() {
            match self.s.write(b) {
                Ok(n) => b = &b[n..],
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    w.pass();
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        true
    }

    fn read(&mut self) {
        let mut b = [0u8; 16384];
        while !self.eof {
            match self.s.read(&mut b) {
                Ok(0) => self.eof = true,
                Ok(n) => self.rx.extend_from_slice(&b[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => self.eof = true,
            }
        }
    }

    /// The next whole PDU received: its layout and bytes (checked: layout, digests).
    fn next_pdu(&mut self) -> Option<(PduLayout, Vec<u8>)> {
        if self.rx.len() < CH_LEN {
            return None;
        }
        let ch = CommonHeader::decode(self.rx[..CH_LEN].try_into().expect("8"));
        let l = PduLayout::check(&ch, Direction::ControllerToHost, Some(self.neg), 1 << 20)
            .unwrap_or_else(|e| panic!("a PDU the target sent: {e}"));
        if self.rx.len() < l.plen {
            return None;
        }
        let p: Vec<u8> = self.rx.drain(..l.plen).collect();
        if l.hdgst > 0 {
            let got = u32::from_le_bytes(p[l.hlen..l.hlen + 4].try_into().expect("4"));
            assert_eq!(got, digest(&p[..l.hlen]), "the target's header digest");
        }
        if l.ddgst > 0 {
            let at = l.pdo + l.data_len;
            let got = u32::from_le_bytes(p[at..at + 4].try_into().expect("4"));
            assert_eq!(got, digest(&p[l.pdo..at]), "the target's data digest");
        }
        Some((l, p))
    }

    fn capsule(&self, sqe: &Sqe, data: &[u8]) -> Vec<u8> {
        let mut h = [0u8; CAPSULE_CMD_HLEN];
        let l = encode_capsule_cmd(sqe, data.len(), &self.neg, &mut h);
        let mut pdu = h.to_vec();
        if self.neg.hdgst {
            pdu.extend_from_slice(&digest(&h).to_le_bytes());
        }
        if !data.is_empty() {
            pdu.resize(l.pdo, 0);
            pdu.extend_from_slice(data);
            if self.neg.ddgst {
                pdu.extend_from_slice(&digest(data).to_le_bytes());
            }
        }
        pdu
    }

    /// Runs one command to its response (set-up only: nothing else is outstanding).
    fn exec(&mut self, w: &mut FuzzWorker, sqe: &Sqe, data: &[u8]) -> Cqe {
        let pdu = self.capsule(sqe, data);
        assert!(self.send(w, &pdu), "set-up: the connection closed");
        w.settle();
        self.read();
        let (l, p) = self.next_pdu().expect("set-up: a response");
        assert_eq!(l.pdu_type, pdu_type::CAPSULE_RESP, "set-up: {l:?}");
        Cqe::decode(p[CH_LEN..CH_LEN + CQE_LEN].try_into().expect("16"))
    }

    fn connect(&mut self, w: &mut FuzzWorker, qid: u16, sqsize: u16, cntlid: u16) -> Cqe {
        let (sqe, data) = connect_command(qid, sqsize, cntlid);
        self.exec(w, &sqe, &data)
    }
}

/// What lasts from one input to the next: the worker, and an enabled controller whose admin
/// queue stays connected.
struct Harness {
    w: FuzzWorker,
    _admin: Conn,
    cntlid: u16,
    nonce: u64,
}

impl Harness {
    fn new() -> Harness {
        let mut w = FuzzWorker::new(CONFIG);
        assert_eq!(w.block_size() as usize, BS);
        let (admin, cntlid) = Harness::controller(&mut w);
        Harness {
            w,
            _admin: admin,
            cntlid,
            nonce: 0,
        }
    }

    /// A new controller, enabled: its admin queue and its ID.
    fn controller(w: &mut FuzzWorker) -> (Conn, u16) {
        let mut admin = Conn::new(w, false, false, 0);
        let c = admin.connect(w, 0, 31, CNTLID_DYNAMIC);
        assert!(c.status.is_success(), "admin Connect: {}", c.status);
        let cntlid = c.dw0 as u16;
        let set = PropertySet {
            size: PropertySize::Four,
            offset: properties::CC,
            value: 0x0046_0001,
        };
        let c = admin.exec(w, &set.to_sqe(1), &[]);
        assert!(c.status.is_success(), "CC.EN: {}", c.status);
        (admin, cntlid)
    }
}

thread_local! {
    static HARNESS: RefCell<Option<Harness>> = const { RefCell::new(None) };
}

fuzz_target!(|input: &[u8]| {
    HARNESS.with(|h| {
        let mut h = h.borrow_mut();
        let h = h.get_or_insert_with(Harness::new);
        h.nonce += 1;
        Run::new(h, input).go();
    });
});

/// One input's run.
struct Run<'a> {
    w: &'a mut FuzzWorker,
    nonce: u64,
    /// The namespace as it was before the input.
    img: Vec<u8>,
    /// Queues open besides the input's.
    queues: usize,
    input: Bytes<'a>,
    c: Conn,
    cmds: Vec<Cmd>,
    units: Vec<Unit>,
    r2ts: Vec<R2tRec>,
    /// Everything sent on the connection, and where each PDU began.
    stream: Vec<u8>,
    starts: Vec<usize>,
    /// Bytes built and not sent yet (operations sent together).
    out: Vec<u8>,
    seq: u32,
    /// The PDUs the target sees are no longer the harness's (raw bytes, a mangled PLEN).
    tainted: bool,
    /// The target sent a C2HTermReq; then data sent from this offset of the stream on
    /// must have no effect.
    fatal: Option<usize>,
    /// The host ended the connection (H2CTermReq) at this offset of the stream.
    host_term: Option<usize>,
    /// Command IDs used by two commands at once: what the target answers for them cannot
    /// be told apart, and is not checked.
    dup: Vec<u16>,
}

impl<'a> Run<'a> {
    fn new(h: &'a mut Harness, input: &'a [u8]) -> Run<'a> {
        let mut input = Bytes(input);
        let mode = input.u8();
        let nonce = h.nonce;
        // The namespace, as it is before the input.
        let mut img = vec![0u8; BLOCKS as usize * BS];
        for (i, b) in img.iter_mut().enumerate() {
            *b = pat(nonce, 0, i as u64);
        }
        h.w.ns_write(0, &mut img.clone());
        let (hdgst, ddgst, hpda) = (mode & 1 != 0, mode & 2 != 0, (mode >> 2) & 3);
        let sqsize = 1 + u16::from((mode >> 4) & 7);
        let mut c = Conn::new(&mut h.w, hdgst, ddgst, hpda);
        let mut cqe = c.connect(&mut h.w, 1, sqsize, h.cntlid);
        if !cqe.status.is_success() {
            // What an earlier input sent may have ended the controller (an I/O queue's
            // commands may not, but that is for the assertions of the input that did it):
            // a new one.
            (h._admin, h.cntlid) = Harness::controller(&mut h.w);
            c = Conn::new(&mut h.w, hdgst, ddgst, hpda);
            cqe = c.connect(&mut h.w, 1, sqsize, h.cntlid);
        }
        assert!(cqe.status.is_success(), "I/O queue Connect: {}", cqe.status);
        let queues = h.w.queues_open() - 1;
        Run {
            w: &mut h.w,
            nonce,
            img,
            queues,
            input,
            c,
            cmds: Vec::new(),
            units: Vec::new(),
            r2ts: Vec::new(),
            stream: Vec::new(),
            starts: Vec::new(),
            out: Vec::new(),
            seq: 0,
            tainted: false,
            fatal: None,
            host_term: None,
            dup: Vec::new(),
        }
    }

    fn go(mut self) {
        for _ in 0..MAX_OPS {
            if self.input.0.is_empty() {
                break;
            }
            let together = self.op();
            if !together {
                self.flush();
            }
        }
        self.flush();
        self.finish();
    }

    /// Data of `len` bytes for a new PDU at offset `off` of its command's data.
    fn data(&mut self, off: u64, len: usize) -> (u32, Vec<u8>) {
        self.seq += 1;
        let seq = self.seq;
        let d = (0..len as u64)
            .map(|i| pat(self.nonce, seq, off + i))
            .collect();
        (seq, d)
    }

    fn push_pdu(&mut self, pdu: &[u8]) {
        self.starts.push(self.stream.len() + self.out.len());
        self.out.extend_from_slice(pdu);
    }

    /// One operation; true: send it with the next.
    fn op(&mut self) -> bool {
        let op = self.input.u8();
        match op % 8 {
            0 | 1 => self.command(true),
            2 => self.command(false),
            3 | 4 => self.h2c_answer(),
            5 => self.h2c_raw(),
            6 => self.other(),
            _ => return true,
        }
        false
    }

    fn command(&mut self, write: bool) {
        let b = self.input.u8();
        let cid = if b & 0x80 != 0 {
            self.input.u16()
        } else {
            u16::from(b & 7)
        };
        let slba = u64::from(self.input.u8()) % (BLOCKS + 8);
        let nlb = self.input.u8();
        let blocks = u64::from(nlb % 16) + 1;
        let shape = self.input.u8();
        let mut len = (blocks as usize * BS) as u32;
        match (shape >> 2) & 7 {
            1 => len += BS as u32,
            2 => len -= BS as u32,
            3 => len = len.wrapping_add(u32::from(self.input.u8())),
            4 => len = MAX_IO + BS as u32,
            5 => len = 0,
            _ => {}
        }
        let rw = ReadWrite {
            nsid: 1,
            slba,
            nlb: (blocks - 1) as u16,
            fua: false,
            lr: false,
            dsm: 0,
        };
        let op = if write { io::WRITE } else { io::READ };
        let mut sqe = rw.to_sqe(op, cid);
        let in_capsule = shape & 3 == 3 && (len as usize) <= ICD;
        let mut capsule = None;
        let data = if in_capsule {
            sqe.set_sgl(&Sgl::InCapsule(InCapsuleSgl { offset: 0, len }));
            let (seq, d) = self.data(0, len as usize);
            if write {
                capsule = Some(seq);
            }
            d
        } else {
            sqe.set_sgl(&Sgl::Transport(TransportSgl { len }));
            Vec::new()
        };
        let corrupt = self.c.neg.ddgst && !data.is_empty() && shape & 0x20 != 0;
        let mut pdu = self.c.capsule(&sqe, &data);
        if corrupt {
            // The digest stays that of the data as built; the data changes.
            let at = pdu.len() - 5;
            pdu[at] ^= 0x01;
        }
        if let Some(seq) = capsule {
            self.units.push(Unit {
                seq,
                cid,
                ttag: None,
                off: 0,
                len: u64::from(len),
                corrupt,
                at: self.stream.len() + self.out.len(),
            });
        }
        self.note_cid(cid);
        self.cmds.push(Cmd {
            cid,
            write: Some(write),
            slba,
            blocks,
            len,
            capsule,
            done: false,
            ok: false,
        });
        self.push_pdu(&pdu);
    }

    fn note_cid(&mut self, cid: u16) {
        if self.cmds.iter().any(|c| c.cid == cid && !c.done) && !self.dup.contains(&cid) {
            self.dup.push(cid);
        }
    }

    /// An H2CData PDU: header (with its digest and padding), data (and its digest).
    fn h2c_pdu(&mut self, h: DataHeader, last: bool, data: &[u8]) -> Vec<u8> {
        let mut b = [0u8; DATA_HLEN];
        let f = if last { flags::DATA_LAST } else { 0 };
        let l = h.encode(pdu_type::H2C_DATA, f, &self.c.neg, &mut b);
        let mut pdu = b.to_vec();
        if self.c.neg.hdgst {
            pdu.extend_from_slice(&digest(&b).to_le_bytes());
        }
        pdu.resize(l.pdo, 0);
        pdu.extend_from_slice(data);
        if self.c.neg.ddgst {
            pdu.extend_from_slice(&digest(data).to_le_bytes());
        }
        pdu
    }

    /// H2CData for an R2T received (the first open one the input names), as the host would
    /// send it, or with one thing mangled.
    fn h2c_answer(&mut self) {
        let open: Vec<usize> = (0..self.r2ts.len())
            .filter(|&i| self.r2ts[i].open)
            .collect();
        let pick = self.input.u8();
        let chunk = (usize::from(self.input.u8() % 9) + 1) * BS;
        let m = self.input.u8();
        let Some(&i) = open.get(usize::from(pick) % open.len().max(1)) else {
            return self.h2c_raw();
        };
        let r = self.r2ts[i];
        let mut h = DataHeader {
            cccid: r.cccid,
            ttag: r.ttag,
            datao: r.sent,
            datal: ((r.len - r.sent) as usize).min(chunk) as u32,
        };
        let mut last = h.datao + h.datal == r.len;
        let mangle = m % 16;
        let x = self.input.u8();
        match mangle {
            0 => h.cccid ^= 1 + u16::from(x),
            1 => h.ttag ^= 1 + u16::from(x & 7),
            2 => h.datao = h.datao.wrapping_add(BS as u32),
            3 => h.datao = h.datao.wrapping_sub(1 + u32::from(x)),
            4 => h.datal += 1 + u32::from(x),
            5 => last = !last,
            _ => {}
        }
        let (seq, data) = self.data(u64::from(h.datao), h.datal as usize);
        let mut pdu = self.h2c_pdu(h, last, &data);
        let mut corrupt = false;
        match mangle {
            6 if self.c.neg.ddgst && !data.is_empty() => {
                let at = pdu.len() - 5;
                pdu[at] ^= 0x80;
                corrupt = true;
            }
            7 if self.c.neg.hdgst => pdu[DATA_HLEN] ^= 0x01,
            8 => {
                // PLEN: the target's PDUs are no longer the harness's.
                pdu[4] = pdu[4].wrapping_add(1 + (x & 7));
                self.tainted = true;
            }
            9 => {
                // DATAL says less than the PDU holds.
                let v = h.datal.saturating_sub(1 + u32::from(x));
                pdu[16..20].copy_from_slice(&v.to_le_bytes());
                if self.c.neg.hdgst {
                    let d = digest(&pdu[..DATA_HLEN]);
                    pdu[DATA_HLEN..DATA_HLEN + 4].copy_from_slice(&d.to_le_bytes());
                }
            }
            _ => {}
        }
        self.h2c_unit(seq, &h, corrupt);
        if mangle > 9 || mangle == 6 {
            self.r2ts[i].sent += h.datal;
            self.r2ts[i].open = self.r2ts[i].sent < r.len;
        }
        if mangle == 10 && pdu.len() > 1 {
            // In two parts, the worker running between them.
            let cut = 1 + usize::from(x) % (pdu.len() - 1);
            self.push_pdu(&pdu[..cut]);
            self.flush();
            self.out.extend_from_slice(&pdu[cut..]);
            return;
        }
        self.push_pdu(&pdu);
    }

    /// Records the data of H2CData PDU `seq` (`h`), about to be sent.
    fn h2c_unit(&mut self, seq: u32, h: &DataHeader, corrupt: bool) {
        self.units.push(Unit {
            seq,
            cid: h.cccid,
            ttag: Some(h.ttag),
            off: u64::from(h.datao),
            len: u64::from(h.datal),
            corrupt,
            at: self.stream.len() + self.out.len(),
        });
    }

    /// H2CData with the input's fields.
    fn h2c_raw(&mut self) {
        let h = DataHeader {
            cccid: u16::from(self.input.u8() & 7),
            ttag: u16::from(self.input.u8() & 7),
            datao: u32::from(self.input.u8()) * 64,
            datal: u32::from(self.input.u8()) * 16,
        };
        let last = self.input.u8() & 1 != 0;
        let (seq, data) = self.data(u64::from(h.datao), h.datal as usize);
        let pdu = self.h2c_pdu(h, last, &data);
        self.h2c_unit(seq, &h, false);
        self.push_pdu(&pdu);
    }

    /// A PDU that is neither a command nor data for one.
    fn other(&mut self) {
        match self.input.u8() % 5 {
            0 => {
                let mut b = [0u8; DATA_HLEN + 128];
                let t = TermReq {
                    fes: rdmablk::nvme::transport::tcp::Fes::PduSequenceError,
                    fei: 0,
                };
                let n = t.encode(pdu_type::H2C_TERM_REQ, &[], &mut b);
                self.host_term
                    .get_or_insert(self.stream.len() + self.out.len());
                self.push_pdu(&b[..n]);
            }
            1 => {
                let req = IcReq {
                    pfv: 0,
                    hpda: 0,
                    hdgst: false,
                    ddgst: false,
                    maxr2t: 0,
                };
                self.push_pdu(&req.encode());
            }
            2 => {
                // A type only the controller sends, well formed otherwise.
                let ty = [
                    pdu_type::R2T,
                    pdu_type::CAPSULE_RESP,
                    pdu_type::C2H_DATA,
                    0x7f,
                ][usize::from(self.input.u8() % 4)];
                let mut b = [0u8; DATA_HLEN];
                CommonHeader {
                    pdu_type: ty,
                    flags: 0,
                    hlen: DATA_HLEN as u8,
                    pdo: 0,
                    plen: DATA_HLEN as u32,
                }
                .encode(&mut b);
                self.push_pdu(&b);
            }
            3 => {
                // An SQE of the input's, its opcode one that changes no data and no state
                // that outlives the input.
                let mut raw = [0u8; SQE_LEN];
                let got = self.input.take(SQE_LEN);
                raw[..got.len()].copy_from_slice(got);
                const OPS: [u8; 8] = [0x00, 0x02, 0x05, 0x0c, 0x0e, 0x7f, 0x81, 0xfe];
                raw[0] = OPS[usize::from(raw[0] % 8)];
                let sqe = Sqe::decode(&raw);
                let n = usize::from(self.input.u8()) * 16;
                let n = n.min(ICD);
                let (_, data) = self.data(0, n);
                self.note_cid(sqe.cid);
                self.cmds.push(Cmd {
                    cid: sqe.cid,
                    write: None,
                    slba: 0,
                    blocks: 0,
                    len: 0,
                    capsule: None,
                    done: false,
                    ok: false,
                });
                let pdu = self.c.capsule(&sqe, &data);
                self.push_pdu(&pdu);
            }
            _ => {
                let n = usize::from(self.input.u8() % 64);
                let raw = self.input.take(n).to_vec();
                self.tainted = true;
                self.push_pdu(&raw);
            }
        }
    }

    /// Sends what is built, lets the worker run until it is done, and checks what came back.
    fn flush(&mut self) {
        let out = std::mem::take(&mut self.out);
        self.stream.extend_from_slice(&out);
        self.c.send(self.w, &out);
        self.w.settle();
        self.c.read();
        while let Some((l, p)) = self.c.next_pdu() {
            assert!(self.fatal.is_none(), "a PDU after the C2HTermReq: {l:?}");
            self.took(&l, &p);
        }
        if self.fatal.is_some() {
            assert!(self.c.eof, "the connection stays open after a C2HTermReq");
        }
    }

    /// Checks one PDU the target sent against what the harness sent.
    fn took(&mut self, l: &PduLayout, p: &[u8]) {
        let checked = !self.tainted;
        match l.pdu_type {
            pdu_type::R2T => {
                let r = R2t::decode(p[..DATA_HLEN].try_into().expect("24"));
                // A write's, or a command of the input's own (Compare has data to send).
                let asked = self.cmds.iter().any(|c| {
                    c.cid == r.cccid
                        && !c.done
                        && match c.write {
                            Some(w) => w && c.capsule.is_none() && r.r2tl <= c.len,
                            None => true,
                        }
                });
                let checked = checked && !self.dup.contains(&r.cccid);
                assert!(
                    !checked || asked,
                    "R2T for no write waiting for data: {r:?}"
                );
                assert!(r.r2to == 0 && r.r2tl > 0 && r.r2tl <= MAX_IO, "{r:?}");
                for o in self.r2ts.iter_mut().filter(|o| o.ttag == r.ttag) {
                    o.open = false;
                }
                self.r2ts.push(R2tRec {
                    cccid: r.cccid,
                    ttag: r.ttag,
                    len: r.r2tl,
                    sent: 0,
                    open: true,
                });
            }
            pdu_type::C2H_DATA => {
                let h = DataHeader::decode(p[..DATA_HLEN].try_into().expect("24"));
                assert_eq!(h.datal as usize, l.data_len);
                assert!(
                    l.flags & flags::DATA_SUCCESS == 0,
                    "SUCCESS with SQ flow control"
                );
                if !checked || self.dup.contains(&h.cccid) {
                    return;
                }
                let end = u64::from(h.datao) + u64::from(h.datal);
                let read = self.cmds.iter().find(|c| {
                    c.cid == h.cccid
                        && !c.done
                        && match c.write {
                            Some(w) => !w && end <= u64::from(c.len),
                            None => true,
                        }
                });
                let read = read.copied().unwrap_or_else(|| {
                    panic!("C2HData for no read waiting for it, or beyond it: {h:?}")
                });
                if read.write.is_none() {
                    return; // a command of the input's own (Reservation Report)
                }
                let data = &p[l.pdo..l.pdo + l.data_len];
                for (i, blk) in data.chunks(BS).enumerate() {
                    let at = u64::from(h.datao) / BS as u64 + i as u64;
                    let lba = read.slba + at;
                    assert!(
                        blk.len() < BS || lba >= BLOCKS || self.block_ok(lba, blk, false),
                        "C2HData block {at} of read {read:?} is not what LBA {lba} can hold"
                    );
                }
            }
            pdu_type::CAPSULE_RESP => {
                let cqe = Cqe::decode(p[CH_LEN..CH_LEN + CQE_LEN].try_into().expect("16"));
                let checked = checked && !self.dup.contains(&cqe.cid);
                let cmd = self.cmds.iter_mut().find(|c| c.cid == cqe.cid && !c.done);
                match cmd {
                    Some(c) => {
                        c.done = true;
                        c.ok = cqe.status.is_success();
                        let c = *c;
                        if checked && c.ok && c.write == Some(true) {
                            self.written(&c);
                        }
                    }
                    None => assert!(!checked, "a response for no command sent: {cqe:?}"),
                }
                for r in self.r2ts.iter_mut().filter(|r| r.cccid == cqe.cid) {
                    r.open = false;
                }
            }
            pdu_type::C2H_TERM_REQ => {
                let (fes, fei) = TermReq::decode(p[..DATA_HLEN].try_into().expect("24"));
                assert!(fes.is_some(), "a C2HTermReq with FES unknown (FEI {fei})");
                let quote = &p[l.pdo.max(DATA_HLEN)..l.plen];
                // The PDU it names: the last the harness sent that starts with the quote
                // (the last, so that no PDU the target took is counted as after it).
                let at = self
                    .starts
                    .iter()
                    .rev()
                    .find(|&&s| self.stream[s..].starts_with(quote) && !quote.is_empty());
                match at {
                    Some(&s) => self.fatal = Some(s),
                    None => {
                        assert!(
                            self.tainted,
                            "a C2HTermReq quoting no PDU sent: {quote:02x?}"
                        );
                        self.fatal = Some(self.stream.len());
                    }
                }
            }
            t => panic!("PDU type {t:#x} from the target on a queue"),
        }
    }

    /// A write `c` succeeded: its blocks hold its data (or a later write's).
    fn written(&mut self, c: &Cmd) {
        let mut blk = vec![0u8; BS];
        for b in c.slba..(c.slba + c.blocks).min(BLOCKS) {
            self.w.ns_read(b, &mut blk);
            assert!(
                self.block_ok(b, &blk, true),
                "write {c:?} succeeded but LBA {b} does not hold data sent for it"
            );
        }
    }

    /// Whether block `lba` may hold `blk`: as before the input (unless `written`), or byte for
    /// byte data sent for a write that covers it, at the block's offset in its data.
    fn block_ok(&self, lba: u64, blk: &[u8], written: bool) -> bool {
        let at = lba as usize * BS;
        let before = blk == &self.img[at..at + BS];
        if before && !written {
            return true;
        }
        let writes = self
            .cmds
            .iter()
            .filter(|c| c.write == Some(true) && c.slba <= lba && lba < c.slba + c.blocks);
        for w in writes {
            let base = (lba - w.slba) * BS as u64;
            let units: Vec<&Unit> = self.units.iter().filter(|u| self.feeds(u, w)).collect();
            let all = (0..BS).all(|j| {
                let off = base + j as u64;
                units.iter().any(|u| {
                    u.off <= off && off < u.off + u.len && pat(self.nonce, u.seq, off) == blk[j]
                })
            });
            if all {
                return true;
            }
        }
        false
    }

    /// Whether data unit `u` may be data of write `w`: its capsule's data, or H2CData with
    /// its CCCID and the TTAG of an R2T for it, its digest right, sent before the target or
    /// the host ended the connection.
    fn feeds(&self, u: &Unit, w: &Cmd) -> bool {
        let cut = self.fatal.into_iter().chain(self.host_term).min();
        if u.corrupt || cut.is_some_and(|c| u.at > c) {
            return false;
        }
        match (w.capsule, u.ttag) {
            (Some(seq), None) => u.seq == seq,
            (None, Some(t)) => {
                u.cid == w.cid && self.r2ts.iter().any(|r| r.cccid == w.cid && r.ttag == t)
            }
            _ => false,
        }
    }

    /// The host goes: the queue and its buffers must go too, and the namespace hold nothing
    /// that was not sent whole.
    fn finish(self) {
        let _ = self.c.s.shutdown(Shutdown::Both);
        self.w.settle();
        assert!(
            self.w.queues_open() <= self.queues,
            "the I/O queue is still there after its connection closed"
        );
        let st = self.w.pool_stats();
        assert!(
            st.pages_in_use == 0 && st.waiting == 0,
            "data buffers held or awaited after the queue went: {st:?}"
        );
        if self.tainted {
            return;
        }
        let mut now = vec![0u8; self.img.len()];
        self.w.ns_read(0, &mut now);
        for (lba, blk) in now.chunks(BS).enumerate() {
            assert!(
                self.block_ok(lba as u64, blk, false),
                "LBA {lba} holds data no write sent whole: {:02x?}...",
                &blk[..16]
            );
        }
    }
}
