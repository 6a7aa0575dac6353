//! Receiving on a queue's connection: the socket is read into the receive buffer and each
//! PDU is checked there ([`HostRx`]); large C2HData is placed straight into the command's
//! buffer (see [`super`]).

use std::io::{ErrorKind, Read};

use rdmablk::nvme::transport::tcp::ack;
use rdmablk::nvme::transport::tcp::host_rx::{check_data_digest, HostPdu, Next, Placement};
use rdmablk::nvme::transport::tcp::place::{self, PLACE_READ};
use rdmablk::nvme::transport::tcp::DIGEST_LEN;
use rdmablk::nvme::{Cqe, Status};

use super::TcpLink;
use crate::transport::Event;

/// Receive buffer bytes (grows to the largest PDU seen, within [`super::MAX_C2H_DATA`]).
pub(super) const RX_BYTES: usize = 256 * 1024;
/// C2HData of at least this many bytes is placed straight into the command's buffer when it
/// has not all arrived (below it, one more `read` would cost more than the copy it saves).
pub(super) const PLACE_FROM: usize = 16 * 1024;

/// A C2HData PDU being received straight into its command's buffer.
#[derive(Clone, Copy, Debug)]
pub(super) struct Placing {
    cid: u16,
    /// The PDU's data in the command's buffer.
    data: place::Placing,
    success: bool,
}

impl TcpLink {
    /// Reads into `rx`, at most `read_max` bytes; whether the socket has nothing more now
    /// (or the connection broke), rather than the read stopping at its limit.
    fn fill(&mut self) -> bool {
        if self.rx_start > 0 {
            self.rx.copy_within(self.rx_start..self.rx_end, 0);
            self.rx_end -= self.rx_start;
            self.rx_start = 0;
        }
        let end = (self.rx_end + self.read_max).min(self.rx.len());
        while self.rx_end < end && self.broken.is_none() {
            let asked = end - self.rx_end;
            match self.stream.read(&mut self.rx[self.rx_end..end]) {
                Ok(0) => self.fail_with("the target closed the connection".into()),
                Ok(n) => {
                    self.rx_end += n;
                    self.rx_bytes += n as u64;
                    if n < asked {
                        return true; // drained: no second call just to hear EAGAIN
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => self.fail_with(format!("receive: {e}")),
            }
        }
        self.broken.is_some()
    }

    /// Reads what the socket has, parses it, and places large C2HData straight into their
    /// buffers; Err: a protocol error (the queue fails). Bulk data read, or a PDU left
    /// begun, is acknowledged at once (`tcp::ack`: a target with a small send buffer waits
    /// for our ACK before it sends more).
    pub(super) fn receive(&mut self, events: &mut Vec<Event>) -> std::result::Result<(), String> {
        let before = self.rx_bytes;
        let r = self.receive_pdus(events);
        let mid_pdu = self.rx_start < self.rx_end || self.placing.is_some();
        if self.broken.is_none() && ack::wants_ack(self.rx_bytes - before, mid_pdu) {
            self.stream.ack_now();
        }
        r
    }

    fn receive_pdus(&mut self, events: &mut Vec<Event>) -> std::result::Result<(), String> {
        // What the last poll left for this one first: no read before it (nor a move of it
        // within `rx`). A connection that broke since hands back all it has: those commands
        // are done.
        if std::mem::take(&mut self.held) {
            if self.broken.is_some() {
                self.events_max = usize::MAX;
            }
            self.parse(events)?;
            if self.held {
                return Ok(());
            }
        }
        loop {
            if self.broken.is_some() {
                return Ok(()); // nothing more goes into a command's buffer
            }
            if self.placing.is_some_and(|p| p.data.left() > 0) && !self.place_more(events)? {
                return Ok(()); // the socket is drained (or broken)
            }
            let drained = self.fill();
            let placing = self.parse(events)?;
            if self.held || (!placing && drained) {
                return Ok(());
            }
        }
    }

    /// Reads the rest of the placed C2HData's data from the socket into its buffer; true
    /// once all of it is in (its digest, if any, is then parsed from the receive buffer).
    fn place_more(&mut self, events: &mut Vec<Event>) -> std::result::Result<bool, String> {
        let Some(p) = self.placing.as_mut() else {
            return Ok(true);
        };
        while p.data.left() > 0 {
            let (at, left) = p.data.rest();
            // SAFETY: the buffer is the command's, which its queue keeps (and nothing else
            // touches) until the command completes, and that cannot happen before its data
            // is in; `rx_check` checked that the PDU's data lies within it.
            let dst = unsafe { std::slice::from_raw_parts_mut(at, left) };
            match self.stream.read(dst) {
                Ok(0) => {
                    self.fail_with("the target closed the connection".into());
                    return Ok(false);
                }
                Ok(n) => {
                    p.data.got(n);
                    self.rx_bytes += n as u64;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    self.fail_with(format!("receive: {e}"));
                    return Ok(false);
                }
            }
        }
        if !p.data.digest {
            let p = self.placing.take().expect("placing");
            self.placed(p, events);
        }
        Ok(true)
    }

    /// The placed C2HData `p` is all in (and its digest checked): its command's read is
    /// done when it carried SUCCESS.
    fn placed(&mut self, p: Placing, events: &mut Vec<Event>) {
        self.stats.add_placed(p.data.len());
        if p.success {
            events.push(Event::Response(Cqe::error(
                p.cid,
                self.qid,
                0xFFFF,
                Status::SUCCESS,
            )));
        }
    }

    /// Copies what of placed C2HData `p` arrived with its header into the command's buffer
    /// (the rest will be read straight into it).
    fn first_of_placed(buf_addr: &[u64], p: &Placement<'_>) -> Placing {
        let start = buf_addr[usize::from(p.cid)] + u64::from(p.offset);
        Placing {
            cid: p.cid,
            // SAFETY: as in `parse`: the command's buffer, `offset + len` within it.
            data: unsafe {
                place::Placing::begin(start as *mut u8, p.len as usize, p.data, p.digest)
            },
            success: p.success,
        }
    }

    /// Goes on with `placing` (all in and no digest: done).
    fn start_placing(&mut self, placing: Placing, events: &mut Vec<Event>) {
        if placing.data.left() == 0 && !placing.data.digest {
            self.placed(placing, events);
        } else {
            self.placing = Some(placing);
        }
    }

    /// The digest of the placed C2HData, at the front of the receive buffer: whether it was
    /// there (then the placement is over).
    fn placed_digest(&mut self, events: &mut Vec<Event>) -> std::result::Result<bool, String> {
        let Some(p) = self.placing.filter(|p| p.data.left() == 0) else {
            return Ok(true);
        };
        let rx = &self.rx[self.rx_start..self.rx_end];
        let Some(trailer) = rx.first_chunk::<DIGEST_LEN>() else {
            return Ok(false);
        };
        // SAFETY: as in `place_more`; all of the data is in.
        check_data_digest(unsafe { p.data.data() }, trailer).map_err(|e| e.to_string())?;
        self.rx_start += DIGEST_LEN;
        self.placing = None;
        self.placed(p, events);
        Ok(true)
    }

    /// Handles the whole PDUs received, until `events` holds `events_max` (then `held`);
    /// true if it stopped at a C2HData to place (read more into its buffer, then parse
    /// again); Err: a protocol error (the queue fails).
    fn parse(&mut self, events: &mut Vec<Event>) -> std::result::Result<bool, String> {
        if !self.placed_digest(events)? {
            return Ok(false);
        }
        loop {
            if events.len() >= self.events_max && self.rx_start < self.rx_end {
                self.held = true;
                return Ok(false);
            }
            let rx = &self.rx[self.rx_start..self.rx_end];
            let (pdu, len) = match self.rx_check.next(rx).map_err(|e| e.to_string())? {
                Next::NeedMore { pdu_len } => {
                    if pdu_len > self.rx.len() {
                        self.rx.resize(pdu_len, 0);
                    }
                    return Ok(false);
                }
                Next::Place(_) if self.broken.is_some() => return Ok(false),
                Next::Place(p) => {
                    self.read_max = PLACE_READ;
                    let placing = Self::first_of_placed(&self.buf_addr, &p);
                    self.rx_start += p.consumed;
                    self.start_placing(placing, events);
                    return Ok(true);
                }
                Next::Pdu { pdu, len } => (pdu, len),
            };
            self.rx_start += len;
            match pdu {
                HostPdu::Response(cqe) => events.push(Event::Response(cqe)),
                HostPdu::C2hData {
                    cid,
                    offset,
                    data,
                    success,
                } => {
                    self.read_max = if data.len() < PLACE_FROM {
                        RX_BYTES
                    } else {
                        PLACE_READ
                    };
                    let dst = self.buf_addr[usize::from(cid)] as *mut u8;
                    // SAFETY: the buffer at `dst` is the command's, which its queue keeps (and
                    // nothing else touches) until the command completes; `rx_check` checked
                    // that `offset + data.len()` lies within the length the command gave it.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            data.as_ptr(),
                            dst.add(offset as usize),
                            data.len(),
                        )
                    };
                    if success {
                        let cqe = Cqe::error(cid, self.qid, 0xFFFF, Status::SUCCESS);
                        events.push(Event::Response(cqe));
                    }
                }
                HostPdu::R2t(r) => self.send_h2c(r, self.buf_addr[usize::from(r.cccid)]),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::{SocketAddr, TcpListener};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use rdmablk::nvme::transport::tcp::{
        encode_capsule_resp, CommonHeader, IcResp, CAPSULE_RESP_HLEN, CH_LEN, IC_LEN,
    };
    use rdmablk::nvme::{Cqe, Sqe, Status};

    use super::super::{responses_per_poll, TcpLink};
    use crate::stats::Stats;
    use crate::transport::{Dir, Event, QueueParams, QueueTransport};

    const ENTRIES: u16 = 32;

    /// A target that answers the ICReq, reads `ENTRIES` commands and answers them all in one
    /// write.
    fn answer_all_at_once(l: TcpListener) {
        let (mut s, _) = l.accept().expect("the host connects");
        let mut icreq = [0u8; IC_LEN];
        s.read_exact(&mut icreq).expect("ICReq");
        let resp = IcResp {
            pfv: 0,
            cpda: 0,
            hdgst: false,
            ddgst: false,
            maxh2cdata: 128 * 1024,
        };
        s.write_all(&resp.encode()).unwrap();
        let mut out = Vec::new();
        for _ in 0..ENTRIES {
            let mut ch = [0u8; CH_LEN];
            s.read_exact(&mut ch).expect("a capsule");
            let mut rest = vec![0u8; CommonHeader::decode(&ch).plen as usize - CH_LEN];
            s.read_exact(&mut rest).expect("the rest of the capsule");
            let cid = u16::from_le_bytes([rest[2], rest[3]]); // CDW0 bytes 2-3
            let mut b = [0u8; CAPSULE_RESP_HLEN];
            encode_capsule_resp(&Cqe::error(cid, 1, 1, Status::SUCCESS), false, &mut b);
            out.extend_from_slice(&b);
        }
        s.write_all(&out).unwrap();
        let _ = s.read(&mut [0u8; 1]); // until the host hangs up
    }

    fn responses(events: &[Event]) -> Vec<u16> {
        events
            .iter()
            .filter_map(|e| match e {
                Event::Response(cqe) => Some(cqe.cid),
                Event::Sent(_) => None,
            })
            .collect()
    }

    #[test]
    fn a_poll_hands_back_half_of_what_is_outstanding_and_keeps_the_rest_for_the_next() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr: SocketAddr = l.local_addr().unwrap();
        let target = std::thread::spawn(move || answer_all_at_once(l));
        let p = QueueParams {
            addr,
            qid: 1,
            entries: ENTRIES,
            in_capsule_bytes: 0,
            max_transfer_bytes: 4096,
            connect_timeout: Duration::from_secs(10),
        };
        let mut link =
            TcpLink::connect(&p, false, false, None, Arc::new(Stats::default())).expect("connects");
        for cid in 0..ENTRIES {
            let sqe = Sqe {
                cid,
                nsid: 1,
                ..Sqe::default()
            };
            link.send(sqe, Dir::None).expect("queued");
        }
        assert_eq!(responses_per_poll(usize::from(ENTRIES)), 16);
        let mut events = Vec::new();
        let mut polls = Vec::new();
        let mut cids = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while cids.len() < usize::from(ENTRIES) {
            assert!(
                Instant::now() < deadline,
                "{} responses, polls {polls:?}",
                cids.len()
            );
            events.clear();
            link.poll(&mut events).expect("the link works");
            let got = responses(&events);
            if got.is_empty() {
                link.wait(Duration::from_millis(100), false);
                continue;
            }
            polls.push(got.len());
            cids.extend(got);
            if cids.len() < usize::from(ENTRIES) {
                // The rest is in hand: waiting for more must not sleep (30 s is a hang).
                let t = Instant::now();
                link.wait(Duration::from_secs(30), false);
                assert!(
                    t.elapsed() < Duration::from_secs(10),
                    "wait slept on held responses"
                );
            }
        }
        // All 32 came in one segment: each poll that saw them gave back exactly its limit
        // (half of what was outstanding then), every response once and in order.
        assert_eq!(polls, vec![16, 8, 4, 4]);
        assert_eq!(cids, (0..ENTRIES).collect::<Vec<_>>());
        link.disconnect();
        target.join().unwrap();
    }
}
