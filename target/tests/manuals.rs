//! `--generate man|bash|zsh|fish` of the daemon and rdmablk-ctl: pages groff renders without a
//! warning, the daemon's page carries every key of `config/rdmablk-target.toml`, and
//! completion scripts that their shells accept.

use std::process::Command;

fn generate(bin: &str, what: &str) -> String {
    let out = Command::new(bin)
        .args(["--generate", what])
        .output()
        .unwrap_or_else(|e| panic!("run {bin}: {e}"));
    assert!(out.status.success(), "{bin} --generate {what}: {out:?}");
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// The page rendered as text by groff (the man macros), failing on any groff warning.
fn render(page: &str) -> String {
    let dir = std::env::temp_dir().join(format!("rdmablk-man-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!("page-{}.roff", page.len()));
    std::fs::write(&file, page).unwrap();
    let out = Command::new("groff")
        .args(["-man", "-Tutf8", "-ww", "-rLL=200n"])
        .arg(&file)
        .output()
        .expect("groff (Debian's groff-base; tools/lib/install-deps.sh installs it)");
    let _ = std::fs::remove_file(&file);
    let warnings = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && warnings.is_empty(),
        "groff: {warnings}"
    );
    // Plain text: drop the overstrike bold/underline and the hyphenation marks.
    let text = String::from_utf8_lossy(&out.stdout).replace('\u{2010}', "-");
    let mut plain = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if chars.peek() == Some(&'\u{8}') {
            chars.next();
            continue;
        }
        plain.push(c);
    }
    plain
}

/// Every key of a TOML document, as the last part of its dotted path, and whether it names
/// a table (written `[..k]` or `[[..k]]`) rather than a value (written `k = ...`).
fn keys(v: &toml::Value, out: &mut Vec<(String, bool)>) {
    match v {
        toml::Value::Table(t) => {
            for (k, v) in t {
                let table = match v {
                    toml::Value::Table(_) => true,
                    toml::Value::Array(a) => a.iter().all(|e| e.is_table()) && !a.is_empty(),
                    _ => false,
                };
                out.push((k.clone(), table));
                keys(v, out);
            }
        }
        toml::Value::Array(a) => a.iter().for_each(|v| keys(v, out)),
        _ => {}
    }
}

#[test]
fn the_daemons_page_documents_its_options_and_every_configuration_key() {
    let text = render(&generate(env!("CARGO_BIN_EXE_rdmablk-target"), "man"));
    for want in [
        "rdmablk-target(8)",
        "--config",
        "--check",
        "SIGHUP",
        "CONFIGURATION",
    ] {
        assert!(
            text.contains(want),
            "{want:?} missing from the page:\n{text}"
        );
    }
    let reference = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../config/rdmablk-target.toml"
    ))
    .unwrap();
    let mut all = Vec::new();
    keys(&reference.parse::<toml::Value>().unwrap(), &mut all);
    assert!(all.len() > 30, "the reference lists {} keys", all.len());
    for (k, table) in all {
        // A value is written `k = ...`; a table `[..k]`, `[[..k]]`, or inline as `k = {..}`.
        let written =
            text.contains(&format!("{k} =")) || (table && text.contains(&format!("{k}]")));
        assert!(written, "configuration key {k:?} is not on the page");
    }
}

#[test]
fn rdmablk_ctls_page_lists_every_command() {
    let text = render(&generate(env!("CARGO_BIN_EXE_rdmablk-ctl"), "man"));
    for want in [
        "rdmablk-ctl(8)",
        "--socket",
        "status",
        "reload",
        "subsystem add",
        "namespace add",
        "host add",
        "listener add",
        "ana set",
        "drain",
    ] {
        assert!(
            text.contains(want),
            "{want:?} missing from the page:\n{text}"
        );
    }
}

#[test]
fn completion_scripts_are_accepted_by_bash() {
    for bin in [
        env!("CARGO_BIN_EXE_rdmablk-target"),
        env!("CARGO_BIN_EXE_rdmablk-ctl"),
    ] {
        let name = std::path::Path::new(bin)
            .file_name()
            .unwrap()
            .to_str()
            .unwrap();
        let script = generate(bin, "bash");
        assert!(script.contains(name), "{name}: {script}");
        let out = Command::new("bash")
            .args(["-n", "-c", &script])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "bash -n: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        for shell in ["zsh", "fish"] {
            assert!(generate(bin, shell).contains(name), "{name} {shell}");
        }
    }
    let bad = Command::new(env!("CARGO_BIN_EXE_rdmablk-ctl"))
        .args(["--generate", "powershell"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
}
