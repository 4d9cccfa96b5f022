using System.Globalization;
using System.Text;
using System.Text.Encodings.Web;
using System.Text.Json;
using PersistentServices.Recovery;

namespace PersistentServices.Testing;

/// <summary>A <see cref="ReplayCheckReport"/> as text (what psctl prints) and as <c>report.json</c> (what psctl reads).</summary>
internal static class ReplayCheckText
{
    private const string Indent = "                  ";

    public static string Render(ReplayCheckReport report, bool showSessionIds)
    {
        var text = new StringBuilder();
        text.AppendLine(CultureInfo.InvariantCulture, $"Replay check of {report.LogDirectory} (replayed from a copy; nothing was written to it)");
        if (report.Result == ReplayCheckResult.NotChecked)
        {
            text.AppendLine(CultureInfo.InvariantCulture, $"Result: NOT CHECKED: the copy of the log could not be opened: {report.Failure}");
            text.AppendLine("Run 'psctl verify' on the log directory to see every problem.");
            return text.ToString();
        }

        if (report.Sessions == 0)
        {
            text.AppendLine(CultureInfo.InvariantCulture,
                $"Nothing to replay: {report.SessionsWithNothingToReplay} live session{Plural(report.SessionsWithNothingToReplay)}, none with a logged request after its latest checkpoint (after a graceful stop, recovery replays nothing).");
        }
        else
        {
            text.AppendLine(CultureInfo.InvariantCulture,
                $"Replayed {report.Sessions} session{Plural(report.Sessions)} one at a time, in log order: {report.SessionsReplayedFine} replayed fine, {report.Divergences.Count} diverged; {report.RequestsReplayed} request{Plural(report.RequestsReplayed)} compared.");
            if (report.SessionsWithNothingToReplay > 0)
            {
                text.AppendLine(CultureInfo.InvariantCulture,
                    $"{report.SessionsWithNothingToReplay} more live session{Plural(report.SessionsWithNothingToReplay)} had nothing to replay (no logged request after its latest checkpoint).");
            }
        }

        if (report.RequestsNotChecked > 0)
        {
            text.AppendLine(CultureInfo.InvariantCulture,
                $"Not checked: {report.RequestsNotChecked} last request{Plural(report.RequestsNotChecked)} that a crash cut short (no reply logged: recovery finishes such a request live, so there is no reply to compare).");
        }

        foreach (var d in report.Divergences)
        {
            text.AppendLine();
            text.AppendLine(CultureInfo.InvariantCulture,
                $"Session {d.SessionTag}{(showSessionIds ? $" (id {d.SessionId})" : "")} diverged at request {d.Sequence} (LSN {d.Lsn}): {d.Method} {d.Path}");
            text.AppendLine(CultureInfo.InvariantCulture, $"  endpoint:       {d.Endpoint}");
            text.AppendLine(CultureInfo.InvariantCulture, $"  request body:   {(d.RequestBody.Length == 0 ? "(none)" : IndentLines(d.RequestBody))}");
            text.AppendLine(CultureInfo.InvariantCulture, $"  why:            {d.Reason}");
            text.AppendLine(d.LoggedStatusCode is { } logged
                ? $"  logged reply:   {logged}, SHA-256 {Short(d.LoggedReplyHash)} (the log keeps a reply's hash, not its body)"
                : "  logged reply:   none");
            if (d.ReplayedStatusCode is { } replayed)
            {
                text.AppendLine(CultureInfo.InvariantCulture,
                    $"  replayed reply: {replayed}{(string.IsNullOrEmpty(d.ReplayedContentType) ? "" : " " + d.ReplayedContentType)}, SHA-256 {Short(d.ReplayedReplyHash)}");
                text.AppendLine(Indent + (string.IsNullOrEmpty(d.ReplayedBody)
                    ? replayed == 500 ? "(empty 500: an exception ended the request, the divergence above or the endpoint's own; the service's output has it, event 1204)" : "(empty body)"
                    : IndentLines(d.ReplayedBody)));
            }
            else
            {
                text.AppendLine("  replayed reply: none (the replay could not run the request to its end)");
            }
        }

        text.AppendLine();
        text.AppendLine(report.Result switch
        {
            ReplayCheckResult.Passed => report.Sessions == 0 ? "Result: passed (nothing to replay)." : $"Result: passed: all {report.Sessions} session{Plural(report.Sessions)} replayed fine.",
            ReplayCheckResult.Diverged =>
                $"Result: DIVERGED: {report.Divergences.Count} of {report.Sessions} session{Plural(report.Sessions)} would diverge if this build recovered this log " +
                "(each would be quarantined: its client gets session-diverged).",
            _ => $"Result: FAILED: recovery of the copy did not finish: {report.Failure}",
        });
        return text.ToString();
    }

    /// <summary>
    /// <c>report.json</c>: the report for psctl (and CI), with its text; session ids only when asked. A file, never HTML:
    /// bodies are escaped only as JSON requires, so they stay readable.
    /// </summary>
    public static byte[] ToJson(ReplayCheckReport report, bool showSessionIds)
    {
        using var buffer = new MemoryStream();
        using (var json = new Utf8JsonWriter(buffer, new JsonWriterOptions { Indented = true, Encoder = JavaScriptEncoder.UnsafeRelaxedJsonEscaping }))
        {
            json.WriteStartObject();
            json.WriteNumber("formatVersion", ReplayCheckSandbox.FormatVersion);
            json.WriteString("result", JsonNamingPolicy.CamelCase.ConvertName(report.Result.ToString()));
            json.WriteString("logDirectory", report.LogDirectory);
            json.WriteNumber("sessions", report.Sessions);
            json.WriteNumber("sessionsReplayedFine", report.SessionsReplayedFine);
            json.WriteNumber("sessionsWithNothingToReplay", report.SessionsWithNothingToReplay);
            json.WriteNumber("requestsReplayed", report.RequestsReplayed);
            json.WriteNumber("requestsNotChecked", report.RequestsNotChecked);
            if (report.Failure is { } failure)
            {
                json.WriteString("failure", failure);
            }

            json.WriteStartArray("divergences");
            foreach (var d in report.Divergences)
            {
                json.WriteStartObject();
                json.WriteString("sessionTag", d.SessionTag);
                if (showSessionIds)
                {
                    json.WriteString("sessionId", d.SessionId);
                }

                json.WriteNumber("sequence", d.Sequence);
                json.WriteNumber("lsn", d.Lsn);
                json.WriteString("method", d.Method);
                json.WriteString("path", d.Path);
                json.WriteString("endpoint", d.Endpoint);
                json.WriteString("requestBody", d.RequestBody);
                json.WriteString("reason", d.Reason);
                WriteOptional(json, "loggedStatusCode", d.LoggedStatusCode);
                WriteOptional(json, "loggedReplyHash", d.LoggedReplyHash);
                WriteOptional(json, "replayedStatusCode", d.ReplayedStatusCode);
                WriteOptional(json, "replayedContentType", d.ReplayedContentType);
                WriteOptional(json, "replayedBody", d.ReplayedBody);
                WriteOptional(json, "replayedReplyHash", d.ReplayedReplyHash);
                json.WriteEndObject();
            }

            json.WriteEndArray();
            json.WriteString("text", Render(report, showSessionIds));
            json.WriteEndObject();
        }

        return buffer.ToArray();
    }

    /// <summary>A body not shown (it may hold a client's secrets): its size and type, and how to see it.</summary>
    public static string Hidden(int length, string? contentType)
        => length == 0 ? "" : $"({length} bytes{(contentType is null ? "" : ", " + contentType)}; not shown: psctl replay-check --show-bodies prints it)";

    /// <summary>A body as text when it is UTF-8 text, cut at <paramref name="limit"/> characters; otherwise its size.</summary>
    public static string Body(ReadOnlySpan<byte> body, string? contentType, int limit)
    {
        if (body.IsEmpty)
        {
            return "";
        }

        var textual = contentType is null || contentType.Contains("json", StringComparison.OrdinalIgnoreCase) ||
                      contentType.StartsWith("text/", StringComparison.OrdinalIgnoreCase) || contentType.Contains("xml", StringComparison.OrdinalIgnoreCase) ||
                      contentType.Contains("x-www-form-urlencoded", StringComparison.OrdinalIgnoreCase);
        string decoded;
        try
        {
            decoded = textual ? new UTF8Encoding(false, throwOnInvalidBytes: true).GetString(body) : "";
        }
        catch (DecoderFallbackException)
        {
            decoded = "";
        }

        if (decoded.Length == 0 || decoded.Any(c => char.IsControl(c) && c is not '\n' and not '\r' and not '\t'))
        {
            return $"({body.Length} bytes{(contentType is null ? "" : ", " + contentType)})";
        }

        return decoded.Length <= limit ? decoded : decoded[..limit] + $"… ({decoded.Length} characters in all)";
    }

    private static void WriteOptional(Utf8JsonWriter json, string name, int? value)
    {
        if (value is { } v)
        {
            json.WriteNumber(name, v);
        }
    }

    private static void WriteOptional(Utf8JsonWriter json, string name, string? value)
    {
        if (value is not null)
        {
            json.WriteString(name, value);
        }
    }

    private static string IndentLines(string text) => text.ReplaceLineEndings("\n").Replace("\n", "\n" + Indent, StringComparison.Ordinal);

    private static string Short(string? hash) => hash is null ? "?" : hash.Length <= 16 ? hash : hash[..16] + "…";

    private static string Plural(long n) => n == 1 ? "" : "s";
}
