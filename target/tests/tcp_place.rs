//! H2CData placed straight into the command's data slot (`target.tcp_place_from`): large
//! writes of odd sizes, with and without digests, their H2CData cut into small pieces (so the
//! target sees PDUs begun and not whole, headers cut, data cut, digests cut) and several
//! commands' PDUs back to back, all read back; a wrong data digest over placed data fails its
//! command only; bad H2CData headers get the same C2HTermReq as without placement; a host
//! that leaves in the middle of a placed PDU leaves the target holding nothing. Each test
//! also reads the target's placement counters (`rdmablk_tcp_placed_bytes_total`,
//! `rdmablk_tcp_placed_pdus_total`, as a scrape renders them) to prove the data was placed and
//! not copied through the receive buffer; with `tcp_place_from = 0` the same writes place
//! nothing; with a host's share of a pass cut to a page (`tcp_pass_bytes_per_host`), read
//! across many passes, the same writes lose nothing.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::tcp_target::{start_with, wait_held};
use common::tcp_wire::{rw_cmd, TcpWire};
use common::{pattern, BLOCK, MAX_IO};
use rdmablk::nvme::transport::tcp::{pdu_type, Fes, R2t, DATA_HLEN, DIGEST_LEN};
use rdmablk::nvme::{Sgl, Status, TransportSgl};
use rdmablk_target::Target;

/// The target's `tcp_place_from` in these tests.
const PLACE_FROM: usize = 16 * 1024;

fn start() -> (Target, SocketAddr) {
    start_with(&format!("tcp_place_from = {PLACE_FROM}"), 32)
}

/// NVMe/TCP H2CData placed by the target (or a difference of two readings).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Placed {
    /// H2CData bytes read from the socket straight into data buffers.
    bytes: u64,
    /// H2CData PDUs whose data was placed.
    pdus: u64,
}

impl std::ops::Sub for Placed {
    type Output = Placed;
    fn sub(self, o: Placed) -> Placed {
        Placed {
            bytes: self.bytes - o.bytes,
            pdus: self.pdus - o.pdus,
        }
    }
}

/// What target `t` has placed so far, summed over its workers, as a scrape reads it
/// (`metrics::render`: the text `GET /metrics` serves), and as `rdmablk-ctl status` shows it.
fn placed(t: &Target) -> Placed {
    let text = rdmablk_target::metrics::render(&t.handle());
    let sum = |family: &str| -> u64 {
        let series: Vec<u64> = text
            .lines()
            .filter(|l| l.starts_with(&format!("{family}{{worker=")))
            .map(|l| {
                let v = l.rsplit(' ').next().expect("a value");
                v.parse().unwrap_or_else(|e| panic!("{l}: {e}"))
            })
            .collect();
        assert!(!series.is_empty(), "no {family} in the scrape:\n{text}");
        series.iter().sum()
    };
    let scraped = Placed {
        bytes: sum("rdmablk_tcp_placed_bytes_total"),
        pdus: sum("rdmablk_tcp_placed_pdus_total"),
    };
    // `rdmablk-ctl status` shows the same sums (read between commands: nothing moves).
    let st = t.handle().status();
    let status = Placed {
        bytes: st["tcp_placed"]["bytes"]
            .as_u64()
            .expect("status tcp_placed.bytes"),
        pdus: st["tcp_placed"]["pdus"]
            .as_u64()
            .expect("status tcp_placed.pdus"),
    };
    assert_eq!(status, scraped, "status's tcp_placed against the scrape");
    scraped
}

/// Asserts that the target placed some of the H2CData sent since it had placed `before`, and
/// no more than could be placed (`placeable`: the PDUs of at least [`PLACE_FROM`] bytes sent).
fn assert_placed_some(t: &Target, before: Placed, placeable: Placed, what: &str) {
    let d = placed(t) - before;
    assert!(
        d.bytes > 0 && d.pdus > 0,
        "{what}: nothing placed ({d:?}) of {placeable:?} placeable"
    );
    assert!(
        d.bytes <= placeable.bytes && d.pdus <= placeable.pdus,
        "{what}: placed {d:?}, more than the {placeable:?} placeable"
    );
}

/// An admin queue and I/O queue 1 with the digests asked for.
fn queues(addr: SocketAddr, hdgst: bool, ddgst: bool) -> (TcpWire, TcpWire) {
    let (a, cntlid) = TcpWire::admin(addr, hdgst, ddgst);
    let mut q = TcpWire::connect(addr, hdgst, ddgst);
    let c = q.fabrics_connect(1, 31, cntlid);
    assert!(c.status.is_success(), "I/O Connect: {}", c.status);
    (a, q)
}

/// Sends the write capsules of `writes` (LBA, data) at once and reads their R2Ts: each
/// command's ID and transfer tag, in the order of `writes`.
fn write_capsules(q: &mut TcpWire, writes: &[(u64, &[u8])]) -> Vec<(u16, u16)> {
    let mut cids = Vec::new();
    for (lba, data) in writes {
        let mut sqe = rw_cmd(true, *lba, (data.len() / BLOCK as usize) as u32);
        sqe.cid = q.next_cid;
        q.next_cid += 1;
        sqe.set_sgl(&Sgl::Transport(TransportSgl {
            len: data.len() as u32,
        }));
        q.send_capsule(&sqe, &[]);
        cids.push(sqe.cid);
    }
    let mut tags = vec![None; writes.len()];
    for _ in 0..writes.len() {
        let (l, header, _) = q.recv().expect("an R2T");
        assert_eq!(l.pdu_type, pdu_type::R2T);
        let r = R2t::decode(header[..DATA_HLEN].try_into().unwrap());
        let i = cids
            .iter()
            .position(|&c| c == r.cccid)
            .expect("an R2T of ours");
        assert_eq!((r.r2to, r.r2tl as usize), (0, writes[i].1.len()));
        tags[i] = Some((r.cccid, r.ttag));
    }
    tags.into_iter().map(|t| t.expect("every R2T")).collect()
}

/// How the host sends its H2CData: PDUs of at most `pdu` data bytes, all commands' PDUs one
/// stream written `piece` bytes at a time, with a pause after every `pause_every` pieces (0:
/// none).
#[derive(Clone, Copy, Debug)]
struct Shape {
    pdu: usize,
    piece: usize,
    pause_every: usize,
}

/// Writes `writes` (LBA, data) together, their H2CData sent as `shape` says; every write
/// completes with `want`. What of it could be placed: the PDUs of at least [`PLACE_FROM`]
/// bytes of data, and their data bytes.
fn write_all(q: &mut TcpWire, writes: &[(u64, &[u8])], shape: Shape, want: Status) -> Placed {
    let tags = write_capsules(q, writes);
    let mut stream = Vec::new();
    let mut placeable = Placed::default();
    for (&(cccid, ttag), (_, data)) in tags.iter().zip(writes) {
        let mut off = 0;
        for chunk in data.chunks(shape.pdu) {
            let last = off + chunk.len() == data.len();
            stream.extend(q.h2c_pdu(cccid, ttag, off as u32, chunk, last));
            off += chunk.len();
            if chunk.len() >= PLACE_FROM {
                placeable.bytes += chunk.len() as u64;
                placeable.pdus += 1;
            }
        }
    }
    for (i, p) in stream.chunks(shape.piece).enumerate() {
        q.send(p).expect("H2CData sent");
        if shape.pause_every > 0 && i % shape.pause_every == shape.pause_every - 1 {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    for _ in 0..writes.len() {
        let c = q.recv_response();
        assert!(tags.iter().any(|&(cid, _)| cid == c.cid), "cid {}", c.cid);
        assert_eq!(c.status, want, "write of cid {} as {shape:?}", c.cid);
    }
    placeable
}

fn read(q: &mut TcpWire, lba: u64, len: usize) -> Vec<u8> {
    let blocks = (len / BLOCK as usize) as u32;
    let (c, read) = q.exec(rw_cmd(false, lba, blocks), &[], len as u32, false);
    assert_eq!(c.status, Status::SUCCESS, "read of {len} at {lba}");
    read
}

/// Large writes of odd sizes (below, at and above the placement threshold, up to the largest
/// I/O), their H2CData in PDUs of several sizes cut into pieces of several sizes, all in
/// flight together on `q`, every byte read back where it was written (`seed` varies the
/// data). What of it could be placed ([`write_all`]).
fn write_every_shape(q: &mut TcpWire, seed: u64, what: &str) -> Placed {
    let sizes = [
        MAX_IO as usize,
        PLACE_FROM - 512,
        PLACE_FROM,
        PLACE_FROM + 512,
        20 * 1024 + 512,
        100 * 1024 + 512,
        MAX_IO as usize - 512,
    ];
    let shapes = [
        // Whole PDUs in one write each (the kernel still cuts them into segments).
        Shape {
            pdu: MAX_IO as usize,
            piece: usize::MAX,
            pause_every: 0,
        },
        // One Ethernet segment's worth at a time, pausing now and then.
        Shape {
            pdu: MAX_IO as usize,
            piece: 1448,
            pause_every: 7,
        },
        // Odd-sized PDUs and pieces: headers and digests cut anywhere.
        Shape {
            pdu: 48 * 1024 + 512,
            piece: 4096 + 13,
            pause_every: 3,
        },
        Shape {
            pdu: 20 * 1024,
            piece: 997,
            pause_every: 40,
        },
    ];
    let mut placeable = Placed::default();
    for (s, shape) in shapes.iter().enumerate() {
        let seed = seed + (s as u64 + 1) * 100;
        let datas: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| pattern(seed + i as u64, n))
            .collect();
        // Each write its own 128 KiB of LBAs; all of them in flight together.
        let lba = |i: usize| (i * MAX_IO as usize / BLOCK as usize) as u64;
        let writes: Vec<(u64, &[u8])> = datas
            .iter()
            .enumerate()
            .map(|(i, d)| (lba(i), &d[..]))
            .collect();
        let p = write_all(q, &writes, *shape, Status::SUCCESS);
        placeable.bytes += p.bytes;
        placeable.pdus += p.pdus;
        for (i, d) in datas.iter().enumerate() {
            assert!(
                read(q, lba(i), d.len()) == *d,
                "{} bytes read back, {shape:?}, {what}",
                d.len()
            );
        }
    }
    placeable
}

/// [`write_every_shape`] with and without digests: every byte reads back, and with each
/// digest setting some of the data was placed (no more than could be).
#[test]
fn placed_h2c_data_of_every_shape_reads_back() {
    let (t, addr) = start();
    for (hdgst, ddgst) in [(false, false), (true, true), (false, true), (true, false)] {
        let (a, mut q) = queues(addr, hdgst, ddgst);
        let what = format!("digests {hdgst}/{ddgst}");
        let before = placed(&t);
        let seed = u64::from(hdgst) * 10 + u64::from(ddgst);
        let placeable = write_every_shape(&mut q, seed, &what);
        assert_placed_some(&t, before, placeable, &what);
        drop((q, a));
    }
    wait_held(&t, 0);
    t.shutdown();
}

/// A host's share of a worker's pass cut to a page (`target.tcp_pass_bytes_per_host = 4096`):
/// a visit to the socket stops after its first read (a 4 KiB bite, or a placed PDU's data),
/// so PDUs, placed data and digests are read across many passes; the same writes all read
/// back, and data is still placed.
#[test]
fn a_page_a_pass_loses_nothing() {
    let (t, addr) = start_with(
        &format!("tcp_place_from = {PLACE_FROM}\ntcp_pass_bytes_per_host = 4096"),
        32,
    );
    for (hdgst, ddgst) in [(false, false), (true, true)] {
        let (a, mut q) = queues(addr, hdgst, ddgst);
        let what = format!("a page a pass, digests {hdgst}/{ddgst}");
        let before = placed(&t);
        let placeable = write_every_shape(&mut q, 40 + u64::from(hdgst), &what);
        assert_placed_some(&t, before, placeable, &what);
        drop((q, a));
    }
    wait_held(&t, 0);
    t.shutdown();
}

/// With placement off (`tcp_place_from = 0`) the same writes read back whole and nothing is
/// placed: all of the data went through the receive buffer.
#[test]
fn with_placement_off_nothing_is_placed() {
    let (t, addr) = start_with("tcp_place_from = 0", 32);
    assert_eq!(placed(&t), Placed::default(), "placed before any write");
    let (a, mut q) = queues(addr, true, true);
    let placeable = write_every_shape(&mut q, 0, "placement off");
    assert!(placeable.pdus > 0, "the writes had PDUs to place");
    assert_eq!(
        placed(&t),
        Placed::default(),
        "placed with tcp_place_from = 0"
    );
    drop((q, a));
    wait_held(&t, 0);
    t.shutdown();
}

/// A placed H2CData whose data digest is wrong (the data trickling in, cut inside the data
/// and inside the digest) fails its command with Transient Transport Error without a byte
/// written; the connection goes on and the next placed write lands. Each of the three writes
/// was placed.
#[test]
fn a_wrong_digest_over_placed_data_fails_only_its_command() {
    let (t, addr) = start();
    let (a, mut q) = queues(addr, true, true);
    let len = MAX_IO as usize;
    let known = pattern(5, len);
    let shape = Shape {
        pdu: len,
        piece: 3000,
        pause_every: 5,
    };
    let before = placed(&t);
    let placeable = write_all(&mut q, &[(0, &known[..])], shape, Status::SUCCESS);
    assert_placed_some(&t, before, placeable, "the first write");
    let other = pattern(6, len);
    // Cut two bytes into the digest too: the target waits for all four.
    let (cccid, ttag) = write_capsules(&mut q, &[(0, &other[..])])[0];
    let before = placed(&t);
    q.corrupt_next_data_digest();
    let pdu_len = DATA_HLEN + DIGEST_LEN + len + DIGEST_LEN;
    q.h2c_trickle(
        (cccid, ttag, 0),
        &other,
        true,
        &[DATA_HLEN + 2, DATA_HLEN + 9000, pdu_len - 2],
    );
    let c = q.recv_response();
    assert_eq!(c.status, Status::TRANSIENT_TRANSPORT_ERROR, "bad digest");
    let one = Placed {
        bytes: len as u64,
        pdus: 1,
    };
    assert_placed_some(&t, before, one, "the write with a bad digest");
    assert!(
        read(&mut q, 0, len) == known,
        "placed data with a bad digest written"
    );
    let before = placed(&t);
    let placeable = write_all(&mut q, &[(0, &other[..])], shape, Status::SUCCESS);
    assert_placed_some(&t, before, placeable, "the write after the error");
    assert!(read(&mut q, 0, len) == other, "the write after the error");
    drop((q, a));
    wait_held(&t, 0);
    t.shutdown();
}

/// H2CData that would be placed (large, its data not all sent) with a header that does not
/// match its command gets the C2HTermReq it gets without placement, at once, and the
/// connection closes, none of its data placed; the target serves the next host, placing its
/// data.
#[test]
fn bad_h2c_headers_of_placed_data_get_a_term_req() {
    let (t, addr) = start();
    let len = 64 * 1024;
    let data = pattern(9, len);
    let before = placed(&t);
    // (DATAO, data length sent in the header, FEI): where the data stands, within the data.
    for (datao, datal, fei) in [(512u32, len - 512, 12), (0, len + 512, 16)] {
        let (a, mut q) = queues(addr, false, false);
        let (cccid, ttag) = write_capsules(&mut q, &[(0, &data[..])])[0];
        let body = pattern(10, datal);
        let pdu = q.h2c_pdu(cccid, ttag, datao, &body, true);
        q.send(&pdu[..DATA_HLEN + 5000])
            .expect("part of the H2CData");
        assert_eq!(
            q.term_req(),
            (Some(Fes::DataTransferOutOfRange), fei),
            "DATAO {datao}, DATAL {datal}"
        );
        drop((q, a));
    }
    wait_held(&t, 0);
    assert_eq!(placed(&t), before, "bad H2CData headers placed data");
    let (_a, mut q) = queues(addr, false, false);
    let placeable = write_all(
        &mut q,
        &[(0, &data[..])],
        Shape {
            pdu: len,
            piece: 5000,
            pause_every: 1,
        },
        Status::SUCCESS,
    );
    assert_placed_some(&t, before, placeable, "the write after the errors");
    assert!(read(&mut q, 0, len) == data, "written after the errors");
    drop((q, _a));
    wait_held(&t, 0);
    t.shutdown();
}

/// A host that leaves while the target places its H2CData (in the middle of the data, or
/// with the data in and its digest not) leaves the target holding no connection, and the
/// target serves the next host. The data those hosts sent was placed, and none of their PDUs
/// counted as placed (none was all in).
#[test]
fn a_host_leaving_mid_placement_leaves_the_target_idle() {
    let (t, addr) = start();
    let len = MAX_IO as usize;
    let data = pattern(11, len);
    let before = placed(&t);
    for (ddgst, sent) in [(false, 30_000), (true, 30_000), (true, DATA_HLEN + len)] {
        let (a, mut q) = queues(addr, false, ddgst);
        let (cccid, ttag) = write_capsules(&mut q, &[(0, &data[..])])[0];
        let pdu = q.h2c_pdu(cccid, ttag, 0, &data, true);
        // The header and a little data first, so the target begins placing; then the rest
        // of what this host sends before it leaves.
        q.send(&pdu[..DATA_HLEN + 1000]).expect("H2CData header");
        std::thread::sleep(Duration::from_millis(20));
        q.send(&pdu[DATA_HLEN + 1000..sent])
            .expect("part of the data");
        std::thread::sleep(Duration::from_millis(20));
        drop((q, a));
        wait_held(&t, 0);
    }
    let left = placed(&t) - before;
    assert!(
        left.bytes > 0 && left.pdus == 0,
        "the hosts that left: placed {left:?}"
    );
    let (_a, mut q) = queues(addr, false, true);
    let before = placed(&t);
    let shape = Shape {
        pdu: len,
        piece: 7000,
        pause_every: 2,
    };
    let placeable = write_all(&mut q, &[(0, &data[..])], shape, Status::SUCCESS);
    assert_placed_some(&t, before, placeable, "the write after the hosts left");
    assert!(read(&mut q, 0, len) == data, "written after the hosts left");
    drop((q, _a));
    wait_held(&t, 0);
    t.shutdown();
}
