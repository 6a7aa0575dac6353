//! TLS on an NVMe/TCP listener (TP 8011; `docs/tcp.md`): what a connection goes through
//! between its accept and its ICReq. The listener's `tls` says what its first byte may be: a
//! TLS handshake record (0x16, a ClientHello) or an ICReq (PDU type 0). A TLS connection's
//! handshake runs on the worker's event loop without blocking (each step takes what the
//! socket has); a host that stalls in it is let go at `target.connect_timeout_ms`, as one that
//! stalls before its ICReq is. The host's identity names its NQN and the subsystem's; the key
//! is the one that subsystem's `hosts` entry configures for it, looked up at the handshake
//! (so a reloaded key applies to the next one). Any failure closes the connection: never a
//! fall back to clear text. After the handshake the records go to the kernel (kTLS) where it
//! has it and `target.tls_record_layer` allows, else through OpenSSL in user space
//! (`rdmablk::nvme::tls::ktls`); each connection's is logged and counted.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use rdmablk::nvme::fabrics::ConnectData;
use rdmablk::nvme::tls::ktls::{hand_off, RecordLayer};
use rdmablk::nvme::tls::session::{is_tls_record, target_psk, PskLookup, TlsConn};
use rdmablk::nvme::tls::PskIdentity;
use rdmablk::nvme::transport::tcp::PduLayout;

use super::socket::Socket;
use crate::config::TlsMode;
use crate::nvmf::Shared;

/// What a listener hands its connections: its mode and how keys are found.
#[derive(Clone)]
pub struct ListenTls {
    pub mode: TlsMode,
    pub lookup: PskLookup,
    /// Which record layer a connection's records go to after its handshake.
    pub record_layer: RecordLayer,
}

impl std::fmt::Debug for ListenTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListenTls")
            .field("mode", &self.mode)
            .field("record_layer", &self.record_layer)
            .finish()
    }
}

/// The key lookup of a target: the subsystem the identity names, that subsystem's entry for
/// the host it names, that entry's TLS PSK.
pub fn lookup(shared: &Arc<Shared>) -> PskLookup {
    let weak: Weak<Shared> = Arc::downgrade(shared);
    Arc::new(move |id: &PskIdentity| {
        let shared = weak.upgrade().ok_or("the target is stopping")?;
        let subsys = shared.subsystem(id.subsys_nqn()).ok_or_else(|| {
            format!(
                "the identity names subsystem {:?}, which this target does not serve",
                id.subsys_nqn()
            )
        })?;
        let key = subsys.host_tls_psk(id.host_nqn())?.ok_or_else(|| {
            format!(
                "host {:?} has no tls_psk for subsystem {:?} (add one to its hosts entry)",
                id.host_nqn(),
                id.subsys_nqn()
            )
        })?;
        target_psk(&key, id)
    })
}

/// The listener's `tls` now (a reload may have changed it): read from the port table when
/// it is free, else the last mode seen (`last`, which starts as the listener's own). Never
/// waits for the table's lock: a reload holds it while it stops listeners, joining their
/// threads, this one among them.
pub fn mode_of(shared: &Shared, listener: u64, last: &mut TlsMode) -> TlsMode {
    if let Ok(ports) = shared.ports.try_lock() {
        if let Some(p) = ports.iter().find(|p| p.id == listener) {
            *last = p.cfg.tls;
        }
    }
    *last
}

/// Where a connection stands before NVMe/TCP starts.
pub enum Stage {
    /// Its first byte not seen yet.
    First(ListenTls),
    /// In the TLS handshake; then its records go to the record layer named.
    Handshake(Box<TlsConn>, RecordLayer),
    /// NVMe/TCP (in clear text, or through the socket's TLS).
    Ready,
}

impl Stage {
    pub fn new(tls: Option<ListenTls>) -> Stage {
        match tls {
            // A ClientHello on a clear-text listener is refused by the PDU checks (not a
            // PDU type a host sends) with a C2HTermReq, as before TLS existed.
            Some(t) if t.mode != TlsMode::None => Stage::First(t),
            _ => Stage::Ready,
        }
    }
}

/// Takes the connection as far as what has arrived allows. Ok(true): NVMe/TCP may start
/// (the ICReq is read next, through TLS if it was started); Ok(false): waiting for the
/// host; Err: refused (why, for the log), the socket to be closed.
pub fn advance(
    stage: &mut Stage,
    sock: &mut Socket,
    peer: SocketAddr,
    shared: &Shared,
) -> Result<bool, String> {
    loop {
        match stage {
            Stage::Ready => return Ok(true),
            Stage::First(t) => {
                let Some(first) = peek_first(sock)? else {
                    return Ok(false);
                };
                match (is_tls_record(first), t.mode) {
                    (false, TlsMode::Required) => {
                        return Err(format!(
                            "the host did not start TLS on a tls = \"required\" listener \
                             (first byte {first:#04x}, not a TLS handshake record)"
                        ))
                    }
                    (false, _) => *stage = Stage::Ready,
                    (true, TlsMode::None) => {
                        return Err("the host started TLS on a listener without tls (set \
                                    tls = \"allowed\" or \"required\" on it)"
                            .into())
                    }
                    (true, _) => {
                        let conn =
                            TlsConn::server(Arc::clone(&t.lookup)).map_err(|e| e.to_string())?;
                        *stage = Stage::Handshake(Box::new(conn), t.record_layer);
                    }
                }
            }
            Stage::Handshake(conn, _) => {
                // A record at a time (the handshake reads none past its last), as long as
                // the socket has one.
                let (step, closed) = loop {
                    let (got, closed) = match conn.read_from(&mut &sock.stream) {
                        Ok(n) => (n, false),
                        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => (0, true),
                        Err(e) => return Err(format!("receive during the TLS handshake: {e}")),
                    };
                    let step = conn.handshake();
                    if got == 0 || step != Ok(false) {
                        break (step, closed);
                    }
                };
                // The alert of a refusal goes out too (best effort: the socket is closed next).
                let sent = conn.write_to(&mut &sock.stream);
                match step {
                    Err(e) => return Err(e.to_string()),
                    Ok(false) if closed => {
                        return Err("the host closed the connection during the TLS handshake".into())
                    }
                    Ok(false) => {
                        sent.map_err(|e| format!("send during the TLS handshake: {e}"))?;
                        return Ok(false);
                    }
                    Ok(true) => {
                        sent.map_err(|e| format!("send during the TLS handshake: {e}"))?;
                        let Stage::Handshake(conn, want) = std::mem::replace(stage, Stage::Ready)
                        else {
                            unreachable!("matched above");
                        };
                        let est = hand_off(conn, &sock.stream, want)?;
                        let id = est.identity().map(ToString::to_string);
                        tracing::info!(%peer, identity = id.as_deref().unwrap_or("?"),
                            cipher = est.cipher(), record_layer = est.record_layer(),
                            why = est.why_user().unwrap_or(""), "NVMe/TCP TLS established");
                        let c = &shared.counters;
                        let n = if est.user().is_some() {
                            &c.tls_user
                        } else {
                            &c.tls_kernel
                        };
                        n.fetch_add(1, Ordering::Relaxed);
                        sock.start_tls(est);
                    }
                }
            }
        }
    }
}

/// Over TLS, the queue's Connect must be for the host and subsystem its PSK identity names
/// (the key authenticated that pair, not any other): `capsule` is the whole Connect
/// capsule PDU, `layout` its layout. Data of another length is left to the Connect's own
/// checks.
pub fn check_connect(sock: &Socket, capsule: &[u8], layout: &PduLayout) -> Result<(), String> {
    let Some(id) = sock.tls_identity() else {
        return Ok(());
    };
    let Some(data) = capsule.get(layout.pdo..layout.pdo + layout.data_len) else {
        return Ok(());
    };
    let Ok(d) = ConnectData::decode_slice(data) else {
        return Ok(());
    };
    if d.hostnqn_str() != id.host_nqn() || d.subnqn.as_str() != id.subsys_nqn() {
        return Err(format!(
            "Connect for host {:?} and subsystem {:?} over a TLS connection whose PSK \
             identity names host {:?} and subsystem {:?}",
            d.hostnqn_str(),
            d.subnqn.as_str(),
            id.host_nqn(),
            id.subsys_nqn()
        ));
    }
    Ok(())
}

/// The connection's first byte, left in the socket; None if it has not come.
fn peek_first(sock: &Socket) -> Result<Option<u8>, String> {
    use std::os::fd::AsRawFd;
    let mut b = 0u8;
    // SAFETY: one byte into `b`.
    let n = unsafe {
        libc::recv(
            sock.stream.as_raw_fd(),
            (&mut b as *mut u8).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    match n {
        1 => Ok(Some(b)),
        0 => Err("the host closed the connection before sending anything".into()),
        _ => {
            let e = std::io::Error::last_os_error();
            match e.kind() {
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted => Ok(None),
                _ => Err(format!("receive: {e}")),
            }
        }
    }
}
