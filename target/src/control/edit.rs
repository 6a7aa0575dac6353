//! Changes made through the control socket are made to the configuration file first (comments
//! and layout kept, with `toml_edit`), then the file is reloaded: the file stays the one source
//! of truth. The new file is written next to the old one, synced, and renamed over it; if the
//! reload refuses it, the old text is put back the same way.

use std::io::Write;
use std::path::Path;

use rdmablk::nvme::ana::AnaState;
use serde::Deserialize;
use toml_edit::{value, Array, ArrayOfTables, DocumentMut, InlineTable, Item, Table, Value};

use crate::config::{Transport, DEFAULT_TRANSPORT};

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

/// The table of namespace `nsid` of subsystem `nqn`.
fn namespace_table<'a>(
    doc: &'a mut DocumentMut,
    nqn: &str,
    nsid: u32,
) -> Result<&'a mut Table, String> {
    let sub = find_subsystem(doc, nqn).ok_or_else(|| no_subsystem(nqn))?;
    table_array(sub, "namespace")
        .iter_mut()
        .find(|n| n.get("nsid").and_then(Item::as_integer) == Some(i64::from(nsid)))
        .ok_or_else(|| format!("subsystem {nqn} has no namespace {nsid}"))
}

/// The `hosts` array of namespace `nsid` of subsystem `nqn`, created empty if absent.
fn namespace_hosts<'a>(
    doc: &'a mut DocumentMut,
    nqn: &str,
    nsid: u32,
) -> Result<&'a mut Array, String> {
    namespace_table(doc, nqn, nsid)?
        .entry("hosts")
        .or_insert(value(Array::new()))
        .as_array_mut()
        .ok_or_else(|| format!("subsystem {nqn} namespace {nsid}: `hosts` is not an array"))
}

/// A `hosts` entry: the NQN alone, or a one-line table with its DH-HMAC-CHAP keys.
fn host_entry(
    host: &str,
    key: &Option<String>,
    ctrl_key: &Option<String>,
) -> Result<Value, String> {
    match (key, ctrl_key) {
        (None, None) => Ok(host.into()),
        (None, Some(_)) => Err(format!(
            "host {host}: a controller key needs the host's key too (give dhchap_key)"
        )),
        (Some(k), ck) => {
            let mut t = InlineTable::new();
            t.insert("nqn", host.into());
            t.insert("dhchap_key", k.as_str().into());
            if let Some(ck) = ck {
                t.insert("dhchap_ctrl_key", ck.as_str().into());
            }
            Ok(Value::InlineTable(t))
        }
    }
}

/// The NQN of a `hosts` entry: a string, or a table with `nqn` (a host with keys).
fn entry_nqn(v: &Value) -> Option<&str> {
    v.as_str().or_else(|| {
        v.as_inline_table()
            .and_then(|t| t.get("nqn"))
            .and_then(Value::as_str)
    })
}

fn no_subsystem(nqn: &str) -> String {
    format!("no subsystem {nqn}")
}

fn strings(v: &[String]) -> Array {
    v.iter().map(String::as_str).collect()
}

/// The array of tables `key` at the top level (created if missing).
fn array<'a>(doc: &'a mut DocumentMut, key: &str) -> &'a mut ArrayOfTables {
    let item = doc
        .entry(key)
        .or_insert(Item::ArrayOfTables(ArrayOfTables::new()));
    if !item.is_array_of_tables() {
        *item = Item::ArrayOfTables(ArrayOfTables::new());
    }
    item.as_array_of_tables_mut().expect("set just above")
}

fn table_array<'a>(t: &'a mut Table, key: &str) -> &'a mut ArrayOfTables {
    let item = t
        .entry(key)
        .or_insert(Item::ArrayOfTables(ArrayOfTables::new()));
    if !item.is_array_of_tables() {
        *item = Item::ArrayOfTables(ArrayOfTables::new());
    }
    item.as_array_of_tables_mut().expect("set just above")
}

fn position(subs: &ArrayOfTables, nqn: &str) -> Option<usize> {
    subs.iter()
        .position(|s| s.get("nqn").and_then(Item::as_str) == Some(nqn))
}

fn find_subsystem<'a>(doc: &'a mut DocumentMut, nqn: &str) -> Option<&'a mut Table> {
    let subs = doc.get_mut("subsystem")?.as_array_of_tables_mut()?;
    let i = position(subs, nqn)?;
    subs.get_mut(i)
}

/// The listener `kind` names: a transport with no provider (`tcp`, `loop`: its
/// `transport`), or an RDMA provider (`verbs`, `soft`: its `provider`, under
/// `transport = "rdma"`, the default).
fn listener_position(ls: &ArrayOfTables, kind: &str, address: &str, port: u16) -> Option<usize> {
    ls.iter().position(|l| {
        let transport = l.get("transport").and_then(Item::as_str);
        let transport = transport.unwrap_or(DEFAULT_TRANSPORT);
        let provider = l.get("provider").and_then(Item::as_str);
        let same_kind = match Transport::named(kind) {
            Some(_) => transport == kind && provider.is_none(),
            None => transport == "rdma" && provider == Some(kind),
        };
        same_kind
            && l.get("address").and_then(Item::as_str) == Some(address)
            && l.get("port")
                .and_then(Item::as_integer)
                .unwrap_or(i64::from(crate::config::DEFAULT_PORT))
                == i64::from(port)
    })
}

/// The file's metadata if it may be changed; a read-only file is refused: a change made only
/// to the running target would be lost at the next restart or reload.
pub fn writable(path: &Path) -> Result<std::fs::Metadata, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if meta.permissions().readonly() {
        return Err(format!(
            "{} is read-only: changes are refused so that the file and the running target \
             never disagree (make it writable, or edit it and reload)",
            path.display()
        ));
    }
    Ok(meta)
}

/// A JSON object as a TOML inline table (strings, integers, booleans and nested tables).
fn inline(m: &serde_json::Map<String, serde_json::Value>) -> Result<InlineTable, String> {
    let mut t = InlineTable::new();
    for (k, v) in m {
        let v: Value = match v {
            serde_json::Value::String(s) => s.as_str().into(),
            serde_json::Value::Bool(b) => (*b).into(),
            serde_json::Value::Number(n) => match n.as_i64() {
                Some(i) => i.into(),
                None => n
                    .as_f64()
                    .ok_or(format!("backend.{k}: not a number"))?
                    .into(),
            },
            serde_json::Value::Object(o) => Value::InlineTable(inline(o)?),
            other => {
                return Err(format!(
                    "backend.{k}: {other} cannot be written in TOML here"
                ))
            }
        };
        t.insert(k, v);
    }
    Ok(t)
}

/// Writes `text` to `path` atomically: a temporary file beside it, fsync, rename, fsync of the
/// directory. A read-only file is refused (the change would not survive a restart).
pub fn write_atomically(path: &Path, text: &str) -> Result<(), String> {
    let meta = writable(path)?;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().to_string());
    let tmp = dir.join(format!(".{}.rdmablk-tmp", name.unwrap_or_default()));
    let io = |e: std::io::Error| format!("writing {}: {e}", tmp.display());
    {
        let mut f = std::fs::File::create(&tmp).map_err(io)?;
        f.set_permissions(meta.permissions()).map_err(io)?;
        f.write_all(text.as_bytes()).map_err(io)?;
        f.sync_all().map_err(io)?;
    }
    std::fs::rename(&tmp, path).map_err(|e| format!("renaming over {}: {e}", path.display()))?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"# the comment stays
[[listener]]
provider = "soft"
address = "127.0.0.1"
port = 4420

[arena]
bytes = "64MiB"   # and this one

[[subsystem]]
nqn = "nqn.2026-11.io.rdmablk:a"
hosts = ["nqn.2026-11.io.rdmablk:h1"]

[[subsystem.namespace]]
nsid = 1
backend = { kind = "ram", size = "8MiB" }
"#;

    fn edit(json: &str, text: &str) -> Result<String, String> {
        apply(text, &serde_json::from_str(json).expect("request"))
    }

    #[test]
    fn tcp_listeners_are_added_and_removed_by_their_transport() {
        let add = r#"{"cmd":"listener-add","provider":"tcp","address":"127.0.0.1","port":4420}"#;
        let t = edit(add, BASE).unwrap();
        assert!(t.contains("transport = \"tcp\""), "{t}");
        let cfg = crate::config::Config::from_str(&t).expect("still a valid configuration");
        assert_eq!(cfg.listeners.len(), 2);
        assert_eq!(
            cfg.listeners[1].transport,
            crate::config::Transport::named("tcp").unwrap()
        );
        assert_eq!(cfg.listeners[1].provider, None);
        // The soft listener on the same address and port is another listener.
        assert!(edit(add, &t).unwrap_err().contains("exists already"));
        let rm = r#"{"cmd":"listener-remove","provider":"tcp","address":"127.0.0.1","port":4420}"#;
        let t = edit(rm, &t).unwrap();
        let cfg = crate::config::Config::from_str(&t).unwrap();
        assert_eq!(cfg.listeners.len(), 1);
        assert_eq!(
            cfg.listeners[0].transport,
            crate::config::Transport::named("rdma").unwrap()
        );
        assert!(edit(rm, &t).unwrap_err().contains("no listener tcp"));
    }

    #[test]
    fn edits_keep_comments_and_parse_as_configs() {
        let t = edit(
            r#"{"cmd":"namespace-add","nqn":"nqn.2026-11.io.rdmablk:a","nsid":2,
                "backend":{"kind":"ram","size":"4MiB"}}"#,
            BASE,
        )
        .unwrap();
        let t = edit(
            r#"{"cmd":"host-add","nqn":"nqn.2026-11.io.rdmablk:a","host":"nqn.2026-11.io.rdmablk:h2"}"#,
            &t,
        )
        .unwrap();
        let t = edit(
            r#"{"cmd":"subsystem-add","nqn":"nqn.2026-11.io.rdmablk:b","allow_any_host":true}"#,
            &t,
        )
        .unwrap();
        let t = edit(
            r#"{"cmd":"listener-add","provider":"soft","address":"127.0.0.1","port":4421}"#,
            &t,
        )
        .unwrap();
        assert!(t.contains("# the comment stays") && t.contains("# and this one"));
        let cfg = crate::config::Config::from_str(&t).expect("still a valid configuration");
        assert_eq!(cfg.subsystems.len(), 2);
        assert_eq!(cfg.subsystems[0].namespaces.len(), 2);
        assert_eq!(cfg.subsystems[0].hosts.len(), 2);
        assert_eq!(cfg.listeners.len(), 2);
        let t = edit(
            r#"{"cmd":"namespace-remove","nqn":"nqn.2026-11.io.rdmablk:a","nsid":1}"#,
            &t,
        )
        .unwrap();
        let t = edit(
            r#"{"cmd":"subsystem-remove","nqn":"nqn.2026-11.io.rdmablk:b"}"#,
            &t,
        )
        .unwrap();
        let cfg = crate::config::Config::from_str(&t).unwrap();
        assert_eq!(cfg.subsystems.len(), 1);
        assert_eq!(cfg.subsystems[0].namespaces[0].nsid, 2);
    }

    #[test]
    fn host_add_with_a_tls_psk_writes_a_table_the_config_accepts() {
        const PSK: &str = "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:";
        let add = |host: &str, t: &str| {
            edit(
                &format!(
                    r#"{{"cmd":"host-add","nqn":"nqn.2026-11.io.rdmablk:a","host":"{host}",
                        "tls_psk":"{PSK}"}}"#
                ),
                t,
            )
        };
        let t = add("nqn.2026-11.io.rdmablk:h9", BASE).unwrap();
        // A listed host gets the key (its entry replaced).
        let t = add("nqn.2026-11.io.rdmablk:h1", &t).unwrap();
        let cfg = crate::config::Config::from_str(&t).expect("a valid configuration");
        let hosts = &cfg.subsystems[0].hosts;
        assert!(hosts.iter().all(|h| h.tls_psk().unwrap().is_some()), "{t}");
        let bad = add("h2", BASE).unwrap().replace("VRLb", "XRLb");
        let e = crate::config::Config::from_str(&bad)
            .unwrap_err()
            .to_string();
        assert!(e.contains("tls_psk") && e.contains("CRC"), "{e}");
    }

    #[test]
    fn host_add_with_keys_writes_a_table_the_config_accepts() {
        const KEY: &str = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";
        let t = edit(
            &format!(
                r#"{{"cmd":"host-add","nqn":"nqn.2026-11.io.rdmablk:a","host":"blktests-host",
                    "dhchap_key":"{KEY}","dhchap_ctrl_key":"{KEY}"}}"#
            ),
            BASE,
        )
        .unwrap();
        assert!(
            t.contains(r#"{ nqn = "blktests-host", dhchap_key = "#),
            "{t}"
        );
        // keys given to a listed host replace its entry (a host list is never empty)
        let t = edit(
            &format!(
                r#"{{"cmd":"host-add","nqn":"nqn.2026-11.io.rdmablk:a",
                    "host":"nqn.2026-11.io.rdmablk:h1","dhchap_key":"{KEY}"}}"#
            ),
            &t,
        )
        .unwrap();
        assert!(!t.contains(r#"["nqn.2026-11.io.rdmablk:h1""#), "{t}");
        let e = edit(
            r#"{"cmd":"host-add","nqn":"nqn.2026-11.io.rdmablk:a","host":"blktests-host"}"#,
            &t,
        )
        .unwrap_err();
        assert!(e.contains("already"), "{e}");
        let t = edit(
            r#"{"cmd":"namespace-add","nqn":"nqn.2026-11.io.rdmablk:a","nsid":2,
                "uuid":"91fdba0d-f87b-4c25-b80f-db7be1418b9e",
                "backend":{"kind":"ram","size":"4MiB"}}"#,
            &t,
        )
        .unwrap();
        let cfg = crate::config::Config::from_str(&t).expect("still a valid configuration");
        let hosts = &cfg.subsystems[0].hosts;
        assert_eq!(hosts.len(), 2);
        assert!(hosts[0].has_inline_secret() && hosts[1].has_inline_secret());
        assert_eq!(hosts[1].nqn(), "blktests-host");
        assert!(cfg.subsystems[0].namespaces[1].uuid.is_some());
        let t = edit(
            r#"{"cmd":"host-remove","nqn":"nqn.2026-11.io.rdmablk:a","host":"blktests-host"}"#,
            &t,
        )
        .unwrap();
        assert!(
            !t.contains("blktests-host") && t.contains("rdmablk:h1"),
            "{t}"
        );
        let e = edit(
            &format!(
                r#"{{"cmd":"host-add","nqn":"nqn.2026-11.io.rdmablk:a","host":"h",
                    "dhchap_ctrl_key":"{KEY}"}}"#
            ),
            BASE,
        )
        .unwrap_err();
        assert!(e.contains("needs the host's key"), "{e}");
    }

    #[test]
    fn namespace_host_edits_show_and_hide_a_namespace() {
        const A: &str = "nqn.2026-11.io.rdmablk:a";
        const H1: &str = "nqn.2026-11.io.rdmablk:h1";
        let add = format!(r#"{{"cmd":"namespace-host-add","nqn":"{A}","nsid":1,"host":"{H1}"}}"#);
        let t = edit(&add, BASE).unwrap();
        let cfg = crate::config::Config::from_str(&t).expect("still a valid configuration");
        assert_eq!(
            cfg.subsystems[0].namespaces[0].hosts,
            Some(vec![H1.to_owned()])
        );
        assert!(edit(&add, &t).unwrap_err().contains("already"));
        let rm = add.replace("namespace-host-add", "namespace-host-remove");
        let t = edit(&rm, &t).unwrap();
        // The last host removed: no host sees it (not every host).
        let cfg = crate::config::Config::from_str(&t).unwrap();
        assert_eq!(cfg.subsystems[0].namespaces[0].hosts, Some(Vec::new()));
        assert!(edit(&rm, &t).unwrap_err().contains("does not list"));
        let e = edit(&add.replace("\"nsid\":1", "\"nsid\":9"), BASE).unwrap_err();
        assert!(e.contains("no namespace 9"), "{e}");
    }

    #[test]
    fn namespace_qos_sets_and_clears_the_limits() {
        let set = r#"{"cmd":"namespace-qos","nqn":"nqn.2026-11.io.rdmablk:a","nsid":1,
                      "iops":2000,"write_bandwidth":"100MiB"}"#;
        let t = edit(set, BASE).unwrap();
        let cfg = crate::config::Config::from_str(&t).expect("still a valid configuration");
        let q = cfg.subsystems[0].namespaces[0].qos;
        assert_eq!(q.iops, Some(2000));
        assert_eq!(q.write_bandwidth.map(|b| b.bytes()), Some(100 << 20));
        assert_eq!(q.bandwidth, None);
        let clear = r#"{"cmd":"namespace-qos","nqn":"nqn.2026-11.io.rdmablk:a","nsid":1}"#;
        let t = edit(clear, &t).unwrap();
        assert!(!t.contains("qos"), "{t}");
        let e = edit(&set.replace("100MiB", "100MB"), BASE).unwrap_err();
        assert!(e.contains("write_bandwidth"), "{e}");
        // --per-host: the host_qos table, the namespace's own qos untouched.
        let per_host = set.replace(r#""nsid":1,"#, r#""nsid":1,"per_host":true,"#);
        let t = edit(&per_host, BASE).unwrap();
        let cfg = crate::config::Config::from_str(&t).expect("still a valid configuration");
        let n = &cfg.subsystems[0].namespaces[0];
        assert_eq!((n.host_qos.iops, n.qos.iops), (Some(2000), None));
    }

    #[test]
    fn impossible_edits_say_why() {
        let e = edit(r#"{"cmd":"subsystem-remove","nqn":"nqn.x:y"}"#, BASE).unwrap_err();
        assert!(e.contains("no subsystem"), "{e}");
        let e = edit(
            r#"{"cmd":"namespace-add","nqn":"nqn.2026-11.io.rdmablk:a","nsid":1,"backend":{"kind":"ram","size":"1MiB"}}"#,
            BASE,
        )
        .unwrap_err();
        assert!(e.contains("already"), "{e}");
        assert!(serde_json::from_str::<Edit>(r#"{"cmd":"nope"}"#).is_err());
    }
}
