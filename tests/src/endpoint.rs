//! One end of a test connection (device, PD, CQs and a connected QP) and the helpers every case
//! uses on it: waiting for completions with a timeout, data patterns, memory checks.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rdmablk::fabric::{
    self, Access, ConnParam, ConnRequest, Cq, Device, FabricError, MemBuf, Mr, Pd, ProviderKind,
    Qp, QpCaps, QpInit, Wc, WcStatus,
};

use crate::check::{fail, CaseResult, OrFail};

/// How long any single fabric operation (a connect, one completion) may take before the case
/// fails. Generous: the soft provider runs on a loaded 2-core CI machine, rxe inside qemu.
pub const OP_TIMEOUT: Duration = Duration::from_secs(10);

/// What an endpoint is created with. Shared objects (`pd`, CQs) are reused when given.
#[derive(Clone, Debug)]
pub struct EpOpts {
    pub caps: QpCaps,
    /// Connect (active side) or accept (passive side) parameters.
    pub param: ConnParam,
    pub pd: Option<Pd>,
    pub send_cq: Option<Cq>,
    pub recv_cq: Option<Cq>,
    /// Depth of the CQs created when none is given.
    pub cq_depth: u32,
}

impl Default for EpOpts {
    fn default() -> Self {
        EpOpts {
            caps: QpCaps::default(),
            param: ConnParam::default(),
            pd: None,
            send_cq: None,
            recv_cq: None,
            cq_depth: 256,
        }
    }
}

impl EpOpts {
    /// Default options with connect/accept private data.
    pub fn with_private_data(data: &[u8]) -> Self {
        let mut o = EpOpts::default();
        o.param.private_data = data.to_vec();
        o
    }
}

/// One end of a connection. Fields are public: cases post on `qp` and poll the CQs directly.
#[derive(Debug)]
pub struct Endpoint {
    pub device: Device,
    pub pd: Pd,
    pub send_cq: Cq,
    pub recv_cq: Cq,
    pub qp: Qp,
    /// Active side: the accept private data the peer sent.
    pub peer_private_data: Vec<u8>,
}

fn objects(device: &Device, opts: &EpOpts) -> Result<(Pd, Cq, Cq), FabricError> {
    let pd = match &opts.pd {
        Some(pd) => pd.clone(),
        None => device.alloc_pd()?,
    };
    let send_cq = match &opts.send_cq {
        Some(cq) => cq.clone(),
        None => device.create_cq(opts.cq_depth)?,
    };
    let recv_cq = match &opts.recv_cq {
        Some(cq) => cq.clone(),
        None => device.create_cq(opts.cq_depth)?,
    };
    Ok((pd, send_cq, recv_cq))
}

impl Endpoint {
    /// Active side: resolves `addr` and connects, returning the fabric error unchanged (for the
    /// cases that expect a reject).
    pub fn try_connect(
        kind: ProviderKind,
        addr: SocketAddr,
        opts: &EpOpts,
    ) -> Result<Endpoint, FabricError> {
        let resolved = fabric::resolve(kind, addr, OP_TIMEOUT)?;
        let device = resolved.device();
        let (pd, send_cq, recv_cq) = objects(&device, opts)?;
        let init = QpInit {
            pd: &pd,
            send_cq: &send_cq,
            recv_cq: &recv_cq,
            caps: opts.caps,
            srq: None,
        };
        let connected = resolved.connect(&init, &opts.param, OP_TIMEOUT)?;
        Ok(Endpoint {
            device,
            pd,
            send_cq,
            recv_cq,
            qp: connected.qp,
            peer_private_data: connected.private_data,
        })
    }

    /// Active side, failing the case with the address on error.
    pub fn connect(kind: ProviderKind, addr: SocketAddr, opts: &EpOpts) -> CaseResult<Endpoint> {
        Self::try_connect(kind, addr, opts).or_fail(&format!("connect to {addr}"))
    }

    /// Passive side: creates the QP for `req` without accepting yet (post receives first, then
    /// [`Endpoint::accept`]).
    pub fn create(req: ConnRequest, opts: &EpOpts) -> CaseResult<Endpoint> {
        let device = req.device();
        let (pd, send_cq, recv_cq) = objects(&device, opts).or_fail("create PD/CQs")?;
        let init = QpInit {
            pd: &pd,
            send_cq: &send_cq,
            recv_cq: &recv_cq,
            caps: opts.caps,
            srq: None,
        };
        let qp = req.create_qp(&init).or_fail("ConnRequest::create_qp")?;
        Ok(Endpoint {
            device,
            pd,
            send_cq,
            recv_cq,
            qp,
            peer_private_data: Vec::new(),
        })
    }

    /// Passive side: accepts with `param`.
    pub fn accept(&self, param: &ConnParam) -> CaseResult<()> {
        self.qp.accept(param).or_fail("Qp::accept")
    }

    /// Registers a zeroed buffer of `len` bytes in this endpoint's PD.
    pub fn register(&self, len: usize, access: Access) -> CaseResult<Mr> {
        register(&self.pd, len, access)
    }
}

/// Registers a zeroed buffer of `len` bytes in `pd`.
pub fn register(pd: &Pd, len: usize, access: Access) -> CaseResult<Mr> {
    let buf = MemBuf::zeroed(len).or_fail(&format!("MemBuf of {len} bytes"))?;
    pd.register(buf, access)
        .or_fail(&format!("register {len} bytes with {access:?}"))
}

/// Every access flag a plain data buffer needs.
pub fn rw_access() -> Access {
    Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ
}

/// Polls one completion, if there is one.
pub fn poll_one(cq: &Cq) -> CaseResult<Option<Wc>> {
    let mut wc = [Wc::default()];
    match cq.poll(&mut wc).or_fail("Cq::poll")? {
        0 => Ok(None),
        1 => Ok(Some(wc[0])),
        n => Err(fail(format!("Cq::poll returned {n} for a 1-entry array"))),
    }
}

/// Sleeps a little longer each round: polls hot at first, then backs off to 1 ms so a waiting
/// case does not steal a core from the provider's threads.
struct Backoff(u32);

impl Backoff {
    fn snooze(&mut self) {
        self.0 += 1;
        if self.0 < 50 {
            std::thread::yield_now();
        } else {
            let us = (self.0 as u64 * 10).min(1_000);
            std::thread::sleep(Duration::from_micros(us));
        }
    }
}

/// Waits up to `timeout` for one completion; a timeout fails the case naming `what`.
pub fn wait_wc_for(cq: &Cq, timeout: Duration, what: &str) -> CaseResult<Wc> {
    let deadline = Instant::now() + timeout;
    let mut backoff = Backoff(0);
    loop {
        if let Some(wc) = poll_one(cq)? {
            return Ok(wc);
        }
        if Instant::now() >= deadline {
            return Err(fail(format!(
                "no completion for {what} within {} ms",
                timeout.as_millis()
            )));
        }
        backoff.snooze();
    }
}

/// Waits up to `timeout` for one completion.
pub fn wait_wc(cq: &Cq, timeout: Duration) -> CaseResult<Wc> {
    wait_wc_for(cq, timeout, "a work request")
}

/// Waits for the next completion and checks its wr_id and status (and, on success, that
/// `opcode` matches when given).
pub fn expect_wc(cq: &Cq, what: &str, wr_id: u64, status: WcStatus) -> CaseResult<Wc> {
    let wc = wait_wc_for(cq, OP_TIMEOUT, what)?;
    if wc.wr_id != wr_id || wc.status != status {
        return Err(fail(format!(
            "{what}: expected completion wr_id {wr_id} with status {status:?}, got wr_id {} \
             with status {:?} ({}; vendor_err {:#x})",
            wc.wr_id, wc.status, wc.status, wc.vendor_err
        )));
    }
    Ok(wc)
}

/// Checks that no completion arrives within `quiet`.
pub fn expect_no_wc(cq: &Cq, quiet: Duration, what: &str) -> CaseResult<()> {
    let deadline = Instant::now() + quiet;
    let mut backoff = Backoff(0);
    while Instant::now() < deadline {
        if let Some(wc) = poll_one(cq)? {
            return Err(fail(format!("{what}: expected no completion, got {wc:?}")));
        }
        backoff.snooze();
    }
    Ok(())
}

pub use rdmablk_testkit::pattern;

/// Reads `len` bytes of `mr` at `offset`.
pub fn mr_bytes(mr: &Mr, offset: usize, len: usize) -> CaseResult<Vec<u8>> {
    let mut v = vec![0u8; len];
    mr.read_at(offset, &mut v)
        .or_fail(&format!("Mr::read_at {offset}+{len}"))?;
    Ok(v)
}

/// Compares bytes, reporting the first difference.
pub fn check_bytes(what: &str, got: &[u8], expected: &[u8]) -> CaseResult<()> {
    if got.len() != expected.len() {
        return Err(fail(format!(
            "{what}: expected {} bytes, got {}",
            expected.len(),
            got.len()
        )));
    }
    if let Some(i) = got.iter().zip(expected).position(|(a, b)| a != b) {
        return Err(fail(format!(
            "{what}: data differs at byte {i} of {} (expected {:#04x}, got {:#04x})",
            expected.len(),
            expected[i],
            got[i]
        )));
    }
    Ok(())
}

/// Checks that `mr[offset..offset + expected.len()]` holds `expected`.
pub fn check_mr(what: &str, mr: &Mr, offset: usize, expected: &[u8]) -> CaseResult<()> {
    check_bytes(what, &mr_bytes(mr, offset, expected.len())?, expected)
}
