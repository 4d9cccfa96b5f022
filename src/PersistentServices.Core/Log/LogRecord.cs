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

    /// <summary>
    /// Verifies an entry read from <paramref name="address"/>, and opens it with <paramref name="keys"/> when it is sealed;
    /// throws <see cref="LogCorruptionException"/> when damaged (a sealed record that fails authentication included), and
    /// <see cref="LogEncryptionKeyException"/> when its key is not configured.
    /// </summary>
    public static LogRecord FromEntry(byte[] entry, int length, long address, LogKeyRing? keys = null)
    {
        var damage = RecordEnvelope.Verify(entry.AsSpan(0, length), address, out var header);
        if (damage is null && header.KeyId is not null)
        {
            var plain = new byte[header.BodyLength - RecordEnvelope.SealedOverhead];
            damage = RecordEnvelope.Open(entry.AsSpan(0, length), header, keys, plain, out _, out var opened);
            if (damage is null)
            {
                return new LogRecord(plain, opened);
            }
        }

        if (damage is not null)
        {
            throw new LogCorruptionException($"Corrupt log record at address {address}: {damage}.", address);
        }

        return new LogRecord(entry.AsMemory(RecordEnvelope.HeaderSize, header.BodyLength), header);
    }

    /// <summary>A record whose envelope was verified where it was read (the open's verification walk).</summary>
    public static LogRecord FromVerified(RecordHeader header, ReadOnlyMemory<byte> body) => new(body, header);
}
