//! Provider threads end with their objects, and a QP works across processes.

use super::*;

/// Names of this process's threads.
fn thread_names() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("comm")).ok())
        .map(|s| s.trim().to_string())
        .collect()
}

fn wait_gone(names: &[String]) {
    let deadline = Instant::now() + T;
    loop {
        let live = thread_names();
        let left: Vec<_> = names.iter().filter(|n| live.contains(n)).collect();
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "threads still running: {left:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn threads_end_when_objects_are_dropped() {
    let l = listener();
    let port = l.local_addr().port();
    let (a, p) = {
        let addr = l.local_addr();
        let t = std::thread::spawn(move || connect(addr, ConnParam::default(), QpCaps::default()));
        let pd = dev().alloc_pd().unwrap();
        let cq = dev().create_cq(64).unwrap();
        let qp = accept(&l, &pd, &cq, &ConnParam::default());
        (t.join().unwrap().unwrap().0, Side { pd, cq, qp })
    };
    let mut names = vec![format!("soft-lsn-{port}")];
    for q in [a.qp.qp_num(), p.qp.qp_num()] {
        names.push(format!("soft-rx-{q}"));
        names.push(format!("soft-tx-{q}"));
    }
    // A thread names itself once it runs: wait for that.
    let deadline = Instant::now() + T;
    while !names.iter().all(|n| thread_names().contains(n)) {
        assert!(
            Instant::now() < deadline,
            "{names:?} not all in {:?}",
            thread_names()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    // Outstanding work at drop time must not keep anything alive.
    let m = a.mr(64, Access::LOCAL_WRITE);
    a.qp.post_send(&[sw(1, WrOp::Send, &[m.sge(0, 8)])])
        .unwrap(); // RNR forever
    drop(a);
    drop(p);
    drop(l);
    wait_gone(&names);
}

const CHILD_ADDR: &str = "RDMABLK_SOFT_TEST_PEER";

/// The other process of `works_across_processes` (does nothing when run on its own).
#[test]
#[ignore = "child process of works_across_processes"]
fn cross_process_child() {
    let Ok(addr) = std::env::var(CHILD_ADDR) else {
        return;
    };
    let (a, pdata) = connect(
        addr.parse().unwrap(),
        ConnParam::default(),
        QpCaps::default(),
    )
    .unwrap();
    // The parent's accept data names a region to write and read back.
    let raddr = u64::from_le_bytes(pdata[0..8].try_into().unwrap());
    let rkey = u32::from_le_bytes(pdata[8..12].try_into().unwrap());
    let m = a.mr(4096, Access::LOCAL_WRITE);
    m.write_at(0, &pattern(4096, 77)).unwrap();
    let w = WrOp::RdmaWrite {
        remote_addr: raddr,
        rkey,
    };
    a.qp.post_send(&[
        sw(1, w, &[m.sge(0, 4096)]),
        sw(2, WrOp::Send, &[m.sge(0, 16)]),
    ])
    .unwrap();
    assert_eq!(wc(&a.cq).status, WcStatus::Success);
    assert_eq!(wc(&a.cq).status, WcStatus::Success);
    assert_eq!(a.qp.cm_event(Some(T)).unwrap(), Some(CmEvent::Disconnected));
}

#[test]
fn works_across_processes() {
    let l = listener();
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "fabric::soft::tests::lifecycle::cross_process_child",
            "--ignored",
        ])
        .env(CHILD_ADDR, l.local_addr().to_string())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pd = dev().alloc_pd().unwrap();
    let cq = dev().create_cq(64).unwrap();
    let remote = pd.register(MemBuf::zeroed(4096).unwrap(), RW).unwrap();
    let rbuf = pd
        .register(MemBuf::zeroed(64).unwrap(), Access::LOCAL_WRITE)
        .unwrap();
    let req = l.get_request(Some(T)).unwrap().expect("child connects");
    let qp = req.create_qp(&init(&pd, &cq, QpCaps::default())).unwrap();
    qp.post_recv(&[RecvWr {
        wr_id: 1,
        sgl: &[rbuf.sge(0, 64)],
    }])
    .unwrap();
    let mut pdata = remote.addr().to_le_bytes().to_vec();
    pdata.extend_from_slice(&remote.rkey().to_le_bytes());
    qp.accept(&ConnParam {
        private_data: pdata,
        ..ConnParam::default()
    })
    .unwrap();
    assert_eq!(wc(&cq).byte_len, 16); // the SEND follows the WRITE: the data is there
    let mut got = vec![0; 4096];
    remote.read_at(0, &mut got).unwrap();
    assert_eq!(got, pattern(4096, 77));
    qp.disconnect().unwrap();
    let out = child.wait_with_output().unwrap();
    let log = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child process failed:\n{log}");
}
