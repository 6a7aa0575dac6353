//! `PROG --generate man|bash|zsh|fish`, for every rdmablk binary: its manual page (roff) or a
//! shell completion script, printed to standard output, both made from the binary's own clap
//! definition (clap_mangen, clap_complete), so they cannot drift from its options. Packages
//! install what this prints; nothing of it is written by hand. `rdmablk-target`'s page also
//! carries `config/rdmablk-target.toml`, every key with its default and unit, as its
//! CONFIGURATION section.

use std::io::Write;
use std::process::ExitCode;

/// The annotated example configuration, every key documented (the man page's CONFIGURATION).
pub const CONFIG_REFERENCE: &str = include_str!("../../config/rdmablk-target.toml");

/// A section the binary adds after the generated ones: (title, roff body).
pub type Section = (&'static str, String);

/// If the command line is `PROG --generate WHAT`, prints WHAT for `cmd` (a man page in
/// manual `section`, "1" for commands and "8" for the daemon and its administration tool, with
/// `extra` sections after the generated ones) and returns the exit code; otherwise `None` and
/// the binary parses its arguments as usual.
pub fn generate_if_asked(
    cmd: impl FnOnce() -> clap::Command,
    section: &'static str,
    extra: impl FnOnce() -> Vec<Section>,
) -> Option<ExitCode> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) != Some("--generate") {
        return None;
    }
    let what = match args.as_slice() {
        [_, w] => w.as_str(),
        _ => {
            eprintln!("usage: --generate man|bash|zsh|fish");
            return Some(ExitCode::from(2));
        }
    };
    let mut cmd = cmd();
    let mut out = Vec::new();
    let name = cmd.get_name().to_owned();
    let made = match what {
        "man" => man_page(cmd, section, &extra(), &mut out),
        "bash" | "zsh" | "fish" => {
            let shell = match what {
                "bash" => clap_complete::Shell::Bash,
                "zsh" => clap_complete::Shell::Zsh,
                _ => clap_complete::Shell::Fish,
            };
            clap_complete::generate(shell, &mut cmd, name, &mut out);
            Ok(())
        }
        other => {
            eprintln!("--generate {other:?}: not one of man, bash, zsh, fish");
            return Some(ExitCode::from(2));
        }
    };
    match made.and_then(|()| std::io::stdout().write_all(&out)) {
        Ok(()) => Some(ExitCode::SUCCESS),
        Err(e) => {
            eprintln!("--generate {what}: {e}");
            Some(ExitCode::FAILURE)
        }
    }
}

/// The clap-made page, then each extra section.
fn man_page(
    cmd: clap::Command,
    section: &'static str,
    extra: &[Section],
    out: &mut Vec<u8>,
) -> std::io::Result<()> {
    clap_mangen::Man::new(cmd).section(section).render(out)?;
    for (title, body) in extra {
        writeln!(out, ".SH {title}")?;
        out.extend_from_slice(body.as_bytes());
        if !body.ends_with('\n') {
            out.push(b'\n');
        }
    }
    Ok(())
}

/// `text` as a roff block shown as it is (no filling, no hyphenation, escapes neutralised).
pub fn verbatim(text: &str) -> String {
    format!(".nf\n.nh\n{}.fi\n.hy\n", roff_lines(text))
}

/// A paragraph of plain text in roff (escapes neutralised).
pub fn paragraph(text: &str) -> String {
    format!(".PP\n{}", roff_lines(text))
}

/// `text`'s lines with roff's escape character neutralised and a line that would read as a
/// request (a leading `.` or `'`) made plain text.
fn roff_lines(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        if line.starts_with('.') || line.starts_with('\'') {
            out.push_str("\\&");
        }
        out.push_str(&line.replace('\\', "\\e"));
        out.push('\n');
    }
    out
}

/// The SEE ALSO section every rdmablk page ends with.
pub fn see_also() -> Section {
    (
        "SEE ALSO",
        paragraph(
            "rdmablk-target(8), rdmablk-ctl(8), rdmablk-perf(1), nvme(1), fio(1); the \
             project's docs/ (operations.md, target.md, initiator.md, perf.md).",
        ),
    )
}
