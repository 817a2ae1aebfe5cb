//! The `chains` stream: JSONL shaped like the transactions users actually load, for measuring
//! what the store costs on them (issue 12). Where the reference streams are four short fields,
//! a `chains` line averages 401 bytes (the issue's user had about 380; the fixed-width hex of
//! one hash and three addresses, the time and the thirteen keys alone take 368), carries a
//! high-cardinality `contract` field users tag by, and spans several days and chains:
//!
//! ```text
//! {"time":"2026-12-01T00:00:03.117Z","wallet":"0x…","chain":"base","contract":"0x…",
//!  "hash":"0x…64 hex…","to":"0x…","value":"0","gas":51234,"gas_price":12040117,
//!  "nonce":37,"block":39000001,"method":"0xa9059cbb","status":1}
//! ```
//!
//! The shape (defaults: 20,000 events a day, 3 chains, 2,000 contracts):
//! - **Senders.** 25% of events come from 5 bots with Zipf weights 1/k (at 20,000 a day the
//!   first sends about 2,200, the fifth about 440); 60% from a pool of returning wallets (twice
//!   the events per day) with Zipf–Mandelbrot weights 1/(k+5), so the busiest send a few
//!   hundred a day and most a handful; 15% from wallets seen once, never again. About 8,000
//!   distinct senders a day at the defaults.
//! - **Chains** take weights 1/k in the order `base`, `arbitrum`, `ethereum`, `polygon`, …
//!   (3 chains: 6/11, 3/11, 2/11 of events).
//! - **Contracts** take weights k^-1.125 over `contracts` values, so 20,000 events touch about
//!   1,570 of the 2,000 in a day and the most popular takes 18% of events.
//! - **Times.** Each day's events follow a daily cycle (an hourly weight table peaking at
//!   15:00 UTC at 2.7 times the 04:00 trough), in time order, except 1% that are late: their
//!   time is 2 s to 2.3 h (log-uniform) before their place in the stream, possibly in the
//!   previous day.
//! - **Verbatim fields** users' lines carry: a unique `hash`, `to` (the contract, or one of the
//!   chain's routers for swaps), `value` in wei (a decimal string, or a JSON number on 10% of
//!   lines when it fits in a u64; zero for non-payable calls), `gas` and `gas_price` (ranges per
//!   method and chain), the sender's running `nonce`, the chain's `block` at that time, a real
//!   4-byte `method` selector, `status` (0 on 2%).
//!
//! Everything comes from [`SplitMix64`] keyed by the seed and the day, and the only floating
//! point is `+`, `/` and `sqrt` (exactly rounded under IEEE 754), so the output is
//! byte-identical on every machine. Day `d` of an `n`-day run is the same as day `d` of any
//! longer run with the same seed and first date.

use super::jsonl::push_time;
use super::{splitmix64, wallet_address_bytes, GenError, SplitMix64, Wallet};
use chrono::{Datelike, NaiveDate, NaiveTime};
use std::borrow::Cow;
use std::fmt;
use std::io::{BufWriter, Write};
use std::str::FromStr;

const HOUR_MS: u64 = 3_600_000;
const DAY_MS: i64 = 86_400_000;

/// Relative activity of each UTC hour (Europe and the Americas overlap in the afternoon).
const HOUR_WEIGHTS: [u64; 24] = [
    72, 64, 58, 54, 52, 54, 60, 70, 82, 94, 104, 112, 120, 128, 134, 138, 136, 130, 122, 114, 106,
    96, 88, 80,
];

/// Late events per thousand.
const LATE_PER_MILLE: u64 = 10;
/// Lateness is `2^k` to `2^(k+1)` seconds with `k` uniform in `1..=LATE_MAX_SHIFT`.
const LATE_MAX_SHIFT: u64 = 12;

/// Bots: how many, and the percentage of events they send.
const BOTS: usize = 5;
const BOT_PERCENT: u64 = 25;
/// Returning wallets: the percentage of events (the rest are one-time wallets).
const RETURNING_PERCENT: u64 = 60;
/// The Zipf–Mandelbrot offset of the returning pool: flattens the head so the busiest
/// returning wallets send hundreds, not thousands (thousands are the bots' part).
const POOL_OFFSET: f64 = 5.0;
/// The returning pool's size, as a multiple of the events per day, and its bounds (the upper
/// one keeps the cumulative table at 32 MiB for absurd rates).
const POOL_PER_EVENT: u64 = 2;
const POOL_MIN: u64 = 64;
const POOL_MAX: u64 = 1 << 22;
/// Routers per chain (the `to` of swaps).
const ROUTERS: u64 = 4;

/// Limits on the options, so the tables stay small and the counters cannot overflow.
const MAX_EVENTS_PER_DAY: u64 = 100_000_000;
const MAX_CHAINS: u32 = 64;
const MAX_CONTRACTS: u32 = 1_000_000;

// `wallet_address` stream ids, one per group, so no address is shared between groups.
const BOT_STREAM: u64 = 0x0c4a_1b07;
const POOL_STREAM: u64 = 0x0c4a_1900;
const NEW_STREAM: u64 = 0x0c4a_1e30;
const CONTRACT_STREAM: u64 = 0x0c4a_1c0c;
const ROUTER_STREAM: u64 = 0x0c4a_1207;

/// Salts mixed into the seed so the event draws and the hashes are independent.
const CHAINS_SALT: u64 = 0x4348_4149_4e53_2d31;
const HASH_SALT: u64 = 0x7478_2d68_6173_6831;
const NONCE_SALT: u64 = 0x6e6f_6e63_652d_3031;

/// The unit of `time` in the output.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TimeFormat {
    /// RFC 3339 UTC with milliseconds, `"2026-12-01T00:00:03.117Z"`.
    #[default]
    Iso,
    /// Unix milliseconds as a JSON number.
    Millis,
    /// Unix seconds as a JSON number (the milliseconds are dropped, rounding down).
    Seconds,
}

impl FromStr for TimeFormat {
    type Err = GenError;

    fn from_str(s: &str) -> Result<Self, GenError> {
        match s.to_ascii_lowercase().as_str() {
            "iso" | "rfc3339" => Ok(TimeFormat::Iso),
            "ms" | "millis" => Ok(TimeFormat::Millis),
            "s" | "seconds" => Ok(TimeFormat::Seconds),
            _ => Err(GenError::BadOption {
                name: "time format",
                expected: "iso, ms or s",
                value: s.to_string(),
            }),
        }
    }
}

impl fmt::Display for TimeFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TimeFormat::Iso => "iso",
            TimeFormat::Millis => "ms",
            TimeFormat::Seconds => "s",
        })
    }
}

/// How to generate the `chains` stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChainsOptions {
    /// The same seed (with the same other options) gives byte-identical output.
    pub seed: u64,
    /// The first UTC day.
    pub date: NaiveDate,
    /// Consecutive days written, each with `events_per_day` events.
    pub days: u32,
    pub events_per_day: u64,
    /// Distinct `chain` values.
    pub chains: u32,
    /// Distinct `contract` values (not all appear in a day: see the module doc).
    pub contracts: u32,
    pub time_format: TimeFormat,
}

impl Default for ChainsOptions {
    /// Seed 42, 2026-12-01, 1 day of 20,000 events, 3 chains, 2,000 contracts, RFC 3339 times.
    fn default() -> Self {
        ChainsOptions {
            seed: 42,
            date: NaiveDate::from_ymd_opt(2026, 12, 1).unwrap_or(NaiveDate::MIN),
            days: 1,
            events_per_day: 20_000,
            chains: 3,
            contracts: 2_000,
            time_format: TimeFormat::Iso,
        }
    }
}

impl ChainsOptions {
    /// Checks every count is in range and every day (with its late events, which may fall up
    /// to 2.3 hours into the day before) has a four-digit year.
    pub fn validate(&self) -> Result<(), GenError> {
        let bad = |name, expected, value: String| {
            Err(GenError::BadOption {
                name,
                expected,
                value,
            })
        };
        if self.days == 0 {
            return bad("days", "at least 1", self.days.to_string());
        }
        if !(1..=MAX_EVENTS_PER_DAY).contains(&self.events_per_day) {
            return bad(
                "events per day",
                "from 1 to 100,000,000",
                self.events_per_day.to_string(),
            );
        }
        if !(1..=MAX_CHAINS).contains(&self.chains) {
            return bad("chains", "from 1 to 64", self.chains.to_string());
        }
        if !(1..=MAX_CONTRACTS).contains(&self.contracts) {
            return bad(
                "contracts",
                "from 1 to 1,000,000",
                self.contracts.to_string(),
            );
        }
        let last = self
            .date
            .checked_add_days(chrono::Days::new(u64::from(self.days) - 1));
        let in_range = |d: NaiveDate| (1..=9999).contains(&d.year());
        if !in_range(self.date) || !last.is_some_and(in_range) {
            return bad(
                "date",
                "a first day from 0001-01-01 whose last day is at most 9999-12-31",
                format!("{} with {} days", self.date, self.days),
            );
        }
        Ok(())
    }

    /// Unix milliseconds of the first day's midnight UTC.
    pub fn first_day_ms(&self) -> i64 {
        self.date
            .and_time(NaiveTime::MIN)
            .and_utc()
            .timestamp_millis()
    }

    /// The total number of events written.
    pub fn events(&self) -> u64 {
        u64::from(self.days) * self.events_per_day
    }
}

/// What a chain looks like in the verbatim fields.
struct ChainParams {
    name: &'static str,
    /// Block time, and the block number at [`BLOCK_ANCHOR_MS`].
    block_ms: i64,
    block_at_anchor: i64,
    /// Gas price range in wei, `[lo, hi)`.
    gas_price: (u64, u64),
}

/// 2026-12-01T00:00:00Z, where the block numbers below are about right.
const BLOCK_ANCHOR_MS: i64 = 1_796_083_200_000;

const CHAIN_TABLE: [ChainParams; 8] = [
    ChainParams {
        name: "base",
        block_ms: 2_000,
        block_at_anchor: 39_000_000,
        gas_price: (1_000_000, 50_000_000),
    },
    ChainParams {
        name: "arbitrum",
        block_ms: 250,
        block_at_anchor: 410_000_000,
        gas_price: (10_000_000, 100_000_000),
    },
    ChainParams {
        name: "ethereum",
        block_ms: 12_000,
        block_at_anchor: 24_100_000,
        gas_price: (500_000_000, 30_000_000_000),
    },
    ChainParams {
        name: "polygon",
        block_ms: 2_000,
        block_at_anchor: 79_000_000,
        gas_price: (30_000_000_000, 200_000_000_000),
    },
    ChainParams {
        name: "optimism",
        block_ms: 2_000,
        block_at_anchor: 144_000_000,
        gas_price: (1_000_000, 50_000_000),
    },
    ChainParams {
        name: "bsc",
        block_ms: 750,
        block_at_anchor: 70_000_000,
        gas_price: (100_000_000, 3_000_000_000),
    },
    ChainParams {
        name: "avalanche",
        block_ms: 2_000,
        block_at_anchor: 72_000_000,
        gas_price: (1_000_000_000, 50_000_000_000),
    },
    ChainParams {
        name: "linea",
        block_ms: 2_000,
        block_at_anchor: 25_000_000,
        gas_price: (50_000_000, 1_000_000_000),
    },
];

/// Chains past the table: `chain9`, `chain10`, … with these parameters.
const OTHER_CHAIN: ChainParams = ChainParams {
    name: "",
    block_ms: 2_000,
    block_at_anchor: 10_000_000,
    gas_price: (100_000_000, 1_000_000_000),
};

fn chain_params(chain: u32) -> &'static ChainParams {
    CHAIN_TABLE.get(chain as usize).unwrap_or(&OTHER_CHAIN)
}

/// The `chain` value of chain index `chain` (0-based; index 0 is the busiest).
pub fn chain_name(chain: u32) -> Cow<'static, str> {
    match CHAIN_TABLE.get(chain as usize) {
        Some(p) => Cow::Borrowed(p.name),
        None => Cow::Owned(format!("chain{}", u64::from(chain) + 1)),
    }
}

/// A contract method: its selector, share of calls, gas range and who the call goes to.
struct Method {
    selector: &'static str,
    /// Percent of calls (the table sums to 100).
    percent: u64,
    gas: (u32, u32),
    /// Calls carrying ETH, per thousand.
    payable_per_mille: u64,
    /// Sent to the contract itself (token calls) rather than a router (swaps).
    to_contract: bool,
}

const METHODS: [Method; 10] = [
    Method {
        selector: "0xa9059cbb", // transfer(address,uint256)
        percent: 30,
        gas: (34_000, 65_000),
        payable_per_mille: 0,
        to_contract: true,
    },
    Method {
        selector: "0x095ea7b3", // approve(address,uint256)
        percent: 12,
        gas: (44_000, 47_000),
        payable_per_mille: 0,
        to_contract: true,
    },
    Method {
        selector: "0x23b872dd", // transferFrom(address,address,uint256)
        percent: 6,
        gas: (45_000, 75_000),
        payable_per_mille: 0,
        to_contract: true,
    },
    Method {
        selector: "0x3593564c", // execute(bytes,bytes[],uint256): Uniswap's Universal Router
        percent: 16,
        gas: (120_000, 400_000),
        payable_per_mille: 400,
        to_contract: false,
    },
    Method {
        selector: "0x38ed1739", // swapExactTokensForTokens
        percent: 8,
        gas: (110_000, 310_000),
        payable_per_mille: 0,
        to_contract: false,
    },
    Method {
        selector: "0x7ff36ab5", // swapExactETHForTokens
        percent: 6,
        gas: (100_000, 250_000),
        payable_per_mille: 1_000,
        to_contract: false,
    },
    Method {
        selector: "0xac9650d8", // multicall(bytes[])
        percent: 8,
        gas: (90_000, 390_000),
        payable_per_mille: 200,
        to_contract: false,
    },
    Method {
        selector: "0xd0e30db0", // deposit(): wrapping ETH
        percent: 5,
        gas: (27_000, 47_000),
        payable_per_mille: 1_000,
        to_contract: true,
    },
    Method {
        selector: "0x2e1a7d4d", // withdraw(uint256)
        percent: 4,
        gas: (30_000, 50_000),
        payable_per_mille: 0,
        to_contract: true,
    },
    Method {
        selector: "0x12aa3caf", // swap: 1inch's aggregation router
        percent: 5,
        gas: (150_000, 400_000),
        payable_per_mille: 300,
        to_contract: false,
    },
];

/// Who sent an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Sender {
    /// One of the 5 bots.
    Bot,
    /// A wallet of the returning pool.
    Returning,
    /// A wallet that sends only this event.
    New,
}

/// One transaction of the `chains` stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChainEvent {
    /// Unix milliseconds (already moved back by `late_ms`).
    pub time_ms: i64,
    /// How far behind its place in the stream the event's time is; 0 for most.
    pub late_ms: u64,
    /// Which generated day (0-based) the event belongs to; a late event's time may fall in
    /// the day before.
    pub day: u32,
    /// The event's position in the whole stream (0-based); its hash is unique by it.
    pub seq: u64,
    pub wallet: Wallet,
    pub sender: Sender,
    /// Chain index (see [`chain_name`]).
    pub chain: u32,
    /// Contract index: 0 is the most popular.
    pub contract: u32,
    pub to: Wallet,
    /// Wei.
    pub value: u128,
    /// Written as a JSON number instead of a string.
    pub value_as_number: bool,
    pub gas: u32,
    pub gas_price: u64,
    pub nonce: u64,
    pub block: u64,
    pub method: &'static str,
    pub status: u8,
    hash_key: u64,
}

impl ChainEvent {
    /// The contract's address.
    pub fn contract_address(&self) -> Wallet {
        contract_wallet(self.contract)
    }

    /// `0x` and 64 hex digits; the first 16 are a bijection of `seq` (for a seed), so no two
    /// events of a run share a hash.
    pub fn hash_bytes(&self) -> [u8; 66] {
        let mut out = [0u8; 66];
        out[0] = b'0';
        out[1] = b'x';
        let mut x = splitmix64(self.seq ^ self.hash_key);
        for chunk in out[2..].chunks_mut(16) {
            put_hex(chunk, x);
            x = splitmix64(x);
        }
        out
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn put_hex(out: &mut [u8], v: u64) {
    let n = out.len();
    for (k, b) in out.iter_mut().enumerate() {
        *b = HEX[((v >> (4 * (n - 1 - k))) & 0xf) as usize];
    }
}

fn contract_wallet(contract: u32) -> Wallet {
    Wallet {
        stream: CONTRACT_STREAM,
        index: u64::from(contract),
    }
}

/// Cumulative weights, for drawing an index with probability proportional to its weight.
struct Cumulative(Vec<f64>);

impl Cumulative {
    fn new(weights: impl Iterator<Item = f64>) -> Self {
        let mut sum = 0.0;
        Cumulative(
            weights
                .map(|w| {
                    sum += w;
                    sum
                })
                .collect(),
        )
    }

    fn draw(&self, rng: &mut SplitMix64) -> usize {
        let total = self.0.last().copied().unwrap_or(0.0);
        // 53 random bits: a uniform double in [0, 1).
        let u = (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64) * total;
        self.0
            .partition_point(|&c| c <= u)
            .min(self.0.len().saturating_sub(1))
    }
}

/// The events of the `chains` stream in output order. Holds the draw tables (the returning
/// pool's is 16 bytes per wallet: twice the events per day, at most 4M wallets) and formats
/// nothing until asked.
pub struct ChainEvents {
    opts: ChainsOptions,
    chains: Cumulative,
    contracts: Cumulative,
    bots: Cumulative,
    pool: Cumulative,
    /// Transactions sent so far by each returning wallet and bot: their next nonce, above a
    /// per-wallet starting point.
    pool_sent: Vec<u32>,
    bot_sent: [u64; BOTS],
    rng: SplitMix64,
    key: u64,
    hash_key: u64,
    first_day_ms: i64,
    day: u32,
    i: u64,
}

/// The `chains` stream under `opts`.
pub fn chain_events(opts: &ChainsOptions) -> Result<ChainEvents, GenError> {
    opts.validate()?;
    let pool = (POOL_PER_EVENT * opts.events_per_day).clamp(POOL_MIN, POOL_MAX);
    let key = splitmix64(opts.seed ^ CHAINS_SALT);
    Ok(ChainEvents {
        opts: *opts,
        chains: Cumulative::new((1..=opts.chains).map(|k| 1.0 / f64::from(k))),
        // k^-1.125 = 1 / (k · k^(1/8)), the eighth root by three exactly rounded square roots.
        contracts: Cumulative::new((1..=opts.contracts).map(|k| {
            let k = f64::from(k);
            1.0 / (k * k.sqrt().sqrt().sqrt())
        })),
        bots: Cumulative::new((1..=BOTS).map(|k| 1.0 / k as f64)),
        pool: Cumulative::new((1..=pool).map(|k| 1.0 / (k as f64 + POOL_OFFSET))),
        pool_sent: vec![0; pool as usize],
        bot_sent: [0; BOTS],
        rng: SplitMix64::new(0),
        key,
        hash_key: splitmix64(opts.seed ^ HASH_SALT),
        first_day_ms: opts.first_day_ms(),
        day: 0,
        i: 0,
    })
}

/// The cumulative hour weights: `CUMULATIVE_HOURS[h]` is the weight of the hours before `h`.
const CUMULATIVE_HOURS: [u64; 25] = {
    let mut c = [0u64; 25];
    let mut h = 0;
    while h < 24 {
        c[h + 1] = c[h] + HOUR_WEIGHTS[h];
        h += 1;
    }
    c
};

impl ChainEvents {
    /// Milliseconds into the day of event `i` of `n`. Event `i` gets the `i`-th of `n` equal
    /// slices of the day's weighted time (hour `h` stretched by its weight) plus a jitter inside
    /// the slice, then is mapped back to clock time; both steps never decrease, so the times
    /// are in order and each hour gets its weight's share of events, within one.
    fn time_in_day(&mut self, i: u64, n: u64) -> u64 {
        let weighted = u128::from(CUMULATIVE_HOURS[24] * HOUR_MS);
        let v0 = (u128::from(i) * weighted / u128::from(n)) as u64;
        let v1 = (u128::from(i + 1) * weighted / u128::from(n)) as u64;
        let v = if v1 > v0 {
            v0 + self.rng.below(v1 - v0)
        } else {
            v0
        };
        let mut h = 0;
        while CUMULATIVE_HOURS[h + 1] * HOUR_MS <= v {
            h += 1;
        }
        h as u64 * HOUR_MS + (v - CUMULATIVE_HOURS[h] * HOUR_MS) / HOUR_WEIGHTS[h]
    }

    /// `[lo, hi)` uniformly.
    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.rng.below(hi - lo)
    }

    /// A wei amount from 0.00001 to 100 ETH, uniform in the order of magnitude.
    fn amount(&mut self) -> u128 {
        let exp = 13 + self.rng.below(7) as u32;
        let unit = 10u128.pow(exp);
        // Three significant digits, as wallets' amounts mostly have.
        let mantissa = u128::from(self.between(100, 1_000));
        mantissa * unit / 100
    }
}

impl Iterator for ChainEvents {
    type Item = ChainEvent;

    fn next(&mut self) -> Option<ChainEvent> {
        if self.day >= self.opts.days {
            return None;
        }
        let n = self.opts.events_per_day;
        let (day, i) = (self.day, self.i);
        if i == 0 {
            // Each day draws from its own generator, so a day does not depend on how many
            // draws the days before it took.
            self.rng = SplitMix64::new(splitmix64(self.key ^ splitmix64(u64::from(day))));
        }
        let seq = u64::from(day) * n + i;
        let day_start = self.first_day_ms + i64::from(day) * DAY_MS;
        let on_time = day_start + self.time_in_day(i, n) as i64;
        let late_ms = if self.rng.below(1_000) < LATE_PER_MILLE {
            let base = 1_000u64 << (1 + self.rng.below(LATE_MAX_SHIFT));
            self.between(base, 2 * base)
        } else {
            0
        };
        let time_ms = on_time - late_ms as i64;

        let who = self.rng.below(100);
        let (wallet, sender, nonce) = if who < BOT_PERCENT {
            let b = self.bots.draw(&mut self.rng);
            let start = 100_000 + splitmix64(NONCE_SALT ^ b as u64) % 900_000;
            let nonce = start + self.bot_sent[b];
            self.bot_sent[b] += 1;
            let w = Wallet {
                stream: BOT_STREAM,
                index: b as u64,
            };
            (w, Sender::Bot, nonce)
        } else if who < BOT_PERCENT + RETURNING_PERCENT {
            let k = self.pool.draw(&mut self.rng);
            let start = splitmix64(NONCE_SALT ^ POOL_STREAM ^ k as u64) % 2_000;
            let nonce = start + u64::from(self.pool_sent[k]);
            self.pool_sent[k] = self.pool_sent[k].saturating_add(1);
            let w = Wallet {
                stream: POOL_STREAM,
                index: k as u64,
            };
            (w, Sender::Returning, nonce)
        } else {
            let w = Wallet {
                stream: NEW_STREAM,
                index: seq,
            };
            (w, Sender::New, 0)
        };

        let chain = self.chains.draw(&mut self.rng) as u32;
        let contract = self.contracts.draw(&mut self.rng) as u32;
        let mut pick = self.rng.below(100);
        let method = METHODS
            .iter()
            .find(|m| {
                let hit = pick < m.percent;
                pick = pick.saturating_sub(m.percent);
                hit
            })
            .unwrap_or(&METHODS[0]);
        let to = if method.to_contract {
            contract_wallet(contract)
        } else {
            Wallet {
                stream: ROUTER_STREAM,
                index: u64::from(chain) * ROUTERS + self.rng.below(ROUTERS),
            }
        };
        let value = if self.rng.below(1_000) < method.payable_per_mille {
            self.amount()
        } else {
            0
        };
        let value_as_number = self.rng.below(10) == 0 && u64::try_from(value).is_ok();
        let gas = self.between(u64::from(method.gas.0), u64::from(method.gas.1)) as u32;
        let params = chain_params(chain);
        let gas_price = self.between(params.gas_price.0, params.gas_price.1);
        let status = if self.rng.below(50) == 0 { 0 } else { 1 };
        let block = (params.block_at_anchor
            + (time_ms - BLOCK_ANCHOR_MS).div_euclid(params.block_ms))
        .max(0) as u64;

        self.i += 1;
        if self.i == n {
            self.i = 0;
            self.day += 1;
        }
        Some(ChainEvent {
            time_ms,
            late_ms,
            day,
            seq,
            wallet,
            sender,
            chain,
            contract,
            to,
            value,
            value_as_number,
            gas,
            gas_price,
            nonce,
            block,
            method: method.selector,
            status,
            hash_key: self.hash_key,
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let done = u64::from(self.day) * self.opts.events_per_day + self.i;
        let left = usize::try_from(self.opts.events() - done).unwrap_or(usize::MAX);
        (left, Some(left))
    }
}

/// Output buffer size.
const BUF_BYTES: usize = 1 << 20;

/// Writes the `chains` stream under `opts` to `out`, one JSON object per line; returns the
/// number of lines. Nothing is written for invalid options; an I/O error names the line.
pub fn write_chains_jsonl(opts: &ChainsOptions, out: &mut impl Write) -> Result<u64, GenError> {
    let events = chain_events(opts)?;
    let names: Vec<Cow<'static, str>> = (0..opts.chains).map(chain_name).collect();
    let mut w = BufWriter::with_capacity(BUF_BYTES, out);
    let mut line = Vec::with_capacity(512);
    let mut date = String::new();
    let mut date_day = None;
    let mut n = 0u64;
    for e in events {
        let day_start = opts.first_day_ms() + i64::from(e.day) * DAY_MS;
        if date_day != Some(e.day) {
            date = chrono::DateTime::from_timestamp_millis(day_start)
                .map(|t| t.format("%Y-%m-%d").to_string())
                .unwrap_or_default();
            date_day = Some(e.day);
        }
        line.clear();
        push_line(&mut line, &e, opts.time_format, &names, day_start, &date);
        w.write_all(&line).map_err(|source| GenError::Io {
            what: format!("writing chains JSONL line {}", n + 1),
            source,
        })?;
        n += 1;
    }
    w.flush().map_err(|source| GenError::Io {
        what: format!("flushing chains JSONL output after {n} lines"),
        source,
    })?;
    Ok(n)
}

fn push_u128(buf: &mut Vec<u8>, mut v: u128) {
    let mut digits = [0u8; 39];
    let mut k = digits.len();
    loop {
        k -= 1;
        digits[k] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    buf.extend_from_slice(&digits[k..]);
}

fn push_i64(buf: &mut Vec<u8>, v: i64) {
    if v < 0 {
        buf.push(b'-');
    }
    push_u128(buf, u128::from(v.unsigned_abs()));
}

fn push_line(
    buf: &mut Vec<u8>,
    e: &ChainEvent,
    format: TimeFormat,
    names: &[Cow<'static, str>],
    day_start: i64,
    date: &str,
) {
    buf.extend_from_slice(b"{\"time\":");
    match format {
        TimeFormat::Iso => {
            buf.push(b'"');
            push_time(buf, e.time_ms, day_start, date.as_bytes());
            buf.push(b'"');
        }
        TimeFormat::Millis => push_i64(buf, e.time_ms),
        TimeFormat::Seconds => push_i64(buf, e.time_ms.div_euclid(1_000)),
    }
    buf.extend_from_slice(b",\"wallet\":\"");
    buf.extend_from_slice(&e.wallet.address_bytes());
    buf.extend_from_slice(b"\",\"chain\":\"");
    let name = names.get(e.chain as usize).map_or("", |n| n.as_ref());
    buf.extend_from_slice(name.as_bytes());
    buf.extend_from_slice(b"\",\"contract\":\"");
    buf.extend_from_slice(&e.contract_address().address_bytes());
    buf.extend_from_slice(b"\",\"hash\":\"");
    buf.extend_from_slice(&e.hash_bytes());
    buf.extend_from_slice(b"\",\"to\":\"");
    buf.extend_from_slice(&wallet_address_bytes(e.to.stream, e.to.index));
    buf.extend_from_slice(b"\",\"value\":");
    if e.value_as_number {
        push_u128(buf, e.value);
    } else {
        buf.push(b'"');
        push_u128(buf, e.value);
        buf.push(b'"');
    }
    buf.extend_from_slice(b",\"gas\":");
    push_u128(buf, u128::from(e.gas));
    buf.extend_from_slice(b",\"gas_price\":");
    push_u128(buf, u128::from(e.gas_price));
    buf.extend_from_slice(b",\"nonce\":");
    push_u128(buf, u128::from(e.nonce));
    buf.extend_from_slice(b",\"block\":");
    push_u128(buf, u128::from(e.block));
    buf.extend_from_slice(b",\"method\":\"");
    buf.extend_from_slice(e.method.as_bytes());
    buf.extend_from_slice(b"\",\"status\":");
    buf.push(b'0' + e.status);
    buf.extend_from_slice(b"}\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::{jsonl::parse_line, Mapping, TimeUnit};
    use crate::store::Event;
    use sha2::{Digest, Sha256};
    use std::collections::{HashMap, HashSet};

    fn opts(days: u32, events_per_day: u64) -> ChainsOptions {
        ChainsOptions {
            days,
            events_per_day,
            ..ChainsOptions::default()
        }
    }

    fn jsonl(o: &ChainsOptions) -> Vec<u8> {
        let mut out = Vec::new();
        let n = write_chains_jsonl(o, &mut out).expect("write to a Vec");
        assert_eq!(n, o.events());
        assert_eq!(n as usize, out.iter().filter(|&&b| b == b'\n').count());
        out
    }

    fn all(o: &ChainsOptions) -> Vec<ChainEvent> {
        chain_events(o).expect("valid options").collect()
    }

    /// Six standard deviations of a Binomial(n, p) count: a correct generator fails such a
    /// check about once in 500 million runs, and these seeds are fixed anyway.
    fn six_sd(n: u64, p: f64) -> f64 {
        6.0 * (n as f64 * p * (1.0 - p)).sqrt()
    }

    #[test]
    fn defaults_validation_and_time_formats() {
        let d = ChainsOptions::default();
        assert_eq!(
            (d.seed, d.days, d.events_per_day, d.chains, d.contracts),
            (42, 1, 20_000, 3, 2_000)
        );
        assert_eq!(d.date.to_string(), "2026-12-01");
        assert_eq!(d.time_format, TimeFormat::Iso);
        assert!(d.validate().is_ok());
        let bad = [
            (opts(0, 10), "days"),
            (opts(1, 0), "events per day"),
            (opts(1, MAX_EVENTS_PER_DAY + 1), "events per day"),
            (ChainsOptions { chains: 0, ..d }, "chains"),
            (ChainsOptions { chains: 65, ..d }, "chains"),
            (ChainsOptions { contracts: 0, ..d }, "contracts"),
            (
                ChainsOptions {
                    date: NaiveDate::from_ymd_opt(9999, 12, 30).expect("date"),
                    days: 3,
                    ..d
                },
                "date",
            ),
            (
                ChainsOptions {
                    date: NaiveDate::from_ymd_opt(0, 12, 30).expect("date"),
                    ..d
                },
                "date",
            ),
        ];
        for (o, name) in bad {
            let e = o.validate().expect_err("accepted");
            assert!(e.to_string().starts_with(name), "{e}");
            assert!(chain_events(&o).is_err());
            let mut out = Vec::new();
            assert!(write_chains_jsonl(&o, &mut out).is_err());
            assert!(out.is_empty(), "nothing written for bad options");
        }
        for (s, f) in [
            ("iso", TimeFormat::Iso),
            ("ms", TimeFormat::Millis),
            ("s", TimeFormat::Seconds),
            ("MS", TimeFormat::Millis),
        ] {
            assert_eq!(s.parse::<TimeFormat>().ok(), Some(f));
            assert_eq!(f.to_string().parse::<TimeFormat>().ok(), Some(f));
        }
        let e = "minutes".parse::<TimeFormat>().expect_err("unknown");
        assert!(
            e.to_string().contains("minutes") && e.to_string().contains("iso, ms or s"),
            "{e}"
        );
    }

    #[test]
    fn output_is_deterministic_and_each_day_is_the_same_in_a_longer_run() {
        let hash = |o: &ChainsOptions| Sha256::digest(jsonl(o)).to_vec();
        let o = opts(2, 5_000);
        assert_eq!(hash(&o), hash(&o));
        assert_ne!(hash(&o), hash(&ChainsOptions { seed: 43, ..o }));
        let two = jsonl(&o);
        let one = jsonl(&opts(1, 5_000));
        assert_eq!(&two[..one.len()], &one[..], "day 0 of a 2-day run");
        assert_ne!(&two[one.len()..], &one[..], "day 1 differs");
        // A fixed line, so a change to the stream's shape is seen (update it deliberately).
        let first = std::str::from_utf8(&one[..one.iter().position(|&b| b == b'\n').unwrap_or(0)])
            .expect("ASCII")
            .to_string();
        let want = concat!(
            r#"{"time":"2026-12-01T00:00:20.289Z","#,
            r#""wallet":"0x50b1c61957623fbd543eb5b3506c24d36ea93df1","chain":"ethereum","#,
            r#""contract":"0x078d8cf19356eda34aa3b235d5571e5cd793231c","#,
            r#""hash":"0xd76cc068090c18b7ca88ed81a6e418a044f38369cf0168b8aef7270986955e4c","#,
            r#""to":"0xf784869b7124dc8439e0989ac38608660df801ff","value":"0","gas":279486,"#,
            r#""gas_price":13601283046,"nonce":0,"block":24100001,"method":"0x3593564c","#,
            r#""status":1}"#
        );
        assert_eq!(first, want);
    }

    #[test]
    fn lines_average_350_to_410_bytes_and_time_formats_change_only_the_time() {
        let o = opts(1, 20_000);
        let iso = jsonl(&o);
        let lens: Vec<usize> = iso.split(|&b| b == b'\n').map(|l| l.len() + 1).collect();
        let lens = &lens[..lens.len() - 1]; // after the last newline
        let mean = lens.iter().sum::<usize>() as f64 / lens.len() as f64;
        assert!((350.0..=410.0).contains(&mean), "mean line {mean:.1} bytes");
        // Every field has a bounded width: the shortest line has value "0" and small numbers,
        // the longest a 20-digit value and a 6-digit nonce.
        let (min, max) = (lens.iter().min(), lens.iter().max());
        assert!(min >= Some(&330) && max <= Some(&430), "{min:?} {max:?}");
        // The same events (the format draws nothing): the time is 13 bytes shorter in ms
        // (`1796083200086` against `"2026-12-01T00:00:00.086Z"`), 16 in seconds.
        let ms = jsonl(&ChainsOptions {
            time_format: TimeFormat::Millis,
            ..o
        });
        let s = jsonl(&ChainsOptions {
            time_format: TimeFormat::Seconds,
            ..o
        });
        assert_eq!(ms.len() + 13 * 20_000, iso.len());
        assert_eq!(s.len() + 16 * 20_000, iso.len());
    }

    #[test]
    fn every_line_parses_with_the_jsonl_ingest_in_every_time_format() {
        let map = Mapping {
            time: "time".into(),
            item: "wallet".into(),
            tags: vec![
                ("chain".into(), "chain".into()),
                ("contract".into(), "contract".into()),
            ],
            unit: TimeUnit::Auto,
            zone: Default::default(),
        };
        for format in [TimeFormat::Iso, TimeFormat::Millis, TimeFormat::Seconds] {
            let o = ChainsOptions {
                time_format: format,
                ..opts(2, 3_000)
            };
            let text = jsonl(&o);
            let mut event = Event::new(0, "", &[]);
            let mut lines = 0;
            for (k, (line, e)) in text
                .split(|&b| b == b'\n')
                .zip(chain_events(&o).expect("valid"))
                .enumerate()
            {
                parse_line(line, k as u64 + 1, &map, &mut event)
                    .unwrap_or_else(|b| panic!("{format} line {}: {b}", k + 1));
                let want_time = match format {
                    TimeFormat::Seconds => e.time_ms.div_euclid(1_000) * 1_000,
                    _ => e.time_ms,
                };
                assert_eq!(event.time, want_time);
                assert_eq!(event.item, e.wallet.address());
                assert_eq!(
                    event.tags,
                    vec![
                        ("chain".to_string(), chain_name(e.chain).into_owned()),
                        ("contract".to_string(), e.contract_address().address()),
                    ]
                );
                // The other nine fields are kept verbatim, in order.
                let extra: serde_json::Value =
                    serde_json::from_str(&event.extra).expect("extra is JSON");
                let obj = extra.as_object().expect("an object");
                let keys: Vec<&str> = obj.keys().map(String::as_str).collect();
                let mut want_keys = vec![
                    "block",
                    "gas",
                    "gas_price",
                    "hash",
                    "method",
                    "nonce",
                    "status",
                    "to",
                    "value",
                ];
                want_keys.sort_unstable();
                let mut got = keys.clone();
                got.sort_unstable();
                assert_eq!(got, want_keys);
                let hash = e.hash_bytes();
                assert_eq!(obj["hash"].as_str().map(str::as_bytes), Some(&hash[..]));
                let value = e.value.to_string();
                if e.value_as_number {
                    assert!(event.extra.contains(&format!(r#""value":{value}"#)));
                } else {
                    assert_eq!(obj["value"].as_str(), Some(value.as_str()));
                }
                assert_eq!(obj["nonce"].as_u64(), Some(e.nonce));
                assert_eq!(obj["block"].as_u64(), Some(e.block));
                lines += 1;
            }
            assert_eq!(lines, 6_000, "{format}");
        }
    }

    /// The expected number of distinct values, and a bound on its standard deviation, when
    /// `n` draws take value `k` with probability proportional to `w[k]`. Occupancy indicators
    /// are negatively associated, so the variance is at most the sum of their variances.
    fn occupancy(w: &[f64], n: u64) -> (f64, f64) {
        let total: f64 = w.iter().sum();
        let (mut mean, mut var) = (0.0, 0.0);
        for x in w {
            let miss = (1.0 - x / total).powf(n as f64);
            mean += 1.0 - miss;
            var += miss * (1.0 - miss);
        }
        (mean, var.sqrt())
    }

    #[test]
    fn a_day_sees_about_1600_of_2000_contracts_as_zipf_predicts() {
        let w: Vec<f64> = (1..=2_000).map(|k| (k as f64).powf(-1.125)).collect();
        let (mean, sd) = occupancy(&w, 20_000);
        // The issue's user saw 1,634 contract values in a day of 20,000 events.
        assert!((1_500.0..1_650.0).contains(&mean), "{mean}");
        let evs = all(&opts(3, 20_000));
        for day in 0..3 {
            let seen: HashSet<u32> = evs
                .iter()
                .filter(|e| e.day == day)
                .map(|e| e.contract)
                .collect();
            let got = seen.len() as f64;
            // ±6 sd (sd ≤ 17): uniform contracts (≈ 2,000 a day) or a steeper law fail.
            assert!(
                (got - mean).abs() < 6.0 * sd,
                "day {day}: {got} vs {mean:.0}"
            );
            assert!(seen.iter().all(|&c| c < 2_000));
        }
        // The most popular contract's share: k^-1.125 normalised over 2,000 values.
        let top = evs.iter().filter(|e| e.contract == 0).count() as u64;
        let p = w[0] / w.iter().sum::<f64>();
        let n = evs.len() as u64;
        assert!((top as f64 - p * n as f64).abs() < six_sd(n, p), "{top}");
        // Fewer contracts than a day needs: every one shows up.
        let few = all(&ChainsOptions {
            contracts: 50,
            ..opts(1, 20_000)
        });
        let seen: HashSet<u32> = few.iter().map(|e| e.contract).collect();
        assert_eq!(seen.len(), 50);
    }

    #[test]
    fn senders_have_a_heavy_tail_bots_to_one_time_wallets() {
        let evs = all(&opts(1, 20_000));
        let n = evs.len() as u64;
        let mut per_wallet: HashMap<Wallet, u64> = HashMap::new();
        let mut kinds: HashMap<Sender, u64> = HashMap::new();
        for e in &evs {
            *per_wallet.entry(e.wallet).or_default() += 1;
            *kinds.entry(e.sender).or_default() += 1;
        }
        for (kind, p) in [
            (Sender::Bot, 0.25),
            (Sender::Returning, 0.60),
            (Sender::New, 0.15),
        ] {
            let got = kinds.get(&kind).copied().unwrap_or(0);
            assert!(
                (got as f64 - p * n as f64).abs() < six_sd(n, p),
                "{kind:?}: {got}"
            );
        }
        // The busiest bot takes 1/H_5 of the bots' quarter: about 2,190 a day.
        let h5: f64 = (1..=5).map(|k| 1.0 / k as f64).sum();
        let p = 0.25 / h5;
        let mut counts: Vec<u64> = per_wallet.values().copied().collect();
        counts.sort_unstable_by(|a, b| b.cmp(a));
        assert!(
            (counts[0] as f64 - p * n as f64).abs() < six_sd(n, p),
            "{counts:?}"
        );
        // Two bots send thousands a day: the second takes half the first one's share,
        // 1/(2·H_5) of a quarter, about 1,095 (sd 32), and the bots' counts lie many sd
        // apart (the third, about 730, at 9 sd), so the second largest count is that bot's.
        let p2 = 0.25 / (2.0 * h5);
        assert!(
            (counts[1] as f64 - p2 * n as f64).abs() < six_sd(n, p2),
            "{counts:?}"
        );
        // Most wallets send a handful: the model gives 96.7% of senders at 5 or fewer; a
        // uniform pool of 8,000 (2.5 each on average, Poisson) would give about 96% too, so
        // the head above is what shows the tail. (Not a statistical bound: a floor under the
        // model's figure, which the 6 sd checks here pin down.)
        let small = counts.iter().filter(|&&c| c <= 5).count() as f64 / counts.len() as f64;
        assert!(small > 0.95, "{small}");
        // The busiest returning wallet: the heaviest of the pool, weight 1/(1+5) of
        // Σ 1/(k+5) = 8.89, takes p = 1.87% of the returning events (about 225 of 12,000):
        // far below the bots, far above the median. Its count is Binomial(returning, p), and
        // the busiest one sends at least that many; a lighter wallet (weight at most 1/7)
        // passing mean + 6 sd of the heaviest is rarer still, so the maximum lies within 6 sd
        // of that mean but for a probability below 1e-8.
        let pool: Vec<f64> = (1..=40_000).map(|k| 1.0 / (k as f64 + 5.0)).collect();
        let returning = kinds[&Sender::Returning];
        let p = pool[0] / pool.iter().sum::<f64>();
        let busiest_returning = per_wallet
            .iter()
            .filter(|(w, _)| w.stream == POOL_STREAM)
            .map(|(_, &c)| c)
            .max()
            .unwrap_or(0);
        assert!(
            (busiest_returning as f64 - p * returning as f64).abs() < six_sd(returning, p),
            "{busiest_returning} against {:.0}",
            p * returning as f64
        );
        // Distinct senders: 5 bots, the returning wallets drawn, one per one-time event.
        let (mean, sd) = occupancy(&pool, returning);
        let want = 5.0 + mean + kinds[&Sender::New] as f64;
        let got = per_wallet.len() as f64;
        assert!((got - want).abs() < 6.0 * sd, "{got} vs {want:.0}");
    }

    #[test]
    fn chains_take_unequal_shares_and_have_names() {
        let evs = all(&opts(1, 20_000));
        let n = evs.len() as u64;
        for (chain, p) in [(0, 6.0 / 11.0), (1, 3.0 / 11.0), (2, 2.0 / 11.0)] {
            let got = evs.iter().filter(|e| e.chain == chain).count();
            assert!(
                (got as f64 - p * n as f64).abs() < six_sd(n, p),
                "chain {chain}: {got}"
            );
        }
        assert_eq!(
            (0..3).map(chain_name).collect::<Vec<_>>(),
            ["base", "arbitrum", "ethereum"]
        );
        assert_eq!(chain_name(8), "chain9");
        let ten = all(&ChainsOptions {
            chains: 10,
            ..opts(1, 20_000)
        });
        let seen: HashSet<u32> = ten.iter().map(|e| e.chain).collect();
        assert_eq!(seen, (0..10).collect());
    }

    #[test]
    fn times_follow_a_daily_cycle_in_order_with_one_percent_late() {
        // Five days: 100,000 events put 6 sd of the late count at 0.19%, so a 1.3% share fails.
        let o = opts(5, 20_000);
        let evs = all(&o);
        let mut late = 0u64;
        let mut last_place = i64::MIN;
        let mut hours = [[0u64; 24]; 5];
        for e in &evs {
            // Where the event stands in the stream: its time plus its lateness. These never
            // decrease and stay inside the event's day.
            let place = e.time_ms + e.late_ms as i64;
            assert!(place >= last_place, "out of order at {}", e.seq);
            last_place = place;
            let day_start = o.first_day_ms() + i64::from(e.day) * DAY_MS;
            let into = place - day_start;
            assert!((0..DAY_MS).contains(&into));
            hours[e.day as usize][(into / HOUR_MS as i64) as usize] += 1;
            if e.late_ms > 0 {
                late += 1;
                // A few seconds to a few hours.
                assert!((2_000..8_192_000).contains(&e.late_ms), "{}", e.late_ms);
            }
        }
        let n = evs.len() as u64;
        assert!(
            (late as f64 - 0.01 * n as f64).abs() < six_sd(n, 0.01),
            "{late}"
        );
        // Each hour gets its weight's share of a day's places, within one event at each end
        // of the hour (the places are evenly spaced in weighted time). A flat day would put
        // 833 in every hour; this one puts 459 at 04:00 and 1,217 at 15:00.
        let total: u64 = HOUR_WEIGHTS.iter().sum();
        for day in hours {
            for (h, &c) in day.iter().enumerate() {
                let want = 20_000.0 * HOUR_WEIGHTS[h] as f64 / total as f64;
                assert!((c as f64 - want).abs() <= 2.0, "hour {h}: {c} vs {want:.1}");
            }
        }
        // Some late events of the first hour land in the day before (a bucket of their own).
        let early = all(&opts(30, 2_000))
            .iter()
            .filter(|e| e.time_ms < o.first_day_ms() + i64::from(e.day) * DAY_MS)
            .count();
        assert!(early > 0);
    }

    #[test]
    fn hashes_are_unique_and_the_verbatim_fields_look_real() {
        let evs = all(&opts(2, 20_000));
        let hashes: HashSet<[u8; 66]> = evs.iter().map(ChainEvent::hash_bytes).collect();
        assert_eq!(hashes.len(), evs.len());
        let selectors: HashSet<&str> = METHODS.iter().map(|m| m.selector).collect();
        assert_eq!(METHODS.iter().map(|m| m.percent).sum::<u64>(), 100);
        let mut next_nonce: HashMap<Wallet, u64> = HashMap::new();
        let mut failed = 0;
        for e in &evs {
            let h = e.hash_bytes();
            assert!(h[2..].iter().all(|b| HEX.contains(b)));
            assert!(selectors.contains(e.method));
            let m = METHODS
                .iter()
                .find(|m| m.selector == e.method)
                .expect("known");
            assert!((m.gas.0..m.gas.1).contains(&e.gas));
            if m.payable_per_mille == 0 {
                assert_eq!(e.value, 0, "{}", e.method);
            }
            if m.to_contract {
                assert_eq!(e.to, e.contract_address());
            } else {
                assert_eq!(e.to.stream, ROUTER_STREAM);
            }
            let p = chain_params(e.chain);
            assert!((p.gas_price.0..p.gas_price.1).contains(&e.gas_price));
            // Rounding down, also before the anchor (late events of 2026-12-01).
            let block = p.block_at_anchor + (e.time_ms - BLOCK_ANCHOR_MS).div_euclid(p.block_ms);
            assert_eq!(e.block, block as u64);
            failed += u64::from(e.status == 0);
            // A wallet's nonce counts its transactions; a one-time wallet's is 0.
            match e.sender {
                Sender::New => assert_eq!(e.nonce, 0),
                _ => {
                    if let Some(&want) = next_nonce.get(&e.wallet) {
                        assert_eq!(e.nonce, want);
                    }
                    next_nonce.insert(e.wallet, e.nonce + 1);
                }
            }
        }
        let n = evs.len() as u64;
        assert!((failed as f64 - 0.02 * n as f64).abs() < six_sd(n, 0.02));
        // Payable calls carry ETH: deposit always, so its values are never all zero.
        assert!(evs
            .iter()
            .any(|e| e.method == "0xd0e30db0" && e.value >= 10_000_000_000_000));
        assert!(evs.iter().any(|e| e.value_as_number && e.value > 0));
    }

    #[test]
    fn io_errors_name_the_line() {
        struct Full;
        impl Write for Full {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(std::io::Error::new(
                    std::io::ErrorKind::StorageFull,
                    "disk full",
                ))
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let e = write_chains_jsonl(&opts(1, 10_000), &mut Full).expect_err("full");
        let msg = e.to_string();
        assert!(
            msg.contains("chains JSONL") && msg.contains("disk full"),
            "{msg}"
        );
    }
}
