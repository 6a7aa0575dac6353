//! Field checks, one test per row of `docs/conformance.md`: each sends what the row calls
//! invalid and asserts the exact status rdmablk answers (SCT, SC and DNR), and sends one valid
//! form and asserts it is accepted. Test names start with `conformance_` and the row's
//! command, so `cargo test -p rdmablk-target --test conformance connect_sqsize` runs a row.
//!
//! The checks live in the target's command handlers, which need a live queue: the tests drive
//! an in-process target through the raw test host of `tests/common` (every byte of the
//! capsule under the test's control), on the soft provider unless `RDMABLK_E2E_PROVIDER` says
//! otherwise. The parsers' own unit tests (`src/nvme/*.rs`) check the same fields one level
//! down.

#[path = "../common/mod.rs"]
mod common;

mod admin;
mod common_fields;
mod connect;
mod discovery;
mod features;
mod fixture;
mod identify;
mod io;
mod log_page;
mod property;
