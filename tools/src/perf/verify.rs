//! Data verification: what a written block holds, and checking a read against it.
//!
//! Every *verify block* (the low end of `--bs`; every I/O is a whole number of them) that a
//! verifying run writes starts with a 40-byte header, followed by a payload generated from
//! `(seed, offset, generation)`, and the crc32c of both:
//!
//! ```text
//! byte  0      4          8              16             24               32      36      40
//!       +------+----------+--------------+--------------+----------------+-------+-------+----
//!       | magic| block_len|   offset     |    seed      |  generation    | crc32c| zero  | payload
//!       | RBVF | u32 LE   |   u64 LE     |   u64 LE     |   u64 LE       | u32 LE| u32   | ...
//!       +------+----------+--------------+--------------+----------------+-------+-------+----
//! ```
//!
//! `crc32c` covers bytes `0..32` and `36..block_len` (the whole block but the crc itself).
//! A read is checked against what must be there: magic, length, its own offset (catches
//! misdirected I/O), the run's seed (catches stale data from another run), the generation (the
//! count of acknowledged writes to that block in this run: catches lost writes) and the crc
//! (catches torn or corrupted data).
//!
//! Where the generation is not known (a `--verify-only` run checking data an earlier run
//! wrote) any generation is accepted; the crc still pins the payload to the header.

use std::fmt;

use crate::perf::rng::SplitMix64;

/// `"RBVF"` read as a little-endian u32.
pub const MAGIC: u32 = u32::from_le_bytes(*b"RBVF");
/// Header bytes at the start of each verify block.
pub const HEADER_LEN: usize = 40;
const CRC_AT: usize = 32;

/// The header fields of one verify block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockHeader {
    /// [`MAGIC`] when written by this tool.
    pub magic: u32,
    /// The verify block size the writer used.
    pub block_len: u32,
    /// Byte offset the block was written to.
    pub offset: u64,
    /// The writer's `--seed`.
    pub seed: u64,
    /// Which write to this block it was (1 = first).
    pub generation: u64,
    /// crc32c of the block but this field.
    pub crc: u32,
}

const _: () = assert!(HEADER_LEN == 4 + 4 + 8 + 8 + 8 + 4 + 4);

impl BlockHeader {
    /// Decodes the header at the start of `block` (at least [`HEADER_LEN`] bytes).
    pub fn decode(block: &[u8]) -> Self {
        let u32_at = |i: usize| u32::from_le_bytes(block[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(block[i..i + 8].try_into().expect("8 bytes"));
        Self {
            magic: u32_at(0),
            block_len: u32_at(4),
            offset: u64_at(8),
            seed: u64_at(16),
            generation: u64_at(24),
            crc: u32_at(CRC_AT),
        }
    }

    fn encode(&self, block: &mut [u8]) {
        block[0..4].copy_from_slice(&self.magic.to_le_bytes());
        block[4..8].copy_from_slice(&self.block_len.to_le_bytes());
        block[8..16].copy_from_slice(&self.offset.to_le_bytes());
        block[16..24].copy_from_slice(&self.seed.to_le_bytes());
        block[24..32].copy_from_slice(&self.generation.to_le_bytes());
        block[32..36].copy_from_slice(&self.crc.to_le_bytes());
        block[36..40].fill(0);
    }
}

impl fmt::Display for BlockHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "magic={:#010x} block_len={} offset={} seed={:#x} generation={} crc32c={:#010x}",
            self.magic, self.block_len, self.offset, self.seed, self.generation, self.crc
        )
    }
}

/// crc32c of a block, skipping its crc field.
fn block_crc(block: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&block[..CRC_AT]), &block[CRC_AT + 4..])
}

/// Writes the header, payload and crc of the verify block at `offset` into `block` (whose
/// length is the verify block size, at least [`HEADER_LEN`]).
pub fn stamp(block: &mut [u8], offset: u64, seed: u64, generation: u64) {
    assert!(block.len() >= HEADER_LEN && block.len() <= u32::MAX as usize);
    let mut rng = SplitMix64::new(
        seed ^ offset.rotate_left(23) ^ generation.wrapping_mul(0x2545_f491_4f6c_dd1d),
    );
    let mut words = block[HEADER_LEN..].chunks_exact_mut(8);
    for w in &mut words {
        w.copy_from_slice(&rng.next_u64().to_le_bytes());
    }
    let tail = words.into_remainder();
    let last = rng.next_u64().to_le_bytes();
    tail.copy_from_slice(&last[..tail.len()]);
    let mut h = BlockHeader {
        magic: MAGIC,
        block_len: block.len() as u32,
        offset,
        seed,
        generation,
        crc: 0,
    };
    h.encode(block);
    h.crc = block_crc(block);
    h.encode(block);
}

/// What a read of one verify block must find.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expected {
    /// Its byte offset.
    pub offset: u64,
    /// The run's seed.
    pub seed: u64,
    /// The generation of the last acknowledged write, or `None`: any.
    pub generation: Option<u64>,
}

impl fmt::Display for Expected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "magic={MAGIC:#010x} offset={} seed={:#x} generation=",
            self.offset, self.seed
        )?;
        match self.generation {
            Some(g) => write!(f, "{g}"),
            None => f.write_str("any"),
        }
    }
}

/// Which check failed first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mismatch {
    /// All zeroes: never written (by this tool or anything else since it was zeroed).
    Unwritten,
    /// Not written by this tool (or the header is destroyed).
    Magic,
    /// Written with another verify block size.
    BlockLen,
    /// Written for another offset: misdirected I/O.
    Offset,
    /// Written by a run with another seed.
    Seed,
    /// An older (lost write) or newer generation.
    Generation,
    /// Header and payload do not match their crc: corrupted or torn.
    Crc {
        /// crc32c of what was read.
        computed: u32,
    },
}

/// A failed check: where, what was expected, what was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyError {
    /// The first failing check.
    pub mismatch: Mismatch,
    /// What had to be there.
    pub expected: Expected,
    /// The header that was read.
    pub found: BlockHeader,
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.mismatch {
            Mismatch::Unwritten => {
                "all zeroes: never written (a run that ends on its --runtime may not have \
                 written every block of a random pattern; a sequential --rw write without \
                 --runtime writes each once)"
            }
            Mismatch::Magic => "bad magic (block not written by rdmablk-perf, or overwritten)",
            Mismatch::BlockLen => "block length differs (written with another --bs?)",
            Mismatch::Offset => "offset differs (misdirected write or read)",
            Mismatch::Seed => "seed differs (written by a run with another --seed)",
            Mismatch::Generation => "generation differs (lost or stale write)",
            Mismatch::Crc { .. } => "crc32c mismatch (data corrupted)",
        };
        let off = self.expected.offset;
        write!(f, "offset {off} ({off:#x}): {what}")?;
        if let Mismatch::Crc { computed } = self.mismatch {
            write!(f, ", computed crc32c={computed:#010x}")?;
        }
        write!(
            f,
            "\n  expected: {}\n  found:    {}",
            self.expected, self.found
        )
    }
}

impl std::error::Error for VerifyError {}

/// Checks one verify block read from `expected.offset`.
pub fn check(block: &[u8], expected: Expected) -> Result<(), VerifyError> {
    let found = BlockHeader::decode(block);
    let fail = |mismatch| {
        Err(VerifyError {
            mismatch,
            expected,
            found,
        })
    };
    if found.magic != MAGIC {
        if block.iter().all(|&b| b == 0) {
            return fail(Mismatch::Unwritten);
        }
        return fail(Mismatch::Magic);
    }
    if found.block_len as usize != block.len() {
        return fail(Mismatch::BlockLen);
    }
    if found.offset != expected.offset {
        return fail(Mismatch::Offset);
    }
    if found.seed != expected.seed {
        return fail(Mismatch::Seed);
    }
    if expected.generation.is_some_and(|g| g != found.generation) {
        return fail(Mismatch::Generation);
    }
    let computed = block_crc(block);
    if computed != found.crc {
        return fail(Mismatch::Crc { computed });
    }
    Ok(())
}

/// What a job knows about each verify block of its region: the generation of the last
/// acknowledged write. One `u32` per block, allocated at start-up.
#[derive(Debug)]
pub struct BlockStates {
    gens: Vec<u32>,
}

/// The most verify blocks one job tracks (512 MiB of state); `--size` must fit.
pub const MAX_TRACKED_BLOCKS: u64 = 1 << 27;

/// What a job knows about one block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockState {
    /// Not written in this run: contents unknown to this run.
    Unwritten,
    /// The last acknowledged write was generation `n` (1 = first).
    Written(u64),
    /// A write to it failed: contents undefined, not checked again until rewritten.
    Undefined,
}

const UNDEFINED: u32 = u32::MAX;

impl BlockStates {
    /// State for `blocks` blocks, all [`BlockState::Unwritten`].
    pub fn new(blocks: u64) -> Self {
        assert!(blocks <= MAX_TRACKED_BLOCKS);
        Self {
            gens: vec![0; blocks as usize],
        }
    }

    /// The state of block `i`.
    pub fn get(&self, i: usize) -> BlockState {
        match self.gens[i] {
            0 => BlockState::Unwritten,
            UNDEFINED => BlockState::Undefined,
            g => BlockState::Written(u64::from(g)),
        }
    }

    /// The generation the next write to block `i` carries.
    pub fn next_generation(&self, i: usize) -> u64 {
        match self.gens[i] {
            UNDEFINED => 1,
            g => u64::from(g) + 1,
        }
    }

    /// Records the acknowledged write of `generation` to block `i`.
    pub fn set_written(&mut self, i: usize, generation: u64) {
        debug_assert!(generation > 0 && generation < u64::from(UNDEFINED));
        self.gens[i] = generation as u32;
    }

    /// Records a failed write to block `i`.
    pub fn set_undefined(&mut self, i: usize) {
        self.gens[i] = UNDEFINED;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(offset: u64, generation: u64) -> Vec<u8> {
        let mut b = vec![0u8; 4096];
        stamp(&mut b, offset, 42, generation);
        b
    }

    #[test]
    fn a_block_of_zeroes_is_unwritten_and_other_foreign_data_bad_magic() {
        let want = Expected {
            offset: 0,
            seed: 42,
            generation: None,
        };
        let zeroes = vec![0u8; 4096];
        let e = check(&zeroes, want).unwrap_err();
        assert_eq!(e.mismatch, Mismatch::Unwritten);
        assert!(e.to_string().contains("never written"), "{e}");
        let mut foreign = zeroes.clone();
        foreign[4000] = 1;
        assert_eq!(check(&foreign, want).unwrap_err().mismatch, Mismatch::Magic);
    }

    #[test]
    fn stamped_block_checks_and_decodes() {
        let b = block(8192, 3);
        let h = BlockHeader::decode(&b);
        assert_eq!(
            (h.magic, h.block_len, h.offset, h.seed, h.generation),
            (MAGIC, 4096, 8192, 42, 3)
        );
        assert_eq!(&b[..4], b"RBVF");
        check(
            &b,
            Expected {
                offset: 8192,
                seed: 42,
                generation: Some(3),
            },
        )
        .unwrap();
        check(
            &b,
            Expected {
                offset: 8192,
                seed: 42,
                generation: None,
            },
        )
        .unwrap();
        assert_eq!(b, block(8192, 3), "payload is deterministic");
        assert_ne!(
            b[HEADER_LEN..],
            block(8192, 4)[HEADER_LEN..],
            "generation changes payload"
        );
        assert_ne!(
            b[HEADER_LEN..],
            block(4096, 3)[HEADER_LEN..],
            "offset changes payload"
        );
    }

    #[test]
    fn each_kind_of_damage_is_named() {
        let good = Expected {
            offset: 8192,
            seed: 42,
            generation: Some(3),
        };
        let kind = |b: &[u8], e: Expected| check(b, e).unwrap_err().mismatch;
        assert_eq!(kind(&vec![0u8; 4096], good), Mismatch::Unwritten);
        assert_eq!(kind(&vec![0xA5u8; 4096], good), Mismatch::Magic);
        assert_eq!(kind(&block(8192, 3)[..2048], good), Mismatch::BlockLen);
        assert_eq!(kind(&block(4096, 3), good), Mismatch::Offset);
        assert_eq!(
            kind(&block(8192, 3), Expected { seed: 1, ..good }),
            Mismatch::Seed
        );
        assert_eq!(kind(&block(8192, 2), good), Mismatch::Generation);
        let mut b = block(8192, 3);
        b[1000] ^= 1;
        let e = check(&b, good).unwrap_err();
        assert!(matches!(e.mismatch, Mismatch::Crc { .. }));
        let msg = e.to_string();
        assert!(
            msg.starts_with("offset 8192 (0x2000): crc32c mismatch"),
            "{msg}"
        );
        assert!(msg.contains("expected: magic=0x46564252 offset=8192 seed=0x2a generation=3"));
        assert!(
            msg.contains("found:    magic=0x46564252 block_len=4096 offset=8192"),
            "{msg}"
        );
    }

    #[test]
    fn odd_block_lengths_fill_the_tail() {
        let mut b = vec![0u8; 512 + 4];
        stamp(&mut b, 0, 1, 1);
        check(
            &b,
            Expected {
                offset: 0,
                seed: 1,
                generation: Some(1),
            },
        )
        .unwrap();
    }

    #[test]
    fn block_states() {
        let mut s = BlockStates::new(4);
        assert_eq!(s.get(0), BlockState::Unwritten);
        assert_eq!(s.next_generation(0), 1);
        s.set_written(0, 1);
        assert_eq!(
            (s.get(0), s.next_generation(0)),
            (BlockState::Written(1), 2)
        );
        s.set_undefined(0);
        assert_eq!((s.get(0), s.next_generation(0)), (BlockState::Undefined, 1));
    }
}
