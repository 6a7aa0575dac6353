//! How loading a configuration fails: [`ConfigError`], and the context a TOML error is given
//! (the key the offending value belongs to and its line) so that the message names what to fix.

use std::path::PathBuf;

use super::Problem;

/// An error loading the configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read configuration file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// TOML syntax error, wrong type, unknown key, missing key.
    #[error("{}{}{message}", origin(path), line.map(|l| format!("line {l}: ")).unwrap_or_default())]
    Parse {
        path: Option<PathBuf>,
        /// 1-based line of the offending text, when toml knows it.
        line: Option<usize>,
        message: String,
    },
    /// The file parsed but describes an impossible target; every problem found is listed.
    #[error("{}invalid configuration:\n{}", origin(path), list(problems))]
    Invalid {
        path: Option<PathBuf>,
        problems: Vec<Problem>,
    },
}

fn origin(path: &Option<PathBuf>) -> String {
    path.as_ref()
        .map(|p| format!("{}: ", p.display()))
        .unwrap_or_default()
}

fn list(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(|p| format!("  - {p}"))
        .collect::<Vec<_>>()
        .join("\n")
}

impl ConfigError {
    /// The problems of an [`ConfigError::Invalid`] (empty for other errors).
    pub fn problems(&self) -> &[Problem] {
        match self {
            ConfigError::Invalid { problems, .. } => problems,
            _ => &[],
        }
    }
}

/// The key of `key = ` at the end of `before` (the text before a value on its line).
fn key_before(before: &str) -> Option<&str> {
    let key_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
    before
        .strip_suffix('=')
        .and_then(|b| b.trim_end().rsplit(|c| !key_char(c)).next())
        .filter(|k| !k.is_empty())
}

/// The value a serde "invalid type" / "invalid value" message quotes, as it would be written
/// in TOML: `string "yes"` gives `"yes"`, ``integer `1` `` gives `1`.
fn unexpected_value(message: &str) -> Option<String> {
    let rest = message
        .strip_prefix("invalid type: ")
        .or_else(|| message.strip_prefix("invalid value: "))?;
    if let Some(s) = rest.strip_prefix("string \"") {
        return Some(format!("\"{}\"", &s[..s.find('"')?]));
    }
    let s = &rest[rest.find('`')? + 1..];
    Some(s[..s.find('`')?].to_owned())
}

/// A TOML error's message with where it is: the key the offending value was given to (when
/// the text before it on its line says `key =`), and that line, so that a wrong type names
/// its key even inside an inline table (`backend = { kind = "block", poll = "yes" }`, whose
/// error serde reports for the whole table).
pub(super) fn in_context(text: &str, at: usize, message: &str) -> String {
    let start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let end = text[at..].find('\n').map_or(text.len(), |i| at + i);
    let line = text[start..end].trim();
    let before = text[start..at].trim_end();
    let key = key_before(before);
    // An inline table (serde reports a wrong type inside a tagged one for the whole table):
    // the key inside it whose value the message quotes, when exactly one has it.
    let inner = (text[at..end].trim_start().starts_with('{'))
        .then(|| unexpected_value(message))
        .flatten()
        .and_then(|v| {
            let table = &text[at..end];
            let mut keys = table
                .match_indices(v.as_str())
                .filter_map(|(i, _)| key_before(table[..i].trim_end()));
            let first = keys.next()?;
            keys.all(|k| k == first).then_some(first)
        });
    let key = match (key, inner) {
        (Some(k), Some(i)) => Some(format!("{k}.{i}")),
        (k, i) => k.or(i).map(str::to_owned),
    };
    let shown: String = if line.chars().count() > 100 {
        line.chars().take(97).chain("...".chars()).collect()
    } else {
        line.to_owned()
    };
    match key.as_deref() {
        Some(k) if shown.is_empty() => format!("{k}: {message}"),
        Some(k) => format!("{k}: {message} (in `{shown}`)"),
        None if shown.is_empty() => message.to_owned(),
        None => format!("{message} (in `{shown}`)"),
    }
}
