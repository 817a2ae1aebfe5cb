//! Helpers shared by the store's unit tests.

use super::model::Slice;
use super::{keys, log, Config, Event, Store, TimeRange, WriteBatch};
use crate::gen::wallet_address;
use std::path::PathBuf;

/// Two stores' versions of one set (`which` names it in failures) are both absent, or hold the
/// same events, Bloom filter, HLL, Theta and Count-Min and have seen as many events for their
/// reservoirs.
pub(crate) fn assert_same_set(
    which: &str,
    x: Option<crate::sketch::SketchSet<super::model::Sample>>,
    y: Option<crate::sketch::SketchSet<super::model::Sample>>,
) {
    match (x, y) {
        (None, None) => {}
        (Some(x), Some(y)) => {
            assert_eq!(x.events, y.events, "{which}: events");
            assert!(x.bloom == y.bloom, "{which}: bloom");
            assert!(x.hll == y.hll, "{which}: hll");
            assert!(x.theta == y.theta, "{which}: theta");
            assert!(x.cms == y.cms, "{which}: count-min");
            assert_eq!(x.reservoir.seen(), y.reservoir.seen(), "{which}: reservoir");
        }
        (x, y) => panic!("{which}: {} and {}", x.is_some(), y.is_some()),
    }
}

pub(crate) fn tempdir(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("sketchdb-store-unit-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

pub(crate) fn config() -> Config {
    Config {
        sketches: crate::sketch::SketchConfig {
            bloom_capacity: 20_000,
            reservoir_size: 50,
            ..crate::sketch::SketchConfig::default()
        },
        ..Config::default()
    }
}

/// `n` events from `first` on one day, alternating chains.
pub(crate) fn events(first: u64, n: u64) -> Vec<Event> {
    (first..first + n)
        .map(|i| {
            let chain = if i % 2 == 0 { "a" } else { "b" };
            Event::new(
                1_764_547_200_000 + i as i64,
                wallet_address(9, i),
                &[("chain", chain)],
            )
        })
        .collect()
}

/// The first sequence numbers of the blocks written (indexed, or written early and waiting
/// for their index entries) and of the blocks indexed.
pub(crate) fn block_keys(store: &Store) -> (Vec<u64>, Vec<u64>) {
    let seqs = |prefix: u8| -> Vec<u64> {
        entries(store, &[prefix])
            .into_iter()
            .map(|(k, _)| keys::seq_of(&k).expect("a seq"))
            .collect()
    };
    let indexed = seqs(keys::INDEX);
    let mut written = indexed.clone();
    written.extend(seqs(keys::LOG));
    written.extend(
        store
            .lock()
            .expect("lock")
            .unindexed
            .iter()
            .map(|i| i.first_seq),
    );
    written.sort_unstable();
    written.dedup();
    (written, indexed)
}

/// The index entries of the log, in order.
pub(crate) fn indexed_blocks(store: &Store) -> Vec<log::BlockInfo> {
    store.log_blocks().expect("index")
}

/// The log files with their lengths.
pub(crate) fn log_files(store: &Store) -> Vec<(String, u64)> {
    store.engine.file_list().expect("list")
}

/// Damages the indexed block starting at event `first` in its log file, behind the store's
/// back: `f` gets the block's bytes and changes them in place (their length stays, as a torn or
/// rotten sector leaves it).
pub(crate) fn damage_block(store: &Store, first: u64, f: impl FnOnce(&mut [u8])) {
    use std::io::{Seek, SeekFrom, Write};
    let info = indexed_blocks(store)
        .into_iter()
        .find(|b| b.first_seq == first)
        .expect("an indexed block");
    let place = info.place.expect("in a log file");
    let name = log::file_name(place.file);
    let mut bytes = store
        .engine
        .file_read(&name, place.offset, place.len as usize)
        .expect("read")
        .expect("there");
    f(&mut bytes);
    let path = store.path.join("log").join(&name);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open the log file");
    file.seek(SeekFrom::Start(place.offset)).expect("seek");
    file.write_all(&bytes).expect("write");
    file.sync_all().expect("sync");
}

/// Every entry under `prefix`, read through the store's engine.
pub(crate) fn entries(store: &Store, prefix: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    store
        .engine
        .prefix(prefix)
        .collect::<Result<_, _>>()
        .expect("scan")
}

/// Writes (`Some`) or removes (`None`) one key behind the store's back, and syncs.
pub(crate) fn poke(store: &Store, key: &[u8], value: Option<Vec<u8>>) {
    let mut batch = WriteBatch::default();
    match value {
        Some(v) => store.engine.put(&mut batch, key.to_vec(), v).expect("put"),
        None => store
            .engine
            .delete(&mut batch, key.to_vec())
            .expect("delete"),
    }
    store.engine.apply(batch).expect("apply");
    store.engine.sync().expect("sync");
}

pub(crate) fn logged_events(store: &Store) -> usize {
    store
        .events(&Slice::Whole, &TimeRange::all())
        .expect("scan")
        .len()
}

/// Records the store at `dir` as a format-`version` store behind its back, closes it, opens it
/// again, and checks that opening recorded it in this build's format.
pub(crate) fn reopened_from_format(store: Store, dir: &std::path::Path, version: u32) -> Store {
    poke(
        &store,
        &keys::meta("format"),
        Some(Store::blob(dir, &version).expect("blob")),
    );
    drop(store);
    let store = Store::open(dir).unwrap_or_else(|e| panic!("a format-{version} store opens: {e}"));
    let format: Option<u32> = Store::read_meta(&store.engine, "format").expect("read");
    assert_eq!(format, Some(super::FORMAT_VERSION));
    store
}
