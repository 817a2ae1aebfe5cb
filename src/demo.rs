//! The demo: builds a store from the reference's streams and runs its cheat sheet as queries.
//! Placeholder until the report lands.

use std::io::Write;
use std::path::Path;

/// The two-chains scale the demo uses by default.
pub const DEFAULT_SCALE: f64 = 0.2;

#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("the demo is not built yet")]
    NotBuilt,
}

/// Builds the demo store at `path` and writes the report to `out`.
pub fn run(_path: &Path, _scale: f64, _out: &mut dyn Write) -> Result<(), DemoError> {
    Err(DemoError::NotBuilt)
}
