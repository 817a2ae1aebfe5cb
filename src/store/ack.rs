//! The acknowledgement record: how far the log was acknowledged, kept outside the engine's log.
//!
//! sled recovers the longest undamaged prefix of its log: truncate or damage the tail of its
//! files and it opens an earlier state without a word, so the events of the last acknowledged
//! flush would be gone and every count smaller, silently. The record closes that gap. After
//! every sync that makes a flush, a checkpoint or an import's commit durable, the store writes
//! the log's next sequence number (and the checkpoint position) through
//! [`super::Engine::write_ack`], which keeps it beside the engine's files (sled: the file
//! `sketchdb-ack`, replaced atomically) where damage to sled's log cannot roll it back.
//! Opening compares: a log that ends before the acknowledged position is
//! [`StoreError::AcknowledgedLost`], never a smaller store.
//!
//! Written only after the sync succeeded, so the record never claims more than the log holds:
//! a crash between the sync and the record leaves the previous record, which claims less. A
//! missing record (a store made before it existed) claims nothing. The record is a codec frame
//! of kind [`kinds::ACK`], so damage to it is detected and named, not read as a number.
//!
//! Owns: the record's layout, writing it, reading it, and the comparison at open.

use super::error::{Result, StoreError};
use super::seam::Seam;
use super::state::State;
use super::{codec, kinds, Store};
use serde::{Deserialize, Serialize};

/// What a flush, checkpoint or commit acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Ack {
    /// The log's next sequence number: every event below it was acknowledged durable.
    pub(crate) next_seq: u64,
    /// The checkpoint position at the time (for reports; the log is what must not shrink).
    pub(crate) checkpoint_pos: u64,
}

impl Ack {
    fn name(engine: &Seam) -> String {
        format!(
            "{} of {} (sketchdb-ack)",
            kinds::ACK.name,
            engine.path().display()
        )
    }

    /// The record the engine holds; `None` if it holds none. A damaged one is named.
    pub(crate) fn read(engine: &Seam) -> Result<Option<Ack>> {
        let Some(bytes) = engine.read_ack()? else {
            return Ok(None);
        };
        codec::decode(kinds::ACK.blob, &bytes)
            .map(Some)
            .map_err(|e| StoreError::DamagedLog {
                name: Self::name(engine),
                detail: format!(
                    "{e}; it records how far the log was acknowledged, so whether acknowledged events were lost cannot be told: restore the store from a backup, or copy the directory aside and run `sketchdb check`"
                ),
            })
    }

    /// Refuses a log that ends before what was acknowledged.
    pub(crate) fn verify(engine: &Seam, log_end: u64) -> Result<Option<Ack>> {
        let ack = Self::read(engine)?;
        if let Some(a) = ack {
            if log_end < a.next_seq {
                return Err(StoreError::AcknowledgedLost {
                    path: engine.path().to_path_buf(),
                    acknowledged: a.next_seq,
                    log_end,
                });
            }
        }
        Ok(ack)
    }
}

impl Store {
    /// Records that the log up to `st.next_seq` is durable. Call only after the engine's sync
    /// succeeded, with nothing of an unfinished import in `st`. Writes nothing if the record
    /// already says so.
    pub(super) fn acknowledge(&self, st: &mut State) -> Result<()> {
        if st.importing {
            return Ok(());
        }
        let ack = Ack {
            next_seq: st.next_seq,
            checkpoint_pos: st.checkpoint_pos,
        };
        if st.acked == Some(ack) {
            return Ok(());
        }
        let bytes = codec::encode(kinds::ACK.blob, &ack).map_err(|e| StoreError::DamagedLog {
            name: Ack::name(&self.engine),
            detail: e.to_string(),
        })?;
        // Forgotten first: if the write fails, the next acknowledgement tries again.
        st.acked = None;
        self.engine.write_ack(&bytes)?;
        st.acked = Some(ack);
        Ok(())
    }
}
