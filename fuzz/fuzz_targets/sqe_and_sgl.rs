//! Command capsules as the target receives them: SQE decode, the SGL descriptor in DPTR
//! (standard and rdmablk pushed), its check against queue limits, and the I/O command views.
//! Asserts no panic, bit-exact SQE and keyed-SGL roundtrips, and that a descriptor that passes
//! its check stays inside the limits it was checked against.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdmablk::nvme::io::{check_lba_range, flush_sqe};
use rdmablk::nvme::opcodes::io;
use rdmablk::nvme::transport::rdma::{PushWindow, PushedSgl};
use rdmablk::nvme::{ReadWrite, Sgl, SglLimits, Sqe, WriteZeroes, SQE_LEN};

fuzz_target!(|capsule: &[u8]| {
    let Ok((sqe, data)) = Sqe::from_capsule(capsule) else {
        assert!(capsule.len() < SQE_LEN);
        return;
    };
    assert_eq!(&sqe.to_bytes()[..], &capsule[..SQE_LEN]);
    let _ = (
        sqe.check_fabrics_flags(),
        sqe.fuse(),
        sqe.psdt(),
        sqe.fctype(),
    );

    // Limits from the peer's own bytes so the fuzzer explores both sides of every check:
    // the in-capsule room is what arrived; MDTS comes from cdw15.
    let in_capsule_bytes = u32::try_from(data.len()).unwrap_or(u32::MAX);
    for limits in [
        SglLimits {
            in_capsule_bytes,
            max_transfer_bytes: sqe.cdw15,
        },
        SglLimits {
            in_capsule_bytes: 0,
            max_transfer_bytes: 1 << 17,
        },
    ] {
        check_sgl(&sqe, &limits);
    }

    if let Some(p) = PushedSgl::decode(&sqe.dptr) {
        assert_eq!(
            sqe.sgl().ok(),
            None,
            "a pushed descriptor is not a standard one"
        );
        let re = p.encode();
        assert_eq!(PushedSgl::decode(&re), Some(p));
        let w = PushWindow {
            slots: sqe.cdw14 as u16,
            slot_bytes: sqe.cdw15,
            addr: 0,
            len: 0,
            rkey: 0,
        };
        let owned = u64::from(sqe.cid % w.slots.max(1));
        if p.check(&w, owned).is_ok() {
            assert!(p.slot < u64::from(w.slots) && p.slot == owned && p.len <= w.slot_bytes);
        }
    }

    let nsze = u64::from(sqe.cdw14) << 32 | u64::from(sqe.cdw15);
    let rw = ReadWrite::from_sqe(&sqe);
    if rw.check_range(nsze).is_ok() {
        assert!(rw.slba + u64::from(rw.blocks()) <= nsze);
    }
    let _ = rw.byte_len(sqe.cdw13);
    let opcode = if sqe.opcode == io::READ {
        io::READ
    } else {
        io::WRITE
    };
    assert_eq!(ReadWrite::from_sqe(&rw.to_sqe(opcode, sqe.cid)), rw);
    let wz = WriteZeroes::from_sqe(&sqe);
    let _ = wz.check_range(nsze);
    assert_eq!(WriteZeroes::from_sqe(&wz.to_sqe(sqe.cid)), wz);
    let _ = check_lba_range(rw.slba, u64::from(sqe.cdw13), nsze);
    assert_eq!(flush_sqe(sqe.nsid, sqe.cid).nsid, sqe.nsid);
});

fn check_sgl(sqe: &Sqe, limits: &SglLimits) {
    let Ok(sgl) = sqe.sgl() else { return };
    let re = sgl.encode();
    assert_eq!(Sgl::decode(&re), Ok(sgl));
    match sgl {
        // Every byte of a keyed descriptor is a field: the roundtrip is bit-exact.
        Sgl::Keyed(_) => assert_eq!(re, sqe.dptr),
        // Bytes 12..15 of an in-capsule descriptor are reserved.
        Sgl::InCapsule(_) => assert_eq!((&re[..12], re[15]), (&sqe.dptr[..12], sqe.dptr[15])),
        // A transport data block's address and bytes 12..15 are reserved.
        Sgl::Transport(_) => assert_eq!((&re[8..12], re[15]), (&sqe.dptr[8..12], sqe.dptr[15])),
    }
    for h2c in [false, true] {
        if sgl.check(limits, h2c).is_err() {
            continue;
        }
        match sgl {
            Sgl::Keyed(k) => assert!(k.len <= limits.max_transfer_bytes),
            Sgl::Transport(t) => assert!(t.len <= limits.max_transfer_bytes),
            Sgl::InCapsule(c) => {
                assert!(h2c && limits.in_capsule_bytes > 0);
                assert!(c.offset + u64::from(c.len) <= u64::from(limits.in_capsule_bytes));
            }
        }
    }
}
