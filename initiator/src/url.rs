//! Target URLs: `SCHEME://HOST[:PORT]/SUBNQN[?OPTIONS]`.
//!
//! ```text
//! rdma://10.0.0.2:4420/nqn.2024-01.io.example:ram0          verbs provider (RNIC, rxe, siw)
//! soft://127.0.0.1:4420/nqn.2024-01.io.example:ram0         rdmablk's soft provider (TCP)
//! rdma://[fe80::1]:4420/NQN?io_queues=4&queue_size=64&push=0
//! tcp://10.0.0.2:4420/nqn.2024-01.io.example:ram0           NVMe/TCP
//! loop://127.0.0.1:4420/nqn.2024-01.io.example:ram0         a target in this process
//! ```
//!
//! The scheme names the transport (the schemes are those of the transport table,
//! `crate::transport`). The port defaults to 4420. Everything after the first `/` up to `?` is
//! the subsystem NQN (NQNs contain `:`). Query parameters set [`ConnectOptions`] fields by
//! their names.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};

use rdmablk::fabric::ProviderKind;
use rdmablk::nvme::Nqn;

use crate::error::{Error, Result};
use crate::options::ConnectOptions;
use crate::transport::Transport;

/// The NVMe-oF well-known port (IANA), which a URL without a port gets, whatever its scheme.
pub const DEFAULT_PORT: u16 = 4420;

/// Where to connect: transport, address and subsystem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetUrl {
    /// The URL's scheme.
    pub transport: Transport,
    pub addr: SocketAddr,
    /// Subsystem NQN.
    pub subnqn: String,
}

impl TargetUrl {
    /// The fabric provider of an RDMA URL.
    pub fn provider(&self) -> Option<ProviderKind> {
        self.transport.provider()
    }
}

impl TargetUrl {
    /// Parses a URL; its query parameters are applied to `opts`.
    pub fn parse_with(url: &str, opts: &mut ConnectOptions) -> Result<TargetUrl> {
        let err = |reason: &str| Error::Url {
            url: url.to_string(),
            reason: reason.to_string(),
        };
        let (scheme, rest) = url.split_once("://").ok_or_else(|| err("missing scheme"))?;
        let transport = Transport::from_scheme(scheme).ok_or_else(|| {
            err(&format!(
                "unknown scheme {scheme:?} ({})",
                Transport::every_scheme()
            ))
        })?;
        let (rest, query) = match rest.split_once('?') {
            Some((r, q)) => (r, Some(q)),
            None => (rest, None),
        };
        let (hostport, subnqn) = rest.split_once('/').ok_or_else(|| err("missing /SUBNQN"))?;
        if subnqn.is_empty() {
            return Err(err("empty subsystem NQN"));
        }
        Nqn::new(subnqn).map_err(|e| err(&e.to_string()))?;
        let addr = parse_hostport(hostport).map_err(|r| err(&r))?;
        if let Some(q) = query {
            for kv in q.split('&').filter(|s| !s.is_empty()) {
                let (k, v) = kv
                    .split_once('=')
                    .ok_or_else(|| err(&format!("query item {kv:?} is not key=value")))?;
                opts.set(k, v)?;
            }
        }
        Ok(TargetUrl {
            transport,
            addr,
            subnqn: subnqn.to_string(),
        })
    }

    /// Parses a URL with default options (query parameters are refused).
    pub fn parse(url: &str) -> Result<TargetUrl> {
        let mut o = ConnectOptions::default();
        let u = Self::parse_with(url, &mut o)?;
        if o != ConnectOptions::default() {
            return Err(Error::Url {
                url: url.into(),
                reason: "options in the query need TargetUrl::parse_with".into(),
            });
        }
        Ok(u)
    }
}

impl std::fmt::Display for TargetUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = self.transport.scheme();
        write!(f, "{scheme}://{}/{}", self.addr, self.subnqn)
    }
}

fn parse_hostport(s: &str) -> std::result::Result<SocketAddr, String> {
    if s.is_empty() {
        return Err("missing host".into());
    }
    let (host, port) = if let Some(v6) = s.strip_prefix('[') {
        let (h, rest) = v6.split_once(']').ok_or("unclosed [ in IPv6 address")?;
        let port = match rest.strip_prefix(':') {
            Some(p) => Some(p),
            None if rest.is_empty() => None,
            None => return Err(format!("junk {rest:?} after IPv6 address")),
        };
        (h, port)
    } else {
        match s.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        }
    };
    let port = match port {
        Some(p) => p.parse::<u16>().map_err(|_| format!("bad port {p:?}"))?,
        None => DEFAULT_PORT,
    };
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {host:?}: {e}"))?
        .next()
        .ok_or_else(|| format!("{host:?} has no address"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NQN: &str = "nqn.2024-01.io.rdmablk:ram0";

    #[test]
    fn parses_schemes_ports_and_nqn_with_colons() {
        let u = TargetUrl::parse(&format!("rdma://10.0.2.15:4420/{NQN}")).unwrap();
        assert_eq!(u.transport.scheme(), "rdma");
        assert_eq!(u.provider(), Some(ProviderKind::Verbs));
        assert_eq!(u.addr, "10.0.2.15:4420".parse().unwrap());
        assert_eq!(u.subnqn, NQN);
        assert_eq!(u.to_string(), format!("rdma://10.0.2.15:4420/{NQN}"));
        let u = TargetUrl::parse(&format!("soft://127.0.0.1/{NQN}")).unwrap();
        assert_eq!(u.transport, Transport::from_scheme("soft").unwrap());
        assert_eq!(u.provider(), Some(ProviderKind::Soft));
        assert_eq!(u.addr.port(), DEFAULT_PORT);
        let u = TargetUrl::parse(&format!("rdma://[::1]:9/{NQN}")).unwrap();
        assert_eq!(u.addr, "[::1]:9".parse().unwrap());
        let u = TargetUrl::parse(&format!("soft://localhost:7/{NQN}")).unwrap();
        assert_eq!(u.addr.port(), 7);
        let u = TargetUrl::parse(&format!("tcp://127.0.0.1:4420/{NQN}")).unwrap();
        assert_eq!((u.transport.scheme(), u.provider()), ("tcp", None));
        assert_eq!(u.to_string(), format!("tcp://127.0.0.1:4420/{NQN}"));
    }

    #[test]
    fn bad_urls_say_what_is_wrong() {
        for (url, needle) in [
            ("http://1.2.3.4/x", "unknown scheme"),
            ("rdma//1.2.3.4/x", "missing scheme"),
            ("rdma://1.2.3.4", "missing /SUBNQN"),
            ("rdma://1.2.3.4/", "empty subsystem NQN"),
            ("rdma://1.2.3.4:99999/nqn.x", "bad port"),
            ("rdma://[::1/nqn.x", "unclosed"),
            ("rdma:///nqn.x", "missing host"),
        ] {
            let e = TargetUrl::parse(url).unwrap_err().to_string();
            assert!(e.contains(needle), "{url}: {e}");
        }
        let long = format!("rdma://1.2.3.4/{}", "n".repeat(300));
        assert!(TargetUrl::parse(&long).is_err());
    }

    #[test]
    fn query_sets_options() {
        let mut o = ConnectOptions::default();
        let u = TargetUrl::parse_with(
            &format!(
                "soft://127.0.0.1:4420/{NQN}?io_queues=4&queue_size=32&push=0&kato_ms=0\
                 &hostid=00112233-4455-6677-8899-aabbccddeeff&hostnqn=nqn.2014-08.x:h1"
            ),
            &mut o,
        )
        .unwrap();
        assert_eq!(u.subnqn, NQN);
        assert_eq!(o.io_queues, 4);
        assert_eq!(o.queue_size, 32);
        assert!(!o.push_writes);
        assert_eq!(o.kato_ms, 0);
        assert_eq!(o.hostnqn, "nqn.2014-08.x:h1");
        assert_eq!(o.hostid[0], 0x00);
        assert_eq!(o.hostid[15], 0xff);
        o.validate().unwrap();
        let mut o = ConnectOptions::default();
        let e = TargetUrl::parse_with(&format!("soft://127.0.0.1:1/{NQN}?bogus=1"), &mut o)
            .unwrap_err();
        assert!(e.to_string().contains("unknown option"), "{e}");
        let e = TargetUrl::parse_with(&format!("soft://127.0.0.1:1/{NQN}?push=maybe"), &mut o)
            .unwrap_err();
        assert!(e.to_string().contains("not a boolean"), "{e}");
        assert!(TargetUrl::parse(&format!("soft://127.0.0.1:1/{NQN}?push=0")).is_err());
    }
}
