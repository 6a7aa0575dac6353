//! `rdmablk-ctl top`: a live view of a running target, refreshed every interval like
//! `iostat -x 1`: per namespace the read and write rates (commands and MB/s), the latency
//! p50 and p99 over the interval, the commands in flight and the errors; then the connected
//! hosts. Two `io` answers of the control socket a period apart give the rates; nothing is
//! added to the target's I/O path. On a terminal the screen is redrawn in place; otherwise
//! (a pipe, a log, ssh without a tty) each refresh is printed as plain lines.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;

/// What one look at the target returned.
struct Sample {
    at: Instant,
    io: Value,
    status: Value,
}

fn ask(socket: &Path, cmd: &str) -> Result<Value, String> {
    let answer = rdmablk_target::control::call(socket, &serde_json::json!({ "cmd": cmd }))
        .map_err(|e| format!("{}: {e}", socket.display()))?;
    if answer.get("ok").and_then(Value::as_bool) != Some(true) {
        return Err(format!("{cmd}: {}", answer["error"]));
    }
    Ok(answer["result"].clone())
}

fn sample(socket: &Path) -> Result<Sample, String> {
    Ok(Sample {
        io: ask(socket, "io")?,
        status: ask(socket, "status")?,
        at: Instant::now(),
    })
}

/// Shows `count` refreshes (forever without), `interval` apart; ends at the first failure
/// to reach the target, or at SIGINT.
pub fn run(socket: &Path, interval: Duration, count: Option<u32>) -> Result<(), String> {
    let tty = std::io::stdout().is_terminal();
    let mut prev = sample(socket)?;
    let mut shown = 0u32;
    let mut out = std::io::stdout();
    loop {
        std::thread::sleep(interval);
        let now = sample(socket)?;
        let screen = render(&prev, &now);
        let written = if tty {
            // Home, clear, draw: the view stays in place, as top and iostat do.
            write!(out, "\x1b[H\x1b[2J{screen}")
        } else {
            writeln!(out, "{screen}")
        };
        written
            .and_then(|()| out.flush())
            .map_err(|e| e.to_string())?;
        shown += 1;
        if count.is_some_and(|c| shown >= c) {
            return Ok(());
        }
        prev = now;
    }
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// The latency at quantile `q` of a histogram (counts per bucket), as the bucket's upper
/// bound in microseconds ("-" without samples, ">LAST" past the last bound).
fn quantile(counts: &[u64], bounds_us: &[u64], q: f64) -> String {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return "-".into();
    }
    let want = (q * total as f64).ceil().max(1.0) as u64;
    let mut cum = 0;
    for (i, c) in counts.iter().enumerate() {
        cum += c;
        if cum >= want {
            return match bounds_us.get(i) {
                Some(b) => b.to_string(),
                None => format!(">{}", bounds_us.last().copied().unwrap_or(0)),
            };
        }
    }
    "-".into()
}

/// One refresh: the rates between `a` and `b`.
fn render(a: &Sample, b: &Sample) -> String {
    let secs = b.at.duration_since(a.at).as_secs_f64().max(1e-3);
    let bounds: Vec<u64> = b.io["latency_bucket_us"]
        .as_array()
        .map(|v| v.iter().map(u).collect())
        .unwrap_or_default();
    let before: HashMap<(String, u64), &Value> = a.io["namespaces"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|n| {
            (
                (
                    n["subsystem"].as_str().unwrap_or("").to_owned(),
                    u(&n["nsid"]),
                ),
                n,
            )
        })
        .collect();
    let mut s = String::new();
    let st = &b.status;
    let mib = |v: &Value| u(v) as f64 / f64::from(1 << 20);
    let clock = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs() % 86_400)
        .unwrap_or(0);
    s.push_str(&format!(
        "rdmablk-target  {:02}:{:02}:{:02} UTC  every {:.1} s  connections {}  controllers {}  \
         arena {:.1} of {:.1} MiB\n\n",
        clock / 3600,
        clock / 60 % 60,
        clock % 60,
        secs,
        u(&st["connections"]),
        st["controllers"].as_array().map_or(0, Vec::len),
        mib(&st["arena"]["bytes_in_use"]),
        mib(&st["arena"]["bytes"]),
    ));
    s.push_str(&format!(
        "{:<44} {:>4} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>5} {:>6}\n",
        "SUBSYSTEM", "NSID", "r/s", "w/s", "rMB/s", "wMB/s", "p50 us", "p99 us", "qd", "err/s"
    ));
    for n in b.io["namespaces"].as_array().into_iter().flatten() {
        let key = (
            n["subsystem"].as_str().unwrap_or("").to_owned(),
            u(&n["nsid"]),
        );
        let old = before.get(&key).copied().unwrap_or(&Value::Null);
        let d = |f: &dyn Fn(&Value) -> &Value| u(f(n)).saturating_sub(u(f(old)));
        let rate = |x: u64| x as f64 / secs;
        let reads = d(&|v| &v["ops"]["read"]);
        let writes = d(&|v| &v["ops"]["write"]);
        // Latency of every operation over the interval: the histograms' differences.
        let mut hist = vec![0u64; bounds.len() + 1];
        for (op, counts) in n["latency"].as_object().into_iter().flatten() {
            for (i, c) in counts.as_array().into_iter().flatten().enumerate() {
                let was = u(&old["latency"][op][i]);
                if let Some(h) = hist.get_mut(i) {
                    *h += u(c).saturating_sub(was);
                }
            }
        }
        s.push_str(&format!(
            "{:<44} {:>4} {:>9.1} {:>9.1} {:>8.2} {:>8.2} {:>8} {:>8} {:>5} {:>6.1}\n",
            key.0,
            key.1,
            rate(reads),
            rate(writes),
            rate(d(&|v| &v["read_bytes"])) / 1e6,
            rate(d(&|v| &v["written_bytes"])) / 1e6,
            quantile(&hist, &bounds, 0.50),
            quantile(&hist, &bounds, 0.99),
            u(&n["in_flight"]),
            rate(d(&|v| &v["errors"])),
        ));
    }
    s.push_str("\nHOSTS\n");
    let ctrls = st["controllers"].as_array().cloned().unwrap_or_default();
    if ctrls.is_empty() {
        s.push_str("  (none connected)\n");
    }
    for c in ctrls {
        let kind = if c["discovery"] == Value::Bool(true) {
            " (discovery)"
        } else {
            ""
        };
        s.push_str(&format!(
            "  {}  {}{kind}  {}/{} from {}  controller {}  I/O queues {}  keep-alive {} ms\n",
            c["hostnqn"].as_str().unwrap_or("?"),
            c["subnqn"].as_str().unwrap_or("?"),
            c["transport"].as_str().unwrap_or("?"),
            c["provider"].as_str().unwrap_or("?"),
            c["peer"].as_str().unwrap_or("?"),
            u(&c["cntlid"]),
            u(&c["io_queues"]),
            u(&c["kato_ms"]),
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_take_the_bucket_bound() {
        let bounds = [10, 100, 1000];
        assert_eq!(quantile(&[0, 0, 0, 0], &bounds, 0.5), "-");
        assert_eq!(quantile(&[50, 49, 1, 0], &bounds, 0.5), "10");
        assert_eq!(quantile(&[50, 49, 1, 0], &bounds, 0.99), "100");
        assert_eq!(quantile(&[50, 48, 1, 1], &bounds, 0.99), "1000");
        assert_eq!(quantile(&[0, 0, 0, 3], &bounds, 0.5), ">1000");
    }
}
