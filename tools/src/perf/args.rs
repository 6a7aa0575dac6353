//! Command-line flags of `rdmablk-perf` and their validation.
//!
//! Flag names follow fio where fio has one (`--rw`, `--bs`, `--iodepth`, `--numjobs`,
//! `--runtime`, `--ramp-time`, `--size`, `--offset`, `--rwmixread`). Sizes take fio's suffixes
//! with fio's default base of 1024: `4k`, `4K`, `4KiB` and `4KB` are all 4096 bytes.
//!
//! Sizes are `args/size.rs`, the target argument `args/target.rs`, the cross-checks that make
//! a run's [`Config`] `args/validate.rs`.

mod size;
mod target;
mod validate;

use clap::{Parser, ValueEnum};

pub use size::{format_size, BsRange, ByteSize, SizeError};
pub use target::{
    parse_target, EmbeddedNs, EmbeddedPoll, EmbeddedTransport, Target, DISCOVERY_NQN,
};
pub use validate::Config;

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

    /// How the embedded target's worker waits for work (its `target.poll_mode`): `adaptive`
    /// (the target's default: poll 50 us after the last work, then sleep), `busy` (spin) or
    /// `interrupt` (sleep whenever idle: its CPU per I/O is then work and wake-ups, no
    /// polling).
    #[arg(long, value_enum, default_value_t = EmbeddedPoll::Adaptive, value_name = "MODE")]
    pub embedded_poll_mode: EmbeddedPoll,

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

/// A usage error: what is wrong and what to write instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

fn usage(msg: impl Into<String>) -> UsageError {
    UsageError(msg.into())
}
