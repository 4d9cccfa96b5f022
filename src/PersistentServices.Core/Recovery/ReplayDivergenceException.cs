namespace PersistentServices;

/// <summary>
/// Replaying a logged request did not reproduce what happened before the crash (another endpoint, another reply), or
/// could not run at all. Recovery stops: continuing would build state the clients never saw.
/// </summary>
public sealed class ReplayDivergenceException : Exception
{
    /// <summary>Creates the exception.</summary>
    public ReplayDivergenceException(string message, string sessionId, long lsn, Exception? innerException = null)
        : this(message, sessionId, lsn, 0, innerException)
    {
    }

    /// <summary>Creates the exception, naming the request's number in its session.</summary>
    public ReplayDivergenceException(string message, string sessionId, long lsn, long sequence, Exception? innerException = null)
        : base(message, innerException)
    {
        SessionId = sessionId;
        Lsn = lsn;
        Sequence = sequence;
    }

    /// <summary>The number of the request whose replay diverged (0 when unknown).</summary>
    public long Sequence { get; }

    /// <summary>The session whose replay diverged, by its trace tag (a short hash of its id: ids of anonymous sessions are bearer secrets, never logged).</summary>
    public string SessionId { get; }

    /// <summary>LSN of the logged request whose replay diverged.</summary>
    public long Lsn { get; }

    /// <summary>The reply the replay produced, when it ran to the end (the replay check shows it).</summary>
    internal Sessions.BufferedReply? ReplayedReply { get; init; }
}
