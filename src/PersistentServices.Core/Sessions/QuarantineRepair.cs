using System.Text.Json;
using PersistentServices.Checkpoints;
using PersistentServices.Log;
using PersistentServices.Log.Records;

namespace PersistentServices.Sessions;

/// <summary>
/// Key sessions (a session of one request named by an <c>Idempotency-Key</c>, docs/client.md) as the log shows them: the
/// engine needs to tell them apart when an operator lists or repairs sessions offline (psctl), without the ASP.NET Core
/// package. The ASP.NET Core side (<c>IdempotencyKey</c>, <c>IdempotencyKeySessions</c>) uses these values.
/// </summary>
internal static class KeySessions
{
    /// <summary>The owner version a key session's start and checkpoints carry (its owner hashed as <see cref="SessionOwner"/> version 3 does).</summary>
    public const int OwnerVersion = 41;

    /// <summary>Key sessions started by builds before owner version 3.</summary>
    public const int LegacyOwnerVersion = 40;

    /// <summary>
    /// The owner version of a key session whose key a gateway generated and signed (docs/gateway.md, "Generated keys"): owner
    /// hashed as version 3, kept only for <c>IdempotencyKeyOptions.GatewayKeyRetention</c>, counted in the gateway keys' own
    /// share. A build before it takes such a session for an ordinary session, which its idle retention ends.
    /// </summary>
    public const int GatewayOwnerVersion = 42;

    /// <summary>The header that marks the buffered reply of an expired key (value <c>expired</c>).</summary>
    public const string StateHeader = "PS-Idempotency-Key";

    /// <summary>True when <paramref name="session"/> is a key session.</summary>
    public static bool IsKeySession(Session session) => session.OwnerVersion is OwnerVersion or LegacyOwnerVersion or GatewayOwnerVersion;

    /// <summary>True when <paramref name="reply"/> is the stand-in of an expired key's reply (410 with <see cref="StateHeader"/>: expired).</summary>
    public static bool IsExpiredMarker(BufferedReply? reply)
        => reply is { StatusCode: 410 } &&
           reply.Headers.Any(h => string.Equals(h.Key, StateHeader, StringComparison.OrdinalIgnoreCase) && h.Value is ["expired"]);
}

/// <summary>What an operator does to a quarantined session (docs/operations.md, "Operator repair").</summary>
internal enum RepairAction
{
    /// <summary>The session is ended (<see cref="SessionEndReason.OperatorDiscarded"/>); a key session becomes an expired key instead.</summary>
    Discard,

    /// <summary>The session serves again with no state, its last request answered with a stand-in; a key session becomes an expired key.</summary>
    Release,
}

/// <summary>What became of a repaired session.</summary>
internal enum RepairOutcome
{
    /// <summary>Ended: its requests get <c>404 session-not-found</c>; its slot and records are let go.</summary>
    Ended,

    /// <summary>Serves again from a checkpoint with no state; a retry of its last request gets <c>410 session-released</c>.</summary>
    Released,

    /// <summary>A key session kept as an expired key: a repeat of its key gets <c>410 idempotency-key-expired</c>, never a second execution.</summary>
    ExpiredKey,
}

/// <summary>
/// The records an operator's repair of a quarantined session appends, one definition for the admin endpoints (online,
/// through <c>Quarantines</c>) and <c>psctl sessions discard|release</c> (offline, on a stopped log), so both leave the
/// same log behind and the next recovery sees the same thing:
/// <list type="bullet">
/// <item>discard of a session: <c>SessionEnded</c> with reason <see cref="SessionEndReason.OperatorDiscarded"/>;</item>
/// <item>release of a session: a session checkpoint with no state and no quarantine whose last reply is
///   <see cref="ReleasedReply"/>;</item>
/// <item>discard or release of a key session: the same checkpoint with <see cref="OperatorExpiredKeyReply"/>, an expired
///   key's stand-in. A key session is never ended by an operator: a forgotten key would run its operation again.</item>
/// </list>
/// </summary>
internal static class QuarantineRepair
{
    /// <summary>Prefix of every problem type (as <c>ProtocolProblems.TypePrefix</c>).</summary>
    private const string TypePrefix = "urn:persistentservices:problem:";

    /// <summary>What <paramref name="action"/> makes of <paramref name="session"/>.</summary>
    public static RepairOutcome OutcomeOf(Session session, RepairAction action)
        => KeySessions.IsKeySession(session) ? RepairOutcome.ExpiredKey : action == RepairAction.Discard ? RepairOutcome.Ended : RepairOutcome.Released;

    /// <summary>The reply a released session's last request gets from now on: its own could not be reproduced.</summary>
    public static BufferedReply StandInFor(Session session) => KeySessions.IsKeySession(session) ? OperatorExpiredKeyReply() : ReleasedReply();

    /// <summary>The reply a released session's last request (a retry of it) gets: its real reply could not be reproduced.</summary>
    public static BufferedReply ReleasedReply() => Problem(410, "session-released", "Reply lost: the session was released",
        "This request ran before a restart, but its replay did not reproduce it and the session was quarantined; an operator " +
        "released the session with its state reset. The request is never executed again (its effects on shared state stand): " +
        "go on with the next request number.");

    /// <summary>
    /// The stand-in reply of a quarantined key session an operator discarded or released: an expired key's (410, and the
    /// header that marks it), whose detail says the operation ran, so that the client does not send it again under a new key.
    /// </summary>
    public static BufferedReply OperatorExpiredKeyReply() => Problem(410, "idempotency-key-expired", "Idempotency key expired",
        "The request with this Idempotency-Key ran before a restart, but replaying it did not reproduce it, so its reply is lost; an operator " +
        "closed the key. The request is never executed again and its effects stand: do not send the operation again under a new key.",
        new(KeySessions.StateHeader, ["expired"]));

    /// <summary>
    /// The checkpoint that releases a quarantined session: no state, no quarantine, its numbering kept, and
    /// <paramref name="standIn"/> as the reply of its last request. Recovery continues the session from it.
    /// </summary>
    public static SessionCheckpoint ReleaseCheckpoint(Session session, BufferedReply standIn)
    {
        var record = SessionCheckpoints.CaptureQuarantineMarker(session, "");
        record.Quarantined = "";
        if (record.LastSequence > 0)
        {
            record.LastReply = standIn.ToLogged();
        }

        return record;
    }

    /// <summary>
    /// Offline (<c>psctl</c>, on a stopped log opened with its recovered sessions): appends the record of
    /// <paramref name="action"/> for <paramref name="session"/>, which must carry a quarantine marker
    /// (<see cref="Session.QuarantineReason"/>). Not forced: the caller waits until it is durable. Returns its LSN.
    /// </summary>
    public static long AppendOffline(DurableLog log, Session session, RepairAction action, DateTimeOffset now)
    {
        ArgumentNullException.ThrowIfNull(log);
        ArgumentNullException.ThrowIfNull(session);
        if (session.QuarantineReason is null)
        {
            throw new InvalidOperationException($"Session {session.TraceTag} is not quarantined.");
        }

        return OutcomeOf(session, action) == RepairOutcome.Ended
            ? SessionRecords.AppendEnded(log, session, SessionEndReason.OperatorDiscarded, now)
            : log.Append(RecordKind.SessionCheckpoint, ReleaseCheckpoint(session, StandInFor(session)));
    }

    private static BufferedReply Problem(int status, string type, string title, string detail, KeyValuePair<string, string[]>? header = null)
    {
        var body = JsonSerializer.SerializeToUtf8Bytes(new Dictionary<string, object?>
        {
            ["type"] = TypePrefix + type,
            ["title"] = title,
            ["status"] = status,
            ["detail"] = detail,
        });
        KeyValuePair<string, string[]>[] headers = header is { } extra
            ? [new("Content-Type", ["application/problem+json"]), extra]
            : [new("Content-Type", ["application/problem+json"])];
        return new BufferedReply(status, headers, body);
    }
}
