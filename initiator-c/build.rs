//! The shared library's SONAME. A Debian package (tools/package) needs one: it sets
//! RDMABLK_C_SONAME=librdmablk_c.so.0 for its release build. Other builds leave it unset, so
//! programs linked in the build tree (the C example, fio engine and their tests) load
//! build/<profile>/librdmablk_c.so by its file name.
fn main() {
    println!("cargo:rerun-if-env-changed=RDMABLK_C_SONAME");
    if let Ok(soname) = std::env::var("RDMABLK_C_SONAME") {
        if !soname.is_empty() {
            println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{soname}");
        }
    }
}
