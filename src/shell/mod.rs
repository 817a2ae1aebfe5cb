//! The interactive shell (REPL) over one store.
//!
//! It owns the conversation with a person at a terminal: the prompt, line editing with
//! completion and hints ([`helper`]), continuation lines, several statements on a line or in a
//! paste, persistent history, shell commands (`exit`, `quit`, `\json`), Ctrl-C during a query
//! (it cancels the query through the session's cancel flag) and printing ([`render`]). It drives
//! one [`Session`](crate::query::Session) for the whole session (its state kept apart from the
//! store between statements, since the store may be let go to a writer and opened again), so
//! `SET NOW` persists, and prints the [`Answer`](crate::query::Answer)s it returns. It must not
//! decide an answer: every statement goes to the query layer as typed (continuation lines
//! joined), and nothing here reads sketches.
//!
//! On a store another process holds, [`run_remote`] asks every statement through that
//! process's socket ([`serve`]) and prints the answers as the holder rendered them for it.
//!
//! [`run`] installs a SIGINT handler for the rest of the process's life: while a query runs,
//! Ctrl-C sets the session's cancel flag; a second Ctrl-C before the query has stopped ends the
//! process (exit status 130), in case something does not stop. At the prompt the line editor
//! reads Ctrl-C as a key (it clears the line), so no signal is raised there.

pub mod helper;
pub mod render;
pub mod serve;

use crate::query::{parse, QueryError, SessionState, Statement};
use crate::store::{HeldBy, Store, StoreError};
use helper::{ShellHelper, Vocabulary};
use rustyline::config::{ColorMode, CompletionType, Config};
use rustyline::error::ReadlineError;
use rustyline::history::DefaultHistory;
use rustyline::Editor;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    /// The process holding the store, which this REPL read through, stopped answering or let
    /// the store go: the caller may find the store's holder again, or open it.
    #[error("{0}")]
    Holder(String),
}

impl From<ReadlineError> for ShellError {
    fn from(e: ReadlineError) -> Self {
        ShellError::Terminal(e.to_string())
    }
}

impl From<std::io::Error> for ShellError {
    fn from(e: std::io::Error) -> Self {
        ShellError::Terminal(e.to_string())
    }
}

/// What a line typed at the main prompt asks of the shell itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Command {
    Exit,
    ToggleJson,
}

fn command(line: &str) -> Option<Command> {
    let word = line.trim().trim_end_matches(';').trim();
    match word.to_ascii_lowercase().as_str() {
        "exit" | "quit" | "\\q" => Some(Command::Exit),
        "\\json" => Some(Command::ToggleJson),
        _ => None,
    }
}

/// Whether the session goes on after a line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flow {
    Continue,
    Exit,
}

/// Where the REPL's answers come from.
enum Backend<'s> {
    /// The store, held by this process (and let go to a writer that asks, between
    /// statements), with the session's state, which outlives a store let go and taken back.
    Local {
        holding: &'s serve::Holding,
        state: Option<Box<SessionState>>,
    },
    /// The process holding the store, over its socket: read-only, in a session of its own.
    Remote(serve::Client),
}

/// The REPL's state between statements.
struct Shell<'s> {
    backend: Backend<'s>,
    /// The session's cancel flag, which SIGINT sets.
    cancel: Arc<AtomicBool>,
    editor: Editor<ShellHelper, DefaultHistory>,
    options: ShellOptions,
    json: bool,
    /// Set once the history file failed, so the warning is printed once, not per statement.
    history_failed: bool,
}

/// Runs the REPL on the store `holding` holds (and serves to others) until Ctrl-D or `exit`.
/// [`ShellError::Holder`] when, having let the store go to a writer, it finds it held by
/// another process that serves it (another REPL): the caller reads through that one.
pub fn run(holding: &serve::Holding, options: ShellOptions) -> Result<(), ShellError> {
    let cancel = Arc::new(AtomicBool::new(false));
    let mut state = SessionState::default();
    state.set_now(options.now);
    state.set_cancel_handle(Arc::clone(&cancel));
    let words = holding
        .store()
        .as_ref()
        .map(|s| vocabulary(s, &Vocabulary::default()))
        .unwrap_or_default();
    let backend = Backend::Local {
        holding,
        state: Some(Box::new(state)),
    };
    start(backend, cancel, words, options)
}

/// Runs the REPL on a store another process holds, asking every statement through `client`
/// (see [`serve`]): it reads as the local REPL does, prints the same, and cannot write.
/// Ctrl-C during a statement closes the connection, which cancels the query in the holder,
/// and opens a new one.
pub fn run_remote(mut client: serve::Client, options: ShellOptions) -> Result<(), ShellError> {
    if let Some(now) = options.now {
        let date = chrono::DateTime::from_timestamp_millis(now)
            .map(|t| t.format("%Y-%m-%dT%H").to_string())
            .unwrap_or_default();
        client
            .ask(&format!("SET NOW = {date}"))
            .map_err(|e| ShellError::Holder(e.to_string()))?;
    }
    let words = client
        .vocabulary()
        .map_err(|e| ShellError::Holder(e.to_string()))?;
    let h = &client.holder;
    let note = format!(
        "{} is held by pid {} (`{}`); reading through it (read-only)",
        options.name, h.pid, h.command
    );
    let _ = writeln!(std::io::stderr(), "{}", render::dim(&note, options.colour));
    // Set by Ctrl-C as for a local query, so a second Ctrl-C during a query ends the REPL;
    // the query in the holder runs on.
    let cancel = Arc::new(AtomicBool::new(false));
    start(Backend::Remote(client), cancel, words, options)
}

fn start(
    backend: Backend<'_>,
    cancel: Arc<AtomicBool>,
    words: Vocabulary,
    options: ShellOptions,
) -> Result<(), ShellError> {
    let config = Config::builder()
        .auto_add_history(false)
        .history_ignore_dups(true)?
        .max_history_size(10_000)?
        .completion_type(CompletionType::List)
        .color_mode(if options.colour {
            ColorMode::Enabled
        } else {
            ColorMode::Disabled
        })
        .build();
    let mut editor = Editor::<ShellHelper, DefaultHistory>::with_config(config)?;
    editor.set_helper(Some(ShellHelper::new(words, options.colour)));
    let mut shell = Shell {
        backend,
        cancel,
        editor,
        options,
        json: false,
        history_failed: false,
    };
    shell.load_history();
    shell.catch_interrupts();
    shell.repl()
}

/// The words the helper may complete, read from the store; on a read error the old ones stay
/// (completion is a convenience and must not end the session).
fn vocabulary(store: &Store, old: &Vocabulary) -> Vocabulary {
    let width = store.config().bucket;
    Vocabulary {
        tags: store.tags().unwrap_or_else(|_| old.tags.clone()),
        dates: match store.buckets() {
            Ok(b) => b.iter().map(|(start, _)| width.label(*start)).collect(),
            Err(_) => old.dates.clone(),
        },
        item: store.config().item_field.clone(),
    }
}

impl Shell<'_> {
    fn repl(&mut self) -> Result<(), ShellError> {
        let prompt = format!("{}> ", self.options.name);
        // Right-aligned under the main prompt so continued text lines up with the first line.
        let continuation = format!("{:>w$}", "...> ", w = prompt.chars().count());
        let styled = |p: &str| {
            if self.options.colour {
                format!("\x1b[1;32m{p}\x1b[0m")
            } else {
                p.to_string()
            }
        };
        let (prompt, continuation) = (
            (prompt.clone(), styled(&prompt)),
            (continuation.clone(), styled(&continuation)),
        );
        let mut pending: Vec<String> = Vec::new();
        loop {
            let p = if pending.is_empty() {
                &prompt
            } else {
                &continuation
            };
            let line = match self.editor.readline(p) {
                Ok(line) => line,
                // Ctrl-C abandons the statement being typed, not the session.
                Err(ReadlineError::Interrupted) => {
                    pending.clear();
                    self.set_pending(String::new());
                    continue;
                }
                Err(ReadlineError::Eof) => return Ok(()),
                Err(e) => return Err(e.into()),
            };
            // A paste arrives as one "line" holding every line of it: each is taken as if it
            // had been typed on its own, so every statement in it runs, in order.
            for physical in line.split('\n') {
                let physical = physical.strip_suffix('\r').unwrap_or(physical);
                if self.feed(physical, &mut pending)? == Flow::Exit {
                    return Ok(());
                }
            }
        }
    }

    /// Takes one typed line: continues the pending statement, or finishes it and runs every
    /// statement (and shell command) in it.
    fn feed(&mut self, line: &str, pending: &mut Vec<String>) -> Result<Flow, ShellError> {
        if pending.is_empty() {
            let t = line.trim();
            if t.is_empty() || t.starts_with("--") {
                return Ok(Flow::Continue);
            }
        }
        pending.push(line.to_string());
        if helper::needs_more(&pending.join("\n")) {
            let so_far = helper::join_lines(pending);
            self.set_pending(so_far);
            return Ok(Flow::Continue);
        }
        let text = helper::join_lines(pending);
        pending.clear();
        self.set_pending(String::new());
        let statements = helper::statements(&text);
        if statements.is_empty() {
            return Ok(Flow::Continue);
        }
        if statements.iter().any(|s| command(s).is_none()) {
            self.remember(&text);
        }
        for statement in statements {
            match command(statement) {
                Some(Command::Exit) => return Ok(Flow::Exit),
                Some(Command::ToggleJson) => {
                    self.json = !self.json;
                    let state = if self.json { "on" } else { "off" };
                    self.print(&render::dim(
                        &format!("JSON answers {state}"),
                        self.options.colour,
                    ))?;
                }
                None => self.execute(statement)?,
            }
        }
        let old = self
            .editor
            .helper()
            .map(|h| h.vocabulary().clone())
            .unwrap_or_default();
        let fresh = match &mut self.backend {
            Backend::Local { holding, .. } => match holding.store().as_ref() {
                Some(store) => vocabulary(store, &old),
                None => old,
            },
            // Completion is a convenience: a failure keeps the old words (the next statement
            // reports a holder that went away).
            Backend::Remote(client) => client.vocabulary().unwrap_or(old),
        };
        if let Some(h) = self.editor.helper_mut() {
            h.set_vocabulary(fresh);
        }
        Ok(Flow::Continue)
    }

    /// Routes SIGINT to the session's cancel flag (see the module's note). Without it Ctrl-C
    /// during a query would end the process; a failure costs a warning, not the session.
    fn catch_interrupts(&mut self) {
        use signal_hook::consts::SIGINT;
        // The shutdown is registered first, so it sees the flag as it was before this signal
        // set it: only a second Ctrl-C while a query has not stopped yet ends the process.
        let registered =
            signal_hook::flag::register_conditional_shutdown(SIGINT, 130, Arc::clone(&self.cancel))
                .and_then(|_| signal_hook::flag::register(SIGINT, Arc::clone(&self.cancel)));
        if let Err(e) = registered {
            let text =
                format!("warning: Ctrl-C cannot cancel queries ({e}); it will end the shell");
            let _ = writeln!(
                std::io::stderr(),
                "{}",
                render::dim(&text, self.options.colour)
            );
        }
    }

    /// Tells the helper what the statement's earlier lines were, for completion in context.
    fn set_pending(&mut self, text: String) {
        if let Some(h) = self.editor.helper_mut() {
            h.set_pending(text);
        }
    }

    /// Runs one statement and prints its answer (or error) and how long it took.
    fn execute(&mut self, statement: &str) -> Result<(), ShellError> {
        let holding = match &mut self.backend {
            Backend::Local { holding, .. } => *holding,
            Backend::Remote(client) => {
                let colour = self.options.colour;
                let started = Instant::now();
                let reply = client
                    .ask_cancellable(statement, &self.cancel)
                    .map_err(|e| ShellError::Holder(e.to_string()))?;
                let took = started.elapsed();
                self.cancel.store(false, Ordering::Relaxed);
                // Ctrl-C: the connection was closed, which cancels the query in the holder.
                let Some(reply) = reply else {
                    return if self.json {
                        self.print(&render::json_error(&QueryError::Cancelled))
                    } else {
                        self.print(&format!("\r{}", render::cancelled(took, colour)))
                    };
                };
                if reply.let_go {
                    return Err(ShellError::Holder(reply.text));
                }
                // The holder rendered the answer as `render` does here, in this REPL's colour.
                return match reply {
                    r if self.json => self.print(&r.json),
                    r if r.cancelled => {
                        self.print(&format!("\r{}", render::cancelled(took, colour)))
                    }
                    r if r.ok => {
                        self.print(&r.human)?;
                        if matches!(parse(statement), Ok(Statement::Help)) {
                            self.print(&self.shell_help())?;
                        }
                        self.print(&render::timing(took, colour))
                    }
                    r => {
                        let stderr = std::io::stderr();
                        let mut err = stderr.lock();
                        writeln!(err, "{}", r.human)?;
                        err.flush()?;
                        Ok(())
                    }
                };
            }
        };
        if holding.store().is_none() && !self.take_back(holding)? {
            return Ok(());
        }
        let colour = self.options.colour;
        let started = Instant::now();
        let result = {
            let store = holding.store();
            let (Some(store), Backend::Local { state, .. }) = (store.as_ref(), &mut self.backend)
            else {
                // Let go again since the line above: the next statement takes it back.
                return Ok(());
            };
            let mut session = state.take().map(|s| *s).unwrap_or_default().attach(store);
            let result = session.query(statement);
            *state = Some(Box::new(session.detach()));
            result
        };
        let took = started.elapsed();
        // A Ctrl-C that came after the query's last check is not meant for the next one.
        self.cancel.store(false, Ordering::Relaxed);
        match result {
            Ok(answer) if self.json => self.print(&render::json(&answer)),
            // The terminal echoed `^C` without a newline: the carriage return writes over it.
            Err(QueryError::Cancelled) if !self.json => {
                self.print(&format!("\r{}", render::cancelled(took, colour)))
            }
            Ok(answer) => {
                self.print(&render::human(&answer, colour))?;
                if matches!(parse(statement), Ok(Statement::Help)) {
                    self.print(&self.shell_help())?;
                }
                self.print(&render::timing(took, colour))
            }
            Err(e) if self.json => self.print(&render::json_error(&e)),
            Err(e) => {
                let text = render::error(&e, colour);
                let stderr = std::io::stderr();
                let mut err = stderr.lock();
                writeln!(err, "{text}")?;
                err.flush()?;
                Ok(())
            }
        }
    }

    /// Opens the store again after it was let go to a writer, waiting for the writer (Ctrl-C
    /// stops waiting). `false`: the statement is not run (the reason printed).
    fn take_back(&mut self, holding: &serve::Holding) -> Result<bool, ShellError> {
        let colour = self.options.colour;
        let to = holding.let_go_to().unwrap_or_else(|| "a writer".into());
        self.note(&format!("the store was let go to {to}; opening it again"))?;
        let mut told = false;
        self.cancel.store(false, Ordering::Relaxed);
        loop {
            match holding.take_back(Duration::from_millis(500)) {
                Ok(()) => return Ok(true),
                Err(StoreError::Locked { held_by, .. }) => {
                    // Another REPL took it meanwhile: read through that one instead (the
                    // caller connects to it).
                    if matches!(&held_by, HeldBy::Process(h) if h.socket.is_some()) {
                        return Err(ShellError::Holder(format!("the store is now {held_by}")));
                    }
                    if self.cancel.swap(false, Ordering::Relaxed) {
                        self.note("stopped waiting; the next statement tries again")?;
                        return Ok(false);
                    }
                    if !told {
                        told = true;
                        self.note(&format!(
                            "waiting for the store: it is {held_by} (Ctrl-C stops waiting)"
                        ))?;
                    }
                }
                Err(e) => {
                    let text = render::error(&QueryError::Store(e), colour);
                    writeln!(std::io::stderr(), "{text}")?;
                    return Ok(false);
                }
            }
        }
    }

    /// A line about the REPL itself, on stderr in the dim style.
    fn note(&self, text: &str) -> Result<(), ShellError> {
        let stderr = std::io::stderr();
        let mut err = stderr.lock();
        writeln!(err, "{}", render::dim(text, self.options.colour))?;
        err.flush()?;
        Ok(())
    }

    /// The REPL's own lines, after the language's HELP.
    fn shell_help(&self) -> String {
        let history = match &self.options.history {
            Some(p) => p.display().to_string(),
            None => "off (no file)".to_string(),
        };
        [
            "",
            "shell:",
            "  Tab             complete keywords, tags (after ON / AND / OR / EXCEPT / \"(\") and dates (after FROM / TO)",
            "  Right arrow     accept the grey hint (hints are shown only with colour)",
            "  \\ at line end   continue the statement on the next line (so does an open parenthesis); ; ends it",
            "  Up / Down       history",
            "  Ctrl-C          clear the line; while a query runs, cancel it",
            "  Ctrl-D, exit    leave (also quit)",
            "  \\json           switch answers to JSON lines and back",
            &format!("  history file    {history}"),
        ]
        .join("\n")
    }

    fn print(&self, text: &str) -> Result<(), ShellError> {
        let stdout = std::io::stdout();
        let mut out = stdout.lock();
        writeln!(out, "{text}")?;
        out.flush()?;
        Ok(())
    }

    fn load_history(&mut self) {
        let Some(path) = self.options.history.clone() else {
            return;
        };
        if !path.exists() {
            return;
        }
        if let Err(e) = self.editor.load_history(&path) {
            self.history_warning(&format!("cannot read history {}: {e}", path.display()));
        }
    }

    /// Adds the statement to the history and appends it to the file at once, so history
    /// survives a crash or a closed terminal. A file that cannot be written costs a warning,
    /// never the session.
    fn remember(&mut self, statement: &str) {
        if let Err(e) = self.editor.add_history_entry(statement) {
            self.history_warning(&format!("history: {e}"));
            return;
        }
        let Some(path) = self.options.history.clone() else {
            return;
        };
        if self.history_failed {
            return;
        }
        if let Err(e) = self.editor.append_history(&path) {
            self.history_warning(&format!(
                "cannot write history {}: {e}; history is kept for this session only",
                path.display()
            ));
        }
    }

    fn history_warning(&mut self, text: &str) {
        if self.history_failed {
            return;
        }
        self.history_failed = true;
        let stderr = std::io::stderr();
        let mut err = stderr.lock();
        // Nothing more can be done if even stderr is gone; the session goes on.
        let _ = writeln!(
            err,
            "{}",
            render::dim(&format!("warning: {text}"), self.options.colour)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_commands() {
        assert_eq!(command("exit"), Some(Command::Exit));
        assert_eq!(command(" QUIT; "), Some(Command::Exit));
        assert_eq!(command("\\q"), Some(Command::Exit));
        assert_eq!(command("\\json"), Some(Command::ToggleJson));
        assert_eq!(command("exits"), None);
        assert_eq!(command("COUNT"), None);
    }
}
