using System.Globalization;
using PersistentServices.Log;

namespace PersistentServices.Tool;

/// <summary>Writes what <see cref="LogVerifier"/> found, for a person: one fact per line, problems last.</summary>
internal static class VerifyReport
{
    private const int MaxSegmentsListed = 8;

    public static void Write(LogVerification v, TextWriter output)
    {
        var scan = v.Scan;
        output.WriteLine($"Log directory: {v.Directory}");
        output.WriteLine($"Geometry: pages of 2^{v.PageSizeBits} bytes, segments of 2^{v.SegmentSizeBits} bytes ({v.GeometrySource})");
        if (v.InUse)
        {
            output.WriteLine(
                $"In use: a process holds {v.Directory}/directory.lock, so the log may change while it is read (a tail being written shows as a torn tail). " +
                "To check a consistent state, check a copy (docs/operations.md).");
        }

        output.WriteLine(scan.Segments.Count == 0
            ? "Segment files: none"
            : "Segment files: " + string.Join(", ", scan.Segments.Take(MaxSegmentsListed).Select(s => $"log.{s.Key} ({N(s.Value)} bytes)")) +
              (scan.Segments.Count > MaxSegmentsListed ? $", and {scan.Segments.Count - MaxSegmentsListed} more" : ""));

        if (v.Metadata is { } m)
        {
            output.WriteLine($"Commit metadata: begin {N(m.BeginAddress)}, committed until {N(m.CommittedUntil)} (slot sequence {m.Sequence})" +
                (v.MetadataDamage.Count > 0 ? $"; damaged: {string.Join("; ", v.MetadataDamage)}" : ""));
        }
        else
        {
            output.WriteLine(v.MetadataFileExists
                ? $"Commit metadata: unusable ({string.Join("; ", v.MetadataDamage)}); the service recovers the begin and committed addresses from the log itself"
                : "Commit metadata: none" + (scan.IsNew ? "" : "; the service recovers the begin and committed addresses from the log itself"));
        }

        if (scan.IsNew)
        {
            output.WriteLine("Log: empty (no segment file, no metadata): the service would start a new log here.");
        }
        else
        {
            var inventory = v.Inventory;
            output.WriteLine((v.Refused ? "Committed and intact, up to the first problem: " : "Committed: ") +
                $"[{N(scan.BeginAddress)}, {N(scan.CommittedUntil)}), {N(scan.CommittedUntil - scan.BeginAddress)} bytes, {N(inventory.Records)} records in {N(inventory.Commits)} commits");
            if (inventory.ByKind.Count > 0)
            {
                output.WriteLine("Records by kind: " + string.Join(", ", inventory.ByKind.Select(k => $"{k.Key} {N(k.Value)}")));
            }

            output.WriteLine($"Sessions: {N(inventory.LiveSessions)} live ({N(inventory.SessionsStarted)} started, {N(inventory.SessionsEnded)} ended); requests: {N(inventory.Requests)}");
            output.WriteLine($"Shared values: {N(inventory.SharedValues)} variables" + (inventory.LastEpoch > 0 ? $"; last epoch {N(inventory.LastEpoch)}" : ""));
            if (inventory.ByLogKey.Count > 0)
            {
                output.WriteLine("Encryption: records sealed with key " + string.Join(", ", inventory.ByLogKey.Select(k => $"{k.Key} {N(k.Value)}")) +
                    $"; in clear {N(inventory.RecordsInClear)} (keep each key listed configured while its records remain)");
            }
            if (scan.TornTail is { } torn)
            {
                output.WriteLine(
                    $"Tail: [{N(torn.From)}, {N(torn.To)}), {N(torn.To - torn.From)} bytes after the last intact commit record, with {N(scan.UncommittedRecords)} intact records " +
                    "that no commit covers" + (scan.TailReason is null ? "" : $" (the walk stopped at: {scan.TailReason})") +
                    ". The service truncates it when it starts: a write a crash cut short, never acknowledged, unless damage from outside confined to the last commits looks the same (docs/log-format.md).");
            }
            else
            {
                output.WriteLine("Tail: clean (nothing after the last commit)");
            }
        }

        if (!v.Refused)
        {
            output.WriteLine("Result: no problem found; the service would open this log.");
            return;
        }

        output.WriteLine($"Result: REFUSED. The service would not start on this log ({scan.Problems.Count} problem{(scan.Problems.Count == 1 ? "" : "s")}):");
        var index = 1;
        foreach (var problem in scan.Problems)
        {
            output.WriteLine($"  {index++}. {problem.Message}.");
            output.WriteLine("     at log address " + N(problem.Address) +
                (problem.File is null ? "" : $", file {problem.File}") + (problem.FileOffset >= 0 ? $", offset {N(problem.FileOffset)}" : ""));
        }

        output.WriteLine("Restore the log directory from a backup or a replica (docs/operations.md); do not delete or edit files to make the service start.");
    }

    private static string N(long value) => value.ToString("N0", CultureInfo.InvariantCulture);
}
