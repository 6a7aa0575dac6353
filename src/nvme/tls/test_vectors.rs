//! The test vectors the key format's, the derivations' and the identities' unit tests share:
//! keys in the interchange format and what SPDK and libnvme derive from them.

pub(super) const HOST: &str =
    "nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6";
pub(super) const SUBSYS: &str = "nqn.2016-06.io.spdk:cnode1";

pub(super) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// One configured key and what SPDK derives from it for (HOST, SUBSYS).
pub(super) struct Vector {
    pub(super) interchange: &'static str,
    pub(super) configured: &'static str,
    pub(super) retained: &'static str,
    pub(super) tls_psk_v0: &'static str,
    pub(super) digest: &'static str,
    pub(super) tls_psk_v1: &'static str,
}

// From SPDK v25.09's own functions (include/spdk_internal/nvme_tcp.h), by a C program that
// includes that header and links libspdk_util, libspdk_log and libcrypto:
// nvme_tcp_parse_interchange_psk (configured key, hash), nvme_tcp_derive_retained_psk
// (hash 01/02; 00 copies), nvme_tcp_generate_psk_identity (version 0) and
// nvme_tcp_derive_tls_psk with that identity (tls_psk_v0). SPDK has no version 1: there
// the digest is OpenSSL's HMAC as TP 8018 defines it, Base64 by spdk_base64_encode, and
// tls_psk_v1 is nvme_tcp_derive_tls_psk given the context "<hh> <digest>". libnvme 1.16's
// derive_nvme_keys (linux.c, called from a program built against its source) gave the
// same identities and TLS PSKs of both versions for all seven keys.
// Keys: 00..1f and 00..2f under each hash, nvme-cli's documented example, and two that
// `nvme gen-tls-key -m 1` / `-m 2` (nvme-cli 2.3) printed here.
pub(super) const VECTORS: [Vector; 7] = [
    Vector {
        interchange: "NVMeTLSkey-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:",
        configured: "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f",
        retained: "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f",
        tls_psk_v0: "2fecd7e800e554d035cc90b13b738bc59c2a413e850ab976961136b6b6574bd6",
        digest: "UDyGk6TBFzr54q7qfbUDpq8eKjB0OzMRw6Z8Wnqq4Og=",
        tls_psk_v1: "a0751f79aea4120abf44ff456d62924d15bf1b885edfe915404c0498ee24c516",
    },
    Vector {
        interchange: "NVMeTLSkey-1:01:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:",
        configured: "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f",
        retained: "2777170cfb82b52c5ec8cb00cc26fa9145d942315f2c892822b0772f5debe85d",
        tls_psk_v0: "90da01aec6268cc94ee1618b06b0350a0003550394c3ef78956f8866ae50dba8",
        digest: "3b0DrtgnErqrCJBibilhjErsCHPyzZBhOGOE9g109QI=",
        tls_psk_v1: "f7b99f8c640fdd9fa2001a45a730907261776ab93e879ed3610b2414c36c4269",
    },
    Vector {
        interchange: "NVMeTLSkey-1:00:\
             AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vcSEgBQ==:",
        configured: "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\
                     202122232425262728292a2b2c2d2e2f",
        retained: "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\
                   202122232425262728292a2b2c2d2e2f",
        tls_psk_v0: "f2808a6d64f5b18588e640516e99416eb4b4fcee8bf0b36e645468ce94c42966\
                     d84c52545e1b6783a33e4009a7787ef2",
        digest: "IOAGCymXoMK7CNjKd2FrN595Od+bNkSL5zkqJhxSy3zjFaVfOYySwlJOmFmTwwOK",
        tls_psk_v1: "ea3b5e35ed234d19a3fa56fa912dc946a74557b1985f3e020c91ead548ffe5f0\
                     6faa89d7750447840eee3e96146bfa82",
    },
    Vector {
        interchange: "NVMeTLSkey-1:02:\
             AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vcSEgBQ==:",
        configured: "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\
                     202122232425262728292a2b2c2d2e2f",
        retained: "9199e9844a95310712a6436350cb36769e36bb02461989493acb7f9419f9d1ca\
                   81374a176479e87994f6c7c17c5f2800",
        tls_psk_v0: "ea440db81efc27082414976e1e426cc85c7be8d744a56075fe3ef829b53ec3f2\
                     92401dccb759c751354bbca8208cdf05",
        digest: "u0NhJjF+rxrzO5WbtpSdWWSMAXO9ZWyVh+iAw110iANOEMKLyxmWHTyFR8JI6t4D",
        tls_psk_v1: "d4205439313bc546ac8f205204a440dd7ed4fcd6b006780c4f71e4f8f1de4d56\
                     d85af34fe8e6e29f087e0549a1835aae",
    },
    Vector {
        // nvme-cli's documented example; its check-tls-key: "Key is valid (HMAC 1, length
        // 32, CRC d9baf45f)".
        interchange: "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:",
        configured: "5512dbb6737d0106f65975b773dfb011ffc344bcf442e2dd6d8bc4870b5d5b03",
        retained: "f0af1bc718d4f23bdd7c1683a3d79bd953ea789d106a0f5207bb574bbe5446ce",
        tls_psk_v0: "b976336237885ee79b7206085ec337726c89d594fc922cd17506a5fbdff9e5e3",
        digest: "48oJ1gT59ZvCetgoqGzPEddPO3zfkNz9YcvcbAM9NKI=",
        tls_psk_v1: "b64fc42422898410ee530e65cb254a3138865334f281bc2d14b2036b7c0b7ba8",
    },
    Vector {
        interchange: "NVMeTLSkey-1:01:QbvVjFlge74fg8u3NBeZCIugXudxvlrb7chv4+BNP4p5ReVB:",
        configured: "41bbd58c59607bbe1f83cbb7341799088ba05ee771be5adbedc86fe3e04d3f8a",
        retained: "2ff303f1d5e61cac7acf0fc420827afba33dd8690ec5d51539c0c607c5dd4ad5",
        tls_psk_v0: "77253f88c6331d4e60e71df42d9f0d34294e0f63c4624052380e063e50b9cd2f",
        digest: "YztKtigFbo3FFQgIpLNctauY746CvXnQSmve81hQrEI=",
        tls_psk_v1: "6350dfac0e9394a8576e2c5f78fe9a090e552d7c06f1f63e34d8f7247f78557a",
    },
    Vector {
        interchange: "NVMeTLSkey-1:02:\
             dpEuhmlErC9hCseih4piF6r/GwDkCB7TYQEvyluz+7O8Um252NAaEcrhpSbmPHQ9kQMuzA==:",
        configured: "76912e866944ac2f610ac7a2878a6217aaff1b00e4081ed361012fca5bb3fbb3\
                     bc526db9d8d01a11cae1a526e63c743d",
        retained: "afb0f6eea91b9cdff871e9d62e4abe33de5d43d9b592b52fd081f2d7ee0daf2d\
                   eb89c69e34209d26524ac50742f052a8",
        tls_psk_v0: "c9fdeb385a868f113a8229bd2133b5d161a91b52b13e4677e07c259d7ac5c3ad\
                     848f482937c2bdf84d061efbdc23f263",
        digest: "k5Sb+1pht3yLJWMjFKd4XNhTkMRJBDNP1goSU6UpHiTdZNXH2+ndH9Be/INIBV0t",
        tls_psk_v1: "8b79b00149a5cd302028a5b4311096c9122633daeb994e1e4ca8c92aebbb1b30\
                     72874108a93be6d18ba948350b810cac",
    },
];
