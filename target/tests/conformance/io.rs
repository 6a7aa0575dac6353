//! Rows of "I/O: Read / Write" and "I/O: Flush, Write Zeroes, DSM".

use rdmablk::nvme::io::{flush_sqe, DsmRange, DSM_RANGE_LEN};
use rdmablk::nvme::{Dsm, ReadWrite, Sqe, Status, WriteZeroes};

use super::common::*;
use super::fixture::*;

fn rw_with(write: bool, nsid: u32, lba: u64, blocks: u32, cdw12: u32, h: &Host) -> Sqe {
    let mut sqe = rw_sqe(write, nsid, lba, blocks, &h.keyed(0, blocks * BLOCK));
    sqe.cdw12 |= cdw12;
    sqe
}

#[test]
fn conformance_rw_nsid() {
    let (_fx, _admin, mut q) = with_io();
    for nsid in [0u32, INACTIVE_NSID, 0xFFFF_FFFE, 0xFFFF_FFFF] {
        for write in [false, true] {
            expect(
                &q.rw(write, nsid, 0, 1),
                Status::INVALID_NAMESPACE.with_dnr(),
            );
        }
        // The NSID is checked first: before the SGL length.
        let sqe = rw_sqe(false, nsid, 0, 2, &q.keyed(0, BLOCK));
        expect(&q.submit(sqe, &[]), Status::INVALID_NAMESPACE.with_dnr());
    }
    ok(&q.rw(false, 1, 0, 1));
    ok(&q.rw(false, RO_NSID, 0, 1));
}

#[test]
fn conformance_rw_lba_range() {
    let (_fx, _admin, mut q) = with_io();
    for write in [false, true] {
        expect(
            &q.rw(write, 1, NS_BLOCKS, 1),
            Status::LBA_OUT_OF_RANGE.with_dnr(),
        );
        expect(
            &q.rw(write, 1, NS_BLOCKS - 1, 2),
            Status::LBA_OUT_OF_RANGE.with_dnr(),
        );
        // SLBA + NLB overflows 64 bits.
        expect(
            &q.rw(write, 1, u64::MAX, 2),
            Status::LBA_OUT_OF_RANGE.with_dnr(),
        );
    }
    ok(&q.rw(true, 1, NS_BLOCKS - 2, 2));
    ok(&q.rw(false, 1, NS_BLOCKS - 2, 2));
}

#[test]
fn conformance_rw_data_length() {
    let (_fx, _admin, mut q) = with_io();
    let sqe = rw_sqe(true, 1, 0, 4, &q.keyed(0, 3 * BLOCK));
    expect(
        &q.submit(sqe, &[]),
        Status::SGL_INVALID_DATA_LENGTH.with_dnr(),
    );
    let sqe = rw_sqe(true, 1, 0, 4, &q.keyed(0, 5 * BLOCK));
    expect(
        &q.submit(sqe, &[]),
        Status::SGL_INVALID_DATA_LENGTH.with_dnr(),
    );
    ok(&q.rw(true, 1, 0, 4));
}

#[test]
fn conformance_rw_mdts() {
    let (_fx, _admin, mut q) = with_io();
    // A data length above MDTS fails the command (not the range): checked first. Keyed with
    // invalidate (0x4F) over RDMA and loop, a transport data block over NVMe/TCP.
    let blocks = MAX_IO / BLOCK * 2;
    let mut sgl = q.keyed(0, blocks * BLOCK);
    if let rdmablk::nvme::Sgl::Keyed(k) = &mut sgl {
        k.invalidate = true;
    }
    expect(
        &q.submit(rw_sqe(true, 1, 0, blocks, &sgl), &[]),
        Status::SGL_INVALID_DATA_LENGTH.with_dnr(),
    );
    ok(&q.rw(true, 1, 0, MAX_IO / BLOCK));
}

#[test]
fn conformance_rw_fua() {
    let (_fx, _admin, mut q) = with_io();
    let data = pattern(11, 2 * BLOCK as usize);
    q.write_data(0, &data);
    ok(&q.submit(rw_with(true, 1, 40, 2, 1 << 30, &q), &[]));
    ok(&q.submit(rw_with(false, 1, 40, 2, 1 << 30, &q), &[]));
    assert_eq!(q.read_data(0, data.len()), data);
}

#[test]
fn conformance_rw_lr_ignored() {
    let (_fx, _admin, mut q) = with_io();
    ok(&q.submit(rw_with(true, 1, 0, 1, 1 << 31, &q), &[]));
    ok(&q.submit(rw_with(false, 1, 0, 1, 1 << 31, &q), &[]));
}

#[test]
fn conformance_rw_prinfo_dtype_ignored() {
    let (_fx, _admin, mut q) = with_io();
    // PRINFO (29:26) all set, DTYPE (23:20) streams, STC (24); DSPEC and DSM hints in cdw13.
    let bits = 0xF << 26 | 1 << 24 | 0x1 << 20;
    for write in [false, true] {
        let mut sqe = rw_with(write, 1, 0, 1, bits, &q);
        sqe.cdw13 = 0xABCD_0007;
        ok(&q.submit(sqe, &[]));
    }
    let rw = ReadWrite::from_sqe(&rw_with(false, 1, 0, 1, bits, &q));
    assert_eq!(rw.blocks(), 1);
}

#[test]
fn conformance_rw_write_read_only_ns() {
    let (_fx, _admin, mut q) = with_io();
    expect(
        &q.rw(true, RO_NSID, 0, 1),
        Status::NS_WRITE_PROTECTED.with_dnr(),
    );
    // The range is checked first.
    expect(
        &q.rw(true, RO_NSID, 1 << 20, 1),
        Status::LBA_OUT_OF_RANGE.with_dnr(),
    );
    ok(&q.rw(false, RO_NSID, 0, 1));
}

#[test]
fn conformance_flush_broadcast() {
    let (_fx, _admin, mut q) = with_io();
    ok(&q.submit(flush_sqe(0xFFFF_FFFF, 0), &[]));
    ok(&q.submit(flush_sqe(1, 0), &[]));
}

#[test]
fn conformance_flush_nsid_invalid() {
    let (_fx, _admin, mut q) = with_io();
    for nsid in [0u32, INACTIVE_NSID, 0xFFFF_FFFE] {
        expect(
            &q.submit(flush_sqe(nsid, 0), &[]),
            Status::INVALID_NAMESPACE.with_dnr(),
        );
    }
    ok(&q.submit(flush_sqe(1, 0), &[]));
}

fn wz(nsid: u32, slba: u64, blocks: u32, deallocate: bool) -> Sqe {
    WriteZeroes {
        nsid,
        slba,
        nlb: (blocks - 1) as u16,
        deallocate,
        fua: false,
    }
    .to_sqe(0)
}

#[test]
fn conformance_write_zeroes() {
    let (_fx, _admin, mut q) = with_io();
    expect(
        &q.submit(wz(1, NS_BLOCKS - 1, 2, false), &[]),
        Status::LBA_OUT_OF_RANGE.with_dnr(),
    );
    expect(
        &q.submit(wz(INACTIVE_NSID, 0, 1, false), &[]),
        Status::INVALID_NAMESPACE.with_dnr(),
    );
    // MDTS does not apply: four times MDTS worth of blocks is fine.
    let blocks = 4 * MAX_IO / BLOCK;
    q.write_data(0, &pattern(5, BLOCK as usize));
    ok(&q.rw(true, 1, 100, 1));
    ok(&q.submit(wz(1, 0, blocks, false), &[]));
    ok(&q.rw(false, 1, 100, 1));
    assert!(q.read_data(0, BLOCK as usize).iter().all(|&b| b == 0));
    ok(&q.submit(wz(1, 0, blocks, true), &[]));
}

fn dsm(nr: u8, deallocate: bool, idr: bool) -> Sqe {
    Dsm {
        nsid: 1,
        nr,
        idr,
        idw: false,
        deallocate,
    }
    .to_sqe(0)
}

fn ranges(rs: &[(u64, u32)]) -> Vec<u8> {
    rs.iter()
        .flat_map(|&(slba, nlb)| {
            DsmRange {
                cattr: 0,
                nlb,
                slba,
            }
            .encode()
        })
        .collect()
}

#[test]
fn conformance_dsm_nr() {
    let (_fx, _admin, mut q) = with_io();
    // NR 3: four ranges, 64 bytes; a shorter SGL fails, a longer one (the Linux host's 4 KiB
    // buffer) is accepted.
    q.write_data(0, &ranges(&[(0, 1), (2, 1), (4, 1), (6, 1)]));
    let sqe = keyed(&q, dsm(3, true, false), 48);
    expect(
        &q.submit(sqe, &[]),
        Status::SGL_INVALID_DATA_LENGTH.with_dnr(),
    );
    ok(&q.submit(keyed(&q, dsm(3, true, false), 64), &[]));
    ok(&q.submit(keyed(&q, dsm(3, true, false), 4096), &[]));
}

#[test]
fn conformance_dsm_attributes() {
    let (_fx, _admin, mut q) = with_io();
    let fill = |q: &mut Host| {
        q.write_data(0, &pattern(9, BLOCK as usize));
        ok(&q.rw(true, 1, 200, 1));
    };
    // Hints only: nothing deallocated, no data fetched (a bad SGL is not even looked at).
    fill(&mut q);
    let mut sqe = dsm(0, false, true);
    sqe.dptr = [0; 16];
    ok(&q.submit(sqe, &[]));
    ok(&q.rw(false, 1, 200, 1));
    assert_eq!(q.read_data(0, BLOCK as usize), pattern(9, BLOCK as usize));
    // AD with IDR: deallocated all the same.
    q.write_data(0, &ranges(&[(200, 1)]));
    ok(&q.submit(keyed(&q, dsm(0, true, true), 16), &[]));
    ok(&q.rw(false, 1, 200, 1));
    assert!(q.read_data(0, BLOCK as usize).iter().all(|&b| b == 0));
}

#[test]
fn conformance_dsm_range_beyond_capacity() {
    let (_fx, _admin, mut q) = with_io();
    q.write_data(0, &pattern(4, BLOCK as usize));
    ok(&q.rw(true, 1, 300, 1));
    // The first range is fine, the second is not: nothing is deallocated.
    q.write_data(0, &ranges(&[(300, 1), (NS_BLOCKS - 1, 2)]));
    expect(
        &q.submit(keyed(&q, dsm(1, true, false), 32), &[]),
        Status::LBA_OUT_OF_RANGE.with_dnr(),
    );
    q.write_data(0, &ranges(&[(300, 1), (u64::MAX, 2)]));
    expect(
        &q.submit(keyed(&q, dsm(1, true, false), 32), &[]),
        Status::LBA_OUT_OF_RANGE.with_dnr(),
    );
    ok(&q.rw(false, 1, 300, 1));
    assert_eq!(q.read_data(0, BLOCK as usize), pattern(4, BLOCK as usize));
    q.write_data(0, &ranges(&[(NS_BLOCKS - 1, 1)]));
    ok(&q.submit(keyed(&q, dsm(0, true, false), 16), &[]));
}

#[test]
fn conformance_dsm_range_nlb_zero() {
    let (_fx, _admin, mut q) = with_io();
    q.write_data(0, &pattern(6, BLOCK as usize));
    ok(&q.rw(true, 1, 400, 1));
    q.write_data(0, &ranges(&[(400, 0), (NS_BLOCKS, 0)]));
    ok(&q.submit(
        keyed(&q, dsm(1, true, false), 2 * DSM_RANGE_LEN as u32),
        &[],
    ));
    ok(&q.rw(false, 1, 400, 1));
    assert_eq!(q.read_data(0, BLOCK as usize), pattern(6, BLOCK as usize));
}
