//! [`SendBatch`]: holding back this thread's send posts so the soft provider transmits each
//! QP's frames together.

use super::soft;

/// Send WRs this thread posts while the guard lives are transmitted together when it drops,
/// instead of one by one. A worker that answers many requests in one pass of its loop holds
/// one for the pass: the soft provider then writes each QP's frames with one `sendmsg` (a
/// post otherwise writes its frame at once, from the posting thread). The verbs provider
/// rings its doorbell per post either way, so the guard changes nothing there.
///
/// Drop the guard before the thread sleeps or waits for completions of what it posted:
/// until then those WRs have not left. Guards nest; the outermost one transmits.
pub struct SendBatch {
    /// Tied to the thread whose posts it holds back.
    _not_send: std::marker::PhantomData<*const ()>,
}

impl SendBatch {
    pub fn begin() -> SendBatch {
        soft::batch_begin();
        SendBatch {
            _not_send: std::marker::PhantomData,
        }
    }
}

impl Drop for SendBatch {
    fn drop(&mut self) {
        soft::batch_end();
    }
}
