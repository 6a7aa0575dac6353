//! Shared pieces of the rdmablk fuzz targets: input splitting helpers and the known-good seed
//! inputs `gen-corpus` writes to `corpus/<target>/`.
//!
//! Each target's input layout is documented beside its seeds here, so a seed and the target
//! that reads it cannot drift apart.

use rdmablk::fabric::soft::wire::{CmBody, Header, Opcode, Syndrome, FLAG_SOLICITED};
use rdmablk::nvme::fabrics::CONNECT_DATA_LEN;
use rdmablk::nvme::features::{fid, NumQueues};
use rdmablk::nvme::identify::{self, IdentifyController, IdentifyNamespace, NsDescriptor};
use rdmablk::nvme::io::{encode_dsm_ranges, DsmRange};
use rdmablk::nvme::log_page::{
    self, lid, CommandEffects, ErrorLogEntry, FwSlotLog, GetLogPage, SmartLog,
};
use rdmablk::nvme::opcodes;
use rdmablk::nvme::properties::{self, Cc};
use rdmablk::nvme::sgl::KeyedSgl;
use rdmablk::nvme::transport::rdma::{
    CmAccept, CmReject, CmRejectStatus, CmRequest, PushAnswer, PushRequest, PushWindow, PushedSgl,
};
use rdmablk::nvme::{
    Connect, ConnectData, Cqe, Dsm, GetFeatures, InCapsuleSgl, Nqn, PropertyGet, PropertySet,
    PropertySize, ReadWrite, SetFeatures, Sgl, Sqe, Status, WriteZeroes,
};

/// `N` bytes from the front of `data`, zero-padded when `data` is shorter, and the rest.
pub fn take_padded<const N: usize>(data: &[u8]) -> ([u8; N], &[u8]) {
    let mut out = [0u8; N];
    let n = data.len().min(N);
    out[..n].copy_from_slice(&data[..n]);
    (out, &data[n..])
}

/// A little-endian u32 from up to 4 bytes at the front of `data` (missing bytes are zero).
pub fn u32_front(data: &[u8]) -> u32 {
    let (b, _) = take_padded::<4>(data);
    u32::from_le_bytes(b)
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// The admin-queue Connect `nvme connect -t rdma` sends from Linux 6.1: keyed SGL with
/// invalidate over the 1024 data bytes, qid 0, sqsize 31, kato 5000 ms.
pub fn linux_admin_connect() -> Sqe {
    let sgl = Sgl::Keyed(KeyedSgl {
        addr: 0xFFFF_8881_0A2B_3000,
        len: CONNECT_DATA_LEN as u32,
        key: 0x0001_2345,
        invalidate: true,
    });
    Connect {
        qid: 0,
        sqsize: 31,
        cattr: 0,
        kato_ms: 5000,
    }
    .to_sqe(5, &sgl)
}

/// An I/O-queue Connect with the data in the capsule (qid 1, 128 entries).
pub fn io_connect_in_capsule() -> Sqe {
    let sgl = Sgl::InCapsule(InCapsuleSgl {
        offset: 0,
        len: CONNECT_DATA_LEN as u32,
    });
    Connect {
        qid: 1,
        sqsize: 127,
        cattr: 0,
        kato_ms: 0,
    }
    .to_sqe(1, &sgl)
}

/// Connect data as the Linux host fills it.
pub fn linux_connect_data(cntlid: u16) -> [u8; CONNECT_DATA_LEN] {
    ConnectData {
        hostid: [0x5a; 16],
        cntlid,
        subnqn: Nqn::new("nqn.2024-01.io.rdmablk:ram0").expect("valid NQN"),
        hostnqn: Some(
            Nqn::new("nqn.2014-08.org.nvmexpress:uuid:5a5a5a5a-5a5a-5a5a-5a5a-5a5a5a5a5a5a")
                .expect("valid NQN"),
        ),
    }
    .encode()
}

/// `sqe_and_sgl` input: a command capsule (64-byte SQE, then in-capsule data). The last 8
/// bytes of the SQE's cdw14/cdw15 are not used as limits; limits come from the capsule.
pub fn seeds_sqe_and_sgl() -> Seeds {
    let keyed = |len, inv| {
        Sgl::Keyed(KeyedSgl {
            addr: 0x7f00_dead_0000,
            len,
            key: 0x1234,
            invalidate: inv,
        })
    };
    let rw = ReadWrite {
        nsid: 1,
        slba: 0x10,
        nlb: 7,
        fua: false,
        lr: false,
        dsm: 0,
    };
    let mut read = rw.to_sqe(opcodes::io::READ, 0x21);
    read.set_sgl(&keyed(4096, true));
    let mut write_icd = rw.to_sqe(opcodes::io::WRITE, 0x22);
    write_icd.set_sgl(&Sgl::InCapsule(InCapsuleSgl {
        offset: 0,
        len: 512,
    }));
    let mut write_push = ReadWrite { fua: true, ..rw }.to_sqe(opcodes::io::WRITE, 3);
    write_push.dptr = PushedSgl { slot: 3, len: 4096 }.encode();
    let mut wz = WriteZeroes {
        nsid: 1,
        slba: 100,
        nlb: 15,
        deallocate: true,
        fua: false,
    }
    .to_sqe(4);
    wz.set_sgl(&keyed(0, false));
    vec![
        ("read_keyed_invalidate", read.to_bytes().to_vec()),
        (
            "write_in_capsule",
            cat(&[&write_icd.to_bytes(), &[0xA5; 512]]),
        ),
        ("write_pushed", write_push.to_bytes().to_vec()),
        ("write_zeroes", wz.to_bytes().to_vec()),
        ("admin_connect", linux_admin_connect().to_bytes().to_vec()),
    ]
}

/// `connect_data` input: the Connect capsule as the target sees it: 64-byte SQE, then the
/// Connect data (1024 bytes when well formed).
pub fn seeds_connect_data() -> Seeds {
    let mut bad_nqn = linux_connect_data(0xFFFF);
    bad_nqn[256..512].fill(b'x');
    vec![
        (
            "linux_admin_connect",
            cat(&[
                &linux_admin_connect().to_bytes(),
                &linux_connect_data(0xFFFF),
            ]),
        ),
        (
            "io_connect_in_capsule",
            cat(&[&io_connect_in_capsule().to_bytes(), &linux_connect_data(1)]),
        ),
        (
            "unterminated_subnqn",
            cat(&[&linux_admin_connect().to_bytes(), &bad_nqn]),
        ),
    ]
}

/// `cm_private_data` input: byte 0 picks the record (0 request, 1 accept, 2 reject, others
/// all three); the rest is the received private data.
pub fn seeds_cm_private_data() -> Seeds {
    let linux = CmRequest {
        qid: 1,
        hrqsize: 128,
        hsqsize: 127,
        cntlid: 0,
        push: None,
    };
    let push = CmRequest {
        push: Some(PushRequest {
            slots: 0,
            slot_bytes: 0,
        }),
        ..linux
    };
    let window = PushWindow::new(0x7f00_0000_0000, 0x99, 128, 8192).expect("valid window");
    let acc = |push| CmAccept { crqsize: 128, push }.encode();
    let rej = CmReject {
        status: CmRejectStatus::InvalidHsqsize,
    }
    .encode();
    // InfiniBand CM pads private data to 56 bytes.
    let padded = cat(&[&[0], &linux.encode(), &[0; 24]]);
    vec![
        ("request_linux", cat(&[&[0], &linux.encode()])),
        ("request_linux_ib_padded", padded),
        ("request_push", cat(&[&[0], &push.encode()])),
        ("accept_standard", cat(&[&[1], &acc(PushAnswer::Absent)])),
        ("accept_declined", cat(&[&[1], &acc(PushAnswer::Declined)])),
        (
            "accept_granted",
            cat(&[&[1], &acc(PushAnswer::Granted(window))]),
        ),
        ("reject_hsqsize", cat(&[&[2], &rej])),
    ]
}

/// `cqe_identify` input: a 16-byte response capsule, then one 4096-byte data page (Identify
/// or log page) that every page decoder reads (zero-padded when short).
pub fn seeds_cqe_identify() -> Seeds {
    let ok = Cqe::success(0, 0, 1, 1).to_bytes();
    let mut invalid = Cqe::error(5, 0, 1, Status::CONNECT_INVALID_PARAMETERS.with_dnr());
    invalid.dw0 = 0x0001_0100;
    let mut ctrl = IdentifyController::nvmf_defaults(
        1,
        Nqn::new("nqn.2024-01.io.rdmablk:ram0").expect("valid NQN"),
        8192,
    );
    ctrl.sn = rdmablk::nvme::ascii_padded("0123456789abcdef");
    ctrl.mn = rdmablk::nvme::ascii_padded("rdmablk");
    ctrl.nn = 2;
    let ns = IdentifyNamespace::simple(2_097_152, 12).encode();
    let list = identify::encode_ns_list(&[1, 2, 5], 0);
    let descs = identify::encode_ns_descriptors(&[
        NsDescriptor::Nguid([1; 16]),
        NsDescriptor::Uuid([2; 16]),
        NsDescriptor::Csi(0),
    ]);
    let smart = SmartLog {
        temperature_k: 300,
        avail_spare: 100,
        power_cycles: 3,
        ..SmartLog::default()
    };
    let fw_slot = FwSlotLog {
        afi: 0x11,
        frs: [*b"1.0     ", [0; 8], [0; 8], [0; 8], [0; 8], [0; 8], [0; 8]],
    };
    let errors = [
        ErrorLogEntry {
            error_count: 2,
            sqid: 1,
            cid: 0x21,
            status: Status::INVALID_FIELD.to_field() << 1,
            param_location: 0x0128,
            lba: 0x10,
            nsid: 1,
            trtype: 1,
            ..ErrorLogEntry::default()
        },
        ErrorLogEntry {
            error_count: 1,
            cid: 5,
            status: Status::CONNECT_INVALID_PARAMETERS.to_field() << 1,
            ..ErrorLogEntry::default()
        },
    ];
    let mut effects = CommandEffects::default();
    effects.admin[usize::from(opcodes::admin::IDENTIFY)] = log_page::effects::CSUPP;
    effects.io[usize::from(opcodes::io::WRITE)] =
        log_page::effects::CSUPP | log_page::effects::LBCC;
    vec![
        ("connect_ok", ok.to_vec()),
        ("connect_invalid_subnqn", invalid.to_bytes().to_vec()),
        ("identify_controller", cat(&[&ok, &ctrl.encode()])),
        ("identify_namespace", cat(&[&ok, &ns])),
        ("ns_list", cat(&[&ok, &list])),
        ("ns_descriptors", cat(&[&ok, &descs])),
        ("smart_log", cat(&[&ok, &smart.encode()])),
        ("command_effects", cat(&[&ok, &effects.encode()])),
        (
            "changed_ns",
            cat(&[&ok, &log_page::encode_changed_ns(&[3, 4])]),
        ),
        ("fw_slot_log", cat(&[&ok, &fw_slot.encode()])),
        (
            "error_log",
            cat(&[&ok, &errors[0].encode(), &errors[1].encode()]),
        ),
    ]
}

/// `ana_log` input: the ANA log page as a target returns it (header, group descriptors and
/// their NSID lists), in a buffer of the length the host asked for.
pub fn seeds_ana_log() -> Seeds {
    use rdmablk::nvme::ana::{AnaGroup, AnaLog, AnaState};
    let group = |grpid, state, nsids: &[u32]| AnaGroup {
        grpid,
        chgcnt: u64::from(grpid) + 10,
        state,
        nsids: nsids.to_vec(),
    };
    let two = AnaLog {
        chgcnt: 7,
        groups: vec![
            group(1, AnaState::Optimized, &[1, 2]),
            group(2, AnaState::Inaccessible, &[5]),
        ],
    };
    let every_state = AnaLog {
        chgcnt: 1,
        groups: AnaState::ALL
            .iter()
            .zip(1..)
            .map(|(&s, id)| group(id, s, &[id]))
            .collect(),
    };
    // The initiator asks for a multiple of 4 bytes, at least what its groups and namespaces
    // need: the target zero-fills the rest.
    let mut padded = two.encode(false);
    padded.resize(4096, 0);
    vec![
        ("two_groups", two.encode(false)),
        ("two_groups_rgo", two.encode(true)),
        ("every_state", every_state.encode(false)),
        ("no_groups", AnaLog::default().encode(false)),
        ("two_groups_padded_4k", padded),
    ]
}

/// `discovery_log` input: the whole Discovery Log Page (1024-byte header, then NUMREC
/// 1024-byte entries) as the initiator reads it.
pub fn seeds_discovery_log() -> Seeds {
    use rdmablk::nvme::discovery::{
        adrfam, encode_log, subtype, treq, trtype, DiscoveryLogEntry, DiscoveryLogHeader,
        EFLAGS_DUPLICATE_RETURNED_INFO, EFLAGS_EPCSD,
    };
    use rdmablk::nvme::nqn::DISCOVERY_NQN;
    let rdma = DiscoveryLogEntry {
        trtype: trtype::RDMA,
        adrfam: adrfam::IPV4,
        subtype: subtype::NVME,
        treq: treq::NOT_SPECIFIED,
        portid: 1,
        cntlid: 0xFFFF,
        asqsz: 32,
        eflags: 0,
        trsvcid: "4420".into(),
        traddr: "10.0.2.15".into(),
        subnqn: "nqn.2024-01.io.rdmablk:ram0".into(),
        tsas: DiscoveryLogEntry::rdma_tsas(),
    };
    let current = DiscoveryLogEntry {
        subtype: subtype::CURRENT_DISCOVERY,
        eflags: EFLAGS_DUPLICATE_RETURNED_INFO | EFLAGS_EPCSD,
        subnqn: DISCOVERY_NQN.into(),
        ..rdma.clone()
    };
    let ipv6 = DiscoveryLogEntry {
        adrfam: adrfam::IPV6,
        portid: 2,
        traddr: "fe80::5054:ff:fe12:3456".into(),
        ..rdma.clone()
    };
    let tcp_referral = DiscoveryLogEntry {
        trtype: trtype::TCP,
        subtype: subtype::REFERRAL,
        treq: treq::NOT_REQUIRED,
        portid: 3,
        trsvcid: "8009".into(),
        traddr: "192.168.1.20".into(),
        subnqn: DISCOVERY_NQN.into(),
        tsas: [0; 16],
        ..rdma.clone()
    };
    let header = |genctr, numrec| {
        DiscoveryLogHeader {
            genctr,
            numrec,
            recfmt: 0,
        }
        .encode()
    };
    // Fields filled to the end with no NUL (a target that does not terminate them).
    let mut full = rdma.encode();
    full[32..64].fill(b'9');
    full[256..512].fill(b'n');
    full[512..768].fill(b'1');
    // A header claiming more entries than the answer holds.
    let short = cat(&[&header(9, 3), &rdma.encode()]);
    vec![
        ("empty", encode_log(1, &[])),
        ("nvmet_rdma", encode_log(4, &[current, rdma.clone()])),
        ("ipv6_and_referral", encode_log(5, &[ipv6, tcp_referral])),
        ("unterminated_fields", cat(&[&header(6, 1), &full])),
        ("numrec_past_the_end", short),
    ]
}

/// `property_and_features` input: a 64-byte SQE (read as every Fabrics property command,
/// feature command, Get Log Page and DSM), then its data (DSM ranges, or a log page to window).
pub fn seeds_property_and_features() -> Seeds {
    let cap = PropertyGet {
        size: PropertySize::Eight,
        offset: properties::CAP,
    }
    .to_sqe(1);
    let cc = Cc::default().with_en(true).with_iosqes(6).with_iocqes(4);
    let set_cc = PropertySet {
        size: PropertySize::Four,
        offset: properties::CC,
        value: u64::from(cc.0),
    }
    .to_sqe(2);
    let nq = SetFeatures {
        fid: fid::NUM_QUEUES,
        save: false,
        nsid: 0,
        value: NumQueues::both(4).to_dword(),
    }
    .to_sqe(3);
    let get = GetFeatures {
        fid: fid::KEEP_ALIVE_TIMER,
        select: 0,
        nsid: 0,
        cdw11: 0,
    }
    .to_sqe(4);
    let log = GetLogPage::new(lid::SMART, 0xFFFF_FFFF, 0, 512).to_sqe(5);
    let ranges = [
        DsmRange {
            cattr: 0,
            nlb: 8,
            slba: 0,
        },
        DsmRange {
            cattr: 0,
            nlb: 16,
            slba: 4096,
        },
    ];
    let dsm = Dsm {
        nsid: 1,
        nr: 1,
        idr: false,
        idw: false,
        deallocate: true,
    }
    .to_sqe(6);
    vec![
        ("property_get_cap", cap.to_bytes().to_vec()),
        ("property_set_cc", set_cc.to_bytes().to_vec()),
        ("set_features_num_queues", nq.to_bytes().to_vec()),
        ("get_features_kato", get.to_bytes().to_vec()),
        (
            "get_log_page_smart",
            cat(&[&log.to_bytes(), &SmartLog::default().encode()]),
        ),
        (
            "dsm_deallocate",
            cat(&[&dsm.to_bytes(), &encode_dsm_ranges(&ranges)]),
        ),
    ]
}

/// `soft_wire_frame` input: a byte stream of soft-provider frames, as a QP's receive side
/// reads it from its TCP connection.
pub fn seeds_soft_wire_frame() -> Seeds {
    let cm = |op, pd: &[u8]| {
        let mut out = Vec::new();
        CmBody {
            initiator_depth: 16,
            responder_resources: 16,
            qpn: 7,
            max_send_wr: 256,
            private_data: pd,
        }
        .encode_frame(op, &mut out);
        out
    };
    let req = CmRequest {
        qid: 0,
        hrqsize: 32,
        hsqsize: 31,
        cntlid: 0,
        push: Some(PushRequest {
            slots: 32,
            slot_bytes: 8192,
        }),
    }
    .encode();
    let acc = CmAccept {
        crqsize: 32,
        push: PushAnswer::Declined,
    }
    .encode();
    let rej = CmReject {
        status: CmRejectStatus::NoResources,
    }
    .encode();
    let frame = |mut h: Header, payload: &[u8]| {
        h.length = payload.len() as u32;
        cat(&[&h.encode(), payload])
    };
    let mut send = Header::new(Opcode::Send, 1, 7);
    send.flags = FLAG_SOLICITED;
    let mut send_inv = Header::new(Opcode::SendInv, 2, 7);
    send_inv.rkey = 0x44;
    let mut write = Header::new(Opcode::Write, 3, 7);
    (write.remote_addr, write.rkey) = (0x1000, 0x55);
    let mut read = Header::new(Opcode::ReadReq, 4, 7);
    (read.remote_addr, read.rkey) = (0x2000, 0x55);
    let mut nak = Header::new(Opcode::Nak, 5, 7);
    nak.syndrome = Syndrome::Rnr;
    let mut read_req = read.encode();
    read_req[20..24].copy_from_slice(&4096u32.to_le_bytes());
    let capsule = linux_admin_connect().to_bytes();
    let connected = cat(&[
        &frame(Header::new(Opcode::Rtu, 0, 7), &[]),
        &frame(send, &capsule),
        &frame(send_inv, &Cqe::success(1, 1, 2, 0).to_bytes()),
        &frame(write, &[0xEE; 64]),
        &read_req,
        &frame(Header::new(Opcode::ReadResp, 4, 7), &[0xCC; 64]),
        &frame(Header::new(Opcode::Ack, 3, 7), &[]),
        &frame(nak, &[]),
        &frame(Header::new(Opcode::Disconnect, 0, 7), &[]),
    ]);
    vec![
        ("connect_req_push", cm(Opcode::ConnectReq, &req)),
        ("accept", cm(Opcode::Accept, &acc)),
        ("reject", cm(Opcode::Reject, &rej)),
        ("connected_stream", connected),
    ]
}

/// `auth_messages` input: a 64-byte Authentication Send / Receive SQE, then one message as
/// the Linux host and nvmet send them.
pub fn seeds_auth_messages() -> Seeds {
    use rdmablk::nvme::auth::{
        AuthReceive, AuthSend, Challenge, DhGroup, FailureReason, HashId, Message, Negotiate,
        Reply, Success1, RESCODE_FAILED,
    };
    let send = AuthSend { tl: 72 }.to_sqe(3).to_bytes();
    let recv = AuthReceive { al: 4096 }.to_sqe(4).to_bytes();
    let negotiate = Message::Negotiate(Negotiate {
        t_id: 1,
        sc_c: 0,
        hash_ids: HashId::ALL.iter().map(|h| h.id()).collect(),
        dh_ids: DhGroup::ALL.iter().map(|g| g.id()).collect(),
    });
    let challenge = Message::Challenge(Challenge {
        t_id: 1,
        hash_id: 2,
        dh_id: 1,
        seqnum: 0x1234_5678,
        challenge: vec![0xC1; 48],
        dh_value: vec![0x02; 256],
    });
    let reply = Message::Reply(Reply {
        t_id: 1,
        cvalid: true,
        seqnum: 9,
        response: vec![0xA1; 48],
        challenge: vec![0xC2; 48],
        dh_value: vec![0x03; 256],
    });
    let success1 = Message::Success1(Success1 {
        t_id: 1,
        hl: 48,
        response: Some(vec![0xA2; 48]),
    });
    let failure1 = Message::Failure {
        t_id: 1,
        from_controller: true,
        rescode: RESCODE_FAILED,
        rescode_exp: FailureReason::Failed.code(),
    };
    vec![
        ("negotiate", cat(&[&send, &negotiate.encode()])),
        ("challenge", cat(&[&recv, &challenge.encode()])),
        ("reply", cat(&[&send, &reply.encode()])),
        ("success1", cat(&[&recv, &success1.encode()])),
        (
            "success2",
            cat(&[&send, &Message::Success2 { t_id: 1 }.encode()]),
        ),
        ("failure1", cat(&[&recv, &failure1.encode()])),
        (
            "dhhc1_key",
            cat(&[
                &send,
                b"DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:",
            ]),
        ),
    ]
}

/// `tcp_pdu` input: byte 0 the mode (bit 0 controller side, bit 1 initialized, bits 2-3
/// digests, bits 4-7 PDA), then the stream of PDUs.
pub fn seeds_tcp_pdu() -> Seeds {
    use rdmablk::nvme::transport::tcp::{
        encode_capsule_cmd, encode_capsule_resp, flags, pdu_type, DataHeader, Fes, IcReq, IcResp,
        Negotiated, R2t, TermReq, CAPSULE_CMD_HLEN, CAPSULE_RESP_HLEN, DATA_HLEN,
    };
    let req = IcReq {
        pfv: 0,
        hpda: 0,
        hdgst: false,
        ddgst: false,
        maxr2t: 0,
    };
    let resp = IcResp {
        pfv: 0,
        cpda: 0,
        hdgst: false,
        ddgst: false,
        maxh2cdata: 131072,
    };
    let neg = Negotiated::default();
    let mut cmd = [0u8; CAPSULE_CMD_HLEN];
    encode_capsule_cmd(&linux_admin_connect(), 1024, &neg, &mut cmd);
    let mut h2c = [0u8; DATA_HLEN];
    DataHeader {
        cccid: 1,
        ttag: 0,
        datao: 0,
        datal: 512,
    }
    .encode(pdu_type::H2C_DATA, flags::DATA_LAST, &neg, &mut h2c);
    let mut r2t = [0u8; DATA_HLEN];
    R2t {
        cccid: 1,
        ttag: 0,
        r2to: 0,
        r2tl: 4096,
    }
    .encode(false, &mut r2t);
    let mut resp_pdu = [0u8; CAPSULE_RESP_HLEN];
    encode_capsule_resp(&Cqe::error(1, 1, 2, Status::SUCCESS), false, &mut resp_pdu);
    let mut term = [0u8; DATA_HLEN + 128];
    let n = TermReq {
        fes: Fes::InvalidHeaderField,
        fei: 2,
    }
    .encode(pdu_type::C2H_TERM_REQ, &cmd, &mut term);
    vec![
        (
            "host-icreq-connect-h2c",
            cat(&[&[1], &req.encode(), &cmd, &[0u8; 1024], &h2c, &[0u8; 512]]),
        ),
        (
            "ctrl-icresp-r2t-resp",
            cat(&[&[0], &resp.encode(), &r2t, &resp_pdu, &term[..n]]),
        ),
    ]
}

/// `tcp_host_rx` input: byte 0 the mode (bit 0 header digest, bit 1 data digest, bits 2-7
/// the chunk size the stream is fed in, 0 for all at once), then commands 0-3's expectations
/// (3 bytes each: 0 nothing, 1 to the host, 2 to the controller; then the length, u16 LE),
/// then the controller's PDU stream.
pub fn seeds_tcp_host_rx() -> Seeds {
    use rdmablk::nvme::transport::tcp::{
        digest, encode_capsule_resp, flags, pdu_type, DataHeader, Fes, Negotiated, R2t, TermReq,
        CAPSULE_RESP_HLEN, DATA_HLEN,
    };
    // Command 0 reads 1024 bytes, 1 writes 4096, 2 moves nothing, 3 reads 3072.
    let table = [1, 0x00, 0x04, 2, 0x00, 0x10, 0, 0, 0, 1, 0x00, 0x0C];
    let stream = |neg: Negotiated| {
        let mut out = Vec::new();
        let mut pdu = |head: &[u8], pdo: usize, data: &[u8]| {
            let at = out.len();
            out.extend_from_slice(head);
            if neg.hdgst {
                out.extend_from_slice(&digest(head).to_le_bytes());
            }
            if !data.is_empty() {
                out.resize(at + pdo, 0);
                out.extend_from_slice(data);
                if neg.ddgst {
                    out.extend_from_slice(&digest(data).to_le_bytes());
                }
            }
        };
        let mut b = [0u8; DATA_HLEN];
        R2t {
            cccid: 1,
            ttag: 1,
            r2to: 0,
            r2tl: 4096,
        }
        .encode(neg.hdgst, &mut b);
        pdu(&b, 0, &[]);
        // Command 0's data in two PDUs, the last with SUCCESS; command 3's in two, then its
        // CapsuleResp; command 1's and 2's CapsuleResps.
        for (cid, datao, datal, f) in [
            (0, 0, 512, 0),
            (0, 512, 512, flags::DATA_LAST | flags::DATA_SUCCESS),
            (3, 0, 2048, 0),
            (3, 2048, 1024, flags::DATA_LAST),
        ] {
            let h = DataHeader {
                cccid: cid,
                ttag: 0,
                datao,
                datal,
            };
            let l = h.encode(pdu_type::C2H_DATA, f, &neg, &mut b);
            pdu(&b, l.pdo, &vec![cid as u8; datal as usize]);
        }
        for cid in [3, 1, 2] {
            let mut r = [0u8; CAPSULE_RESP_HLEN];
            encode_capsule_resp(&Cqe::error(cid, 1, 2, Status::SUCCESS), neg.hdgst, &mut r);
            pdu(&r, 0, &[]);
        }
        let mut t = [0u8; DATA_HLEN + 128];
        let n = TermReq {
            fes: Fes::DataTransferOutOfRange,
            fei: 12,
        }
        .encode(pdu_type::C2H_TERM_REQ, &[0xAB; 24], &mut t);
        out.extend_from_slice(&t[..n]);
        out
    };
    let plain = Negotiated::default();
    let digests = Negotiated {
        hdgst: true,
        ddgst: true,
        pda: 0,
    };
    vec![
        (
            "read-write-resp-termreq",
            cat(&[&[0], &table, &stream(plain)]),
        ),
        // Both digests, fed 37 bytes at a time.
        (
            "digests-in-chunks",
            cat(&[&[3 | 37 << 2], &table, &stream(digests)]),
        ),
    ]
}

/// Named seed inputs of one target.
pub type Seeds = Vec<(&'static str, Vec<u8>)>;

/// Every target's seeds, by target name.
/// `reservation_report` input: an extended Reservation Status structure as a target sends it
/// (64-byte header, 64-byte entries), whole and cut inside an entry.
pub fn seeds_reservation_report() -> Seeds {
    use rdmablk::nvme::reservation::{encode_report, Registrant, REPORT_HEADER_LEN};
    let regs = [
        Registrant {
            cntlid: 0xFFFF,
            holds: true,
            rkey: 0x1122_3344_5566_7788,
            hostid: [0x5a; 16],
        },
        Registrant {
            cntlid: 2,
            holds: false,
            rkey: 7,
            hostid: [0xa5; 16],
        },
    ];
    let whole = encode_report(3, 5, true, &regs, REPORT_HEADER_LEN + 2 * 64);
    vec![
        ("empty", encode_report(0, 0, false, &[], REPORT_HEADER_LEN)),
        ("two-registrants", whole.clone()),
        ("cut-in-an-entry", whole[..REPORT_HEADER_LEN + 80].to_vec()),
    ]
}

/// `reservation_state` input: a state file and a shared document as the target writes them.
pub fn seeds_reservation_state() -> Seeds {
    let host = "5a".repeat(16);
    let other = "a5".repeat(16);
    let state = format!(
        r#"{{"version":1,"ptpl":true,"generation":4,"holder":{{"host":"{host}","type":5}},"registrants":[{{"host":"{host}","key":1}},{{"host":"{other}","key":2}}]}}"#
    );
    let doc = format!(
        r#"{{"version":1,"epoch":9,"state":{state},"log":[{{"epoch":9,"writer":"gw-a","notices":[["{other}",3]],"lost":["{other}"]}}]}}"#
    );
    vec![
        ("state-file", state.into_bytes()),
        ("shared-document", doc.into_bytes()),
    ]
}

/// `control_request` input: request lines as `rdmablk-ctl` sends them.
pub fn seeds_control_request() -> Seeds {
    [
        ("status", r#"{"cmd":"status"}"#),
        ("subsystem-add", r#"{"cmd":"subsystem-add","nqn":"nqn.2026-12.io.rdmablk:b","allow_any_host":true}"#),
        ("namespace-add", r#"{"cmd":"namespace-add","nqn":"nqn.2026-12.io.rdmablk:fuzz","nsid":2,"backend":{"kind":"null","size":"1MiB"}}"#),
        ("namespace-host-add", r#"{"cmd":"namespace-host-add","nqn":"nqn.2026-12.io.rdmablk:fuzz","nsid":1,"host":"nqn.2014-08.x:h2"}"#),
        ("namespace-qos", r#"{"cmd":"namespace-qos","nqn":"nqn.2026-12.io.rdmablk:fuzz","nsid":1,"iops":1000}"#),
        ("drain", r#"{"cmd":"drain","listener":"127.0.0.1:4420"}"#),
    ]
    .into_iter()
    .map(|(n, t)| (n, t.as_bytes().to_vec()))
    .collect()
}

/// `tls_psk` input: byte 0 even, a configured PSK in the interchange format; odd, a PSK
/// identity. nvme-cli's example key and identities of both versions.
pub fn seeds_tls_psk() -> Seeds {
    let with = |which: u8, text: &str| {
        let mut v = vec![which];
        v.extend_from_slice(text.as_bytes());
        v
    };
    vec![
        (
            "key-sha256",
            with(0, "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:"),
        ),
        (
            "identity-v0",
            with(1, "NVMe0R01 nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6 nqn.2016-06.io.spdk:cnode1"),
        ),
        (
            "identity-v1",
            with(1, "NVMe1R01 nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6 nqn.2016-06.io.spdk:cnode1 AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="),
        ),
    ]
}

/// `tcp_queue` input (fuzz_targets/tcp_queue.rs): byte 0 the connection (bit 0 header
/// digest, bit 1 data digest, bits 2-3 HPDA, bits 4-6 SQSIZE - 1), then operations: opcode
/// byte mod 8 0-1 a write, 2 a read (then CID, SLBA, NLB, shape: bits 0-1 3 = data in the
/// capsule, bits 2-4 the SGL length off, bit 5 a wrong data digest), 3-4 H2CData answering an
/// open R2T (then which, chunk in 512-byte units - 1, mangling mod 16: 0 CCCID, 1 TTAG,
/// 2-3 DATAO, 4 DATAL, 5 LAST, 6 data digest, 7 header digest, 8 PLEN, 9 DATAL short,
/// 10 two parts, else none; then its argument), 5 H2CData of the input's fields, 6 another
/// PDU (0 H2CTermReq, 1 ICReq, 2 a controller's type, 3 an SQE, 4 raw bytes), 7 send with the
/// next operation.
pub fn seeds_tcp_queue() -> Seeds {
    // A write of `blocks` blocks at `slba` by R2T (shape 0) or in the capsule (shape 3), a
    // read, and H2CData answering R2T `pick` in chunks of `units` * 512 bytes, `mangle`d.
    let write = |cid: u8, slba: u8, blocks: u8, shape: u8| vec![0, cid, slba, blocks - 1, shape];
    let read = |cid: u8, slba: u8, blocks: u8| vec![2, cid, slba, blocks - 1, 0];
    let h2c = |pick: u8, units: u8, mangle: u8, arg: u8| vec![3, pick, units - 1, mangle, arg];
    const KEEP: u8 = 15;
    const TOGETHER: u8 = 7;
    let seed = |mode: u8, ops: &[Vec<u8>]| {
        let mut v = vec![mode];
        for op in ops {
            v.extend_from_slice(op);
        }
        v
    };
    vec![
        (
            "write-by-r2t-then-read",
            seed(
                0x30,
                &[
                    write(1, 0, 8, 0),
                    h2c(0, 5, KEEP, 0),
                    h2c(0, 8, KEEP, 0),
                    read(2, 0, 8),
                ],
            ),
        ),
        (
            "digests-in-capsule-write-then-read",
            seed(0x33, &[write(3, 16, 4, 3), read(4, 16, 4)]),
        ),
        (
            "wrong-ttag-then-a-write-after-it",
            seed(
                0x30,
                &[
                    write(1, 8, 4, 0),
                    write(2, 24, 4, 0),
                    vec![TOGETHER],
                    h2c(0, 8, 1, 0),
                    h2c(1, 8, KEEP, 0),
                ],
            ),
        ),
        (
            "split-h2cdata-then-h2ctermreq",
            seed(0x31, &[write(5, 40, 6, 0), h2c(0, 6, 10, 30), vec![6, 0]]),
        ),
        (
            "writes-waiting-for-buffers",
            seed(
                0x70,
                &[
                    write(0, 0, 16, 0),
                    write(1, 16, 16, 0),
                    write(2, 32, 16, 0),
                    write(3, 48, 16, 0),
                    write(4, 64, 16, 0),
                    h2c(0, 9, KEEP, 0),
                    h2c(0, 9, KEEP, 0),
                    h2c(1, 9, KEEP, 0),
                    h2c(1, 9, KEEP, 0),
                    h2c(2, 9, KEEP, 0),
                    h2c(2, 9, KEEP, 0),
                ],
            ),
        ),
    ]
}

pub fn all_seeds() -> Vec<(&'static str, Seeds)> {
    vec![
        ("sqe_and_sgl", seeds_sqe_and_sgl()),
        ("connect_data", seeds_connect_data()),
        ("cm_private_data", seeds_cm_private_data()),
        ("cqe_identify", seeds_cqe_identify()),
        ("property_and_features", seeds_property_and_features()),
        ("soft_wire_frame", seeds_soft_wire_frame()),
        ("auth_messages", seeds_auth_messages()),
        ("ana_log", seeds_ana_log()),
        ("discovery_log", seeds_discovery_log()),
        ("tcp_pdu", seeds_tcp_pdu()),
        ("tcp_host_rx", seeds_tcp_host_rx()),
        ("tcp_queue", seeds_tcp_queue()),
        ("reservation_report", seeds_reservation_report()),
        ("reservation_state", seeds_reservation_state()),
        ("control_request", seeds_control_request()),
        ("tls_psk", seeds_tls_psk()),
    ]
}
