//! Raw bindgen output for libibverbs and librdmacm (see build.rs). Only `fabric::verbs` uses it.
#![allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    dead_code
)]
#![allow(clippy::all, clippy::undocumented_unsafe_blocks)]
include!(concat!(env!("OUT_DIR"), "/verbs_bindings.rs"));
