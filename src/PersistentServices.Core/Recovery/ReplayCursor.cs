using PersistentServices.Log;
using PersistentServices.Log.Records;

namespace PersistentServices.Recovery;

/// <summary>
/// The records a logged request wrote while it ran (shared reads and writes, nondeterministic values), handed back in
/// order while the request is replayed ([MSP §4.1]: shared reads and nondeterministic values come from the log,
/// shared writes are skipped). Any difference between what the replay asks for and what was logged is a divergence.
/// </summary>
internal sealed class ReplayCursor(IReadOnlyList<LogRecord> records, bool allowLiveTail, string session, long sequence, long requestLsn)
{
    private int _next;

    /// <summary>
    /// True for the session's last request when its reply was never logged: it may have been cut short by the crash, so
    /// once its records are used up it continues live ([Phoenix/App §2.5]: "normal execution begins").
    /// </summary>
    public bool AllowLiveTail { get; } = allowLiveTail;

    /// <summary>Set when the replay diverged (also when user code caught the exception).</summary>
    public string? Divergence { get; private set; }

    /// <summary>
    /// Set when a logged shared value could not be read as the running code's type: a divergence inside shared state,
    /// which stops recovery whatever the divergence policy (also when user code caught the exception).
    /// </summary>
    public ValueFormatException? SharedFailure { get; private set; }

    public void RecordSharedFailure(ValueFormatException error) => SharedFailure ??= error;

    /// <summary>
    /// The replay check (docs/operations.md): a replayed shared write must write the value that was logged. Recovery
    /// itself skips replayed writes (the variable is rolled forward from the log), so only the check compares them.
    /// </summary>
    public bool CompareWrites { get; init; }

    /// <summary>
    /// With <see cref="CompareWrites"/>: records a divergence when <paramref name="value"/>, written by the replay to
    /// <paramref name="variable"/>, differs from the value in <paramref name="logged"/>. Both are compared as the running
    /// code's type, written as JSON; a value that cannot be read or written so is not compared (never a false alarm).
    /// </summary>
    public void CompareWrite<T>(LogRecord logged, string variable, T value, Serialization.ValueCodec codec)
    {
        if (!CompareWrites || Divergence is not null)
        {
            return;
        }

        string loggedJson;
        string replayedJson;
        try
        {
            var write = logged.Parse(SharedWrite.Parser);
            loggedJson = write.Value.IsEmpty ? "null" : System.Text.Json.JsonSerializer.Serialize(codec.Deserialize<T>(write.Value.Span, write.ValueFormat));
            replayedJson = System.Text.Json.JsonSerializer.Serialize(value);
        }
        catch (Exception ex) when (ex is ValueFormatException or NotSupportedException or System.Text.Json.JsonException or InvalidOperationException)
        {
            return;
        }

        if (!string.Equals(loggedJson, replayedJson, StringComparison.Ordinal))
        {
            Divergence = $"Replay of request {sequence} of session {session} (LSN {requestLsn}) wrote {Clip(replayedJson)} to shared variable '{variable}' " +
                         $"where the log holds {Clip(loggedJson)} (LSN {logged.Lsn}): the endpoint computes other state than it logged (it is not deterministic or its code changed).";
        }
    }

    /// <summary>
    /// The next logged record, which must be of <paramref name="kind"/> (and, when given, for <paramref name="variable"/>).
    /// Null when the records are used up and the request may continue live.
    /// </summary>
    public LogRecord? Take(RecordKind kind, string? variable = null)
    {
        if (_next == records.Count)
        {
            return AllowLiveTail ? null : throw Diverge($"it did {Describe(kind, variable)} but the log holds nothing more for it");
        }

        var record = records[_next];
        var loggedVariable = record.Kind switch
        {
            RecordKind.SharedRead => record.Parse(SharedRead.Parser).Variable,
            RecordKind.SharedWrite => record.Parse(SharedWrite.Parser).Variable,
            _ => null,
        };
        if (record.Kind != kind || (variable is not null && !string.Equals(variable, loggedVariable, StringComparison.Ordinal)))
        {
            throw Diverge($"it did {Describe(kind, variable)} where the log holds {Describe(record.Kind, loggedVariable)} (LSN {record.Lsn})");
        }

        _next++;
        return record;
    }

    /// <summary>
    /// The next logged record when it is of <paramref name="kind"/> (consumed); null otherwise (nothing consumed): for
    /// records logged only sometimes (a call's reply is not logged when the callee is functional).
    /// </summary>
    public LogRecord? TakeIf(RecordKind kind, Func<LogRecord, bool>? matches = null)
    {
        if (_next < records.Count && records[_next].Kind == kind && (matches is null || matches(records[_next])))
        {
            return records[_next++];
        }

        return null;
    }

    /// <summary>True once every logged record was used (the request now runs live, when that is allowed).</summary>
    public bool IsExhausted => _next == records.Count;

    /// <summary>After the replay: every logged record must have been used.</summary>
    public void EnsureConsumed()
    {
        if (Divergence is null && _next < records.Count)
        {
            Divergence = $"Replay of request {sequence} of session {session} (LSN {requestLsn}) did less than before the crash: " +
                         $"{Describe(records[_next].Kind, null)} at LSN {records[_next].Lsn} and {records.Count - _next - 1} more records were not asked for.";
        }
    }

    /// <summary>Records a divergence found by the caller (for example a logged value of another kind) and returns its exception.</summary>
    public ReplayDivergenceException Diverge(string what)
    {
        Divergence ??= $"Replay of request {sequence} of session {session} (LSN {requestLsn}) diverged: {what}. " +
                       "The endpoint is not deterministic or its code changed.";
        return new ReplayDivergenceException(Divergence, session, requestLsn, sequence);
    }

    private static string Clip(string json) => json.Length <= 200 ? json : json[..200] + "…";

    private static string Describe(RecordKind kind, string? variable) => kind switch
    {
        RecordKind.SharedRead => $"a read of shared variable '{variable}'",
        RecordKind.SharedWrite => $"a write of shared variable '{variable}'",
        RecordKind.NondeterministicValue => "a nondeterministic value (time, random, id)",
        RecordKind.CallReply => "a call to another service",
        _ => kind.ToString(),
    };
}
