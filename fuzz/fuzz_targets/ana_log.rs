//! The ANA log page (Get Log Page 0x0C) as the initiator reads it from a target: a buffer of
//! the length the host asked for, holding the header, the group descriptors and their NSID
//! lists, then whatever padding the target left. Asserts no panic; that a decoded log lies
//! inside the buffer (no count or length field reaches past it, so no allocation bigger than
//! the input); that it re-encodes to the input bytes except reserved bytes and the state
//! byte's reserved high nibble; that the walk stops at the first byte it needs (one byte less
//! is an error); and that decode -> encode -> decode gives back the same log, with and without
//! the NSID lists (RGO).
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdmablk::nvme::ana::{AnaLog, AnaState, GROUP_LEN, HEADER_LEN};

fuzz_target!(|b: &[u8]| {
    if let Some(&c) = b.first() {
        state_code(c);
    }
    match AnaLog::decode(b) {
        Ok(log) => decoded(b, &log),
        Err(e) => assert!(!e.to_string().is_empty()),
    }
});

fn state_code(c: u8) {
    if let Some(s) = AnaState::from_code(c) {
        assert_eq!(s.code(), c & 0x0F);
        assert_eq!(AnaState::from_name(s.name()), Some(s));
        assert_eq!(s.accessible(), s.io_status().is_none());
        assert!(s.io_status().is_none_or(|st| !st.dnr));
    }
}

fn decoded(b: &[u8], log: &AnaLog) {
    assert!(b.len() >= HEADER_LEN);
    assert_eq!(
        log.groups.len(),
        usize::from(u16::from_le_bytes([b[8], b[9]]))
    );
    // Counts never exceed what the buffer holds.
    let len = log.encoded_len(false);
    assert!(
        len <= b.len(),
        "log of {len} bytes decoded from {}",
        b.len()
    );
    assert!(log.groups.len() <= (b.len() - HEADER_LEN) / GROUP_LEN);
    let nsids: usize = log.groups.iter().map(|g| g.nsids.len()).sum();
    assert!(nsids <= (b.len() - HEADER_LEN - GROUP_LEN * log.groups.len()) / 4);
    assert!(log.groups.iter().all(|g| g.grpid != 0));

    // Bit-exact re-encoding, reserved bytes aside.
    let re = log.encode(false);
    assert_eq!(re.len(), len);
    let mut want = b[..len].to_vec();
    want[10..HEADER_LEN].fill(0);
    let mut off = HEADER_LEN;
    for g in &log.groups {
        want[off + 16] &= 0x0F;
        want[off + 17..off + GROUP_LEN].fill(0);
        off += GROUP_LEN + 4 * g.nsids.len();
    }
    assert_eq!(off, len);
    assert_eq!(re, want);
    assert_eq!(AnaLog::decode(&re).as_ref(), Ok(log));

    // The walk needs every byte it used: one fewer is refused.
    assert!(AnaLog::decode(&b[..len - 1]).is_err());

    // Return Groups Only: same groups, no NSIDs.
    let rgo = AnaLog::decode(&log.encode(true)).expect("RGO encoding decodes");
    assert_eq!(rgo.chgcnt, log.chgcnt);
    assert_eq!(rgo.groups.len(), log.groups.len());
    for (r, g) in rgo.groups.iter().zip(&log.groups) {
        assert!(r.nsids.is_empty());
        assert_eq!((r.grpid, r.chgcnt, r.state), (g.grpid, g.chgcnt, g.state));
    }

    // The state the initiator routes by: the first group listing the NSID.
    for g in log.groups.iter().take(8) {
        for &nsid in g.nsids.iter().take(8) {
            let first = log.groups.iter().find(|h| h.nsids.contains(&nsid));
            assert_eq!(log.state_of(nsid), first.map(|h| h.state));
            assert!(log.state_of(nsid).is_some());
        }
    }
}
