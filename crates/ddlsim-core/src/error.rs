//! The engine's errors: a kind the caller can act on, and a message for
//! the user. The bindings map each kind to its own Python exception class
//! (src/lib.rs), which ddlsim maps to its own error classes
//! (python/ddlsim/errors.py); nobody reads the message to classify it.

use std::fmt;

/// What went wrong, from the caller's point of view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The input (a graph, a training or network description) is invalid.
    BadInput,
    /// A time or size lies beyond the engine's range (the clock ends at
    /// [`crate::engine::MAX_TIME`]): the scenario's numbers are far off.
    OutOfRange,
    /// A graph that cannot finish: a dependency cycle, or a collective member that never joins.
    Stuck,
    /// An allocation the run needs failed.
    Memory,
    /// The run's progress hook stopped it.
    Interrupted,
    /// A broken invariant of the engine: a bug.
    Internal,
}

impl ErrorKind {
    /// The kind's name, as the bindings export it.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::BadInput => "bad_input",
            ErrorKind::OutOfRange => "out_of_range",
            ErrorKind::Stuck => "stuck",
            ErrorKind::Memory => "memory",
            ErrorKind::Interrupted => "interrupted",
            ErrorKind::Internal => "internal",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
}

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error { kind, message: message.into() }
    }
    pub fn out_of_range(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::OutOfRange, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Internal, message)
    }
    pub fn memory(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Memory, message)
    }
    /// The same error as another kind (e.g. a stuck graph the engine's own lowering built is a bug).
    pub fn with_kind(self, kind: ErrorKind) -> Self {
        Error { kind, ..self }
    }
}

/// A message without a kind is a refusal of the input (validation messages).
impl From<String> for Error {
    fn from(message: String) -> Self {
        Error::new(ErrorKind::BadInput, message)
    }
}

impl From<&str> for Error {
    fn from(message: &str) -> Self {
        Error::new(ErrorKind::BadInput, message)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

/// The message, so that `err.contains(..)` and `{err}` read as before.
impl std::ops::Deref for Error {
    type Target = str;
    fn deref(&self) -> &str {
        &self.message
    }
}

pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_message_is_bad_input_and_reads_as_its_message() {
        let e: Error = "no such op".into();
        assert_eq!(e.kind, ErrorKind::BadInput);
        assert!(e.contains("such") && e.to_string() == "no such op");
        assert_eq!(Error::internal("x").with_kind(ErrorKind::Stuck).kind, ErrorKind::Stuck);
    }
}
