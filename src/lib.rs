//! sketchdb: an embedded store of time-bucketed probabilistic sketches over an event stream.
//!
//! Start from the question: "have we seen X?" is a Bloom filter, "how many distinct?" a
//! HyperLogLog, "how many in both?" a Theta sketch, "how often?" a Count-Min sketch with Top-K,
//! "show me some" a reservoir. Every answer says which structure gave it and how wrong it may be.
//!
//! Layers, each depending only on the ones below it:
//! - [`hash`]: hashes an item once for every sketch it feeds.
//! - [`codec`]: the versioned, checksummed blob format every stored value uses.
//! - [`sketch`]: the five families, their guarantees, merging and encoding.
//! - [`gen`]: deterministic synthetic wallets and the reference text's streams (JSONL or
//!   store events, with their ground truth) for tests, benchmarks and demos.
//! - [`store`]: the durable, time-bucketed store of sketch sets and the raw event log.
//! - [`ingest`]: JSONL and CSV input to store events, all-or-nothing per input.
//! - [`query`]: the query language, from text to an answer with its bound.
//! - `shell`: the REPL over a store (with the default `cli` feature only).
//! - [`demo`]: the demo store and the cheat-sheet report.
//!
//! The types a service meets first are at the crate root: [`Store`], [`Config`], [`Event`],
//! [`Answer`] and the errors of each layer. Without default features (`default-features =
//! false`) the crate is the library alone: no argument parser, line editor or progress bar is
//! built.
//!
//! [`guide`] is docs/LIBRARY.md, whose examples are compiled and run as doc-tests.

pub mod codec;
pub mod demo;
pub mod gen;
pub mod hash;
pub mod ingest;
pub mod query;
#[cfg(feature = "cli")]
pub mod shell;
pub mod sketch;
pub mod store;

pub use ingest::IngestError;
pub use query::{Answer, QueryError, Row, Session, SyntaxError, Value};
pub use store::{BucketWidth, Config, Event, Slice, Store, StoreError, TimeRange};

pub use hash::{Item, ItemHashes};
pub use sketch::{
    BloomFilter, CountMin, Estimate, HyperLogLog, ItemSketch, Reservoir, ScalableBloom, Sketch,
    SketchConfig, SketchError, SketchKind, SketchSet, Theta,
};

#[doc = include_str!("../docs/LIBRARY.md")]
pub mod guide {}
