using System.Text;
using PersistentServices.Log;
using PersistentServices.Log.Records;

namespace PersistentServices.Tests.Log;

public sealed class RecordFormatTests
{
    [Fact]
    public void Crc32C_StandardCheckValue()
    {
        Assert.Equal(0xE3069283u, Crc32C.Compute(Encoding.ASCII.GetBytes("123456789")));
        Assert.Equal(0u, Crc32C.Compute([]));
    }

    [Fact]
    public void Envelope_RoundTrip_KeepsKindFlagsLsnAndBody()
    {
        var body = Encoding.UTF8.GetBytes("hello, log");
        var entry = new byte[RecordEnvelope.HeaderSize + body.Length];

        RecordEnvelope.Write(entry, 4096, RecordKind.Payload, RecordFlags.SkippableIfUnknown, body);

        Assert.Null(RecordEnvelope.Verify(entry, 4096, out var header));
        Assert.Equal(new RecordHeader(4096, RecordKind.Payload, RecordFlags.SkippableIfUnknown, body.Length), header);
        Assert.Equal(body, entry[RecordEnvelope.HeaderSize..]);
    }

    [Fact]
    public void Envelope_AnySingleBitFlip_IsDetected()
    {
        var body = Encoding.UTF8.GetBytes("a record body of some length");
        var entry = new byte[RecordEnvelope.HeaderSize + body.Length];
        RecordEnvelope.Write(entry, 128, RecordKind.Payload, RecordFlags.None, body);

        for (var bit = 0; bit < entry.Length * 8; bit++)
        {
            var damaged = (byte[])entry.Clone();
            damaged[bit / 8] ^= (byte)(1 << (bit % 8));
            string? damage;
            try
            {
                damage = RecordEnvelope.Verify(damaged, 128, out _);
            }
            catch (LogFormatException)
            {
                damage = "format";
            }

            Assert.NotNull(damage);
        }
    }

    [Fact]
    public void Envelope_ReadFromAnotherAddress_IsAMisdirectedWrite()
    {
        var entry = new byte[RecordEnvelope.HeaderSize + 3];
        RecordEnvelope.Write(entry, 128, RecordKind.Payload, RecordFlags.None, [1, 2, 3]);

        var damage = RecordEnvelope.Verify(entry, 256, out _);

        Assert.Contains("misdirected", damage, StringComparison.Ordinal);
    }

    [Fact]
    public void Envelope_NewerFormatVersion_IsRejectedWithAClearError()
    {
        var entry = new byte[RecordEnvelope.HeaderSize + 3];
        RecordEnvelope.Write(entry, 128, RecordKind.Payload, RecordFlags.None, [1, 2, 3]);
        entry[4] = RecordEnvelope.CurrentFormatVersion + 1;
        var crc = Crc32C.Compute(entry.AsSpan(4));
        BitConverter.TryWriteBytes(entry.AsSpan(0, 4), crc);

        var error = Assert.Throws<LogFormatException>(() => RecordEnvelope.Verify(entry, 128, out _));

        Assert.Contains($"format version {RecordEnvelope.CurrentFormatVersion + 1}", error.Message, StringComparison.Ordinal);
    }
}
