using Google.Protobuf;
using PersistentServices.Log.Records;
using PersistentServices.Sessions;

namespace PersistentServices.Nondeterminism;

/// <summary>
/// Makes a nondeterministic value replayable ([Phoenix/App] footnote 1; [Zero-loss VM §2.1]): inside a persistent request the value
/// is produced and logged; in replay the logged value is returned; outside persistent requests it is simply produced.
/// </summary>
internal static class LoggedValues
{
    public static long Int64(NondeterministicKind kind, Func<long> produce)
    {
        if (PersistentScope.Current?.Execution is not { } execution)
        {
            return produce();
        }

        if (Replayed(execution, kind) is { } logged)
        {
            return logged.IntValue;
        }

        var value = produce();
        execution.Append(RecordKind.NondeterministicValue, new NondeterministicValue
        {
            SessionId = execution.SessionId,
            Sequence = execution.Position.Sequence,
            Kind = kind,
            IntValue = value,
        });
        return value;
    }

    public static byte[] Bytes(NondeterministicKind kind, Func<byte[]> produce)
    {
        if (PersistentScope.Current?.Execution is not { } execution)
        {
            return produce();
        }

        if (Replayed(execution, kind) is { } logged)
        {
            return logged.BytesValue.ToByteArray();
        }

        var value = produce();
        execution.Append(RecordKind.NondeterministicValue, new NondeterministicValue
        {
            SessionId = execution.SessionId,
            Sequence = execution.Position.Sequence,
            Kind = kind,
            BytesValue = ByteString.CopyFrom(value),
        });
        return value;
    }

    private static NondeterministicValue? Replayed(RequestExecution execution, NondeterministicKind kind)
    {
        if (execution.Cursor?.Take(RecordKind.NondeterministicValue) is not { } record)
        {
            return null;
        }

        var value = record.Parse(NondeterministicValue.Parser);
        if (value.Kind != kind)
        {
            throw execution.Cursor.Diverge($"it asked for a {kind} value where the log holds a {value.Kind} value (LSN {record.Lsn})");
        }

        execution.Advance(record.Lsn);
        return value;
    }
}
