//! Smoke tests over a real verbs device (Soft-RoCE `rxe0` in the VM of `tools/test-rxe`):
//! connect, send/recv, RDMA write/read, memory window bind + use + invalidate (local and by
//! SEND_WITH_INV), reject with private data, RNR, disconnect with flush.
//!
//! They need `RDMABLK_TEST_ADDR` (an IPv4 address on the RDMA interface; the VM's is
//! 10.0.2.15). Both ends run in this process over loopback on that address.

use std::net::{IpAddr, SocketAddr};
use std::thread;
use std::time::{Duration, Instant};

use super::device_or_skip;
use crate::fabric::{
    resolve, Access, CmEvent, ConnParam, Cq, Device, FabricError, Listener, MemBuf, Mr, Mw, Pd,
    ProviderKind, Qp, QpCaps, QpInit, RecvWr, SendFlags, SendWr, Wc, WcOpcode, WcStatus, WrOp,
};

pub(super) const T: Duration = Duration::from_secs(10);
const BUF: usize = 64 * 1024;

pub(super) fn addr_or_skip(test: &str) -> Option<(Device, IpAddr)> {
    let dev = device_or_skip(test)?;
    match std::env::var("RDMABLK_TEST_ADDR") {
        Ok(a) => Some((dev, a.parse().expect("RDMABLK_TEST_ADDR is an IP address"))),
        Err(_) => {
            let required = std::env::var_os("RDMABLK_REQUIRE_RDMA").is_some_and(|v| v == "1");
            assert!(
                !required,
                "{test}: RDMABLK_REQUIRE_RDMA=1 but RDMABLK_TEST_ADDR is unset"
            );
            eprintln!("SKIP {test}: set RDMABLK_TEST_ADDR to an address of the RDMA interface");
            None
        }
    }
}

/// One side of a connection.
pub(super) struct End {
    pub _pd: Pd,
    pub cq: Cq,
    pub mr: Mr,
    pub qp: Qp,
}

pub(super) fn resources(dev: &Device) -> (Pd, Cq, Mr) {
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(256).unwrap();
    let access = Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE | Access::MW_BIND;
    let mr = pd.register(MemBuf::zeroed(BUF).unwrap(), access).unwrap();
    (pd, cq, mr)
}

pub(super) fn init<'a>(pd: &'a Pd, cq: &'a Cq) -> QpInit<'a> {
    QpInit {
        pd,
        send_cq: cq,
        recv_cq: cq,
        caps: QpCaps::default(),
        srq: None,
    }
}

/// Receives of 1 KiB each at the end of the region, wr_id = 1000 + i.
fn post_recvs(end_mr: &Mr, qp: &Qp, n: usize) {
    for i in 0..n {
        let sge = [end_mr.sge(BUF - (i + 1) * 1024, 1024)];
        qp.post_recv(&[RecvWr {
            wr_id: 1000 + i as u64,
            sgl: &sge,
        }])
        .unwrap();
    }
}

/// Polls one completion, sleeping on the CQ's channel (exercises arm + wait).
pub(super) fn next_wc(cq: &Cq) -> Wc {
    let deadline = Instant::now() + T;
    let mut wc = [Wc::default()];
    loop {
        if cq.poll(&mut wc).unwrap() == 1 {
            return wc[0];
        }
        cq.arm().unwrap();
        if cq.poll(&mut wc).unwrap() == 1 {
            return wc[0];
        }
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "no completion within {T:?}");
        cq.wait(Some(left)).unwrap();
    }
}

fn expect_wc(cq: &Cq, wr_id: u64, opcode: WcOpcode) -> Wc {
    let wc = next_wc(cq);
    assert_eq!(wc.status, WcStatus::Success, "wr {wr_id}: {wc:?}");
    assert_eq!((wc.wr_id, wc.opcode), (wr_id, opcode), "{wc:?}");
    wc
}

/// Connects a client to a server on `ip`; the server posts `recvs` receives before accepting.
fn pair(dev: &Device, ip: IpAddr, param: ConnParam, recvs: usize) -> (End, End) {
    let listener = dev.listen(SocketAddr::new(ip, 0), 8).unwrap();
    let port = listener.local_addr().port();
    assert_ne!(port, 0, "listening on port 0 reports the real port");
    let server = thread::spawn(move || {
        let req = listener
            .get_request(Some(T))
            .unwrap()
            .expect("a connect request");
        assert!(
            req.private_data().starts_with(b"hello"),
            "{:?}",
            req.private_data()
        );
        let (pd, cq, mr) = resources(&req.device());
        let qp = req.create_qp(&init(&pd, &cq)).unwrap();
        post_recvs(&mr, &qp, recvs);
        let accept = ConnParam {
            private_data: b"welcome".to_vec(),
            ..ConnParam::default()
        };
        qp.accept(&accept).unwrap();
        assert_eq!(qp.cm_event(Some(T)).unwrap(), Some(CmEvent::Established));
        End {
            _pd: pd,
            cq,
            mr,
            qp,
        }
    });
    let r = resolve(ProviderKind::Verbs, SocketAddr::new(ip, port), T).unwrap();
    let (pd, cq, mr) = resources(&r.device());
    let c = r.connect(&init(&pd, &cq), &param, T).unwrap();
    assert!(
        c.private_data.starts_with(b"welcome"),
        "{:?}",
        c.private_data
    );
    let client = End {
        _pd: pd,
        cq,
        mr,
        qp: c.qp,
    };
    (client, server.join().unwrap())
}

pub(super) fn hello() -> ConnParam {
    ConnParam {
        private_data: b"hello".to_vec(),
        ..ConnParam::default()
    }
}

#[test]
fn device_attr_reports_port_and_windows() {
    let Some(dev) = device_or_skip("device_attr_reports_port_and_windows") else {
        return;
    };
    let a = dev.attr().unwrap();
    eprintln!("{a:?}");
    assert!(a.port_active, "{} port 1 is not active", a.name);
    assert!(a.max_qp_wr > 0 && a.max_sge > 0 && a.max_cqe > 0);
    assert!(a.max_qp_rd_atom > 0 && a.max_qp_init_rd_atom > 0);
    // rxe (Linux >= 5.14) has type-2B windows.
    if a.name.starts_with("rxe") {
        assert!(a.mw_type2 && a.max_mw > 0, "{a:?}");
    }
    let again = Device::open(ProviderKind::Verbs, Some(&a.name)).unwrap();
    assert_eq!(again.name(), a.name);
}

#[test]
fn connect_send_recv_write_read_disconnect() {
    let Some((dev, ip)) = addr_or_skip("connect_send_recv_write_read_disconnect") else {
        return;
    };
    let param = ConnParam {
        initiator_depth: 4,
        responder_resources: 8,
        ..hello()
    };
    let (c, s) = pair(&dev, ip, param, 4);
    assert_eq!(c.qp.peer_addr().ip(), ip);
    assert!(c.qp.initiator_depth() >= 1 && c.qp.initiator_depth() <= 4);
    assert!(s.qp.responder_resources() >= 1 && s.qp.responder_resources() <= 4);
    eprintln!(
        "depths: client init {} resp {}, server init {} resp {}",
        c.qp.initiator_depth(),
        c.qp.responder_resources(),
        s.qp.initiator_depth(),
        s.qp.responder_resources()
    );

    // SEND -> RECV
    c.mr.write_at(0, b"ping over rxe").unwrap();
    let sge = [c.mr.sge(0, 13)];
    let send = SendWr {
        wr_id: 1,
        op: WrOp::Send,
        sgl: &sge,
        flags: SendFlags::SIGNALED,
    };
    c.qp.post_send(&[send]).unwrap();
    expect_wc(&c.cq, 1, WcOpcode::Send);
    let wc = expect_wc(&s.cq, 1000, WcOpcode::Recv);
    assert_eq!((wc.byte_len, wc.qp_num), (13, s.qp.qp_num()));
    let mut got = [0u8; 13];
    s.mr.read_at(BUF - 1024, &mut got).unwrap();
    assert_eq!(&got, b"ping over rxe");

    // RDMA WRITE (unsignalled) chained before a signalled SEND, as the target does.
    c.mr.write_at(100, &[0xAB; 512]).unwrap();
    let data = [c.mr.sge(100, 512)];
    let resp = [c.mr.sge(0, 4)];
    let chain = [
        SendWr {
            wr_id: 2,
            op: WrOp::RdmaWrite {
                remote_addr: s.mr.addr() + 4096,
                rkey: s.mr.rkey(),
            },
            sgl: &data,
            flags: SendFlags::empty(),
        },
        SendWr {
            wr_id: 3,
            op: WrOp::Send,
            sgl: &resp,
            flags: SendFlags::SIGNALED,
        },
    ];
    c.qp.post_send(&chain).unwrap();
    expect_wc(&c.cq, 3, WcOpcode::Send);
    expect_wc(&s.cq, 1001, WcOpcode::Recv);
    let mut w = [0u8; 512];
    s.mr.read_at(4096, &mut w).unwrap();
    assert!(w.iter().all(|&b| b == 0xAB));

    // RDMA READ
    s.mr.write_at(8192, b"read me back").unwrap();
    let dst = [c.mr.sge(2048, 12)];
    let read = SendWr {
        wr_id: 4,
        op: WrOp::RdmaRead {
            remote_addr: s.mr.addr() + 8192,
            rkey: s.mr.rkey(),
        },
        sgl: &dst,
        flags: SendFlags::SIGNALED,
    };
    c.qp.post_send(&[read]).unwrap();
    expect_wc(&c.cq, 4, WcOpcode::RdmaRead);
    let mut r = [0u8; 12];
    c.mr.read_at(2048, &mut r).unwrap();
    assert_eq!(&r, b"read me back");

    // Inline SEND: the payload is copied at post time (its SGE must still name the MR).
    c.mr.write_at(0, b"inl").unwrap();
    let sge = [c.mr.sge(0, 3)];
    let inline = SendWr {
        wr_id: 5,
        op: WrOp::Send,
        sgl: &sge,
        flags: SendFlags::SIGNALED | SendFlags::INLINE,
    };
    c.qp.post_send(&[inline]).unwrap();
    expect_wc(&c.cq, 5, WcOpcode::Send);
    assert_eq!(expect_wc(&s.cq, 1002, WcOpcode::Recv).byte_len, 3);

    // Disconnect: both sides hear it; the server's last receive flushes.
    // (The passive side answers the DREQ when it reads its event, which ends the active
    // side's wait: read the server's first.)
    c.qp.disconnect().unwrap();
    assert_eq!(s.qp.cm_event(Some(T)).unwrap(), Some(CmEvent::Disconnected));
    assert_eq!(c.qp.cm_event(Some(T)).unwrap(), Some(CmEvent::Disconnected));
    let wc = next_wc(&s.cq);
    assert_eq!(
        (wc.wr_id, wc.status),
        (1003, WcStatus::WrFlushErr),
        "{wc:?}"
    );
}

fn bind(qp: &Qp, cq: &Cq, mw: &Mw, mr: &Mr, wr_id: u64) {
    let before = mw.rkey();
    let wr = SendWr {
        wr_id,
        op: WrOp::BindMw {
            mw,
            mr,
            addr: mr.addr() + 16384,
            length: 4096,
            access: Access::REMOTE_READ | Access::REMOTE_WRITE,
        },
        sgl: &[],
        flags: SendFlags::SIGNALED,
    };
    qp.post_send(&[wr]).unwrap();
    assert_ne!(mw.rkey(), before, "a bind gives the window a new rkey");
    assert_eq!(mw.rkey() >> 8, before >> 8, "only the key byte changes");
    expect_wc(cq, wr_id, WcOpcode::BindMw);
}

fn write_via(c: &End, addr: u64, rkey: u32, wr_id: u64) -> Wc {
    c.mr.write_at(0, &wr_id.to_le_bytes()).unwrap();
    let sge = [c.mr.sge(0, 8)];
    let wr = SendWr {
        wr_id,
        op: WrOp::RdmaWrite {
            remote_addr: addr,
            rkey,
        },
        sgl: &sge,
        flags: SendFlags::SIGNALED,
    };
    c.qp.post_send(&[wr]).unwrap();
    next_wc(&c.cq)
}

#[test]
fn memory_window_bind_use_invalidate() {
    let Some((dev, ip)) = addr_or_skip("memory_window_bind_use_invalidate") else {
        return;
    };
    let (c, s) = pair(&dev, ip, hello(), 4);
    let pd = s.qp_pd();
    let mw = match pd.alloc_mw() {
        Ok(mw) => mw,
        Err(FabricError::Unsupported { .. }) if !dev.attr().unwrap().mw_type2 => {
            eprintln!(
                "SKIP memory_window_bind_use_invalidate: {} has no type-2 windows",
                dev.name()
            );
            return;
        }
        Err(e) => panic!("alloc_mw: {e}"),
    };
    let win = s.mr.addr() + 16384;

    // Bind, use for WRITE and READ.
    bind(&s.qp, &s.cq, &mw, &s.mr, 10);
    let wc = write_via(&c, win + 8, mw.rkey(), 20);
    assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    let mut v = [0u8; 8];
    s.mr.read_at(16384 + 8, &mut v).unwrap();
    assert_eq!(u64::from_le_bytes(v), 20);

    // The peer invalidates it with SEND_WITH_INV; the receive reports the rkey.
    let rkey = mw.rkey();
    let sge = [c.mr.sge(0, 8)];
    let inv = SendWr {
        wr_id: 21,
        op: WrOp::SendWithInv { rkey },
        sgl: &sge,
        flags: SendFlags::SIGNALED,
    };
    c.qp.post_send(&[inv]).unwrap();
    expect_wc(&c.cq, 21, WcOpcode::Send);
    let wc = expect_wc(&s.cq, 1000, WcOpcode::Recv);
    assert_eq!(wc.invalidated_rkey, Some(rkey), "{wc:?}");

    // Rebind (new rkey), use, then invalidate locally.
    bind(&s.qp, &s.cq, &mw, &s.mr, 11);
    assert_ne!(mw.rkey(), rkey);
    let wc = write_via(&c, win, mw.rkey(), 22);
    assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    let rkey = mw.rkey();
    let linv = SendWr {
        wr_id: 12,
        op: WrOp::LocalInv { rkey },
        sgl: &[],
        flags: SendFlags::SIGNALED,
    };
    s.qp.post_send(&[linv]).unwrap();
    expect_wc(&s.cq, 12, WcOpcode::LocalInv);

    // An invalidated window refuses remote access.
    let wc = write_via(&c, win, rkey, 23);
    assert_eq!(wc.status, WcStatus::RemAccessErr, "{wc:?}");
}

impl End {
    fn qp_pd(&self) -> &Pd {
        &self._pd
    }
}

#[test]
fn reject_carries_private_data() {
    let Some((dev, ip)) = addr_or_skip("reject_carries_private_data") else {
        return;
    };
    let listener: Listener = dev.listen(SocketAddr::new(ip, 0), 8).unwrap();
    let port = listener.local_addr().port();
    let server = thread::spawn(move || {
        let req = listener
            .get_request(Some(T))
            .unwrap()
            .expect("a connect request");
        let depths = (req.initiator_depth(), req.responder_resources());
        // NVMe-oF reject: recfmt 0, sts 6 (NO_RESOURCES).
        req.reject(&[0, 0, 6, 0]).unwrap();
        depths
    });
    let r = resolve(ProviderKind::Verbs, SocketAddr::new(ip, port), T).unwrap();
    let (pd, cq, _mr) = resources(&r.device());
    let param = ConnParam {
        initiator_depth: 3,
        responder_resources: 5,
        ..hello()
    };
    match r.connect(&init(&pd, &cq), &param, T) {
        Err(FabricError::Rejected { private_data, .. }) => {
            assert!(private_data.starts_with(&[0, 0, 6, 0]), "{private_data:?}");
            eprintln!(
                "reject private data arrives as {} bytes",
                private_data.len()
            );
        }
        other => panic!("expected Rejected, got {other:?}"),
    }
    let (init_depth, resp_res) = server.join().unwrap();
    assert_eq!(
        (init_depth, resp_res),
        (3, 5),
        "the request reports the peer's depths"
    );
}

#[test]
fn connect_without_listener_is_unreachable() {
    let Some((_dev, ip)) = addr_or_skip("connect_without_listener_is_unreachable") else {
        return;
    };
    // Find a free port by listening and closing.
    let port = {
        let l = _dev.listen(SocketAddr::new(ip, 0), 1).unwrap();
        l.local_addr().port()
    };
    let r = resolve(ProviderKind::Verbs, SocketAddr::new(ip, port), T).unwrap();
    let (pd, cq, _mr) = resources(&r.device());
    let e = r.connect(&init(&pd, &cq), &hello(), T).unwrap_err();
    assert!(matches!(e, FabricError::Unreachable { .. }), "{e:?}");
    eprintln!("{e}");
}

#[test]
fn send_without_receive_is_rnr_retry_exceeded() {
    let Some((dev, ip)) = addr_or_skip("send_without_receive_is_rnr_retry_exceeded") else {
        return;
    };
    let param = ConnParam {
        rnr_retry_count: 0,
        ..hello()
    };
    // The connect's rnr_retry_count goes into the CM request, which sets the *passive* QP's;
    // the accept echoes it back for the active QP, so the connecting side's sends give up at
    // once. (After that error the client QP drops packets, so the server's side is not probed.)
    let (c, s) = pair(&dev, ip, param, 0);
    let sge = [c.mr.sge(0, 8)];
    let send = SendWr {
        wr_id: 8,
        op: WrOp::Send,
        sgl: &sge,
        flags: SendFlags::SIGNALED,
    };
    c.qp.post_send(&[send]).unwrap();
    let wc = next_wc(&c.cq);
    assert_eq!(
        (wc.wr_id, wc.status),
        (8, WcStatus::RnrRetryExcErr),
        "{wc:?}"
    );
    drop(s);
}

#[test]
fn post_checks_sge_count_and_bind_sgl() {
    let Some((dev, ip)) = addr_or_skip("post_checks_sge_count_and_bind_sgl") else {
        return;
    };
    let (c, _s) = pair(&dev, ip, hello(), 1);
    let max = c.qp.caps().max_send_sge as usize;
    let sges = vec![c.mr.sge(0, 8); max + 1];
    let ok = [c.mr.sge(0, 8)];
    let wrs = [
        SendWr {
            wr_id: 1,
            op: WrOp::Send,
            sgl: &ok,
            flags: SendFlags::SIGNALED,
        },
        SendWr {
            wr_id: 2,
            op: WrOp::Send,
            sgl: &sges,
            flags: SendFlags::SIGNALED,
        },
    ];
    match c.qp.post_send(&wrs) {
        Err(FabricError::BadWr { index: 1, .. }) => {}
        other => panic!("expected BadWr at 1, got {other:?}"),
    }
    // The first one was posted and completes.
    expect_wc(&c.cq, 1, WcOpcode::Send);
    let linv = SendWr {
        wr_id: 3,
        op: WrOp::LocalInv { rkey: 1 },
        sgl: &ok,
        flags: SendFlags::empty(),
    };
    assert!(matches!(
        c.qp.post_send(&[linv]),
        Err(FabricError::BadWr { index: 0, .. })
    ));
}

#[test]
fn long_recv_lists_post_in_chunks() {
    let Some((dev, ip)) = addr_or_skip("long_recv_lists_post_in_chunks") else {
        return;
    };
    let (c, s) = pair(&dev, ip, hello(), 0);
    // More than one stack chunk of receives in one call.
    let sges: Vec<[crate::fabric::Sge; 1]> = (0..40).map(|i| [s.mr.sge(i * 64, 64)]).collect();
    let wrs: Vec<RecvWr> = sges
        .iter()
        .enumerate()
        .map(|(i, sgl)| RecvWr {
            wr_id: 500 + i as u64,
            sgl,
        })
        .collect();
    s.qp.post_recv(&wrs).unwrap();
    let sge = [c.mr.sge(0, 8)];
    let sends: Vec<SendWr> = (0..40)
        .map(|i| SendWr {
            wr_id: i,
            op: WrOp::Send,
            sgl: &sge,
            flags: if i == 39 {
                SendFlags::SIGNALED
            } else {
                SendFlags::empty()
            },
        })
        .collect();
    c.qp.post_send(&sends).unwrap();
    expect_wc(&c.cq, 39, WcOpcode::Send);
    for i in 0..40 {
        expect_wc(&s.cq, 500 + i, WcOpcode::Recv);
    }
}
