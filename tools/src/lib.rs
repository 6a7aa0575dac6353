//! rdmablk tools: the library behind `rdmablk-perf` (and future tools). The binaries only
//! parse arguments and call in here.

pub mod chart;
pub mod perf;
pub mod powercut;
