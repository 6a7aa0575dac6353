//! A line a client of the control socket sends (`[control] socket`; `rdmablk-ctl` and
//! scripts): one JSON request. Parsed as the socket does, and a configuration edit it names
//! applied to a valid configuration (the one below) as the socket applies it, up to the check
//! of the new text. `fuzz_request` asserts no panic; that an edit that applies gives a text
//! that parses as TOML; and that one that also checks as a configuration can be applied again.
//! The socket is root's (mode 0600), but its parser and the TOML edits are code a wrong
//! script reaches too.
#![no_main]

use libfuzzer_sys::fuzz_target;

const CONFIG: &str = r#"
[[listener]]
transport = "tcp"
address = "127.0.0.1"
port = 4420

[arena]
bytes = "64MiB"
lock = false

[[subsystem]]
nqn = "nqn.2026-12.io.rdmablk:fuzz"
hosts = ["nqn.2014-08.org.nvmexpress:uuid:5a5a5a5a-5a5a-5a5a-5a5a-5a5a5a5a5a5a"]

[[subsystem.namespace]]
nsid = 1
backend = { kind = "ram", size = "1MiB" }
"#;

fuzz_target!(|b: &[u8]| {
    if let Ok(text) = std::str::from_utf8(b) {
        rdmablk_target::control::fuzz_request(text, CONFIG);
    }
});
