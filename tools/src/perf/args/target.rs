//! Where the I/O goes: the positional target argument ([`parse_target`]: a file or device,
//! `rdma://`, `soft://` or `tcp://` URLs, several of them for multipath) or `--embedded`.

use std::fmt;
use std::path::PathBuf;

use clap::ValueEnum;

use super::{usage, UsageError};

/// How `--embedded` reaches its in-process target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EmbeddedTransport {
    /// rdmablk's soft RDMA provider over loopback TCP.
    Soft,
    /// NVMe/TCP over loopback.
    Tcp,
    /// The loop transport: commands and data through memory.
    Loop,
}

impl EmbeddedTransport {
    /// The URL scheme and the target's `[[listener]]` lines for it.
    pub fn scheme(self) -> &'static str {
        match self {
            Self::Soft => "soft",
            Self::Tcp => "tcp",
            Self::Loop => "loop",
        }
    }
}

/// The backend of `--embedded`'s namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EmbeddedNs {
    Ram,
    Null,
}

/// How the embedded target's worker waits for work (its `target.poll_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum EmbeddedPoll {
    /// Poll a while after the last work, then sleep (the target's default).
    #[default]
    Adaptive,
    /// Spin: one core at 100 %.
    Busy,
    /// Sleep whenever idle: each wake-up is part of the target's CPU per I/O, and no polling
    /// between batches is (what `tools/bench/core-loop` measures).
    Interrupt,
}

impl EmbeddedPoll {
    /// The value of the target's `poll_mode` key.
    pub fn as_config(self) -> &'static str {
        match self {
            Self::Adaptive => "adaptive",
            Self::Busy => "busy",
            Self::Interrupt => "interrupt",
        }
    }
}

/// Where the I/O goes, from the positional argument (or `--embedded`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A local file or block device, driven by the io_uring engine.
    File(PathBuf),
    /// An NVMe-oF subsystem over real RDMA (verbs provider).
    Rdma {
        /// `IP:PORT`.
        addr: String,
        /// Subsystem NQN.
        nqn: String,
    },
    /// An NVMe-oF subsystem over the software provider.
    Soft {
        /// `HOST:PORT`.
        addr: String,
        /// Subsystem NQN.
        nqn: String,
    },
    /// An NVMe-oF subsystem over NVMe/TCP.
    Tcp {
        /// `HOST:PORT`.
        addr: String,
        /// Subsystem NQN.
        nqn: String,
    },
    /// An in-process target over the transport given, with a namespace of that kind, its
    /// worker polling so.
    Embedded(EmbeddedTransport, EmbeddedNs, EmbeddedPoll),
    /// One subsystem through several paths (full `rdma://` or `soft://` URLs, one provider).
    Multipath {
        /// The paths' URLs.
        urls: Vec<String>,
    },
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::File(p) => write!(f, "{}", p.display()),
            Self::Rdma { addr, nqn } => write!(f, "rdma://{addr}/{nqn}"),
            Self::Soft { addr, nqn } => write!(f, "soft://{addr}/{nqn}"),
            Self::Tcp { addr, nqn } => write!(f, "tcp://{addr}/{nqn}"),
            Self::Embedded(t, ns, EmbeddedPoll::Adaptive) => {
                write!(f, "embedded ({}, {ns:?})", t.scheme())
            }
            Self::Embedded(t, ns, poll) => write!(
                f,
                "embedded ({}, {ns:?}, poll_mode {})",
                t.scheme(),
                poll.as_config()
            ),
            Self::Multipath { urls } => f.write_str(&urls.join(",")),
        }
    }
}

/// The well-known discovery NQN: a remote target named by it (or by no NQN) is resolved
/// through its discovery log.
pub const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";

/// Parses the positional target argument.
pub fn parse_target(s: &str) -> Result<Target, UsageError> {
    if s.contains(',') {
        return parse_paths(s);
    }
    parse_one_target(s)
}

/// Comma-separated URLs of one subsystem: the paths of a multipath controller.
fn parse_paths(s: &str) -> Result<Target, UsageError> {
    let mut urls = Vec::new();
    let mut kinds = Vec::new();
    for part in s.split(',') {
        let url = match parse_one_target(part)? {
            Target::Rdma { nqn, .. } | Target::Soft { nqn, .. } | Target::Tcp { nqn, .. }
                if nqn == DISCOVERY_NQN =>
            {
                return Err(usage(format!(
                    "target '{part}': a multipath path names its subsystem NQN \
                     (scheme://HOST:PORT/NQN)"
                )))
            }
            t @ (Target::Rdma { .. } | Target::Soft { .. } | Target::Tcp { .. }) => t,
            _ => {
                return Err(usage(format!(
                    "target '{part}': multipath paths are rdma://, soft:// or tcp:// URLs"
                )))
            }
        };
        let url = url.to_string();
        kinds.push(url.split("://").next().unwrap_or_default().to_string());
        urls.push(url);
    }
    let rdma: Vec<&String> = kinds.iter().filter(|k| *k != "tcp").collect();
    if rdma.iter().any(|k| *k != rdma[0]) {
        return Err(usage(format!(
            "target '{s}': the RDMA paths of one multipath controller use one provider \
             (all rdma:// or all soft://; tcp:// paths may join either)"
        )));
    }
    Ok(Target::Multipath { urls })
}

fn parse_one_target(s: &str) -> Result<Target, UsageError> {
    let remote = |rest: &str, scheme: &str| -> Result<(String, String), UsageError> {
        match rest.split_once('/') {
            Some((addr, nqn)) if addr.contains(':') && !nqn.is_empty() => {
                Ok((addr.to_string(), nqn.to_string()))
            }
            // A discovery URL: the target's discovery controller names the subsystem.
            Some((addr, "")) if addr.contains(':') => {
                Ok((addr.to_string(), DISCOVERY_NQN.to_string()))
            }
            None if rest.contains(':') => Ok((rest.to_string(), DISCOVERY_NQN.to_string())),
            _ => Err(usage(format!(
                "target '{s}': expected {scheme}://HOST:PORT/NQN, \
                 e.g. {scheme}://127.0.0.1:4420/nqn.2024-01.io.rdmablk:ram0"
            ))),
        }
    };
    if let Some(path) = s.strip_prefix("file:") {
        if path.is_empty() {
            return Err(usage("target 'file:': expected file:/path/to/file"));
        }
        Ok(Target::File(PathBuf::from(path)))
    } else if s.starts_with("/dev/") {
        Ok(Target::File(PathBuf::from(s)))
    } else if let Some(rest) = s.strip_prefix("rdma://") {
        remote(rest, "rdma").map(|(addr, nqn)| Target::Rdma { addr, nqn })
    } else if let Some(rest) = s.strip_prefix("soft://") {
        remote(rest, "soft").map(|(addr, nqn)| Target::Soft { addr, nqn })
    } else if let Some(rest) = s.strip_prefix("tcp://") {
        remote(rest, "tcp").map(|(addr, nqn)| Target::Tcp { addr, nqn })
    } else {
        Err(usage(format!(
            "target '{s}': unknown kind (use file:/path, /dev/..., rdma://IP:PORT/NQN, \
             soft://HOST:PORT/NQN or tcp://HOST:PORT/NQN)"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets() {
        assert_eq!(
            parse_target("file:/tmp/x"),
            Ok(Target::File("/tmp/x".into()))
        );
        assert_eq!(
            parse_target("/dev/nvme0n1"),
            Ok(Target::File("/dev/nvme0n1".into()))
        );
        assert_eq!(
            parse_target("rdma://10.0.0.1:4420/nqn.x"),
            Ok(Target::Rdma {
                addr: "10.0.0.1:4420".into(),
                nqn: "nqn.x".into()
            })
        );
        assert_eq!(
            parse_target("soft://localhost:4420/nqn.y"),
            Ok(Target::Soft {
                addr: "localhost:4420".into(),
                nqn: "nqn.y".into()
            })
        );
        assert_eq!(
            parse_target("tcp://192.0.2.1:4420/nqn.z"),
            Ok(Target::Tcp {
                addr: "192.0.2.1:4420".into(),
                nqn: "nqn.z".into()
            })
        );
        assert!(parse_target("rdma://10.0.0.1/nqn").is_err());
        assert_eq!(
            parse_target("soft://h:1/"),
            Ok(Target::Soft {
                addr: "h:1".into(),
                nqn: DISCOVERY_NQN.into()
            })
        );
        assert_eq!(
            parse_target("rdma://10.0.0.1:4420"),
            Ok(Target::Rdma {
                addr: "10.0.0.1:4420".into(),
                nqn: DISCOVERY_NQN.into()
            })
        );
        assert!(parse_target("/tmp/x").unwrap_err().0.contains("file:/path"));
        assert!(parse_target("file:").is_err());
    }

    #[test]
    fn comma_separated_urls_are_multipath() {
        let t = parse_target("soft://a:1/nqn.x,soft://b:2/nqn.x").unwrap();
        assert_eq!(
            t,
            Target::Multipath {
                urls: vec!["soft://a:1/nqn.x".into(), "soft://b:2/nqn.x".into()]
            }
        );
        assert_eq!(t.to_string(), "soft://a:1/nqn.x,soft://b:2/nqn.x");
        assert!(parse_target("soft://a:1/nqn.x,rdma://b:2/nqn.x")
            .unwrap_err()
            .0
            .contains("one provider"));
        // An RDMA path and an NVMe/TCP path of one subsystem: one multipath controller.
        assert_eq!(
            parse_target("tcp://a:1/nqn.x,soft://b:2/nqn.x").map(|t| t.to_string()),
            Ok("tcp://a:1/nqn.x,soft://b:2/nqn.x".to_string())
        );
        assert_eq!(
            parse_target("tcp://a:1/nqn.x,tcp://b:2/nqn.x").map(|t| t.to_string()),
            Ok("tcp://a:1/nqn.x,tcp://b:2/nqn.x".to_string())
        );
        assert!(parse_target("soft://a:1/nqn.x,soft://b:2")
            .unwrap_err()
            .0
            .contains("names its subsystem"));
        assert!(parse_target("soft://a:1/nqn.x,file:/x").is_err());
    }
}
