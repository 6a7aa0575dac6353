//! Power-cut trials (`rdmablk-powercut`, driven by `tools/powercut`): a writer that keeps a
//! journal of what the target acknowledged, and a checker that reads the storage back after
//! the whole machine was cut off and proves every durable write is there, in full.
//!
//! The writer runs next to the target (in the VM that is killed) and appends one line to its
//! journal, on a share the kill cannot reach, after each acknowledgement:
//!
//! ```text
//! T <trial> <blocks> <block_size>    the journal's first line
//! W <first> <n> <gen> <fua>          a write of blocks first..first+n acknowledged (fua: 0|1)
//! F <w>                              a flush acknowledged; it was submitted when the journal
//!                                    held <w> W lines, so those writes are durable
//! ```
//!
//! A write is *durable* once acknowledged with FUA, or when a flush submitted after its
//! acknowledgement is acknowledged. Every block holds a self-describing version (its block
//! number, a generation, a pattern derived from both); generations only grow, across trials
//! too. After the cut, each block must hold one whole version (none torn), of a generation
//! no older than the block's newest durable write. A write acknowledged but cut off before
//! its journal line proves nothing and is not checked; it can only make a block newer.

use std::fmt::Write as _;
use std::io::Write as _;

/// Bytes at the start of every written block.
pub const MAGIC: &[u8; 8] = b"RDMBPCUT";

/// Fills `out` (one block) with version `gen` of block `block`; generation 0 is all zeros
/// (never written).
pub fn block_content(block: u64, gen: u64, out: &mut [u8]) {
    if gen == 0 {
        out.fill(0);
        return;
    }
    out[..8].copy_from_slice(MAGIC);
    out[8..16].copy_from_slice(&block.to_le_bytes());
    out[16..24].copy_from_slice(&gen.to_le_bytes());
    let mut x = block.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ gen;
    for chunk in out[24..].chunks_mut(8) {
        x = splitmix(x);
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The generation block `block` holds, or why it holds none (torn, foreign, misplaced).
pub fn decode(block: u64, data: &[u8]) -> Result<u64, String> {
    if data.iter().all(|&b| b == 0) {
        return Ok(0);
    }
    if &data[..8] != MAGIC {
        return Err(format!(
            "block {block}: not a version written by the trials"
        ));
    }
    let at = u64::from_le_bytes(data[8..16].try_into().unwrap());
    let gen = u64::from_le_bytes(data[16..24].try_into().unwrap());
    if at != block {
        return Err(format!(
            "block {block}: holds block {at}'s data (gen {gen:#x})"
        ));
    }
    let mut want = vec![0u8; data.len()];
    block_content(block, gen, &mut want);
    match data.iter().zip(&want).position(|(a, b)| a != b) {
        None => Ok(gen),
        Some(i) => Err(format!(
            "block {block}: torn: gen {gen:#x}'s header but other bytes from offset {i}"
        )),
    }
}

/// The generation of write `n` (from 1) of trial `trial`: later trials write newer versions.
pub fn generation(trial: u32, n: u64) -> u64 {
    (u64::from(trial) + 1) << 40 | n
}

/// The journal, appended line by line (one `write(2)` each, so a line the kill cut short is
/// at worst the last one, and ignored).
pub struct Journal {
    file: std::fs::File,
    /// W lines written so far.
    pub writes: u64,
    line: String,
}

impl Journal {
    pub fn create(
        path: &std::path::Path,
        trial: u32,
        blocks: u64,
        bs: u32,
    ) -> std::io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(path)?;
        let mut j = Journal {
            file,
            writes: 0,
            line: String::new(),
        };
        j.append(format_args!("T {trial} {blocks} {bs}"))?;
        Ok(j)
    }

    fn append(&mut self, args: std::fmt::Arguments<'_>) -> std::io::Result<()> {
        self.line.clear();
        let _ = self.line.write_fmt(args);
        self.line.push('\n');
        self.file.write_all(self.line.as_bytes())
    }

    pub fn write_acked(&mut self, first: u64, n: u64, gen: u64, fua: bool) -> std::io::Result<()> {
        self.append(format_args!("W {first} {n} {gen} {}", u8::from(fua)))?;
        self.writes += 1;
        Ok(())
    }

    /// A flush submitted when the journal held `writes_before` W lines was acknowledged.
    pub fn flush_acked(&mut self, writes_before: u64) -> std::io::Result<()> {
        self.append(format_args!("F {writes_before}"))
    }
}

/// What a journal says must have survived.
#[derive(Debug, Default)]
pub struct Durable {
    pub trial: u32,
    pub blocks: u64,
    pub block_size: u32,
    /// Per block: the newest durable generation (0: none).
    pub newest: Vec<u64>,
    /// Writes acknowledged (W lines), and those of them durable.
    pub acked: u64,
    pub durable: u64,
    pub flushes: u64,
}

/// Reads a journal. A last line without its newline (cut by the kill) is ignored.
pub fn read_journal(text: &str) -> Result<Durable, String> {
    let complete = match text.rfind('\n') {
        Some(i) => &text[..=i],
        None => "",
    };
    let mut lines = complete.lines();
    let head: Vec<&str> = lines
        .next()
        .ok_or("empty journal")?
        .split_whitespace()
        .collect();
    let num = |s: &str| s.parse::<u64>().map_err(|e| format!("journal: {s:?}: {e}"));
    let (trial, blocks, bs) = match head[..] {
        ["T", t, b, s] => (num(t)? as u32, num(b)?, num(s)? as u32),
        _ => return Err(format!("journal: bad first line {head:?}")),
    };
    let mut writes: Vec<(u64, u64, u64, bool)> = Vec::new();
    let mut flushed_upto = 0u64;
    let mut d = Durable {
        trial,
        blocks,
        block_size: bs,
        newest: vec![0; blocks as usize],
        ..Durable::default()
    };
    for line in lines {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f[..] {
            ["W", a, n, g, fua] => writes.push((num(a)?, num(n)?, num(g)?, fua == "1")),
            ["F", w] => {
                flushed_upto = flushed_upto.max(num(w)?);
                d.flushes += 1;
            }
            _ => return Err(format!("journal: bad line {line:?}")),
        }
    }
    d.acked = writes.len() as u64;
    for (i, &(first, n, gen, fua)) in writes.iter().enumerate() {
        if !(fua || (i as u64) < flushed_upto) {
            continue;
        }
        if first + n > blocks {
            return Err(format!("journal: write {first}+{n} beyond {blocks} blocks"));
        }
        d.durable += 1;
        for b in first..first + n {
            let v = &mut d.newest[b as usize];
            *v = (*v).max(gen);
        }
    }
    Ok(d)
}

/// Checks the blocks read back (`data`: the region, `blocks` x `block_size` bytes) against
/// the journal: every problem found, one line each.
pub fn check(d: &Durable, data: &[u8]) -> Vec<String> {
    let bs = d.block_size as usize;
    let mut bad = Vec::new();
    for b in 0..d.blocks {
        let block = &data[b as usize * bs..(b as usize + 1) * bs];
        match decode(b, block) {
            Err(e) => bad.push(e),
            Ok(g) if g < d.newest[b as usize] => bad.push(format!(
                "block {b}: durable gen {:#x} lost, found {g:#x}",
                d.newest[b as usize]
            )),
            Ok(_) => {}
        }
    }
    bad
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_decode_and_a_torn_block_does_not() {
        let mut b = vec![0u8; 4096];
        assert_eq!(decode(3, &b), Ok(0));
        block_content(3, generation(0, 7), &mut b);
        assert_eq!(decode(3, &b), Ok(generation(0, 7)));
        assert!(decode(4, &b).is_err(), "misplaced");
        let mut torn = b.clone();
        let mut other = vec![0u8; 4096];
        block_content(3, generation(0, 8), &mut other);
        torn[2048..].copy_from_slice(&other[2048..]);
        assert!(decode(3, &torn).unwrap_err().contains("torn"));
    }

    #[test]
    fn durable_means_fua_or_flushed_after_the_ack() {
        let j = "T 0 8 4096\nW 0 2 10 0\nW 2 1 11 1\nF 1\nW 0 1 12 0\nW 5 1 13 0\nF 3\nW 6";
        let d = read_journal(j).unwrap();
        assert_eq!((d.acked, d.durable, d.flushes), (4, 3, 2));
        // Block 0: gen 12 was acked before a flush was submitted with 3 writes journaled.
        assert_eq!(&d.newest[..], &[12, 10, 11, 0, 0, 0, 0, 0]);
        let mut data = vec![0u8; 8 * 4096];
        for (b, g) in [(0u64, 12u64), (1, 10), (2, 11), (5, 13)] {
            block_content(b, g, &mut data[b as usize * 4096..][..4096]);
        }
        assert!(check(&d, &data).is_empty());
        block_content(0, 9, &mut data[..4096]);
        assert_eq!(
            check(&d, &data).len(),
            1,
            "an older version of block 0 is a loss"
        );
    }
}
