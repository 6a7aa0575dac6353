use super::*;
use rdmablk::nvme::reservation::{notice, racqa, rrega, rrela};

const A: HostId = [0xA; 16];
const B: HostId = [0xB; 16];
const C: HostId = [0xC; 16];

fn gen_type(r: &Reservations) -> (u32, u8) {
    let (g, t, _, _) = r.report();
    (g, t)
}

/// blktests nvme/054's sequence, with the generation and type 054.out expects after each step.
#[test]
fn blktests_054_sequence() {
    let r = Reservations::default();
    assert_eq!(gen_type(&r), (0, 0));
    r.register(&A, rrega::REGISTER, false, 0, 4, 0).unwrap();
    assert_eq!(gen_type(&r), (1, 0));
    assert_eq!(r.report().3[0].rkey, 4);
    r.register(&A, rrega::REPLACE, false, 4, 5, 0).unwrap();
    assert_eq!(gen_type(&r), (2, 0));
    assert_eq!(r.report().3[0].rkey, 5);
    r.register(&A, rrega::UNREGISTER, false, 5, 0, 0).unwrap();
    assert_eq!(gen_type(&r), (3, 0));
    assert!(r.report().3.is_empty());
    r.register(&A, rrega::REGISTER, false, 0, 4, 0).unwrap();
    r.acquire(&A, racqa::ACQUIRE, false, 1, 4, 0).unwrap();
    assert_eq!(gen_type(&r), (4, 1));
    assert!(r.report().3[0].holds);
    // Preempt by the holder itself, PRKEY 0: the type changes.
    r.acquire(&A, racqa::PREEMPT, false, 2, 4, 0).unwrap();
    assert_eq!(gen_type(&r), (5, 2));
    r.release(&A, rrela::RELEASE, false, 2, 4).unwrap();
    assert_eq!(gen_type(&r), (5, 0));
    assert!(!r.report().3[0].holds, "released, still registered");
    r.register(&A, rrega::REGISTER, false, 0, 4, 0).unwrap();
    r.acquire(&A, racqa::ACQUIRE, false, 1, 4, 0).unwrap();
    assert_eq!(gen_type(&r), (6, 1));
    r.release(&A, rrela::CLEAR, false, 0, 4).unwrap();
    assert_eq!(gen_type(&r), (7, 0));
    assert!(r.report().3.is_empty());
}

#[test]
fn access_follows_the_type_for_holder_registrant_and_stranger() {
    // (type, registrant may read, registrant may write, stranger may read, stranger may write)
    let table = [
        (1, true, false, true, false),
        (2, false, false, false, false),
        (3, true, true, true, false),
        (4, true, true, false, false),
        (5, true, true, true, false),
        (6, true, true, false, false),
    ];
    for (t, rr, rw, sr, sw) in table {
        let r = Reservations::default();
        assert!(r.allows(&C, true), "nothing held: all allowed");
        r.register(&A, rrega::REGISTER, false, 0, 1, 0).unwrap();
        r.register(&B, rrega::REGISTER, false, 0, 2, 0).unwrap();
        r.acquire(&A, racqa::ACQUIRE, false, t, 1, 0).unwrap();
        assert!(
            r.allows(&A, true) && r.allows(&A, false),
            "type {t}: the holder"
        );
        assert_eq!(
            (r.allows(&B, false), r.allows(&B, true)),
            (rr, rw),
            "type {t}: a registrant"
        );
        assert_eq!(
            (r.allows(&C, false), r.allows(&C, true)),
            (sr, sw),
            "type {t}: a stranger"
        );
        r.release(&A, rrela::RELEASE, false, t, 1).unwrap();
        assert!(r.allows(&C, true), "type {t}: released");
    }
}

#[test]
fn conflicts_and_invalid_fields() {
    let r = Reservations::default();
    // Not registered: everything but Register conflicts.
    assert_eq!(
        r.acquire(&A, racqa::ACQUIRE, false, 1, 0, 0),
        Err(ResvError::Conflict)
    );
    assert_eq!(
        r.release(&A, rrela::RELEASE, false, 1, 0),
        Err(ResvError::Conflict)
    );
    assert_eq!(
        r.register(&A, rrega::UNREGISTER, false, 0, 0, 0),
        Err(ResvError::Conflict)
    );
    r.register(&A, rrega::REGISTER, false, 0, 7, 0).unwrap();
    // Another key for a registered host, a wrong current key.
    assert_eq!(
        r.register(&A, rrega::REGISTER, false, 0, 8, 0),
        Err(ResvError::Conflict)
    );
    assert_eq!(
        r.register(&A, rrega::REPLACE, false, 1, 8, 0),
        Err(ResvError::Conflict)
    );
    r.register(&A, rrega::REPLACE, true, 1, 8, 0).unwrap();
    assert_eq!(
        r.acquire(&A, racqa::ACQUIRE, false, 1, 7, 0),
        Err(ResvError::Conflict)
    );
    assert_eq!(
        r.acquire(&A, racqa::ACQUIRE, false, 7, 8, 0),
        Err(ResvError::InvalidField)
    );
    assert_eq!(
        r.acquire(&A, racqa::ACQUIRE, true, 1, 8, 0),
        Err(ResvError::InvalidField)
    );
    assert_eq!(
        r.acquire(&A, 3, false, 1, 8, 0),
        Err(ResvError::InvalidAction)
    );
    assert_eq!(
        r.register(&A, 3, false, 0, 0, 0),
        Err(ResvError::InvalidAction)
    );
    r.acquire(&A, racqa::ACQUIRE, false, 1, 8, 0).unwrap();
    // Held by A: B acquiring conflicts; A releasing with another type conflicts.
    r.register(&B, rrega::REGISTER, false, 0, 9, 0).unwrap();
    assert_eq!(
        r.acquire(&B, racqa::ACQUIRE, false, 1, 9, 0),
        Err(ResvError::Conflict)
    );
    assert_eq!(
        r.release(&A, rrela::RELEASE, false, 2, 8),
        Err(ResvError::Conflict)
    );
    // B releasing what it does not hold: success, nothing changes.
    r.release(&B, rrela::RELEASE, false, 1, 9).unwrap();
    assert_eq!(gen_type(&r).1, 1);
    // Preempt with PRKEY 0 by a non-holder: invalid.
    assert_eq!(
        r.acquire(&B, racqa::PREEMPT, false, 1, 9, 0),
        Err(ResvError::InvalidField)
    );
}

#[test]
fn preempt_takes_the_reservation_and_unregisters_the_victim() {
    let r = Reservations::default();
    r.register(&A, rrega::REGISTER, false, 0, 1, 0).unwrap();
    r.register(&B, rrega::REGISTER, false, 0, 2, 0).unwrap();
    r.acquire(&A, racqa::ACQUIRE, false, 2, 1, 0).unwrap();
    assert!(!r.allows(&B, false));
    let gone = r
        .acquire(&B, racqa::PREEMPT_AND_ABORT, false, 2, 2, 1)
        .unwrap();
    assert_eq!(gone, vec![(A, notice::REGISTRATION_PREEMPTED)]);
    let (g, t, _, regs) = r.report();
    assert_eq!((g, t), (3, 2));
    assert_eq!(regs.len(), 1);
    assert_eq!(regs[0].hostid, B);
    assert!(regs[0].holds);
    assert!(!r.allows(&A, false) && r.allows(&B, true));
    // The preempted host registers again; a clear by it removes everyone.
    r.register(&A, rrega::REGISTER, false, 0, 1, 0).unwrap();
    assert_eq!(
        r.release(&A, rrela::CLEAR, false, 0, 1).unwrap(),
        vec![(B, notice::RESERVATION_PREEMPTED)]
    );
    assert!(r.report().3.is_empty() && r.allows(&C, true));
}

#[test]
fn all_registrants_types_pass_on_when_the_holder_leaves() {
    let r = Reservations::default();
    r.register(&A, rrega::REGISTER, false, 0, 1, 0).unwrap();
    r.register(&B, rrega::REGISTER, false, 0, 2, 0).unwrap();
    r.acquire(&A, racqa::ACQUIRE, false, 5, 1, 0).unwrap();
    assert!(
        r.report().3.iter().all(|x| x.holds),
        "every registrant holds type 5"
    );
    r.register(&A, rrega::UNREGISTER, false, 1, 0, 0).unwrap();
    assert_eq!(gen_type(&r).1, 5, "B holds it now");
    assert!(r.allows(&B, true) && !r.allows(&C, true));
    r.register(&B, rrega::UNREGISTER, false, 2, 0, 0).unwrap();
    assert_eq!(gen_type(&r).1, 0);
    assert!(r.allows(&C, true));
}

#[test]
fn persisted_state_comes_back_and_cptpl_needs_a_file() {
    let dir = std::env::temp_dir().join(format!("rdmablk-resv-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let file = state_file(&dir, "nqn.2026-11.io.rdmablk:a/b", 1);
    assert!(file.ends_with("reservations/nqn.2026-11.io.rdmablk:a_b-1.json"));
    // Without a file: no PTPL.
    let r = Reservations::default();
    assert_eq!(
        r.register(&A, rrega::REGISTER, false, 0, 1, 0b11),
        Err(ResvError::InvalidField)
    );
    assert_eq!(r.set_ptpl(true), Err(ResvError::InvalidField));
    // With one: CPTPL 11b persists, and a later open starts from it.
    let r = Reservations::open(Some(file.clone())).unwrap();
    assert!(r.can_persist() && !r.ptpl());
    r.register(&A, rrega::REGISTER, false, 0, 1, 0b11).unwrap();
    r.register(&B, rrega::REGISTER, false, 0, 2, 0).unwrap();
    r.acquire(&A, racqa::ACQUIRE, false, 2, 1, 0).unwrap();
    assert!(file.exists());
    let again = Reservations::open(Some(file.clone())).unwrap();
    assert_eq!(again.report(), r.report());
    assert!(again.ptpl() && !again.allows(&B, false) && again.allows(&A, true));
    // Turning PTPL off removes the file: the next open starts empty.
    again
        .register(&A, rrega::REGISTER, false, 0, 1, 0b10)
        .unwrap();
    assert!(!file.exists());
    let empty = Reservations::open(Some(file.clone())).unwrap();
    assert_eq!(empty.report(), (0, 0, false, vec![]));
    // A damaged file is an error naming it, not a silent empty state.
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, "{\"version\": 1, \"ptpl\": true}").unwrap();
    let e = Reservations::open(Some(file.clone())).unwrap_err();
    assert!(e.contains("generation") && e.contains(".json"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn notices_go_to_the_hosts_a_change_concerns() {
    let r = Reservations::default();
    r.register(&A, rrega::REGISTER, false, 0, 1, 0).unwrap();
    r.register(&B, rrega::REGISTER, false, 0, 2, 0).unwrap();
    r.register(&C, rrega::REGISTER, false, 0, 3, 0).unwrap();
    // A Registrants Only reservation released: the other registrants hear of it.
    r.acquire(&A, racqa::ACQUIRE, false, 3, 1, 0).unwrap();
    assert_eq!(
        r.release(&A, rrela::RELEASE, false, 3, 1).unwrap(),
        vec![
            (B, notice::RESERVATION_RELEASED),
            (C, notice::RESERVATION_RELEASED)
        ]
    );
    // Write Exclusive released: nobody gained anything from registering, no notice.
    r.acquire(&A, racqa::ACQUIRE, false, 1, 1, 0).unwrap();
    assert!(r
        .release(&A, rrela::RELEASE, false, 1, 1)
        .unwrap()
        .is_empty());
    // B preempts A with another type: A is preempted, C hears of the release.
    r.acquire(&A, racqa::ACQUIRE, false, 1, 1, 0).unwrap();
    assert_eq!(
        r.acquire(&B, racqa::PREEMPT, false, 2, 2, 1).unwrap(),
        vec![
            (A, notice::REGISTRATION_PREEMPTED),
            (C, notice::RESERVATION_RELEASED)
        ]
    );
}

#[test]
fn the_shared_document_round_trips_and_a_damaged_one_is_named() {
    let mut doc = Doc::default();
    let mut s = State::default();
    s.regs.push(Reg { host: A, key: 1 });
    s.holder = Some((A, ResvType::WriteExclusive));
    s.generation = 3;
    doc.advance(
        s,
        "gw-1",
        &vec![(B, notice::REGISTRATION_PREEMPTED)],
        vec![B],
    );
    let text = persist::encode_doc(&doc);
    assert_eq!(persist::decode_doc(&text).unwrap(), doc);
    // Only the last LOG_LEN changes' notices are kept.
    for i in 0..40 {
        let st = doc.state.clone();
        doc.advance(st, &format!("gw-{i}"), &Vec::new(), Vec::new());
    }
    assert_eq!(doc.epoch, 41);
    assert_eq!(doc.log.len(), 32);
    assert_eq!(doc.log[0].epoch, 10);
    let e =
        persist::decode_doc(r#"{"version": 1, "epoch": 2, "state": {"version": 1}, "log": []}"#)
            .unwrap_err();
    assert!(e.contains("ptpl"), "{e}");
}

#[test]
fn a_directory_store_swaps_only_what_it_read_and_knows_who_is_alive() {
    let dir = std::env::temp_dir().join(format!("rdmablk-shared-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let one = shared_dir::DirStore::open(&dir).unwrap();
    let two = shared_dir::DirStore::open(&dir).unwrap();
    assert_ne!(one.me(), two.me());
    assert!(one.others_live().unwrap() && two.others_live().unwrap());
    assert_eq!(one.load().unwrap(), None);
    // The first swap from "nothing" wins; a second one from "nothing" loses.
    let announce = one.swap(None, "first", 1).unwrap().expect("the swap wins");
    assert!(two.swap(None, "second", 1).unwrap().is_none());
    assert_eq!(two.load().unwrap().as_deref(), Some("first"));
    // The announcement waits for gateway two's acknowledgement of epoch 1.
    let waiting = std::thread::spawn(announce);
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert!(
        !waiting.is_finished(),
        "completed before the other gateway acknowledged"
    );
    two.ack(1);
    waiting.join().unwrap().unwrap();
    // A gateway that left is waited for by nobody.
    two.leave();
    assert!(!one.others_live().unwrap());
    let announce = one.swap(Some("first"), "third", 2).unwrap().expect("wins");
    announce().unwrap();
    drop((one, two));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_recreated_shared_document_starts_above_every_epoch_seen() {
    let dir = std::env::temp_dir().join(format!("rdmablk-shared-epoch-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store: Arc<dyn SharedStore> = Arc::new(shared_dir::DirStore::open(&dir).unwrap());
    let r = Reservations::open_shared(Arc::clone(&store)).unwrap();
    r.register(&A, rrega::REGISTER, false, 0, 1, 0).unwrap();
    let first = r.epoch.load(Ordering::Acquire);
    assert!(first > 1, "a new document starts at a time, not at 1");
    // The document removed (as an operator would a damaged one): the next change's epoch is
    // still above, so no gateway takes it for an old one.
    std::fs::remove_file(dir.join("state")).unwrap();
    r.register(&B, rrega::REGISTER, false, 0, 2, 0).unwrap();
    assert!(r.epoch.load(Ordering::Acquire) > first);
    assert_eq!(
        r.report().3.len(),
        1,
        "B alone: the removed document's A is gone"
    );
    // A command that changes nothing still waits for the other gateways (an announcement).
    let (_, announce) = r
        .release_announced(&B, rrela::RELEASE, false, 1, 2)
        .unwrap();
    assert!(
        announce.is_some(),
        "no announcement for a command that changed nothing"
    );
    drop(r);
    let _ = std::fs::remove_dir_all(&dir);
}
