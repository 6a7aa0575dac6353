//! Runs the cases: the client side ([`run`]) and the server peer ([`serve`]), in one process
//! (the server on a thread) or in two.

use std::net::SocketAddr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rdmablk::fabric::{ConnRequest, Device, FabricError, Listener, ProviderKind};

use crate::check::{fail, CaseError, CaseResult};
use crate::conformance::cases;
use crate::endpoint::{Endpoint, EpOpts, OP_TIMEOUT};
use crate::peer::{Ctl, Hello, Outcome};

/// A client case half that runs longer than this is reported as hung and the suite stops.
const CASE_WATCHDOG: Duration = Duration::from_secs(120);
/// How long a side waits for the peer's outcome after finishing its own half.
const FINISH_TIMEOUT: Duration = Duration::from_secs(40);

/// Where the server half of each case runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A server thread in this process, listening on `Env::listen_addr`.
    InProcess,
    /// A server started with `rdmablk-conformance --serve`, at `Env::listen_addr`.
    Connect {
        /// Ask the server to exit after the run.
        shutdown_server: bool,
    },
}

/// Where and how the suite runs.
#[derive(Clone, Debug)]
pub struct Env {
    pub kind: ProviderKind,
    /// In-process: the address to listen on (port 0 picks one). Connect: the server's address.
    pub listen_addr: SocketAddr,
    pub mode: Mode,
}

/// One half of a case.
pub type HalfFn = fn(&mut Side<'_>) -> CaseResult;

/// A named conformance case: its client half and its server half.
#[derive(Clone, Copy)]
pub struct Case {
    pub name: &'static str,
    pub client: HalfFn,
    pub server: HalfFn,
}

/// A half that does nothing on its side (the other half does the checking).
pub fn idle(_side: &mut Side<'_>) -> CaseResult {
    Ok(())
}

/// What a case half gets: the control channel and the means to open test connections.
pub struct Side<'a> {
    pub kind: ProviderKind,
    pub ctl: Ctl,
    server_addr: SocketAddr,
    listener: Option<&'a Listener>,
}

impl Side<'_> {
    /// Whether this is the client half (the server half has the listener).
    pub fn is_client(&self) -> bool {
        self.listener.is_none()
    }

    /// Client: opens a test connection to the server half (which calls [`Side::request`]).
    pub fn connect(&mut self, opts: &EpOpts) -> CaseResult<Endpoint> {
        Endpoint::connect(self.kind, self.server_addr, opts)
    }

    /// Client: as [`Side::connect`], returning the fabric error unchanged.
    pub fn try_connect(&mut self, opts: &EpOpts) -> Result<Endpoint, FabricError> {
        Endpoint::try_connect(self.kind, self.server_addr, opts)
    }

    /// The device test connections of this side use: on the client the one a resolve of the
    /// server's address gives (where the API says to create objects shared by connections),
    /// on the server the listener's.
    pub fn test_device(&self) -> CaseResult<Device> {
        if self.is_client() {
            let r = rdmablk::fabric::resolve(self.kind, self.server_addr, OP_TIMEOUT)
                .map_err(|e| fail(format!("resolve {}: {e}", self.server_addr)))?;
            Ok(r.device())
        } else {
            Ok(self.ctl.ep.device.clone())
        }
    }

    /// Server: the next test connection request, giving up early if the client half failed.
    pub fn request(&mut self) -> CaseResult<ConnRequest> {
        let listener = self
            .listener
            .ok_or_else(|| fail("Side::request called on the client side"))?;
        let deadline = Instant::now() + OP_TIMEOUT;
        loop {
            let slice = Some(Duration::from_millis(50));
            if let Some(req) = listener
                .get_request(slice)
                .map_err(|e| fail(format!("Listener::get_request: {e}")))?
            {
                return Ok(req);
            }
            self.ctl.check_peer("a test connection request")?;
            if Instant::now() >= deadline {
                return Err(fail(format!(
                    "no test connection request within {} ms",
                    OP_TIMEOUT.as_millis()
                )));
            }
        }
    }

    /// Server: takes the next request and accepts it with `opts.param`.
    pub fn accept(&mut self, opts: &EpOpts) -> CaseResult<Endpoint> {
        let ep = Endpoint::create(self.request()?, opts)?;
        ep.accept(&opts.param)?;
        Ok(ep)
    }

    /// Skips the case unless the device of this side has type-2 memory windows.
    pub fn require_mw(&self) -> CaseResult<()> {
        let dev = &self.ctl.ep.device;
        let attr = dev.attr().map_err(|e| fail(format!("Device::attr: {e}")))?;
        if !attr.mw_type2 {
            return Err(CaseError::Skip(format!(
                "device {} has no type-2 memory windows (attr.mw_type2 = false)",
                attr.name
            )));
        }
        Ok(())
    }
}

fn run_half(half: HalfFn, side: &mut Side<'_>) -> CaseResult {
    match catch_unwind(AssertUnwindSafe(|| half(side))) {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "non-string panic".into());
            Err(fail(format!("panicked: {msg}")))
        }
    }
}

/// Joins the two halves' outcomes into the case's.
fn combine(mine: CaseResult, peer: Result<Outcome, String>) -> Outcome {
    let peer = peer.unwrap_or_else(Outcome::Fail);
    match (mine, peer) {
        (Err(CaseError::Fail(c)), Outcome::Fail(s)) if !s.starts_with("(after the peer)") => {
            Outcome::Fail(format!("client: {c}; server: {s}"))
        }
        (Err(CaseError::Fail(c)), _) => Outcome::Fail(format!("client: {c}")),
        (_, Outcome::Fail(s)) => Outcome::Fail(format!("server: {s}")),
        (Err(CaseError::PeerFailed(s)), _) => Outcome::Fail(format!("server: {s}")),
        (Err(CaseError::Skip(s)), _) | (Ok(()), Outcome::Skip(s)) => Outcome::Skip(s),
        (Ok(()), Outcome::Pass) => Outcome::Pass,
    }
}

fn ctl_opts(hello: &Hello) -> EpOpts {
    EpOpts::with_private_data(&hello.encode())
}

/// The client side of one case: control connection, client half, outcome exchange.
fn run_client_case(kind: ProviderKind, server: SocketAddr, case: Case) -> Outcome {
    let hello = Hello::Case(case.name.to_string());
    let ep = match Endpoint::try_connect(kind, server, &ctl_opts(&hello)) {
        Ok(ep) => ep,
        Err(FabricError::Rejected { private_data, .. }) => {
            return Outcome::Fail(format!(
                "server refused the case: {}",
                String::from_utf8_lossy(&private_data).trim_end_matches('\0')
            ))
        }
        Err(e) => return Outcome::Fail(format!("control connection to {server}: {e}")),
    };
    let mut ctl = match Ctl::new(ep) {
        Ok(c) => c,
        Err(e) => return Outcome::Fail(format!("control connection setup: {e}")),
    };
    if let Err(e) = ctl.send("hello", &[]) {
        return Outcome::Fail(format!("control connection: {e}"));
    }
    let mut side = Side {
        kind,
        ctl,
        server_addr: server,
        listener: None,
    };
    let mine = run_half(case.client, &mut side);
    let peer = side
        .ctl
        .finish(&Outcome::from_result(&mine), FINISH_TIMEOUT);
    combine(mine, peer)
}

/// The server side of one case, for a request whose hello named it.
fn serve_case(kind: ProviderKind, listener: &Listener, req: ConnRequest, case: Case) -> Outcome {
    let setup = || -> CaseResult<Ctl> {
        let opts = EpOpts::default();
        let ctl = Ctl::new(Endpoint::create(req, &opts)?)?;
        ctl.ep.accept(&opts.param)?;
        Ok(ctl)
    };
    let mut ctl = match setup() {
        Ok(c) => c,
        Err(e) => return Outcome::Fail(format!("control connection setup: {e}")),
    };
    if let Err(e) = ctl.recv("hello") {
        // Tell the client why, if the channel still carries it, rather than leave it a flushed
        // receive to report.
        let outcome = Outcome::Fail(format!("control connection: {e}"));
        let _ = ctl.finish(&outcome, FINISH_TIMEOUT);
        return outcome;
    }
    let mut side = Side {
        kind,
        ctl,
        server_addr: listener.local_addr(),
        listener: Some(listener),
    };
    let mine = run_half(case.server, &mut side);
    let outcome = Outcome::from_result(&mine);
    // The client reports the case; a missing client outcome only matters to the client.
    let _ = side.ctl.finish(&outcome, FINISH_TIMEOUT);
    outcome
}

/// Runs the server peer on `addr` until a client sends the quit hello. `ready` gets the bound
/// address (with the real port) once listening. Failures of server halves are printed to
/// stderr when `log` is set (the client reports them too).
pub fn serve(
    kind: ProviderKind,
    addr: SocketAddr,
    log: bool,
    ready: impl FnOnce(SocketAddr),
) -> Result<(), String> {
    let device = Device::open_for_addr(kind, addr.ip())
        .map_err(|e| format!("open the {kind} device for {}: {e}", addr.ip()))?;
    let listener = device
        .listen(addr, 128)
        .map_err(|e| format!("listen on {addr}: {e}"))?;
    ready(listener.local_addr());
    let all = cases();
    loop {
        let req = match listener.get_request(Some(Duration::from_secs(1))) {
            Ok(Some(r)) => r,
            Ok(None) => continue,
            Err(e) => return Err(format!("Listener::get_request: {e}")),
        };
        match Hello::decode(req.private_data()) {
            Some(Hello::Quit) => {
                let _ = req.reject(b"bye");
                return Ok(());
            }
            Some(Hello::Case(name)) => match all.iter().find(|c| c.name == name) {
                Some(case) => {
                    let started = Instant::now();
                    let o = serve_case(kind, &listener, req, *case);
                    if log {
                        let ms = started.elapsed().as_millis();
                        match o {
                            Outcome::Fail(s) => eprintln!("server: FAILED {name} ({ms} ms) {s}"),
                            Outcome::Skip(s) => eprintln!("server: skipped {name} ({ms} ms) {s}"),
                            Outcome::Pass => {}
                        }
                    }
                }
                None => {
                    let _ = req.reject(format!("unknown case {name}").as_bytes());
                }
            },
            None => {
                let _ = req.reject(b"not a conformance control connection");
            }
        }
    }
}

/// The result of one case.
#[derive(Clone, Debug)]
pub struct CaseReport {
    pub name: &'static str,
    pub outcome: Outcome,
    pub elapsed_ms: u128,
}

/// The results of a run.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub cases: Vec<CaseReport>,
}

impl Report {
    fn count(&self, f: impl Fn(&Outcome) -> bool) -> usize {
        self.cases.iter().filter(|c| f(&c.outcome)).count()
    }

    pub fn passed(&self) -> usize {
        self.count(|o| *o == Outcome::Pass)
    }

    pub fn failed(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Fail(_)))
    }

    pub fn skipped(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Skip(_)))
    }

    /// `N passed, N failed, N skipped` (CI parses this line).
    pub fn summary(&self) -> String {
        format!(
            "{} passed, {} failed, {} skipped",
            self.passed(),
            self.failed(),
            self.skipped()
        )
    }

    /// True when nothing failed and at least one case ran and passed.
    pub fn success(&self) -> bool {
        self.failed() == 0 && self.passed() > 0
    }
}

/// The cases whose name contains `filter` (all with `None`).
pub fn selected(filter: Option<&str>) -> Vec<Case> {
    cases()
        .into_iter()
        .filter(|c| filter.map_or(true, |f| c.name.contains(f)))
        .collect()
}

fn print_line(r: &CaseReport) {
    let (word, reason) = match &r.outcome {
        Outcome::Pass => ("ok", String::new()),
        Outcome::Fail(s) => ("FAILED", format!(" {s}")),
        Outcome::Skip(s) => ("skipped", format!(" {s}")),
    };
    println!("{word} {} ({} ms){reason}", r.name, r.elapsed_ms);
}

/// Starts the in-process server thread; returns its address and a receiver of its end.
fn start_server(
    kind: ProviderKind,
    addr: SocketAddr,
) -> Result<(SocketAddr, mpsc::Receiver<Result<(), String>>), String> {
    let (addr_tx, addr_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("conformance-server".into())
        .spawn(move || {
            let r = serve(kind, addr, false, |a| {
                let _ = addr_tx.send(a);
            });
            let _ = done_tx.send(r);
        })
        .map_err(|e| format!("spawn the server thread: {e}"))?;
    match addr_rx.recv_timeout(OP_TIMEOUT) {
        Ok(a) => Ok((a, done_rx)),
        Err(_) => Err(match done_rx.try_recv() {
            Ok(Err(e)) => format!("in-process server did not start: {e}"),
            _ => "in-process server did not start listening in time".into(),
        }),
    }
}

/// Asks the server to exit (the quit hello; the server answers with a reject).
fn stop_server(kind: ProviderKind, server: SocketAddr) {
    match Endpoint::try_connect(kind, server, &ctl_opts(&Hello::Quit)) {
        Err(FabricError::Rejected { .. }) => {}
        Err(e) => eprintln!("warning: asking the server to quit: {e}"),
        Ok(_) => eprintln!("warning: the server accepted the quit hello"),
    }
}

fn all_failed(cases: &[Case], why: &str) -> Report {
    let report = Report {
        cases: cases
            .iter()
            .map(|c| CaseReport {
                name: c.name,
                outcome: Outcome::Fail(why.to_string()),
                elapsed_ms: 0,
            })
            .collect(),
    };
    report.cases.iter().for_each(print_line);
    report
}

/// Runs the cases matching `filter`, printing one line per case and the summary line.
pub fn run(env: &Env, filter: Option<&str>) -> Report {
    let cases = selected(filter);
    let (server, server_done) = match env.mode {
        Mode::InProcess => match start_server(env.kind, env.listen_addr) {
            Ok((a, done)) => (a, Some(done)),
            Err(e) => {
                let r = all_failed(&cases, &e);
                println!("{}", r.summary());
                return r;
            }
        },
        Mode::Connect { .. } => (env.listen_addr, None),
    };
    let mut report = Report::default();
    let mut hung: Option<&'static str> = None;
    for case in &cases {
        let started = Instant::now();
        let outcome = match hung {
            Some(h) => Outcome::Fail(format!("not run: the suite stopped after {h} hung")),
            None => {
                let (tx, rx) = mpsc::channel();
                let (kind, c) = (env.kind, *case);
                std::thread::spawn(move || {
                    let _ = tx.send(run_client_case(kind, server, c));
                });
                match rx.recv_timeout(CASE_WATCHDOG) {
                    Ok(o) => o,
                    Err(_) => {
                        hung = Some(case.name);
                        Outcome::Fail(format!(
                            "hung: no result within {} s",
                            CASE_WATCHDOG.as_secs()
                        ))
                    }
                }
            }
        };
        let r = CaseReport {
            name: case.name,
            outcome,
            elapsed_ms: started.elapsed().as_millis(),
        };
        print_line(&r);
        report.cases.push(r);
    }
    let stop = match env.mode {
        Mode::InProcess => true,
        Mode::Connect { shutdown_server } => shutdown_server,
    };
    if stop && hung.is_none() {
        stop_server(env.kind, server);
        if let Some(done) = server_done {
            match done.recv_timeout(OP_TIMEOUT) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => eprintln!("warning: in-process server: {e}"),
                Err(_) => eprintln!("warning: in-process server did not stop"),
            }
        }
    }
    println!("{}", report.summary());
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_case_passes_only_when_both_halves_pass() {
        assert_eq!(combine(Ok(()), Ok(Outcome::Pass)), Outcome::Pass);
        assert!(matches!(
            combine(Ok(()), Ok(Outcome::Fail("x".into()))),
            Outcome::Fail(_)
        ));
        assert!(matches!(
            combine(Ok(()), Err("lost".into())),
            Outcome::Fail(_)
        ));
        assert!(matches!(
            combine(Err(fail("x")), Ok(Outcome::Pass)),
            Outcome::Fail(_)
        ));
    }

    #[test]
    fn a_skip_never_hides_a_failure() {
        let skip = || Outcome::Skip("no windows".into());
        assert_eq!(
            combine(Err(CaseError::Skip("s".into())), Ok(skip())),
            Outcome::Skip("s".into())
        );
        assert_eq!(combine(Ok(()), Ok(skip())), skip());
        assert!(matches!(
            combine(Err(fail("x")), Ok(skip())),
            Outcome::Fail(_)
        ));
        assert!(matches!(
            combine(
                Err(CaseError::Skip("s".into())),
                Ok(Outcome::Fail("y".into()))
            ),
            Outcome::Fail(_)
        ));
    }

    #[test]
    fn the_original_failure_is_reported_not_the_echo() {
        let o = combine(
            Err(CaseError::PeerFailed("bad data".into())),
            Ok(Outcome::Fail("bad data".into())),
        );
        assert_eq!(o, Outcome::Fail("server: bad data".into()));
        let o = combine(
            Err(fail("no completion")),
            Ok(Outcome::Fail("(after the peer) no completion".into())),
        );
        assert_eq!(o, Outcome::Fail("client: no completion".into()));
    }
}
