using System.Diagnostics;
using PersistentServices.Log;
using PersistentServices.Log.Records;
using PersistentServices.Sessions;

namespace PersistentServices.Recovery;

/// <summary>What the analysis scan rebuilt.</summary>
internal sealed record AnalysisResult(int Sessions, long Requests, long RecordsScanned, long ScannedUntil, TimeSpan Elapsed);

/// <summary>
/// The single-threaded analysis scan of MSP crash recovery (seed 000 §4.3, Fig. 12, step a): reads the log once and
/// rebuilds every live session's position stream, next expected request number, last request hash and the logged
/// reply hashes. Session state is not touched: replay rebuilds it.
/// </summary>
internal static class AnalysisScan
{
    public static async Task<AnalysisResult> RunAsync(DurableLog log, SessionTable sessions, CancellationToken cancellationToken)
    {
        var started = Stopwatch.GetTimestamp();
        long records = 0;
        long requests = 0;
        var until = log.DurableUntil;
        await foreach (var record in log.ScanAsync(log.BeginAddress, until, cancellationToken).ConfigureAwait(false))
        {
            records++;
            switch (record.Kind)
            {
                case RecordKind.SessionStarted:
                    var startedRecord = record.Parse(SessionStarted.Parser);
                    var session = new Session(
                        SessionId.FromBytes(startedRecord.SessionId.Span),
                        startedRecord.Owner.ToByteArray(),
                        DateTimeOffset.FromUnixTimeMilliseconds(startedRecord.StartedAtUnixMs),
                        replaying: true)
                    {
                        StateNumber = record.Lsn,
                    };
                    sessions.TryAdd(session);
                    break;

                case RecordKind.Request:
                    var request = record.Parse(LoggedRequest.Parser);
                    if (sessions.TryGet(SessionId.FromBytes(request.SessionId.Span), out var owner))
                    {
                        owner.RecoverRequest(record.Lsn, request.Sequence, request.RequestHash.ToByteArray(),
                            DateTimeOffset.FromUnixTimeMilliseconds(request.ReceivedAtUnixMs));
                        requests++;
                    }

                    break;

                case RecordKind.Reply:
                    var reply = record.Parse(ReplySent.Parser);
                    if (sessions.TryGet(SessionId.FromBytes(reply.SessionId.Span), out var replied))
                    {
                        replied.LoggedReplies[reply.Sequence] = (reply.StatusCode, reply.ReplyHash.ToByteArray());
                        replied.StateNumber = record.Lsn;
                    }

                    break;

                case RecordKind.SessionEnded:
                    sessions.Remove(SessionId.FromBytes(record.Parse(SessionEnded.Parser).SessionId.Span));
                    break;

                case RecordKind.LogTruncated:
                case RecordKind.Payload:
                    break;

                default:
                    if (!record.Header.Flags.HasFlag(RecordFlags.SkippableIfUnknown))
                    {
                        throw new LogFormatException(
                            $"The log holds a record of kind {(int)record.Kind} at LSN {record.Lsn} that this build does not know. Run a newer build.");
                    }

                    break;
            }
        }

        return new AnalysisResult(sessions.Count, requests, records, until, Stopwatch.GetElapsedTime(started));
    }
}
