//! The persisted reservation state as a target reads it back: the state file of a namespace
//! with Persist Through Power Loss (`target.state_dir`), and the document gateways share
//! (`shared_reservations`, an RBD image's metadata), which another gateway, or whoever can
//! write there, hands in. The input is the text. `fuzz_persisted` asserts no panic; that what
//! decodes re-encodes to a text that decodes to the same; that a host is registered once and
//! the holder is a registrant; that a document's log stays within its bound.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|b: &[u8]| {
    if let Ok(text) = std::str::from_utf8(b) {
        rdmablk_target::namespace::reservation::fuzz_persisted(text);
    }
});
