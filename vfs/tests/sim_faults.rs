//! Properties of `SimVfs`'s faults during operation (failed fsync, short
//! writes, ENOSPC, misdirected writes, bit flips), of `FaultConfig`, and of
//! the trace. Every randomized test prints the seed that failed.

mod common;

use common::{for_each_seed, open};
use std::collections::BTreeSet;
use std::io;
use std::path::Path;

use durlog_vfs::{FaultConfig, FaultKind, OpenMode, SimVfs, TraceKind, Vfs, injected_fault};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

fn contents(vfs: &SimVfs, path: &str) -> Vec<u8> {
    vfs.file_contents(Path::new(path)).expect("the file exists")
}

fn only(kind: FaultKind, weight: f64) -> FaultConfig {
    FaultConfig::none().with(kind, weight)
}

/// A failed fsync returns EIO and sometimes drops the dirty pages: a later
/// sync then "succeeds" and a crash still loses them. Never recorded as
/// damage (it cannot touch what was durable before).
#[test]
fn failed_fsync_may_drop_pages_so_a_later_sync_lies() {
    let old = vec![b'o'; 8192];
    let mut outcomes = BTreeSet::new();
    for_each_seed(0..64, |seed| {
        let vfs = SimVfs::with_faults(seed, only(FaultKind::FailedFsync, 1.0));
        vfs.put_durable_file(Path::new("/d/f"), &old);
        let file = open(&vfs, "/d/f", OpenMode::ReadWrite);
        file.write_at(&[b'n'; 8192], 0).unwrap();
        let error = file.sync_data().unwrap_err();
        assert_eq!(injected_fault(&error), Some(FaultKind::FailedFsync));
        assert!(error.to_string().contains("/d/f") && error.to_string().contains("os error 5"));
        // The cache still shows the new bytes, as Linux does.
        assert_eq!(contents(&vfs, "/d/f"), vec![b'n'; 8192]);
        vfs.set_faults(FaultConfig::none());
        file.sync_data().expect("the retry reports success");
        vfs.crash();
        let after = contents(&vfs, "/d/f");
        if after == old {
            outcomes.insert("dropped: the retried sync lied");
        } else {
            assert_eq!(after, vec![b'n'; 8192]);
            outcomes.insert("kept");
        }
        assert!(vfs.damage().is_empty());
        assert_eq!(vfs.fault_counts()[&FaultKind::FailedFsync], 1);
    });
    assert_eq!(outcomes.len(), 2, "{outcomes:?}");
}

#[test]
fn dropped_pages_written_again_are_synced_again() {
    for_each_seed(0..32, |seed| {
        let vfs = SimVfs::with_faults(seed, only(FaultKind::FailedFsync, 1.0));
        vfs.put_durable_file(Path::new("/f"), &[b'o'; 100]);
        let file = open(&vfs, "/f", OpenMode::ReadWrite);
        file.write_at(b"new", 0).unwrap();
        assert!(file.sync_data().is_err());
        vfs.set_faults(FaultConfig::none());
        // The engine's way out: write the bytes again, then sync.
        file.write_at(b"new", 0).unwrap();
        file.sync_data().unwrap();
        vfs.crash();
        assert_eq!(&contents(&vfs, "/f")[..3], b"new");
    });
}

#[test]
fn failed_dir_sync_makes_nothing_durable() {
    for_each_seed(0..16, |seed| {
        let vfs = SimVfs::with_faults(seed, only(FaultKind::FailedFsync, 1.0));
        vfs.create_dir_all(Path::new("/d")).unwrap();
        open(&vfs, "/d/new", OpenMode::CreateNew);
        let error = vfs.sync_dir(Path::new("/d")).unwrap_err();
        assert_eq!(injected_fault(&error), Some(FaultKind::FailedFsync));
        vfs.crash();
        assert!(vfs.files().is_empty());
    });
}

#[test]
fn short_write_writes_a_strict_prefix_and_fails() {
    let data: Vec<u8> = (0..1000).map(|i| (i % 200 + 1) as u8).collect();
    let mut lengths = BTreeSet::new();
    for_each_seed(0..64, |seed| {
        let vfs = SimVfs::with_faults(seed, only(FaultKind::ShortWrite, 1.0));
        vfs.put_durable_file(Path::new("/f"), b"head");
        let file = open(&vfs, "/f", OpenMode::ReadWrite);
        // Short writes as well as long ones, so an empty prefix shows up.
        let data = &data[..[1, 2, 3, 1000][seed as usize % 4]];
        let error = file.write_at(data, 4).unwrap_err();
        assert_eq!(injected_fault(&error), Some(FaultKind::ShortWrite));
        let after = contents(&vfs, "/f");
        assert_eq!(&after[..4], b"head");
        let written = &after[4..];
        assert!(written.len() < data.len(), "a short write is short");
        assert_eq!(written, &data[..written.len()]);
        lengths.insert(written.is_empty());
    });
    assert_eq!(lengths.len(), 2, "saw both empty and non-empty prefixes");
}

#[test]
fn no_space_writes_nothing_or_a_prefix_and_fails() {
    let data = vec![9u8; 3000];
    let mut outcomes = BTreeSet::new();
    for_each_seed(0..64, |seed| {
        let vfs = SimVfs::with_faults(seed, only(FaultKind::NoSpace, 1.0));
        vfs.put_durable_file(Path::new("/f"), b"");
        let file = open(&vfs, "/f", OpenMode::ReadWrite);
        let error = file.write_at(&data, 0).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::StorageFull);
        assert_eq!(injected_fault(&error), Some(FaultKind::NoSpace));
        let after = contents(&vfs, "/f");
        assert!(after.len() < data.len());
        assert_eq!(after, data[..after.len()]);
        outcomes.insert(after.is_empty());
    });
    assert_eq!(outcomes.len(), 2, "saw both nothing and a prefix written");
}

/// One misdirected write per disk lifetime, recorded with where it landed
/// and where it was meant to go; the data is found where it landed.
#[test]
fn misdirected_write_lands_elsewhere_once_and_is_recorded() {
    for_each_seed(0..64, |seed| {
        let vfs = SimVfs::with_faults(seed, only(FaultKind::MisdirectedWrite, 1.0));
        vfs.put_durable_file(Path::new("/d/f"), &[0xee; 8 * 512]);
        let file = open(&vfs, "/d/f", OpenMode::ReadWrite);
        for sector in 0..8u8 {
            file.write_at(&[sector; 512], u64::from(sector) * 512)
                .unwrap();
        }
        let damage = vfs.damage();
        assert_eq!(damage.len(), 1, "{damage:?}");
        let misdirected = &damage[0];
        assert_eq!(misdirected.kind, FaultKind::MisdirectedWrite);
        assert_eq!(misdirected.path, Path::new("/d/f"));
        assert_eq!(misdirected.intended_offset, Some(0));
        assert_eq!(misdirected.len, 512);
        assert!(misdirected.offset.is_multiple_of(512) && misdirected.offset != 0);
        let after = contents(&vfs, "/d/f");
        assert_eq!(after.len(), 8 * 512);
        assert_eq!(
            after[..512],
            [0xee; 512],
            "the intended place keeps its old bytes"
        );
        assert_eq!(vfs.fault_counts()[&FaultKind::MisdirectedWrite], 1);
    });
}

#[test]
fn bit_flip_on_read_flips_one_returned_bit_and_leaves_the_disk_alone() {
    let data: Vec<u8> = (0..1000).map(|i| (i * 7) as u8).collect();
    for_each_seed(0..32, |seed| {
        let vfs = SimVfs::with_faults(seed, only(FaultKind::BitFlipOnRead, 1.0));
        vfs.put_durable_file(Path::new("/f"), &data);
        let file = open(&vfs, "/f", OpenMode::ReadOnly);
        let mut buf = vec![0u8; 1000];
        assert_eq!(file.read_at(&mut buf, 0).unwrap(), 1000);
        let flipped: u32 = buf
            .iter()
            .zip(&data)
            .map(|(a, b)| (a ^ b).count_ones())
            .sum();
        assert_eq!(flipped, 1);
        assert_eq!(contents(&vfs, "/f"), data);
        assert_eq!(vfs.durable_contents(Path::new("/f")).unwrap(), data);
        assert!(
            vfs.damage().is_empty(),
            "a read flip damages nothing durable"
        );
        // A read past the end returns nothing, and so flips nothing.
        assert_eq!(file.read_at(&mut buf, 5000).unwrap(), 0);
    });
}

/// A read onto a buffer that already holds bytes flips one bit of what it
/// appended, never of what was there, and draws its faults as `read_at`
/// does: the same seed flips the same bit either way.
#[test]
fn bit_flip_on_a_read_onto_a_vec_lands_in_what_it_appended() {
    let data: Vec<u8> = (0..1000).map(|i| (i * 13) as u8).collect();
    for_each_seed(0..32, |seed| {
        let read = |onto: bool| {
            let vfs = SimVfs::with_faults(seed, only(FaultKind::BitFlipOnRead, 1.0));
            vfs.put_durable_file(Path::new("/f"), &data);
            let file = open(&vfs, "/f", OpenMode::ReadOnly);
            match onto {
                true => {
                    let mut buf = vec![0x55; 7];
                    assert_eq!(file.read_at_onto(&mut buf, 600, 300).unwrap(), 600);
                    assert_eq!(
                        buf[..7],
                        [0x55; 7],
                        "the bytes already there are left alone"
                    );
                    buf.split_off(7)
                }
                false => {
                    let mut buf = vec![0; 600];
                    assert_eq!(file.read_at(&mut buf, 300).unwrap(), 600);
                    buf
                }
            }
        };
        let onto = read(true);
        let flipped: u32 = (onto.iter().zip(&data[300..900]))
            .map(|(a, b)| (a ^ b).count_ones())
            .sum();
        assert_eq!(flipped, 1);
        assert_eq!(onto, read(false), "the same bit as read_at flips");
    });
}

/// A read onto a buffer that the disk fails (EIO) leaves the buffer as it
/// was: SimVfs draws the fault before it copies a byte. (A short read
/// followed by the end of the file: the conformance suite.)
#[test]
fn a_failed_read_onto_a_vec_leaves_it_as_it_was() {
    for_each_seed(0..8, |seed| {
        let vfs = SimVfs::new(seed);
        vfs.put_durable_file(Path::new("/f"), &[9; 100]);
        let file = open(&vfs, "/f", OpenMode::ReadOnly);
        vfs.set_faults(only(FaultKind::ReadError, 1.0));
        let mut buf = vec![1, 2, 3];
        assert!(file.read_at_onto(&mut buf, 50, 0).is_err());
        assert!(durlog_vfs::read_exact_at_onto(&*file, &mut buf, 50, 0).is_err());
        assert_eq!(buf, [1, 2, 3]);
    });
}

#[test]
fn bit_flip_at_rest_changes_one_durable_bit_and_is_recorded() {
    let vfs = SimVfs::new(5);
    vfs.put_durable_file(Path::new("/d/f"), &[0u8; 100]);
    vfs.flip_bit_at_rest(Path::new("/d/f"), 10 * 8 + 3).unwrap();
    let mut expected = vec![0u8; 100];
    expected[10] = 0b1000;
    assert_eq!(vfs.durable_contents(Path::new("/d/f")).unwrap(), expected);
    assert_eq!(contents(&vfs, "/d/f"), expected);
    vfs.crash();
    assert_eq!(contents(&vfs, "/d/f"), expected);
    let damage = vfs.damage();
    assert_eq!(damage.len(), 1);
    assert_eq!(
        (
            damage[0].path.as_path(),
            damage[0].offset,
            damage[0].bit,
            damage[0].kind
        ),
        (Path::new("/d/f"), 10, Some(3), FaultKind::BitFlipAtRest)
    );
    let beyond = vfs.flip_bit_at_rest(Path::new("/d/f"), 800).unwrap_err();
    assert_eq!(beyond.kind(), io::ErrorKind::InvalidInput);
    let missing = vfs.flip_bit_at_rest(Path::new("/d/none"), 0).unwrap_err();
    assert_eq!(missing.kind(), io::ErrorKind::NotFound);
    assert_eq!(vfs.damage().len(), 1);
}

#[test]
fn random_bit_flip_at_rest_picks_a_file_with_durable_bytes() {
    assert_eq!(SimVfs::new(0).flip_random_bit_at_rest(), None);
    for_each_seed(0..32, |seed| {
        let vfs = SimVfs::new(seed);
        vfs.put_durable_file(Path::new("/a/empty"), b"");
        vfs.put_durable_file(Path::new("/b/full"), &[0u8; 64]);
        open(&vfs, "/a/unsynced", OpenMode::CreateNew)
            .write_at(&[0u8; 64], 0)
            .unwrap();
        let damage = vfs.flip_random_bit_at_rest().expect("one file qualifies");
        assert_eq!(damage.path, Path::new("/b/full"));
        let after = vfs.durable_contents(Path::new("/b/full")).unwrap();
        assert_eq!(after.iter().map(|byte| byte.count_ones()).sum::<u32>(), 1);
        assert_eq!(after[damage.offset as usize], 1 << damage.bit.unwrap());
        assert_eq!(vfs.damage(), vec![damage]);
    });
}

#[test]
fn flip_in_a_dirty_page_hits_the_platter_not_the_cache() {
    let vfs = SimVfs::new(0);
    vfs.put_durable_file(Path::new("/f"), &[0u8; 10]);
    let file = open(&vfs, "/f", OpenMode::ReadWrite);
    file.write_at(b"x", 9).unwrap();
    vfs.flip_bit_at_rest(Path::new("/f"), 0).unwrap();
    assert_eq!(
        contents(&vfs, "/f")[0],
        0,
        "the cache holds the page being written"
    );
    vfs.crash();
    assert_eq!(contents(&vfs, "/f")[0], 1, "the crash reveals the platter");
}

// ----- FaultConfig -----

#[test]
fn fault_kind_names_round_trip() {
    let names: BTreeSet<&str> = FaultKind::ALL.iter().map(|kind| kind.name()).collect();
    assert_eq!(names.len(), FaultKind::ALL.len());
    for &kind in FaultKind::ALL {
        assert_eq!(kind.name().parse::<FaultKind>().unwrap(), kind);
        assert_eq!(kind.to_string(), kind.name());
        assert!(
            kind.name()
                .chars()
                .all(|c| c.is_ascii_lowercase() || c == '-')
        );
    }
    let error = "torn".parse::<FaultKind>().unwrap_err().to_string();
    assert!(
        error.contains("torn-write"),
        "the error lists the names: {error}"
    );
}

#[test]
fn fault_config_display_parses_back() {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let mut configs = vec![
        FaultConfig::none(),
        FaultConfig::all(),
        FaultConfig::only(&[FaultKind::TornWrite, FaultKind::FailedFsync]),
        FaultConfig::none()
            .with(FaultKind::TornWrite, 0.3)
            .with(FaultKind::FailedFsync, 0.02),
    ];
    configs.extend((0..50).map(|_| FaultConfig::swarm(&mut rng)));
    for config in configs {
        let text = config.to_string();
        assert_eq!(text.parse::<FaultConfig>().unwrap(), config, "{text}");
    }
    let example = FaultConfig::none()
        .with(FaultKind::TornWrite, 0.3)
        .with(FaultKind::FailedFsync, 0.02);
    assert_eq!(example.to_string(), "torn-write=0.3,failed-fsync=0.02");
    assert_eq!(FaultConfig::none().to_string(), "none");
    assert_eq!("all".parse::<FaultConfig>().unwrap(), FaultConfig::all());
    assert_eq!(
        "torn-write".parse::<FaultConfig>().unwrap(),
        FaultConfig::only(&[FaultKind::TornWrite])
    );
    for bad in ["torn-write=2", "torn-write=x", "nope=0.1"] {
        assert!(bad.parse::<FaultConfig>().is_err(), "{bad}");
    }
}

#[test]
fn fault_config_queries() {
    let all = FaultConfig::all();
    for &kind in FaultKind::STANDARD {
        assert!(all.is_enabled(kind));
        assert!(all.weight(kind) > 0.0 && all.weight(kind) <= 1.0);
        assert!(!FaultConfig::none().is_enabled(kind));
    }
    let only = FaultConfig::only(&[FaultKind::NoSpace]);
    assert_eq!(only.enabled(), vec![FaultKind::NoSpace]);
    assert_eq!(
        only.clone().with(FaultKind::NoSpace, 0.0),
        FaultConfig::none()
    );
    let vfs = SimVfs::with_faults(1, only.clone());
    assert_eq!(vfs.faults(), only);
    vfs.set_faults(FaultConfig::all());
    assert_eq!(vfs.faults(), FaultConfig::all());
}

#[test]
fn swarm_draws_varied_subsets_deterministically() {
    let draw = |seed| {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..20)
            .map(|_| FaultConfig::swarm(&mut rng))
            .collect::<Vec<_>>()
    };
    assert_eq!(draw(9), draw(9));
    let configs = draw(9);
    let subsets: BTreeSet<Vec<FaultKind>> = configs.iter().map(FaultConfig::enabled).collect();
    assert!(subsets.len() > 15, "swarm should vary the subset");
    for &kind in FaultKind::STANDARD {
        assert!(
            configs.iter().any(|config| config.is_enabled(kind)),
            "{kind} never enabled in 20 draws"
        );
    }
}

// ----- trace -----

/// A short script whose trace is written out below.
fn traced_script(vfs: &SimVfs) {
    vfs.create_dir_all(Path::new("/d")).unwrap();
    let file = open(vfs, "/d/a", OpenMode::CreateNew);
    file.write_at(b"hello", 0).unwrap();
    file.sync_data().unwrap();
    let mut buf = [0u8; 8];
    file.read_at(&mut buf, 0).unwrap();
    vfs.sync_dir(Path::new("/d")).unwrap();
    file.set_len(2).unwrap();
    vfs.list_dir(Path::new("/d")).unwrap();
    vfs.crash();
    let _ = file.write_at(b"x", 2);
    assert!(
        vfs.open(Path::new("/d/missing"), OpenMode::ReadOnly)
            .is_err()
    );
    vfs.remove_file(Path::new("/d/a")).unwrap();
}

#[test]
fn trace_reads_as_the_operations_did() {
    let vfs = SimVfs::new(0);
    traced_script(&vfs);
    let lines: Vec<String> = vfs.trace().iter().map(ToString::to_string).collect();
    let expected = [
        "create_dir /d",
        "create /d/a",
        "write /d/a @0 +5",
        "sync_data /d/a",
        "read /d/a @0 +5",
        "sync_dir /d",
        "set_len /d/a +2",
        "list_dir /d +1",
        "crash",
        "reboot",
        "write /d/a @2 +1 ERR",
        "open /d/missing ERR",
        "remove /d/a",
    ];
    assert_eq!(lines, expected);
}

#[test]
fn trace_digest_ignores_recording_and_clearing() {
    let recorded = SimVfs::new(0);
    traced_script(&recorded);
    let unrecorded = SimVfs::new(0);
    unrecorded.set_trace_recording(false);
    traced_script(&unrecorded);
    assert!(unrecorded.trace().is_empty());
    assert_eq!(recorded.trace_digest(), unrecorded.trace_digest());
    let digest = recorded.trace_digest();
    recorded.clear_trace();
    assert!(recorded.trace().is_empty());
    assert_eq!(recorded.trace_digest(), digest);
    // Any further event moves the digest.
    recorded.list_dir(Path::new("/")).unwrap();
    assert_ne!(recorded.trace_digest(), digest);
}

#[test]
fn injected_faults_are_traced_and_counted() {
    let vfs = SimVfs::with_faults(1, only(FaultKind::NoSpace, 1.0));
    vfs.put_durable_file(Path::new("/f"), b"");
    let file = open(&vfs, "/f", OpenMode::ReadWrite);
    assert!(file.write_at(b"abc", 0).is_err());
    let kinds: Vec<TraceKind> = vfs.trace().iter().map(|event| event.kind).collect();
    assert_eq!(
        kinds,
        [
            TraceKind::Open,
            TraceKind::Fault(FaultKind::NoSpace),
            TraceKind::Write
        ]
    );
    assert_eq!(vfs.fault_counts().get(&FaultKind::NoSpace), Some(&1));
    assert_eq!(injected_fault(&io::Error::other("plain")), None);
}

#[test]
fn sim_vfs_is_a_cheap_shared_handle() {
    fn assert_traits<T: Clone + Send + Sync + 'static>() {}
    assert_traits::<SimVfs>();
    let vfs = SimVfs::new(0);
    let clone = vfs.clone();
    vfs.put_durable_file(Path::new("/x"), b"1");
    assert_eq!(clone.files(), vec![Path::new("/x").to_path_buf()]);
    // Usable as a trait object from another thread.
    let shared: std::sync::Arc<dyn Vfs> = std::sync::Arc::new(clone);
    std::thread::spawn(move || shared.list_dir(Path::new("/")).unwrap())
        .join()
        .unwrap();
}

#[test]
fn read_error_fails_reads_and_opens_and_changes_nothing() {
    let vfs = SimVfs::new(3);
    vfs.create_dir_all(Path::new("/d")).unwrap();
    let file = vfs.open(Path::new("/d/f"), OpenMode::CreateNew).unwrap();
    file.write_at(b"durable bytes", 0).unwrap();
    file.sync_data().unwrap();
    vfs.set_faults(FaultConfig::none().with(FaultKind::ReadError, 1.0));
    let mut buf = [0u8; 13];
    let error = file.read_at(&mut buf, 0).unwrap_err();
    assert_eq!(injected_fault(&error), Some(FaultKind::ReadError));
    let error = vfs.open(Path::new("/d/f"), OpenMode::ReadOnly).unwrap_err();
    assert_eq!(injected_fault(&error), Some(FaultKind::ReadError));
    // A missing file is still missing, and a create is no read.
    let missing = vfs.open(Path::new("/d/g"), OpenMode::ReadOnly).unwrap_err();
    assert_eq!(missing.kind(), std::io::ErrorKind::NotFound);
    assert!(vfs.open(Path::new("/d/h"), OpenMode::CreateNew).is_ok());
    assert_eq!(vfs.fault_counts().get(&FaultKind::ReadError), Some(&2));
    assert!(vfs.damage().is_empty(), "a read error damages nothing");
    vfs.set_faults(FaultConfig::none());
    file.read_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"durable bytes");
}

#[test]
fn read_error_is_opt_in_and_leaves_the_standard_draws_alone() {
    assert!(!FaultConfig::all().is_enabled(FaultKind::ReadError));
    let mut opted_in = 0;
    for seed in 0..64 {
        let mut standard = ChaCha8Rng::seed_from_u64(seed);
        let mut opt_in = ChaCha8Rng::seed_from_u64(seed);
        let swarm = FaultConfig::swarm(&mut standard);
        let with = FaultConfig::swarm_opt_in(&mut opt_in);
        assert!(!swarm.is_enabled(FaultKind::ReadError), "seed {seed}");
        let standard_only =
            (FaultKind::OPT_IN.iter()).fold(with.clone(), |config, &kind| config.with(kind, 0.0));
        assert_eq!(standard_only, swarm, "seed {seed}");
        opted_in += usize::from(with.is_enabled(FaultKind::ReadError));
    }
    assert!(opted_in > 10 && opted_in < 54, "{opted_in} of 64 opted in");
}

#[test]
fn duplicated_write_lands_again_right_after_itself_over_zeros_once() {
    for_each_seed(0..32, |seed| {
        let vfs = SimVfs::with_faults(seed, only(FaultKind::DuplicatedWrite, 1.0));
        // No room after the first write (past the end), then a preallocated
        // tail of zeros, with a non-zero byte at its far end.
        let file = open(&vfs, "/f", OpenMode::CreateNew);
        file.write_at(b"head", 0).unwrap();
        assert!(vfs.duplicated_writes().is_empty(), "no zeros after the end");
        file.set_len(64).unwrap();
        file.write_at(&[7], 63).unwrap();
        file.write_at(b"first", 4).unwrap();
        let copied = contents(&vfs, "/f");
        assert_eq!(
            &copied[..14],
            b"headfirstfirst",
            "the copy right after itself"
        );
        file.write_at(b"second", 9).unwrap();
        file.sync_all().unwrap();
        let after = contents(&vfs, "/f");
        assert_eq!(&after[..15], b"headfirstsecond");
        assert!(after[15..63].iter().all(|&byte| byte == 0), "once only");
        assert_eq!(after[63], 7);
        let copies = vfs.duplicated_writes();
        assert_eq!(copies.len(), 1, "{copies:?}");
        assert_eq!(copies[0].path, Path::new("/f"));
        assert_eq!((copies[0].offset, copies[0].len), (9, 5));
        assert_eq!(copies[0].intended_offset, Some(4));
        assert!(vfs.damage().is_empty(), "over zeros: nothing is damaged");
        assert_eq!(vfs.fault_counts()[&FaultKind::DuplicatedWrite], 1);
    });
}

#[test]
fn duplicated_write_never_covers_bytes_that_are_not_zeros() {
    let vfs = SimVfs::with_faults(3, only(FaultKind::DuplicatedWrite, 1.0));
    vfs.put_durable_file(Path::new("/f"), &[1; 32]);
    let file = open(&vfs, "/f", OpenMode::ReadWrite);
    file.write_at(&[2; 8], 0).unwrap();
    file.write_at(&[3; 8], 8).unwrap();
    assert_eq!(contents(&vfs, "/f")[16..], [1; 16]);
    assert!(vfs.duplicated_writes().is_empty());
    assert!(!FaultConfig::all().is_enabled(FaultKind::DuplicatedWrite));
}

/// `with_dir_contents` lends what `list_dir` lists, in its order, each
/// file with the bytes reads return now (unsynced ones too), a directory
/// as `None`, and answers `None` for a directory that is not there.
#[test]
fn dir_contents_are_what_listing_and_reads_see() {
    let vfs = SimVfs::with_faults(1, FaultConfig::none());
    vfs.put_durable_file(Path::new("/d/b"), b"durable");
    vfs.put_durable_file(Path::new("/d/sub/inner"), b"x");
    let file = open(&vfs, "/d/a", OpenMode::CreateNew);
    file.write_at(b"cached only", 0).unwrap();
    let seen = vfs
        .with_dir_contents(Path::new("/d"), |entries| {
            (entries.iter())
                .map(|(name, bytes)| (name.to_string(), bytes.map(<[u8]>::to_vec)))
                .collect::<Vec<_>>()
        })
        .expect("/d is a directory");
    let listed: Vec<String> = (vfs.list_dir(Path::new("/d")).unwrap().into_iter())
        .map(|entry| entry.name)
        .collect();
    assert_eq!(
        seen.iter()
            .map(|(name, _)| name.clone())
            .collect::<Vec<_>>(),
        listed
    );
    assert_eq!(
        seen,
        [
            ("a".to_string(), Some(b"cached only".to_vec())),
            ("b".to_string(), Some(contents(&vfs, "/d/b"))),
            ("sub".to_string(), None),
        ]
    );
    assert!(
        vfs.with_dir_contents(Path::new("/nowhere"), |_| ())
            .is_none()
    );
}
