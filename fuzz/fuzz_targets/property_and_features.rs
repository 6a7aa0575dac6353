//! Admin and Fabrics commands whose fields the target interprets beyond the SQE layout:
//! Property Get/Set (and the CAP / CC / CSTS / VS registers), Get/Set Features with their
//! values (Number of Queues, Arbitration, Power Management), Get Log Page and its window over
//! a page, Abort, Identify, and Dataset Management with its range list. The input is one SQE
//! read as each of them, then the command's data. Asserts no panic, command roundtrips, and
//! that accepted fields stay in range.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdmablk::nvme::admin::{Abort, AsyncEvent};
use rdmablk::nvme::features::{Arbitration, PowerMgmt};
use rdmablk::nvme::identify::IdentifyCmd;
use rdmablk::nvme::io::{decode_dsm_ranges, encode_dsm_ranges, DSM_MAX_RANGES};
use rdmablk::nvme::{
    Cap, Cc, Csts, Dsm, GetFeatures, GetLogPage, NumQueues, PropertyGet, PropertySet, PropertySize,
    SetFeatures, Sqe, Vs,
};
use rdmablk_fuzz::{take_padded, u32_front};

fuzz_target!(|input: &[u8]| {
    let (head, data) = take_padded::<64>(input);
    let sqe = Sqe::decode(&head);
    properties(&sqe);
    features(&sqe);
    log_page(&sqe, data);
    dsm(&sqe, data);
    let a = Abort::from_sqe(&sqe);
    assert_eq!(Abort::from_sqe(&a.to_sqe(sqe.cid)), a);
    let id = IdentifyCmd::from_sqe(&sqe);
    assert_eq!(IdentifyCmd::from_sqe(&id.to_sqe(sqe.cid)), id);
    let ev = AsyncEvent::from_dw0(sqe.cdw15);
    assert_eq!(AsyncEvent::from_dw0(ev.to_dw0()), ev);
});

fn properties(sqe: &Sqe) {
    if let Ok(g) = PropertyGet::from_sqe(sqe) {
        assert_eq!(PropertyGet::from_sqe(&g.to_sqe(sqe.cid)), Ok(g));
        let _ = PropertySize::of_offset(g.offset);
    }
    if let Ok(s) = PropertySet::from_sqe(sqe) {
        if s.size == PropertySize::Four {
            assert!(s.value <= u64::from(u32::MAX));
        }
        assert_eq!(PropertySet::from_sqe(&s.to_sqe(sqe.cid)), Ok(s));
        // Register views of the value the host wrote: every field getter and setter.
        let cc = Cc(s.value as u32);
        let rebuilt = Cc::default()
            .with_en(cc.en())
            .with_css(cc.css())
            .with_mps(cc.mps())
            .with_ams(cc.ams())
            .with_shn(cc.shn())
            .with_iosqes(cc.iosqes())
            .with_iocqes(cc.iocqes())
            .with_crime(cc.crime());
        // Bits 3:1 and 31:25 are reserved; every other bit is some field's.
        assert_eq!(rebuilt.0, cc.0 & !0xFE00_000E);
        let cap = Cap(s.value);
        let _ = (
            cap.mqes(),
            cap.timeout_500ms(),
            cap.css(),
            cap.supports_nvm(),
        );
        let _ = (cap.with_mpsmax(cap.mpsmax()), cap.with_mpsmin(0xFF));
        let csts = Csts(s.value as u32);
        assert_eq!(csts.with_shst(csts.shst()), csts);
        let vs = Vs(s.value as u32);
        assert_eq!(Vs::new(vs.major(), vs.minor(), vs.tertiary()), vs);
    }
}

fn features(sqe: &Sqe) {
    let s = SetFeatures::from_sqe(sqe);
    assert_eq!(SetFeatures::from_sqe(&s.to_sqe(sqe.cid)), s);
    if let Ok(g) = GetFeatures::from_sqe(sqe) {
        assert_eq!(GetFeatures::from_sqe(&g.to_sqe(sqe.cid)), Ok(g));
    }
    let nq = NumQueues::from_dword(s.value);
    assert_eq!(NumQueues::from_dword(nq.to_dword()), nq);
    if nq.check_request().is_ok() {
        let max = sqe.cdw12 as u16;
        let g = nq.grant(max);
        assert!(g.nsq <= nq.nsq && g.ncq <= nq.ncq);
        assert!(u32::from(g.nsq) < u32::from(max).max(1));
    }
    let arb = Arbitration::from_dword(s.value);
    assert_eq!(Arbitration::from_dword(arb.to_dword()), arb);
    let pm = PowerMgmt::from_dword(s.value);
    assert_eq!(PowerMgmt::from_dword(pm.to_dword()), pm);
}

fn log_page(sqe: &Sqe, data: &[u8]) {
    let Ok(g) = GetLogPage::from_sqe(sqe) else {
        return;
    };
    assert_eq!(g.offset % 4, 0);
    assert!(g.len_bytes() >= 4 && g.len_bytes() % 4 == 0);
    assert_eq!(GetLogPage::from_sqe(&g.to_sqe(sqe.cid)), Ok(g));
    if let Ok(w) = g.window(data) {
        assert!(w.len() as u64 <= g.len_bytes());
        assert!(g.offset as usize + w.len() <= data.len());
    }
}

fn dsm(sqe: &Sqe, data: &[u8]) {
    let d = Dsm::from_sqe(sqe);
    assert_eq!(Dsm::from_sqe(&d.to_sqe(sqe.cid)), d);
    assert!(d.ranges() >= 1 && d.ranges() <= DSM_MAX_RANGES);
    assert_eq!(d.data_len() as usize, d.ranges() * 16);
    // The range count from the command, and one from the data itself to reach 0 and > 256.
    for count in [d.ranges(), (u32_front(data) % 300) as usize] {
        if let Ok(ranges) = decode_dsm_ranges(data, count) {
            assert_eq!(ranges.len(), count);
            assert_eq!(&encode_dsm_ranges(&ranges)[..], &data[..count * 16]);
            let nsze = u64::from(sqe.cdw14) << 32 | u64::from(sqe.cdw15);
            for r in &ranges {
                let _ = r.check_range(nsze);
            }
        }
    }
}
