//! Property-style tests: every decoder of peer bytes, fed deterministic pseudo-random input,
//! returns a value or an error and never panics; fixed layouts roundtrip bit-exactly.

use super::fabrics::{
    Connect, ConnectData, Disconnect, PropertyGet, PropertySet, CONNECT_DATA_LEN,
};
use super::features::GetFeatures;
use super::identify::{self, IdentifyController, IdentifyNamespace, IDENTIFY_LEN};
use super::io::{decode_dsm_ranges, Dsm, ReadWrite, WriteZeroes};
use super::log_page::{self, GetLogPage};
use super::transport::rdma::{CmAccept, CmReject, CmRequest, PUSH_EXT_MAGIC};
use super::{Cqe, Sgl, SglLimits, Sqe};

/// xorshift64*: small, deterministic, good enough to spread bits.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn fill(&mut self, b: &mut [u8]) {
        for chunk in b.chunks_mut(8) {
            let v = self.next().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const ROUNDS: usize = 4000;

#[test]
fn random_sqes_decode_without_panicking_and_roundtrip() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let limits = SglLimits {
        in_capsule_bytes: 8192,
        max_transfer_bytes: 1 << 17,
    };
    for i in 0..ROUNDS {
        let mut b = [0u8; 64];
        rng.fill(&mut b);
        // Bias the type byte toward the accepted forms so both paths run.
        b[39] = [0x40, 0x4F, 0x01, b[39]][i % 4];
        let sqe = Sqe::decode(&b);
        assert_eq!(sqe.to_bytes(), b);
        if let Ok(sgl) = sqe.sgl() {
            let _ = sgl.check(&limits, i % 2 == 0);
            assert_eq!(Sgl::decode(&sgl.encode()), Ok(sgl));
        }
        let _ = sqe.check_fabrics_flags();
        if let (Ok(c), Ok(sgl)) = (Connect::from_sqe(&sqe), sqe.sgl()) {
            assert_eq!(Connect::from_sqe(&c.to_sqe(sqe.cid, &sgl)), Ok(c));
        }
        let _ = PropertyGet::from_sqe(&sqe);
        let _ = PropertySet::from_sqe(&sqe);
        let _ = Disconnect::from_sqe(&sqe);
        let _ = GetFeatures::from_sqe(&sqe);
        if let Ok(g) = GetLogPage::from_sqe(&sqe) {
            assert!(g.len_bytes() >= 4);
            let _ = g.window(&[0u8; 512]);
        }
        let rw = ReadWrite::from_sqe(&sqe);
        let _ = rw.check_range(rng.next());
        let _ = WriteZeroes::from_sqe(&sqe).check_range(rng.next());
        let _ = Dsm::from_sqe(&sqe).data_len();
        let _ = identify::IdentifyCmd::from_sqe(&sqe);
    }
}

#[test]
fn random_cqes_roundtrip() {
    let mut rng = Rng(7);
    for _ in 0..ROUNDS {
        let mut b = [0u8; 16];
        rng.fill(&mut b);
        let c = Cqe::decode(&b);
        assert_eq!(c.to_bytes(), b);
        let _ = c.status.to_string();
    }
}

#[test]
fn random_private_data_never_panics() {
    let mut rng = Rng(0xDEAD_BEEF);
    for i in 0..ROUNDS {
        let len = rng.below(64) as usize;
        let mut b = vec![0u8; len];
        rng.fill(&mut b);
        if len >= 2 && i % 2 == 0 {
            b[0] = 0;
            b[1] = 0;
        }
        if len >= 24 && i % 3 == 0 {
            b[20..24].copy_from_slice(&PUSH_EXT_MAGIC.to_le_bytes());
        }
        if len >= 9 && i % 5 == 0 {
            b[4..8].copy_from_slice(&PUSH_EXT_MAGIC.to_le_bytes());
            b[8] = 1;
        }
        if let Ok(r) = CmRequest::decode(&b) {
            assert_eq!(CmRequest::decode(&r.encode()), Ok(r));
            let _ = r.check_queue_sizes(128);
        }
        if let Ok(a) = CmAccept::decode(&b) {
            assert_eq!(CmAccept::decode(&a.encode()), Ok(a));
        }
        if let Ok(r) = CmReject::decode(&b) {
            let _ = r.status.to_string();
        }
    }
}

#[test]
fn random_connect_data_never_panics() {
    let mut rng = Rng(42);
    for i in 0..500 {
        let mut b = [0u8; CONNECT_DATA_LEN];
        rng.fill(&mut b);
        // Printable NQNs of random length, sometimes terminated.
        for off in [256usize, 512] {
            let n = rng.below(260) as usize;
            for x in &mut b[off..off + n.min(256)] {
                *x = b'a' + (*x % 26);
            }
            if n < 256 && i % 4 != 0 {
                b[off + n] = 0;
            }
        }
        if let Ok(d) = ConnectData::decode(&b) {
            assert_eq!(ConnectData::decode(&d.encode()), Ok(d));
        }
        let _ = ConnectData::decode_slice(&b[..rng.below(1025) as usize]);
    }
}

#[test]
fn random_identify_and_log_data_never_panics() {
    let mut rng = Rng(3);
    for i in 0..300 {
        let mut b = [0u8; IDENTIFY_LEN];
        rng.fill(&mut b);
        if i % 2 == 0 {
            b[768 + rng.below(256) as usize] = 0;
        }
        if let Ok(c) = IdentifyController::decode(&b) {
            let _ = c.check_fabrics(rng.next() as u16, crate::nvme::SglNeed::Keyed);
            let _ = (c.serial(), c.model(), c.in_capsule_bytes());
        }
        let ns = IdentifyNamespace::decode(&b);
        let _ = ns.block_bytes();
        assert_eq!(
            IdentifyNamespace::decode(&ns.encode()).block_bytes(),
            ns.block_bytes()
        );
        let _ = identify::decode_ns_list(&b);
        // Descriptor walks with small lengths so many entries are visited.
        for x in b.iter_mut().skip(1).step_by(4) {
            *x %= 24;
        }
        let _ = identify::decode_ns_descriptors(&b);
        let _ = log_page::decode_changed_ns(&b);
        let _ = log_page::CommandEffects::decode(&b);
        let _ = decode_dsm_ranges(&b[..rng.below(4097) as usize], rng.below(300) as usize);
    }
}
