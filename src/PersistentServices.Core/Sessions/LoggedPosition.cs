namespace PersistentServices.Sessions;

/// <summary>
/// A logged request of a session: where it and the records it wrote (shared reads and writes, nondeterministic values)
/// are in the log. The session's position stream is the list of these ([MSP §3.2]).
/// </summary>
internal sealed class LoggedPosition(long requestLsn, long sequence, byte[]? requestHash = null, int requestHashVersion = RequestIdentity.CurrentVersion)
{
    public long RequestLsn { get; } = requestLsn;

    public long Sequence { get; } = sequence;

    /// <summary>The request's identity (<see cref="RequestIdentity"/>), so numbering can go back to it (orphan recovery).</summary>
    public byte[]? RequestHash { get; } = requestHash;

    public int RequestHashVersion { get; } = requestHashVersion;

    /// <summary>LSNs of the records the request wrote while it ran, in order.</summary>
    public List<long> Aux { get; } = [];

    /// <summary>
    /// Recovery: the logged request record, kept by the analysis scan so replay reads nothing again (null: read it). Kept
    /// unparsed: most kept requests are superseded by a later session checkpoint before the scan ends, and replay parses
    /// the few that are not.
    /// </summary>
    public Log.LogRecord? RequestRecord { get; set; }

    /// <summary>Recovery: the records of <see cref="Aux"/>, in order, when the analysis scan kept them.</summary>
    public List<Log.LogRecord>? AuxRecords { get; set; }
}
