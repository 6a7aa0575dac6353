//! The host's NVMe/TCP receive checker (`HostRx`) on a controller's PDU stream, fed the way
//! a socket delivers it: in chunks, into a buffer the PDUs are taken from one by one.
//!
//! Input: byte 0 bit 0 header digest, bit 1 data digest, bits 2-7 the chunk size (0: the
//! whole stream at once; odd: C2HData of 64 bytes and more is placed, as the initiator
//! receives large reads: checked from its header, the rest of its data taken from the stream
//! straight into the command's buffer, then its digest); bytes 1-12 the expectations of commands 0-3, 3 bytes each (byte 0
//! mod 3: nothing / to the host / to the controller; bytes 1-2: the length, little-endian);
//! the rest is the stream. IDs 4 and up are outside the queue.
//!
//! Asserts no panic; that every accepted C2HData lies within its reading command's length
//! (copied into a buffer of exactly that length) and follows the data before it, SUCCESS
//! only with the last byte; that every accepted R2T asks for a non-empty range within a
//! writing command's length, none of it asked for before; that a PDU's length and the length it asks the buffer to grow
//! to stay within the data limit; that nothing more is accepted for a command whose data
//! ended in SUCCESS. A CapsuleResp sends its command again with the same expectation, as a
//! queue reuses its IDs.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdmablk::nvme::transport::tcp::host_rx::{
    check_data_digest, Expect, HostPdu, HostRx, Next, Placement,
};
use rdmablk::nvme::transport::tcp::{Negotiated, DIGEST_LEN};
use rdmablk_fuzz::take_padded;

const ENTRIES: usize = 4;
const MAX_DATA: u32 = 8192;
/// The longest PDU the checker may ask for: the data limit, PDO (at most 255), a digest.
const MAX_PDU: usize = MAX_DATA as usize + 255 + 4;

/// What the harness knows of a command, kept apart from the checker's own table.
#[derive(Clone, Copy)]
struct Cmd {
    expect: Expect,
    got: u32,
    /// Its data ended with SUCCESS: the command is complete.
    done: bool,
}

fn expectation(b: &[u8]) -> Expect {
    let len = u32::from(u16::from_le_bytes([b[1], b[2]]));
    match b[0] % 3 {
        0 => Expect::Nothing,
        1 => Expect::ToHost { len },
        _ => Expect::ToCtrl { len },
    }
}

fuzz_target!(|input: &[u8]| {
    let Some((&mode, rest)) = input.split_first() else {
        return;
    };
    let neg = Negotiated {
        hdgst: mode & 1 != 0,
        ddgst: mode & 2 != 0,
        pda: 0,
    };
    let chunk = usize::from(mode >> 2);
    let (table, stream) = take_padded::<{ 3 * ENTRIES }>(rest);
    let mut rx = HostRx::new(ENTRIES, neg, MAX_DATA);
    if chunk & 1 == 1 {
        rx.place_from(64);
    }
    // The placement under way: the command's buffer, where the next byte goes, how many
    // are left, and the whole PDU's data range in the buffer (for its digest).
    let mut placing: Option<(Placement<'static>, Vec<u8>, usize, usize)> = None;
    let mut cmds = [Cmd {
        expect: Expect::Nothing,
        got: 0,
        done: false,
    }; ENTRIES];
    for (cid, c) in cmds.iter_mut().enumerate() {
        c.expect = expectation(&table[3 * cid..3 * cid + 3]);
        rx.expect(cid as u16, c.expect);
    }
    let mut buf = Vec::with_capacity(stream.len());
    let mut start = 0;
    let mut fed = 0;
    while fed < stream.len() {
        let n = if chunk == 0 { stream.len() } else { chunk };
        let to = (fed + n).min(stream.len());
        buf.extend_from_slice(&stream[fed..to]);
        fed = to;
        loop {
            let avail = &buf[start..];
            if let Some((p, dst, at, left)) = placing.as_mut() {
                // The rest of the data, straight into the buffer, then the digest.
                let n = (*left).min(avail.len());
                dst[*at..*at + n].copy_from_slice(&avail[..n]);
                (*at, *left, start) = (*at + n, *left - n, start + n);
                if *left > 0 {
                    break;
                }
                let data = &dst[p.offset as usize..][..p.len as usize];
                if p.digest {
                    let Some(trailer) = buf[start..].first_chunk::<DIGEST_LEN>() else {
                        break;
                    };
                    if check_data_digest(data, trailer).is_err() {
                        return;
                    }
                    start += DIGEST_LEN;
                }
                let c = &mut cmds[usize::from(p.cid)];
                c.got += p.len;
                assert!(c.got <= buf_len(c.expect));
                assert!(
                    !p.success || c.got == buf_len(c.expect),
                    "SUCCESS before all the data"
                );
                c.done = p.success;
                placing = None;
                continue;
            }
            match rx.next(avail) {
                Err(e) => {
                    let _ = e.to_string();
                    return; // the connection ends
                }
                Ok(Next::NeedMore { pdu_len }) => {
                    assert!(pdu_len > avail.len() && pdu_len <= MAX_PDU);
                    break;
                }
                Ok(Next::Pdu { pdu, len }) => {
                    assert!(len >= 8 && len <= avail.len() && len <= MAX_PDU);
                    took(&mut rx, &mut cmds, pdu, &avail[..len]);
                    start += len;
                }
                Ok(Next::Place(p)) => {
                    assert!(chunk & 1 == 1 && p.len >= 64 && p.consumed <= avail.len());
                    assert!(p.data.len() < p.len as usize || p.digest);
                    let c = &cmds[usize::from(p.cid)];
                    let Expect::ToHost { len } = c.expect else {
                        panic!("C2HData placed for command {}, which does not read", p.cid);
                    };
                    assert!(!c.done, "C2HData placed after SUCCESS");
                    assert_eq!(p.offset, c.got, "C2HData placed out of order");
                    assert!(u64::from(p.offset) + u64::from(p.len) <= u64::from(len));
                    let mut dst = vec![0u8; len as usize];
                    let at = p.offset as usize;
                    dst[at..at + p.data.len()].copy_from_slice(p.data);
                    let (next, left) = (at + p.data.len(), p.len as usize - p.data.len());
                    start += p.consumed;
                    placing = Some((Placement { data: &[], ..p }, dst, next, left));
                }
            }
        }
    }
});

fn buf_len(e: Expect) -> u32 {
    match e {
        Expect::ToHost { len } => len,
        _ => 0,
    }
}

/// Checks one accepted PDU (`bytes`, all of it) against the harness's model of the commands.
fn took(rx: &mut HostRx, cmds: &mut [Cmd; ENTRIES], pdu: HostPdu<'_>, bytes: &[u8]) {
    match pdu {
        HostPdu::Response(cqe) => {
            if let Some(c) = cmds.get_mut(usize::from(cqe.cid)) {
                c.got = 0;
                c.done = false;
                rx.expect(cqe.cid, c.expect);
            }
        }
        HostPdu::C2hData {
            cid,
            offset,
            data,
            success,
        } => {
            let c = cmds
                .get_mut(usize::from(cid))
                .expect("C2HData for an ID outside the queue");
            let Expect::ToHost { len } = c.expect else {
                panic!("C2HData accepted for command {cid}, which does not read");
            };
            assert!(!c.done, "C2HData accepted after SUCCESS");
            assert_eq!(offset, c.got, "C2HData out of order");
            let range = bytes.as_ptr_range();
            assert!(range.contains(&data.as_ptr()) && data.as_ptr_range().end <= range.end);
            // The copy the initiator makes, into a buffer of exactly the command's length.
            let mut dst = vec![0u8; len as usize];
            dst[offset as usize..][..data.len()].copy_from_slice(data);
            c.got += data.len() as u32;
            assert!(c.got <= len);
            assert!(!success || c.got == len, "SUCCESS before all the data");
            c.done = success;
        }
        HostPdu::R2t(r) => {
            let c = cmds
                .get_mut(usize::from(r.cccid))
                .expect("R2T for an ID outside the queue");
            let Expect::ToCtrl { len } = c.expect else {
                panic!("R2T accepted for command {}, which does not write", r.cccid);
            };
            assert!(r.r2tl > 0 && u64::from(r.r2to) + u64::from(r.r2tl) <= u64::from(len));
            // `got`: the data asked for so far; never asked for twice.
            assert!(r.r2to >= c.got, "R2T accepted for data asked for already");
            c.got = r.r2to + r.r2tl;
        }
    }
}
