using Google.Protobuf;
using PersistentServices.Log.Records;

namespace PersistentServices.Log;

/// <summary>A verified record read back from the log.</summary>
internal sealed class LogRecord
{
    private readonly byte[] _entry;

    private LogRecord(byte[] entry, RecordHeader header)
    {
        _entry = entry;
        Header = header;
    }

    public RecordHeader Header { get; }

    public long Lsn => Header.Lsn;

    public RecordKind Kind => Header.Kind;

    /// <summary>The body bytes (the kind's protobuf message).</summary>
    public ReadOnlyMemory<byte> Body => _entry.AsMemory(RecordEnvelope.HeaderSize, Header.BodyLength);

    /// <summary>Parses the body as <typeparamref name="T"/>.</summary>
    public T Parse<T>(MessageParser<T> parser)
        where T : IMessage<T>
        => parser.ParseFrom(Body.Span);

    /// <summary>Verifies an entry read from <paramref name="address"/>; throws <see cref="LogCorruptionException"/> when damaged.</summary>
    public static LogRecord FromEntry(byte[] entry, int length, long address)
    {
        var damage = RecordEnvelope.Verify(entry.AsSpan(0, length), address, out var header);
        if (damage is not null)
        {
            throw new LogCorruptionException($"Corrupt log record at address {address}: {damage}.", address);
        }

        return new LogRecord(entry, header);
    }
}
