using BenchmarkDotNet.Attributes;
using Google.Protobuf;
using PersistentServices.Log;
using PersistentServices.Log.Records;

namespace PersistentServices.Benchmarks.Log;

/// <summary>Encoding a record (protobuf body + envelope with CRC-32C) and decoding it (verify + parse).</summary>
[MemoryDiagnoser]
public class RecordCodecBenchmarks
{
    private readonly byte[] _entry = new byte[4096];
    private Payload _payload = null!;
    private byte[] _body = null!;
    private int _entryLength;

    [Params(100, 512, 4000)]
    public int BodyBytes { get; set; }

    [GlobalSetup]
    public void Setup()
    {
        _payload = new Payload { Tag = 7, Data = ByteString.CopyFrom(new byte[BodyBytes - 8]) };
        _body = _payload.ToByteArray();
        _entryLength = RecordEnvelope.HeaderSize + _body.Length;
        RecordEnvelope.Write(_entry, 4096, RecordKind.Payload, RecordFlags.None, _body);
    }

    [Benchmark]
    public int Encode()
    {
        var size = _payload.CalculateSize();
        _payload.WriteTo(_body.AsSpan(0, size));
        RecordEnvelope.Write(_entry, 4096, RecordKind.Payload, RecordFlags.None, _body.AsSpan(0, size));
        return size;
    }

    [Benchmark]
    public uint Decode()
    {
        RecordEnvelope.Verify(_entry.AsSpan(0, _entryLength), 4096, out var header);
        return Payload.Parser.ParseFrom(_entry.AsSpan(RecordEnvelope.HeaderSize, header.BodyLength)).Tag;
    }
}
