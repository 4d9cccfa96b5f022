using Google.Protobuf;
using PersistentServices.Log.Records;

namespace PersistentServices.Log;

/// <summary>A verified record read back from the log.</summary>
internal sealed class LogRecord
{
    private LogRecord(ReadOnlyMemory<byte> body, RecordHeader header)
    {
        Body = body;
        Header = header;
    }

    public RecordHeader Header { get; }

    public long Lsn => Header.Lsn;

    public RecordKind Kind => Header.Kind;

    /// <summary>The body bytes (the kind's protobuf message).</summary>
    public ReadOnlyMemory<byte> Body { get; }

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

        return new LogRecord(entry.AsMemory(RecordEnvelope.HeaderSize, header.BodyLength), header);
    }

    /// <summary>A record whose envelope was verified where it was read (the open's verification walk).</summary>
    public static LogRecord FromVerified(RecordHeader header, ReadOnlyMemory<byte> body) => new(body, header);
}
