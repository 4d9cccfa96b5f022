using System.Globalization;
using System.Runtime.CompilerServices;
using System.Text;
using PersistentServices.Log;
using PersistentServices.Log.Records;
using PersistentServices.Recovery;

namespace PersistentServices.Sessions;

/// <summary>
/// One session as an operator sees it (docs/operations.md, "Operator repair"): named by its trace tag, never by its id
/// (ids of anonymous sessions are bearer secrets), its owner by the first bytes of the owner hash.
/// </summary>
/// <param name="Tag">The trace tag (<see cref="Session.TraceTag"/>): 12 hex digits of a SHA-256 of the id.</param>
/// <param name="Owner">The first 6 bytes of the owner hash in hex; empty for an anonymous session.</param>
/// <param name="Kind"><c>session</c>, or <c>key</c> for an Idempotency-Key's session.</param>
/// <param name="State"><c>live</c>, <c>never-used</c>, <c>replaying</c>, <c>quarantined</c> or <c>expired-key</c>.</param>
/// <param name="QuarantineReason">Why it is quarantined (null when it is not).</param>
/// <param name="LastSequence">The number of its last request (0 before the first).</param>
/// <param name="HeldBytes">Memory its buffered reply takes (counted against the session memory budget).</param>
/// <param name="LogHeldBytes">Log bytes its buffered reply takes when the log holds it instead of memory.</param>
/// <param name="LoggedBytesSinceCheckpoint">Bytes it logged since its latest checkpoint (what recovery replays).</param>
/// <param name="RequestsSinceCheckpoint">Requests logged since its latest checkpoint (replayed after a crash).</param>
/// <param name="StartedAt">When it started.</param>
/// <param name="LastActivity">Its last request (or its start), from which its retention counts.</param>
/// <param name="RecoveryLsn">Its latest checkpoint's LSN, or its start's.</param>
internal sealed record SessionSummary(
    string Tag,
    string Owner,
    string Kind,
    string State,
    string? QuarantineReason,
    long LastSequence,
    long HeldBytes,
    long LogHeldBytes,
    long LoggedBytesSinceCheckpoint,
    int RequestsSinceCheckpoint,
    DateTimeOffset StartedAt,
    DateTimeOffset LastActivity,
    long RecoveryLsn);

/// <summary>A record of one session, as <c>show</c> lists it: what it is and its sizes; a body only when asked for.</summary>
internal sealed record SessionRecordEntry
{
    public required long Lsn { get; init; }

    /// <summary><c>started</c>, <c>request</c>, <c>reply</c>, <c>checkpoint</c>, <c>end-of-skip</c> or <c>ended</c>.</summary>
    public required string Kind { get; init; }

    /// <summary>The record's body bytes in the log.</summary>
    public required int RecordBytes { get; init; }

    public long? Sequence { get; init; }

    public string? Method { get; init; }

    public string? Path { get; init; }

    /// <summary>The query string: only with bodies (it may carry secrets, <c>?access_token=</c>).</summary>
    public string? Query { get; init; }

    public string? Endpoint { get; init; }

    public int? Status { get; init; }

    public int? BodyBytes { get; init; }

    /// <summary>The body as text (UTF-8 without control characters), only when bodies were asked for.</summary>
    public string? Body { get; init; }

    /// <summary>The body in base64 when it is not text, only when bodies were asked for.</summary>
    public string? BodyBase64 { get; init; }

    /// <summary>True when the body shown was cut at <see cref="SessionInspection.MaxBodyShown"/> bytes.</summary>
    public bool? BodyCut { get; init; }

    /// <summary>A reply: whether the log holds it in full (else a short record: status and hash, the body is not logged).</summary>
    public bool? InLog { get; init; }

    /// <summary>A request: the records it wrote while it ran (shared reads and writes, logged time and random values, call replies).</summary>
    public int? Effects { get; set; }

    /// <summary>A checkpoint's quarantine reason, an end's reason, an end of skip's orphan LSN.</summary>
    public string? Detail { get; init; }
}

/// <summary>The records of one session found in a range of the log.</summary>
internal sealed record SessionHistory(long From, long Until, IReadOnlyList<SessionRecordEntry> Records, bool Cut);

/// <summary>How a reference to a session (a trace tag or an id) resolved.</summary>
internal enum SessionMatch
{
    Found,
    NotFound,

    /// <summary>Two live sessions share the trace tag (48 bits of a hash): name the session by its id.</summary>
    Ambiguous,

    /// <summary>Neither a session id (22 base64url characters) nor a trace tag (12 hex digits).</summary>
    Malformed,
}

/// <summary>
/// What the operator's commands and endpoints show of sessions (docs/operations.md, "Operator repair"): the same for the
/// admin endpoints of a running service and for <c>psctl sessions</c> on a stopped log.
/// </summary>
internal static class SessionInspection
{
    /// <summary>The states a summary can have, in the order they are decided.</summary>
    public static readonly IReadOnlyList<string> States = ["live", "never-used", "replaying", "quarantined", "expired-key"];

    /// <summary>The kinds a summary can have.</summary>
    public static readonly IReadOnlyList<string> Kinds = ["session", "key"];

    /// <summary>Most bytes of a body shown.</summary>
    public const int MaxBodyShown = 16 * 1024;

    /// <summary>Length of a trace tag.</summary>
    public const int TagLength = 12;

    private static readonly UTF8Encoding StrictUtf8 = new(encoderShouldEmitUTF8Identifier: false, throwOnInvalidBytes: true);

    /// <summary>
    /// The summary of <paramref name="session"/>. <paramref name="offline"/>: the sessions of a stopped log, recovered by the
    /// analysis scan and not replayed, so none is <c>replaying</c> (its requests since its checkpoint are counted instead), and
    /// a quarantined session is one whose quarantine was logged (its marker).
    /// </summary>
    public static SessionSummary Summarize(Session session, bool offline)
    {
        var held = session.LastReply;
        return new SessionSummary(
            session.TraceTag,
            OwnerText(session.Owner),
            KindOf(session),
            StateOf(session, offline),
            session.QuarantineReason ?? session.Diverged?.Message,
            session.LastSequence,
            session.HeldBytes,
            held?.LogBytes ?? 0,
            session.LoggedBytesSinceCheckpoint,
            session.PositionStream.Count,
            session.StartedAt,
            session.LastActivity,
            session.RecoveryLsn);
    }

    /// <summary>The state <see cref="Summarize"/> shows (one of <see cref="States"/>).</summary>
    public static string StateOf(Session session, bool offline)
        => session.QuarantineReason is not null || session.Diverged is not null ? "quarantined"
            : KeySessions.IsExpiredMarker(session.LastReply?.Reply) ? "expired-key"
            : !offline && !session.Ready.IsCompleted ? "replaying"
            : session.NeverUsed ? "never-used"
            : "live";

    /// <summary>The kind <see cref="Summarize"/> shows (one of <see cref="Kinds"/>).</summary>
    public static string KindOf(Session session) => KeySessions.IsKeySession(session) ? "key" : "session";

    /// <summary>The first 6 bytes of an owner hash in hex (empty for anonymous): enough to group one owner's sessions.</summary>
    public static string OwnerText(byte[] owner) => owner.Length == 0 ? "" : Convert.ToHexStringLower(owner.AsSpan(0, Math.Min(6, owner.Length)));

    /// <summary>True when <paramref name="text"/> could be a trace tag (12 hex digits).</summary>
    public static bool IsTag(string text) => text.Length == TagLength && text.All(char.IsAsciiHexDigit);

    /// <summary>
    /// The live session <paramref name="reference"/> names: a session id (22 base64url characters, as clients send it) or
    /// a trace tag (12 hex digits, as logs and listings show it).
    /// </summary>
    public static SessionMatch Find(SessionTable sessions, string reference, out Session? session)
    {
        session = null;
        if (SessionId.TryParse(reference, out var id))
        {
            if (sessions.TryGet(id, out var byId) && !byId.Ended)
            {
                session = byId;
                return SessionMatch.Found;
            }

            return SessionMatch.NotFound;
        }

        if (!IsTag(reference))
        {
            return SessionMatch.Malformed;
        }

        var tag = reference.ToLowerInvariant();
        foreach (var candidate in sessions.Enumerate())
        {
            if (!candidate.Ended && string.Equals(candidate.TraceTag, tag, StringComparison.Ordinal))
            {
                if (session is not null)
                {
                    session = null;
                    return SessionMatch.Ambiguous;
                }

                session = candidate;
            }
        }

        return session is null ? SessionMatch.NotFound : SessionMatch.Found;
    }

    /// <summary>
    /// Where <c>show</c> reads a session's records from: its latest checkpoint (or start), whose records recovery would
    /// replay; for a quarantined session the log's begin, since its latest checkpoint is its marker and the requests that
    /// led to the quarantine are before it (while the log still holds them).
    /// </summary>
    public static long HistoryStart(DurableLog log, Session session)
        => session.QuarantineReason is not null || session.Diverged is not null ? log.BeginAddress : Math.Max(log.BeginAddress, session.RecoveryLsn);

    /// <summary>
    /// The records of <paramref name="session"/> in the committed log from <paramref name="from"/> on: its start,
    /// requests (method, path, endpoint, body size, the records each wrote), replies (status, whether the log holds the
    /// body), checkpoints and end; at most <paramref name="max"/>. Bodies and query strings only with <paramref name="bodies"/>.
    /// </summary>
    public static async Task<SessionHistory> ReadHistoryAsync(DurableLog log, Session session, long from, bool bodies, int max, CancellationToken cancellationToken)
    {
        ArgumentOutOfRangeException.ThrowIfNegativeOrZero(max);
        var until = log.DurableUntil;
        var records = new List<SessionRecordEntry>();
        var requests = new Dictionary<long, SessionRecordEntry>();
        var id = session.Id.ToBytes();
        var cut = false;
        await foreach (var record in log.ScanAsync(from, until, cancellationToken).ConfigureAwait(false))
        {
            if (!Names(record, id))
            {
                continue;
            }

            if (Effect(record) is { } sequence)
            {
                if (requests.TryGetValue(sequence, out var request))
                {
                    request.Effects = (request.Effects ?? 0) + 1;
                }

                continue;
            }

            if (records.Count >= max)
            {
                cut = true;
                break;
            }

            var entry = Describe(record, bodies);
            if (entry is null)
            {
                continue;
            }

            records.Add(entry);
            if (entry is { Kind: "request", Sequence: { } number })
            {
                requests[number] = entry;
            }
        }

        return new SessionHistory(Math.Max(from, log.BeginAddress), until, records, cut);
    }

    /// <summary>True when <paramref name="record"/> belongs to the session whose id is <paramref name="id"/> (read without parsing the rest).</summary>
    private static bool Names(LogRecord record, byte[] id)
    {
        var field = record.Kind switch
        {
            RecordKind.SessionStarted or RecordKind.Request or RecordKind.Reply or RecordKind.SessionEnded or RecordKind.SessionCheckpoint or
                RecordKind.EndOfSkip or RecordKind.NondeterministicValue or RecordKind.CallReply => 1,
            RecordKind.SharedRead => SharedRead.SessionIdFieldNumber,
            RecordKind.SharedWrite => SharedWrite.SessionIdFieldNumber,
            _ => 0,
        };
        if (field == 0)
        {
            return false;
        }

        var fields = new WireFields(record.Body.Span, record.Lsn, record.Kind.ToString());
        while (fields.Next())
        {
            if (fields.Field == field && fields.IsBytes)
            {
                return fields.Bytes.SequenceEqual(id);
            }
        }

        return false;
    }

    /// <summary>The request number of a record a request wrote while it ran; null for the session's own records.</summary>
    private static long? Effect(LogRecord record) => record.Kind switch
    {
        RecordKind.SharedRead => record.Parse(SharedRead.Parser).Sequence,
        RecordKind.SharedWrite => record.Parse(SharedWrite.Parser).Sequence,
        RecordKind.NondeterministicValue => record.Parse(NondeterministicValue.Parser).Sequence,
        RecordKind.CallReply => record.Parse(CallReply.Parser).Sequence,
        _ => null,
    };

    private static SessionRecordEntry? Describe(LogRecord record, bool bodies)
    {
        var size = record.Body.Length;
        switch (record.Kind)
        {
            case RecordKind.SessionStarted:
                var started = record.Parse(SessionStarted.Parser);
                return new SessionRecordEntry
                {
                    Lsn = record.Lsn,
                    Kind = "started",
                    RecordBytes = size,
                    Detail = "at " + Time(started.StartedAtUnixMs) + (started.FirstSequence > 1 ? $", numbered from {started.FirstSequence}" : ""),
                };
            case RecordKind.Request:
                var request = record.Parse(LoggedRequest.Parser);
                return WithBody(new SessionRecordEntry
                {
                    Lsn = record.Lsn,
                    Kind = "request",
                    RecordBytes = size,
                    Sequence = request.Sequence,
                    Method = request.Method,
                    Path = request.PathBase + request.Path,
                    Query = bodies && request.QueryString.Length > 0 ? request.QueryString : null,
                    Endpoint = request.Endpoint,
                    BodyBytes = request.Body.Length,
                    Detail = "received at " + Time(request.ReceivedAtUnixMs),
                }, request.Body, bodies);
            case RecordKind.Reply:
                var reply = record.Parse(ReplySent.Parser);
                var full = reply.FullReply;
                var entry = new SessionRecordEntry
                {
                    Lsn = record.Lsn,
                    Kind = "reply",
                    RecordBytes = size,
                    Sequence = reply.Sequence,
                    Status = reply.StatusCode,
                    InLog = full is not null,
                    BodyBytes = full is null ? null : reply.BodyPartLsns.Count > 0 ? null : full.Body.Length,
                    Detail = full is null ? "short record: status and hash; the body is not logged"
                        : reply.BodyPartLsns.Count > 0 ? $"kept in the log in {reply.BodyPartLsns.Count + 1} records" : "kept in the log",
                };
                return full is not null && reply.BodyPartLsns.Count == 0 ? WithBody(entry, full.Body, bodies) : entry;
            case RecordKind.SessionCheckpoint:
                var checkpoint = record.Parse(SessionCheckpoint.Parser);
                return new SessionRecordEntry
                {
                    Lsn = record.Lsn,
                    Kind = "checkpoint",
                    RecordBytes = size,
                    Sequence = checkpoint.LastSequence,
                    Status = checkpoint.LastReply?.StatusCode,
                    Detail = checkpoint.Quarantined.Length > 0 ? "quarantine marker: " + checkpoint.Quarantined
                        : $"{checkpoint.State.Count + checkpoint.StatePartLsns.Count} state values or parts, {Math.Max(checkpoint.StateBytes, checkpoint.State.Sum(v => (long)v.Value.Length))} state bytes",
                };
            case RecordKind.EndOfSkip:
                return new SessionRecordEntry
                {
                    Lsn = record.Lsn,
                    Kind = "end-of-skip",
                    RecordBytes = size,
                    Detail = "orphan records from LSN " + record.Parse(EndOfSkip.Parser).OrphanLsn.ToString(CultureInfo.InvariantCulture) + " on are skipped",
                };
            case RecordKind.SessionEnded:
                var ended = record.Parse(SessionEnded.Parser);
                return new SessionRecordEntry { Lsn = record.Lsn, Kind = "ended", RecordBytes = size, Detail = $"{ended.Reason} at {Time(ended.EndedAtUnixMs)}" };
            default:
                return null;
        }
    }

    private static SessionRecordEntry WithBody(SessionRecordEntry entry, Google.Protobuf.ByteString body, bool bodies)
    {
        if (!bodies || body.Length == 0)
        {
            return entry;
        }

        var shown = body.Span[..Math.Min(body.Length, MaxBodyShown)];
        var text = AsText(shown);
        return entry with
        {
            Body = text,
            BodyBase64 = text is null ? Convert.ToBase64String(shown) : null,
            BodyCut = body.Length > MaxBodyShown ? true : null,
        };
    }

    /// <summary>The bytes as text when they are UTF-8 without control characters (tabs and line ends allowed); else null.</summary>
    [SkipLocalsInit]
    public static string? AsText(ReadOnlySpan<byte> bytes)
    {
        string text;
        try
        {
            text = StrictUtf8.GetString(bytes);
        }
        catch (DecoderFallbackException)
        {
            return null; // also a multi-byte character cut at MaxBodyShown: shown in base64
        }

        foreach (var c in text)
        {
            if (char.IsControl(c) && c is not ('\t' or '\r' or '\n'))
            {
                return null;
            }
        }

        return text;
    }

    private static string Time(long unixMs) => DateTimeOffset.FromUnixTimeMilliseconds(unixMs).ToString("yyyy-MM-dd HH:mm:ss.fff'Z'", CultureInfo.InvariantCulture);
}
