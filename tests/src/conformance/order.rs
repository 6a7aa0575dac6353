//! Completions of one queue come in the order the work requests were posted.

use rdmablk::fabric::{Access, SendFlags, SendWr, WcOpcode, WcStatus, WrOp};

use super::{case, post_recv1, recv_mr, send_mr};
use crate::check::{fail, CaseResult, OrFail};
use crate::endpoint::{check_mr, expect_wc, mr_bytes, pattern, rw_access, Endpoint, EpOpts};
use crate::harness::{Case, Side};
use crate::{ensure, ensure_eq};

pub const CASES: &[Case] = &[case!("completion_order", order_client, order_server)];

const N: usize = 96;
const SLOT: usize = 4096;

/// WR `i`: a SEND carrying `i` when `i % 3 == 0`, else an RDMA WRITE of slot `i`;
/// signalled unless `i % 4 == 3`.
fn is_send(i: usize) -> bool {
    i % 3 == 0
}

fn signaled(i: usize) -> bool {
    i % 4 != 3
}

fn order_client(side: &mut Side<'_>) -> CaseResult {
    let ep = side.connect(&EpOpts::default())?;
    let mr = ep.register(N * SLOT, Access::LOCAL_WRITE)?;
    for i in 0..N {
        mr.write_at(i * SLOT, &pattern(i as u64, SLOT))
            .or_fail("fill")?;
        mr.write_at(i * SLOT, &(i as u64).to_le_bytes())
            .or_fail("fill")?;
    }
    let remote = recv_mr(&mut side.ctl, "mr")?;
    let sgls: Vec<_> = (0..N).map(|i| [mr.sge(i * SLOT, SLOT as u32)]).collect();
    let wrs: Vec<_> = (0..N)
        .map(|i| SendWr {
            wr_id: i as u64,
            op: if is_send(i) {
                WrOp::Send
            } else {
                WrOp::RdmaWrite {
                    remote_addr: remote.addr + (i * SLOT) as u64,
                    rkey: remote.rkey,
                }
            },
            sgl: &sgls[i],
            flags: if signaled(i) {
                SendFlags::SIGNALED
            } else {
                SendFlags::empty()
            },
        })
        .collect();
    // Post in chunks well below the queue depth (128), waiting for completions in between.
    for chunk in wrs.chunks(32) {
        ep.qp
            .post_send(chunk)
            .or_fail("post_send of a chunk of 32")?;
        for wr in chunk
            .iter()
            .filter(|w| w.flags.contains(SendFlags::SIGNALED))
        {
            let wc = expect_wc(
                &ep.send_cq,
                "in-order send completion",
                wr.wr_id,
                WcStatus::Success,
            )?;
            let op = if is_send(wr.wr_id as usize) {
                WcOpcode::Send
            } else {
                WcOpcode::RdmaWrite
            };
            ensure_eq!(wc.opcode, op, "opcode of wr {}", wr.wr_id);
        }
    }
    side.ctl.send("posted", &[])?;
    side.ctl.recv("checked").map(drop)
}

fn order_server(side: &mut Side<'_>) -> CaseResult {
    let ep = Endpoint::create(side.request()?, &EpOpts::default())?;
    let mr = ep.register(N * SLOT, rw_access())?;
    let rmr = ep.register(N * SLOT, Access::LOCAL_WRITE)?;
    let sends: Vec<usize> = (0..N).filter(|&i| is_send(i)).collect();
    for k in 0..sends.len() {
        post_recv1(&ep.qp, 1000 + k as u64, &[rmr.sge(k * SLOT, SLOT as u32)])?;
    }
    ep.accept(&Default::default())?;
    send_mr(&mut side.ctl, "mr", &mr)?;
    for (k, &i) in sends.iter().enumerate() {
        let wc = expect_wc(
            &ep.recv_cq,
            "in-order receive completion",
            1000 + k as u64,
            WcStatus::Success,
        )?;
        ensure_eq!(wc.byte_len as usize, SLOT, "byte_len of receive {k}");
        let tag = u64::from_le_bytes(mr_bytes(&rmr, k * SLOT, 8)?.try_into().expect("8 bytes"));
        if tag != i as u64 {
            return Err(fail(format!(
                "receive {k} holds SEND {tag}, expected SEND {i} (sends delivered out of order)"
            )));
        }
        // Every WRITE posted before this SEND has landed.
        for w in (0..i).filter(|&w| !is_send(w)) {
            let mut exp = pattern(w as u64, SLOT);
            exp[..8].copy_from_slice(&(w as u64).to_le_bytes());
            check_mr(
                &format!("WRITE {w}, posted before SEND {i}"),
                &mr,
                w * SLOT,
                &exp,
            )?;
        }
    }
    side.ctl.recv("posted")?;
    ensure!(sends.len() == N.div_ceil(3), "internal: send count");
    side.ctl.send("checked", &[])
}
