//! Many QPs at once: 64 connections sharing one PD and one pair of CQs on each side, with a
//! request and a reply on each, demultiplexed by `Wc::qp_num`.

use std::collections::HashMap;

use rdmablk::fabric::{Access, SendFlags, WcStatus, WrOp};

use super::{case, post1, post_recv1};
use crate::check::{fail, CaseResult, OrFail};
use crate::endpoint::{mr_bytes, wait_wc_for, Endpoint, EpOpts, OP_TIMEOUT};
use crate::ensure;
use crate::harness::{Case, Side};

pub const CASES: &[Case] = &[case!("scale_64_qps", scale_client, scale_server)];

const QPS: usize = 64;
const SLOT: usize = 64;
const REPLY: u64 = 1_000_000;

/// One PD and one send and one receive CQ for all connections of a side.
fn shared(side: &Side<'_>) -> CaseResult<EpOpts> {
    let dev = side.test_device()?;
    Ok(EpOpts {
        pd: Some(dev.alloc_pd().or_fail("alloc_pd")?),
        send_cq: Some(dev.create_cq(4 * QPS as u32).or_fail("create_cq")?),
        recv_cq: Some(dev.create_cq(4 * QPS as u32).or_fail("create_cq")?),
        ..EpOpts::default()
    })
}

/// Waits for `QPS` successful completions on a shared CQ; returns each one's connection index
/// (found from qp_num) and wr_id, checking that wr_id names the same connection.
fn collect(
    cq: &rdmablk::fabric::Cq,
    index_of: &HashMap<u32, usize>,
    what: &str,
) -> CaseResult<Vec<usize>> {
    let mut seen = [false; QPS];
    let mut order = Vec::new();
    for _ in 0..QPS {
        let wc = wait_wc_for(cq, OP_TIMEOUT, what)?;
        ensure!(wc.status == WcStatus::Success, "{what}: {wc:?}");
        let i = *index_of.get(&wc.qp_num).ok_or_else(|| {
            fail(format!(
                "{what}: completion for unknown qp_num {}",
                wc.qp_num
            ))
        })?;
        ensure!(
            wc.wr_id == i as u64,
            "{what}: wr_id {} on connection {i}'s QP",
            wc.wr_id
        );
        ensure!(!seen[i], "{what}: second completion on connection {i}");
        seen[i] = true;
        order.push(i);
    }
    Ok(order)
}

fn slot_value(mr: &rdmablk::fabric::Mr, i: usize) -> CaseResult<u64> {
    let b = mr_bytes(mr, i * SLOT, 8)?;
    Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
}

fn scale_client(side: &mut Side<'_>) -> CaseResult {
    let opts = shared(side)?;
    let mut eps = Vec::with_capacity(QPS);
    for i in 0..QPS {
        let ep = side
            .connect(&opts)
            .map_err(|e| fail(format!("connection {i}: {e}")))?;
        eps.push(ep);
    }
    let index_of: HashMap<u32, usize> = eps
        .iter()
        .enumerate()
        .map(|(i, e)| (e.qp.qp_num(), i))
        .collect();
    ensure!(
        index_of.len() == QPS,
        "64 QPs do not have 64 distinct qp_nums"
    );
    let mr = eps[0].register(2 * QPS * SLOT, Access::LOCAL_WRITE)?;
    for (i, ep) in eps.iter().enumerate() {
        let rx = (QPS + i) * SLOT;
        post_recv1(&ep.qp, i as u64, &[mr.sge(rx, SLOT as u32)])?;
        mr.write_at(i * SLOT, &(i as u64).to_le_bytes())
            .or_fail("fill")?;
        post1(
            &ep.qp,
            i as u64,
            WrOp::Send,
            &[mr.sge(i * SLOT, 8)],
            SendFlags::SIGNALED,
        )?;
    }
    collect(
        opts.send_cq.as_ref().expect("shared"),
        &index_of,
        "request sends",
    )?;
    collect(
        opts.recv_cq.as_ref().expect("shared"),
        &index_of,
        "reply receives",
    )?;
    for i in 0..QPS {
        let v = slot_value(&mr, QPS + i)?;
        ensure!(
            v == REPLY + i as u64,
            "connection {i} got reply {v}, expected {}",
            REPLY + i as u64
        );
    }
    side.ctl.barrier("done")
}

fn scale_server(side: &mut Side<'_>) -> CaseResult {
    let opts = shared(side)?;
    let pd = opts.pd.clone().expect("shared");
    let mr = crate::endpoint::register(&pd, 2 * QPS * SLOT, Access::LOCAL_WRITE)?;
    let mut eps: Vec<Endpoint> = Vec::with_capacity(QPS);
    for i in 0..QPS {
        let ep = Endpoint::create(side.request()?, &opts)?;
        post_recv1(&ep.qp, i as u64, &[mr.sge(i * SLOT, SLOT as u32)])?;
        ep.accept(&opts.param)?;
        eps.push(ep);
    }
    let index_of: HashMap<u32, usize> = eps
        .iter()
        .enumerate()
        .map(|(i, e)| (e.qp.qp_num(), i))
        .collect();
    ensure!(
        index_of.len() == QPS,
        "64 QPs do not have 64 distinct qp_nums"
    );
    let recv_cq = opts.recv_cq.as_ref().expect("shared");
    for (n, i) in collect(recv_cq, &index_of, "request receives")?
        .into_iter()
        .enumerate()
    {
        let v = slot_value(&mr, i)?;
        // Connections are made one after another, so accept order is connect order.
        ensure!(
            v == i as u64,
            "connection {i} received request {v} (completion {n})"
        );
        let tx = (QPS + i) * SLOT;
        mr.write_at(tx, &(REPLY + i as u64).to_le_bytes())
            .or_fail("fill")?;
        post1(
            &eps[i].qp,
            i as u64,
            WrOp::Send,
            &[mr.sge(tx, 8)],
            SendFlags::SIGNALED,
        )?;
    }
    collect(
        opts.send_cq.as_ref().expect("shared"),
        &index_of,
        "reply sends",
    )?;
    side.ctl.barrier("done")
}
