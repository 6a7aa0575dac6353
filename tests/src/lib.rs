//! rdmablk's end-to-end tests and the fabric conformance suite.
//!
//! The suite ([`conformance::cases`]) is written once against the public fabric API and runs
//! on any provider: [`harness::run`] drives the client half of every case against a server
//! peer ([`harness::serve`]) that runs in a thread of the same process or in another process
//! (`rdmablk-conformance --serve`). See [`peer`] for the protocol between the two.

pub mod check;
pub mod conformance;
pub mod endpoint;
pub mod harness;
pub mod peer;

pub use conformance::cases;
pub use harness::{run, serve, Case, Env, Mode, Report};
