//! The open-file limit a target needs: a socket per NVMe/TCP queue (and per pending
//! connection), beside the namespaces' files, the rings and the epoll sets. Linux starts a
//! process with a soft `RLIMIT_NOFILE` of 1024, which a thousand hosts overrun; servers raise
//! the soft limit to what they need at start, up to the hard limit (systemd's `LimitNOFILE`,
//! `ulimit -Hn`), as nginx and SPDK do. The target does so in [`Target::start`].
//!
//! [`Target::start`]: crate::nvmf::Target::start

/// Descriptors the target keeps beside one per queue: namespaces, rings, epoll sets,
/// eventfds, the control and metrics sockets, pending connections.
pub const BESIDE_QUEUES: u64 = 512;

/// Raises the soft open-file limit to `want` (at most the hard limit). Returns the soft limit
/// in force afterwards; warns, naming the fix, when the hard limit is below `want`.
pub fn raise_to(want: u64) -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
        return 0;
    }
    let (soft, hard) = (r.rlim_cur, r.rlim_max);
    if soft >= want {
        return soft;
    }
    let new = want.min(hard);
    if new > soft {
        let n = libc::rlimit {
            rlim_cur: new,
            rlim_max: hard,
        };
        // SAFETY: setrlimit reads the struct it is given; raising the soft limit up to the
        // hard one needs no privilege.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &n) } != 0 {
            tracing::warn!(error = %std::io::Error::last_os_error(), soft, want,
                "cannot raise the open-file limit (RLIMIT_NOFILE)");
            return soft;
        }
        tracing::debug!(from = soft, to = new, "open-file limit raised");
    }
    if new < want {
        tracing::warn!(
            hard,
            want,
            "the open-file limit (RLIMIT_NOFILE) is below what limits.max_connections needs: \
             NVMe/TCP hosts beyond it are refused at accept; raise the hard limit \
             (LimitNOFILE= in the systemd unit, or ulimit -Hn) or lower limits.max_connections"
        );
    }
    new.max(soft)
}

#[cfg(test)]
mod tests {
    #[test]
    fn raising_keeps_a_higher_limit_and_never_exceeds_the_hard_one() {
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: as in `raise_to`.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) }, 0);
        let got = super::raise_to(r.rlim_cur.min(r.rlim_max));
        assert_eq!(got, r.rlim_cur);
        let got = super::raise_to(u64::MAX);
        assert!(got <= r.rlim_max);
    }
}
