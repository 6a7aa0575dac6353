//! The control socket: a Unix stream socket (`[control] socket`, default
//! `/run/rdmablk/ctl.sock`, mode 0600) that `rdmablk-ctl` and scripts talk to.
//!
//! Protocol (`docs/operations.md`): one JSON object per line in, one per line out.
//! `{"cmd": "status"}` -> `{"ok": true, "result": {...}}`; a failure is
//! `{"ok": false, "error": "..."}`. Commands: `status`, `reload`, `drain` (`listener`:
//! "ADDR:PORT"), and the configuration edits of [`edit::Edit`] (`subsystem-add`, ...), which
//! are written to the configuration file and then reloaded.
//!
//! Limits: at most [`MAX_CLIENTS`] clients at once (more are answered with an error and
//! closed), requests of at most [`MAX_LINE`] bytes, a client that sends nothing for
//! [`IDLE_TIMEOUT`] or does not read its answer for [`WRITE_TIMEOUT`] is dropped. Control
//! requests run on their own threads: the I/O path never waits for them.

pub mod edit;
mod status;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{json, Value};

use crate::config::Config;
use crate::nvmf::TargetHandle;
use edit::Edit;

/// Clients served at once.
pub const MAX_CLIENTS: usize = 32;
/// Longest request line, bytes.
pub const MAX_LINE: usize = 1 << 20;
/// A client that sends nothing this long is dropped.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// A client that does not read its answer this long is dropped.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// Why the control socket could not start.
#[derive(Debug, thiserror::Error)]
#[error("control.socket {path}: {what}: {source} (create the directory, fix its permissions, or set [control] socket = \"\" to disable the socket)")]
pub struct ControlError {
    pub path: String,
    pub what: &'static str,
    #[source]
    pub source: std::io::Error,
}

/// The running control socket; dropping it stops it and removes the socket file.
pub struct ControlServer {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ControlServer {
    /// Listens on `path` (replacing a stale socket file) for requests about `target`.
    pub fn start(target: TargetHandle, path: &Path) -> Result<ControlServer, ControlError> {
        let err = |what, source| ControlError {
            path: path.display().to_string(),
            what,
            source,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| err("creating its directory", e))?;
        }
        if UnixStream::connect(path).is_ok() {
            return Err(err(
                "in use",
                std::io::Error::other("another target answers on it"),
            ));
        }
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path).map_err(|e| err("bind", e))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| err("chmod 0600", e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| err("non-blocking", e))?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let shared = Arc::new(Server {
            target,
            clients: AtomicUsize::new(0),
            edits: Mutex::new(()),
        });
        let thread = std::thread::Builder::new()
            .name("rdmablk-ctl".into())
            .spawn(move || accept_loop(listener, shared, flag))
            .map_err(|e| err("thread", e))?;
        tracing::info!(path = %path.display(), "control socket listening");
        Ok(ControlServer {
            path: path.to_owned(),
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

struct Server {
    target: TargetHandle,
    clients: AtomicUsize,
    /// Serializes configuration-file edits.
    edits: Mutex<()>,
}

fn accept_loop(listener: UnixListener, server: Arc<Server>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Acquire) {
        match listener.accept() {
            Ok((stream, _)) => {
                let busy = server.clients.fetch_add(1, Ordering::AcqRel) >= MAX_CLIENTS;
                let s = Arc::clone(&server);
                let spawned = std::thread::Builder::new()
                    .name("rdmablk-ctl-client".into())
                    .spawn(move || {
                        if busy {
                            refuse(stream, "too many control clients at once; try again");
                        } else {
                            serve_client(&s, stream);
                        }
                        s.clients.fetch_sub(1, Ordering::AcqRel);
                    });
                if spawned.is_err() {
                    server.clients.fetch_sub(1, Ordering::AcqRel);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => {
                tracing::warn!(error = %e, "control socket accept");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

fn refuse(mut stream: UnixStream, why: &str) {
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    let _ = writeln!(stream, "{}", json!({"ok": false, "error": why}));
}

fn serve_client(server: &Server, stream: UnixStream) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(IDLE_TIMEOUT));
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    let Ok(mut out) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = Vec::new();
        // One byte past the limit tells an over-long line from a full one.
        let n = match (&mut reader)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut line)
        {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if n > MAX_LINE {
            let _ = writeln!(
                out,
                "{}",
                json!({"ok": false, "error": format!("request longer than {MAX_LINE} bytes")})
            );
            return;
        }
        let answer = match std::str::from_utf8(&line) {
            Ok(text) if text.trim().is_empty() => continue,
            Ok(text) => handle(server, text.trim()),
            Err(_) => json!({"ok": false, "error": "request is not UTF-8"}),
        };
        if writeln!(out, "{answer}").is_err() {
            return;
        }
    }
}

/// One request, as read from its line.
#[derive(Debug, PartialEq)]
pub enum Request {
    Status,
    Io,
    Reload,
    Drain { listener: String },
    Edit(Edit),
}

/// Reads one request line; what is wrong with it, in words for the client.
pub fn parse_request(text: &str) -> Result<Request, String> {
    let req: Value = serde_json::from_str(text).map_err(|e| format!("bad JSON: {e}"))?;
    match req.get("cmd").and_then(Value::as_str) {
        None => Err("missing \"cmd\"".to_string()),
        Some("status") => Ok(Request::Status),
        Some("io") => Ok(Request::Io),
        Some("reload") => Ok(Request::Reload),
        Some("drain") => match req.get("listener").and_then(Value::as_str) {
            Some(l) => Ok(Request::Drain {
                listener: l.to_string(),
            }),
            None => Err("drain needs \"listener\": \"ADDR:PORT\"".to_string()),
        },
        Some(_) => serde_json::from_value::<Edit>(req)
            .map(Request::Edit)
            .map_err(|e| format!("bad request: {e}")),
    }
}

/// The fuzz target `control_request` (fuzz/fuzz_targets/): a request line as a client of the
/// socket sends it, and an edit it names applied to `config` (a valid configuration text) as
/// [`apply_edit`] does, up to the check of the new text. Panics where the result breaks what
/// the socket relies on: an edit that applies gives a text that parses as TOML, and one that
/// also checks as a configuration is applied again to its own result without a panic.
#[doc(hidden)]
pub fn fuzz_request(text: &str, config: &str) {
    let Ok(Request::Edit(e)) = parse_request(text) else {
        return;
    };
    if let Ok(new) = edit::apply(config, &e) {
        assert!(new.parse::<toml_edit::DocumentMut>().is_ok(), "{new}");
        if Config::from_str(&new).is_ok() {
            let _ = edit::apply(&new, &e);
        }
    }
}

/// Answers one request line.
fn handle(server: &Server, text: &str) -> Value {
    let t = &server.target;
    let result = parse_request(text).and_then(|req| match req {
        Request::Status => Ok(t.status()),
        Request::Io => Ok(t.io()),
        Request::Reload => t
            .reload()
            .map(|changes| json!({ "changes": changes }))
            .map_err(|e| e.to_string()),
        Request::Drain { listener } => t.drain(&listener).map(|()| json!({ "drained": listener })),
        Request::Edit(edit) => apply_edit(server, &edit),
    });
    match result {
        Ok(v) => json!({"ok": true, "result": v}),
        Err(e) => json!({"ok": false, "error": e}),
    }
}

/// A configuration change: the file is edited, checked, written atomically and reloaded; if
/// the reload refuses, the file is put back.
fn apply_edit(server: &Server, e: &Edit) -> Result<Value, String> {
    let _one = server.edits.lock().unwrap_or_else(|p| p.into_inner());
    let path = server
        .target
        .config_path()
        .ok_or("the target has no configuration file to change")?;
    edit::writable(&path)?;
    let old = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let new = edit::apply(&old, e)?;
    Config::from_str(&new)
        .map_err(|e| format!("the change would make the configuration invalid: {e}"))?;
    edit::write_atomically(&path, &new)?;
    match server.target.reload() {
        Ok(changes) => Ok(json!({ "changes": changes })),
        Err(err) => {
            let restored = edit::write_atomically(&path, &old);
            Err(match restored {
                Ok(()) => format!("{err} (the file was put back as it was)"),
                Err(w) => format!("{err}; putting the file back failed too: {w}"),
            })
        }
    }
}

/// A client call: sends `request` to the socket at `path` and returns the answer.
pub fn call(path: &Path, request: &Value) -> std::io::Result<Value> {
    let mut s = UnixStream::connect(path)?;
    s.set_read_timeout(Some(Duration::from_secs(120)))?;
    writeln!(s, "{request}")?;
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line)?;
    serde_json::from_str(&line).map_err(std::io::Error::other)
}
