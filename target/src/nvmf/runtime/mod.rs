//! What changes while the target runs, beside the I/O path: the port table of running
//! listeners ([`port`]), live reconfiguration ([`reload`]), reservation fences every poll
//! group clears ([`fence`]), the open-file limit raised at start ([`open_files`]), and following the other gateways of a shared namespace
//! ([`gateways`]).

pub mod fence;
pub(super) mod gateways;
pub mod open_files;
pub mod port;
pub mod reload;
