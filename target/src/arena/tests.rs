use super::*;

const MIB: usize = 1 << 20;

#[test]
fn layout_matches_the_documented_formula() {
    // SPDK defaults: depth 128, 4 KiB in-capsule data, 128 KiB I/O.
    let l = ParcelLayout::new(128, 4096, 128 << 10);
    assert_eq!(l.capsule_slot_bytes, 64 + 4096);
    assert_eq!(l.resp_offset, 128 * 4160);
    assert_eq!(l.data_offset % PAGE_BYTES, 0);
    assert!(l.data_offset >= l.resp_offset + 128 * CQE_BYTES);
    assert_eq!(l.data_slot_bytes, 128 << 10);
    assert_eq!(l.total_bytes, l.data_offset + 128 * (128 << 10));
    // 520 KiB of receive slots + 2 KiB of responses, page-rounded, then 16 MiB of data.
    assert_eq!(l.total_bytes, 536_576 + 16 * MIB);
    // An in-capsule size that is not a multiple of 64 rounds the slot up.
    assert_eq!(ParcelLayout::new(32, 16, 4096).capsule_slot_bytes, 128);
    assert_eq!(ParcelLayout::new(32, 0, 4096).capsule_slot_bytes, 64);
}

#[test]
fn carve_free_and_coalesce() {
    let mut a = ArenaAllocator::new(16 * PAGE_BYTES);
    let x = a.alloc(4 * PAGE_BYTES).unwrap();
    let y = a.alloc(4 * PAGE_BYTES).unwrap();
    let z = a.alloc(4 * PAGE_BYTES).unwrap();
    assert_eq!(
        (x.offset, y.offset, z.offset),
        (0, 4 * PAGE_BYTES, 8 * PAGE_BYTES)
    );
    a.free(y);
    assert_eq!(a.free_extents().len(), 2);
    // First fit reuses the hole.
    let y2 = a.alloc(2 * PAGE_BYTES).unwrap();
    assert_eq!(y2.offset, 4 * PAGE_BYTES);
    a.free(y2);
    a.free(x);
    // x and the hole of y merged: [0, 8 pages) and the tail [12, 16).
    assert_eq!(
        a.free_extents(),
        &[
            Extent {
                offset: 0,
                len: 8 * PAGE_BYTES
            },
            Extent {
                offset: 12 * PAGE_BYTES,
                len: 4 * PAGE_BYTES
            },
        ]
    );
    a.free(z);
    assert_eq!(
        a.free_extents(),
        &[Extent {
            offset: 0,
            len: 16 * PAGE_BYTES
        }]
    );
    let s = a.stats();
    assert_eq!((s.bytes_in_use, s.parcels), (0, 0));
    assert_eq!(s.high_water_bytes, 12 * PAGE_BYTES);
    assert_eq!(s.largest_free_bytes, 16 * PAGE_BYTES);
}

#[test]
fn full_arena_reports_wanted_and_free() {
    let mut a = ArenaAllocator::new(10 * PAGE_BYTES);
    let _x = a.alloc(3 * PAGE_BYTES).unwrap();
    let y = a.alloc(3 * PAGE_BYTES).unwrap();
    let _z = a.alloc(3 * PAGE_BYTES).unwrap();
    a.free(y);
    // 4 pages free in total, but in pieces of 3 and 1.
    match a.alloc(4 * PAGE_BYTES) {
        Err(ArenaError::Full {
            wanted,
            free,
            largest_free,
        }) => {
            assert_eq!(wanted, 4 * PAGE_BYTES);
            assert_eq!(free, 4 * PAGE_BYTES);
            assert_eq!(largest_free, 3 * PAGE_BYTES);
        }
        other => panic!("expected Full, got {other:?}"),
    }
    assert_eq!(a.stats().refused, 1);
    assert!(matches!(a.alloc(0), Err(ArenaError::BadSize { .. })));
    assert!(matches!(
        a.alloc(11 * PAGE_BYTES),
        Err(ArenaError::BadSize { .. })
    ));
}

#[test]
fn sizes_round_up_to_pages() {
    let mut a = ArenaAllocator::new(10 * PAGE_BYTES + 100);
    assert_eq!(a.stats().total_bytes, 10 * PAGE_BYTES);
    let x = a.alloc(1).unwrap();
    assert_eq!(x.len, PAGE_BYTES);
    let y = a.alloc(PAGE_BYTES + 1).unwrap();
    assert_eq!((y.offset, y.len), (PAGE_BYTES, 2 * PAGE_BYTES));
}

#[test]
#[should_panic(expected = "double free")]
fn double_free_panics() {
    let mut a = ArenaAllocator::new(8 * PAGE_BYTES);
    let x = a.alloc(PAGE_BYTES).unwrap();
    let _y = a.alloc(PAGE_BYTES).unwrap();
    a.free(x);
    a.free(x);
}

#[test]
fn random_carving_keeps_accounting_exact() {
    // Deterministic pseudo-random carve/free sequence; at the end everything coalesces back.
    let mut a = ArenaAllocator::new(256 * PAGE_BYTES);
    let mut live: Vec<Extent> = Vec::new();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for _ in 0..5000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if x % 3 != 0 || live.is_empty() {
            if let Ok(e) = a.alloc(((x >> 8) % 20 + 1) as usize * PAGE_BYTES) {
                assert!(live
                    .iter()
                    .all(|l| e.offset + e.len <= l.offset || l.offset + l.len <= e.offset));
                live.push(e);
            }
        } else {
            let e = live.swap_remove((x >> 16) as usize % live.len());
            a.free(e);
        }
        let used: usize = live.iter().map(|e| e.len).sum();
        assert_eq!(a.stats().bytes_in_use, used);
        let free: usize = a.free_extents().iter().map(|e| e.len).sum();
        assert_eq!(used + free, 256 * PAGE_BYTES);
        assert!(a
            .free_extents()
            .windows(2)
            .all(|w| w[0].offset + w[0].len < w[1].offset));
    }
    for e in live.drain(..) {
        a.free(e);
    }
    assert_eq!(a.free_extents().len(), 1);
    assert_eq!(a.stats().bytes_in_use, 0);
}

#[test]
fn parcels_are_aligned_and_return_their_space() {
    let layout = ParcelLayout::new(32, 4096, 128 << 10);
    let arena = Arc::new(Arena::unpinned(3 * layout.total_bytes).unwrap());
    assert!(arena.mr().is_none());
    let idle = arena.stats();
    assert_eq!(idle.bytes_in_use, 0);

    let p1 = arena.carve(layout).unwrap();
    let p2 = arena.carve(layout).unwrap();
    let p3 = arena.carve(layout).unwrap();
    assert!(matches!(arena.carve(layout), Err(ArenaError::Full { .. })));
    for p in [&p1, &p2, &p3] {
        assert_eq!(p.whole().addr % PAGE_BYTES as u64, 0);
        for i in 0..32 {
            let d = p.data_slot(i);
            assert_eq!(
                d.addr % PAGE_BYTES as u64,
                0,
                "data slot {i} not 4 KiB-aligned"
            );
            assert!(arena.contains(d.as_ptr(), d.len));
            assert_eq!(p.recv_slot(i).addr % CAPSULE_SLOT_ALIGN as u64, 0);
            assert_eq!(p.resp_slot(i).len, CQE_BYTES);
        }
        let data = p.data_area();
        assert_eq!(data.len, 32 * (128 << 10));
        assert_eq!(data.addr + data.len as u64, p.whole().addr + p.len() as u64);
    }
    assert_eq!(arena.stats().parcels, 3);
    drop(p2);
    p1.release();
    let p4 = arena.carve(ParcelLayout::new(32, 4096, 256 << 10)).unwrap();
    assert_eq!(
        p4.arena_offset(),
        0,
        "two freed neighbours coalesce into one range"
    );
    drop(p4);
    drop(p3);
    let s = arena.stats();
    assert_eq!(
        (s.bytes_in_use, s.parcels),
        (0, 0),
        "arena usage returns to idle"
    );
    assert_eq!(s.high_water_bytes, 3 * layout.total_bytes);
    assert_eq!(s.refused, 1);
}

#[test]
fn parcel_memory_is_usable() {
    let layout = ParcelLayout::new(32, 0, 4096);
    let arena = Arc::new(Arena::unpinned(layout.total_bytes).unwrap());
    let p = arena.carve(layout).unwrap();
    let slot = p.data_slot(31);
    // SAFETY: the slot is inside the live arena and nothing else accesses it in this test.
    unsafe {
        std::ptr::write_bytes(slot.as_ptr(), 0xAB, slot.len);
        assert_eq!(*slot.as_ptr().add(slot.len - 1), 0xAB);
    }
    assert_eq!(p.recv_slot(0).sge(7).lkey, 7);
}

#[test]
fn arena_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Arena>();
    check::<Parcel>();
}
