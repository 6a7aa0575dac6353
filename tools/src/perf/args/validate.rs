//! The flags cross-checked ([`Args::validate`]) into a run's [`Config`]: sizes, depths,
//! times and the combinations that make no sense, each refused with what to write instead.

use super::{
    format_size, parse_target, usage, Args, BsRange, RwMode, Target, UsageError, MAX_BS_BYTES,
    MAX_IODEPTH, MAX_NUMJOBS, MIN_BS_BYTES,
};

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
            (None, Some(t)) => Target::Embedded(t, self.embedded_ns, self.embedded_poll_mode),
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
                "--hipri polls a local device's completions: {target} is not one \
                 (give /dev/nvmeXnY or /dev/ngXnY)"
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
    use clap::Parser;

    use super::super::{EmbeddedNs, EmbeddedPoll, EmbeddedTransport, DEFAULT_SEED};
    use super::*;

    fn parse(argv: &[&str]) -> Result<Config, String> {
        let args =
            Args::try_parse_from(std::iter::once("rdmablk-perf").chain(argv.iter().copied()))
                .map_err(|e| e.to_string())?;
        args.validate().map_err(|e| e.to_string())
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
            Target::Embedded(
                EmbeddedTransport::Soft,
                EmbeddedNs::Ram,
                EmbeddedPoll::Adaptive
            )
        ));
        assert!(matches!(
            parse(&["--embedded=loop"]).unwrap().target,
            Target::Embedded(EmbeddedTransport::Loop, EmbeddedNs::Ram, _)
        ));
        assert!(matches!(
            parse(&[
                "--embedded=loop",
                "--embedded-ns",
                "null",
                "--embedded-poll-mode",
                "interrupt"
            ])
            .unwrap()
            .target,
            Target::Embedded(
                EmbeddedTransport::Loop,
                EmbeddedNs::Null,
                EmbeddedPoll::Interrupt
            )
        ));
        assert!(matches!(
            parse(&["--embedded=tcp"]).unwrap().target,
            Target::Embedded(EmbeddedTransport::Tcp, EmbeddedNs::Ram, _)
        ));
    }
}
