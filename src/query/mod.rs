//! The query language: text → [`parser`] → [`ast`] (plain data) → [`plan`] (which structure
//! answers) → [`exec`] (runs the plan on the store) → [`answer::Answer`].
//!
//! The planner is where the product's idea lives: each question goes to the structure made for
//! it, with an honest bound, and is answered exactly from the raw log when a sketch cannot answer
//! well. This layer depends on the store and sketch layers; only the shell and the binary
//! depend on it.

pub mod answer;
pub mod ast;
pub mod exec;
pub mod meta;
pub mod parser;
pub mod plan;

pub use answer::{Answer, Kind, Row, Value};
pub use ast::{Date, Range, SetExpr, Statement, Unit};
pub use exec::{Options, QueryError, Session, SessionState};
pub use parser::{parse, SyntaxError};
pub use plan::{Method, Plan, Refusal};

impl crate::store::Store {
    /// Runs one statement with the clock's `now` and default fallback options.
    pub fn query(&self, text: &str) -> Result<Answer, QueryError> {
        Session::new(self).query(text)
    }
}
