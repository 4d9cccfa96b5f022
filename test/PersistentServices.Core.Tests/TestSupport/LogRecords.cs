using PersistentServices.Log;
using PersistentServices.Log.Records;

namespace PersistentServices.Tests.TestSupport;

/// <summary>A verified <see cref="LogRecord"/> around a message body, as the log hands records to their readers.</summary>
internal static class LogRecords
{
    public static LogRecord Of(RecordKind kind, byte[] body, long lsn = 8192)
    {
        var entry = new byte[RecordEnvelope.HeaderSize + body.Length];
        RecordEnvelope.Write(entry, lsn, kind, RecordFlags.None, body);
        return LogRecord.FromEntry(entry, entry.Length, lsn);
    }
}
