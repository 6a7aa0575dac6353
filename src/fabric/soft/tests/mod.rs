//! In-process tests of the soft provider through the public fabric API: two QPs connected over
//! loopback TCP in one process.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::fabric::{
    resolve, Access, CmEvent, ConnParam, Cq, Device, FabricError, MemBuf, Mr, Pd, ProviderKind, Qp,
    QpCaps, QpInit, RecvWr, SendFlags, SendWr, Sge, Wc, WcOpcode, WcStatus, WrOp,
};

const T: Duration = Duration::from_secs(10);
const RW: Access = Access::from_bits(
    Access::LOCAL_WRITE.bits() | Access::REMOTE_WRITE.bits() | Access::REMOTE_READ.bits(),
);

pub(super) struct Side {
    pub pd: Pd,
    pub cq: Cq,
    pub qp: Qp,
}

impl Side {
    fn mr(&self, len: usize, access: Access) -> Mr {
        self.pd
            .register(MemBuf::zeroed(len).unwrap(), access)
            .unwrap()
    }
}

fn dev() -> Device {
    Device::open(ProviderKind::Soft, None).unwrap()
}

pub(super) fn listener() -> crate::fabric::Listener {
    dev().listen("127.0.0.1:0".parse().unwrap(), 128).unwrap()
}

fn init<'a>(pd: &'a Pd, cq: &'a Cq, caps: QpCaps) -> QpInit<'a> {
    QpInit {
        pd,
        send_cq: cq,
        recv_cq: cq,
        caps,
        srq: None,
    }
}

/// Active side: connects to `addr` with its own PD and CQ.
fn connect(
    addr: SocketAddr,
    param: ConnParam,
    caps: QpCaps,
) -> crate::fabric::Result<(Side, Vec<u8>)> {
    let r = resolve(ProviderKind::Soft, addr, T)?;
    let pd = r.device().alloc_pd()?;
    let cq = r.device().create_cq(4096)?;
    let c = r.connect(&init(&pd, &cq, caps), &param, T)?;
    Ok((Side { pd, cq, qp: c.qp }, c.private_data))
}

/// Passive side: accepts the next request on `l` with `pd` / `cq`.
fn accept(l: &crate::fabric::Listener, pd: &Pd, cq: &Cq, param: &ConnParam) -> Qp {
    let req = l.get_request(Some(T)).unwrap().expect("connect request");
    let qp = req.create_qp(&init(pd, cq, QpCaps::default())).unwrap();
    qp.accept(param).unwrap();
    qp
}

/// A connected pair (active, passive) with default parameters, except the active side's
/// `param`.
pub(super) fn pair_with(param: ConnParam) -> (Side, Side) {
    let l = listener();
    let addr = l.local_addr();
    let t = std::thread::spawn(move || connect(addr, param, QpCaps::default()).unwrap().0);
    let pd = dev().alloc_pd().unwrap();
    let cq = dev().create_cq(4096).unwrap();
    let qp = accept(&l, &pd, &cq, &ConnParam::default());
    (t.join().unwrap(), Side { pd, cq, qp })
}

pub(super) fn pair() -> (Side, Side) {
    pair_with(ConnParam::default())
}

/// Waits for the next completion on `cq`.
pub(super) fn wc(cq: &Cq) -> Wc {
    let deadline = Instant::now() + T;
    let mut w = [Wc::default()];
    loop {
        if cq.poll(&mut w).unwrap() == 1 {
            return w[0];
        }
        cq.arm().unwrap();
        if cq.poll(&mut w).unwrap() == 1 {
            return w[0];
        }
        assert!(Instant::now() < deadline, "no completion within {T:?}");
        cq.wait(Some(Duration::from_millis(100))).unwrap();
    }
}

fn no_wc(cq: &Cq) {
    std::thread::sleep(Duration::from_millis(30));
    let mut w = [Wc::default()];
    assert_eq!(
        cq.poll(&mut w).unwrap(),
        0,
        "unexpected completion {:?}",
        w[0]
    );
}

fn sw<'a>(wr_id: u64, op: WrOp<'a>, sgl: &'a [Sge]) -> SendWr<'a> {
    SendWr {
        wr_id,
        op,
        sgl,
        flags: SendFlags::SIGNALED,
    }
}

fn post_recv(side: &Side, mr: &Mr, id: u64, len: u32) {
    side.qp
        .post_recv(&[RecvWr {
            wr_id: id,
            sgl: &[mr.sge(0, len)],
        }])
        .unwrap();
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    rdmablk_testkit::pattern(u64::from(seed), len)
}

#[test]
fn device_list_open_attr() {
    assert_eq!(
        Device::list(ProviderKind::Soft).unwrap(),
        vec!["soft0".to_string()]
    );
    let d = Device::open(ProviderKind::Soft, Some("soft0")).unwrap();
    assert_eq!(d.name(), "soft0");
    assert!(Device::open(ProviderKind::Soft, Some("mlx5_0")).is_err());
    let a = d.attr().unwrap();
    assert!(a.mw_type2 && a.mem_mgt_extensions && a.port_active);
    assert_eq!((a.max_qp_wr, a.max_sge, a.max_qp_rd_atom), (16384, 32, 128));
    let d2 = Device::open_for_addr(ProviderKind::Soft, "10.1.2.3".parse().unwrap()).unwrap();
    assert_eq!(d2.name(), "soft0");
}

#[test]
fn send_recv_with_data_check() {
    let (a, p) = pair();
    let rmr = p.mr(4096, Access::LOCAL_WRITE);
    p.qp.post_recv(&[RecvWr {
        wr_id: 7,
        sgl: &[rmr.sge(0, 4096)],
    }])
    .unwrap();
    let smr = a.mr(4096, Access::empty());
    let data = pattern(1000, 3);
    smr.write_at(0, &data).unwrap();
    a.qp.post_send(&[sw(1, WrOp::Send, &[smr.sge(0, 1000)])])
        .unwrap();
    let s = wc(&a.cq);
    assert_eq!(
        (s.wr_id, s.status, s.opcode),
        (1, WcStatus::Success, WcOpcode::Send)
    );
    assert_eq!(s.qp_num, a.qp.qp_num());
    let r = wc(&p.cq);
    assert_eq!(
        (r.wr_id, r.status, r.opcode, r.byte_len),
        (7, WcStatus::Success, WcOpcode::Recv, 1000)
    );
    assert_eq!(r.qp_num, p.qp.qp_num());
    assert_eq!(r.invalidated_rkey, None);
    let mut got = vec![0; 1000];
    rmr.read_at(0, &mut got).unwrap();
    assert_eq!(got, data);

    // Inline and a multi-SGE receive.
    p.qp.post_recv(&[RecvWr {
        wr_id: 8,
        sgl: &[rmr.sge(0, 3), rmr.sge(100, 100)],
    }])
    .unwrap();
    // Inline: copied at post time, so overwriting the source right after must not matter.
    smr.write_at(2000, b"inline!").unwrap();
    let sge = smr.sge(2000, 7);
    let mut w = sw(2, WrOp::Send, std::slice::from_ref(&sge));
    w.flags |= SendFlags::INLINE;
    a.qp.post_send(&[w]).unwrap();
    smr.write_at(2000, b"XXXXXXX").unwrap();
    assert_eq!(wc(&a.cq).status, WcStatus::Success);
    assert_eq!(wc(&p.cq).byte_len, 7);
    let mut got = [0u8; 7];
    rmr.read_at(0, &mut got[..3]).unwrap();
    rmr.read_at(100, &mut got[3..]).unwrap();
    assert_eq!(&got, b"inline!");
}

#[test]
fn rdma_write_and_read_sizes() {
    let (a, p) = pair();
    for len in [1usize, 4096, 1 << 20] {
        let remote = p.mr(len, RW);
        let src = a.mr(len, Access::LOCAL_WRITE);
        let dst = a.mr(len, Access::LOCAL_WRITE);
        let data = pattern(len, len as u8);
        src.write_at(0, &data).unwrap();
        let (raddr, rkey) = (remote.addr(), remote.rkey());
        let w = WrOp::RdmaWrite {
            remote_addr: raddr,
            rkey,
        };
        a.qp.post_send(&[sw(1, w, &[src.sge(0, len as u32)])])
            .unwrap();
        let c = wc(&a.cq);
        assert_eq!(
            (c.status, c.opcode),
            (WcStatus::Success, WcOpcode::RdmaWrite)
        );
        let mut got = vec![0; len];
        remote.read_at(0, &mut got).unwrap();
        assert_eq!(got, data, "WRITE of {len} bytes");
        let r = WrOp::RdmaRead {
            remote_addr: raddr,
            rkey,
        };
        a.qp.post_send(&[sw(2, r, &[dst.sge(0, len as u32)])])
            .unwrap();
        let c = wc(&a.cq);
        assert_eq!(
            (c.status, c.opcode, c.byte_len),
            (WcStatus::Success, WcOpcode::RdmaRead, len as u32)
        );
        dst.read_at(0, &mut got).unwrap();
        assert_eq!(got, data, "READ of {len} bytes");
    }
    no_wc(&p.cq); // one-sided: nothing on the responder's CQ
}

/// A WRITE with `rkey`/`addr` fails with REM_ACCESS_ERR; both QPs end in the error state.
fn expect_remote_access_error(a: &Side, p: &Side, op: WrOp<'_>, local: &Mr) {
    let rbuf = p.mr(64, Access::LOCAL_WRITE);
    p.qp.post_recv(&[RecvWr {
        wr_id: 50,
        sgl: &[rbuf.sge(0, 64)],
    }])
    .unwrap();
    let next = a.mr(64, Access::LOCAL_WRITE);
    a.qp.post_send(&[
        sw(1, op, &[local.sge(0, 16)]),
        sw(2, WrOp::Send, &[next.sge(0, 8)]),
    ])
    .unwrap();
    let c = wc(&a.cq);
    assert_eq!((c.wr_id, c.status), (1, WcStatus::RemAccessErr));
    let c = wc(&a.cq);
    assert_eq!((c.wr_id, c.status), (2, WcStatus::WrFlushErr));
    // The responder QP is in error too: its receive flushes.
    let c = wc(&p.cq);
    assert_eq!((c.wr_id, c.status), (50, WcStatus::WrFlushErr));
    // Later posts flush at once.
    a.qp.post_send(&[sw(3, WrOp::Send, &[next.sge(0, 8)])])
        .unwrap();
    assert_eq!(wc(&a.cq).status, WcStatus::WrFlushErr);
}

#[test]
fn bad_rkey_range_and_access_fail_with_rem_access_err() {
    type Case = fn(&Mr) -> (u64, u32, bool);
    let cases: [(&str, Case); 5] = [
        ("bad rkey", |m| (m.addr(), m.rkey() ^ 0x5500, true)),
        ("out of range", |m| (m.addr() + 4090, m.rkey(), true)),
        ("below range", |m| (m.addr() - 1, m.rkey(), true)),
        ("READ without REMOTE_READ", |m| (m.addr(), m.rkey(), false)),
        ("WRITE into READ-only", |m| (m.addr(), m.rkey(), true)),
    ];
    for (i, (name, f)) in cases.iter().enumerate() {
        let (a, p) = pair();
        let access = match i {
            3 => Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            4 => Access::REMOTE_READ,
            _ => RW,
        };
        let remote = p.mr(4096, access);
        let (remote_addr, rkey, write) = f(&remote);
        let op = if write {
            WrOp::RdmaWrite { remote_addr, rkey }
        } else {
            WrOp::RdmaRead { remote_addr, rkey }
        };
        eprintln!("case: {name}");
        expect_remote_access_error(&a, &p, op, &a.mr(64, Access::LOCAL_WRITE));
    }
}

#[test]
fn remote_access_through_another_pd_fails() {
    let (a, p) = pair();
    let other_pd = dev().alloc_pd().unwrap();
    let remote = other_pd
        .register(MemBuf::zeroed(4096).unwrap(), RW)
        .unwrap();
    let op = WrOp::RdmaWrite {
        remote_addr: remote.addr(),
        rkey: remote.rkey(),
    };
    expect_remote_access_error(&a, &p, op, &a.mr(64, Access::LOCAL_WRITE));
}

#[test]
fn local_sge_checks() {
    let (a, p) = pair();
    let remote = p.mr(4096, RW);
    let ro = a.mr(4096, Access::empty());
    // READ into memory without LOCAL_WRITE: local protection error, nothing sent.
    let op = WrOp::RdmaRead {
        remote_addr: remote.addr(),
        rkey: remote.rkey(),
    };
    a.qp.post_send(&[sw(1, op, &[ro.sge(0, 16)])]).unwrap();
    assert_eq!(wc(&a.cq).status, WcStatus::LocProtErr);
    let (a, _p) = pair();
    let bad = Sge {
        addr: 0x1000,
        length: 8,
        lkey: 0xdead_0001,
    };
    a.qp.post_send(&[sw(1, WrOp::Send, &[bad])]).unwrap();
    assert_eq!(wc(&a.cq).status, WcStatus::LocProtErr);
}

#[test]
fn receive_too_small_is_loc_len_err_at_receiver() {
    let (a, p) = pair();
    let rmr = p.mr(4096, Access::LOCAL_WRITE);
    p.qp.post_recv(&[RecvWr {
        wr_id: 1,
        sgl: &[rmr.sge(0, 16)],
    }])
    .unwrap();
    let smr = a.mr(4096, Access::LOCAL_WRITE);
    a.qp.post_send(&[sw(9, WrOp::Send, &[smr.sge(0, 100)])])
        .unwrap();
    assert_eq!(wc(&p.cq).status, WcStatus::LocLenErr);
    assert_eq!(wc(&a.cq).status, WcStatus::RemInvReqErr);
}

#[test]
fn rnr_retry_exhausted_and_rnr_recovery() {
    let param = ConnParam {
        rnr_retry_count: 2,
        ..ConnParam::default()
    };
    let (a, p) = pair_with(param);
    let smr = a.mr(4096, Access::LOCAL_WRITE);
    a.qp.post_send(&[sw(1, WrOp::Send, &[smr.sge(0, 10)])])
        .unwrap();
    assert_eq!(wc(&a.cq).status, WcStatus::RnrRetryExcErr);
    drop(p);

    // Infinite retries: the SEND lands once a receive is posted; the WRITE behind it waits.
    let (a, p) = pair();
    let smr = a.mr(4096, Access::LOCAL_WRITE);
    let remote = p.mr(4096, RW);
    smr.write_at(0, b"late").unwrap();
    let w = WrOp::RdmaWrite {
        remote_addr: remote.addr(),
        rkey: remote.rkey(),
    };
    a.qp.post_send(&[
        sw(1, WrOp::Send, &[smr.sge(0, 4)]),
        sw(2, w, &[smr.sge(0, 4)]),
    ])
    .unwrap();
    no_wc(&a.cq);
    let rmr = p.mr(64, Access::LOCAL_WRITE);
    p.qp.post_recv(&[RecvWr {
        wr_id: 5,
        sgl: &[rmr.sge(0, 64)],
    }])
    .unwrap();
    assert_eq!(wc(&p.cq).byte_len, 4);
    assert_eq!((wc(&a.cq).wr_id, wc(&a.cq).wr_id), (1, 2));
    let mut got = [0u8; 4];
    remote.read_at(0, &mut got).unwrap();
    assert_eq!(&got, b"late");
}

#[test]
fn completion_order_and_unsignaled() {
    let (a, p) = pair();
    let len = 1 << 20;
    let remote = p.mr(len, RW);
    let big = a.mr(len, Access::LOCAL_WRITE);
    let small = a.mr(64, Access::LOCAL_WRITE);
    let (ra, rk) = (remote.addr(), remote.rkey());
    let mut unsignaled = sw(
        2,
        WrOp::RdmaWrite {
            remote_addr: ra,
            rkey: rk,
        },
        &[],
    );
    unsignaled.flags = SendFlags::empty();
    let small_sge = [small.sge(0, 8)];
    unsignaled.sgl = &small_sge;
    a.qp.post_send(&[
        sw(
            1,
            WrOp::RdmaRead {
                remote_addr: ra,
                rkey: rk,
            },
            &[big.sge(0, len as u32)],
        ),
        unsignaled,
        unsignaled,
        sw(
            3,
            WrOp::RdmaWrite {
                remote_addr: ra,
                rkey: rk,
            },
            &small_sge,
        ),
    ])
    .unwrap();
    assert_eq!(wc(&a.cq).wr_id, 1);
    assert_eq!(wc(&a.cq).wr_id, 3);
    no_wc(&a.cq);
}

#[test]
fn queue_full_and_bad_wr_at_post() {
    let l = listener();
    let addr = l.local_addr();
    let caps = QpCaps {
        max_send_wr: 2,
        max_send_sge: 1,
        ..QpCaps::default()
    };
    let t = std::thread::spawn(move || connect(addr, ConnParam::default(), caps).unwrap().0);
    let (ppd, pcq) = (dev().alloc_pd().unwrap(), dev().create_cq(64).unwrap());
    let _pqp = accept(&l, &ppd, &pcq, &ConnParam::default());
    let a = t.join().unwrap();
    let m = a.mr(64, Access::LOCAL_WRITE);
    let sge = [m.sge(0, 8)];
    // No receives at the peer: the SENDs stay outstanding (RNR, retried forever).
    let s = sw(1, WrOp::Send, &sge);
    match a.qp.post_send(&[s, s, s]) {
        Err(FabricError::QueueFull { index: 2 }) => {}
        other => panic!("expected QueueFull at 2, got {other:?}"),
    }
    let two = [m.sge(0, 4), m.sge(4, 4)];
    assert!(matches!(
        a.qp.post_send(&[sw(1, WrOp::Send, &two)]),
        Err(FabricError::BadWr { index: 0, .. })
    ));
}

#[test]
fn private_data_on_connect_accept_reject() {
    let l = listener();
    let addr = l.local_addr();
    let param = ConnParam {
        private_data: vec![1; 56],
        initiator_depth: 4,
        responder_resources: 8,
        ..ConnParam::default()
    };
    let p2 = param.clone();
    let t = std::thread::spawn(move || connect(addr, p2, QpCaps::default()));
    let req = l.get_request(Some(T)).unwrap().unwrap();
    assert_eq!(req.private_data(), &[1; 56][..]);
    assert_eq!((req.initiator_depth(), req.responder_resources()), (4, 8));
    let (pd, cq) = (
        req.device().alloc_pd().unwrap(),
        req.device().create_cq(64).unwrap(),
    );
    let qp = req.create_qp(&init(&pd, &cq, QpCaps::default())).unwrap();
    let too_long = ConnParam {
        private_data: vec![0; 197],
        ..ConnParam::default()
    };
    assert!(matches!(
        qp.accept(&too_long),
        Err(FabricError::InvalidArgument { .. })
    ));
    let acc = ConnParam {
        private_data: vec![2; 196],
        initiator_depth: 16,
        responder_resources: 2,
        ..ConnParam::default()
    };
    qp.accept(&acc).unwrap();
    let (a, pdata) = t.join().unwrap().unwrap();
    assert_eq!(pdata, vec![2; 196]);
    // Negotiated like RDMA CM: each direction is the smaller of the two offers.
    assert_eq!((qp.initiator_depth(), qp.responder_resources()), (8, 2));
    assert_eq!((a.qp.initiator_depth(), a.qp.responder_resources()), (2, 8));
    assert_eq!(qp.cm_event(Some(T)).unwrap(), Some(CmEvent::Established));

    // Reject with data; drop (of a request, of an unaccepted QP) rejects without.
    for how in 0..3 {
        let t = std::thread::spawn(move || connect(addr, ConnParam::default(), QpCaps::default()));
        let req = l.get_request(Some(T)).unwrap().unwrap();
        match how {
            0 => {
                assert!(req.reject(&[0; 149]).is_err());
            }
            1 => drop(req),
            _ => drop(req.create_qp(&init(&pd, &cq, QpCaps::default())).unwrap()),
        }
        if how == 0 {
            // (the failed reject consumed the request and rejected it on drop)
        }
        match t.join().unwrap() {
            Err(FabricError::Rejected {
                private_data,
                addr: a2,
            }) => {
                assert_eq!(a2, addr);
                assert!(private_data.is_empty());
            }
            other => panic!("expected Rejected, got {:?}", other.map(|_| ())),
        }
    }
    let t = std::thread::spawn(move || connect(addr, ConnParam::default(), QpCaps::default()));
    let req = l.get_request(Some(T)).unwrap().unwrap();
    req.reject(b"go away").unwrap();
    match t.join().unwrap() {
        Err(FabricError::Rejected { private_data, .. }) => assert_eq!(private_data, b"go away"),
        other => panic!("expected Rejected, got {:?}", other.map(|_| ())),
    }
    let long = ConnParam {
        private_data: vec![0; 57],
        ..ConnParam::default()
    };
    assert!(matches!(
        connect(addr, long, QpCaps::default()),
        Err(FabricError::InvalidArgument { .. })
    ));
}

#[test]
fn unreachable_peer() {
    let addr = listener().local_addr(); // dropped at once: nobody listens there any more
    match connect(addr, ConnParam::default(), QpCaps::default()) {
        Err(FabricError::Unreachable { addr: a, .. }) => assert_eq!(a, addr),
        other => panic!("expected Unreachable, got {:?}", other.map(|_| ())),
    }
}

#[test]
fn disconnect_reaches_both_sides_and_flushes() {
    let (a, p) = pair();
    assert_eq!(p.qp.cm_event(Some(T)).unwrap(), Some(CmEvent::Established));
    let rmr = p.mr(64, Access::LOCAL_WRITE);
    p.qp.post_recv(&[RecvWr {
        wr_id: 3,
        sgl: &[rmr.sge(0, 64)],
    }])
    .unwrap();
    let amr = a.mr(64, Access::LOCAL_WRITE);
    a.qp.post_recv(&[RecvWr {
        wr_id: 4,
        sgl: &[amr.sge(0, 64)],
    }])
    .unwrap();
    a.qp.disconnect().unwrap();
    assert_eq!(a.qp.cm_event(Some(T)).unwrap(), Some(CmEvent::Disconnected));
    assert_eq!(p.qp.cm_event(Some(T)).unwrap(), Some(CmEvent::Disconnected));
    assert_eq!((wc(&a.cq).wr_id, wc(&p.cq).wr_id), (4, 3));
    p.qp.post_send(&[sw(9, WrOp::Send, &[rmr.sge(0, 8)])])
        .unwrap();
    let c = wc(&p.cq);
    assert_eq!((c.wr_id, c.status), (9, WcStatus::WrFlushErr));
    a.qp.disconnect().unwrap(); // idempotent

    // Dropping a QP disconnects its peer.
    let (a, p) = pair();
    drop(a);
    assert_eq!(p.qp.cm_event(Some(T)).unwrap(), Some(CmEvent::Established));
    assert_eq!(p.qp.cm_event(Some(T)).unwrap(), Some(CmEvent::Disconnected));
}

#[test]
fn sixty_four_qps_share_cqs() {
    const N: usize = 64;
    let l = listener();
    let addr = l.local_addr();
    let t = std::thread::spawn(move || {
        let r = resolve(ProviderKind::Soft, addr, T).unwrap();
        let pd = r.device().alloc_pd().unwrap();
        let cq = r.device().create_cq(4096).unwrap();
        let qps: Vec<Qp> = (0..N)
            .map(|_| {
                let r = resolve(ProviderKind::Soft, addr, T).unwrap();
                r.connect(&init(&pd, &cq, QpCaps::default()), &ConnParam::default(), T)
                    .unwrap()
                    .qp
            })
            .collect();
        (pd, cq, qps)
    });
    let pd = dev().alloc_pd().unwrap();
    let cq = dev().create_cq(4096).unwrap();
    let rmr = pd.register(MemBuf::zeroed(N * 4096).unwrap(), RW).unwrap();
    let pqps: Vec<Qp> = (0..N)
        .map(|i| {
            let req = l.get_request(Some(T)).unwrap().unwrap();
            let qp = req.create_qp(&init(&pd, &cq, QpCaps::default())).unwrap();
            qp.post_recv(&[RecvWr {
                wr_id: i as u64,
                sgl: &[rmr.sge(i * 4096, 64)],
            }])
            .unwrap();
            qp.accept(&ConnParam::default()).unwrap();
            qp
        })
        .collect();
    let (apd, acq, aqps) = t.join().unwrap();
    let smr = apd.register(MemBuf::zeroed(N * 4096).unwrap(), RW).unwrap();
    for (i, qp) in aqps.iter().enumerate() {
        smr.write_at(i * 4096, &pattern(4096, i as u8)).unwrap();
        let w = WrOp::RdmaWrite {
            remote_addr: rmr.addr() + (i * 4096) as u64 + 64,
            rkey: rmr.rkey(),
        };
        let sge_w = [smr.sge(i * 4096 + 64, 4032)];
        let sge_s = [smr.sge(i * 4096, 64)];
        qp.post_send(&[
            sw(i as u64, w, &sge_w),
            sw(1000 + i as u64, WrOp::Send, &sge_s),
        ])
        .unwrap();
    }
    let mut seen = vec![0u32; N];
    for _ in 0..2 * N {
        let c = wc(&acq);
        assert_eq!(c.status, WcStatus::Success);
        let i = aqps.iter().position(|q| q.qp_num() == c.qp_num).unwrap();
        seen[i] += 1;
    }
    assert!(seen.iter().all(|&n| n == 2));
    for _ in 0..N {
        let c = wc(&cq);
        assert_eq!((c.status, c.byte_len), (WcStatus::Success, 64));
        assert_eq!(pqps[c.wr_id as usize].qp_num(), c.qp_num);
    }
    let mut got = vec![0; N * 4096];
    rmr.read_at(0, &mut got).unwrap();
    for i in 0..N {
        assert_eq!(
            got[i * 4096..(i + 1) * 4096],
            pattern(4096, i as u8)[..],
            "QP {i}"
        );
    }
    drop(aqps);
    for qp in &pqps {
        let mut ev = qp.cm_event(Some(T)).unwrap();
        if ev == Some(CmEvent::Established) {
            ev = qp.cm_event(Some(T)).unwrap();
        }
        assert_eq!(ev, Some(CmEvent::Disconnected));
    }
}

mod lifecycle;
mod malformed;
mod receive;
mod silent_peers;
mod srq;
mod throughput;
mod transmit;
mod windows;
