//! Little-endian field access at fixed offsets of wire buffers.
//!
//! Every caller passes a buffer whose length was checked against the layout's fixed size (most
//! take `&[u8; N]`), and offsets are constants of that layout, so an out-of-range index here is
//! a bug in this module, never something a peer can cause.

pub(crate) fn u16_at(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}

pub(crate) fn u24_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], 0])
}

pub(crate) fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

pub(crate) fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(v)
}

pub(crate) fn u128_at(b: &[u8], off: usize) -> u128 {
    let mut v = [0u8; 16];
    v.copy_from_slice(&b[off..off + 16]);
    u128::from_le_bytes(v)
}

pub(crate) fn put_u16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_le_bytes());
}

/// Writes the low 24 bits of `v`; the caller checked that `v` fits.
pub(crate) fn put_u24(b: &mut [u8], off: usize, v: u32) {
    debug_assert!(v <= 0x00FF_FFFF, "u24 field overflow: {v:#x}");
    b[off..off + 3].copy_from_slice(&v.to_le_bytes()[..3]);
}

pub(crate) fn put_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_u64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_u128(b: &mut [u8], off: usize, v: u128) {
    b[off..off + 16].copy_from_slice(&v.to_le_bytes());
}

/// Copies `N` bytes starting at `off` into an array.
pub(crate) fn array_at<const N: usize>(b: &[u8], off: usize) -> [u8; N] {
    let mut v = [0u8; N];
    v.copy_from_slice(&b[off..off + N]);
    v
}

/// An ASCII identification field (serial number, model, firmware revision): left-justified and
/// padded with spaces, as Identify requires. Bytes past `N` are cut; non-ASCII bytes become `?`.
pub fn ascii_padded<const N: usize>(s: &str) -> [u8; N] {
    let mut out = [b' '; N];
    for (dst, src) in out.iter_mut().zip(s.bytes()) {
        *dst = if src.is_ascii_graphic() || src == b' ' {
            src
        } else {
            b'?'
        };
    }
    out
}

/// The text of a space- (or NUL-) padded ASCII field, trailing padding removed. Non-printable
/// bytes are shown as `?` so a peer's bytes cannot inject control characters into logs.
pub fn ascii_trimmed(field: &[u8]) -> String {
    let end = field
        .iter()
        .rposition(|&c| c != b' ' && c != 0)
        .map_or(0, |p| p + 1);
    field[..end]
        .iter()
        .map(|&c| {
            if c.is_ascii_graphic() || c == b' ' {
                c as char
            } else {
                '?'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_roundtrip_little_endian() {
        let mut b = [0u8; 32];
        put_u16(&mut b, 0, 0x0201);
        put_u24(&mut b, 2, 0x050403);
        put_u32(&mut b, 5, 0x0908_0706);
        put_u64(&mut b, 9, 0x1110_0F0E_0D0C_0B0A);
        assert_eq!(
            &b[..17],
            &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17]
        );
        assert_eq!(u16_at(&b, 0), 0x0201);
        assert_eq!(u24_at(&b, 2), 0x050403);
        assert_eq!(u32_at(&b, 5), 0x0908_0706);
        assert_eq!(u64_at(&b, 9), 0x1110_0F0E_0D0C_0B0A);
        put_u128(&mut b, 16, 0xAB);
        assert_eq!(u128_at(&b, 16), 0xAB);
        assert_eq!(array_at::<2>(&b, 0), [1, 2]);
    }

    #[test]
    fn ascii_fields_pad_and_trim() {
        let f: [u8; 8] = ascii_padded("ab\ncd");
        assert_eq!(&f, b"ab?cd   ");
        assert_eq!(ascii_trimmed(&f), "ab?cd");
        assert_eq!(ascii_trimmed(&[0u8; 4]), "");
        let long: [u8; 2] = ascii_padded("xyz");
        assert_eq!(&long, b"xy");
    }
}
