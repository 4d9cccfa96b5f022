namespace PersistentServices.Testing;

/// <summary>The outcome of a replay check (<see cref="ReplayCheck"/>, <c>psctl replay-check</c>).</summary>
public enum ReplayCheckResult
{
    /// <summary>Every session recovery would replay replayed fine (or there was nothing to replay).</summary>
    Passed,

    /// <summary>At least one session diverged: <see cref="ReplayCheckReport.Divergences"/> names each one's first differing request.</summary>
    Diverged,

    /// <summary>Recovery of the copy stopped (fail-stop: a logged shared value this build cannot read, a replay that cannot run) or was stopped before it finished.</summary>
    Failed,

    /// <summary>The copy of the log could not be opened (damaged, or not a log): nothing was replayed. <c>psctl verify</c> on the copy tells why.</summary>
    NotChecked,
}

/// <summary>
/// What a replay check found: per session that recovery would replay, whether it replayed fine or the first request whose
/// reply or state differs. Sessions that replayed fine are counted, not listed. <see cref="ToString"/> is the report as
/// <c>psctl replay-check</c> prints it (sessions named by trace tag).
/// </summary>
public sealed class ReplayCheckReport
{
    internal ReplayCheckReport(
        ReplayCheckResult result,
        string logDirectory,
        int sessions,
        int sessionsFine,
        long requestsReplayed,
        IReadOnlyList<ReplayCheckDivergence> divergences,
        int requestsNotChecked,
        string? failure)
    {
        Result = result;
        LogDirectory = logDirectory;
        Sessions = sessions;
        SessionsReplayedFine = sessionsFine;
        RequestsReplayed = requestsReplayed;
        Divergences = divergences;
        RequestsNotChecked = requestsNotChecked;
        Failure = failure;
    }

    /// <summary>The outcome.</summary>
    public ReplayCheckResult Result { get; }

    /// <summary>True when every session replayed fine (<see cref="ReplayCheckResult.Passed"/>).</summary>
    public bool Passed => Result == ReplayCheckResult.Passed;

    /// <summary>The log directory that was copied and checked (it was never written).</summary>
    public string LogDirectory { get; }

    /// <summary>Sessions that recovery from this log replays: live sessions with logged requests after their latest checkpoint (or their start).</summary>
    public int Sessions { get; }

    /// <summary>
    /// Live sessions with no logged request after their latest checkpoint (all of them after a graceful stop): recovery
    /// restores them and replays nothing, so nothing of them can diverge. Not counted in <see cref="Sessions"/>.
    /// </summary>
    public int SessionsWithNothingToReplay { get; internal init; }

    /// <summary>Of <see cref="Sessions"/>, those that replayed to the end with every reply and logged value reproduced.</summary>
    public int SessionsReplayedFine { get; }

    /// <summary>Requests replayed and compared: every request of the sessions that replayed fine, and each diverged session's requests up to and including its first difference.</summary>
    public long RequestsReplayed { get; }

    /// <summary>The diverged sessions, in log order, each with its first differing request.</summary>
    public IReadOnlyList<ReplayCheckDivergence> Divergences { get; }

    /// <summary>
    /// Last requests a crash cut short (no reply logged): recovery finishes them live, so there is no reply to compare, and
    /// the check does not run them (they could reach external systems).
    /// </summary>
    public int RequestsNotChecked { get; }

    /// <summary>Why recovery of the copy failed or could not start (<see cref="ReplayCheckResult.Failed"/>, <see cref="ReplayCheckResult.NotChecked"/>).</summary>
    public string? Failure { get; }

    /// <summary>The report as text, sessions named by trace tag.</summary>
    public override string ToString() => ReplayCheckText.Render(this, showSessionIds: false);
}

/// <summary>A session whose replay diverged, at its first differing request.</summary>
public sealed class ReplayCheckDivergence
{
    internal ReplayCheckDivergence(string sessionTag, string sessionId, long sequence, long lsn, string reason)
    {
        SessionTag = sessionTag;
        SessionId = sessionId;
        Sequence = sequence;
        Lsn = lsn;
        Reason = reason;
    }

    /// <summary>The session's trace tag: a short hash of its id, as the service's logs and traces name it.</summary>
    public string SessionTag { get; }

    /// <summary>
    /// The session's id, as its client sends it. The id of an anonymous session is a bearer secret: the text report shows
    /// it only when asked (<c>psctl replay-check --show-session-ids</c>).
    /// </summary>
    public string SessionId { get; }

    /// <summary>The request's number in its session (<c>PS-Seq</c>).</summary>
    public long Sequence { get; }

    /// <summary>The LSN of the logged request.</summary>
    public long Lsn { get; }

    /// <summary>Why it diverged: another reply, other logged values asked for (shared reads and writes, time, random numbers, ids), another endpoint.</summary>
    public string Reason { get; }

    /// <summary>The request's method.</summary>
    public string Method { get; internal init; } = "";

    /// <summary>The request's path and query string.</summary>
    public string Path { get; internal init; } = "";

    /// <summary>The endpoint the request ran on before the crash (its display name).</summary>
    public string Endpoint { get; internal init; } = "";

    /// <summary>The request's body as text (cut at 2,000 characters), or a description of a binary body; empty when it had none.</summary>
    public string RequestBody { get; internal init; } = "";

    /// <summary>The status code of the logged reply; null when the log holds no reply for the request.</summary>
    public int? LoggedStatusCode { get; internal init; }

    /// <summary>
    /// The SHA-256 (hex) of the logged reply's status code, Content-Type and body. The log keeps only this hash of a reply
    /// ([Phoenix/App Algorithm 3], the short reply record), not its body, so the logged body cannot be shown.
    /// </summary>
    public string? LoggedReplyHash { get; internal init; }

    /// <summary>The status code the replay produced; null when the replay could not run the request to its end.</summary>
    public int? ReplayedStatusCode { get; internal init; }

    /// <summary>The Content-Type of the replayed reply.</summary>
    public string? ReplayedContentType { get; internal init; }

    /// <summary>The replayed reply's body as text (cut at 4,000 characters), or a description of a binary body.</summary>
    public string? ReplayedBody { get; internal init; }

    /// <summary>The SHA-256 (hex) of the replayed reply, comparable with <see cref="LoggedReplyHash"/>.</summary>
    public string? ReplayedReplyHash { get; internal init; }
}
