//! Why authentication failed: the RESCODE_EXP of a Failure1 / Failure2 message, and the reason
//! a malformed message is answered with.

/// RESCODE_EXP of a Failure1 / Failure2 message: why authentication failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureReason {
    Failed = 1,
    NotUsable = 2,
    ConcatMismatch = 3,
    HashUnusable = 4,
    DhGroupUnusable = 5,
    IncorrectPayload = 6,
    IncorrectMessage = 7,
}

impl FailureReason {
    pub fn from_code(c: u8) -> Option<FailureReason> {
        use FailureReason::*;
        [
            Failed,
            NotUsable,
            ConcatMismatch,
            HashUnusable,
            DhGroupUnusable,
            IncorrectPayload,
            IncorrectMessage,
        ]
        .into_iter()
        .find(|r| *r as u8 == c)
    }

    pub fn code(self) -> u8 {
        self as u8
    }

    pub fn describe(self) -> &'static str {
        match self {
            FailureReason::Failed => "authentication failed",
            FailureReason::NotUsable => "authentication protocol not usable",
            FailureReason::ConcatMismatch => "secure channel concatenation mismatch",
            FailureReason::HashUnusable => "hash function not usable",
            FailureReason::DhGroupUnusable => "DH group not usable",
            FailureReason::IncorrectPayload => "incorrect payload",
            FailureReason::IncorrectMessage => "incorrect protocol message",
        }
    }
}

impl std::fmt::Display for FailureReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({:#04x})", self.describe(), *self as u8)
    }
}
