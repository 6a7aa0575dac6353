//! `[[listener]]` and `[[referral]]`: where hosts connect, and the other discovery services
//! the discovery log points them to; both name a [`Transport`] (a line of the transport table).

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use serde::Deserialize;

use rdmablk::fabric::ProviderKind;

use super::TlsMode;
use crate::nvmf::transport::{TransportKind, Variant, TRANSPORTS};

/// The NVMe-oF well-known port (IANA): the default port of every listener and referral,
/// whatever its transport.
pub const DEFAULT_PORT: u16 = 4420;

/// `[[referral]]`: a discovery service elsewhere (another target), listed in every host's
/// discovery log as a referral entry.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ReferralConfig {
    /// Its IP address.
    pub address: IpAddr,
    /// Its port.
    #[serde(default = "default_port")]
    pub port: u16,
    /// Its transport: `rdma` (default) or `tcp`.
    #[serde(default)]
    pub transport: Transport,
}

/// The transport of a listener or referral that names none.
pub const DEFAULT_TRANSPORT: &str = "rdma";

/// An NVMe-oF transport, as `[[listener]] transport` and `[[referral]] transport` name it: a
/// line of the target's transport table ([`TRANSPORTS`]), whose [`TransportKind`] checks
/// the listener keys that are the transport's own. Two are equal when their names are.
#[derive(Clone, Copy)]
pub struct Transport(&'static dyn TransportKind);

impl Transport {
    /// The transport of table line `kind`.
    pub const fn of(kind: &'static dyn TransportKind) -> Transport {
        Transport(kind)
    }

    /// The transport of the table named `name`, if there is one.
    pub fn named(name: &str) -> Option<Transport> {
        TRANSPORTS
            .iter()
            .find(|k| k.name() == name)
            .map(|&k| Transport(k))
    }

    /// The name as written in the file.
    pub fn as_str(self) -> &'static str {
        self.0.name()
    }

    /// Its line in the transport table.
    pub fn kind(self) -> &'static dyn TransportKind {
        self.0
    }
}

impl Default for Transport {
    fn default() -> Transport {
        Transport::named(DEFAULT_TRANSPORT).expect("the default transport is in the table")
    }
}

impl PartialEq for Transport {
    fn eq(&self, other: &Transport) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Transport {}

impl std::hash::Hash for Transport {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl fmt::Debug for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Transport {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Transport, D::Error> {
        let name = String::deserialize(d)?;
        Transport::named(&name).ok_or_else(|| {
            let known: Vec<String> = TRANSPORTS
                .iter()
                .map(|k| format!("`{}`", k.name()))
                .collect();
            serde::de::Error::custom(format!(
                "unknown variant `{name}`, expected one of {}",
                known.join(", ")
            ))
        })
    }
}

/// `[[listener]]`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ListenerConfig {
    /// The NVMe-oF transport hosts use: `rdma` (the default), `tcp` (NVMe/TCP) or `loop`
    /// (hosts in the target's own process: `rdmablk-perf --embedded`, tests).
    #[serde(default)]
    pub transport: Transport,
    /// Under `rdma` (and required there): `verbs` (an RNIC or rxe/siw) or `soft` (the
    /// userspace provider over TCP). Not set under `tcp`.
    #[serde(default)]
    pub provider: Option<Provider>,
    /// Local IP address to listen on (`0.0.0.0` listens on all of the provider's devices).
    pub address: IpAddr,
    /// TCP/RDMA CM port.
    #[serde(default = "default_port")]
    pub port: u16,
    /// ANA state of each ANA group through this listener (`ana = { 1 = "optimized",
    /// 2 = "inaccessible" }`); a group not listed is optimized. Changes apply on reload.
    #[serde(default)]
    pub ana: BTreeMap<String, String>,
    /// Under `tcp`: TLS 1.3 with a PSK, `none` (default), `allowed` or `required`
    /// (`config/tls.rs`). Changes apply to new connections on reload.
    #[serde(default)]
    pub tls: TlsMode,
}

fn default_port() -> u16 {
    DEFAULT_PORT
}

/// A fabric provider name as written in the file.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    Verbs,
    Soft,
}

impl ListenerConfig {
    /// What tells two listeners apart (and a reload's kept listener from a new one).
    pub fn key(&self) -> (Transport, Option<Provider>, IpAddr, u16) {
        (self.transport, self.provider, self.address, self.port)
    }

    /// The RDMA provider of an `rdma` listener (validation requires one; `verbs` if unset).
    pub fn rdma_provider(&self) -> Provider {
        self.provider.unwrap_or(Provider::Verbs)
    }

    /// Its transport's variant (the RDMA provider), as its transport says.
    pub fn variant(&self) -> Variant {
        self.transport.kind().variant(self)
    }

    /// How the listener names itself in logs and errors: `soft 127.0.0.1:4420`,
    /// `tcp [::1]:4420`.
    pub fn describe(&self) -> String {
        let what = match self.variant().name {
            "" => self.transport.as_str(),
            variant => variant,
        };
        format!(
            "{what} {}",
            std::net::SocketAddr::new(self.address, self.port)
        )
    }
}

impl Provider {
    /// The name as written in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Verbs => "verbs",
            Provider::Soft => "soft",
        }
    }
}

impl From<Provider> for ProviderKind {
    fn from(p: Provider) -> ProviderKind {
        match p {
            Provider::Verbs => ProviderKind::Verbs,
            Provider::Soft => ProviderKind::Soft,
        }
    }
}
