//! Read-only queries from other processes while this one holds the store.
//!
//! sled lets one process open a store. The holder (the REPL) therefore answers queries for
//! others over a Unix socket in the store directory ([`SOCKET_FILE`]), named in its holder
//! record ([`crate::store::Holder::socket`]); `sketchdb query` and a second REPL, finding the
//! store held, ask through it and print each answer as they would have printed it themselves.
//! The socket is made with the process's umask, so (with the usual 022) only its owner may
//! connect. A reading REPL whose holder goes away or lets the store go is told so
//! ([`Reply::let_go`], or a closed connection) and the binary finds the store's holder again.
//!
//! Protocol, one JSON object per line each way: the client sends a [`Hello`], then one
//! [`Request`] per statement; the server answers each with one [`Reply`], which carries the
//! answer already rendered every way the client may print it (so the client prints exactly
//! what a local query prints). Each connection has its own session (its [`SessionState`] kept
//! between statements), so `SET NOW` and a seeded sample sequence hold for the rest of the
//! connection, as in a local run. The connection ends when the client closes
//! it or the holder stops serving.
//!
//! Only statements that read are run; the exhaustive [`writes`] decides, so a statement added
//! to the language later must be classified before it can pass. Nothing here writes the store.
//!
//! A writer (`sketchdb ingest`, `repair`, `check`) that finds the store held by a REPL asks it to
//! let go ([`Request::LetGo`]): the REPL waits for the statements running on the store, closes
//! it (a checkpoint, its holder record removed, sled's lock released) and stops serving; it
//! opens the store again at its next statement, waiting for the writer if need be. So an
//! analyst can keep a REPL open while a cron job ingests. The store is kept in a [`Holding`]
//! for that, and each session's state is detached from the store between statements.
//!
//! Unix only, like the store itself (its disk accounting reads Unix metadata).
//!
//! Owns: the socket's name and life (a stale one, from a holder that died, is removed by the
//! next holder), the protocol, and the client. It lives in the shell layer, above the query
//! layer, and only calls [`Session::query`].

use super::helper::Vocabulary;
use super::render;
use crate::query::{parse, QueryError, Session, SessionState, Statement};
use crate::store::{HeldBy, Store, StoreError};
use serde::{Deserialize, Serialize};
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard};
use std::thread::Scope;
use std::time::{Duration, Instant};

/// The socket's file in the store directory.
pub const SOCKET_FILE: &str = "sketchdb.sock";

/// How often the server looks for new connections and whether it should stop (the listener
/// does not block, so stopping needs no connection to wake it).
const POLL: Duration = Duration::from_millis(50);

/// How often a connection's reader wakes to see whether the holder is closing.
const READ_WAKE: Duration = Duration::from_millis(200);

/// How long a writer waits for a holder to let the store go.
const LET_GO_WAIT: Duration = Duration::from_secs(60);

/// The first line a client sends.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Hello {
    /// The session's SAMPLE seed (`--seed`).
    #[serde(default)]
    pub seed: Option<u64>,
    /// Whether `human` replies are styled for a terminal.
    #[serde(default)]
    pub colour: bool,
}

/// What a client asks after its [`Hello`].
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Request {
    /// Run one statement in the connection's session.
    Statement(String),
    /// The words the REPL completes (tags, dates, the item field), answered with one
    /// [`Vocabulary`] line instead of a [`Reply`].
    Vocabulary,
    /// Let go of the store for a writer, described by `by` (its pid and command): answered
    /// once the store is closed.
    LetGo { by: String },
}

/// The server's answer to one [`Request::Statement`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    /// Whether the statement was answered (else `text` is the error).
    pub ok: bool,
    /// The answer's `Display` form, or the error's.
    pub text: String,
    /// The answer's JSON line (`Answer::to_json`), or the REPL's JSON error line.
    pub json: String,
    /// The REPL's rendering of the answer or the error, styled as the hello asked.
    pub human: String,
    /// The query was cancelled.
    #[serde(default)]
    pub cancelled: bool,
    /// The holder has let the store go (to a writer): it answers nothing more; the client
    /// should find the store's holder again, or open it.
    #[serde(default)]
    pub let_go: bool,
}

/// Whether running `statement` would change the store. None of the language's statements does
/// today (`SET NOW` changes only the connection's session); the match has no catch-all so that
/// one that does cannot reach the holder's store unnoticed.
pub fn writes(statement: &Statement) -> bool {
    match statement {
        Statement::Distinct { .. }
        | Statement::Seen { .. }
        | Statement::CountValue { .. }
        | Statement::Count { .. }
        | Statement::Top { .. }
        | Statement::Sample { .. }
        | Statement::ShowBuckets
        | Statement::ShowTags
        | Statement::ShowSketches
        | Statement::Info
        | Statement::Help
        | Statement::SetNow(_) => false,
        Statement::Exact(inner) | Statement::Explain(inner) => writes(inner),
    }
}

/// A refusal that is not the query layer's, shaped like its errors.
fn error_reply(message: String, colour: bool) -> Reply {
    Reply {
        ok: false,
        json: format!(
            "{{\"kind\":\"error\",\"error\":{}}}",
            serde_json::Value::String(message.clone())
        ),
        human: if colour {
            format!("\x1b[31merror: {message}\x1b[0m")
        } else {
            format!("error: {message}")
        },
        text: message,
        cancelled: false,
        let_go: false,
    }
}

/// Runs one statement for a client.
fn answer(session: &mut Session<'_>, text: &str, colour: bool) -> Reply {
    if let Ok(statement) = parse(text) {
        if writes(&statement) {
            return error_reply(
                format!(
                    "'{text}' would change the store, and a query through the process holding \
it may only read: run it in that process, or when it has closed the store"
                ),
                colour,
            );
        }
    }
    match session.query(text) {
        Ok(a) => Reply {
            ok: true,
            text: a.to_string(),
            json: a.to_json(),
            human: render::human(&a, colour),
            cancelled: false,
            let_go: false,
        },
        Err(e) => Reply {
            ok: false,
            text: e.to_string(),
            json: render::json_error(&e),
            human: render::error(&e, colour),
            cancelled: matches!(e, QueryError::Cancelled),
            let_go: false,
        },
    }
}

/// A bound socket. Dropping it removes the socket file.
struct Listener {
    inner: UnixListener,
    path: PathBuf,
}

impl Drop for Listener {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Binds the socket in `store`'s directory and names it in the store's holder record. The
/// caller holds the store, so a socket already there was left by a holder that died: it is
/// replaced.
fn bind(store: &Store) -> io::Result<Listener> {
    let path = store.path().join(SOCKET_FILE);
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let inner = UnixListener::bind(&path)?;
    let listener = Listener { inner, path };
    listener.inner.set_nonblocking(true)?;
    // The record names it absolutely, for whoever reads it from another directory.
    let shown = std::path::absolute(&listener.path)?;
    store.set_socket(Some(&shown)).map_err(io::Error::other)?;
    Ok(listener)
}

/// How long a store let go to a writer is left to it before it is taken back (by the REPL's
/// next statement): time for the writer to open it.
const GRACE: Duration = Duration::from_secs(2);

/// A store this process holds and serves, and may let go to a writer that asks.
pub struct Holding {
    path: PathBuf,
    /// `None` while let go. Statements read it (many at once); letting go and taking back
    /// write it, so they wait for running statements.
    store: RwLock<Option<Store>>,
    /// The socket while serving; `None` while let go, or when binding failed.
    listener: Mutex<Option<Listener>>,
    /// Whom the store was let go to, and when.
    let_go: Mutex<Option<(String, Instant)>>,
}

/// A mutex's contents even after a panic elsewhere: nothing here is left half-changed by one.
fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Holding {
    /// Holds `store` and serves it on its socket; `Err` (with the holding, not serving) if the
    /// socket cannot be bound, e.g. a path longer than a Unix socket's 107 bytes.
    pub fn new(store: Store) -> (Holding, io::Result<()>) {
        let listener = bind(&store);
        let (listener, bound) = match listener {
            Ok(l) => (Some(l), Ok(())),
            Err(e) => (None, Err(e)),
        };
        let holding = Holding {
            path: store.path().to_path_buf(),
            store: RwLock::new(Some(store)),
            listener: Mutex::new(listener),
            let_go: Mutex::new(None),
        };
        (holding, bound)
    }

    /// The store, if held (`None` after letting it go). Hold the guard only while using it: a
    /// writer waiting for the store waits for it.
    pub fn store(&self) -> RwLockReadGuard<'_, Option<Store>> {
        self.store.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Whom the store was let go to, while it is.
    pub fn let_go_to(&self) -> Option<String> {
        locked(&self.let_go).as_ref().map(|(by, _)| by.clone())
    }

    /// Lets the store go to the writer `by`: stops serving, waits for the statements running
    /// on it, and closes it (its drop checkpoints, removes the holder record and releases the
    /// lock). The socket goes first, so that no new client finds it.
    pub fn let_go(&self, by: &str) {
        let mut store = self.store.write().unwrap_or_else(|e| e.into_inner());
        *locked(&self.listener) = None;
        *store = None;
        *locked(&self.let_go) = Some((by.to_string(), Instant::now()));
    }

    /// Opens the store again after letting it go (after leaving the writer 2 s), waiting up
    /// to `wait` for the writer to finish, and serves it again.
    pub fn take_back(&self, wait: Duration) -> Result<(), StoreError> {
        if let Some((_, when)) = *locked(&self.let_go) {
            std::thread::sleep(GRACE.saturating_sub(when.elapsed()));
        }
        let store = Store::open_with_wait(&self.path, wait)?;
        // Serving is a convenience for others: without it the REPL goes on.
        *locked(&self.listener) = bind(&store).ok();
        *self.store.write().unwrap_or_else(|e| e.into_inner()) = Some(store);
        *locked(&self.let_go) = None;
        Ok(())
    }

    /// Stops serving and clears the socket from the holder record (the store stays open).
    fn stop_serving(&self) {
        *locked(&self.listener) = None;
        if let Some(store) = self.store().as_ref() {
            let _ = store.set_socket(None);
        }
    }
}

/// Sets the flag when dropped, so the server stops even if the work it runs beside panics
/// (the scope would otherwise wait for the server forever).
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Runs `work` while answering queries for `holding`'s store, then stops serving.
pub fn serve_while<R>(holding: &Holding, work: impl FnOnce() -> R) -> R {
    let stop = AtomicBool::new(false);
    let result = std::thread::scope(|s| {
        let stop = &stop;
        s.spawn(move || accept_loop(s, holding, stop));
        let _stop = StopOnDrop(stop);
        work()
    });
    holding.stop_serving();
    result
}

fn accept_loop<'scope>(
    s: &'scope Scope<'scope, '_>,
    holding: &'scope Holding,
    stop: &'scope AtomicBool,
) {
    while !stop.load(Ordering::Relaxed) {
        let accepted = locked(&holding.listener).as_ref().map(|l| l.inner.accept());
        match accepted {
            // One thread per connection: a client that keeps its connection (a REPL) must not
            // keep others waiting.
            Some(Ok((stream, _))) => {
                s.spawn(move || {
                    // A client that went away is its own business.
                    let _ = connection(holding, stream, stop);
                });
            }
            _ => std::thread::sleep(POLL),
        }
    }
}

/// Reads one line, waiting through read timeouts until `stop` is set (then `None`, as at the
/// end of the input).
fn read_line(
    reader: &mut impl BufRead,
    line: &mut Vec<u8>,
    stop: &AtomicBool,
) -> io::Result<Option<()>> {
    line.clear();
    loop {
        match reader.read_until(b'\n', line) {
            Ok(0) if line.is_empty() => return Ok(None),
            Ok(_) if line.ends_with(b"\n") => return Ok(Some(())),
            // The end of the input after an unterminated line: take it as a line.
            Ok(0) => return Ok(Some(())),
            Ok(_) => {}
            Err(e) if no_data_yet(&e) => {
                if stop.load(Ordering::Relaxed) {
                    return Ok(None);
                }
            }
            Err(e) => return Err(e),
        }
    }
}

fn connection(holding: &Holding, stream: UnixStream, stop: &AtomicBool) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(READ_WAKE))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    let mut line = Vec::new();
    if read_line(&mut reader, &mut line, stop)?.is_none() {
        return Ok(());
    }
    let hello: Hello = serde_json::from_slice(&line).map_err(io::Error::other)?;
    // Kept between statements without the store, which may be let go and taken back.
    let mut state = match hello.seed {
        Some(seed) => SessionState::with_seed(seed),
        None => SessionState::default(),
    };
    let cancel = Arc::new(AtomicBool::new(false));
    state.set_cancel_handle(Arc::clone(&cancel));
    while read_line(&mut reader, &mut line, stop)?.is_some() {
        let bytes = match serde_json::from_slice::<Request>(&line) {
            Ok(Request::Statement(text)) => {
                let store = holding.store();
                let reply = match store.as_ref() {
                    Some(store) => {
                        let mut session = state.attach(store);
                        let reply = watching(&writer, &cancel, stop, || {
                            answer(&mut session, &text, hello.colour)
                        })?;
                        state = session.detach();
                        if reply.cancelled && stop.load(Ordering::Relaxed) {
                            // Not the client's Ctrl-C: say why.
                            error_reply(
                                format!(
                                    "the process holding the store (pid {}) closed it while the \
statement ran; ask again",
                                    std::process::id()
                                ),
                                hello.colour,
                            )
                        } else {
                            reply
                        }
                    }
                    None => Reply {
                        let_go: true,
                        ..error_reply(
                            format!(
                                "the process that served this store has let it go to {}",
                                holding.let_go_to().unwrap_or_else(|| "a writer".into())
                            ),
                            hello.colour,
                        )
                    },
                };
                serde_json::to_vec(&reply)
            }
            Ok(Request::Vocabulary) => {
                let store = holding.store();
                let words = match store.as_ref() {
                    Some(store) => super::vocabulary(store, &Vocabulary::default()),
                    None => Vocabulary::default(),
                };
                serde_json::to_vec(&words)
            }
            Ok(Request::LetGo { by }) => {
                holding.let_go(&by);
                serde_json::to_vec(&Reply {
                    ok: true,
                    text: "let go".into(),
                    ..Reply::default()
                })
            }
            Err(e) => serde_json::to_vec(&error_reply(format!("not a request: {e}"), hello.colour)),
        };
        let mut bytes = bytes.map_err(io::Error::other)?;
        bytes.push(b'\n');
        writer.write_all(&bytes)?;
        writer.flush()?;
    }
    Ok(())
}

/// Runs `work` while watching `stream`, and sets `cancel` if the client hangs up meanwhile (a
/// `query` stopped with Ctrl-C, a REPL cancelling) or the holder closes (`stop`): a query
/// nobody waits for must not keep the store busy (an exact scan makes the holder's own
/// statements wait), nor the holder from exiting.
///
/// std cannot peek at a Unix socket, so the watcher reads; the protocol is strictly request
/// and reply, so a client sends nothing while its request runs, and the watcher has ended
/// (joined, its short read timeout the delay) before the reply goes out and the client may send
/// its next request.
fn watching<R>(
    stream: &UnixStream,
    cancel: &AtomicBool,
    stop: &AtomicBool,
    work: impl FnOnce() -> R,
) -> io::Result<R> {
    // Most statements take a few milliseconds: the watch starts only after this, so they do
    // not wait for the watcher's read timeout when it is joined.
    const QUIET: Duration = Duration::from_millis(50);
    const WATCH: Duration = Duration::from_millis(10);
    let mut watched = stream.try_clone()?;
    stream.set_read_timeout(Some(WATCH))?;
    let (finished, done) = std::sync::mpsc::channel::<()>();
    let result = std::thread::scope(|s| {
        s.spawn(move || {
            use std::sync::mpsc::RecvTimeoutError;
            if !matches!(done.recv_timeout(QUIET), Err(RecvTimeoutError::Timeout)) {
                return;
            }
            let mut byte = [0u8; 1];
            while matches!(done.try_recv(), Err(std::sync::mpsc::TryRecvError::Empty)) {
                // The holder is closing: it does not wait for a long query to end.
                if stop.load(Ordering::Relaxed) {
                    cancel.store(true, Ordering::Relaxed);
                    return;
                }
                match io::Read::read(&mut watched, &mut byte) {
                    Err(e) if no_data_yet(&e) => {}
                    // The end of the client's input, or a connection gone; data would break
                    // the protocol, and cancelling is all the watcher can do about it either.
                    _ => {
                        cancel.store(true, Ordering::Relaxed);
                        return;
                    }
                }
            }
        });
        let result = work();
        // Dropping the sender ends the watch (at once while it is still quiet).
        drop(finished);
        result
    });
    stream.set_read_timeout(Some(READ_WAKE))?;
    Ok(result)
}

/// A connection to the process holding a store.
pub struct Client {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    /// The holder, for messages.
    pub holder: crate::store::Holder,
    /// The socket and the hello, to connect again after a cancelled statement.
    socket: PathBuf,
    hello: Hello,
    /// The last `SET NOW` the holder accepted, replayed on a new connection so the clock holds.
    set_now: Option<String>,
}

impl Client {
    /// Connects to the holder of the store at `dir` named by `held_by`, if it serves queries.
    /// `None` when it does not (no socket in its record), or its socket does not answer (a
    /// holder that died).
    pub fn connect(dir: &Path, held_by: &HeldBy, hello: &Hello) -> Option<Client> {
        let HeldBy::Process(holder) = held_by else {
            return None;
        };
        holder.socket.as_ref()?;
        // The socket by the store directory as this process names it: the record's path is
        // the holder's, which may be relative to another working directory.
        let socket = dir.join(SOCKET_FILE);
        Self::connect_to(&socket, hello)
            .ok()
            .map(|(reader, writer)| Client {
                reader,
                writer,
                holder: holder.clone(),
                socket,
                hello: hello.clone(),
                set_now: None,
            })
    }

    /// Runs `statement` in the holder like [`Client::ask`], but gives up when `cancel` is set:
    /// the connection is closed, which cancels the query in the holder, and a new one is made
    /// (its session with the same clock). `Ok(None)` when cancelled.
    pub fn ask_cancellable(
        &mut self,
        statement: &str,
        cancel: &AtomicBool,
    ) -> io::Result<Option<Reply>> {
        self.writer
            .set_read_timeout(Some(Duration::from_millis(100)))?;
        let sent = self.send(&Request::Statement(statement.to_string()));
        let mut line = Vec::new();
        let outcome = sent.and_then(|()| loop {
            match self.reader.read_until(b'\n', &mut line) {
                Ok(0) => break Err(self.gone(io::ErrorKind::UnexpectedEof.into())),
                Ok(_) if line.ends_with(b"\n") => break Ok(true),
                Ok(_) => {}
                Err(e) if no_data_yet(&e) => {
                    if cancel.load(Ordering::Relaxed) {
                        break Ok(false);
                    }
                }
                Err(e) => break Err(self.gone(e)),
            }
        });
        if !outcome? {
            let _ = self.writer.shutdown(std::net::Shutdown::Both);
            let (reader, writer) = Self::connect_to(&self.socket, &self.hello)?;
            (self.reader, self.writer) = (reader, writer);
            if let Some(set_now) = self.set_now.clone() {
                self.ask(&set_now)?;
            }
            return Ok(None);
        }
        self.writer.set_read_timeout(None)?;
        let reply: Reply = serde_json::from_slice(&line).map_err(io::Error::other)?;
        self.remember(statement, &reply);
        Ok(Some(reply))
    }

    /// Keeps a `SET NOW` the holder accepted, to replay on a new connection.
    fn remember(&mut self, statement: &str, reply: &Reply) {
        if reply.ok && matches!(parse(statement), Ok(Statement::SetNow(_))) {
            self.set_now = Some(statement.to_string());
        }
    }

    fn gone(&self, e: io::Error) -> io::Error {
        io::Error::new(
            e.kind(),
            format!(
                "the process holding the store (pid {}) closed the connection ({e})",
                self.holder.pid
            ),
        )
    }

    fn send(&mut self, request: &Request) -> io::Result<()> {
        let mut bytes = serde_json::to_vec(request).map_err(io::Error::other)?;
        bytes.push(b'\n');
        self.writer.write_all(&bytes).map_err(|e| self.gone(e))?;
        self.writer.flush().map_err(|e| self.gone(e))
    }

    fn connect_to(socket: &Path, hello: &Hello) -> io::Result<(BufReader<UnixStream>, UnixStream)> {
        let mut writer = UnixStream::connect(socket)?;
        let reader = BufReader::new(writer.try_clone()?);
        let mut bytes = serde_json::to_vec(hello).map_err(io::Error::other)?;
        bytes.push(b'\n');
        writer.write_all(&bytes)?;
        Ok((reader, writer))
    }

    /// Runs `statement` in the holder, in this connection's session.
    pub fn ask(&mut self, statement: &str) -> io::Result<Reply> {
        let reply = self.request(&Request::Statement(statement.to_string()))?;
        self.remember(statement, &reply);
        Ok(reply)
    }

    /// Asks the holder to let the store go to this process (a writer), describing it as `by`;
    /// returns once the holder has closed it.
    pub fn let_go(&mut self, by: &str) -> io::Result<()> {
        // The holder first finishes the statements running on the store; one that takes
        // longer than this (or a holder that hangs) leaves the writer to its usual wait.
        self.writer.set_read_timeout(Some(LET_GO_WAIT))?;
        let reply: Reply = self.request(&Request::LetGo { by: by.to_string() })?;
        if reply.ok {
            Ok(())
        } else {
            Err(io::Error::other(reply.text))
        }
    }

    /// The holder's store's words for completion.
    pub fn vocabulary(&mut self) -> io::Result<Vocabulary> {
        self.request(&Request::Vocabulary)
    }

    fn request<T: serde::de::DeserializeOwned>(&mut self, request: &Request) -> io::Result<T> {
        self.send(request)?;
        let mut line = Vec::new();
        if self
            .reader
            .read_until(b'\n', &mut line)
            .map_err(|e| self.gone(e))?
            == 0
        {
            return Err(self.gone(io::ErrorKind::UnexpectedEof.into()));
        }
        serde_json::from_slice(&line).map_err(io::Error::other)
    }
}

/// A read that timed out or was interrupted: no data yet, the connection still there (a timed
/// read is how a waiting side looks at its stop flag).
fn no_data_yet(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind of statement the language has today reads only; the server would refuse one
    /// that `writes` says changes the store.
    #[test]
    fn every_statement_of_the_language_reads() {
        for text in [
            "DISTINCT wallets ON chain:a AND chain:b FROM ALL",
            "SEEN 0xabc FROM 2026-12-01",
            "COUNT 0xabc",
            "COUNT ON chain:a",
            "TOP 5 wallets",
            "SAMPLE 3 PER chain",
            "EXACT DISTINCT wallets",
            "EXPLAIN EXACT COUNT 0xabc",
            "SHOW BUCKETS",
            "SHOW TAGS",
            "SHOW SKETCHES",
            "INFO",
            "HELP",
            "SET NOW = 2026-12-01",
        ] {
            let statement = parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert!(!writes(&statement), "{text}");
        }
    }

    /// Runs `watching` around work that lasts until cancelled (at most 5 s).
    fn watched(server: &UnixStream, stop: &AtomicBool) -> (bool, Duration) {
        let cancel = AtomicBool::new(false);
        let started = Instant::now();
        let waited = watching(server, &cancel, stop, || {
            while !cancel.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(5));
            }
            started.elapsed()
        })
        .expect("watch");
        (cancel.load(Ordering::Relaxed), waited)
    }

    /// The client hanging up, or the holder closing, cancels the statement at once; a client
    /// that waits is not mistaken for either, and its next request arrives whole.
    #[test]
    fn a_hang_up_or_closing_cancels_the_running_statement() {
        let never = AtomicBool::new(false);
        let (server, client) = UnixStream::pair().expect("pair");
        server.set_read_timeout(Some(READ_WAKE)).expect("timeout");
        let hang_up = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            drop(client);
        });
        let (cancelled, waited) = watched(&server, &never);
        assert!(cancelled && waited < Duration::from_secs(2), "{waited:?}");
        hang_up.join().expect("client");

        let (server, mut client) = UnixStream::pair().expect("pair");
        server.set_read_timeout(Some(READ_WAKE)).expect("timeout");
        let stop = AtomicBool::new(false);
        let (cancelled, waited) = std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(100));
                stop.store(true, Ordering::Relaxed);
            });
            watched(&server, &stop)
        });
        assert!(cancelled && waited < Duration::from_secs(2), "{waited:?}");

        // A patient client: the work ends on its own; the next request is read whole.
        let cancel = AtomicBool::new(false);
        let answer = watching(&server, &cancel, &never, || {
            std::thread::sleep(Duration::from_millis(50));
            42
        })
        .expect("watch");
        assert!(answer == 42 && !cancel.load(Ordering::Relaxed));
        client
            .write_all(b"{\"statement\":\"COUNT\"}\n")
            .expect("send");
        let mut reader = BufReader::new(&server);
        let mut line = Vec::new();
        assert_eq!(
            read_line(&mut reader, &mut line, &never).expect("read"),
            Some(())
        );
        assert_eq!(line, b"{\"statement\":\"COUNT\"}\n");
    }

    /// A refusal is shaped like the query layer's errors, in every form a client prints.
    #[test]
    fn refusals_look_like_errors() {
        let r = error_reply("no \"way\"".into(), false);
        assert!(!r.ok && r.human == "error: no \"way\"" && r.text == "no \"way\"");
        let j: serde_json::Value = serde_json::from_str(&r.json).expect("json");
        assert_eq!(
            (j["kind"].as_str(), j["error"].as_str()),
            (Some("error"), Some("no \"way\""))
        );
    }
}
