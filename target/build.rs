//! With the `rbd` feature (on by default): generates the librbd / librados bindings with
//! bindgen, like the root crate does for the verbs headers, and links librbd and librados.
//!
//! Needs the system packages librbd-dev, librados-dev and libclang-dev (`tools/test` installs
//! them; `tools/quickstart` builds without the feature unless they are there). Without the feature nothing is generated and nothing linked: a
//! target without RBD support builds where librbd is not installed
//! (`cargo build -p rdmablk-target --no-default-features`).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "rbd")]
    rbd::generate();
}

#[cfg(feature = "rbd")]
mod rbd {
    use std::env;
    use std::path::PathBuf;

    const WRAPPER: &str = "src/backend/rbd/wrapper.h";

    pub fn generate() {
        println!("cargo:rerun-if-changed={WRAPPER}");
        let bindings = bindgen::Builder::default()
            .header(WRAPPER)
            .allowlist_function(
                "rados_(create2|conf_read_file|conf_set|connect|shutdown|ioctx_create|\
                 ioctx_destroy|ioctx_set_namespace|get_instance_id|get_last_version|\
                 create_write_op|release_write_op|write_op_operate|write_op_create|\
                 write_op_assert_version|write_op_omap_set2|create_read_op|release_read_op|\
                 read_op_operate|read_op_omap_get_vals_by_keys2|omap_get_next2|omap_get_end|\
                 watch3|unwatch2|watch_flush|notify2|notify_ack|decode_notify_response|\
                 free_notify_response|buffer_free)|rbd_(open|close|get_size|get_id|aio_.*)",
            )
            .allowlist_var("LIBRADOS_OP_FLAG_FADVISE_FUA|LIBRADOS_CREATE_IDEMPOTENT")
            .derive_default(true)
            .derive_debug(false)
            .layout_tests(false)
            .generate_comments(false)
            .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
            .generate()
            .unwrap_or_else(|e| {
                panic!(
                    "bindgen failed on {WRAPPER}: {e}\n\
                     install the Ceph client headers and libclang: \
                     apt-get install librbd-dev librados-dev libclang-dev \
                     (or build without RBD: --no-default-features)"
                )
            });
        let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
        bindings
            .write_to_file(out.join("rbd_bindings.rs"))
            .expect("write rbd_bindings.rs");
        println!("cargo:rustc-link-lib=rbd");
        println!("cargo:rustc-link-lib=rados");
    }
}
