//! The raw event log: compact blocks (events one after another, each field varint- or
//! dictionary-coded) that are both the write-ahead log and the source of exact answers.
//!
//! A block holds up to [`BLOCK_EVENTS`] consecutive events (by sequence number), and is sealed
//! earlier if they reach [`BLOCK_BYTES`]. Per event:
//! the time as a zig-zag varint delta from the previous event (the first from 0); the item as a back-reference into
//! the block's own dictionary of items, or a literal (a `0x` + 40-lower-case-hex wallet as its 20
//! bytes, anything else as length + bytes); the tag ids as varints (the store's tag dictionary
//! maps them to `field:value`); the verbatim extra fields as length + bytes. Blocks are framed
//! and checksummed by the codec, so a damaged block is reported by its sequence number, never
//! decoded into wrong events.
//!
//! Layout 2 compresses the events with zstd after the 28-byte header, which stays plain so a
//! block's summary can be read without decompressing. The extra fields users keep (transaction
//! hashes, amounts, field names repeated on every line) are most of a block, and compression
//! takes a JSONL chain log from about 0.8× its input to about a third of that. Layout 3 also
//! packs the hex strings of the extra fields before compressing: a JSON string that is `0x` and
//! 40 or 64 lower-case hex digits (addresses, transaction hashes) becomes a marker byte and its
//! 20 or 32 bytes ([`pack_extra`]). Hex digits carry four bits a byte, which zstd
//! only gets back by Huffman coding, byte by byte; packed, a chain block is a fifth shorter
//! before compression (so compressing it takes that much less time) and 5% shorter after. The
//! markers are bytes that UTF-8 text never holds, so unpacking is exact and an older block
//! (whose extras are text) unpacks to itself.
//!
//! Layout 4 (written today) compresses three streams apart. A wallet's 20 bytes (a block holds
//! each wallet's once) and 32-byte packed strings (transaction hashes) are mostly random bytes:
//! zstd cannot shorten them, and spread between the events they cut its matches and skew its
//! literal statistics. They go, in event order, to the *unique* stream; 20-byte packed strings
//! of the extras (the addresses a chain event sends to, often repeated) to the *addresses*
//! stream; the events keep their markers. zstd passes over a stream of random bytes at gigabytes
//! a second and still shortens one that is not (hashes of zero-padded numbers). On a day of
//! chain events this made the log 9% smaller and its compression about a third cheaper
//! (`docs/STORAGE.md`, "Measured: varint tables, the log's streams apart"). Layouts 1 (the
//! events uncompressed), 2 and 3 are still read.
//!
//! This module only encodes and decodes blocks (a full block on the [`Finisher`]'s thread, so
//! that compressing it overlaps the filling of the next); where and when they are stored is the
//! store's business.

use super::model::Event;
use crate::codec::{self, CodecError};
use crate::sketch::wallet;
use std::sync::mpsc::{Receiver, Sender, SyncSender};
use std::sync::Arc;

/// Events per block: large enough that a block's header and frame cost well under a byte per
/// event, small enough that decoding one block for a narrow scan stays cheap. A flush writes
/// the partial block it has as a block of its own (blocks are never rewritten), so frequent
/// small flushes make many small blocks.
pub const BLOCK_EVENTS: usize = 4096;
/// A block is also sealed once its events take this many bytes, so that a block, and a sled
/// tree node of up to 17 of them, stays below the size sled would move out to an unsynced file
/// of its own (see `store::SEGMENT_BYTES`). Wallet events take about 27–41 bytes, so the event
/// count decides for them; long items or large extra fields hit this bound first.
pub const BLOCK_BYTES: usize = 192 << 10;
/// The blob kind of a log block in the codec frame.
pub const BLOCK_KIND: u8 = super::kinds::LOG.blob;
/// The block layout written: 4, the events compressed apart from their random values (layouts
/// 1, uncompressed, 2, compressed with the extras as text, and 3, the extras' hex packed within
/// the compressed events, are still read).
pub const BLOCK_VERSION: u16 = 4;
/// The layout whose packed values sit within the events, after their markers.
const INLINE_LAYOUT: u16 = 3;
/// The largest block body written or read back: a block is sealed at [`BLOCK_BYTES`], but
/// its last event may be of any size, up to what a length field of the frame can say.
const MAX_BODY: usize = u32::MAX as usize;
/// The blob kind of a block's index entry.
const INDEX_KIND: u8 = super::kinds::INDEX.blob;
pub use super::model::MAX_TAGS;

const LITERAL_HEX: u8 = 1;
const LITERAL_RAW: u8 = 2;

/// In a packed extra, the marker of a string of 40 hex digits (an address) and of 64 (a
/// transaction or block hash). Both are bytes UTF-8 never uses, so they cannot be text.
const PACKED_HEX_20: u8 = 0xF5;
const PACKED_HEX_32: u8 = 0xF6;

/// Where [`pack_extra`] writes the bytes of a packed string: after its marker (layout 3, which
/// tests still write as older stores hold it), or apart, 20-byte values to `addresses` and
/// 32-byte ones to `unique` (layout 4).
enum PackInto<'v> {
    #[cfg(test)]
    Inline,
    Apart {
        addresses: &'v mut Vec<u8>,
        unique: &'v mut Vec<u8>,
    },
}

/// Appends `extra` (JSON text) to `out` with every `"0x…"` string of exactly 40 or 64
/// lower-case hex digits, quotes included, replaced by its marker, its bytes going where `into`
/// says. Any other text (upper-case digits, other lengths, hex that is not a whole string) stays
/// as it is.
fn pack_extra(extra: &[u8], out: &mut Vec<u8>, into: &mut PackInto<'_>) {
    let mut copied = 0;
    let mut from = 0;
    let mut packed = [0u8; 32];
    // Found by their `x`, which JSON text rarely holds elsewhere (hex digits, numbers and most
    // field names have none): a few byte searches per event instead of one per quote.
    while let Some(found) = memchr::memchr(b'x', &extra[from..]) {
        let x = from + found;
        from = x + 1;
        // The string's opening quote must not be the last packed string's closing one.
        if x < copied + 2 || extra[x - 2..x] != *b"\"0" {
            continue;
        }
        let at = x - 2;
        let digits = &extra[x + 1..];
        for (marker, bytes) in [(PACKED_HEX_20, 20), (PACKED_HEX_32, 32)] {
            let n = 2 * bytes;
            if digits.get(n) == Some(&b'"')
                && crate::sketch::wallet::pack_digits(&digits[..n], &mut packed[..bytes])
            {
                out.extend_from_slice(&extra[copied..at]);
                out.push(marker);
                let value = &packed[..bytes];
                match into {
                    #[cfg(test)]
                    PackInto::Inline => out.extend_from_slice(value),
                    PackInto::Apart { addresses, .. } if bytes == 20 => {
                        addresses.extend_from_slice(value)
                    }
                    PackInto::Apart { unique, .. } => unique.extend_from_slice(value),
                }
                copied = at + 3 + n + 1;
                break;
            }
        }
    }
    out.extend_from_slice(&extra[copied..]);
}

/// Where a block's packed values are read from: after their markers (layouts 1 to 3; 1 and 2
/// hold none), or from the block's own streams (layout 4), read in event order.
enum Values<'a> {
    Inline,
    Apart {
        addresses: Reader<'a>,
        unique: Reader<'a>,
    },
}

impl<'a> Values<'a> {
    /// Layout 4's streams, each read from its start.
    fn apart(addresses: &'a [u8], unique: &'a [u8]) -> Self {
        Values::Apart {
            addresses: Reader {
                bytes: addresses,
                pos: 0,
            },
            unique: Reader {
                bytes: unique,
                pos: 0,
            },
        }
    }

    /// Checks that the streams held nothing more than the events took.
    fn finish(&self) -> Result<(), String> {
        match self {
            Values::Inline => Ok(()),
            Values::Apart { addresses, unique } => addresses
                .finish()
                .map_err(|e| format!("addresses: {e}"))
                .and(unique.finish().map_err(|e| format!("unique values: {e}"))),
        }
    }
}

/// The text [`pack_extra`] packed: `packed` itself if it holds no marker (every extra of
/// layouts 1 and 2), else written into `out` with each marker and its bytes (from where `values`
/// says) back as `"0x…"`.
fn unpack_extra<'b>(
    packed: &'b [u8],
    values: &mut Values<'_>,
    out: &'b mut Vec<u8>,
) -> Result<&'b [u8], String> {
    let Some(first) = memchr::memchr2(PACKED_HEX_20, PACKED_HEX_32, packed) else {
        return Ok(packed);
    };
    out.clear();
    let mut rest = packed;
    let mut next = Some(first);
    while let Some(at) = next {
        let bytes = if rest[at] == PACKED_HEX_20 { 20 } else { 32 };
        out.extend_from_slice(&rest[..at]);
        out.extend_from_slice(b"\"0x");
        let after = match values {
            Values::Inline => {
                let value = rest.get(at + 1..at + 1 + bytes).ok_or_else(|| {
                    format!("a packed hex string cut short ({} bytes)", rest.len() - at)
                })?;
                crate::sketch::wallet::unpack_digits(value, out);
                at + 1 + bytes
            }
            Values::Apart { addresses, unique } => {
                let stream = if bytes == 20 { addresses } else { unique };
                let value = stream
                    .take(bytes)
                    .map_err(|e| format!("a packed hex string's {bytes} bytes: {e}"))?;
                crate::sketch::wallet::unpack_digits(value, out);
                at + 1
            }
        };
        out.push(b'"');
        rest = &rest[after..];
        next = memchr::memchr2(PACKED_HEX_20, PACKED_HEX_32, rest);
    }
    out.extend_from_slice(rest);
    Ok(out)
}

/// An event as decoded from a block, borrowing the block's bytes.
#[derive(Clone, Copy, Debug)]
pub struct LogEvent<'a> {
    pub seq: u64,
    pub time: i64,
    pub item: ItemRef<'a>,
    tags: [u32; MAX_TAGS],
    tag_count: u8,
    pub extra: &'a [u8],
}

impl LogEvent<'_> {
    pub fn tag_ids(&self) -> &[u32] {
        &self.tags[..self.tag_count as usize]
    }
}

/// An item as stored: a wallet's 20 bytes or the raw value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ItemRef<'a> {
    Wallet(&'a [u8]),
    Raw(&'a [u8]),
}

impl<'a> ItemRef<'a> {
    /// The compact form of an item value, for encoding and for comparing with stored items
    /// without decoding them.
    pub fn of(item: &'a str, buf: &'a mut [u8; 20]) -> ItemRef<'a> {
        match wallet_bytes(item, buf) {
            true => ItemRef::Wallet(&buf[..]),
            false => ItemRef::Raw(item.as_bytes()),
        }
    }

    /// The item's text, as it was ingested.
    pub fn to_text(&self) -> String {
        match self {
            ItemRef::Wallet(b) => wallet::unpack_string(b),
            ItemRef::Raw(b) => String::from_utf8_lossy(b).into_owned(),
        }
    }
}

/// Parses `0x` + 40 lower-case hex digits into 20 bytes (see [`wallet::pack`]).
fn wallet_bytes(item: &str, out: &mut [u8; 20]) -> bool {
    wallet::pack(item, out)
}

/// Slots of the block builder's item dictionary: a power of two at least twice
/// [`BLOCK_EVENTS`], so a block's distinct items rarely share one.
const DICTIONARY_SLOTS: usize = 2 * BLOCK_EVENTS;

/// One slot of the dictionary: where a literal item sits in the block body.
#[derive(Clone, Copy, Default)]
struct Slot {
    /// The block (`BlockBuilder::generation`) that wrote it; any other is an empty slot.
    generation: u32,
    form: u8,
    index: u32,
    at: u32,
    len: u32,
    fingerprint: u64,
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// A block's summary, kept in its index entry so range scans can skip blocks without reading
/// them, with where the block is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockInfo {
    pub first_seq: u64,
    pub count: u32,
    pub min_time: i64,
    pub max_time: i64,
    /// `None` for a block under its `L` key (stores before format 6) and for the summary a
    /// block carries in its own header.
    pub place: Option<Place>,
}

/// Where a block's bytes are in the log files: file `file` (named after the first event it
/// holds), `len` bytes from `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    pub file: u64,
    pub offset: u64,
    pub len: u32,
}

/// The name of log file `file`: the first event it holds, zero-padded so names sort as numbers.
pub fn file_name(file: u64) -> String {
    format!("{file:020}.log")
}

/// The number of a log file named by [`file_name`]; `None` for any other name.
pub fn file_number(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".log")?;
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

impl BlockInfo {
    pub fn end_seq(&self) -> u64 {
        self.first_seq + u64::from(self.count)
    }

    /// The four fields, little-endian: both the index entry's payload and a block's header.
    fn header(&self) -> [u8; 28] {
        let mut h = [0u8; 28];
        h[..8].copy_from_slice(&self.first_seq.to_le_bytes());
        h[8..12].copy_from_slice(&self.count.to_le_bytes());
        h[12..20].copy_from_slice(&self.min_time.to_le_bytes());
        h[20..].copy_from_slice(&self.max_time.to_le_bytes());
        h
    }

    /// The index entry: the header, then the place (file, offset, length) if the block is in
    /// a log file. The length tells the two apart.
    pub fn encode(&self) -> Result<Vec<u8>, CodecError> {
        let mut payload = self.header().to_vec();
        if let Some(p) = self.place {
            payload.extend_from_slice(&p.file.to_le_bytes());
            payload.extend_from_slice(&p.offset.to_le_bytes());
            payload.extend_from_slice(&p.len.to_le_bytes());
        }
        codec::frame(INDEX_KIND, &payload)
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        let p = codec::unframe(INDEX_KIND, bytes).map_err(|e| e.to_string())?;
        let mut r = Reader { bytes: p, pos: 0 };
        let mut info = BlockInfo {
            first_seq: r.u64_le()?,
            count: r.u32_le()?,
            min_time: r.u64_le()? as i64,
            max_time: r.u64_le()? as i64,
            place: None,
        };
        if r.pos < p.len() {
            info.place = Some(Place {
                file: r.u64_le()?,
                offset: r.u64_le()?,
                len: r.u32_le()?,
            });
        }
        r.finish()?;
        Ok(info)
    }

    /// The block for messages: "log block at event N (C events, in log/F bytes a..b)".
    pub fn label(&self) -> String {
        match self.place {
            Some(p) => format!(
                "log block at event {} ({} events, in log/{} bytes {}..{})",
                self.first_seq,
                self.count,
                file_name(p.file),
                p.offset,
                p.offset + u64::from(p.len)
            ),
            None => format!("log block at event {}", self.first_seq),
        }
    }
}

/// Builds one block event by event, so ingest encodes each event once instead of keeping a copy
/// for later. Items repeated within the block are found by their MurmurHash3 word (computed at
/// ingest anyway) and confirmed byte for byte, so a hash collision only costs a literal.
pub struct BlockBuilder {
    first_seq: u64,
    count: u32,
    min_time: i64,
    max_time: i64,
    prev_time: i64,
    /// The events, compressed when the block is framed.
    body: Vec<u8>,
    /// Packed 20-byte strings of the extras, in event order, compressed on their own.
    addresses: Vec<u8>,
    /// Wallet literals' 20 bytes and packed 32-byte strings, in event order, compressed on
    /// their own.
    unique: Vec<u8>,
    /// Literal items of this block, direct-mapped by fingerprint: a fixed table with one probe,
    /// no growth and no clearing between blocks (slots of older generations count as empty). A
    /// slot taken by another item only costs a repeated literal, never a wrong reference.
    dictionary: Vec<Slot>,
    generation: u32,
    next_index: u64,
    /// An event's packed extra, before its length is known (kept between events).
    packed: Vec<u8>,
}

impl BlockBuilder {
    pub fn new(first_seq: u64) -> Self {
        BlockBuilder {
            first_seq,
            count: 0,
            min_time: i64::MAX,
            max_time: i64::MIN,
            prev_time: 0,
            body: Vec::with_capacity(BLOCK_EVENTS * 28),
            addresses: Vec::new(),
            unique: Vec::new(),
            dictionary: vec![Slot::default(); DICTIONARY_SLOTS],
            generation: 1,
            next_index: 0,
            packed: Vec::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// Empties the builder for a new block starting at `first_seq`, keeping its buffers: a fresh
    /// dictionary of 4,096 items is a few hundred KB that the allocator would map and the kernel
    /// zero for every block (9% of an import's store thread in the profile).
    pub fn reset(&mut self, first_seq: u64) {
        self.first_seq = first_seq;
        self.count = 0;
        self.min_time = i64::MAX;
        self.max_time = i64::MIN;
        self.prev_time = 0;
        self.body.clear();
        self.addresses.clear();
        self.unique.clear();
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 {
            // Once every 2^32 blocks: generation 0 is the empty slots' own.
            self.dictionary.fill(Slot::default());
            self.generation = 1;
        }
        self.next_index = 0;
    }

    /// Moves the events so far out into a sealed builder of their own (no dictionary) and
    /// empties this one for the block after them, keeping its dictionary (see [`reset`]).
    ///
    /// [`reset`]: BlockBuilder::reset
    pub fn take_sealed(&mut self) -> BlockBuilder {
        let taken = |v: &mut Vec<u8>| std::mem::replace(v, Vec::with_capacity(v.capacity()));
        let sealed = BlockBuilder {
            first_seq: self.first_seq,
            count: self.count,
            min_time: self.min_time,
            max_time: self.max_time,
            prev_time: self.prev_time,
            body: taken(&mut self.body),
            addresses: taken(&mut self.addresses),
            unique: taken(&mut self.unique),
            dictionary: Vec::new(),
            generation: self.generation,
            next_index: self.next_index,
            packed: Vec::new(),
        };
        let next = self.next_seq();
        self.reset(next);
        sealed
    }

    /// Whether the block should be sealed: [`BLOCK_EVENTS`] events or [`BLOCK_BYTES`] bytes.
    pub fn is_full(&self) -> bool {
        self.count as usize >= BLOCK_EVENTS || self.raw_len() >= BLOCK_BYTES
    }

    /// The bytes of its streams before compression.
    fn raw_len(&self) -> usize {
        self.body.len() + self.addresses.len() + self.unique.len()
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The sequence number the next pushed event gets.
    pub fn next_seq(&self) -> u64 {
        self.first_seq + u64::from(self.count)
    }

    /// Appends one event; `fingerprint` is any stable 64-bit hash of the item.
    pub fn push(&mut self, time: i64, item: &str, fingerprint: u64, tags: &[u32], extra: &str) {
        self.count += 1;
        self.min_time = self.min_time.min(time);
        self.max_time = self.max_time.max(time);
        put_varint(&mut self.body, zigzag(time.wrapping_sub(self.prev_time)));
        self.prev_time = time;
        let mut buf = [0u8; 20];
        let (form, compact): (u8, &[u8]) = if wallet_bytes(item, &mut buf) {
            (LITERAL_HEX, &buf)
        } else {
            (LITERAL_RAW, item.as_bytes())
        };
        // Two candidate slots from two parts of the fingerprint: with one, two items of a block
        // that share a slot would keep evicting each other and both be written out in full.
        let candidates = [
            (fingerprint as usize) & (DICTIONARY_SLOTS - 1),
            ((fingerprint >> 32) as usize) & (DICTIONARY_SLOTS - 1),
        ];
        // A sealed builder has no dictionary; it takes no more events, but stay safe anyway.
        let slots = candidates.map(|at| self.dictionary.get(at).copied().unwrap_or_default());
        let live = |slot: &Slot| slot.generation == self.generation;
        // A wallet literal's bytes are in the unique stream, any other literal's in the body.
        let stored = if form == LITERAL_HEX {
            &self.unique
        } else {
            &self.body
        };
        let known = slots.iter().find_map(|slot| {
            (live(slot)
                && slot.fingerprint == fingerprint
                && slot.form == form
                && stored.get(slot.at as usize..(slot.at + slot.len) as usize) == Some(compact))
            .then_some(slot.index)
        });
        // Where a new literal goes: a free candidate, else the second (the first keeps the
        // older item).
        let slot_at = if live(&slots[0]) {
            candidates[1]
        } else {
            candidates[0]
        };
        match known {
            Some(index) => put_varint(&mut self.body, u64::from(index) + 1),
            None => {
                self.body.push(0);
                self.body.push(form);
                let at = if form == LITERAL_RAW {
                    put_varint(&mut self.body, compact.len() as u64);
                    let at = self.body.len();
                    self.body.extend_from_slice(compact);
                    at
                } else {
                    let at = self.unique.len();
                    self.unique.extend_from_slice(compact);
                    at
                };
                // Offsets fit u32: a block is sealed at BLOCK_BYTES, and one event's item
                // longer than 4 GiB cannot arrive (ingest reads it as one line).
                if let (Some(slot), Ok(at), Ok(len), Ok(index)) = (
                    self.dictionary.get_mut(slot_at),
                    u32::try_from(at),
                    u32::try_from(compact.len()),
                    u32::try_from(self.next_index),
                ) {
                    *slot = Slot {
                        generation: self.generation,
                        form,
                        index,
                        at,
                        len,
                        fingerprint,
                    };
                }
                self.next_index += 1;
            }
        }
        put_varint(&mut self.body, tags.len() as u64);
        for &t in tags {
            put_varint(&mut self.body, u64::from(t));
        }
        self.packed.clear();
        let mut into = PackInto::Apart {
            addresses: &mut self.addresses,
            unique: &mut self.unique,
        };
        pack_extra(extra.as_bytes(), &mut self.packed, &mut into);
        put_varint(&mut self.body, self.packed.len() as u64);
        self.body.extend_from_slice(&self.packed);
    }

    /// Frees what only appending needs (the item dictionary, spare capacity): a sealed block
    /// may wait in memory for a long import's commit.
    pub fn seal(&mut self) {
        self.dictionary = Vec::new();
        self.packed = Vec::new();
        self.body.shrink_to_fit();
        self.addresses.shrink_to_fit();
        self.unique.shrink_to_fit();
    }

    /// The summary and streams (uncompressed) of the events so far, for a snapshot of a block
    /// not yet written ([`decode_pending`] reads it).
    pub(crate) fn pending(&self) -> (BlockInfo, Pending) {
        let streams = Pending {
            body: self.body.clone(),
            addresses: self.addresses.clone(),
            unique: self.unique.clone(),
        };
        (self.info(), streams)
    }

    fn info(&self) -> BlockInfo {
        BlockInfo {
            first_seq: self.first_seq,
            count: self.count,
            min_time: if self.count == 0 { 0 } else { self.min_time },
            max_time: if self.count == 0 { 0 } else { self.max_time },
            place: None,
        }
    }

    /// The framed block and its summary. The frame holds the header, then the compressed events
    /// and the compressed addresses each after its length (a varint; 0 for no addresses), then
    /// the compressed unique values to the end (nothing for none).
    pub fn finish(&self) -> Result<(Vec<u8>, BlockInfo), CodecError> {
        let info = self.info();
        if self.raw_len() > MAX_BODY {
            return Err(CodecError::Serialize(format!(
                "a log block of {} bytes (events over 4 GiB)",
                self.raw_len()
            )));
        }
        let body = codec::compress(&self.body)?;
        let stream = |raw: &[u8]| match raw {
            [] => Ok(Vec::new()),
            raw => codec::compress(raw),
        };
        let addresses = stream(&self.addresses)?;
        let unique = stream(&self.unique)?;
        let (mut body_len, mut addresses_len) = (Vec::new(), Vec::new());
        put_varint(&mut body_len, body.len() as u64);
        put_varint(&mut addresses_len, addresses.len() as u64);
        let parts: [&[u8]; 6] = [
            &info.header(),
            &body_len,
            &body,
            &addresses_len,
            &addresses,
            &unique,
        ];
        Ok((
            codec::frame_versioned(BLOCK_KIND, BLOCK_VERSION, &parts)?,
            info,
        ))
    }
}

/// Sealed blocks the finisher may be framing while the writer fills the next: a chain event's
/// block fills in under a millisecond of the writer's time, and on two cores shared by three
/// busy threads the finisher may wait for a core for longer than that. With one block ahead,
/// the writer waited for it 180 ms of the 1.2 s of a 500k-event ingest; a block's events and
/// frame take at most about half a megabyte.
pub const FRAMED_AHEAD: usize = 8;

/// A framed block and its summary, as [`BlockBuilder::finish`] makes them.
pub type Framed = Result<(Vec<u8>, BlockInfo), CodecError>;

/// A sealed block on its way to the files: its events, and the framed block being made from
/// them on the [`Finisher`]'s thread (if one took it).
pub struct SealedBlock {
    block: Arc<BlockBuilder>,
    framed: Option<Receiver<Framed>>,
}

impl SealedBlock {
    /// A block to be framed when it is written, on the writer's thread.
    pub fn new(mut block: BlockBuilder) -> Self {
        block.seal();
        SealedBlock {
            block: Arc::new(block),
            framed: None,
        }
    }

    pub fn block(&self) -> &BlockBuilder {
        &self.block
    }

    /// The framed block: the finisher's, waiting for it if need be, or made here if no
    /// finisher took the block or its thread is gone. Taken once; a second call frames anew.
    pub fn framed(&mut self) -> Framed {
        match self.framed.take().map(|rx| rx.recv()) {
            Some(Ok(framed)) => framed,
            _ => self.block.finish(),
        }
    }
}

/// Frames (compresses) sealed blocks on a thread of its own, so that a long ingest's store
/// thread does not spend a third of its time in zstd: on two cores the parser and the store
/// thread each keep one busy, and compression fills what the parser leaves. The blocks are still
/// written, in order, by the store thread; only the pure work of framing moves.
pub struct Finisher {
    jobs: Sender<(Arc<BlockBuilder>, SyncSender<Framed>)>,
}

impl Finisher {
    /// Starts the thread; `None` if the system refuses one (blocks are then framed in place).
    /// The thread ends when the finisher is dropped.
    pub fn start() -> Option<Finisher> {
        let (jobs, rx) = std::sync::mpsc::channel::<(Arc<BlockBuilder>, SyncSender<Framed>)>();
        std::thread::Builder::new()
            .name("sketchdb-log".into())
            .spawn(move || {
                for (block, done) in rx {
                    // The taker may have given up (an import rolled back): nothing to tell.
                    let _ = done.send(block.finish());
                }
            })
            .ok()?;
        Some(Finisher { jobs })
    }

    /// Seals `block` and starts framing it; framed in place later if the thread is gone.
    pub fn submit(&self, block: BlockBuilder) -> SealedBlock {
        let mut sealed = SealedBlock::new(block);
        let (done, framed) = std::sync::mpsc::sync_channel(1);
        if self.jobs.send((Arc::clone(&sealed.block), done)).is_ok() {
            sealed.framed = Some(framed);
        }
        sealed
    }
}

/// Encodes consecutive events (the first has sequence number `first_seq`); `tag_ids[i]` are the
/// dictionary ids of event i's tags. Returns the framed block and its summary.
pub fn encode_block(
    first_seq: u64,
    events: &[Event],
    tag_ids: &[Vec<u32>],
) -> Result<(Vec<u8>, BlockInfo), CodecError> {
    let mut b = BlockBuilder::new(first_seq);
    for (e, tags) in events.iter().zip(tag_ids) {
        let fingerprint = crate::hash::murmur(e.item.as_bytes())[0];
        b.push(e.time, &e.item, fingerprint, tags, &e.extra);
    }
    b.finish()
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.bytes.len());
        match end {
            Some(end) => {
                let s = &self.bytes[self.pos..end];
                self.pos = end;
                Ok(s)
            }
            None => Err(format!("truncated at byte {}", self.pos)),
        }
    }

    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn u32_le(&mut self) -> Result<u32, String> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64_le(&mut self) -> Result<u64, String> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    #[inline]
    fn varint(&mut self) -> Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(format!("varint too long at byte {}", self.pos))
    }

    fn finish(&self) -> Result<(), String> {
        if self.pos == self.bytes.len() {
            Ok(())
        } else {
            Err(format!("{} trailing bytes", self.bytes.len() - self.pos))
        }
    }
}

/// Decodes a framed block, calling `each` for every event in order. Any inconsistency is an
/// error (with the byte position); `each` sees no event of a block that fails its checksum.
pub fn decode_block(bytes: &[u8], each: impl FnMut(&LogEvent<'_>)) -> Result<BlockInfo, String> {
    decode_block_as(bytes, None, each)
}

/// [`decode_block`] of the block `expected` describes: a block whose header names other events
/// is an error before any event is passed (it is not the block the index points at).
pub fn decode_block_expecting(
    bytes: &[u8],
    expected: &BlockInfo,
    each: impl FnMut(&LogEvent<'_>),
) -> Result<BlockInfo, String> {
    decode_block_as(bytes, Some(expected), each)
}

/// The summary in a block's header, after checking the block's frame (not its events).
pub fn block_header(bytes: &[u8]) -> Result<BlockInfo, String> {
    let (_, payload) =
        codec::unframe_any(BLOCK_KIND, BLOCK_VERSION, bytes).map_err(|e| e.to_string())?;
    read_header(&mut Reader {
        bytes: payload,
        pos: 0,
    })
}

fn read_header(r: &mut Reader<'_>) -> Result<BlockInfo, String> {
    Ok(BlockInfo {
        first_seq: r.u64_le()?,
        count: r.u32_le()?,
        min_time: r.u64_le()? as i64,
        max_time: r.u64_le()? as i64,
        place: None,
    })
}

fn decode_block_as(
    bytes: &[u8],
    expected: Option<&BlockInfo>,
    each: impl FnMut(&LogEvent<'_>),
) -> Result<BlockInfo, String> {
    let (version, payload) =
        codec::unframe_any(BLOCK_KIND, BLOCK_VERSION, bytes).map_err(|e| e.to_string())?;
    let mut r = Reader {
        bytes: payload,
        pos: 0,
    };
    let info = read_header(&mut r)?;
    if let Some(e) = expected.filter(|e| (e.first_seq, e.count) != (info.first_seq, info.count)) {
        return Err(format!(
            "holds events {} to {} where the index expects {} to {}",
            info.first_seq,
            info.end_seq(),
            e.first_seq,
            e.end_seq()
        ));
    }
    if version == codec::FORMAT_VERSION {
        return decode_body(info, &payload[r.pos..], Values::Inline, each);
    }
    if version <= INLINE_LAYOUT {
        let body = codec::decompress(&payload[r.pos..], MAX_BODY).map_err(|e| e.to_string())?;
        return decode_body(info, &body, Values::Inline, each);
    }
    let n = r.varint()? as usize;
    let at = r.pos;
    let body =
        codec::decompress(r.take(n)?, MAX_BODY).map_err(|e| format!("events at byte {at}: {e}"))?;
    let stream = |bytes: &[u8], at: usize, name: &str| match bytes {
        [] => Ok(Vec::new()),
        bytes => {
            codec::decompress(bytes, MAX_BODY).map_err(|e| format!("{name} at byte {at}: {e}"))
        }
    };
    let n = r.varint()? as usize;
    let at = r.pos;
    let addresses = stream(r.take(n)?, at, "addresses")?;
    let unique = stream(&payload[r.pos..], r.pos, "unique values")?;
    let values = Values::apart(&addresses, &unique);
    decode_body(info, &body, values, each)
}

/// The streams of a block not yet written, uncompressed ([`BlockBuilder::pending`]).
#[derive(Clone, Debug, Default)]
pub(crate) struct Pending {
    body: Vec<u8>,
    addresses: Vec<u8>,
    unique: Vec<u8>,
}

/// Decodes a block not yet written from its streams ([`BlockBuilder::pending`]).
pub(crate) fn decode_pending(
    info: BlockInfo,
    pending: &Pending,
    each: impl FnMut(&LogEvent<'_>),
) -> Result<BlockInfo, String> {
    let values = Values::apart(&pending.addresses, &pending.unique);
    decode_body(info, &pending.body, values, each)
}

/// Decodes the events of a block whose header says `info`, its wallets' bytes and packed
/// strings' values read from where `values` says.
fn decode_body(
    info: BlockInfo,
    body: &[u8],
    mut values: Values<'_>,
    mut each: impl FnMut(&LogEvent<'_>),
) -> Result<BlockInfo, String> {
    let mut r = Reader {
        bytes: body,
        pos: 0,
    };
    let mut dictionary: Vec<ItemRef<'_>> = Vec::new();
    let mut prev = 0i64;
    let mut extra_text = Vec::new();
    for i in 0..u64::from(info.count) {
        let time = prev.wrapping_add(unzigzag(r.varint()?));
        prev = time;
        let item = match r.varint()? {
            0 => {
                let literal = match r.u8()? {
                    LITERAL_HEX => ItemRef::Wallet(match &mut values {
                        Values::Inline => r.take(20)?,
                        Values::Apart { unique, .. } => unique
                            .take(20)
                            .map_err(|e| format!("a wallet's 20 bytes: {e}"))?,
                    }),
                    LITERAL_RAW => {
                        let n = r.varint()? as usize;
                        ItemRef::Raw(r.take(n)?)
                    }
                    other => return Err(format!("unknown item form {other} at byte {}", r.pos)),
                };
                dictionary.push(literal);
                literal
            }
            back => *dictionary
                .get((back - 1) as usize)
                .ok_or_else(|| format!("item back-reference {back} out of range"))?,
        };
        let n = r.varint()? as usize;
        if n > MAX_TAGS {
            return Err(format!("{n} tags on one event"));
        }
        let mut tags = [0u32; MAX_TAGS];
        for t in tags.iter_mut().take(n) {
            *t = u32::try_from(r.varint()?).map_err(|_| "tag id out of range".to_string())?;
        }
        let extra_len = r.varint()? as usize;
        let at = r.pos;
        let packed = r.take(extra_len)?;
        let extra = unpack_extra(packed, &mut values, &mut extra_text)
            .map_err(|e| format!("{e} at byte {at}"))?;
        each(&LogEvent {
            seq: info.first_seq.wrapping_add(i),
            time,
            item,
            tags,
            tag_count: n as u8,
            extra,
        });
    }
    r.finish()?;
    values.finish()?;
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gen::wallet_address;

    fn sample_events() -> (Vec<Event>, Vec<Vec<u32>>) {
        let mut events = Vec::new();
        let mut tags = Vec::new();
        for i in 0..1_000u64 {
            let item = match i % 4 {
                0 => wallet_address(1, i % 37),
                1 => "0xABCDEF0123456789abcdef0123456789abcdef01".to_string(),
                2 => format!("user {i} with spaces"),
                _ => wallet_address(1, i),
            };
            let mut e = Event::new(
                1_700_000_000_000 + (i as i64 * 7919) % 100_000 - 50_000,
                item,
                &[],
            );
            if i % 3 == 0 {
                e.extra = format!("{{\"amount\":{i}}}");
            } else if i % 3 == 1 {
                // What chain lines carry: a transaction hash and addresses (packed), and hex
                // that must stay text (upper case, another length).
                e.extra = format!(
                    "{{\"hash\":\"0x{:064x}\",\"to\":\"{}\",\"from\":\"0x{:040X}\",\"method\":\"0x{:08x}\"}}",
                    u128::from(i) * 0x9e37_79b9_7f4a_7c15,
                    wallet_address(4, i),
                    i,
                    i
                );
            }
            events.push(e);
            tags.push((0..(i % 3) as u32).collect());
        }
        (events, tags)
    }

    type Decoded = (u64, i64, String, Vec<u32>, Vec<u8>);

    /// A block's summary and its events as owned values.
    fn decoded(blob: &[u8]) -> (BlockInfo, Vec<Decoded>) {
        let mut out = Vec::new();
        let info = decode_block(blob, |e| {
            out.push((
                e.seq,
                e.time,
                e.item.to_text(),
                e.tag_ids().to_vec(),
                e.extra.to_vec(),
            ))
        })
        .expect("decode");
        (info, out)
    }

    #[test]
    fn blocks_round_trip_exactly() {
        let (events, tags) = sample_events();
        let (blob, info) = encode_block(500, &events, &tags).expect("encode");
        let (decoded, back) = decoded(&blob);
        assert_eq!(decoded, info);
        assert_eq!(info.count, 1_000);
        assert_eq!(back.len(), events.len());
        for (i, (seq, time, item, t, extra)) in back.into_iter().enumerate() {
            assert_eq!(seq, 500 + i as u64);
            assert_eq!(time, events[i].time);
            assert_eq!(item, events[i].item);
            assert_eq!(t, tags[i]);
            assert_eq!(extra, events[i].extra.as_bytes());
        }
        let idx = BlockInfo::decode(&info.encode().expect("encode")).expect("decode");
        assert_eq!(idx, info);
    }

    #[test]
    fn a_block_taken_out_and_framed_on_the_finisher_is_the_block_framed_in_place() {
        let (events, tags) = sample_events();
        let (in_place, _) = encode_block(500, &events, &tags).expect("encode");
        let mut builder = BlockBuilder::new(500);
        let mut framed = Vec::new();
        let finisher = Finisher::start().expect("a thread");
        for (i, (e, t)) in events.iter().zip(&tags).enumerate() {
            let fingerprint = crate::hash::murmur(e.item.as_bytes())[0];
            builder.push(e.time, &e.item, fingerprint, t, &e.extra);
            if i == 599 {
                framed.push(finisher.submit(builder.take_sealed()));
            }
        }
        // The builder goes on where the taken block ended, with its dictionary reset.
        assert_eq!((builder.first_seq, builder.len()), (1_100, 400));
        framed.push(SealedBlock::new(builder.take_sealed()));
        let mut back = Vec::new();
        for sealed in &mut framed {
            back.extend(decoded(&sealed.framed().expect("framed").0).1);
        }
        assert_eq!(back, decoded(&in_place).1);
        // The finisher's result is taken once; asked again (a retried write), the block is
        // framed in place, to the same bytes.
        let again = framed[0].framed().expect("framed again").0;
        assert_eq!(decoded(&again).1, back[..600]);
    }

    #[test]
    fn wallets_cost_twenty_bytes_and_repeats_almost_nothing() {
        let events: Vec<Event> = (0..4_096u64)
            .map(|i| {
                Event::new(
                    1_700_000_000_000 + i as i64 * 20,
                    wallet_address(2, i % 500),
                    &[],
                )
            })
            .collect();
        let tags = vec![vec![1u32]; events.len()];
        let (blob, _) = encode_block(0, &events, &tags).expect("encode");
        let per_event = blob.len() as f64 / events.len() as f64;
        // 500 literals of 22 bytes + 4,096 × (time 1 + item ref ≤ 2 + tags 2 + extra 1).
        println!("4,096 events over 500 wallets: {per_event:.3} bytes per event");
        assert!(per_event < 9.0, "{per_event} bytes per event");
    }

    #[test]
    fn damage_is_an_error_never_wrong_events() {
        let (events, tags) = sample_events();
        let (blob, _) = encode_block(0, &events, &tags).expect("encode");
        for i in (0..blob.len()).step_by(97) {
            let mut bad = blob.clone();
            bad[i] ^= 0x20;
            let mut seen = 0;
            assert!(decode_block(&bad, |_| seen += 1).is_err(), "byte {i}");
            assert_eq!(seen, 0);
        }
        assert!(decode_block(&blob[..blob.len() / 2], |_| {}).is_err());
    }

    /// A block body as an older layout wrote it. Layouts 1 and 2: every item a raw literal,
    /// every extra as its text. Layout 3: each item's first sight a literal (a wallet's 20 bytes
    /// after its marker), later ones back-references (found by an exact map here, so never fewer
    /// than the builder's two-slot table found), extras packed with every value after its marker.
    fn older_body(events: &[Event], tags: &[Vec<u32>], layout: u16) -> Vec<u8> {
        let mut body = Vec::new();
        let mut prev = 0i64;
        let mut seen = std::collections::HashMap::new();
        for (e, t) in events.iter().zip(tags) {
            put_varint(&mut body, zigzag(e.time.wrapping_sub(prev)));
            prev = e.time;
            let next = seen.len() as u64 + 1;
            let mut wallet = [0u8; 20];
            match *seen.entry(e.item.clone()).or_insert(next) {
                index if index < next && layout == INLINE_LAYOUT => put_varint(&mut body, index),
                _ if layout == INLINE_LAYOUT && wallet_bytes(&e.item, &mut wallet) => {
                    body.extend_from_slice(&[0, LITERAL_HEX]);
                    body.extend_from_slice(&wallet);
                }
                _ => {
                    body.extend_from_slice(&[0, LITERAL_RAW]);
                    put_varint(&mut body, e.item.len() as u64);
                    body.extend_from_slice(e.item.as_bytes());
                }
            }
            put_varint(&mut body, t.len() as u64);
            for &id in t {
                put_varint(&mut body, u64::from(id));
            }
            let extra = match layout {
                INLINE_LAYOUT => packed(&e.extra),
                _ => e.extra.as_bytes().to_vec(),
            };
            put_varint(&mut body, extra.len() as u64);
            body.extend_from_slice(&extra);
        }
        body
    }

    /// A block of events shaped like `gen chains` lines: wallets drawn from 3,000 (a block sees
    /// most of its wallets once), random transaction hashes, `to` one of 200 contracts, and the
    /// numbers and method ids chain lines carry.
    fn chain_events(seed: u64) -> (Vec<Event>, Vec<Vec<u32>>) {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let events: Vec<Event> = (0..BLOCK_EVENTS as u64)
            .map(|i| {
                let hash: [u8; 32] = rng.random();
                let hash: String = hash.iter().map(|b| format!("{b:02x}")).collect();
                let mut e = Event::new(
                    1_762_000_000_000 + i as i64 * 170 + rng.random_range(0..170),
                    wallet_address(7, rng.random_range(0..3_000)),
                    &[],
                );
                e.extra = format!(
                    r#"{{"hash":"0x{hash}","to":"{}","value":"{}","gas":{},"gas_price":{},"nonce":{},"block":{},"method":"0x{:08x}","status":1}}"#,
                    wallet_address(8, rng.random_range(0..200)),
                    if rng.random_bool(0.7) { 0 } else { rng.random_range(1..10u64.pow(18)) },
                    rng.random_range(21_000..300_000),
                    rng.random_range(10u64.pow(9)..10u64.pow(11)),
                    rng.random_range(0..500_000),
                    23_884_000 + i / 12,
                    [0xa905_9cbbu32, 0x3593_564c, 0x095e_a7b3][rng.random_range(0..3)],
                );
                e
            })
            .collect();
        let tags = (0..events.len()).map(|i| vec![1 + i as u32 % 3]).collect();
        (events, tags)
    }

    /// Stores written before compression hold layout-1 blocks, before packing layout-2 blocks
    /// (extras as text), and before the streams apart layout-3 blocks: all must read back as
    /// the same events as a layout-4 block. On chain events, each layout is smaller than the
    /// one before; on the varied sample (whose hashes are half zeros, whose addresses few) the
    /// streams apart may cost their three frames, and only the reading is checked.
    #[test]
    fn older_layouts_still_decode_and_layout_four_is_the_smallest() {
        let layouts = |events: &[Event], tags: &[Vec<u32>]| {
            let (v4, info) = encode_block(77, events, tags).expect("encode");
            let text = older_body(events, tags, 2);
            let v1 = codec::frame_parts(BLOCK_KIND, &[&info.header(), &text]).expect("frame");
            let compressed = codec::compress(&text).expect("compress");
            let v2 = codec::frame_versioned(BLOCK_KIND, 2, &[&info.header(), &compressed])
                .expect("frame");
            let inline =
                codec::compress(&older_body(events, tags, INLINE_LAYOUT)).expect("compress");
            let v3 = codec::frame_versioned(BLOCK_KIND, INLINE_LAYOUT, &[&info.header(), &inline])
                .expect("frame");
            (info, [v1, v2, v3, v4])
        };
        let (events, tags) = chain_events(3);
        let (_, [v1, v2, v3, v4]) = layouts(&events, &tags);
        assert!(v2.len() < v1.len(), "{} against {}", v2.len(), v1.len());
        // 14% smaller than layout 3 on these events (297,706 against 346,096 bytes); on a day of
        // `gen chains` lines, 9% (43.3 to 39.2 MB for the contract day).
        assert!(
            v4.len() * 100 < v3.len().min(v2.len()) * 95,
            "{} against {} and {}",
            v4.len(),
            v3.len(),
            v2.len()
        );
        for (events, tags) in [chain_events(4), sample_events()] {
            let (info, blocks) = layouts(&events, &tags);
            let (info4, events4) = decoded(&blocks[3]);
            assert_eq!(info4, info);
            assert_eq!(events4.len(), events.len());
            for (i, e) in events.iter().enumerate() {
                assert_eq!(events4[i].2, e.item, "event {i}");
                assert_eq!(events4[i].4, e.extra.as_bytes(), "event {i}");
            }
            for old in &blocks[..3] {
                let (info_old, events_old) = decoded(old);
                assert_eq!(info_old, info);
                assert_eq!(events_old, events4);
            }
        }
        // A layout this build does not know is refused by name.
        let next = BLOCK_VERSION + 1;
        let (_, info) = encode_block(77, &events, &tags).expect("encode");
        let v5 = codec::frame_versioned(BLOCK_KIND, next, &[&info.header(), &v4]).expect("frame");
        let err = decode_block(&v5, |_| {}).expect_err("unknown layout");
        assert!(err.contains(&format!("version {next}")), "{err}");
    }

    /// A layout-4 block's parts: header, then events, addresses and unique values, each
    /// compressed.
    fn parts_of(blob: &[u8]) -> [Vec<u8>; 4] {
        let (_, payload) = codec::unframe_any(BLOCK_KIND, BLOCK_VERSION, blob).expect("frame");
        let mut r = Reader {
            bytes: payload,
            pos: 0,
        };
        let header = r.take(28).expect("header").to_vec();
        let n = r.varint().expect("length") as usize;
        let body = r.take(n).expect("events").to_vec();
        let n = r.varint().expect("length") as usize;
        let addresses = r.take(n).expect("addresses").to_vec();
        [header, body, addresses, payload[r.pos..].to_vec()]
    }

    fn framed_from(parts: &[Vec<u8>; 4]) -> Vec<u8> {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        put_varint(&mut a, parts[1].len() as u64);
        put_varint(&mut b, parts[2].len() as u64);
        let all: [&[u8]; 6] = [&parts[0], &a, &parts[1], &b, &parts[2], &parts[3]];
        codec::frame_versioned(BLOCK_KIND, BLOCK_VERSION, &all).expect("frame")
    }

    /// A compressed stream changed by `f`, compressed again.
    fn changed(stream: &[u8], f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut raw = codec::decompress(stream, MAX_BODY).expect("a stream");
        f(&mut raw);
        codec::compress(&raw).expect("compress")
    }

    /// Inside a frame whose checksum holds, streams that do not match the events are an error
    /// naming what is wrong: unique values one over or one short, addresses missing, a stream
    /// that is not zstd (then before any event is passed on).
    #[test]
    fn streams_that_do_not_match_their_events_are_damage() {
        let (events, tags) = sample_events();
        let (blob, _) = encode_block(5, &events, &tags).expect("encode");
        let parts = parts_of(&blob);
        assert_eq!(decoded(&framed_from(&parts)).1.len(), events.len());
        assert!(!parts[2].is_empty() && !parts[3].is_empty());
        type Damage = fn(&mut [Vec<u8>; 4]);
        let cases: [(&str, bool, Damage); 5] = [
            ("unique values: 1 trailing bytes", false, |p| {
                p[3] = changed(&p[3], |u| u.push(7))
            }),
            ("truncated at byte", false, |p| {
                p[3] = changed(&p[3], |u| {
                    u.pop();
                })
            }),
            ("a packed hex string's 20 bytes", false, |p| {
                p[2] = Vec::new()
            }),
            ("events at byte 29", true, |p| p[1] = b"not zstd".to_vec()),
            ("unique values at byte", true, |p| {
                p[3] = b"not zstd".to_vec()
            }),
        ];
        for (expected, before_any, damage) in cases {
            let mut bad = parts.clone();
            damage(&mut bad);
            let mut seen = 0;
            let err = decode_block(&framed_from(&bad), |_| seen += 1).expect_err(expected);
            assert!(err.contains(expected), "{expected}: {err}");
            if before_any {
                assert_eq!(seen, 0, "{expected}: no event passed on");
            }
        }
    }

    /// An extra packed as layout 3 packs it: each value after its marker.
    fn packed(text: &str) -> Vec<u8> {
        let mut out = Vec::new();
        pack_extra(text.as_bytes(), &mut out, &mut PackInto::Inline);
        out
    }

    fn unpacked(packed: &[u8]) -> Result<String, String> {
        let mut buf = Vec::new();
        let text = unpack_extra(packed, &mut Values::Inline, &mut buf)?;
        Ok(String::from_utf8(text.to_vec()).expect("text"))
    }

    /// An extra packed as layout 4 packs it: the markers, the 20-byte values, the 32-byte ones.
    fn packed_apart(text: &str) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
        let (mut out, mut addresses, mut unique) = (Vec::new(), Vec::new(), Vec::new());
        let mut into = PackInto::Apart {
            addresses: &mut addresses,
            unique: &mut unique,
        };
        pack_extra(text.as_bytes(), &mut out, &mut into);
        (out, addresses, unique)
    }

    /// Unpacks a layout-4 extra; the streams must hold exactly its values.
    fn unpacked_apart(packed: &[u8], addresses: &[u8], unique: &[u8]) -> Result<String, String> {
        let mut buf = Vec::new();
        let mut values = Values::apart(addresses, unique);
        let text = unpack_extra(packed, &mut values, &mut buf)?.to_vec();
        values.finish()?;
        Ok(String::from_utf8(text).expect("text"))
    }

    #[test]
    fn an_extras_hex_strings_are_packed_and_come_back_byte_for_byte() {
        let hash = format!("0x{}", "0123456789abcdef".repeat(4));
        let address = wallet_address(5, 9);
        let line = format!(r#"{{"hash":"{hash}","to":"{address}","value":"0","gas":21000}}"#);
        // Each packed string: quotes, `0x` and digits (68 or 44 bytes) become 33 or 21.
        assert_eq!(packed(&line).len(), line.len() - (68 - 33) - (44 - 21));
        assert_eq!(unpacked(&packed(&line)).expect("unpack"), line);
        // Apart: the same bytes, each value in its stream and its marker left in the text.
        let (text, addresses, unique) = packed_apart(&line);
        assert_eq!(text.len(), line.len() - 68 - 44 + 2);
        assert_eq!((addresses.len(), unique.len()), (20, 32));
        assert_eq!(
            unique,
            packed(&line)[9..41],
            "the hash's bytes, after its marker"
        );
        assert_eq!(
            unpacked_apart(&text, &addresses, &unique).expect("unpack"),
            line
        );
        let unchanged = [
            String::new(),
            r#"{"amount":12}"#.to_string(),
            format!(r#"{{"to":"{}"}}"#, address.to_uppercase()),
            format!(r#"{{"to":"{}"}}"#, &address[..41]),
            format!(r#"{{"to":"{address}0"}}"#),
            format!(r#"{{"hash":"{}"}}"#, &hash[..65]),
            format!(r#"{{"to":"{address}"#),
            format!(r#"{{"note":"x{address}"}}"#),
            format!(r#"{{"to":"0X{}"}}"#, &address[2..]),
        ];
        for text in &unchanged {
            assert_eq!(packed(text), text.as_bytes(), "{text}");
            assert_eq!(&unpacked(text.as_bytes()).expect("unpack"), text);
        }
        // Strings side by side, a hex key, a string whose closing quote starts another `"0x`.
        for text in [
            format!(r#"["{address}","{hash}","{address}"]"#),
            format!(r#"{{"{address}":1}}"#),
            format!(r#""{address}"0x{}""#, &address[2..]),
            format!(r#""{address}""{address}""#),
        ] {
            assert!(packed(&text).len() < text.len(), "{text}");
            assert_eq!(unpacked(&packed(&text)).expect("unpack"), text);
        }
    }

    #[test]
    fn a_packed_hex_string_cut_short_is_damage() {
        let text = format!(r#"{{"to":"{}"}}"#, wallet_address(5, 1));
        let whole = packed(&text);
        let marker = whole
            .iter()
            .position(|&b| b == PACKED_HEX_20)
            .expect("packed");
        for cut in marker + 1..marker + 21 {
            let err = unpacked(&whole[..cut]).expect_err("cut short");
            assert!(err.contains("cut short"), "{err}");
        }
        assert_eq!(
            unpacked(&whole[..marker]).expect("no marker"),
            text[..marker]
        );
        // Apart: a stream short of a value, or holding one more, is damage too.
        let (marked, addresses, unique) = packed_apart(&text);
        let err = unpacked_apart(&marked, &addresses[..19], &unique).expect_err("short");
        assert!(err.contains("20 bytes"), "{err}");
        let mut longer = addresses.clone();
        longer.push(0);
        let err = unpacked_apart(&marked, &longer, &unique).expect_err("a byte more");
        assert!(err.contains("addresses: 1 trailing bytes"), "{err}");
    }

    proptest::proptest! {
        /// Any text over an alphabet dense in quotes, `0x` and hex digits comes back as it was.
        #[test]
        fn packing_any_text_is_undone_exactly(
            pieces in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::strategy::Just("\"0x".to_string()),
                    proptest::strategy::Just("\"".to_string()),
                    proptest::strategy::Just("0123456789abcdef".to_string()),
                    proptest::strategy::Just("01234567".to_string()),
                    proptest::strategy::Just("ABCDEF".to_string()),
                    "[0-9a-fA-Fx\"é,:{} ]{0,3}",
                ],
                0..40,
            )
        ) {
            let text = pieces.concat();
            let p = packed(&text);
            proptest::prop_assert!(p.len() <= text.len());
            proptest::prop_assert_eq!(&unpacked(&p).expect("unpack"), &text);
            // Apart, the same bytes in three streams, each value whole in its own.
            let (marked, addresses, unique) = packed_apart(&text);
            proptest::prop_assert_eq!(marked.len() + addresses.len() + unique.len(), p.len());
            proptest::prop_assert_eq!(addresses.len() % 20 + unique.len() % 32, 0);
            proptest::prop_assert_eq!(unpacked_apart(&marked, &addresses, &unique).expect("unpack"), text);
        }
    }

    #[test]
    fn only_lower_case_wallets_are_packed() {
        let mut buf = [0u8; 20];
        assert!(wallet_bytes(&wallet_address(3, 1), &mut buf));
        assert!(!wallet_bytes(
            "0xABCDEF0123456789abcdef0123456789abcdef01",
            &mut buf
        ));
        assert!(!wallet_bytes("0x123", &mut buf));
        assert_eq!(ItemRef::Wallet(&buf).to_text().len(), 42);
    }
}
