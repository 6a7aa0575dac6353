//! The extended Reservation Status data structure (Reservation Report with EDS) as the
//! initiator and the C API read it from a target: a buffer of the length the host asked for.
//! Asserts no panic; that the registrants decoded are the entries that fit whole (REGCTL may
//! count more than the buffer holds: the rest are never read, so no allocation bigger than the
//! input); that they re-encode to the input's bytes except reserved ones; and that decode ->
//! encode -> decode is the identity.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdmablk::nvme::reservation::{
    decode_report, encode_report, REPORT_ENTRY_LEN, REPORT_HEADER_LEN,
};

fuzz_target!(|b: &[u8]| {
    let Some((generation, rtype, ptpls, regs)) = decode_report(b) else {
        assert!(b.len() < REPORT_HEADER_LEN);
        return;
    };
    let regctl = usize::from(u16::from_le_bytes([b[5], b[6]]));
    let fit = (b.len() - REPORT_HEADER_LEN) / REPORT_ENTRY_LEN;
    assert_eq!(regs.len(), regctl.min(fit));
    assert_eq!(generation, u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    assert_eq!(rtype, b[4]);

    let len = REPORT_HEADER_LEN + regs.len() * REPORT_ENTRY_LEN;
    let re = encode_report(generation, rtype, ptpls, &regs, len);
    assert_eq!(re.len(), len);
    // The encoder writes REGCTL as the registrants it was given.
    assert_eq!(usize::from(u16::from_le_bytes([re[5], re[6]])), regs.len());
    assert_eq!(re[..5], b[..5]);
    assert_eq!(re[9], b[9] & 1);
    for i in 0..regs.len() {
        let o = REPORT_HEADER_LEN + i * REPORT_ENTRY_LEN;
        let (want, got) = (&b[o..o + REPORT_ENTRY_LEN], &re[o..o + REPORT_ENTRY_LEN]);
        assert_eq!(got[..2], want[..2]);
        assert_eq!(got[2], want[2] & 1);
        assert_eq!(got[8..32], want[8..32]);
        assert!(got[3..8].iter().chain(&got[32..]).all(|&x| x == 0));
    }
    assert_eq!(decode_report(&re), Some((generation, rtype, ptpls, regs)));
});
