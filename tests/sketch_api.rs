//! The sketch library driven through its public API, as a service embedding it would: hash an
//! event's item once, route it to a whole-stream set and a tag's set, persist, reload, merge, and
//! ask every family its question.

use sketchdb::gen::wallet_address;
use sketchdb::hash::{murmur, ShaWords};
use sketchdb::sketch::{
    BloomFilter, CountMin, HeapSize, HyperLogLog, Reservoir, ScalableBloom, Sketch, SketchConfig,
    SketchError, SketchKind, SketchSet, Theta,
};
use sketchdb::Item;

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Tx {
    time: i64,
    wallet: String,
    chain: String,
}

/// What a reservoir of these holds besides the slots: a service tells the sketches its events'
/// heap bytes, so a set's reported size is what it holds.
impl HeapSize for Tx {
    fn heap_bytes(&self) -> usize {
        self.wallet.capacity() + self.chain.capacity()
    }
}

fn config() -> SketchConfig {
    SketchConfig {
        bloom_capacity: 50_000,
        reservoir_size: 100,
        ..SketchConfig::default()
    }
}

#[test]
fn two_chains_through_sketch_sets() {
    let mut whole: SketchSet<Tx> = SketchSet::with_seed(&config(), 1).expect("set");
    let mut chain_a: SketchSet<Tx> = SketchSet::with_seed(&config(), 2).expect("set");
    let mut chain_b: SketchSet<Tx> = SketchSet::with_seed(&config(), 3).expect("set");
    // 20,000 wallets on chain a, 20,000 on chain b, 1,000 of them on both; wallet 0 is loud.
    let mut events = 0u64;
    for i in 0..39_000u64 {
        let on_a = i < 20_000;
        let on_b = i >= 19_000;
        let wallet = wallet_address(1, i);
        let item = Item::new(wallet.as_bytes());
        let repeats = if i == 0 { 5_000 } else { 1 };
        for r in 0..repeats {
            for (chain, set, yes) in [("a", &mut chain_a, on_a), ("b", &mut chain_b, on_b)] {
                if yes {
                    let tx = || Tx {
                        time: (i * 10 + r) as i64,
                        wallet: wallet.clone(),
                        chain: chain.into(),
                    };
                    whole.update(&item, tx);
                    set.update(&item, tx);
                    events += 1;
                }
            }
        }
    }
    assert_eq!(whole.events, events);
    assert_eq!(chain_a.events + chain_b.events, events);

    // Persist and reload, as the store will.
    let blobs: Vec<Vec<u8>> = [&whole, &chain_a, &chain_b]
        .iter()
        .map(|s| s.encode().expect("encode"))
        .collect();
    let whole = SketchSet::<Tx>::decode(&blobs[0]).expect("decode");
    let chain_a = SketchSet::<Tx>::decode(&blobs[1]).expect("decode");
    let chain_b = SketchSet::<Tx>::decode(&blobs[2]).expect("decode");

    // How many distinct wallets? (HLL; true 39,000.) One sketch: within 4 of its standard
    // errors at that count (0.65%), which a correct sketch leaves with probability 6e-5; the
    // interval's calibration over many sketches is the unit tests' job.
    let d = whole.hll.estimate();
    let rse = whole.hll.relative_standard_error_at(39_000.0);
    assert!(
        (d.value / 39_000.0 - 1.0).abs() < 4.0 * rse,
        "{d:?} (RSE {rse})"
    );
    assert!(d.lower < d.value && d.value < d.upper, "{d:?}");
    // How many on both chains? (Theta intersection: each chain has 20,000 distinct, past the
    // 6,144 a sketch holds exactly, so θ < 1 and the answer is an estimate, retaining about
    // 1,000·θ ≈ 250 hashes: relative standard error about 6%.) Within 4 of the standard errors
    // its own interval states (half-width / 1.96 on the truth's side): probability 6e-5.
    let both = Theta::intersection([&chain_a.theta, &chain_b.theta]).expect("two");
    let est = both.estimate();
    assert!(!est.exact);
    let half = if est.value < 1_000.0 {
        est.upper - est.value
    } else {
        est.value - est.lower
    };
    assert!(
        (est.value - 1_000.0).abs() <= 4.0 * half / 1.959_964,
        "{est:?}"
    );
    // Have we seen wallet X? (Bloom: never a false negative)
    for i in (0..39_000).step_by(97) {
        assert!(whole
            .bloom
            .contains(&ShaWords::of(wallet_address(1, i).as_bytes())));
    }
    // How often does the loud wallet transact, and is it the top talker?
    let count = whole.cms.count(wallet_address(1, 0).as_bytes());
    assert!((5_000..=5_000 + whole.cms.error_bound() as u64).contains(&count));
    let top = whole.cms.top(3);
    assert_eq!(top[0].item, wallet_address(1, 0).into_bytes());
    // Give me some transactions. (reservoir: 100 of them, all real)
    assert_eq!(whole.reservoir.items().len(), 100);
    assert!(whole
        .reservoir
        .items()
        .iter()
        .all(|t| t.chain == "a" || t.chain == "b"));

    // Merging the chains' sets gives the whole stream's answers.
    let mut merged = chain_a.clone();
    merged.merge(&chain_b).expect("merge");
    assert_eq!(merged.events, whole.events);
    assert_eq!(merged.hll, whole.hll);
}

#[test]
fn damaged_blobs_name_their_kind_and_never_decode() {
    let mut h = HyperLogLog::new(14).expect("p");
    for i in 0..10_000 {
        h.update_murmur(murmur(wallet_address(2, i).as_bytes()));
    }
    let mut blob = h.encode().expect("encode");
    let middle = blob.len() / 2;
    blob[middle] ^= 0xff;
    let err = HyperLogLog::decode(&blob).expect_err("damaged");
    assert!(matches!(
        err,
        SketchError::Codec {
            kind: SketchKind::HyperLogLog,
            ..
        }
    ));
    assert!(err.to_string().contains("hll"), "{err}");
    // A blob of another family is refused, not misread.
    let bloom = BloomFilter::new(100, 0.01)
        .expect("size")
        .encode()
        .expect("encode");
    assert!(Theta::decode(&bloom).is_err());
    assert!(CountMin::decode(&bloom).is_err());
    assert!(Reservoir::<u64>::decode(&bloom).is_err());
    assert!(ScalableBloom::decode(&bloom).is_err());
    assert!(HyperLogLog::decode(&[]).is_err());
}
