//! Changes made through the control socket are made to the configuration file first (comments
//! and layout kept, with `toml_edit`), then the file is reloaded: the file stays the one source
//! of truth. The new file is written next to the old one, synced, and renamed over it; if the
//! reload refuses it, the old text is put back the same way.
//!
//! The document's tables are found and made in `edit/document.rs`; the file is checked and
//! written in `edit/file.rs`.

mod document;
mod file;

use rdmablk::nvme::ana::AnaState;
use serde::Deserialize;
use toml_edit::{value, Array, DocumentMut, InlineTable, Item, Table};

use crate::config::Transport;
use document::{
    array, entry_nqn, find_subsystem, host_entry, inline, listener_position, namespace_hosts,
    namespace_table, no_subsystem, position, strings, table_array,
};

pub use file::{writable, write_atomically};

/// One change to the configuration, as a control request names it.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(tag = "cmd", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Edit {
    SubsystemAdd {
        nqn: String,
        #[serde(default)]
        allow_any_host: bool,
        #[serde(default)]
        hosts: Vec<String>,
    },
    SubsystemRemove {
        nqn: String,
    },
    NamespaceAdd {
        nqn: String,
        nsid: u32,
        #[serde(default)]
        block_size: Option<u32>,
        /// The namespace UUID (identification descriptor), `xxxxxxxx-xxxx-...`.
        #[serde(default)]
        uuid: Option<String>,
        /// The backend table as in the file: `{"kind": "file", "path": "..."}`.
        backend: serde_json::Map<String, serde_json::Value>,
    },
    NamespaceRemove {
        nqn: String,
        nsid: u32,
    },
    /// Shows a namespace to one more host (a namespace without `hosts` gets a list of one).
    NamespaceHostAdd {
        nqn: String,
        nsid: u32,
        host: String,
    },
    /// Hides a namespace from a host (the last one removed leaves `hosts = []`: no host).
    NamespaceHostRemove {
        nqn: String,
        nsid: u32,
        host: String,
    },
    /// Sets a namespace's QoS limits: the ones given replace the `qos` table (none given:
    /// no limits). Bandwidths as in the file (`"100MiB"`), per second.
    NamespaceQos {
        nqn: String,
        nsid: u32,
        /// The `host_qos` table (each host's own limits) instead of `qos`.
        #[serde(default)]
        per_host: bool,
        #[serde(default)]
        iops: Option<u64>,
        #[serde(default)]
        bandwidth: Option<String>,
        #[serde(default)]
        read_bandwidth: Option<String>,
        #[serde(default)]
        write_bandwidth: Option<String>,
    },
    HostAdd {
        nqn: String,
        host: String,
        /// The host's DH-HMAC-CHAP secret (`DHHC-1:..`): the host must authenticate.
        #[serde(default)]
        dhchap_key: Option<String>,
        /// The controller's secret, for a host that authenticates the controller too.
        #[serde(default)]
        dhchap_ctrl_key: Option<String>,
        /// The host's NVMe/TCP TLS PSK (`NVMeTLSkey-1:..`) for this subsystem.
        #[serde(default)]
        tls_psk: Option<String>,
    },
    HostRemove {
        nqn: String,
        host: String,
    },
    ListenerAdd {
        provider: String,
        address: String,
        #[serde(default = "default_port")]
        port: u16,
    },
    ListenerRemove {
        provider: String,
        address: String,
        #[serde(default = "default_port")]
        port: u16,
    },
    /// Sets one ANA group's state on one listener (`[[listener]] ana`).
    AnaSet {
        provider: String,
        address: String,
        #[serde(default = "default_port")]
        port: u16,
        group: u32,
        state: String,
    },
}

fn default_port() -> u16 {
    crate::config::DEFAULT_PORT
}

/// Applies `edit` to the document text `text`; the new text, or what is wrong.
pub fn apply(text: &str, edit: &Edit) -> Result<String, String> {
    let mut doc: DocumentMut = text
        .parse()
        .map_err(|e| format!("the configuration file does not parse: {e}"))?;
    match edit {
        Edit::SubsystemAdd {
            nqn,
            allow_any_host,
            hosts,
        } => {
            if find_subsystem(&mut doc, nqn).is_some() {
                return Err(format!("subsystem {nqn} exists already"));
            }
            let mut t = Table::new();
            t.insert("nqn", value(nqn.as_str()));
            if *allow_any_host {
                t.insert("allow_any_host", value(true));
            } else {
                t.insert("hosts", value(strings(hosts)));
            }
            array(&mut doc, "subsystem").push(t);
        }
        Edit::SubsystemRemove { nqn } => {
            let subs = array(&mut doc, "subsystem");
            let i = position(subs, nqn).ok_or_else(|| no_subsystem(nqn))?;
            subs.remove(i);
        }
        Edit::NamespaceAdd {
            nqn,
            nsid,
            block_size,
            uuid,
            backend,
        } => {
            let sub = find_subsystem(&mut doc, nqn).ok_or_else(|| no_subsystem(nqn))?;
            let nss = table_array(sub, "namespace");
            if nss
                .iter()
                .any(|n| n.get("nsid").and_then(Item::as_integer) == Some(i64::from(*nsid)))
            {
                return Err(format!("subsystem {nqn} has a namespace {nsid} already"));
            }
            let mut t = Table::new();
            t.insert("nsid", value(i64::from(*nsid)));
            if let Some(bs) = block_size {
                t.insert("block_size", value(i64::from(*bs)));
            }
            if let Some(u) = uuid {
                t.insert("uuid", value(u.as_str()));
            }
            t.insert("backend", value(inline(backend)?));
            nss.push(t);
        }
        Edit::NamespaceRemove { nqn, nsid } => {
            let sub = find_subsystem(&mut doc, nqn).ok_or_else(|| no_subsystem(nqn))?;
            let nss = table_array(sub, "namespace");
            let i = nss
                .iter()
                .position(|n| n.get("nsid").and_then(Item::as_integer) == Some(i64::from(*nsid)))
                .ok_or_else(|| format!("subsystem {nqn} has no namespace {nsid}"))?;
            nss.remove(i);
        }
        Edit::NamespaceHostAdd { nqn, nsid, host } => {
            let hosts = namespace_hosts(&mut doc, nqn, *nsid)?;
            if hosts.iter().any(|h| h.as_str() == Some(host.as_str())) {
                return Err(format!(
                    "subsystem {nqn} namespace {nsid} is visible to {host} already"
                ));
            }
            hosts.push(host.as_str());
        }
        Edit::NamespaceHostRemove { nqn, nsid, host } => {
            let hosts = namespace_hosts(&mut doc, nqn, *nsid)?;
            let i = hosts
                .iter()
                .position(|h| h.as_str() == Some(host.as_str()))
                .ok_or_else(|| {
                    format!("subsystem {nqn} namespace {nsid} does not list {host} in its hosts")
                })?;
            hosts.remove(i);
        }
        Edit::NamespaceQos {
            nqn,
            nsid,
            per_host,
            iops,
            bandwidth,
            read_bandwidth,
            write_bandwidth,
        } => {
            let ns = namespace_table(&mut doc, nqn, *nsid)?;
            let mut q = InlineTable::new();
            if let Some(n) = iops {
                q.insert(
                    "iops",
                    i64::try_from(*n).map_err(|_| "iops too large")?.into(),
                );
            }
            for (k, v) in [
                ("bandwidth", bandwidth),
                ("read_bandwidth", read_bandwidth),
                ("write_bandwidth", write_bandwidth),
            ] {
                if let Some(v) = v {
                    crate::config::ByteSize::parse(v).map_err(|e| format!("{k}: {e}"))?;
                    q.insert(k, v.as_str().into());
                }
            }
            let key = if *per_host { "host_qos" } else { "qos" };
            if q.is_empty() {
                ns.remove(key);
            } else {
                ns.insert(key, value(q));
            }
        }
        Edit::HostAdd {
            nqn,
            host,
            dhchap_key,
            dhchap_ctrl_key,
            tls_psk,
        } => {
            let sub = find_subsystem(&mut doc, nqn).ok_or_else(|| no_subsystem(nqn))?;
            if sub.get("allow_any_host").and_then(Item::as_bool) == Some(true) {
                return Err(format!(
                    "subsystem {nqn} allows any host (set allow_any_host = false first)"
                ));
            }
            let hosts = sub
                .entry("hosts")
                .or_insert(value(Array::new()))
                .as_array_mut()
                .ok_or("`hosts` is not an array")?;
            let mut entry = host_entry(host, dhchap_key, dhchap_ctrl_key)?;
            if let Some(k) = tls_psk {
                crate::config::add_tls_psk(&mut entry, host, k);
            }
            let listed = hosts
                .iter()
                .position(|h| entry_nqn(h) == Some(host.as_str()));
            match listed {
                // With keys, a listed host gets them (its entry is replaced): the host list
                // may never be empty, so "remove, then add with keys" cannot be the way.
                Some(i) if dhchap_key.is_some() || tls_psk.is_some() => {
                    hosts.replace(i, entry);
                }
                Some(_) => return Err(format!("subsystem {nqn} allows {host} already")),
                None => hosts.push(entry),
            }
        }
        Edit::HostRemove { nqn, host } => {
            let sub = find_subsystem(&mut doc, nqn).ok_or_else(|| no_subsystem(nqn))?;
            let hosts = sub
                .get_mut("hosts")
                .and_then(Item::as_array_mut)
                .ok_or_else(|| format!("subsystem {nqn} has no host list"))?;
            let i = hosts
                .iter()
                .position(|h| entry_nqn(h) == Some(host.as_str()))
                .ok_or_else(|| format!("subsystem {nqn} does not list {host}"))?;
            hosts.remove(i);
        }
        Edit::ListenerAdd {
            provider,
            address,
            port,
        } => {
            let ls = array(&mut doc, "listener");
            if listener_position(ls, provider, address, *port).is_some() {
                return Err(format!(
                    "listener {provider} {address}:{port} exists already"
                ));
            }
            let mut t = Table::new();
            match Transport::named(provider) {
                // NVMe/TCP and loop listeners name their transport and have no provider.
                Some(_) => t.insert("transport", value(provider.as_str())),
                None => t.insert("provider", value(provider.as_str())),
            };
            t.insert("address", value(address.as_str()));
            t.insert("port", value(i64::from(*port)));
            ls.push(t);
        }
        Edit::ListenerRemove {
            provider,
            address,
            port,
        } => {
            let ls = array(&mut doc, "listener");
            let i = listener_position(ls, provider, address, *port)
                .ok_or_else(|| format!("no listener {provider} {address}:{port}"))?;
            ls.remove(i);
        }
        Edit::AnaSet {
            provider,
            address,
            port,
            group,
            state,
        } => {
            crate::config::parse_ana_group(&group.to_string())?;
            if AnaState::from_name(state).is_none() {
                return Err(format!(
                    "{state:?} is not an ANA state (use {})",
                    crate::config::ana_state_names()
                ));
            }
            let ls = array(&mut doc, "listener");
            let i = listener_position(ls, provider, address, *port)
                .ok_or_else(|| format!("no listener {provider} {address}:{port}"))?;
            let l = ls.get_mut(i).ok_or("listener vanished")?;
            let ana = l
                .entry("ana")
                .or_insert(value(InlineTable::new()))
                .as_inline_table_mut()
                .ok_or("the listener's `ana` is not an inline table ({ 1 = \"optimized\" })")?;
            ana.insert(group.to_string(), state.as_str().into());
        }
    }
    Ok(doc.to_string())
}

#[cfg(test)]
mod tests;
