//! Type-2 memory windows: bind, use, local and remote invalidation, use after invalidation,
//! use from a QP other than the one the window was bound on.

use super::*;
use crate::fabric::Mw;

const WINDOW: Access = Access::from_bits(Access::LOCAL_WRITE.bits() | Access::MW_BIND.bits());

/// Binds `mw` over `[off, off + len)` of `mr` through `side`'s QP; returns the new rkey.
fn bind(side: &Side, mw: &Mw, mr: &Mr, off: u64, len: u64, access: Access) -> u32 {
    let before = mw.rkey();
    let op = WrOp::BindMw {
        mw,
        mr,
        addr: mr.addr() + off,
        length: len,
        access,
    };
    side.qp.post_send(&[sw(77, op, &[])]).unwrap();
    let rkey = mw.rkey();
    assert_eq!(rkey >> 8, before >> 8, "a bind keeps the key index");
    assert_eq!(
        rkey & 0xff,
        (before + 1) & 0xff,
        "a bind increments the tag"
    );
    let c = wc(&side.cq);
    assert_eq!(
        (c.wr_id, c.status, c.opcode),
        (77, WcStatus::Success, WcOpcode::BindMw)
    );
    rkey
}

fn write(a: &Side, local: &Mr, remote_addr: u64, rkey: u32, len: u32) -> WcStatus {
    let op = WrOp::RdmaWrite { remote_addr, rkey };
    a.qp.post_send(&[sw(5, op, &[local.sge(0, len)])]).unwrap();
    wc(&a.cq).status
}

#[test]
fn window_bind_use_and_local_invalidate() {
    let (a, p) = pair();
    let mr = p.mr(8192, WINDOW);
    let mw = p.pd.alloc_mw().unwrap();
    let rkey = bind(
        &p,
        &mw,
        &mr,
        4096,
        1024,
        Access::REMOTE_WRITE | Access::REMOTE_READ,
    );
    let src = a.mr(4096, Access::LOCAL_WRITE);
    src.write_at(0, &pattern(1024, 9)).unwrap();
    let base = mr.addr() + 4096;
    assert_eq!(write(&a, &src, base, rkey, 1024), WcStatus::Success);
    let mut got = vec![0; 1024];
    mr.read_at(4096, &mut got).unwrap();
    assert_eq!(got, pattern(1024, 9));
    // READ through the window too.
    let dst = a.mr(4096, Access::LOCAL_WRITE);
    let op = WrOp::RdmaRead {
        remote_addr: base + 24,
        rkey,
    };
    a.qp.post_send(&[sw(6, op, &[dst.sge(0, 1000)])]).unwrap();
    assert_eq!(wc(&a.cq).status, WcStatus::Success);
    dst.read_at(0, &mut got[..1000]).unwrap();
    assert_eq!(got[..1000], pattern(1024, 9)[24..]);

    p.qp.post_send(&[sw(8, WrOp::LocalInv { rkey }, &[])])
        .unwrap();
    let c = wc(&p.cq);
    assert_eq!(
        (c.wr_id, c.status, c.opcode),
        (8, WcStatus::Success, WcOpcode::LocalInv)
    );
    // Use after invalidate.
    let rbuf = p.mr(64, Access::LOCAL_WRITE);
    p.qp.post_recv(&[RecvWr {
        wr_id: 50,
        sgl: &[rbuf.sge(0, 64)],
    }])
    .unwrap();
    assert_eq!(write(&a, &src, base, rkey, 16), WcStatus::RemAccessErr);
}

#[test]
fn window_range_and_rights_are_enforced() {
    let (a, p) = pair();
    let mr = p.mr(8192, WINDOW);
    let mw = p.pd.alloc_mw().unwrap();
    let rkey = bind(&p, &mw, &mr, 0, 1024, Access::REMOTE_READ);
    let src = a.mr(4096, Access::LOCAL_WRITE);
    // The window is read-only.
    expect_remote_access_error(
        &a,
        &p,
        WrOp::RdmaWrite {
            remote_addr: mr.addr(),
            rkey,
        },
        &src,
    );

    let (a, p) = pair();
    let mr = p.mr(8192, WINDOW);
    let mw = p.pd.alloc_mw().unwrap();
    let rkey = bind(&p, &mw, &mr, 0, 1024, Access::REMOTE_WRITE);
    let op = WrOp::RdmaWrite {
        remote_addr: mr.addr() + 1020,
        rkey,
    };
    expect_remote_access_error(&a, &p, op, &a.mr(64, Access::LOCAL_WRITE));

    // The region itself (LOCAL_WRITE | MW_BIND only) grants no remote access.
    let (a, p) = pair();
    let mr = p.mr(8192, WINDOW);
    let op = WrOp::RdmaWrite {
        remote_addr: mr.addr(),
        rkey: mr.rkey(),
    };
    expect_remote_access_error(&a, &p, op, &a.mr(64, Access::LOCAL_WRITE));
}

#[test]
fn bind_errors() {
    let (_a, p) = pair();
    let no_bind = p.mr(4096, Access::LOCAL_WRITE);
    let mw = p.pd.alloc_mw().unwrap();
    let op = WrOp::BindMw {
        mw: &mw,
        mr: &no_bind,
        addr: no_bind.addr(),
        length: 64,
        access: Access::REMOTE_READ,
    };
    p.qp.post_send(&[sw(1, op, &[])]).unwrap();
    assert_eq!(wc(&p.cq).status, WcStatus::MwBindErr);

    let (_a, p) = pair();
    let mr = p.mr(4096, WINDOW);
    let mw = p.pd.alloc_mw().unwrap();
    let op = WrOp::BindMw {
        mw: &mw,
        mr: &mr,
        addr: mr.addr() + 4000,
        length: 200,
        access: Access::REMOTE_READ,
    };
    p.qp.post_send(&[sw(1, op, &[])]).unwrap();
    assert_eq!(wc(&p.cq).status, WcStatus::MwBindErr);
}

#[test]
fn send_with_invalidate() {
    let (a, p) = pair();
    let mr = p.mr(8192, WINDOW);
    let mw = p.pd.alloc_mw().unwrap();
    let rkey = bind(&p, &mw, &mr, 0, 4096, Access::REMOTE_WRITE);
    let rbuf = p.mr(64, Access::LOCAL_WRITE);
    p.qp.post_recv(&[RecvWr {
        wr_id: 1,
        sgl: &[rbuf.sge(0, 64)],
    }])
    .unwrap();
    p.qp.post_recv(&[RecvWr {
        wr_id: 2,
        sgl: &[rbuf.sge(0, 64)],
    }])
    .unwrap();
    let src = a.mr(64, Access::LOCAL_WRITE);
    assert_eq!(write(&a, &src, mr.addr(), rkey, 8), WcStatus::Success);
    a.qp.post_send(&[sw(3, WrOp::SendWithInv { rkey }, &[src.sge(0, 8)])])
        .unwrap();
    assert_eq!(wc(&a.cq).status, WcStatus::Success);
    let c = wc(&p.cq);
    assert_eq!(
        (c.wr_id, c.status, c.invalidated_rkey),
        (1, WcStatus::Success, Some(rkey))
    );
    // Use after remote invalidation.
    assert_eq!(write(&a, &src, mr.addr(), rkey, 8), WcStatus::RemAccessErr);
    assert_eq!(wc(&p.cq).status, WcStatus::WrFlushErr); // receive 2

    // Invalidating a key that is not a bound window of this QP fails.
    let (a, p) = pair();
    let rbuf = p.mr(64, Access::LOCAL_WRITE);
    p.qp.post_recv(&[RecvWr {
        wr_id: 1,
        sgl: &[rbuf.sge(0, 64)],
    }])
    .unwrap();
    let src = a.mr(64, Access::LOCAL_WRITE);
    a.qp.post_send(&[sw(
        3,
        WrOp::SendWithInv { rkey: rbuf.rkey() },
        &[src.sge(0, 8)],
    )])
    .unwrap();
    assert_eq!(wc(&a.cq).status, WcStatus::RemInvReqErr);
    assert_eq!(wc(&p.cq).status, WcStatus::RemInvReqErr);
}

#[test]
fn window_works_only_through_its_qp() {
    // Two connections into one passive PD; the window is bound on the first.
    let l = listener();
    let addr = l.local_addr();
    let t = std::thread::spawn(move || {
        let a1 = connect(addr, ConnParam::default(), QpCaps::default())
            .unwrap()
            .0;
        let a2 = connect(addr, ConnParam::default(), QpCaps::default())
            .unwrap()
            .0;
        (a1, a2)
    });
    let pd = dev().alloc_pd().unwrap();
    let cq = dev().create_cq(256).unwrap();
    let q1 = accept(&l, &pd, &cq, &ConnParam::default());
    let q2 = accept(&l, &pd, &cq, &ConnParam::default());
    let (a1, a2) = t.join().unwrap();
    let p1 = Side {
        pd: pd.clone(),
        cq: cq.clone(),
        qp: q1,
    };
    let mr = p1.mr(4096, WINDOW);
    let mw = pd.alloc_mw().unwrap();
    let rkey = bind(&p1, &mw, &mr, 0, 4096, Access::REMOTE_WRITE);
    let src = a1.mr(64, Access::LOCAL_WRITE);
    assert_eq!(write(&a1, &src, mr.addr(), rkey, 8), WcStatus::Success);
    let src2 = a2.mr(64, Access::LOCAL_WRITE);
    let p2 = Side { pd, cq, qp: q2 };
    expect_remote_access_error(
        &a2,
        &p2,
        WrOp::RdmaWrite {
            remote_addr: mr.addr(),
            rkey,
        },
        &src2,
    );
    // The first connection is unaffected.
    assert_eq!(write(&a1, &src, mr.addr(), rkey, 8), WcStatus::Success);
}
