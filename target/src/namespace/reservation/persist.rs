//! The state file: where it lives, a small JSON document, written whole; and the shared
//! document's encoding.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::*;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<HostId> {
    if s.len() != 32 {
        return None;
    }
    let mut id = [0u8; 16];
    for (i, b) in id.iter_mut().enumerate() {
        *b = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(id)
}

pub fn encode(s: &State) -> String {
    value(s).to_string()
}

fn value(s: &State) -> serde_json::Value {
    let regs: Vec<serde_json::Value> = s
        .regs
        .iter()
        .map(|r| serde_json::json!({"host": hex(&r.host), "key": r.key}))
        .collect();
    let holder = s
        .holder
        .map(|(h, t)| serde_json::json!({"host": hex(&h), "type": t as u8}));
    serde_json::json!({
        "version": 1,
        "ptpl": s.ptpl,
        "generation": s.generation,
        "holder": holder,
        "registrants": regs,
    })
}

pub fn decode(text: &str) -> Result<State, String> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    state(&v)
}

fn state(v: &serde_json::Value) -> Result<State, String> {
    let bad = |what: &str| format!("bad {what}");
    if v["version"] != 1 {
        return Err(bad("version (want 1)"));
    }
    let mut s = State {
        ptpl: v["ptpl"].as_bool().ok_or_else(|| bad("ptpl"))?,
        generation: v["generation"]
            .as_u64()
            .and_then(|g| u32::try_from(g).ok())
            .ok_or_else(|| bad("generation"))?,
        ..State::default()
    };
    for r in v["registrants"]
        .as_array()
        .ok_or_else(|| bad("registrants"))?
    {
        let host = r["host"]
            .as_str()
            .and_then(unhex)
            .ok_or_else(|| bad("registrant host"))?;
        if s.regs.iter().any(|r| r.host == host) {
            return Err(bad("registrants (a host twice)"));
        }
        s.regs.push(Reg {
            host,
            key: r["key"].as_u64().ok_or_else(|| bad("registrant key"))?,
        });
    }
    if !v["holder"].is_null() {
        let h = v["holder"]["host"]
            .as_str()
            .and_then(unhex)
            .ok_or_else(|| bad("holder host"))?;
        let t = v["holder"]["type"]
            .as_u64()
            .and_then(|t| u8::try_from(t).ok())
            .and_then(ResvType::from_u8)
            .ok_or_else(|| bad("holder type"))?;
        if !s.regs.iter().any(|r| r.host == h) {
            return Err(bad("holder (not a registrant)"));
        }
        s.holder = Some((h, t));
    }
    Ok(s)
}

/// Writes `s` to `file` atomically and durably: a temporary file beside it, synced,
/// renamed over it, and the directory synced.
pub fn write(file: &Path, s: &State) -> std::io::Result<()> {
    let dir = file.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = file.with_extension("tmp");
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(encode(s).as_bytes())?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, file)?;
    std::fs::File::open(dir)?.sync_all()
}

/// Removes the file (Persist Through Power Loss turned off), durably.
pub fn remove(file: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(file) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    }
    std::fs::File::open(file.parent().unwrap_or(Path::new(".")))?.sync_all()
}

/// The document gateways share (`super::shared`): the state, its epoch (the version every
/// change increments, compared and swapped), and the last changes' notices, each with the
/// gateway that made it (another gateway delivers them to its own controllers).
pub fn encode_doc(d: &Doc) -> String {
    let log: Vec<serde_json::Value> = d
        .log
        .iter()
        .map(|e| {
            let n: Vec<serde_json::Value> = e
                .notices
                .iter()
                .map(|(h, k)| serde_json::json!([hex(h), k]))
                .collect();
            let lost: Vec<String> = e.lost.iter().map(|h| hex(h)).collect();
            serde_json::json!({"epoch": e.epoch, "writer": e.writer, "notices": n, "lost": lost})
        })
        .collect();
    serde_json::json!({
        "version": 1,
        "epoch": d.epoch,
        "state": value(&d.state),
        "log": log,
    })
    .to_string()
}

pub fn decode_doc(text: &str) -> Result<Doc, String> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let bad = |what: &str| format!("bad {what}");
    if v["version"] != 1 {
        return Err(bad("version (want 1)"));
    }
    let mut d = Doc {
        // Far below the top: a change adds one, and a fresh document starts at a time in ns.
        epoch: v["epoch"]
            .as_u64()
            .filter(|e| *e < u64::MAX / 2)
            .ok_or_else(|| bad("epoch"))?,
        state: state(&v["state"])?,
        log: Vec::new(),
    };
    for e in v["log"].as_array().ok_or_else(|| bad("log"))? {
        let mut notices = Vec::new();
        for n in e["notices"].as_array().ok_or_else(|| bad("log notices"))? {
            let h = n[0]
                .as_str()
                .and_then(unhex)
                .ok_or_else(|| bad("notice host"))?;
            let k = n[1]
                .as_u64()
                .and_then(|k| u8::try_from(k).ok())
                .ok_or_else(|| bad("notice type"))?;
            notices.push((h, k));
        }
        let mut lost = Vec::new();
        for h in e["lost"].as_array().map_or(&[][..], Vec::as_slice) {
            lost.push(h.as_str().and_then(unhex).ok_or_else(|| bad("lost host"))?);
        }
        d.log.push(LogEntry {
            epoch: e["epoch"].as_u64().ok_or_else(|| bad("log epoch"))?,
            writer: e["writer"]
                .as_str()
                .ok_or_else(|| bad("log writer"))?
                .to_owned(),
            notices,
            lost,
        });
    }
    if d.log.len() > 1024 {
        return Err(bad("log (more than 1024 entries)"));
    }
    Ok(d)
}

/// The state file of namespace `nsid` of subsystem `nqn` under `state_dir`:
/// `reservations/<nqn>-<nsid>.json` (characters a file name cannot hold become `_`).
pub fn state_file(state_dir: &Path, nqn: &str, nsid: u32) -> PathBuf {
    let name: String = nqn
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-:".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    state_dir
        .join("reservations")
        .join(format!("{name}-{nsid}.json"))
}

/// The fuzz target `reservation_state` (fuzz/fuzz_targets/): decodes `text` as a state file
/// and as a shared document, as a restart and another gateway hand them in. Panics where a
/// decoded one breaks what the rest of the code relies on: it re-encodes to a text that
/// decodes to the same, a document's log stays within its bound, a host is registered once
/// and the holder is a registrant.
#[doc(hidden)]
pub fn fuzz_persisted(text: &str) {
    let check = |s: &State| {
        assert_eq!(decode(&encode(s)).as_ref(), Ok(s));
        for (i, r) in s.regs.iter().enumerate() {
            assert!(s.regs[..i].iter().all(|o| o.host != r.host), "a host twice");
        }
        if let Some((h, _)) = s.holder {
            assert!(
                s.regs.iter().any(|r| r.host == h),
                "a holder not registered"
            );
        }
    };
    if let Ok(s) = decode(text) {
        check(&s);
    }
    if let Ok(d) = decode_doc(text) {
        assert!(
            d.log.len() <= 1024,
            "a document of {} log entries",
            d.log.len()
        );
        check(&d.state);
        assert_eq!(decode_doc(&encode_doc(&d)).as_ref(), Ok(&d));
    }
}
