//! Finding and making what an edit changes in the TOML document (`toml_edit`, comments and
//! layout kept): subsystems, namespaces, hosts' entries and listeners, and the inline tables a
//! control request's JSON becomes.

use toml_edit::{value, Array, ArrayOfTables, DocumentMut, InlineTable, Item, Table, Value};

use crate::config::{Transport, DEFAULT_TRANSPORT};

/// The table of namespace `nsid` of subsystem `nqn`.
pub(super) fn namespace_table<'a>(
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
pub(super) fn namespace_hosts<'a>(
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
pub(super) fn host_entry(
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
pub(super) fn entry_nqn(v: &Value) -> Option<&str> {
    v.as_str().or_else(|| {
        v.as_inline_table()
            .and_then(|t| t.get("nqn"))
            .and_then(Value::as_str)
    })
}

pub(super) fn no_subsystem(nqn: &str) -> String {
    format!("no subsystem {nqn}")
}

pub(super) fn strings(v: &[String]) -> Array {
    v.iter().map(String::as_str).collect()
}

/// The array of tables `key` at the top level (created if missing).
pub(super) fn array<'a>(doc: &'a mut DocumentMut, key: &str) -> &'a mut ArrayOfTables {
    let item = doc
        .entry(key)
        .or_insert(Item::ArrayOfTables(ArrayOfTables::new()));
    if !item.is_array_of_tables() {
        *item = Item::ArrayOfTables(ArrayOfTables::new());
    }
    item.as_array_of_tables_mut().expect("set just above")
}

pub(super) fn table_array<'a>(t: &'a mut Table, key: &str) -> &'a mut ArrayOfTables {
    let item = t
        .entry(key)
        .or_insert(Item::ArrayOfTables(ArrayOfTables::new()));
    if !item.is_array_of_tables() {
        *item = Item::ArrayOfTables(ArrayOfTables::new());
    }
    item.as_array_of_tables_mut().expect("set just above")
}

pub(super) fn position(subs: &ArrayOfTables, nqn: &str) -> Option<usize> {
    subs.iter()
        .position(|s| s.get("nqn").and_then(Item::as_str) == Some(nqn))
}

pub(super) fn find_subsystem<'a>(doc: &'a mut DocumentMut, nqn: &str) -> Option<&'a mut Table> {
    let subs = doc.get_mut("subsystem")?.as_array_of_tables_mut()?;
    let i = position(subs, nqn)?;
    subs.get_mut(i)
}

/// The listener `kind` names: a transport with no provider (`tcp`, `loop`: its
/// `transport`), or an RDMA provider (`verbs`, `soft`: its `provider`, under
/// `transport = "rdma"`, the default).
pub(super) fn listener_position(
    ls: &ArrayOfTables,
    kind: &str,
    address: &str,
    port: u16,
) -> Option<usize> {
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

/// A JSON object as a TOML inline table (strings, integers, booleans and nested tables).
pub(super) fn inline(
    m: &serde_json::Map<String, serde_json::Value>,
) -> Result<InlineTable, String> {
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
