//! The checked-in `rdmablk.pc` names this crate's version.

#[test]
fn pkg_config_version_matches_the_crate() {
    let pc = include_str!("../rdmablk.pc");
    let want = format!("Version: {}", env!("CARGO_PKG_VERSION"));
    assert!(
        pc.lines().any(|l| l == want),
        "initiator-c/rdmablk.pc: update its Version line to {}",
        env!("CARGO_PKG_VERSION")
    );
}
