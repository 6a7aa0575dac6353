//! Writes the known-good seed inputs of every fuzz target to `corpus/<target>/<name>`.
//!
//! Run from `fuzz/`: `cargo run --bin gen-corpus` (stable Rust is enough). Files are named by
//! what they are; a crash input added to a corpus by hand is left alone.

use std::path::Path;

fn main() -> std::io::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    for (target, seeds) in rdmablk_fuzz::all_seeds() {
        let dir = root.join(target);
        std::fs::create_dir_all(&dir)?;
        for (name, bytes) in seeds {
            std::fs::write(dir.join(format!("seed-{name}")), &bytes)?;
        }
    }
    println!("seed corpus written to {}", root.display());
    Ok(())
}
