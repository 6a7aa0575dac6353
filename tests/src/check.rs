//! How a case half fails or skips: [`CaseError`], the `ensure!` macros and [`OrFail`], which
//! names the operation that failed.

use std::fmt;

use rdmablk::fabric::FabricError;

/// Why a case half did not pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CaseError {
    /// A check failed on this side; the text says what was expected and what happened.
    Fail(String),
    /// The device lacks what the case needs (memory windows); the text names it.
    Skip(String),
    /// This side stopped because the peer's half failed (its reason is reported instead).
    PeerFailed(String),
}

impl fmt::Display for CaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CaseError::Fail(s) => write!(f, "{s}"),
            CaseError::Skip(s) => write!(f, "skipped: {s}"),
            CaseError::PeerFailed(s) => write!(f, "peer failed: {s}"),
        }
    }
}

/// What a case half returns.
pub type CaseResult<T = ()> = Result<T, CaseError>;

/// Builds a [`CaseError::Fail`] from a format string.
pub fn fail(msg: impl Into<String>) -> CaseError {
    CaseError::Fail(msg.into())
}

/// Attaches the failing operation's name to a fabric error.
pub trait OrFail<T> {
    /// `Err(e)` becomes `CaseError::Fail("{what}: {e}")`.
    fn or_fail(self, what: &str) -> CaseResult<T>;
}

impl<T> OrFail<T> for Result<T, FabricError> {
    fn or_fail(self, what: &str) -> CaseResult<T> {
        self.map_err(|e| CaseError::Fail(format!("{what}: {e}")))
    }
}

/// Fails the case half with a formatted message unless `cond` holds.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err($crate::check::CaseError::Fail(format!($($fmt)+)));
        }
    };
}

/// Fails the case half unless `got == expected`, naming `what`.
#[macro_export]
macro_rules! ensure_eq {
    ($got:expr, $expected:expr, $($fmt:tt)+) => {{
        let (got, expected) = (&$got, &$expected);
        if got != expected {
            return Err($crate::check::CaseError::Fail(format!(
                "{}: expected {:?}, got {:?}",
                format!($($fmt)+),
                expected,
                got
            )));
        }
    }};
}
