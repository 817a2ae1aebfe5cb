//! The interactive shell (REPL) over one store. Placeholder until the REPL lands.

use crate::store::Store;
use std::path::PathBuf;

/// How the shell is set up by the binary.
#[derive(Clone, Debug)]
pub struct ShellOptions {
    /// The store's name as shown in the prompt (`wallets.db> `).
    pub name: String,
    /// Where history persists across sessions (`None`: no history file).
    pub history: Option<PathBuf>,
    /// Colour and styling (only on a TTY and never with `NO_COLOR`; the binary decides).
    pub colour: bool,
    /// The clock for `today`/`yesterday` (`--now`); `None` is the wall clock.
    pub now: Option<i64>,
}

/// Everything that can end a shell session with an error.
#[derive(Debug, thiserror::Error)]
pub enum ShellError {
    #[error("terminal: {0}")]
    Terminal(String),
}

/// Runs the REPL until Ctrl-D or `exit`.
pub fn run(_store: &Store, _options: ShellOptions) -> Result<(), ShellError> {
    Err(ShellError::Terminal("the REPL is not built yet".into()))
}
