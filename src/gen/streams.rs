//! The three synthetic streams of the reference text, their options and their ground truth.
//!
//! At scale 1 (the reference's figures):
//! - `stream-a`: 500 bot wallets send 1,800 transactions each (900,000) and 100,000 one-time
//!   wallets send 1 each; 1,000,000 events, 100,500 distinct wallets, chain `main`.
//! - `stream-b`: 20,000 wallets send 50 transactions each; 1,000,000 events, chain `main`.
//! - `two-chains`: 5,000,000 wallets on chain `a` and 5,000,000 on chain `b`, exactly 10,000 on
//!   both; each wallet sends one transaction on each chain it is on: 10,000,000 events,
//!   9,990,000 distinct wallets.
//!
//! `scale` shrinks the number of *wallets* of each group (rounded to nearest, at least 1) and
//! keeps the transactions per wallet (1,800 per bot, 1 per one-time wallet, 50 per stream-b
//! wallet, 1 per wallet and chain), so a scaled stream has the same shape: stream-a stays 90%
//! bot traffic with about 100,500·s distinct wallets, two-chains keeps its 0.2% overlap.
//!
//! Event order: times are spread evenly over the UTC day and never decrease (a stream arrives
//! in time order); what is shuffled is which wallet sends the event at each position.

use super::{splitmix64, wallet_address, wallet_address_bytes, GenError, SplitMix64};
use chrono::{NaiveDate, NaiveTime};
use serde::Serialize;
use std::fmt;
use std::str::FromStr;

/// Milliseconds in a day.
const DAY_MS: u64 = 86_400_000;

/// Which synthetic stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StreamKind {
    /// 500 bots × 1,800 transactions and 100,000 one-time wallets (the sampling trap).
    StreamA,
    /// 20,000 wallets × 50 transactions.
    StreamB,
    /// 5,000,000 wallets on each of chains `a` and `b`, 10,000 on both (the intersection trap).
    TwoChains,
}

impl StreamKind {
    /// All three, in CLI order.
    pub const ALL: [StreamKind; 3] = [
        StreamKind::StreamA,
        StreamKind::StreamB,
        StreamKind::TwoChains,
    ];

    /// The CLI name: `stream-a`, `stream-b` or `two-chains`.
    pub fn name(self) -> &'static str {
        match self {
            StreamKind::StreamA => "stream-a",
            StreamKind::StreamB => "stream-b",
            StreamKind::TwoChains => "two-chains",
        }
    }

    /// Mixed into the seed so the three streams shuffle independently for one seed.
    fn salt(self) -> u64 {
        match self {
            StreamKind::StreamA => 0x5354_5245_414d_2d41,
            StreamKind::StreamB => 0x5354_5245_414d_2d42,
            StreamKind::TwoChains => 0x5457_4f2d_4348_4e53,
        }
    }
}

impl fmt::Display for StreamKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for StreamKind {
    type Err = GenError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        StreamKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| GenError::UnknownStream(s.to_string()))
    }
}

/// How to generate a stream.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GenOptions {
    /// Seeds the shuffle and the time jitter; the same seed gives byte-identical output.
    pub seed: u64,
    /// The UTC day the event times spread over.
    pub date: NaiveDate,
    /// In (0, 1]: the fraction of each group's wallets kept (see the module doc).
    pub scale: f64,
}

impl Default for GenOptions {
    /// Seed 42, 2026-12-01, full scale.
    fn default() -> Self {
        GenOptions {
            seed: 42,
            date: NaiveDate::from_ymd_opt(2026, 12, 1).unwrap_or(NaiveDate::MIN),
            scale: 1.0,
        }
    }
}

impl GenOptions {
    /// Checks the scale is in (0, 1] and the date's year has four digits.
    pub fn validate(&self) -> Result<(), GenError> {
        // Written so that NaN fails too.
        if !(self.scale > 0.0 && self.scale <= 1.0) {
            return Err(GenError::BadScale(self.scale));
        }
        if !(0..=9999).contains(&chrono::Datelike::year(&self.date)) {
            return Err(GenError::BadDate(self.date));
        }
        Ok(())
    }

    /// `count` scaled, rounded to nearest, at least 1.
    fn scaled(&self, count: u64) -> u64 {
        ((count as f64 * self.scale).round() as u64).max(1)
    }

    /// Unix milliseconds of the date's midnight UTC.
    pub fn day_start_ms(&self) -> i64 {
        self.date
            .and_time(NaiveTime::MIN)
            .and_utc()
            .timestamp_millis()
    }
}

// `wallet_address` stream ids: one per group, so no address is shared between groups or
// streams (two-chains' overlap wallets are one index in one group, hence one address).
const STREAM_A_BOTS: u64 = 0x00a0_b075;
const STREAM_A_USERS: u64 = 0x00a0_0005;
const STREAM_B_WALLETS: u64 = 0x00b0_0005;
const TWO_CHAINS_WALLETS: u64 = 0x0002_c4a1;

/// A wallet of a synthetic stream: formatted into its address only when asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Wallet {
    /// The `wallet_address` stream id of its group.
    pub stream: u64,
    /// Its index in the group.
    pub index: u64,
}

impl Wallet {
    /// `0x` and 40 lower-case hex digits.
    pub fn address(&self) -> String {
        wallet_address(self.stream, self.index)
    }

    /// The address as ASCII bytes, without allocating.
    pub fn address_bytes(&self) -> [u8; 42] {
        wallet_address_bytes(self.stream, self.index)
    }
}

impl fmt::Display for Wallet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bytes = self.address_bytes();
        // The bytes are ASCII hex, so this never fails.
        f.write_str(std::str::from_utf8(&bytes).map_err(|_| fmt::Error)?)
    }
}

/// One synthetic transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GenEvent {
    /// Unix milliseconds, inside the options' day.
    pub time_ms: i64,
    /// The sender.
    pub wallet: Wallet,
    /// `main` (stream-a, stream-b) or `a` / `b` (two-chains).
    pub chain: &'static str,
    /// `bot` or `user` (stream-a); `user` otherwise. An extra field, neither item nor tag.
    pub kind: &'static str,
}

/// The wallet counts of a stream at a scale.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    /// Chain `main`: `bots` wallets × `per_bot` events, then `users` × `per_user`.
    /// Event slot values are wallet indices: `< bots` a bot, else user `slot - bots`.
    Main {
        bots: u64,
        per_bot: u64,
        users: u64,
        per_user: u64,
        bot_stream: u64,
        user_stream: u64,
    },
    /// `per_chain` wallets on each chain, the first `overlap` on both. Slot `s < per_chain` is
    /// wallet `s` on chain `a`; slot `per_chain + j` is chain `b`, wallet `j` if `j < overlap`
    /// (shared), else wallet `per_chain + j - overlap` (chain `b` only).
    TwoChains { per_chain: u64, overlap: u64 },
}

impl Layout {
    fn new(kind: StreamKind, opts: &GenOptions) -> Layout {
        match kind {
            StreamKind::StreamA => Layout::Main {
                bots: opts.scaled(500),
                per_bot: 1_800,
                users: opts.scaled(100_000),
                per_user: 1,
                bot_stream: STREAM_A_BOTS,
                user_stream: STREAM_A_USERS,
            },
            StreamKind::StreamB => Layout::Main {
                bots: 0,
                per_bot: 0,
                users: opts.scaled(20_000),
                per_user: 50,
                bot_stream: STREAM_A_BOTS, // unused: stream-b has no bots
                user_stream: STREAM_B_WALLETS,
            },
            StreamKind::TwoChains => {
                let per_chain = opts.scaled(5_000_000);
                Layout::TwoChains {
                    per_chain,
                    overlap: opts.scaled(10_000).min(per_chain),
                }
            }
        }
    }

    fn events(&self) -> u64 {
        match *self {
            Layout::Main {
                bots,
                per_bot,
                users,
                per_user,
                ..
            } => bots * per_bot + users * per_user,
            Layout::TwoChains { per_chain, .. } => 2 * per_chain,
        }
    }

    /// The unshuffled slots: every event's slot value once.
    fn slots(&self) -> Vec<u32> {
        let mut v = Vec::with_capacity(self.events() as usize);
        match *self {
            Layout::Main {
                bots,
                per_bot,
                users,
                per_user,
                ..
            } => {
                for w in 0..bots {
                    v.extend(std::iter::repeat_n(w as u32, per_bot as usize));
                }
                for w in bots..bots + users {
                    v.extend(std::iter::repeat_n(w as u32, per_user as usize));
                }
            }
            Layout::TwoChains { per_chain, .. } => v.extend(0..(2 * per_chain) as u32),
        }
        v
    }

    /// `(wallet, chain, kind)` of a slot value.
    fn decode(&self, slot: u32) -> (Wallet, &'static str, &'static str) {
        let s = u64::from(slot);
        match *self {
            Layout::Main {
                bots,
                bot_stream,
                user_stream,
                ..
            } => {
                if s < bots {
                    (
                        Wallet {
                            stream: bot_stream,
                            index: s,
                        },
                        "main",
                        "bot",
                    )
                } else {
                    let index = s - bots;
                    (
                        Wallet {
                            stream: user_stream,
                            index,
                        },
                        "main",
                        "user",
                    )
                }
            }
            Layout::TwoChains { per_chain, overlap } => {
                let (index, chain) = if s < per_chain {
                    (s, "a")
                } else {
                    let j = s - per_chain;
                    (
                        if j < overlap {
                            j
                        } else {
                            per_chain + j - overlap
                        },
                        "b",
                    )
                };
                (
                    Wallet {
                        stream: TWO_CHAINS_WALLETS,
                        index,
                    },
                    chain,
                    "user",
                )
            }
        }
    }
}

/// The events of a stream, in output (time) order. Holds one `u32` per event (the shuffled
/// slots, 40 MB for two-chains at scale 1) and formats nothing until asked.
#[derive(Clone, Debug)]
pub struct Events {
    layout: Layout,
    slots: Vec<u32>,
    pos: usize,
    day_start: i64,
    jitter_key: u64,
}

impl Events {
    /// The time of event `i` of `n`: its evenly spaced slot `floor(i·D/n)` plus a jitter below
    /// the gap to the next slot, so times never decrease and the last stays inside the day.
    fn time_of(&self, i: usize) -> i64 {
        let n = self.slots.len() as u64;
        let i = i as u64;
        let t0 = i * DAY_MS / n;
        let t1 = (i + 1) * DAY_MS / n;
        let jitter = if t1 > t0 {
            splitmix64(self.jitter_key ^ i) % (t1 - t0)
        } else {
            0
        };
        self.day_start + (t0 + jitter) as i64
    }
}

impl Iterator for Events {
    type Item = GenEvent;

    fn next(&mut self) -> Option<GenEvent> {
        let slot = *self.slots.get(self.pos)?;
        let time_ms = self.time_of(self.pos);
        self.pos += 1;
        let (wallet, chain, kind) = self.layout.decode(slot);
        Some(GenEvent {
            time_ms,
            wallet,
            chain,
            kind,
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.slots.len() - self.pos;
        (left, Some(left))
    }
}

impl ExactSizeIterator for Events {}

/// The events of `kind` under `opts`, shuffled by `opts.seed`, times non-decreasing.
pub fn events(kind: StreamKind, opts: &GenOptions) -> Result<Events, GenError> {
    opts.validate()?;
    let layout = Layout::new(kind, opts);
    let mut slots = layout.slots();
    let key = splitmix64(opts.seed ^ kind.salt());
    SplitMix64::new(key).shuffle(&mut slots);
    Ok(Events {
        layout,
        slots,
        pos: 0,
        day_start: opts.day_start_ms(),
        jitter_key: splitmix64(key ^ 0x6a69_7474_6572),
    })
}

/// Ground truth for one chain.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ChainTruth {
    pub chain: &'static str,
    pub events: u64,
    pub distinct_wallets: u64,
}

/// What a stream contains, known by construction (the "true value" next to an estimate).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Truth {
    pub stream: &'static str,
    pub events: u64,
    pub distinct_wallets: u64,
    /// One entry per chain, in name order.
    pub chains: Vec<ChainTruth>,
    /// Wallets on both `a` and `b` (two-chains); `None` for single-chain streams.
    pub on_both_chains: Option<u64>,
    /// Wallets of kind `bot`, their events, and the events each sends (0 when there are none).
    pub bots: u64,
    pub bot_events: u64,
    pub events_per_bot: u64,
    /// Wallets of kind `user` and their events.
    pub users: u64,
    pub user_events: u64,
    /// Events each user sends, when it is the same for all (two-chains: 2 for the overlap,
    /// 1 for the rest, so `None`).
    pub events_per_user: Option<u64>,
}

impl Truth {
    /// The share of events sent by bots (0.9 for stream-a at any scale that keeps the ratio).
    pub fn bot_share(&self) -> f64 {
        self.bot_events as f64 / self.events as f64
    }
}

/// The ground truth of `kind` under `opts`. Errors as [`events`] does on bad options, so a
/// truth is never printed for a stream that cannot be generated.
pub fn truth(kind: StreamKind, opts: &GenOptions) -> Result<Truth, GenError> {
    opts.validate()?;
    let layout = Layout::new(kind, opts);
    let events = layout.events();
    Ok(match layout {
        Layout::Main {
            bots,
            per_bot,
            users,
            per_user,
            ..
        } => Truth {
            stream: kind.name(),
            events,
            distinct_wallets: bots + users,
            chains: vec![ChainTruth {
                chain: "main",
                events,
                distinct_wallets: bots + users,
            }],
            on_both_chains: None,
            bots,
            bot_events: bots * per_bot,
            events_per_bot: per_bot,
            users,
            user_events: users * per_user,
            events_per_user: Some(per_user),
        },
        Layout::TwoChains { per_chain, overlap } => Truth {
            stream: kind.name(),
            events,
            distinct_wallets: 2 * per_chain - overlap,
            chains: ["a", "b"]
                .into_iter()
                .map(|chain| ChainTruth {
                    chain,
                    events: per_chain,
                    distinct_wallets: per_chain,
                })
                .collect(),
            on_both_chains: Some(overlap),
            bots: 0,
            bot_events: 0,
            events_per_bot: 0,
            users: 2 * per_chain - overlap,
            user_events: events,
            events_per_user: None,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn at(scale: f64) -> GenOptions {
        GenOptions {
            scale,
            ..GenOptions::default()
        }
    }

    #[test]
    fn names_round_trip_and_a_bad_name_lists_the_three() {
        for k in StreamKind::ALL {
            assert_eq!(k.to_string().parse::<StreamKind>().ok(), Some(k));
        }
        let msg = match "stream-c".parse::<StreamKind>() {
            Err(e) => e.to_string(),
            Ok(k) => panic!("parsed {k}"),
        };
        for name in ["stream-c", "stream-a", "stream-b", "two-chains"] {
            assert!(msg.contains(name), "{msg}");
        }
    }

    #[test]
    fn defaults_and_scale_validation() {
        let d = GenOptions::default();
        assert_eq!((d.seed, d.scale), (42, 1.0));
        assert_eq!(d.date.to_string(), "2026-12-01");
        assert_eq!(d.day_start_ms(), 1_796_083_200_000);
        for bad in [0.0, -0.5, 1.0001, 2.0, f64::NAN, f64::INFINITY] {
            let e = at(bad).validate().expect_err("bad scale accepted");
            assert!(e.to_string().contains("(0, 1]"), "{e}");
            assert!(events(StreamKind::StreamB, &at(bad)).is_err());
            assert!(truth(StreamKind::StreamB, &at(bad)).is_err());
        }
        // Tiny but positive: every group keeps one wallet.
        let t = truth(StreamKind::StreamA, &at(1e-9)).expect("valid");
        assert_eq!((t.bots, t.users, t.events), (1, 1, 1_801));
        let far = GenOptions {
            date: NaiveDate::from_ymd_opt(12_000, 1, 1).expect("date"),
            ..GenOptions::default()
        };
        assert!(matches!(far.validate(), Err(GenError::BadDate(_))));
    }

    #[test]
    fn scale_keeps_per_wallet_counts_and_shrinks_wallets() {
        let t = truth(StreamKind::TwoChains, &at(0.01)).expect("valid");
        assert_eq!(t.chains[0].distinct_wallets, 50_000);
        assert_eq!(t.chains[1].distinct_wallets, 50_000);
        assert_eq!(t.on_both_chains, Some(100));
        assert_eq!((t.events, t.distinct_wallets), (100_000, 99_900));

        let t = truth(StreamKind::StreamA, &at(0.1)).expect("valid");
        assert_eq!(
            (t.bots, t.events_per_bot, t.bot_events),
            (50, 1_800, 90_000)
        );
        assert_eq!(
            (t.users, t.events_per_user, t.user_events),
            (10_000, Some(1), 10_000)
        );
        assert_eq!((t.events, t.distinct_wallets), (100_000, 10_050));
        assert_eq!(t.bot_share(), 0.9);

        let t = truth(StreamKind::StreamB, &at(0.01)).expect("valid");
        assert_eq!(
            (t.users, t.events_per_user, t.events),
            (200, Some(50), 10_000)
        );

        // Round to nearest: 500 · 0.003 = 1.5 → 2; 20,000 · 0.00001 = 0.2 → at least 1.
        assert_eq!(
            truth(StreamKind::StreamA, &at(0.003)).expect("valid").bots,
            2
        );
        assert_eq!(
            truth(StreamKind::StreamB, &at(0.00001))
                .expect("valid")
                .users,
            1
        );
    }

    /// Counts every `(group, index)` of a single-chain stream and checks them against the
    /// truth and the spec's per-wallet counts.
    fn check_main_counts(kind: StreamKind, opts: &GenOptions) -> Truth {
        let t = truth(kind, opts).expect("valid");
        let mut bots = vec![0u32; t.bots as usize];
        let mut users = vec![0u32; t.users as usize];
        let mut n = 0u64;
        for e in events(kind, opts).expect("valid") {
            assert_eq!(e.chain, "main");
            match e.kind {
                "bot" => bots[e.wallet.index as usize] += 1,
                "user" => users[e.wallet.index as usize] += 1,
                other => panic!("kind {other}"),
            }
            n += 1;
        }
        assert_eq!(n, t.events);
        assert!(bots.iter().all(|&c| u64::from(c) == t.events_per_bot));
        assert!(users
            .iter()
            .all(|&c| Some(u64::from(c)) == t.events_per_user));
        t
    }

    #[test]
    fn stream_a_and_b_counts_at_full_scale() {
        let t = check_main_counts(StreamKind::StreamA, &at(1.0));
        assert_eq!((t.events, t.distinct_wallets), (1_000_000, 100_500));
        assert_eq!((t.bots, t.bot_events, t.users), (500, 900_000, 100_000));
        let t = check_main_counts(StreamKind::StreamB, &at(1.0));
        assert_eq!(
            (t.events, t.distinct_wallets, t.users),
            (1_000_000, 20_000, 20_000)
        );
        assert_eq!((t.bots, t.events_per_user), (0, Some(50)));
        check_main_counts(StreamKind::StreamA, &at(0.1));
        check_main_counts(StreamKind::StreamB, &at(0.01));
    }

    /// Every (wallet, chain) pair exactly once; intersection exactly the overlap.
    fn check_two_chains(opts: &GenOptions) -> Truth {
        let t = truth(StreamKind::TwoChains, opts).expect("valid");
        let mut on = vec![0u8; t.distinct_wallets as usize]; // bit 0: a, bit 1: b
        let mut n = 0u64;
        for e in events(StreamKind::TwoChains, opts).expect("valid") {
            assert_eq!(e.wallet.stream, TWO_CHAINS_WALLETS);
            assert_eq!(e.kind, "user");
            let bit = match e.chain {
                "a" => 1,
                "b" => 2,
                c => panic!("chain {c}"),
            };
            let w = &mut on[e.wallet.index as usize];
            assert_eq!(
                *w & bit,
                0,
                "wallet {} twice on {}",
                e.wallet.index,
                e.chain
            );
            *w |= bit;
            n += 1;
        }
        assert_eq!(n, t.events);
        let count = |m: u8| on.iter().filter(|&&w| w & m == m).count() as u64;
        assert_eq!(count(1), t.chains[0].distinct_wallets);
        assert_eq!(count(2), t.chains[1].distinct_wallets);
        assert_eq!(Some(count(3)), t.on_both_chains);
        assert!(on.iter().all(|&w| w != 0), "every wallet is on some chain");
        t
    }

    #[test]
    fn two_chains_counts_at_full_scale() {
        let t = check_two_chains(&at(1.0));
        assert_eq!((t.events, t.distinct_wallets), (10_000_000, 9_990_000));
        assert_eq!(t.chains[0].distinct_wallets, 5_000_000);
        assert_eq!(t.on_both_chains, Some(10_000));
        let t = check_two_chains(&at(0.01));
        assert_eq!(t.on_both_chains, Some(100));
    }

    #[test]
    fn overlap_wallets_have_one_address_on_both_chains() {
        let mut a = HashSet::new();
        let mut b = HashSet::new();
        for e in events(StreamKind::TwoChains, &at(0.01)).expect("valid") {
            let addr = e.wallet.address();
            assert!(addr.len() == 42 && addr.starts_with("0x"));
            assert!(addr[2..].bytes().all(|c| HEX_LOWER.contains(&c)), "{addr}");
            if e.chain == "a" {
                a.insert(addr)
            } else {
                b.insert(addr)
            };
        }
        assert_eq!((a.len(), b.len()), (50_000, 50_000));
        assert_eq!(a.intersection(&b).count(), 100);
    }

    const HEX_LOWER: &[u8] = b"0123456789abcdef";

    /// The proof behind "no address is shared": an address's first 16 hex digits are
    /// `splitmix64(stream·φ ^ i)`, a bijection of `stream·φ ^ i`. If every two stream ids'
    /// products differ in their top 32 bits, no two pairs with indices below 2^32 (all our
    /// indices are below 10^7) give the same input, at any scale.
    #[test]
    fn stream_ids_cannot_collide_for_any_index_below_2_pow_32() {
        let ids = [
            STREAM_A_BOTS,
            STREAM_A_USERS,
            STREAM_B_WALLETS,
            TWO_CHAINS_WALLETS,
        ];
        for (k, &x) in ids.iter().enumerate() {
            for &y in &ids[k + 1..] {
                let d =
                    x.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ y.wrapping_mul(0x9e37_79b9_7f4a_7c15);
                assert!(d >> 32 != 0, "{x:#x} and {y:#x} can collide");
            }
        }
    }

    #[test]
    fn addresses_are_distinct_across_groups_and_streams() {
        let mut all = HashSet::new();
        let mut wallets = 0;
        for kind in StreamKind::ALL {
            let opts = at(0.01);
            let mut seen = HashSet::new();
            for e in events(kind, &opts).expect("valid") {
                if seen.insert(e.wallet) {
                    all.insert(e.wallet.address());
                }
            }
            wallets += truth(kind, &opts).expect("valid").distinct_wallets as usize;
            assert_eq!(
                seen.len() as u64,
                truth(kind, &opts).expect("valid").distinct_wallets
            );
        }
        assert_eq!(all.len(), wallets, "an address is shared between groups");
    }

    #[test]
    fn times_never_decrease_and_stay_inside_the_day() {
        for (kind, scale) in [
            (StreamKind::StreamB, 1.0),
            (StreamKind::StreamA, 0.1),
            (StreamKind::TwoChains, 0.01),
            (StreamKind::StreamB, 1e-9),
        ] {
            let opts = GenOptions {
                date: NaiveDate::from_ymd_opt(2025, 3, 30).expect("date"),
                ..at(scale)
            };
            let start = opts.day_start_ms();
            let mut prev = start;
            let mut off_grid = 0u64;
            let evs = events(kind, &opts).expect("valid");
            let n = evs.len() as u64;
            for (i, e) in evs.enumerate() {
                assert!(e.time_ms >= prev, "{kind} event {i} goes back in time");
                assert!(
                    e.time_ms < start + DAY_MS as i64,
                    "{kind} event {i} after the day"
                );
                off_grid += u64::from((e.time_ms - start) as u64 != i as u64 * DAY_MS / n);
                prev = e.time_ms;
            }
            assert!(off_grid > 0, "{kind}: no jitter at all");
        }
    }

    #[test]
    fn same_seed_same_events_other_seed_other_shuffle() {
        let take = |seed: u64| -> Vec<GenEvent> {
            let opts = GenOptions { seed, ..at(0.1) };
            events(StreamKind::StreamA, &opts).expect("valid").collect()
        };
        let (a, b, c) = (take(7), take(7), take(8));
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(
            a.iter().map(|e| e.wallet).collect::<Vec<_>>(),
            c.iter().map(|e| e.wallet).collect::<Vec<_>>(),
            "a different seed must change the shuffle, not only the times"
        );
    }

    /// In stream-a each tenth of the stream (100,000 events) should be about 90% bot traffic.
    /// If the shuffle is uniform, a tenth's bot count is hypergeometric, whose variance is
    /// below that of Binomial(100,000, 0.9): sd = √(100,000 · 0.9 · 0.1) ≈ 94.9. We allow
    /// 6 sd (±569 events, ±0.57 points); a uniform shuffle fails one of the ten checks with
    /// probability below 10 · 2·10⁻⁹. An unshuffled stream (all bots first) fails at once.
    /// Two-chains' chain `a` share per tenth is checked the same way around 50%
    /// (Binomial(1,000,000, 0.5): sd 500, 6 sd = 3,000).
    #[test]
    fn streams_are_shuffled() {
        let evs: Vec<GenEvent> = events(StreamKind::StreamA, &at(1.0))
            .expect("valid")
            .collect();
        let tol = 6.0 * (100_000.0_f64 * 0.9 * 0.1).sqrt();
        for (k, tenth) in evs.chunks(100_000).enumerate() {
            let bots = tenth.iter().filter(|e| e.kind == "bot").count() as f64;
            assert!(
                (bots - 90_000.0).abs() <= tol,
                "tenth {k}: {bots} bot events"
            );
        }
        let tol = 6.0 * (1_000_000.0_f64 * 0.25).sqrt();
        let mut evs = events(StreamKind::TwoChains, &at(1.0)).expect("valid");
        for k in 0..10 {
            let a = evs
                .by_ref()
                .take(1_000_000)
                .filter(|e| e.chain == "a")
                .count() as f64;
            assert!(
                (a - 500_000.0).abs() <= tol,
                "tenth {k}: {a} events on chain a"
            );
        }
    }
}
