//! The configuration file an edit changes: refused when read-only, written atomically (a
//! temporary file beside it, synced, renamed over it).

use std::io::Write;
use std::path::Path;

/// The file's metadata if it may be changed; a read-only file is refused: a change made only
/// to the running target would be lost at the next restart or reload.
pub fn writable(path: &Path) -> Result<std::fs::Metadata, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if meta.permissions().readonly() {
        return Err(format!(
            "{} is read-only: changes are refused so that the file and the running target \
             never disagree (make it writable, or edit it and reload)",
            path.display()
        ));
    }
    Ok(meta)
}

/// Writes `text` to `path` atomically: a temporary file beside it, fsync, rename, fsync of the
/// directory. A read-only file is refused (the change would not survive a restart).
pub fn write_atomically(path: &Path, text: &str) -> Result<(), String> {
    let meta = writable(path)?;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().to_string());
    let tmp = dir.join(format!(".{}.rdmablk-tmp", name.unwrap_or_default()));
    let io = |e: std::io::Error| format!("writing {}: {e}", tmp.display());
    {
        let mut f = std::fs::File::create(&tmp).map_err(io)?;
        f.set_permissions(meta.permissions()).map_err(io)?;
        f.write_all(text.as_bytes()).map_err(io)?;
        f.sync_all().map_err(io)?;
    }
    std::fs::rename(&tmp, path).map_err(|e| format!("renaming over {}: {e}", path.display()))?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}
