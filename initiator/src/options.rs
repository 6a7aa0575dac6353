//! Connect options: how to connect (host identity, queues, timeouts, recovery, and what a
//! transport is asked for: push writes over NVMe/RDMA, digests over NVMe/TCP). A target URL's
//! query parameters set them by name (`crate::url`).

use std::fs;
use std::time::Duration;

use rdmablk::nvme::auth::key::DhchapKey;
use rdmablk::nvme::tls::ktls::RecordLayer;
use rdmablk::nvme::Nqn;

use crate::error::{Error, Result};
use crate::transport::tcp_tls::TlsKey;

/// [`ConnectOptions::poll_spin_us`] by default over NVMe/TCP: long enough for the next 128
/// KiB of a transfer or the answer to a write's data on a real CPU (100 us lost 0.94x of 128K
/// writes' IOPS to wake-ups, 200 us none; `docs/benchmarks.md`, 2026-12-07). Over NVMe/RDMA
/// the default is 0: on the soft provider, whose work shares the host's CPUs, 200 us cost
/// 0.65-0.75x of 4K randwrite QD32's IOPS (`tools/bench/soft-vs-local`, 2026-12-07).
pub const DEFAULT_POLL_SPIN_US: u32 = 200;
/// The most [`ConnectOptions::poll_spin_us`] takes.
pub const MAX_POLL_SPIN_US: u32 = 1_000_000;

/// Options of a controller connection. `Default` is what a Linux host would use, with push
/// writes asked for (standard targets ignore the request).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectOptions {
    /// Host NQN. Default: `/etc/nvme/hostnqn`, else one derived from `/etc/machine-id`
    /// (`nqn.2014-08.org.nvmexpress:uuid:<uuid>`), stable across runs on one machine.
    pub hostnqn: String,
    /// Host identifier (16 bytes). Default: `/etc/nvme/hostid`, else the UUID of the NQN.
    pub hostid: [u8; 16],
    /// I/O queues to ask for (the controller may grant fewer). Default 2.
    pub io_queues: u16,
    /// Entries per I/O queue (clamped to CAP.MQES + 1 and MAXCMD). Default 128.
    pub queue_size: u16,
    /// Keep-alive timeout sent in Connect; Keep Alive is sent every half of it. 0 disables.
    pub kato_ms: u32,
    /// A command without a response after this long fails its queue (and triggers a
    /// reconnect). Default 30 s.
    pub io_timeout_ms: u32,
    /// A queue waiting for completions polls this long after its last progress (a
    /// completion, or a poll that read or wrote bytes) before it sleeps: spinning catches
    /// what is on its way without a wake-up, at the price of CPU while I/O is in flight.
    /// `None` (the default): the transport's own, 200 us over NVMe/TCP
    /// ([`DEFAULT_POLL_SPIN_US`]), 0 over NVMe/RDMA and loop; 0: only 64 polls (~30 us of
    /// NVMe/TCP polls on a real CPU). Not the target's `target.poll_spin_us`.
    pub poll_spin_us: Option<u32>,
    /// Timeout of each connect step (address resolution, CM connect, controller ready).
    pub connect_timeout_ms: u32,
    /// Ask the target for push writes (rdmablk extension). Default true.
    pub push_writes: bool,
    /// Largest data one command carries (the sync API splits bigger I/O); also capped by
    /// the controller's MDTS. Default 128 KiB.
    pub max_io_bytes: u32,
    /// Registered buffer pool size (IoBufs, bounce buffers). Default 16 MiB.
    pub buffer_pool_bytes: usize,
    /// Reconnect attempts after a failure before the controller gives up (0: never
    /// reconnect). Default unlimited (`u32::MAX`): `ctrl_loss_tmo_ms` decides.
    pub reconnect_attempts: u32,
    /// How long after its connection is lost the controller keeps trying to reconnect, as
    /// the Linux host's `ctrl_loss_tmo`: I/O that was in flight on an asynchronous queue is
    /// held meanwhile and sent again on the new connection, and fails only when this runs out
    /// (or the attempts do). 0: no time limit. Default 600 000 (600 s, the Linux default).
    pub ctrl_loss_tmo_ms: u32,
    /// Hold the requests an asynchronous queue had in flight when its connection was lost
    /// and send them again after the reconnect (default true). False: they fail at once
    /// with a transport error and the caller decides what to send again. URL: `requeue=0`.
    pub requeue: bool,
    /// First delay between reconnect attempts; doubles up to `reconnect_max_delay_ms`.
    pub reconnect_delay_ms: u32,
    pub reconnect_max_delay_ms: u32,
    /// Re-send writes whose outcome a transport failure left unknown (sync API). Block writes
    /// are idempotent, so this is safe unless the application itself issues overlapping
    /// writes concurrently. Default true.
    pub retry_writes: bool,
    /// DH-HMAC-CHAP host secret (`DHHC-1:..`), used when a queue's Connect response asks for
    /// in-band authentication (`docs/auth.md`). In URLs only as a file:
    /// `?dhchap_key_file=PATH`. Default: none (a target that requires it refuses us).
    pub dhchap_key: Option<DhchapKey>,
    /// NVMe/TCP header digests (CRC32C), as `nvme connect --hdr-digest`. URL: `?hdr_digest=1`.
    /// Default false.
    pub hdr_digest: bool,
    /// NVMe/TCP data digests, as `nvme connect --data-digest`. URL: `?data_digest=1`.
    pub data_digest: bool,
    /// Controller secret: when set, the controller must prove it holds it too
    /// (bidirectional authentication). URL: `?dhchap_ctrl_key_file=PATH`.
    pub dhchap_ctrl_key: Option<DhchapKey>,
    /// NVMe/TCP over TLS 1.3 with this PSK (`NVMeTLSkey-1:..`, as `nvme gen-tls-key` writes;
    /// `docs/tcp.md`). URL: `?tls=1&psk_file=PATH`, or `?psk=NVMeTLSkey-1:...:` (a key in a
    /// URL is seen by whoever sees the URL: prefer the file).
    pub tls_psk: Option<TlsKey>,
    /// `?tls=1`: TLS is required (a key must be given too). A key alone turns it on.
    pub tls: bool,
    /// TLS PSK identity version: 1 (`NVMe1R0x <hostnqn> <subnqn> <digest>`, the default) or
    /// 0 (`NVMe0R0x <hostnqn> <subnqn>`, what SPDK v25.09 speaks). URL: `?tls_identity=0`.
    pub tls_identity: u8,
    /// Which record layer carries TLS records after the handshake: `Auto` (the default) the
    /// kernel's (kTLS) where it has one, else OpenSSL's in user space; `Kernel` the kernel's
    /// or the queue fails; `User` OpenSSL's. URL: `?tls_record_layer=auto|kernel|user`.
    pub tls_record_layer: RecordLayer,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        let (hostnqn, hostid) = default_host_identity();
        ConnectOptions {
            hostnqn,
            hostid,
            io_queues: 2,
            queue_size: 128,
            kato_ms: 5_000,
            io_timeout_ms: 30_000,
            poll_spin_us: None,
            connect_timeout_ms: 5_000,
            push_writes: true,
            max_io_bytes: 128 << 10,
            buffer_pool_bytes: 16 << 20,
            reconnect_attempts: u32::MAX,
            ctrl_loss_tmo_ms: 600_000,
            requeue: true,
            reconnect_delay_ms: 100,
            reconnect_max_delay_ms: 2_000,
            retry_writes: true,
            dhchap_key: None,
            dhchap_ctrl_key: None,
            hdr_digest: false,
            data_digest: false,
            tls_psk: None,
            tls: false,
            tls_identity: 1,
            tls_record_layer: RecordLayer::Auto,
        }
    }
}

impl ConnectOptions {
    pub fn io_timeout(&self) -> Duration {
        Duration::from_millis(u64::from(self.io_timeout_ms))
    }

    /// How long a waiting queue of `t` polls before it sleeps (the option, or `t`'s default).
    pub fn poll_spin(&self, t: crate::transport::Transport) -> Duration {
        let us = self
            .poll_spin_us
            .unwrap_or_else(|| t.default_poll_spin_us());
        Duration::from_micros(u64::from(us))
    }

    pub fn connect_timeout(&self) -> Duration {
        Duration::from_millis(u64::from(self.connect_timeout_ms))
    }

    /// Checks every limit; called by `Controller::connect`.
    pub fn validate(&self) -> Result<()> {
        let bad = |name, reason: String| Err(Error::Option { name, reason });
        if let Err(e) = Nqn::new(&self.hostnqn) {
            return bad("hostnqn", e.to_string());
        }
        if self.tls && self.tls_psk.is_none() {
            return bad(
                "tls",
                "TLS needs the host's PSK: add psk_file=PATH (or ConnectOptions::tls_psk)".into(),
            );
        }
        if crate::transport::tcp_tls::identity_version(self.tls_identity).is_none() {
            return bad(
                "tls_identity",
                format!(
                    "{} is not a TLS PSK identity version (0 or 1)",
                    self.tls_identity
                ),
            );
        }
        if !(1..=128).contains(&self.io_queues) {
            return bad("io_queues", format!("{} is not in 1..=128", self.io_queues));
        }
        if !(2..=1024).contains(&self.queue_size) {
            return bad(
                "queue_size",
                format!("{} is not in 2..=1024", self.queue_size),
            );
        }
        if self.max_io_bytes < 4096 || self.max_io_bytes > (8 << 20) {
            return bad(
                "max_io_bytes",
                format!("{} is not in 4 KiB..=8 MiB", self.max_io_bytes),
            );
        }
        if self.buffer_pool_bytes < 2 * self.max_io_bytes as usize {
            return bad(
                "buffer_pool_bytes",
                format!(
                    "{} is below two I/Os of max_io_bytes {}",
                    self.buffer_pool_bytes, self.max_io_bytes
                ),
            );
        }
        if self.io_timeout_ms < 10 || self.connect_timeout_ms < 10 {
            return bad("io_timeout_ms", "timeouts below 10 ms".into());
        }
        if let Some(us) = self.poll_spin_us.filter(|&us| us > MAX_POLL_SPIN_US) {
            return bad(
                "poll_spin_us",
                format!(
                    "{us} is above {MAX_POLL_SPIN_US} (1 s): a queue would poll that long before \
                     it sleeps"
                ),
            );
        }
        Ok(())
    }

    /// Sets one option by its name (URL query parameters use this).
    pub fn set(&mut self, name: &str, value: &str) -> Result<()> {
        fn num<T: std::str::FromStr>(name: &'static str, v: &str) -> Result<T> {
            v.parse().map_err(|_| Error::Option {
                name,
                reason: format!("{v:?} is not a number"),
            })
        }
        fn flag(name: &'static str, v: &str) -> Result<bool> {
            match v {
                "1" | "true" | "on" | "yes" => Ok(true),
                "0" | "false" | "off" | "no" => Ok(false),
                _ => Err(Error::Option {
                    name,
                    reason: format!("{v:?} is not a boolean (1/0, true/false, on/off)"),
                }),
            }
        }
        match name {
            "hostnqn" => self.hostnqn = value.to_string(),
            "hostid" => {
                self.hostid = parse_uuid(value).ok_or_else(|| Error::Option {
                    name: "hostid",
                    reason: format!("{value:?} is not a UUID"),
                })?
            }
            "io_queues" | "nr_io_queues" => self.io_queues = num("io_queues", value)?,
            "queue_size" => self.queue_size = num("queue_size", value)?,
            "kato_ms" => self.kato_ms = num("kato_ms", value)?,
            "io_timeout_ms" => self.io_timeout_ms = num("io_timeout_ms", value)?,
            "poll_spin_us" => self.poll_spin_us = Some(num("poll_spin_us", value)?),
            "connect_timeout_ms" => self.connect_timeout_ms = num("connect_timeout_ms", value)?,
            "push" | "push_writes" => self.push_writes = flag("push_writes", value)?,
            "max_io_bytes" => self.max_io_bytes = num("max_io_bytes", value)?,
            "buffer_pool_bytes" => self.buffer_pool_bytes = num("buffer_pool_bytes", value)?,
            "reconnect_attempts" => self.reconnect_attempts = num("reconnect_attempts", value)?,
            "ctrl_loss_tmo_ms" => self.ctrl_loss_tmo_ms = num("ctrl_loss_tmo_ms", value)?,
            "requeue" => self.requeue = flag("requeue", value)?,
            "reconnect_delay_ms" => self.reconnect_delay_ms = num("reconnect_delay_ms", value)?,
            "reconnect_max_delay_ms" => {
                self.reconnect_max_delay_ms = num("reconnect_max_delay_ms", value)?
            }
            "retry_writes" => self.retry_writes = flag("retry_writes", value)?,
            "hdr_digest" => self.hdr_digest = flag("hdr_digest", value)?,
            "data_digest" => self.data_digest = flag("data_digest", value)?,
            "dhchap_key_file" => self.dhchap_key = Some(key_file("dhchap_key_file", value)?),
            "tls" => self.tls = flag("tls", value)?,
            "psk" => {
                self.tls_psk = Some(TlsKey::parse(value).map_err(|reason| Error::Option {
                    name: "psk",
                    reason,
                })?)
            }
            "psk_file" => {
                let path = std::path::Path::new(value);
                self.tls_psk = Some(TlsKey::from_file(path).map_err(|reason| Error::Option {
                    name: "psk_file",
                    reason,
                })?)
            }
            "tls_identity" => self.tls_identity = num("tls_identity", value)?,
            "tls_record_layer" => {
                self.tls_record_layer = RecordLayer::parse(value).ok_or_else(|| Error::Option {
                    name: "tls_record_layer",
                    reason: format!("{value:?} is not auto, kernel or user"),
                })?
            }
            "dhchap_ctrl_key_file" => {
                self.dhchap_ctrl_key = Some(key_file("dhchap_ctrl_key_file", value)?)
            }
            other => {
                return Err(Error::Option {
                    name: "url query",
                    reason: format!("unknown option {other:?}"),
                })
            }
        }
        Ok(())
    }
}

/// Reads a `DHHC-1` key file (secrets go by file, never in a URL).
fn key_file(name: &'static str, path: &str) -> Result<DhchapKey> {
    DhchapKey::from_file(std::path::Path::new(path)).map_err(|e| Error::Option {
        name,
        reason: e.to_string(),
    })
}

pub fn parse_uuid(s: &str) -> Option<[u8; 16]> {
    let hex: String = s.trim().chars().filter(|c| *c != '-').collect();
    if hex.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// Formats 16 bytes as a UUID string.
pub fn format_uuid(u: &[u8; 16]) -> String {
    let h: String = u.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// A version-4-shaped UUID derived from the machine ID: stable per machine.
fn machine_uuid() -> [u8; 16] {
    let id = fs::read_to_string("/etc/machine-id")
        .ok()
        .and_then(|s| parse_uuid(&s));
    let mut u = id.unwrap_or_else(|| {
        // No machine ID: derive from the host name (still stable on this machine).
        let name = fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let mut u = [0u8; 16];
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for (i, b) in name.bytes().chain(*b"rdmablk-host").enumerate() {
            h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
            u[i % 16] ^= (h >> 32) as u8;
        }
        u
    });
    u[6] = (u[6] & 0x0F) | 0x40;
    u[8] = (u[8] & 0x3F) | 0x80;
    u
}

/// The host NQN and ID a default [`ConnectOptions`] uses (nvme-cli's files when present).
pub fn default_host_identity() -> (String, [u8; 16]) {
    let file_nqn = fs::read_to_string("/etc/nvme/hostnqn")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| Nqn::new(s).is_ok() && !s.is_empty());
    let file_id = fs::read_to_string("/etc/nvme/hostid")
        .ok()
        .and_then(|s| parse_uuid(&s));
    let uuid = file_id.unwrap_or_else(machine_uuid);
    let nqn = file_nqn
        .unwrap_or_else(|| format!("nqn.2014-08.org.nvmexpress:uuid:{}", format_uuid(&uuid)));
    (nqn, uuid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_limits() {
        let mut o = ConnectOptions::default();
        o.validate().unwrap();
        o.queue_size = 1;
        assert!(o.validate().is_err());
        o.queue_size = 64;
        o.io_queues = 0;
        assert!(o.validate().is_err());
        o.io_queues = 1;
        o.buffer_pool_bytes = 4096;
        assert!(o.validate().is_err());
    }

    #[test]
    fn poll_spin_us_is_set_by_name_and_checked() {
        use crate::transport::Transport;
        let tcp = Transport::from_scheme("tcp").unwrap();
        let mut o = ConnectOptions::default();
        assert_eq!(o.poll_spin(tcp), Duration::from_micros(200));
        for rdma in ["rdma", "soft", "loop"] {
            let t = Transport::from_scheme(rdma).unwrap();
            assert_eq!(o.poll_spin(t), Duration::ZERO, "{rdma}'s default");
        }
        o.set("poll_spin_us", "50").unwrap();
        let soft = Transport::from_scheme("soft").unwrap();
        assert_eq!(
            o.poll_spin(soft),
            Duration::from_micros(50),
            "set: every transport"
        );
        o.set("poll_spin_us", "0").unwrap();
        assert_eq!(o.poll_spin(tcp), Duration::ZERO);
        o.validate().unwrap();
        o.set("poll_spin_us", "1000000").unwrap();
        o.validate().unwrap();
        o.set("poll_spin_us", "1000001").unwrap();
        let e = o.validate().unwrap_err().to_string();
        assert!(e.contains("poll_spin_us"), "{e}");
        assert!(o.set("poll_spin_us", "-1").is_err());
    }

    #[test]
    fn default_host_identity_is_stable_and_valid() {
        let (a, ida) = default_host_identity();
        let (b, idb) = default_host_identity();
        assert_eq!(a, b);
        assert_eq!(ida, idb);
        assert!(Nqn::new(&a).is_ok());
        assert!(a.starts_with("nqn."), "{a}");
        let s = format_uuid(&ida);
        assert_eq!(parse_uuid(&s), Some(ida));
    }
}
