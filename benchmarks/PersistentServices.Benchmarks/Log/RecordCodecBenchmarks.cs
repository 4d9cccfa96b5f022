using BenchmarkDotNet.Attributes;
using Google.Protobuf;
using PersistentServices.Log;
using PersistentServices.Log.Records;

namespace PersistentServices.Benchmarks.Log;

/// <summary>
/// Encoding a record (protobuf body + envelope with CRC-32C) and decoding it (verify + parse); with <see cref="Sealed"/>,
/// the body sealed with AES-256-GCM under a log key (LogOptions.Encryption) and opened again.
/// </summary>
[MemoryDiagnoser]
public class RecordCodecBenchmarks : IDisposable
{
    private readonly byte[] _entry = new byte[4096 + RecordEnvelope.SealedOverhead];
    private readonly byte[] _scratch = new byte[4096];
    private Payload _payload = null!;
    private byte[] _body = null!;
    private int _entryLength;
    private LogKeyRing? _keys;
    private RecordSealer? _sealer;

    [Params(100, 512, 4000)]
    public int BodyBytes { get; set; }

    [Params(false, true)]
    public bool Sealed { get; set; }

    [GlobalSetup]
    public void Setup()
    {
        _payload = new Payload { Tag = 7, Data = ByteString.CopyFrom(new byte[BodyBytes - 8]) };
        _body = _payload.ToByteArray();
        if (Sealed)
        {
            _keys = LogKeyRing.Create(new LogEncryptionOptions { Key = Convert.ToBase64String(System.Security.Cryptography.RandomNumberGenerator.GetBytes(32)) });
            _sealer = new RecordSealer(_keys!.Current!);
            _entryLength = RecordEnvelope.HeaderSize + RecordEnvelope.SealedOverhead + _body.Length;
            RecordEnvelope.WriteSealed(_entry, 4096, RecordKind.Payload, RecordFlags.None, _body, _sealer);
        }
        else
        {
            _entryLength = RecordEnvelope.HeaderSize + _body.Length;
            RecordEnvelope.Write(_entry, 4096, RecordKind.Payload, RecordFlags.None, _body);
        }
    }

    [GlobalCleanup]
    public void Dispose()
    {
        _sealer?.Dispose();
        _keys?.Dispose();
        GC.SuppressFinalize(this);
    }

    [Benchmark]
    public int Encode()
    {
        var size = _payload.CalculateSize();
        _payload.WriteTo(_body.AsSpan(0, size));
        if (_sealer is null)
        {
            RecordEnvelope.Write(_entry, 4096, RecordKind.Payload, RecordFlags.None, _body.AsSpan(0, size));
        }
        else
        {
            RecordEnvelope.WriteSealed(_entry, 4096, RecordKind.Payload, RecordFlags.None, _body.AsSpan(0, size), _sealer);
        }

        return size;
    }

    [Benchmark]
    public uint Decode()
    {
        RecordEnvelope.Verify(_entry.AsSpan(0, _entryLength), 4096, out var header);
        RecordEnvelope.Open(_entry.AsSpan(0, _entryLength), header, _keys, _scratch, out var body, out _);
        return Payload.Parser.ParseFrom(body).Tag;
    }
}
