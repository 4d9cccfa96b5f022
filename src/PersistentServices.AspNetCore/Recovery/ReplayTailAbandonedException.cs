namespace PersistentServices.Recovery;

/// <summary>
/// A replay ran the request the crash (or a rollback) cut short past its log, and its live part was abandoned (a call
/// refused as an orphan, a member out of reach): the session is ready again with that request unanswered (retries get
/// 503); whoever replayed it rolls the session back to run it again.
/// </summary>
internal sealed class ReplayTailAbandonedException(string sessionTag, long sequence, Exception inner)
    : Exception($"The replay of session {sessionTag} abandoned request {sequence}, which ran past its log: {inner.Message}", inner);
