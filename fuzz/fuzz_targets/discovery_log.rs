//! The Discovery Log Page (LID 0x70) as the initiator reads it: a 1024-byte header, then
//! NUMREC 1024-byte entries. The input is the whole log. Walks it as
//! the initiator does (`rdmablk::nvme::discovery::decode_log`: header, then entry i at byte
//! 1024 * i, NUMREC capped at 4096 and the buffer required to hold every entry), and also decodes every 1024-byte chunk
//! as an entry whatever the header says. Asserts no panic; a record decodes exactly when 1024
//! bytes are there (and a header only with RECFMT 0); the numeric fields and TSAS re-encode
//! bit-exact; decoded strings are printable ASCII with no trailing space, within their field;
//! decode -> encode -> decode is a fixed point after one trip, and the identity when every
//! string fits the encoder's field (TRSVCID < 32, TRADDR < 256, SUBNQN <= 223 bytes); and the
//! re-encoded whole log walks to the same entries.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdmablk::nvme::discovery::{
    decode_log, encode_log, DiscoveryLogEntry, DiscoveryLogHeader, DISCOVERY_RECORD_LEN,
    MAX_LOG_ENTRIES, TRADDR_LEN, TRSVCID_LEN,
};
use rdmablk::nvme::nqn::NQN_MAX_LEN;

fuzz_target!(|b: &[u8]| {
    header(b);
    for chunk in b.chunks(DISCOVERY_RECORD_LEN) {
        entry(chunk);
    }
    if let Some((h, entries)) = walk(b) {
        assert!(h.numrec <= MAX_LOG_ENTRIES);
        assert_eq!(entries.len() as u64, h.numrec);
        assert!(entries.len() < b.len() / DISCOVERY_RECORD_LEN);
        let log = encode_log(h.genctr, &entries);
        assert_eq!(log.len(), DISCOVERY_RECORD_LEN * (entries.len() + 1));
        let (h2, again) = walk(&log).expect("a re-encoded log walks");
        assert_eq!((h2.genctr, h2.numrec, h2.recfmt), (h.genctr, h.numrec, 0));
        for (a, e) in again.iter().zip(&entries) {
            assert_eq!(a, &once(e));
        }
    }
});

/// The initiator's walk (`decode_log`): `None` where it reports a protocol error.
fn walk(b: &[u8]) -> Option<(DiscoveryLogHeader, Vec<DiscoveryLogEntry>)> {
    let r = decode_log(b);
    if let Ok(h) = DiscoveryLogHeader::decode(b) {
        // A header that fits the bound and a buffer that holds its entries always walks.
        let holds = (h.numrec as usize)
            .checked_add(1)
            .and_then(|n| n.checked_mul(DISCOVERY_RECORD_LEN))
            .is_some_and(|total| b.len() >= total);
        if h.numrec <= MAX_LOG_ENTRIES && holds {
            assert!(r.is_ok(), "a log that holds its entries walks: {r:?}");
        }
    }
    r.ok()
}

fn header(b: &[u8]) {
    let ok_shape = b.len() >= DISCOVERY_RECORD_LEN && b[16] == 0 && b[17] == 0;
    match DiscoveryLogHeader::decode(b) {
        Ok(h) => {
            assert!(ok_shape);
            assert_eq!(h.recfmt, 0);
            let re = h.encode();
            assert_eq!(&re[..18], &b[..18]);
            assert!(re[18..].iter().all(|&c| c == 0));
            assert_eq!(DiscoveryLogHeader::decode(&re), Ok(h));
        }
        Err(e) => {
            assert!(!ok_shape);
            assert!(!e.to_string().is_empty());
        }
    }
}

fn entry(b: &[u8]) {
    let e = match DiscoveryLogEntry::decode(b) {
        Ok(e) => e,
        Err(err) => {
            assert!(b.len() < DISCOVERY_RECORD_LEN);
            assert!(!err.to_string().is_empty());
            return;
        }
    };
    assert!(b.len() >= DISCOVERY_RECORD_LEN);
    for (s, max) in [
        (&e.trsvcid, TRSVCID_LEN),
        (&e.traddr, TRADDR_LEN),
        (&e.subnqn, TRADDR_LEN),
    ] {
        assert!(s.len() <= max, "{} bytes from a {max}-byte field", s.len());
        assert!(
            s.bytes().all(|c| c.is_ascii_graphic() || c == b' '),
            "control or non-ASCII characters reach logs and URLs: {s:?}"
        );
        assert!(!s.ends_with(' '));
    }
    let re = e.encode();
    assert_eq!(&re[..12], &b[..12]);
    assert_eq!(&re[768..784], &b[768..784]);
    let e2 = once(&e);
    assert_eq!(once(&e2), e2, "decode -> encode -> decode is a fixed point");
    let fits = e.trsvcid.len() < TRSVCID_LEN
        && e.traddr.len() < TRADDR_LEN
        && e.subnqn.len() <= NQN_MAX_LEN;
    if fits {
        assert_eq!(e2, e);
    } else {
        // Longer strings are cut to the field, never overrun it.
        assert!(e.trsvcid.starts_with(&e2.trsvcid) && e2.trsvcid.len() < TRSVCID_LEN);
        assert!(e.traddr.starts_with(&e2.traddr) && e2.traddr.len() < TRADDR_LEN);
        assert!(e.subnqn.starts_with(&e2.subnqn) && e2.subnqn.len() <= NQN_MAX_LEN);
        let cut = DiscoveryLogEntry {
            trsvcid: e2.trsvcid.clone(),
            traddr: e2.traddr.clone(),
            subnqn: e2.subnqn.clone(),
            ..e.clone()
        };
        assert_eq!(cut, e2);
    }
}

/// Decode after encode.
fn once(e: &DiscoveryLogEntry) -> DiscoveryLogEntry {
    DiscoveryLogEntry::decode(&e.encode()).expect("an encoded entry decodes")
}
