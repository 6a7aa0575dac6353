//! What the initiator parses from a target: the 16-byte response capsule (CQE, status, the
//! Connect Invalid Parameters pointer) and the 4096-byte data pages it reads: Identify
//! Controller / Namespace / active NS list / NS descriptors, and the log pages (SMART,
//! firmware slot, error entries, changed NS list, command effects). Asserts no panic and that
//! every decoded page re-encodes to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdmablk::nvme::fabrics::InvalidParam;
use rdmablk::nvme::identify::{self, IDENTIFY_LEN};
use rdmablk::nvme::log_page::{
    self, CommandEffects, ErrorLogEntry, FwSlotLog, SmartLog, ERROR_ENTRY_LEN, FW_SLOT_LOG_LEN,
    SMART_LOG_LEN,
};
use rdmablk::nvme::{CommandKind, Cqe, IdentifyController, IdentifyNamespace, Status, CQE_LEN};
use rdmablk_fuzz::take_padded;

fuzz_target!(|input: &[u8]| {
    if let Ok(c) = Cqe::from_capsule(input) {
        assert_eq!(&c.to_bytes()[..], input);
    }
    let (cqe_bytes, page) = take_padded::<CQE_LEN>(input);
    cqe(&Cqe::decode(&cqe_bytes), &cqe_bytes);
    let (page, _) = take_padded::<IDENTIFY_LEN>(page);
    identify_pages(&page);
    log_pages(&page);
});

fn cqe(c: &Cqe, b: &[u8; CQE_LEN]) {
    assert_eq!(&c.to_bytes(), b);
    let st = c.status;
    assert_eq!(Status::from_field(st.to_field()), st);
    for kind in [
        CommandKind::Admin,
        CommandKind::Fabrics,
        CommandKind::Io,
        CommandKind::Unknown,
    ] {
        assert!(!st.display_for(kind).to_string().is_empty());
    }
    let _ = (st.name(), st.is_success(), c.result64());
    let p = InvalidParam::from_dw0(c.dw0);
    let _ = p.field_name();
    assert_eq!(InvalidParam::from_dw0(p.to_dw0()), p);
}

fn identify_pages(b: &[u8; IDENTIFY_LEN]) {
    if let Ok(c) = IdentifyController::decode(b) {
        let re = c.encode();
        assert_eq!(IdentifyController::decode(&re).as_ref(), Ok(&c));
        let _ = c.check_fabrics(c.cntlid, rdmablk::nvme::SglNeed::Keyed);
        let _ = c.check_fabrics(c.cntlid, rdmablk::nvme::SglNeed::None);
        let _ = (c.serial(), c.model(), c.firmware(), c.in_capsule_bytes());
        for s in [c.serial(), c.model(), c.firmware()] {
            assert!(
                !s.chars().any(|ch| ch.is_control()),
                "control characters reach logs"
            );
        }
    }
    let ns = IdentifyNamespace::decode(b);
    assert_eq!(IdentifyNamespace::decode(&ns.encode()), ns);
    if let Ok(bytes) = ns.block_bytes() {
        assert!(bytes.is_power_of_two() && bytes >= 512);
    }
    if let Ok(list) = identify::decode_ns_list(b) {
        assert!(list.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(
            identify::decode_ns_list(&identify::encode_ns_list(&list, 0)),
            Ok(list)
        );
    }
    if let Ok(descs) = identify::decode_ns_descriptors(b) {
        assert_eq!(
            identify::decode_ns_descriptors(&identify::encode_ns_descriptors(&descs)),
            Ok(descs)
        );
    }
}

fn log_pages(b: &[u8; IDENTIFY_LEN]) {
    if let Some(ids) = log_page::decode_changed_ns(b) {
        assert!(ids.len() <= IDENTIFY_LEN / 4 && !ids.contains(&0));
        assert_eq!(
            log_page::decode_changed_ns(&log_page::encode_changed_ns(&ids)),
            Some(ids)
        );
    }
    let e = CommandEffects::decode(b);
    assert_eq!(CommandEffects::decode(&e.encode()), e);
    let (smart, _) = take_padded::<SMART_LOG_LEN>(b);
    let s = SmartLog::decode(&smart);
    assert_eq!(SmartLog::decode(&s.encode()), s);
    let (fw, _) = take_padded::<FW_SLOT_LOG_LEN>(b);
    let f = FwSlotLog::decode(&fw);
    assert_eq!(FwSlotLog::decode(&f.encode()), f);
    for chunk in b.chunks_exact(ERROR_ENTRY_LEN).take(4) {
        let (entry, _) = take_padded::<ERROR_ENTRY_LEN>(chunk);
        let e = ErrorLogEntry::decode(&entry);
        assert_eq!(ErrorLogEntry::decode(&e.encode()), e);
    }
}
