using System.Diagnostics;
using PersistentServices.Log;
using PersistentServices.Log.Records;
using PersistentServices.Domain;
using PersistentServices.Sessions;
using PersistentServices.SharedState;

namespace PersistentServices.Recovery;

/// <summary>What the analysis scan rebuilt.</summary>
internal sealed record AnalysisResult(int Sessions, long Requests, long RecordsScanned, long ScannedUntil, TimeSpan Elapsed, long LastEpoch, int SharedVariables, int Reservations = 0);

/// <summary>
/// The single-threaded analysis scan of MSP crash recovery (seed 000 §4.3, Fig. 12): reads the log once and
/// (a) rebuilds every live session's position stream (its requests and the records each wrote), next expected request
/// number, last request hash and the logged reply hashes; (b) rolls every shared variable forward to its latest logged
/// value; and finds the last epoch. Session state is not touched: replay rebuilds it.
/// </summary>
internal static class AnalysisScan
{
    public static async Task<AnalysisResult> RunAsync(DurableLog log, SessionTable sessions, SharedStateStore shared, CancellationToken cancellationToken)
    {
        var started = Stopwatch.GetTimestamp();
        long records = 0;
        long requests = 0;
        long epoch = 0;
        var variables = new HashSet<string>(StringComparer.Ordinal);

        // Per session: the variables its current request read for an update and has not written yet (it holds their locks).
        var openUpdates = new Dictionary<SessionId, HashSet<string>>();
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
                        replaying: true,
                        (int)startedRecord.OwnerVersion)
                    {
                        StateNumber = record.Lsn,
                    };
                    sessions.TryAdd(session);
                    break;

                case RecordKind.Request:
                    var request = record.Parse(LoggedRequest.Parser);
                    if (sessions.TryGet(SessionId.FromBytes(request.SessionId.Span), out var owner))
                    {
                        owner.RecoverRequest(record.Lsn, request.Sequence, request.RequestHash.ToByteArray(), (int)request.RequestHashVersion,
                            DateTimeOffset.FromUnixTimeMilliseconds(request.ReceivedAtUnixMs));
                        openUpdates.Remove(owner.Id);
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

                case RecordKind.SharedWrite:
                    var write = record.Parse(SharedWrite.Parser);
                    shared.RollForward(write.Variable, write.Value, DependencyVector.FromRecord(write.Dv), record.Lsn, checkpoint: false);
                    variables.Add(write.Variable);
                    AddToRequest(sessions, write.SessionId, write.Sequence, record.Lsn);
                    if (write.SessionId.Length == 16 && openUpdates.TryGetValue(SessionId.FromBytes(write.SessionId.Span), out var open))
                    {
                        open.Remove(write.Variable);
                    }

                    break;

                case RecordKind.SharedCheckpoint:
                    var checkpoint = record.Parse(SharedCheckpoint.Parser);
                    shared.RollForward(checkpoint.Variable, checkpoint.Value, DependencyVector.Empty, record.Lsn, checkpoint: true);
                    variables.Add(checkpoint.Variable);
                    break;

                case RecordKind.SharedRead:
                    var read = record.Parse(SharedRead.Parser);
                    AddToRequest(sessions, read.SessionId, read.Sequence, record.Lsn);
                    if (read.ForUpdate && read.SessionId.Length == 16)
                    {
                        var reader = SessionId.FromBytes(read.SessionId.Span);
                        if (!openUpdates.TryGetValue(reader, out var set))
                        {
                            openUpdates[reader] = set = new HashSet<string>(StringComparer.Ordinal);
                        }

                        set.Add(read.Variable);
                    }

                    break;

                case RecordKind.NondeterministicValue:
                    var value = record.Parse(NondeterministicValue.Parser);
                    AddToRequest(sessions, value.SessionId, value.Sequence, record.Lsn);
                    break;

                case RecordKind.EpochStarted:
                    epoch = Math.Max(epoch, record.Parse(EpochStarted.Parser).Epoch);
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

        // A session whose last request read a variable for an update and crashed before writing it held that variable's
        // lock: keep it reserved until the session's replay completes the update (SharedCell.ReservedFor).
        var reservations = 0;
        foreach (var (sessionId, open) in openUpdates)
        {
            if (open.Count > 0 && sessions.TryGet(sessionId, out var holder))
            {
                foreach (var variable in open)
                {
                    shared.Reserve(variable, sessionId);
                    reservations++;
                }

                holder.HoldsReservations = true;
            }
        }

        return new AnalysisResult(sessions.Count, requests, records, until, Stopwatch.GetElapsedTime(started), epoch, variables.Count, reservations);
    }

    /// <summary>A record a request wrote while it ran joins that request's entry in its session's position stream.</summary>
    private static void AddToRequest(SessionTable sessions, Google.Protobuf.ByteString sessionId, long sequence, long lsn)
    {
        if (sessionId.Length == 16 && sessions.TryGet(SessionId.FromBytes(sessionId.Span), out var session) &&
            session.PositionStream.Count > 0 && session.PositionStream[^1].Sequence == sequence)
        {
            session.PositionStream[^1].Aux.Add(lsn);
            session.StateNumber = lsn;
        }
    }
}
