//! CPU lists in the configuration, written as Linux writes them (`taskset -c`, `isolcpus=`,
//! systemd's `CPUAffinity=`, `/sys/devices/system/cpu/online`): `"2-5,8"`.

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

/// CPUs the affinity calls can name (glibc's `cpu_set_t`).
pub const MAX_CPUS: usize = libc::CPU_SETSIZE as usize;

/// An ordered list of CPU numbers, each once: comma-separated numbers and inclusive ranges,
/// `"0"`, `"2-5,8"`, `"1,3,5"`. Order is kept (worker `i` takes the `i`-th CPU).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct CpuList(Vec<usize>);

impl CpuList {
    /// Parses the string form (see the type's documentation).
    pub fn parse(s: &str) -> Result<CpuList, String> {
        let bad = |why: &str| format!("{s:?} is not a CPU list ({why}; write e.g. \"2-5,8\")");
        let mut cpus = Vec::new();
        for part in s.split(',').map(str::trim) {
            if part.is_empty() {
                return Err(bad("an empty entry"));
            }
            let (lo, hi) = match part.split_once('-') {
                Some((a, b)) => (a.trim(), b.trim()),
                None => (part, part),
            };
            let num = |t: &str| -> Result<usize, String> {
                let n: usize = t
                    .parse()
                    .map_err(|_| bad(&format!("{t:?} is not a CPU number")))?;
                if n >= MAX_CPUS {
                    return Err(bad(&format!(
                        "CPU {n} is beyond the last, {}",
                        MAX_CPUS - 1
                    )));
                }
                Ok(n)
            };
            let (lo, hi) = (num(lo)?, num(hi)?);
            if lo > hi {
                return Err(bad(&format!("the range {lo}-{hi} runs backwards")));
            }
            for cpu in lo..=hi {
                if cpus.contains(&cpu) {
                    return Err(bad(&format!("CPU {cpu} is listed twice")));
                }
                cpus.push(cpu);
            }
        }
        Ok(CpuList(cpus))
    }

    pub fn cpus(&self) -> &[usize] {
        &self.0
    }

    /// The CPU worker `index` runs on: the list's `index`-th, wrapping around.
    pub fn for_worker(&self, index: usize) -> Option<usize> {
        (!self.0.is_empty()).then(|| self.0[index % self.0.len()])
    }
}

impl fmt::Display for CpuList {
    /// Ranges folded back: `[2, 3, 4, 8]` is `2-4,8`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut i = 0;
        let mut first = true;
        while i < self.0.len() {
            let mut j = i;
            while j + 1 < self.0.len() && self.0[j + 1] == self.0[j] + 1 {
                j += 1;
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if j == i {
                write!(f, "{}", self.0[i])?;
            } else {
                write!(f, "{}-{}", self.0[i], self.0[j])?;
            }
            i = j + 1;
        }
        Ok(())
    }
}

impl<'de> Deserialize<'de> for CpuList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<CpuList, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = CpuList;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a CPU list such as \"2-5,8\"")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<CpuList, E> {
                CpuList::parse(s).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<CpuList, E> {
                CpuList::parse(&n.to_string()).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// The CPUs this process may run on now (its affinity mask, which `taskset` and systemd's
/// `CPUAffinity=` set), or `None` if the kernel would not say.
pub fn allowed_cpus() -> Option<CpuList> {
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: the pointer and size describe `set`, which lives across the call.
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
    if rc != 0 {
        return None;
    }
    // SAFETY: CPU_ISSET reads `set` only, for numbers below CPU_SETSIZE.
    let cpus = (0..MAX_CPUS)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect();
    Some(CpuList(cpus))
}

/// Pins the calling thread to `cpu`.
pub fn pin_current_thread(cpu: usize) -> std::io::Result<()> {
    if cpu >= MAX_CPUS {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` is below CPU_SETSIZE (checked above).
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: the pointer and size describe `set`; 0 is the calling thread.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_ranges_parse_in_order() {
        assert_eq!(CpuList::parse("0").unwrap().cpus(), &[0]);
        assert_eq!(CpuList::parse("2-5,8").unwrap().cpus(), &[2, 3, 4, 5, 8]);
        assert_eq!(CpuList::parse(" 7 , 1-2 ").unwrap().cpus(), &[7, 1, 2]);
        assert_eq!(CpuList::parse("3-3").unwrap().cpus(), &[3]);
    }

    #[test]
    fn bad_lists_say_why() {
        for (text, why) in [
            ("", "an empty entry"),
            ("1,,2", "an empty entry"),
            ("x", "\"x\" is not a CPU number"),
            ("-1", "\"\" is not a CPU number"),
            ("5-2", "runs backwards"),
            ("1,0-2", "CPU 1 is listed twice"),
            ("1024", "beyond the last, 1023"),
            ("0-99999999999999999999", "is not a CPU number"),
        ] {
            let e = CpuList::parse(text).unwrap_err();
            assert!(e.contains(why), "{text:?}: {e}");
            assert!(e.contains("2-5,8"), "{text:?}: {e}");
        }
    }

    #[test]
    fn display_folds_ranges_back() {
        assert_eq!(CpuList::parse("2-4,8").unwrap().to_string(), "2-4,8");
        assert_eq!(CpuList::parse("8,2,3").unwrap().to_string(), "8,2-3");
    }

    #[test]
    fn workers_take_the_list_in_turn() {
        let l = CpuList::parse("4,6").unwrap();
        assert_eq!(
            (0..3).map(|i| l.for_worker(i)).collect::<Vec<_>>(),
            [Some(4), Some(6), Some(4)]
        );
        assert_eq!(CpuList::default().for_worker(0), None);
    }

    #[test]
    fn this_process_may_run_somewhere() {
        let cpus = allowed_cpus().expect("sched_getaffinity");
        assert!(!cpus.cpus().is_empty());
    }
}
