//! One error type for the whole benchmark: what failed, in words a user can act on.

use std::fmt;

#[derive(Debug)]
pub enum BenchError {
    /// A command we ran failed (the command line, its exit status and its stderr tail).
    Command {
        command: String,
        detail: String,
    },
    /// A tool or capability the benchmark needs is missing (say how to get it).
    Missing(String),
    /// The user asked to stop (Ctrl-C, SIGTERM).
    Interrupted,
    /// Bad options (unknown workload or peer name, ...).
    Usage(String),
    Io {
        context: String,
        source: std::io::Error,
    },
    Other(String),
}

impl BenchError {
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        BenchError::Io {
            context: context.into(),
            source,
        }
    }
}

impl fmt::Display for BenchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BenchError::Command { command, detail } => write!(f, "`{command}` failed: {detail}"),
            BenchError::Missing(what) => write!(f, "missing: {what}"),
            BenchError::Interrupted => write!(f, "interrupted"),
            BenchError::Usage(what) => write!(f, "{what}"),
            BenchError::Io { context, source } => write!(f, "{context}: {source}"),
            BenchError::Other(what) => write!(f, "{what}"),
        }
    }
}

impl std::error::Error for BenchError {}

pub type Result<T, E = BenchError> = std::result::Result<T, E>;
