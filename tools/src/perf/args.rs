//! Command-line flags of `rdmablk-perf` and their validation.
//!
//! Flag names follow fio where fio has one (`--rw`, `--bs`, `--iodepth`, `--numjobs`,
//! `--runtime`, `--ramp-time`, `--size`, `--offset`, `--rwmixread`). Sizes take fio's suffixes
//! with fio's default base of 1024: `4k`, `4K`, `4KiB` and `4KB` are all 4096 bytes.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use clap::{Parser, ValueEnum};

/// The most I/Os one job keeps in flight. Both the io_uring ring and the in-flight table are
/// sized from `--iodepth`, so it is bounded.
pub const MAX_IODEPTH: u32 = 4096;
/// The most jobs (threads) one run starts.
pub const MAX_NUMJOBS: u32 = 256;
/// The largest single I/O.
pub const MAX_BS_BYTES: u64 = 64 << 20;
/// The smallest single I/O.
pub const MIN_BS_BYTES: u64 = 512;

/// `rdmablk-perf`: a fio-like throughput and latency tool for local files and block devices
/// (io_uring) and NVMe-oF namespaces (the rdmablk initiator).
#[derive(Debug, Clone, Parser)]
#[command(
    name = "rdmablk-perf",
    version,
    about = "fio-like throughput and latency tool: local io_uring baseline and NVMe-oF targets",
    long_about = None,
    after_help = "rdmablk-perf --generate man|bash|zsh|fish prints its manual page or a shell \
                  completion script."
)]
pub struct Args {
    /// What to drive: `file:/path` or `/dev/...` (local io_uring engine), `rdma://IP:PORT/NQN`,
    /// `soft://HOST:PORT/NQN` or `tcp://HOST:PORT/NQN` (NVMe-oF initiator; without /NQN, or
    /// with the discovery NQN, the first subsystem the target's discovery log lists). Several
    /// URLs of one subsystem, comma-separated, are the paths of one multipath
    /// controller (ANA path choice, failover; the report adds per-path I/O and the longest
    /// stall).
    /// Omit it with --embedded.
    #[arg(value_name = "TARGET")]
    pub target: Option<String>,

    /// Start an in-process target with a RAM namespace and drive it, over the soft RDMA
    /// provider (the default), NVMe/TCP on loopback, or the loop transport (no network: what
    /// the NVMe-oF code itself costs). The report adds the target's CPU per I/O.
    #[arg(long, value_enum, value_name = "TRANSPORT", num_args = 0..=1,
          default_missing_value = "soft", require_equals = true)]
    pub embedded: Option<EmbeddedTransport>,

    /// The embedded target's namespace: `ram` (the default: data kept, --verify works) or
    /// `null` (reads return what the buffer held, writes are dropped: no data copied, what
    /// the NVMe-oF code costs alone).
    #[arg(long, value_enum, default_value_t = EmbeddedNs::Ram, value_name = "KIND")]
    pub embedded_ns: EmbeddedNs,

    /// I/O pattern.
    #[arg(long, value_enum, default_value_t = RwMode::Read)]
    pub rw: RwMode,

    /// Percentage of reads in a mixed (randrw) workload.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u8).range(0..=100))]
    pub rwmixread: u8,

    /// Block size: `4k`, `128k`, `1m`, or a range `4k-128k` (random sizes, multiples of the low
    /// end).
    #[arg(long, default_value = "4k")]
    pub bs: BsRange,

    /// I/Os each job keeps in flight.
    #[arg(long, default_value_t = 1)]
    pub iodepth: u32,

    /// Jobs (threads), each with its own engine instance and its own slice of the device.
    #[arg(long, default_value_t = 1)]
    pub numjobs: u32,

    /// Run for this many seconds (time based, wrapping over the working set). Without it each
    /// job does `--size` bytes of I/O once.
    #[arg(long, value_name = "SECS")]
    pub runtime: Option<f64>,

    /// Run this many seconds before measuring; the I/O done meanwhile is not reported.
    #[arg(long, value_name = "SECS", default_value_t = 0.0)]
    pub ramp_time: f64,

    /// Working-set bytes per job (default: the device or file divided among the jobs). Job i
    /// works on [offset + i*size, offset + (i+1)*size).
    #[arg(long)]
    pub size: Option<ByteSize>,

    /// Byte offset where the first job's working set starts.
    #[arg(long, default_value = "0")]
    pub offset: ByteSize,

    /// 1: O_DIRECT (falls back to buffered with a warning where the file system refuses it);
    /// 0: buffered I/O through the page cache. Local engine only.
    #[arg(
        long,
        default_value = "1",
        action = clap::ArgAction::Set,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub direct: bool,

    /// Poll for completions instead of waiting for interrupts (fio's `hipri`): an
    /// `IORING_SETUP_IOPOLL` ring on a block device (with --direct 1) or an NVMe generic
    /// device (/dev/ngXnY); the NVMe driver needs poll queues (`nvme.poll_queues`).
    #[arg(long)]
    pub hipri: bool,

    /// Check data: writes carry a self-describing header and a crc32c, reads are checked.
    #[arg(long, value_enum)]
    pub verify: Option<VerifyKind>,

    /// Only read and check data written by an earlier run with the same --seed (implies
    /// --verify crc32c; --rw must be read or randread).
    #[arg(long)]
    pub verify_only: bool,

    /// Seed of the workload generator and of the verify payload.
    #[arg(long, default_value_t = DEFAULT_SEED)]
    pub seed: u64,

    /// Print the report as JSON on stdout (and nothing else on stdout).
    #[arg(long)]
    pub json: bool,

    /// No per-second progress line on stderr.
    #[arg(long, short)]
    pub quiet: bool,

    /// Also draw the run as an SVG file: IOPS and mean latency each second, and the latency
    /// distribution (log scale) with IOPS, p50, p99 and p99.9 in its legend.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<std::path::PathBuf>,
}

/// The seed used when `--seed` is not given, so a write run and a later `--verify-only` run
/// agree without the flag.
pub const DEFAULT_SEED: u64 = 0x7264_6d61_626c_6b00;

/// `--rw`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RwMode {
    /// Sequential reads.
    Read,
    /// Sequential writes.
    Write,
    /// Random reads.
    Randread,
    /// Random writes.
    Randwrite,
    /// Random mixed reads and writes (`--rwmixread` percent reads).
    Randrw,
}

impl RwMode {
    /// Whether this pattern writes at all.
    pub fn writes(self) -> bool {
        matches!(self, Self::Write | Self::Randwrite | Self::Randrw)
    }

    /// (reads at all, writes at all), given `--rwmixread`.
    pub fn directions(self, rwmixread: u8) -> (bool, bool) {
        match self {
            Self::Read | Self::Randread => (true, false),
            Self::Write | Self::Randwrite => (false, true),
            Self::Randrw => (rwmixread > 0, rwmixread < 100),
        }
    }

    /// Whether offsets are random.
    pub fn random(self) -> bool {
        matches!(self, Self::Randread | Self::Randwrite | Self::Randrw)
    }

    /// fio's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
            Self::Randread => "randread",
            Self::Randwrite => "randwrite",
            Self::Randrw => "randrw",
        }
    }
}

/// `--verify`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum VerifyKind {
    /// Header + deterministic payload + crc32c per block.
    Crc32c,
}

/// A byte count parsed from `4096`, `4k`, `1M`, `1GiB`, ... (1024-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteSize(pub u64);

/// An error in a size or range argument.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    /// Empty or no digits.
    #[error("'{0}': expected a size like 4096, 4k, 128KiB, 1m or 1GiB")]
    Malformed(String),
    /// A suffix we do not know.
    #[error("'{input}': unknown size suffix '{suffix}' (use k, m, g, t, optionally KiB or KB)")]
    Suffix {
        /// The whole argument.
        input: String,
        /// The part after the digits.
        suffix: String,
    },
    /// Does not fit in 64 bits.
    #[error("'{0}': too large")]
    Overflow(String),
    /// `lo-hi` with lo > hi.
    #[error("'{0}': the low end of the range is above the high end")]
    InvertedRange(String),
}

impl FromStr for ByteSize {
    type Err = SizeError;

    fn from_str(s: &str) -> Result<Self, SizeError> {
        let t = s.trim();
        let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        if digits_end == 0 {
            return Err(SizeError::Malformed(s.to_string()));
        }
        let n: u64 = t[..digits_end]
            .parse()
            .map_err(|_| SizeError::Overflow(s.to_string()))?;
        let suffix = &t[digits_end..];
        let shift = match suffix.to_ascii_lowercase().as_str() {
            "" | "b" => 0,
            "k" | "kb" | "kib" => 10,
            "m" | "mb" | "mib" => 20,
            "g" | "gb" | "gib" => 30,
            "t" | "tb" | "tib" => 40,
            _ => {
                return Err(SizeError::Suffix {
                    input: s.to_string(),
                    suffix: suffix.to_string(),
                })
            }
        };
        n.checked_mul(1u64 << shift)
            .map(ByteSize)
            .ok_or_else(|| SizeError::Overflow(s.to_string()))
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_size(self.0))
    }
}

/// Formats bytes the way fio prints a block size: `4096` -> `4KiB`, `1000` -> `1000B`.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [(&str, u32); 4] = [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)];
    for (unit, shift) in UNITS {
        if bytes >= 1 << shift && bytes % (1 << shift) == 0 {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    format!("{bytes}B")
}

/// `--bs`: one size, or `lo-hi` (also `lo:hi`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BsRange {
    /// Smallest I/O; every offset and length is a multiple of it.
    pub min: u64,
    /// Largest I/O.
    pub max: u64,
}

impl FromStr for BsRange {
    type Err = SizeError;

    fn from_str(s: &str) -> Result<Self, SizeError> {
        match s.split_once(['-', ':']) {
            None => {
                let b = s.parse::<ByteSize>()?.0;
                Ok(Self { min: b, max: b })
            }
            Some((lo, hi)) => {
                let (min, max) = (lo.parse::<ByteSize>()?.0, hi.parse::<ByteSize>()?.0);
                if min > max {
                    return Err(SizeError::InvertedRange(s.to_string()));
                }
                Ok(Self { min, max })
            }
        }
    }
}

impl fmt::Display for BsRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.min == self.max {
            write!(f, "{}", format_size(self.min))
        } else {
            write!(f, "{}-{}", format_size(self.min), format_size(self.max))
        }
    }
}

/// How `--embedded` reaches its in-process target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EmbeddedTransport {
    /// rdmablk's soft RDMA provider over loopback TCP.
    Soft,
    /// NVMe/TCP over loopback.
    Tcp,
    /// The loop transport: commands and data through memory.
    Loop,
}

impl EmbeddedTransport {
    /// The URL scheme and the target's `[[listener]]` lines for it.
    pub fn scheme(self) -> &'static str {
        match self {
            Self::Soft => "soft",
            Self::Tcp => "tcp",
            Self::Loop => "loop",
        }
    }
}

/// The backend of `--embedded`'s namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EmbeddedNs {
    Ram,
    Null,
}

/// Where the I/O goes, from the positional argument (or `--embedded`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A local file or block device, driven by the io_uring engine.
    File(PathBuf),
    /// An NVMe-oF subsystem over real RDMA (verbs provider).
    Rdma {
        /// `IP:PORT`.
        addr: String,
        /// Subsystem NQN.
        nqn: String,
    },
    /// An NVMe-oF subsystem over the software provider.
    Soft {
        /// `HOST:PORT`.
        addr: String,
        /// Subsystem NQN.
        nqn: String,
    },
    /// An NVMe-oF subsystem over NVMe/TCP.
    Tcp {
        /// `HOST:PORT`.
        addr: String,
        /// Subsystem NQN.
        nqn: String,
    },
    /// An in-process target over the transport given, with a namespace of that kind.
    Embedded(EmbeddedTransport, EmbeddedNs),
    /// One subsystem through several paths (full `rdma://` or `soft://` URLs, one provider).
    Multipath {
        /// The paths' URLs.
        urls: Vec<String>,
    },
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::File(p) => write!(f, "{}", p.display()),
            Self::Rdma { addr, nqn } => write!(f, "rdma://{addr}/{nqn}"),
            Self::Soft { addr, nqn } => write!(f, "soft://{addr}/{nqn}"),
            Self::Tcp { addr, nqn } => write!(f, "tcp://{addr}/{nqn}"),
            Self::Embedded(t, ns) => write!(f, "embedded ({}, {ns:?})", t.scheme()),
            Self::Multipath { urls } => f.write_str(&urls.join(",")),
        }
    }
}

/// The well-known discovery NQN: a remote target named by it (or by no NQN) is resolved
/// through its discovery log.
pub const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";

/// A usage error: what is wrong and what to write instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

fn usage(msg: impl Into<String>) -> UsageError {
    UsageError(msg.into())
}

/// Parses the positional target argument.
pub fn parse_target(s: &str) -> Result<Target, UsageError> {
    if s.contains(',') {
        return parse_paths(s);
    }
    parse_one_target(s)
}

/// Comma-separated URLs of one subsystem: the paths of a multipath controller.
fn parse_paths(s: &str) -> Result<Target, UsageError> {
    let mut urls = Vec::new();
    let mut kinds = Vec::new();
    for part in s.split(',') {
        let url = match parse_one_target(part)? {
            Target::Rdma { nqn, .. } | Target::Soft { nqn, .. } | Target::Tcp { nqn, .. }
                if nqn == DISCOVERY_NQN =>
            {
                return Err(usage(format!(
                    "target '{part}': a multipath path names its subsystem NQN \
                     (scheme://HOST:PORT/NQN)"
                )))
            }
            t @ (Target::Rdma { .. } | Target::Soft { .. } | Target::Tcp { .. }) => t,
            _ => {
                return Err(usage(format!(
                    "target '{part}': multipath paths are rdma://, soft:// or tcp:// URLs"
                )))
            }
        };
        let url = url.to_string();
        kinds.push(url.split("://").next().unwrap_or_default().to_string());
        urls.push(url);
    }
    let rdma: Vec<&String> = kinds.iter().filter(|k| *k != "tcp").collect();
    if rdma.iter().any(|k| *k != rdma[0]) {
        return Err(usage(format!(
            "target '{s}': the RDMA paths of one multipath controller use one provider \
             (all rdma:// or all soft://; tcp:// paths may join either)"
        )));
    }
    Ok(Target::Multipath { urls })
}

fn parse_one_target(s: &str) -> Result<Target, UsageError> {
    let remote = |rest: &str, scheme: &str| -> Result<(String, String), UsageError> {
        match rest.split_once('/') {
            Some((addr, nqn)) if addr.contains(':') && !nqn.is_empty() => {
                Ok((addr.to_string(), nqn.to_string()))
            }
            // A discovery URL: the target's discovery controller names the subsystem.
            Some((addr, "")) if addr.contains(':') => {
                Ok((addr.to_string(), DISCOVERY_NQN.to_string()))
            }
            None if rest.contains(':') => Ok((rest.to_string(), DISCOVERY_NQN.to_string())),
            _ => Err(usage(format!(
                "target '{s}': expected {scheme}://HOST:PORT/NQN, \
                 e.g. {scheme}://127.0.0.1:4420/nqn.2024-01.io.rdmablk:ram0"
            ))),
        }
    };
    if let Some(path) = s.strip_prefix("file:") {
        if path.is_empty() {
            return Err(usage("target 'file:': expected file:/path/to/file"));
        }
        Ok(Target::File(PathBuf::from(path)))
    } else if s.starts_with("/dev/") {
        Ok(Target::File(PathBuf::from(s)))
    } else if let Some(rest) = s.strip_prefix("rdma://") {
        remote(rest, "rdma").map(|(addr, nqn)| Target::Rdma { addr, nqn })
    } else if let Some(rest) = s.strip_prefix("soft://") {
        remote(rest, "soft").map(|(addr, nqn)| Target::Soft { addr, nqn })
    } else if let Some(rest) = s.strip_prefix("tcp://") {
        remote(rest, "tcp").map(|(addr, nqn)| Target::Tcp { addr, nqn })
    } else {
        Err(usage(format!(
            "target '{s}': unknown kind (use file:/path, /dev/..., rdma://IP:PORT/NQN, \
             soft://HOST:PORT/NQN or tcp://HOST:PORT/NQN)"
        )))
    }
}

/// A run's validated settings: the flags after cross-checks, with the target parsed.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where the I/O goes.
    pub target: Target,
    /// I/O pattern.
    pub rw: RwMode,
    /// Percentage of reads for randrw.
    pub rwmixread: u8,
    /// Block size range.
    pub bs: BsRange,
    /// In-flight I/Os per job.
    pub iodepth: u32,
    /// Jobs.
    pub numjobs: u32,
    /// Measured run time; `None`: one pass of `size` bytes per job.
    pub runtime_ms: Option<u64>,
    /// Unmeasured warm-up.
    pub ramp_ms: u64,
    /// Working-set bytes per job; `None`: the capacity divided among the jobs.
    pub size: Option<u64>,
    /// Start of job 0's working set.
    pub offset: u64,
    /// O_DIRECT for the local engine.
    pub direct: bool,
    /// Polled completions (local engines).
    pub hipri: bool,
    /// Check data on reads (and stamp it on writes).
    pub verify: bool,
    /// Only check data an earlier run wrote.
    pub verify_only: bool,
    /// Workload and payload seed.
    pub seed: u64,
    /// JSON report on stdout.
    pub json: bool,
    /// No progress line.
    pub quiet: bool,
    /// Where to draw the run (SVG).
    pub plot: Option<std::path::PathBuf>,
}

impl Args {
    /// Cross-checks the flags and turns them into a [`Config`].
    pub fn validate(&self) -> Result<Config, UsageError> {
        let target = match (&self.target, self.embedded) {
            (Some(_), Some(_)) => {
                return Err(usage("give either a TARGET or --embedded, not both"))
            }
            (None, None) => {
                return Err(usage(
                    "missing TARGET (file:/path, /dev/..., rdma://IP:PORT/NQN, \
                     soft://HOST:PORT/NQN) or --embedded",
                ))
            }
            (None, Some(t)) => Target::Embedded(t, self.embedded_ns),
            (Some(t), None) => parse_target(t)?,
        };
        if !(MIN_BS_BYTES..=MAX_BS_BYTES).contains(&self.bs.min)
            || !(MIN_BS_BYTES..=MAX_BS_BYTES).contains(&self.bs.max)
        {
            return Err(usage(format!(
                "--bs {}: block sizes must be between {} and {}",
                self.bs,
                format_size(MIN_BS_BYTES),
                format_size(MAX_BS_BYTES)
            )));
        }
        if self.bs.min % MIN_BS_BYTES != 0 || self.bs.max % self.bs.min != 0 {
            return Err(usage(format!(
                "--bs {}: sizes must be multiples of 512 and the high end a multiple of the low end",
                self.bs
            )));
        }
        if self.iodepth == 0 || self.iodepth > MAX_IODEPTH {
            return Err(usage(format!(
                "--iodepth {}: must be 1..={MAX_IODEPTH}",
                self.iodepth
            )));
        }
        if self.numjobs == 0 || self.numjobs > MAX_NUMJOBS {
            return Err(usage(format!(
                "--numjobs {}: must be 1..={MAX_NUMJOBS}",
                self.numjobs
            )));
        }
        let secs_to_ms = |flag: &str, v: f64| -> Result<u64, UsageError> {
            if !v.is_finite() || !(0.0..=1e7).contains(&v) {
                return Err(usage(format!(
                    "--{flag} {v}: must be a number of seconds >= 0"
                )));
            }
            Ok((v * 1000.0).round() as u64)
        };
        let runtime_ms = self.runtime.map(|r| secs_to_ms("runtime", r)).transpose()?;
        if runtime_ms == Some(0) {
            return Err(usage(
                "--runtime 0: give a positive number of seconds, or leave it out",
            ));
        }
        let ramp_ms = secs_to_ms("ramp-time", self.ramp_time)?;
        if let Some(size) = self.size {
            if size.0 < self.bs.max {
                return Err(usage(format!(
                    "--size {size}: smaller than the largest block size {}",
                    format_size(self.bs.max)
                )));
            }
        }
        if self.offset.0 % MIN_BS_BYTES != 0 {
            return Err(usage(format!(
                "--offset {}: must be a multiple of 512",
                self.offset
            )));
        }
        if self.hipri && !matches!(target, Target::File(_)) {
            return Err(usage(format!(
                "--hipri polls a local device's completions: {target} is not one                  (give /dev/nvmeXnY or /dev/ngXnY)"
            )));
        }
        if self.hipri && !self.direct {
            return Err(usage(
                "--hipri needs --direct 1: polled completions bypass the page cache",
            ));
        }
        if self.verify_only && self.rw.writes() {
            return Err(usage(format!(
                "--verify-only reads only: use --rw read or randread, not {}",
                self.rw.as_str()
            )));
        }
        Ok(Config {
            target,
            rw: self.rw,
            rwmixread: self.rwmixread,
            bs: self.bs,
            iodepth: self.iodepth,
            numjobs: self.numjobs,
            runtime_ms,
            ramp_ms,
            size: self.size.map(|s| s.0),
            offset: self.offset.0,
            direct: self.direct,
            hipri: self.hipri,
            verify: self.verify.is_some() || self.verify_only,
            verify_only: self.verify_only,
            seed: self.seed,
            json: self.json,
            quiet: self.quiet,
            plot: self.plot.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(argv: &[&str]) -> Result<Config, String> {
        let args =
            Args::try_parse_from(std::iter::once("rdmablk-perf").chain(argv.iter().copied()))
                .map_err(|e| e.to_string())?;
        args.validate().map_err(|e| e.to_string())
    }

    #[test]
    fn sizes_take_fio_suffixes_base_1024() {
        let cases = [
            ("4096", 4096),
            ("4k", 4096),
            ("4K", 4096),
            ("4KiB", 4096),
            ("4KB", 4096),
            ("128k", 128 << 10),
            ("1M", 1 << 20),
            ("1m", 1 << 20),
            ("1MiB", 1 << 20),
            ("1GiB", 1 << 30),
            ("2g", 2 << 30),
            ("1t", 1 << 40),
            ("512b", 512),
        ];
        for (s, want) in cases {
            assert_eq!(s.parse::<ByteSize>(), Ok(ByteSize(want)), "{s}");
        }
    }

    #[test]
    fn bad_sizes_are_rejected_with_the_reason() {
        assert!(matches!(
            "".parse::<ByteSize>(),
            Err(SizeError::Malformed(_))
        ));
        assert!(matches!(
            "k".parse::<ByteSize>(),
            Err(SizeError::Malformed(_))
        ));
        assert!(matches!(
            "-4k".parse::<ByteSize>(),
            Err(SizeError::Malformed(_))
        ));
        assert!(matches!(
            "4x".parse::<ByteSize>(),
            Err(SizeError::Suffix { .. })
        ));
        assert!(matches!(
            "4kk".parse::<ByteSize>(),
            Err(SizeError::Suffix { .. })
        ));
        assert!(matches!(
            "1.5k".parse::<ByteSize>(),
            Err(SizeError::Suffix { .. })
        ));
        assert!(matches!(
            "99999999999999999999".parse::<ByteSize>(),
            Err(SizeError::Overflow(_))
        ));
        assert!(matches!(
            "100000000t".parse::<ByteSize>(),
            Err(SizeError::Overflow(_))
        ));
    }

    #[test]
    fn bs_ranges() {
        assert_eq!(
            "4k".parse(),
            Ok(BsRange {
                min: 4096,
                max: 4096
            })
        );
        assert_eq!(
            "4k-128k".parse(),
            Ok(BsRange {
                min: 4096,
                max: 128 << 10
            })
        );
        assert_eq!(
            "4k:1m".parse(),
            Ok(BsRange {
                min: 4096,
                max: 1 << 20
            })
        );
        assert!(matches!(
            "128k-4k".parse::<BsRange>(),
            Err(SizeError::InvertedRange(_))
        ));
        assert!("4k-".parse::<BsRange>().is_err());
        assert_eq!(
            BsRange {
                min: 4096,
                max: 1 << 20
            }
            .to_string(),
            "4KiB-1MiB"
        );
    }

    #[test]
    fn targets() {
        assert_eq!(
            parse_target("file:/tmp/x"),
            Ok(Target::File("/tmp/x".into()))
        );
        assert_eq!(
            parse_target("/dev/nvme0n1"),
            Ok(Target::File("/dev/nvme0n1".into()))
        );
        assert_eq!(
            parse_target("rdma://10.0.0.1:4420/nqn.x"),
            Ok(Target::Rdma {
                addr: "10.0.0.1:4420".into(),
                nqn: "nqn.x".into()
            })
        );
        assert_eq!(
            parse_target("soft://localhost:4420/nqn.y"),
            Ok(Target::Soft {
                addr: "localhost:4420".into(),
                nqn: "nqn.y".into()
            })
        );
        assert_eq!(
            parse_target("tcp://192.0.2.1:4420/nqn.z"),
            Ok(Target::Tcp {
                addr: "192.0.2.1:4420".into(),
                nqn: "nqn.z".into()
            })
        );
        assert!(parse_target("rdma://10.0.0.1/nqn").is_err());
        assert_eq!(
            parse_target("soft://h:1/"),
            Ok(Target::Soft {
                addr: "h:1".into(),
                nqn: DISCOVERY_NQN.into()
            })
        );
        assert_eq!(
            parse_target("rdma://10.0.0.1:4420"),
            Ok(Target::Rdma {
                addr: "10.0.0.1:4420".into(),
                nqn: DISCOVERY_NQN.into()
            })
        );
        assert!(parse_target("/tmp/x").unwrap_err().0.contains("file:/path"));
        assert!(parse_target("file:").is_err());
    }

    #[test]
    fn comma_separated_urls_are_multipath() {
        let t = parse_target("soft://a:1/nqn.x,soft://b:2/nqn.x").unwrap();
        assert_eq!(
            t,
            Target::Multipath {
                urls: vec!["soft://a:1/nqn.x".into(), "soft://b:2/nqn.x".into()]
            }
        );
        assert_eq!(t.to_string(), "soft://a:1/nqn.x,soft://b:2/nqn.x");
        assert!(parse_target("soft://a:1/nqn.x,rdma://b:2/nqn.x")
            .unwrap_err()
            .0
            .contains("one provider"));
        // An RDMA path and an NVMe/TCP path of one subsystem: one multipath controller.
        assert_eq!(
            parse_target("tcp://a:1/nqn.x,soft://b:2/nqn.x").map(|t| t.to_string()),
            Ok("tcp://a:1/nqn.x,soft://b:2/nqn.x".to_string())
        );
        assert_eq!(
            parse_target("tcp://a:1/nqn.x,tcp://b:2/nqn.x").map(|t| t.to_string()),
            Ok("tcp://a:1/nqn.x,tcp://b:2/nqn.x".to_string())
        );
        assert!(parse_target("soft://a:1/nqn.x,soft://b:2")
            .unwrap_err()
            .0
            .contains("names its subsystem"));
        assert!(parse_target("soft://a:1/nqn.x,file:/x").is_err());
    }

    #[test]
    fn defaults_and_full_command_line() {
        let c = parse(&["file:/tmp/f"]).unwrap();
        assert_eq!(
            (c.rw, c.rwmixread, c.iodepth, c.numjobs),
            (RwMode::Read, 50, 1, 1)
        );
        assert_eq!(
            (c.bs.min, c.runtime_ms, c.size, c.offset),
            (4096, None, None, 0)
        );
        assert!(!c.verify && !c.verify_only && c.seed == DEFAULT_SEED && c.direct);
        assert!(!parse(&["file:/tmp/f", "--direct", "0"]).unwrap().direct);
        assert!(parse(&["/dev/ng0n1", "--hipri"]).unwrap().hipri);
        let e = parse(&["tcp://10.0.0.1:4420/nqn.x", "--hipri"]).unwrap_err();
        assert!(e.contains("not one"), "{e}");
        let e = parse(&["/dev/nvme0n1", "--hipri", "--direct", "0"]).unwrap_err();
        assert!(e.contains("--direct 1"), "{e}");

        let c = parse(&[
            "file:/tmp/f",
            "--rw",
            "randrw",
            "--rwmixread",
            "70",
            "--bs",
            "4k-64k",
            "--iodepth",
            "32",
            "--numjobs",
            "2",
            "--runtime",
            "1.5",
            "--ramp-time",
            "0.5",
            "--size",
            "64m",
            "--offset",
            "1m",
            "--verify",
            "crc32c",
            "--seed",
            "7",
            "--json",
            "--quiet",
        ])
        .unwrap();
        assert_eq!(
            (c.rw, c.rwmixread, c.iodepth, c.numjobs),
            (RwMode::Randrw, 70, 32, 2)
        );
        assert_eq!((c.bs.min, c.bs.max), (4096, 64 << 10));
        assert_eq!((c.runtime_ms, c.ramp_ms), (Some(1500), 500));
        assert_eq!((c.size, c.offset, c.seed), (Some(64 << 20), 1 << 20, 7));
        assert!(c.verify && !c.verify_only && c.json && c.quiet);
    }

    #[test]
    fn verify_only_implies_verify_and_refuses_writes() {
        let c = parse(&["file:/tmp/f", "--verify-only"]).unwrap();
        assert!(c.verify && c.verify_only);
        let e = parse(&["file:/tmp/f", "--verify-only", "--rw", "write"]).unwrap_err();
        assert!(e.contains("--verify-only reads only"), "{e}");
    }

    #[test]
    fn bad_flags_are_usage_errors() {
        for (argv, needle) in [
            (&["file:/f", "--bs", "100"][..], "between"),
            (&["file:/f", "--bs", "3k-8k"][..], "multiple"),
            (&["file:/f", "--iodepth", "0"][..], "--iodepth"),
            (&["file:/f", "--numjobs", "100000"][..], "--numjobs"),
            (&["file:/f", "--runtime=-1"][..], "--runtime"),
            (&["file:/f", "--runtime", "0"][..], "--runtime"),
            (&["file:/f", "--size", "4k", "--bs", "8k"][..], "--size"),
            (&["file:/f", "--offset", "100"][..], "--offset"),
            (&["file:/f", "--rwmixread", "101"][..], "rwmixread"),
            (&["file:/f", "--rw", "trim"][..], "trim"),
            (&["file:/f", "--bs", "4q"][..], "suffix"),
            (&[][..], "missing TARGET"),
            (&["file:/f", "--embedded"][..], "not both"),
        ] {
            let e = parse(argv).unwrap_err();
            assert!(e.contains(needle), "{argv:?}: '{e}' lacks '{needle}'");
        }
        assert!(matches!(
            parse(&["--embedded"]).unwrap().target,
            Target::Embedded(EmbeddedTransport::Soft, EmbeddedNs::Ram)
        ));
        assert!(matches!(
            parse(&["--embedded=loop"]).unwrap().target,
            Target::Embedded(EmbeddedTransport::Loop, EmbeddedNs::Ram)
        ));
        assert!(matches!(
            parse(&["--embedded=tcp"]).unwrap().target,
            Target::Embedded(EmbeddedTransport::Tcp, EmbeddedNs::Ram)
        ));
    }
}
