//! `--generate man|bash` of rdmablk-perf, rdmablk-chart and rdmablk-powercut: pages groff
//! renders without a warning, naming their options; completion scripts bash accepts.

use std::process::Command;

fn generate(bin: &str, what: &str) -> String {
    let out = Command::new(bin)
        .args(["--generate", what])
        .output()
        .unwrap();
    assert!(out.status.success(), "{bin} --generate {what}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn pages_render_and_completions_parse() {
    for (bin, options) in [
        (
            env!("CARGO_BIN_EXE_rdmablk-perf"),
            &["--rw", "--bs", "--iodepth", "--verify"][..],
        ),
        (
            env!("CARGO_BIN_EXE_rdmablk-chart"),
            &["--out", "--title"][..],
        ),
        (
            env!("CARGO_BIN_EXE_rdmablk-powercut"),
            &["write", "check"][..],
        ),
    ] {
        let out = Command::new("groff")
            .args(["-man", "-Tutf8", "-ww", "-P-cbou"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                use std::io::Write;
                c.stdin
                    .take()
                    .unwrap()
                    .write_all(generate(bin, "man").as_bytes())?;
                c.wait_with_output()
            })
            .expect("groff (Debian's groff-base)");
        let (text, warnings) = (
            String::from_utf8_lossy(&out.stdout).replace('\u{2010}', "-"),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(
            out.status.success() && warnings.is_empty(),
            "{bin}: groff: {warnings}"
        );
        for o in options {
            assert!(
                text.contains(o),
                "{bin}: {o} missing from its page:\n{text}"
            );
        }
        let script = generate(bin, "bash");
        let ok = Command::new("bash")
            .args(["-n", "-c", &script])
            .status()
            .unwrap();
        assert!(ok.success(), "{bin}: bash -n of its completion script");
    }
}
