using System.Globalization;
using PersistentServices.Sessions;

namespace PersistentServices.Tool;

/// <summary>Writes what <c>psctl sessions</c> found or did, for a person: one session per line, sessions by trace tag.</summary>
internal static class SessionsReport
{
    public static void WriteList(string directory, IReadOnlyList<SessionSummary> all, IReadOnlyList<SessionSummary> listed, TextWriter output)
    {
        var quarantined = all.Count(s => s.State == "quarantined");
        output.WriteLine($"Log directory: {directory}");
        output.WriteLine($"Sessions: {N(all.Count)} live (quarantined {N(quarantined)}, Idempotency-Keys {N(all.Count(s => s.Kind == "key"))}, " +
                         $"expired keys {N(all.Count(s => s.State == "expired-key"))}); listed: {N(listed.Count)}");
        if (listed.Count == 0)
        {
            return;
        }

        output.WriteLine($"{"TAG",-13} {"KIND",-8} {"STATE",-12} {"LAST-SEQ",9} {"OWNER",-13} {"HELD-BYTES",11} {"TO-REPLAY",9}  LAST-ACTIVITY");
        foreach (var s in listed)
        {
            output.WriteLine($"{s.Tag,-13} {s.Kind,-8} {s.State,-12} {N(s.LastSequence),9} {(s.Owner.Length == 0 ? "anonymous" : s.Owner),-13} " +
                             $"{N(s.HeldBytes + s.LogHeldBytes),11} {N(s.RequestsSinceCheckpoint),9}  {Time(s.LastActivity)}");
            if (s.QuarantineReason is { } reason)
            {
                output.WriteLine($"{"",13} quarantined because: {reason}");
            }
        }

        if (listed.Any(s => s.State == "quarantined"))
        {
            output.WriteLine(
                $"Inspect a quarantined session with 'psctl sessions show {directory} <tag>'; end it with 'psctl sessions discard', or let it serve again with no state " +
                "with 'psctl sessions release' (docs/operations.md, \"Operator repair\").");
        }
    }

    public static void WriteShow(Session session, bool byId, SessionHistory history, bool bodies, TextWriter output)
    {
        var s = SessionInspection.Summarize(session, offline: true);
        output.WriteLine($"Session {s.Tag}" + (byId ? $" (id {session.IdText})" : "") + $": {(s.Kind == "key" ? "an Idempotency-Key's session" : "a session")}, " +
                         (s.Owner.Length == 0 ? "anonymous" : $"owner {s.Owner}…"));
        output.WriteLine($"State: {s.State}" + (s.QuarantineReason is { } reason ? $": {reason}" : ""));
        output.WriteLine($"Last request: {N(s.LastSequence)}; started {Time(s.StartedAt)}; last activity {Time(s.LastActivity)}");
        var held = session.LastReply;
        output.WriteLine(held is null ? "Buffered reply: none"
            : held.Reply is { } reply ? $"Buffered reply: {reply.StatusCode}, {N(reply.Body.Length)} bytes, in its checkpoint" + (bodies && reply.Body.Length > 0 ? $": {Body(reply.Body)}" : "")
            : $"Buffered reply: kept in the log at LSN {N(held.Location.Lsn)} ({N(held.Location.LogBytes)} bytes)");
        output.WriteLine($"Latest checkpoint (or start): LSN {N(s.RecoveryLsn)}; since then {N(s.RequestsSinceCheckpoint)} requests, {N(s.LoggedBytesSinceCheckpoint)} bytes " +
                         "(replayed by the next start)");
        output.WriteLine(s.State == "quarantined"
            ? $"Its records the log still holds, [{N(history.From)}, {N(history.Until)}) (before its quarantine marker: what led to it, until truncation passes them):"
            : $"Its records since its latest checkpoint, [{N(history.From)}, {N(history.Until)}):");
        if (history.Records.Count == 0)
        {
            output.WriteLine("  (none)");
        }

        foreach (var r in history.Records)
        {
            var line = r.Kind switch
            {
                "request" => $"request {r.Sequence}: {r.Method} {r.Path}{(r.Query is null ? "" : r.Query)}, body {N(r.BodyBytes ?? 0)} bytes" +
                             (r.Effects is { } effects ? $", {effects} records written while it ran" : "") + $"; {r.Endpoint}; {r.Detail}",
                "reply" => $"reply {r.Sequence}: {r.Status}" + (r.BodyBytes is { } bytes ? $", body {N(bytes)} bytes" : "") + $"; {r.Detail}",
                "checkpoint" => $"checkpoint after request {r.Sequence}" + (r.Status is { } status ? $" (its reply {status})" : "") + $"; {r.Detail}",
                _ => $"{r.Kind}: {r.Detail}",
            };
            output.WriteLine($"  LSN {N(r.Lsn),-12} {line}");
            if (r.Body is { } text)
            {
                output.WriteLine($"  {"",16} body: {text}" + (r.BodyCut == true ? " …(cut)" : ""));
            }
            else if (r.BodyBase64 is { } base64)
            {
                output.WriteLine($"  {"",16} body (base64): {base64}" + (r.BodyCut == true ? " …(cut)" : ""));
            }
        }

        if (history.Cut)
        {
            output.WriteLine($"  … more records follow (--limit {history.Records.Count} reached)");
        }

        if (!bodies)
        {
            output.WriteLine("Bodies and query strings are not shown (they may hold secrets): add --bodies.");
        }
    }

    public static void WriteRepair(Session session, RepairAction action, RepairOutcome outcome, string reason, long lsn, string directory, TextWriter output)
    {
        var verb = action == RepairAction.Discard ? "Discarded" : "Released";
        output.WriteLine($"Session {session.TraceTag} ({SessionInspection.KindOf(session)}) was quarantined because: {reason}");
        output.WriteLine(outcome switch
        {
            RepairOutcome.Ended =>
                $"{verb}: a SessionEnded record (reason OperatorDiscarded) at LSN {N(lsn)}, durable. When the service starts on this log the session is gone: " +
                "its client's requests get 404 session-not-found, and its slot and records are let go.",
            RepairOutcome.Released =>
                $"{verb}: a session checkpoint with no state at LSN {N(lsn)}, durable. When the service starts on this log the session serves again: a retry of " +
                $"request {N(session.LastSequence)} gets 410 session-released (never executed again), request {N(session.LastSequence + 1)} runs.",
            _ =>
                $"{verb}: the Idempotency-Key is kept as an expired key (a session checkpoint with the expired key's reply at LSN {N(lsn)}, durable). When the " +
                "service starts on this log a repeat of the key gets 410 idempotency-key-expired: its operation is never run again.",
        });
        output.WriteLine($"By {Environment.UserName} on {Environment.MachineName}, with psctl, offline, on {directory}.");
    }

    private static string Body(byte[] body)
    {
        var shown = body.AsSpan(0, Math.Min(body.Length, SessionInspection.MaxBodyShown));
        return SessionInspection.AsText(shown) ?? "(base64) " + Convert.ToBase64String(shown);
    }

    private static string N(long value) => value.ToString("N0", CultureInfo.InvariantCulture);

    private static string Time(DateTimeOffset time) => time.ToUniversalTime().ToString("yyyy-MM-dd HH:mm:ss'Z'", CultureInfo.InvariantCulture);
}
