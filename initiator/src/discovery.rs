//! Discovery: ask a target's discovery controller what it serves, as `nvme discover` does.
//!
//! ```no_run
//! for e in rdmablk_initiator::discover("rdma://10.0.0.2:4420")? {
//!     if let Some(url) = e.url() {
//!         println!("{} at {url}", e.subnqn);
//!     }
//! }
//! # Ok::<(), rdmablk_initiator::Error>(())
//! ```
//!
//! The discovery URL is `SCHEME://HOST:PORT` (`rdma`, `soft`, `tcp`, `loop`: the well-known
//! discovery NQN is implied), or names a discovery NQN: `rdma://HOST:PORT/NQN`. One admin queue is
//! connected (KATO 0), enabled, the Discovery Log Page read in 4 KiB pieces (header first,
//! then the rest, read again if the generation counter moved meanwhile), and the controller is
//! shut down.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use rdmablk::fabric::ProviderKind;
use rdmablk::nvme::discovery::{
    decode_log, subtype, DiscoveryLogEntry, DiscoveryLogHeader, DISCOVERY_RECORD_LEN,
    MAX_LOG_ENTRIES,
};
use rdmablk::nvme::log_page::lid;
use rdmablk::nvme::nqn::DISCOVERY_NQN;
use rdmablk::nvme::properties as props;
use rdmablk::nvme::{fabrics, Cap, GetLogPage};

use crate::error::{Error, Result};
use crate::options::ConnectOptions;
use crate::queue::Queue;
use crate::session::{Setup, ADMIN_ENTRIES};
use crate::stats::Stats;
use crate::transport::{QueueParams, Transport};
use crate::url::TargetUrl;

/// Bytes of the log read per Get Log Page (what libnvme uses: any MDTS allows it).
const CHUNK: usize = 4096;
/// Reads of the whole log before giving up while its generation keeps changing.
const ATTEMPTS: usize = 4;

/// One entry of a target's discovery log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoveryEntry {
    /// The fabric the entry is reachable over: the provider the discovery ran on, for RDMA
    /// entries (a soft-provider target lists its soft listeners as RDMA; verbs when the
    /// discovery ran over NVMe/TCP).
    pub provider: Option<ProviderKind>,
    /// The transport of the entry, if this initiator speaks it (RDMA with `provider`, TCP).
    pub transport: Option<Transport>,
    /// What it is (NVMe subsystem, referral to another discovery service ...).
    pub kind: EntryKind,
    /// The address, when TRADDR/TRSVCID are an IP address and a port.
    pub addr: Option<SocketAddr>,
    pub subnqn: String,
    pub portid: u16,
    /// The raw entry.
    pub raw: DiscoveryLogEntry,
}

/// SUBTYPE of an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// An NVM subsystem: connect to it.
    Subsystem,
    /// Another discovery service.
    Referral,
    /// The discovery subsystem answering (TP 8013).
    CurrentDiscovery,
    Other(u8),
}

impl DiscoveryEntry {
    /// An entry of the log of a discovery controller reached over `via`.
    fn from_raw(raw: DiscoveryLogEntry, via: Transport) -> DiscoveryEntry {
        let kind = match raw.subtype {
            subtype::NVME => EntryKind::Subsystem,
            subtype::REFERRAL => EntryKind::Referral,
            subtype::CURRENT_DISCOVERY => EntryKind::CurrentDiscovery,
            o => EntryKind::Other(o),
        };
        let addr = match (raw.traddr.parse::<IpAddr>(), raw.trsvcid.parse::<u16>()) {
            (Ok(ip), Ok(port)) => Some(SocketAddr::new(ip, port)),
            _ => None,
        };
        let transport = Transport::of_entry(raw.trtype, via);
        DiscoveryEntry {
            provider: transport.and_then(Transport::provider),
            transport,
            kind,
            addr,
            subnqn: raw.subnqn.clone(),
            portid: raw.portid,
            raw,
        }
    }

    /// The URL [`crate::Controller::connect`] takes for this entry (`None` for a transport
    /// this initiator does not speak or an address it cannot parse).
    pub fn url(&self) -> Option<String> {
        let scheme = self.transport?.scheme();
        let addr = self.addr?;
        Some(format!("{scheme}://{addr}/{}", self.subnqn))
    }
}

/// Reads the discovery log of the target at `url` with default options.
pub fn discover(url: &str) -> Result<Vec<DiscoveryEntry>> {
    discover_with(url, ConnectOptions::default())
}

/// [`discover`] with `opts` (host NQN, timeouts); query parameters of `url` override them.
pub fn discover_with(url: &str, mut opts: ConnectOptions) -> Result<Vec<DiscoveryEntry>> {
    let full = with_discovery_nqn(url);
    let url = TargetUrl::parse_with(&full, &mut opts)?;
    opts.validate()?;
    let pool = url.transport.open_pool(url.addr, &opts, 2 * CHUNK)?;
    let fabric = url.transport.open(&url.subnqn, &opts, &pool)?;
    let stats = Arc::new(Stats::default());
    let setup = Setup {
        url: &url,
        opts: &opts,
        fabric: &*fabric,
        pool: &pool,
        stats: &stats,
    };
    let mut admin = Queue::connect(
        &*fabric,
        &QueueParams {
            addr: url.addr,
            qid: 0,
            entries: ADMIN_ENTRIES,
            in_capsule_bytes: 0,
            max_transfer_bytes: 0,
            connect_timeout: opts.connect_timeout(),
        },
        opts.connect_timeout(),
        stats.clone(),
    )?;
    admin.set_poll_spin(opts.poll_spin(url.transport));
    setup.fabrics_connect(&mut admin, 0, ADMIN_ENTRIES - 1, fabrics::CNTLID_DYNAMIC, 0)?;
    let cap = Cap(setup.prop_get(&mut admin, props::CAP)?);
    setup.enable(&mut admin, cap)?;
    let log = read_log(&setup, &mut admin);
    setup.shutdown(&mut admin);
    let (_, bytes) = log?;
    let (hdr, raw) = decode_log(&bytes).map_err(|e| Error::Protocol {
        what: e.to_string(),
    })?;
    let entries: Vec<_> = raw
        .into_iter()
        .map(|e| DiscoveryEntry::from_raw(e, url.transport))
        .collect();
    tracing::debug!(url = %url, genctr = hdr.genctr, entries = entries.len(), "discovered");
    Ok(entries)
}

/// `scheme://host:port` gets the well-known discovery NQN; a URL with a path keeps its own.
fn with_discovery_nqn(url: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let after_scheme = base.split_once("://").map_or(base, |(_, r)| r);
    let mut out = match after_scheme.split_once('/') {
        Some((_, nqn)) if !nqn.is_empty() => base.to_string(),
        _ => format!("{}/{DISCOVERY_NQN}", base.trim_end_matches('/')),
    };
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

/// The header and the whole log, consistent (same generation before and after).
fn read_log(setup: &Setup<'_>, q: &mut Queue) -> Result<(DiscoveryLogHeader, Vec<u8>)> {
    for _ in 0..ATTEMPTS {
        let head = get_log(setup, q, 0, DISCOVERY_RECORD_LEN)?;
        let hdr = DiscoveryLogHeader::decode(&head).map_err(|e| Error::Protocol {
            what: e.to_string(),
        })?;
        if hdr.numrec > MAX_LOG_ENTRIES {
            return Err(Error::Protocol {
                what: format!(
                    "discovery log claims {} entries (at most {MAX_LOG_ENTRIES} are read)",
                    hdr.numrec
                ),
            });
        }
        let total = DISCOVERY_RECORD_LEN * (hdr.numrec as usize + 1);
        let mut log = Vec::with_capacity(total);
        while log.len() < total {
            let n = (total - log.len()).min(CHUNK);
            log.extend_from_slice(&get_log(setup, q, log.len() as u64, n)?);
        }
        let again = DiscoveryLogHeader::decode(&log).map_err(|e| Error::Protocol {
            what: e.to_string(),
        })?;
        if again.genctr == hdr.genctr && again.numrec == hdr.numrec {
            return Ok((hdr, log));
        }
        tracing::debug!(
            before = hdr.genctr,
            after = again.genctr,
            "discovery log changed while read; reading again"
        );
    }
    Err(Error::Protocol {
        what: format!("the discovery log kept changing over {ATTEMPTS} reads"),
    })
}

fn get_log(setup: &Setup<'_>, q: &mut Queue, offset: u64, len: usize) -> Result<Vec<u8>> {
    let sqe = GetLogPage::new(lid::DISCOVERY, 0, offset, len as u64).to_sqe(0);
    let (_, data) = setup.admin_cmd(q, sqe, Some((false, Vec::new(), len)), "Get Log Page")?;
    let mut data = data.unwrap_or_default();
    data.truncate(len);
    if data.len() < len {
        return Err(Error::Protocol {
            what: format!("Get Log Page returned {} of {len} bytes", data.len()),
        });
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::with_discovery_nqn;

    #[test]
    fn discovery_urls_get_the_well_known_nqn() {
        let d = "nqn.2014-08.org.nvmexpress.discovery";
        assert_eq!(
            with_discovery_nqn("rdma://10.0.0.1:4420"),
            format!("rdma://10.0.0.1:4420/{d}")
        );
        assert_eq!(
            with_discovery_nqn("soft://h:1/?hostnqn=x"),
            format!("soft://h:1/{d}?hostnqn=x")
        );
        assert_eq!(
            with_discovery_nqn("rdma://h:1/nqn.2014-08.org.nvmexpress:uuid:1"),
            "rdma://h:1/nqn.2014-08.org.nvmexpress:uuid:1"
        );
    }
}
