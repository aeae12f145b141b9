//! Tests of the region module.

use super::*;

#[test]
fn default_layout() {
    let l = Layout::new(&RegionConfig::default()).expect("valid");
    assert_eq!(l.bounce_meta_offset(), 512);
    assert_eq!(l.ring_offset(), 1024);
    assert_eq!(l.inline_capacity(), 4096);
    assert_eq!(l.bounce_data_offset() % PAGE, 0);
    assert_eq!(l.bounce_data_offset(), 1024 + 256 * 4160 + 3072);
    assert_eq!(l.total_size(), l.bounce_data_offset() + 64 * 128 * 1024);
    assert_eq!(l.total_size(), 9_457_664);
    assert_eq!(l.slot(257), l.slot(1));
}

#[test]
fn configs_outside_limits_are_refused() {
    let d = RegionConfig::default();
    for cfg in [
        RegionConfig { ring_slots: 3, ..d },
        RegionConfig { ring_slots: 1, ..d },
        RegionConfig {
            ring_slots: 1 << 17,
            ..d
        },
        RegionConfig {
            slot_size: 100,
            ..d
        },
        RegionConfig { slot_size: 64, ..d },
        RegionConfig {
            slot_size: 1 << 20,
            ..d
        },
        RegionConfig {
            bounce_size: 100,
            ..d
        },
        RegionConfig {
            bounce_count: 1 << 20,
            ..d
        },
        RegionConfig {
            bounce_count: 1 << 16,
            bounce_size: 16 << 20,
            ..d
        },
    ] {
        let e = Layout::new(&cfg).expect_err("out of limits");
        assert_eq!(e.kind(), ErrorKind::Inval, "{cfg:?}");
    }
    let none = Layout::new(&RegionConfig {
        bounce_count: 0,
        ..d
    })
    .expect("valid");
    assert_eq!(none.bounce_size(), 0);
}

#[test]
fn names() {
    assert!(check_name("fabric-shm-1000-42-0-00ff").is_ok());
    for bad in [
        "",
        "fabric-shm-",
        "fabric-shm-../x",
        "fabric-shm-1/2",
        "fabric-shm-A",
        "other-1",
        "fabric-shm-1\0",
    ] {
        assert!(check_name(bad).is_err(), "{bad:?}");
    }
    assert!(check_name(&format!("{NAME_PREFIX}{}", "1".repeat(200))).is_err());
}
