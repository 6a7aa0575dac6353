//! Checks of `[[listener]]`: each once, its transport's own keys, its port and its ANA
//! states (and the ANA names the messages offer).

use std::collections::HashSet;

use rdmablk::nvme::ana::AnaState;

use super::Checker;
use crate::config::{Config, ANA_GROUP_MAX};

pub(super) fn check_listeners(cfg: &Config, c: &mut Checker) {
    if cfg.listeners.is_empty() {
        c.fail(
            "listener",
            "no listener is configured (add a [[listener]] with provider, address and port)",
        );
    }
    let mut seen = HashSet::new();
    for (i, l) in cfg.listeners.iter().enumerate() {
        if !seen.insert(l.key()) {
            c.fail(
                format!("listener[{i}]"),
                format!("{} is listed twice (remove the duplicate)", l.describe()),
            );
        }
        if let Err((key, why)) = l.transport.kind().check_listener(l) {
            c.fail(format!("listener[{i}].{key}"), why);
        }
        if l.port == 0 {
            c.fail(
                format!("listener[{i}].port"),
                "0 is not a port hosts can be told (use 4420, the NVMe-oF port, or another)",
            );
        }
        for (group, state) in &l.ana {
            let key = format!("listener[{i}].ana.{group}");
            if let Err(e) = parse_ana_group(group) {
                c.fail(key.clone(), e);
            }
            if AnaState::from_name(state).is_none() {
                c.fail(
                    key,
                    format!("{state:?} is not an ANA state (use {})", ana_state_names()),
                );
            }
        }
    }
}

/// An ANA group ID as a `[[listener]] ana` key writes it.
pub fn parse_ana_group(key: &str) -> Result<u32, String> {
    match key.parse::<u32>() {
        Ok(g) if (1..=ANA_GROUP_MAX).contains(&g) => Ok(g),
        _ => Err(format!(
            "{key:?} is not an ANA group ID (use 1 to {ANA_GROUP_MAX}, as in ana = {{ 1 = \"optimized\" }})"
        )),
    }
}

/// The ANA state names a config may use, for messages.
pub fn ana_state_names() -> String {
    let names: Vec<String> = AnaState::ALL
        .iter()
        .map(|s| format!("\"{}\"", s.name()))
        .collect();
    names.join(", ")
}
