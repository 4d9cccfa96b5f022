namespace PersistentServices.Sessions;

/// <summary>What <see cref="Session.Admit"/> decided for a request's sequence number ([MSP §3.1]).</summary>
internal enum AdmitOutcome
{
    /// <summary>The next expected number: log and execute it.</summary>
    Execute,

    /// <summary>A duplicate of the last request, already answered: resend its buffered reply.</summary>
    Duplicate,

    /// <summary>A duplicate of the last request while it still executes: wait for its reply.</summary>
    DuplicateInFlight,

    /// <summary>Older than the last request: its reply is gone; never re-executed.</summary>
    Stale,

    /// <summary>Skips numbers: the client lost track.</summary>
    Gap,

    /// <summary>The next number while the previous request still executes (one request at a time per session).</summary>
    Busy,

    /// <summary>The last number again, but a different request.</summary>
    Mismatch,

    /// <summary>The session is replaying (a rollback began after the caller waited for it): wait for it again, then admit.</summary>
    NotReady,

    /// <summary>The session ended.</summary>
    Ended,
}

/// <summary>The decision for one request and what the caller needs to act on it.</summary>
/// <remarks>
/// A <see cref="AdmitOutcome.Duplicate"/> whose <see cref="Reply"/> is in the log holds the log there until the caller read
/// it with <see cref="Session.ReadHeldReplyAsync"/> (which it must call).
/// </remarks>
internal readonly record struct Admission(AdmitOutcome Outcome, long ExpectedSequence, HeldReply? Reply = null, Task<BufferedReply>? Pending = null);
