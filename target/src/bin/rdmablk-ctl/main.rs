//! `rdmablk-ctl`: operate a running rdmablk-target through its control socket.
//!
//! ```text
//! rdmablk-ctl status                      listeners, subsystems, namespaces, controllers, arena
//! rdmablk-ctl top [-i SECONDS] [-n COUNT]  live view: per namespace rates, latency; hosts
//! rdmablk-ctl reload                      re-read the configuration file, apply what changed
//! rdmablk-ctl subsystem add NQN [--allow-any-host | --host NQN ...]
//! rdmablk-ctl subsystem remove NQN
//! rdmablk-ctl namespace add NQN NSID --backend KIND [--path P] [--size S] [--block-size N]
//!                                     [--uuid UUID]
//! rdmablk-ctl namespace remove NQN NSID
//! rdmablk-ctl host add NQN HOSTNQN [--dhchap-key K [--dhchap-ctrl-key K]]
//! rdmablk-ctl host remove NQN HOSTNQN
//! rdmablk-ctl listener add|remove KIND ADDRESS [PORT]   KIND: verbs, soft (RDMA), tcp, loop
//! rdmablk-ctl ana set PROVIDER ADDRESS PORT GROUP STATE   an ANA group's state on a listener
//! rdmablk-ctl drain ADDR:PORT             stop accepting there; connections stay
//! ```
//! `--json` prints the daemon's answer as it is; exit status 0 only on success.

mod top;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use serde_json::{json, Value};

use rdmablk_target::cli_docs;
use rdmablk_target::config::DEFAULT_CONTROL_SOCKET;

#[derive(Debug, Parser)]
#[command(
    name = "rdmablk-ctl",
    version,
    about = "Operate a running rdmablk-target",
    long_about = "Operate a running rdmablk-target through its control socket: status, reload, \
                  and changes to subsystems, namespaces, hosts, listeners and ANA states, each \
                  written back to the target's configuration file. Exit status 0 only on \
                  success.",
    after_help = "rdmablk-ctl --generate man|bash|zsh|fish prints its manual page or a shell \
                  completion script."
)]
struct Args {
    /// The target's control socket ([control] socket in its configuration).
    #[arg(long, short = 's', default_value = DEFAULT_CONTROL_SOCKET, global = true)]
    socket: PathBuf,
    /// Print the answer as JSON.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Listeners, subsystems, namespaces, controllers, arena.
    Status,
    /// A live view: per namespace r/s, w/s, MB/s, latency p50/p99, in flight, errors; the
    /// connected hosts. Redrawn in place on a terminal, plain lines otherwise; until Ctrl-C.
    Top {
        /// Seconds between refreshes.
        #[arg(long, short = 'i', default_value_t = 1.0)]
        interval: f64,
        /// Stop after this many refreshes.
        #[arg(long, short = 'n')]
        count: Option<u32>,
    },
    /// Re-read the configuration file and apply the difference.
    Reload,
    /// Add or remove a subsystem.
    Subsystem {
        #[command(subcommand)]
        op: SubsystemOp,
    },
    /// Add or remove a namespace.
    Namespace {
        #[command(subcommand)]
        op: NamespaceOp,
    },
    /// Allow or disallow a host on a subsystem.
    Host {
        #[command(subcommand)]
        op: HostOp,
    },
    /// Add or remove a listener.
    Listener {
        #[command(subcommand)]
        op: ListenerOp,
    },
    /// Change an ANA group's state on a listener (written to the configuration file).
    Ana {
        #[command(subcommand)]
        op: AnaOp,
    },
    /// Stop accepting connections on a listener (ADDR:PORT); its connections stay.
    Drain { listener: String },
    /// Print a new NVMe/TCP TLS PSK in the interchange format (`NVMeTLSkey-1:01:...:`, as
    /// `nvme gen-tls-key` does), for a host's `tls_psk` and the host's own key file. Needs no
    /// running target.
    GenTlsKey {
        /// The cipher suite's hash: 1 (SHA-256, a 32-byte key, TLS_AES_128_GCM_SHA256) or 2
        /// (SHA-384, 48 bytes, TLS_AES_256_GCM_SHA384).
        #[arg(long, default_value_t = 1)]
        hmac: u8,
    },
}

#[derive(Debug, Subcommand)]
enum AnaOp {
    /// STATE: optimized, non-optimized, inaccessible, persistent-loss or change.
    Set {
        provider: String,
        address: String,
        port: u16,
        group: u32,
        state: String,
    },
}

#[derive(Debug, Subcommand)]
enum SubsystemOp {
    Add {
        nqn: String,
        #[arg(long)]
        allow_any_host: bool,
        #[arg(long = "host")]
        hosts: Vec<String>,
    },
    Remove {
        nqn: String,
    },
}

#[derive(Debug, Subcommand)]
enum NamespaceOp {
    Add {
        nqn: String,
        nsid: u32,
        /// file, block, ram or null.
        #[arg(long)]
        backend: String,
        /// file / block: the path.
        #[arg(long)]
        path: Option<String>,
        /// ram / null: the size ("1GiB"); file: create it this size if missing.
        #[arg(long)]
        size: Option<String>,
        #[arg(long)]
        block_size: Option<u32>,
        /// The namespace UUID reported in its identification descriptors.
        #[arg(long)]
        uuid: Option<String>,
    },
    Remove {
        nqn: String,
        nsid: u32,
    },
    /// Show the namespace to a host, or hide it (per-host visibility).
    Host {
        #[command(subcommand)]
        op: NamespaceHostOp,
    },
    /// Set the namespace's QoS limits, for every host together (or, with --per-host, for each
    /// host on its own): the limits given replace those (none given: no limits). Commands
    /// over a limit wait; none fails.
    Qos {
        nqn: String,
        nsid: u32,
        /// The limits each host gets on its own (`host_qos`), not those of all hosts together.
        #[arg(long)]
        per_host: bool,
        /// Commands per second (at least 100).
        #[arg(long)]
        iops: Option<u64>,
        /// Read plus written bytes per second ("100MiB"; at least 1MiB).
        #[arg(long)]
        bandwidth: Option<String>,
        /// Read bytes per second.
        #[arg(long)]
        read_bandwidth: Option<String>,
        /// Written bytes per second.
        #[arg(long)]
        write_bandwidth: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
enum NamespaceHostOp {
    /// Show namespace NSID to HOST too. On a namespace every host sees (no `hosts` key), the
    /// first host added makes it visible to that host only.
    Add {
        nqn: String,
        nsid: u32,
        host: String,
    },
    /// Hide namespace NSID from HOST. Removing the last host leaves `hosts = []`: no host
    /// sees the namespace (not every host).
    Remove {
        nqn: String,
        nsid: u32,
        host: String,
    },
}

#[derive(Debug, Subcommand)]
enum HostOp {
    Add {
        nqn: String,
        host: String,
        /// The host's DH-HMAC-CHAP secret (`DHHC-1:...`, as `nvme gen-dhchap-key` prints
        /// it): the host must authenticate. Given for a host already listed, it replaces
        /// that entry. The key is written into the config file (keep it mode 600).
        #[arg(long)]
        dhchap_key: Option<String>,
        /// The controller's secret, for a host that authenticates the controller too.
        #[arg(long, requires = "dhchap_key")]
        dhchap_ctrl_key: Option<String>,
        /// The host's NVMe/TCP TLS PSK for this subsystem (`NVMeTLSkey-1:...:`, as
        /// `rdmablk-ctl gen-tls-key` prints it). Given for a host already listed, it replaces
        /// that entry.
        #[arg(long)]
        tls_psk: Option<String>,
    },
    Remove {
        nqn: String,
        host: String,
    },
}

#[derive(Debug, Subcommand)]
enum ListenerOp {
    /// Add a listener. KIND: `verbs` or `soft` (an RDMA listener with that provider), `tcp`
    /// (NVMe/TCP) or `loop`.
    Add {
        #[arg(value_name = "KIND")]
        provider: String,
        address: String,
        #[arg(default_value_t = 4420)]
        port: u16,
    },
    /// Remove a listener (KIND as for `add`); its connections are closed.
    Remove {
        #[arg(value_name = "KIND")]
        provider: String,
        address: String,
        #[arg(default_value_t = 4420)]
        port: u16,
    },
}

fn request(cmd: &Cmd) -> Value {
    match cmd {
        Cmd::Status => json!({"cmd": "status"}),
        Cmd::Top { .. } => json!({"cmd": "io"}),
        Cmd::Reload => json!({"cmd": "reload"}),
        Cmd::Drain { listener } => json!({"cmd": "drain", "listener": listener}),
        Cmd::GenTlsKey { .. } => Value::Null, // answered without the target
        Cmd::Subsystem { op } => match op {
            SubsystemOp::Add {
                nqn,
                allow_any_host,
                hosts,
            } => json!({"cmd": "subsystem-add", "nqn": nqn,
                        "allow_any_host": allow_any_host, "hosts": hosts}),
            SubsystemOp::Remove { nqn } => json!({"cmd": "subsystem-remove", "nqn": nqn}),
        },
        Cmd::Namespace { op } => match op {
            NamespaceOp::Add {
                nqn,
                nsid,
                backend,
                path,
                size,
                block_size,
                uuid,
            } => {
                let mut b = json!({ "kind": backend });
                if let Some(p) = path {
                    b["path"] = json!(p);
                }
                match (backend.as_str(), size) {
                    ("file", Some(s)) => b["create_size"] = json!(s),
                    (_, Some(s)) => b["size"] = json!(s),
                    _ => {}
                }
                let mut r = json!({"cmd": "namespace-add", "nqn": nqn, "nsid": nsid, "backend": b});
                if let Some(bs) = block_size {
                    r["block_size"] = json!(bs);
                }
                if let Some(u) = uuid {
                    r["uuid"] = json!(u);
                }
                r
            }
            NamespaceOp::Remove { nqn, nsid } => {
                json!({"cmd": "namespace-remove", "nqn": nqn, "nsid": nsid})
            }
            NamespaceOp::Qos {
                nqn,
                nsid,
                per_host,
                iops,
                bandwidth,
                read_bandwidth,
                write_bandwidth,
            } => json!({
                "cmd": "namespace-qos", "nqn": nqn, "nsid": nsid, "per_host": per_host,
                "iops": iops,
                "bandwidth": bandwidth, "read_bandwidth": read_bandwidth,
                "write_bandwidth": write_bandwidth
            }),
            NamespaceOp::Host { op } => match op {
                NamespaceHostOp::Add { nqn, nsid, host } => {
                    json!({"cmd": "namespace-host-add", "nqn": nqn, "nsid": nsid, "host": host})
                }
                NamespaceHostOp::Remove { nqn, nsid, host } => json!({
                    "cmd": "namespace-host-remove", "nqn": nqn, "nsid": nsid, "host": host
                }),
            },
        },
        Cmd::Host { op } => match op {
            HostOp::Add {
                nqn,
                host,
                dhchap_key,
                dhchap_ctrl_key,
                tls_psk,
            } => {
                let mut r = json!({"cmd": "host-add", "nqn": nqn, "host": host});
                if let Some(k) = tls_psk {
                    r["tls_psk"] = json!(k);
                }
                if let Some(k) = dhchap_key {
                    r["dhchap_key"] = json!(k);
                }
                if let Some(k) = dhchap_ctrl_key {
                    r["dhchap_ctrl_key"] = json!(k);
                }
                r
            }
            HostOp::Remove { nqn, host } => {
                json!({"cmd": "host-remove", "nqn": nqn, "host": host})
            }
        },
        Cmd::Ana {
            op:
                AnaOp::Set {
                    provider,
                    address,
                    port,
                    group,
                    state,
                },
        } => json!({"cmd": "ana-set", "provider": provider, "address": address, "port": port,
                    "group": group, "state": state}),
        Cmd::Listener { op } => match op {
            ListenerOp::Add {
                provider,
                address,
                port,
            } => {
                json!({"cmd": "listener-add", "provider": provider, "address": address, "port": port})
            }
            ListenerOp::Remove {
                provider,
                address,
                port,
            } => {
                json!({"cmd": "listener-remove", "provider": provider, "address": address, "port": port})
            }
        },
    }
}

fn main() -> ExitCode {
    if let Some(code) = cli_docs::generate_if_asked(Args::command, "8", || {
        let mut commands = String::new();
        let mut cmd = Args::command();
        cmd.build();
        for sub in cmd.get_subcommands_mut() {
            commands.push_str(&format!(
                ".TP\n\\fB{}\\fR\n{}\n",
                sub.get_name(),
                sub.get_about().map(|a| a.to_string()).unwrap_or_default()
            ));
            let name = sub.get_name().to_owned();
            for op in sub
                .get_subcommands_mut()
                .filter(|op| op.get_name() != "help")
            {
                let usage = op.render_usage().to_string();
                let usage = usage.trim_start_matches("Usage: ").replace('-', "\\-");
                let about = op.get_about().map(|a| a.to_string()).unwrap_or_default();
                commands.push_str(&format!(
                    ".TP\n\\fB{name} {}\\fR\n{usage}\n.br\n{about}\n",
                    op.get_name()
                ));
            }
        }
        vec![("COMMANDS", commands), cli_docs::see_also()]
    }) {
        return code;
    }
    let args = Args::parse();
    if let Cmd::GenTlsKey { hmac } = args.cmd {
        let bytes = if hmac == 2 { 48 } else { 32 };
        return match rdmablk_target::config::generate_psk(bytes, hmac) {
            Ok(k) if hmac == 1 || hmac == 2 => {
                println!("{}", k.expose());
                ExitCode::SUCCESS
            }
            Ok(_) => {
                eprintln!(
                    "rdmablk-ctl gen-tls-key: --hmac {hmac}: give 1 (SHA-256) or 2 (SHA-384)"
                );
                ExitCode::from(2)
            }
            Err(e) => {
                eprintln!("rdmablk-ctl gen-tls-key: {e}");
                ExitCode::from(2)
            }
        };
    }
    if let Cmd::Top { interval, count } = args.cmd {
        if !(interval.is_finite() && (0.1..=3600.0).contains(&interval)) {
            eprintln!("rdmablk-ctl top: --interval {interval}: give 0.1 to 3600 seconds");
            return ExitCode::from(2);
        }
        let every = std::time::Duration::from_secs_f64(interval);
        return match top::run(&args.socket, every, count) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!(
                    "rdmablk-ctl top: {e} (is rdmablk-target running, with this [control] socket?)"
                );
                ExitCode::from(2)
            }
        };
    }
    let answer = match rdmablk_target::control::call(&args.socket, &request(&args.cmd)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!(
                "rdmablk-ctl: {}: {e} (is rdmablk-target running, with this [control] socket?)",
                args.socket.display()
            );
            return ExitCode::from(2);
        }
    };
    let ok = answer.get("ok").and_then(Value::as_bool) == Some(true);
    if args.json {
        println!("{answer}");
    } else if !ok {
        eprintln!(
            "rdmablk-ctl: {}",
            answer
                .get("error")
                .and_then(Value::as_str)
                .unwrap_or("failed")
        );
    } else {
        print_human(&args.cmd, &answer["result"]);
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn print_human(cmd: &Cmd, r: &Value) {
    let s = |v: &Value| match v {
        Value::String(x) => x.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    };
    match cmd {
        Cmd::Status => {
            println!("LISTENERS");
            for l in r["listeners"].as_array().into_iter().flatten() {
                let state = if l["accepting"] == json!(true) {
                    ""
                } else {
                    " (drained)"
                };
                let ana: Vec<String> = l["ana"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(g, st)| format!("group {g} {}", s(st)))
                    .collect();
                let ana = if ana.is_empty() {
                    String::new()
                } else {
                    format!(" ANA: {}", ana.join(", "))
                };
                println!(
                    "  {:<6} {}{state}{ana}",
                    s(&l["provider"]),
                    s(&l["address"])
                );
            }
            println!("SUBSYSTEMS");
            for sub in r["subsystems"].as_array().into_iter().flatten() {
                let hosts = if sub["allow_any_host"] == json!(true) {
                    "any host".to_string()
                } else {
                    sub["hosts"]
                        .as_array()
                        .map(|h| h.iter().map(s).collect::<Vec<_>>().join(", "))
                        .unwrap_or_default()
                };
                println!("  {}  [{hosts}]", s(&sub["nqn"]));
                for ns in sub["namespaces"].as_array().into_iter().flatten() {
                    println!(
                        "    ns {:<4} {:<6} {:>14} bytes  block {:<5} {}",
                        s(&ns["nsid"]),
                        s(&ns["backend"]),
                        s(&ns["bytes"]),
                        s(&ns["block_size"]),
                        s(&ns["path"])
                    );
                    if let Some(h) = ns["visible_to"].as_array() {
                        let h: Vec<String> = h.iter().map(s).collect();
                        let h = if h.is_empty() {
                            "no host".to_owned()
                        } else {
                            h.join(", ")
                        };
                        println!("         visible to: {h}");
                    }
                    if let Some(q) = ns["qos"].as_str().filter(|q| *q != "no limits") {
                        println!("         qos: {q}");
                    }
                    if let Some(q) = ns["host_qos"].as_str().filter(|q| *q != "no limits") {
                        println!("         qos per host: {q}");
                    }
                }
            }
            println!("CONTROLLERS");
            for c in r["controllers"].as_array().into_iter().flatten() {
                println!(
                    "  {:<5} {}  host {}  {}/{} from {}  io_queues {}  kato {} ms",
                    s(&c["cntlid"]),
                    s(&c["subnqn"]),
                    s(&c["hostnqn"]),
                    s(&c["transport"]),
                    s(&c["provider"]),
                    s(&c["peer"]),
                    s(&c["io_queues"]),
                    s(&c["kato_ms"])
                );
            }
            let a = &r["arena"];
            println!(
                "ARENA  {} bytes, {} in use by {} windows, {} in data pools, {} free",
                s(&a["bytes"]),
                s(&a["bytes_in_use"]),
                s(&a["windows"]),
                s(&a["data_pool_bytes"]),
                s(&a["bytes_free"])
            );
            let p = &r["data_pool"];
            println!(
                "DATA POOL  {} bytes, {} in use, {} commands waiting ({} ever), {} hosts",
                s(&p["bytes"]),
                s(&p["bytes_in_use"]),
                s(&p["waiting"]),
                s(&p["waits"]),
                s(&p["hosts"])
            );
            for h in p["by_host"].as_array().into_iter().flatten() {
                println!(
                    "  HOST {}  {} bytes in use, {} commands waiting ({} by its connected controllers)",
                    h["hostnqn"].as_str().unwrap_or("(not named: before Connect, or draining)"),
                    s(&h["bytes_in_use"]),
                    s(&h["waiting"]),
                    s(&h["waits"])
                );
            }
            let pl = &r["tcp_placed"];
            println!(
                "TCP PLACED  {} bytes of H2CData in {} PDUs read straight into command buffers",
                s(&pl["bytes"]),
                s(&pl["pdus"])
            );
            let t = &r["tls_connections"];
            println!(
                "TLS  {} connections with their records in the kernel (kTLS), {} in user space",
                s(&t["kernel"]),
                s(&t["user"])
            );
        }
        _ => match r.get("changes").and_then(Value::as_array) {
            Some(c) if c.is_empty() => println!("nothing changed"),
            Some(c) => c.iter().for_each(|x| println!("{}", s(x))),
            None => println!("{r}"),
        },
    }
}
