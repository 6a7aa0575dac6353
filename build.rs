//! Generates the libibverbs / librdmacm bindings with bindgen and compiles the small C shim that
//! gives Rust callable symbols for the verbs that `<infiniband/verbs.h>` defines as
//! `static inline` (ibv_post_send, ibv_poll_cq, ibv_req_notify_cq, ibv_alloc_mw, ...).
//!
//! Needs the system packages libibverbs-dev, librdmacm-dev and libclang-dev
//! (`tools/quickstart` and `tools/test` install them).

use std::env;
use std::path::PathBuf;

const WRAPPER: &str = "src/fabric/verbs/wrapper.h";
const SHIM: &str = "src/fabric/verbs/shim.c";

fn main() {
    println!("cargo:rerun-if-changed={WRAPPER}");
    println!("cargo:rerun-if-changed={SHIM}");
    println!("cargo:rerun-if-changed=build.rs");

    let bindings = bindgen::Builder::default()
        .header(WRAPPER)
        .allowlist_function("ibv_.*|rdma_.*|rdmablk_shim_.*")
        .allowlist_type("ibv_.*|rdma_.*")
        .allowlist_var("IBV_.*|RDMA_.*")
        .prepend_enum_name(false)
        .constified_enum_module("ibv_.*|rdma_.*")
        .bitfield_enum("ibv_access_flags|ibv_send_flags|ibv_qp_attr_mask|ibv_device_cap_flags")
        .derive_default(true)
        .derive_debug(false)
        .layout_tests(false)
        .generate_comments(false)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .generate()
        .unwrap_or_else(|e| {
            panic!(
                "bindgen failed on {WRAPPER}: {e}\n\
                 install the RDMA headers and libclang: \
                 apt-get install libibverbs-dev librdmacm-dev libclang-dev"
            )
        });
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    bindings
        .write_to_file(out.join("verbs_bindings.rs"))
        .expect("write verbs_bindings.rs");

    cc::Build::new()
        .file(SHIM)
        .warnings(true)
        .extra_warnings(true)
        .flag_if_supported("-Wno-unused-parameter")
        .compile("rdmablk_verbs_shim");

    println!("cargo:rustc-link-lib=ibverbs");
    println!("cargo:rustc-link-lib=rdmacm");
}
